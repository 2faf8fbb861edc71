/* A string-keyed hash map (open addressing, linear probing, grown at half full), so that every
 * lookup by name in the trace tools is O(1) and no verb is quadratic in distinct names. Keys are
 * borrowed, not copied. And an integer-keyed one of fixed room (ids to event indices).
 * Layer: trace/. */
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"

static uint64_t hash_str(const char *k, int64_t kind)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)kind;
    for (; *k; k++)
        h = (h ^ (unsigned char)*k) * 1099511628211ull;
    return h ^ (h >> 29);
}

int lf_strmap_init(lf_strmap *m, int64_t expected)
{
    m->n = 0;
    m->cap = 16;
    while (m->cap < 2 * expected + 16)
        m->cap *= 2;
    m->s = calloc((size_t)m->cap, sizeof *m->s);
    return m->s != NULL;
}

void lf_strmap_free(lf_strmap *m)
{
    free(m->s);
    m->s = NULL;
    m->cap = m->n = 0;
}

static lf_strmap_entry *probe(lf_strmap_entry *s, int64_t cap, const char *key, int64_t kind)
{
    uint64_t i = hash_str(key, kind) & (uint64_t)(cap - 1);
    while (s[i].key && (s[i].kind != kind || strcmp(s[i].key, key)))
        i = (i + 1) & (uint64_t)(cap - 1);
    return &s[i];
}

lf_strmap_entry *lf_strmap_get(lf_strmap *m, const char *key, int64_t kind)
{
    if (2 * (m->n + 1) > m->cap) { /* grow before the table is half full */
        int64_t cap = 2 * m->cap;
        lf_strmap_entry *s = calloc((size_t)cap, sizeof *s);
        if (!s)
            return NULL;
        for (int64_t i = 0; i < m->cap; i++)
            if (m->s[i].key)
                *probe(s, cap, m->s[i].key, m->s[i].kind) = m->s[i];
        free(m->s);
        m->s = s;
        m->cap = cap;
    }
    lf_strmap_entry *e = probe(m->s, m->cap, key, kind);
    if (!e->key) {
        e->key = key;
        e->kind = kind;
        e->val = -1;
        m->n++;
    }
    return e;
}

const lf_strmap_entry *lf_strmap_find(const lf_strmap *m, const char *key, int64_t kind)
{
    if (!m->s)
        return NULL;
    const lf_strmap_entry *e = probe(m->s, m->cap, key, kind);
    return e->key ? e : NULL;
}

int lf_imap_init(lf_imap *m, int64_t n)
{
    m->cap = 16;
    while (m->cap < 2 * n + 16)
        m->cap *= 2;
    m->keys = calloc((size_t)m->cap, sizeof *m->keys);
    m->vals = malloc((size_t)m->cap * sizeof *m->vals);
    return m->keys && m->vals;
}

int64_t *lf_imap_slot(lf_imap *m, int64_t key)
{
    uint64_t i = ((uint64_t)key * 0x9e3779b97f4a7c15ull) & (uint64_t)(m->cap - 1);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & (uint64_t)(m->cap - 1);
    if (!m->keys[i]) {
        m->keys[i] = key;
        m->vals[i] = -1;
    }
    return &m->vals[i];
}
