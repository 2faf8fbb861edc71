/* `linfuse profile`'s session: keeps the records the CUPTI collector hands over (lfc_rec, names,
 * domains and Python frames interned once), for one Kineto-schema trace built from them (build.c).
 * Plain C over inject.h: the CPU tests feed it the same way the GPU's records come. Layer: inject/. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "inject/inject_impl.h"

enum { CHUNK = 16384, ARENA_BYTES = 1 << 16 };

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    char data[];
} arena_chunk;

struct lfi_session {
    lfi_opts o;
    char *capture; /* o.capture_range, owned */
    pthread_mutex_t lock;
    lfc_rec **chunks; /* CHUNK records each */
    int64_t n, n_chunks, cap_chunks;
    /* interned strings: an open-addressed set of (hash, string, whether a call of that name is
     * wanted: 0 not asked yet, 1 yes, 2 no) */
    const char **strs;
    uint64_t *hashes;
    uint8_t *wanted;
    size_t str_cap, str_used;
    arena_chunk *arena;
    int64_t lost;
};

lf_status lfi_create(lfi_session **out, const lfi_opts *o)
{
    if (!out || !o)
        return LF_EINVAL;
    lfi_session *s = calloc(1, sizeof *s);
    if (!s)
        return LF_ENOMEM;
    s->o = *o;
    if (o->capture_range && !(s->capture = strdup(o->capture_range))) {
        free(s);
        return LF_ENOMEM;
    }
    s->o.capture_range = s->capture;
    pthread_mutex_init(&s->lock, NULL);
    *out = s;
    return LF_OK;
}

void lfi_free(lfi_session *s)
{
    if (!s)
        return;
    for (int64_t i = 0; i < s->n_chunks; i++)
        free(s->chunks[i]);
    free(s->chunks);
    for (arena_chunk *c = s->arena, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(s->strs);
    free(s->hashes);
    free(s->wanted);
    free(s->capture);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static uint64_t hash_str(const char *p)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return h | 1; /* 0 marks an empty slot */
}

static char *arena_copy(lfi_session *s, const char *p, size_t n)
{
    arena_chunk *c = s->arena;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_BYTES ? n : ARENA_BYTES;
        if (!(c = malloc(sizeof *c + cap)))
            return NULL;
        c->next = s->arena, c->used = 0, c->cap = cap;
        s->arena = c;
    }
    char *d = c->data + c->used;
    memcpy(d, p, n);
    c->used += n;
    return d;
}

static int grow_strs(lfi_session *s)
{
    size_t cap = s->str_cap ? 2 * s->str_cap : 1024;
    const char **strs = calloc(cap, sizeof *strs);
    uint64_t *hashes = calloc(cap, sizeof *hashes);
    uint8_t *wanted = calloc(cap, 1);
    if (!strs || !hashes || !wanted) {
        free(strs), free(hashes), free(wanted);
        return 0;
    }
    for (size_t i = 0; i < s->str_cap; i++) {
        if (!s->hashes[i])
            continue;
        size_t j = s->hashes[i] & (cap - 1);
        while (hashes[j])
            j = (j + 1) & (cap - 1);
        strs[j] = s->strs[i], hashes[j] = s->hashes[i], wanted[j] = s->wanted[i];
    }
    free(s->strs), free(s->hashes), free(s->wanted);
    s->strs = strs, s->hashes = hashes, s->wanted = wanted, s->str_cap = cap;
    return 1;
}

/* The slot of p's interned copy (made if new), or -1 out of memory. Under the lock. */
static int64_t intern_slot(lfi_session *s, const char *p)
{
    if (2 * (s->str_used + 1) > s->str_cap && !grow_strs(s))
        return -1;
    const uint64_t h = hash_str(p);
    size_t j = h & (s->str_cap - 1);
    while (s->hashes[j] && (s->hashes[j] != h || strcmp(s->strs[j], p)))
        j = (j + 1) & (s->str_cap - 1);
    if (!s->hashes[j]) {
        const char *copy = arena_copy(s, p, strlen(p) + 1);
        if (!copy)
            return -1;
        s->strs[j] = copy, s->hashes[j] = h, s->str_used++;
    }
    return (int64_t)j;
}

static lfc_rec *next_slot(lfi_session *s)
{
    if (s->n == s->n_chunks * CHUNK) {
        if (s->n_chunks == s->cap_chunks) {
            int64_t cap = s->cap_chunks ? 2 * s->cap_chunks : 64;
            lfc_rec **c = realloc(s->chunks, (size_t)cap * sizeof *c);
            if (!c)
                return NULL;
            s->chunks = c, s->cap_chunks = cap;
        }
        if (!(s->chunks[s->n_chunks] = malloc(CHUNK * sizeof(lfc_rec))))
            return NULL;
        s->n_chunks++;
    }
    lfc_rec *r = &s->chunks[s->n / CHUNK][s->n % CHUNK];
    s->n++;
    return r;
}

void lfi_add(void *ctx, const lfc_rec *r)
{
    lfi_session *s = ctx;
    const int call = r->kind == LFC_RUNTIME || r->kind == LFC_DRIVER;
    if (s->o.kernels_only && (call || r->kind == LFC_MEMORY))
        return;
    pthread_mutex_lock(&s->lock);
    int64_t name = r->name ? intern_slot(s, r->name) : -2;
    int64_t domain = r->domain ? intern_slot(s, r->domain) : -2;
    int64_t stack = r->stack ? intern_slot(s, r->stack) : -2; /* a capture's frames, kept once */
    if (name >= 0 && call) {
        if (!s->wanted[name])
            s->wanted[name] = lfc_call_wanted(r->name) ? 1 : 2;
        if (s->wanted[name] == 2) {
            pthread_mutex_unlock(&s->lock);
            return;
        }
    }
    lfc_rec *d = name == -1 || domain == -1 || stack == -1 ? NULL : next_slot(s);
    if (d) {
        *d = *r;
        d->name = name >= 0 ? s->strs[name] : NULL;
        d->domain = domain >= 0 ? s->strs[domain] : NULL;
        d->stack = stack >= 0 ? s->strs[stack] : NULL;
    } else {
        s->lost++;
    }
    pthread_mutex_unlock(&s->lock);
}

int64_t lfi_count(lfi_session *s)
{
    pthread_mutex_lock(&s->lock);
    int64_t n = s->n;
    pthread_mutex_unlock(&s->lock);
    return n;
}

int64_t lfi_lost(lfi_session *s)
{
    pthread_mutex_lock(&s->lock);
    int64_t n = s->lost;
    pthread_mutex_unlock(&s->lock);
    return n;
}

const lfi_opts *lfi_session_opts(const lfi_session *s)
{
    return &s->o;
}

lf_status lfi_snapshot(lfi_session *s, lfc_rec **out, int64_t *n)
{
    pthread_mutex_lock(&s->lock);
    lfc_rec *v = malloc((size_t)(s->n ? s->n : 1) * sizeof *v);
    if (v)
        for (int64_t c = 0; c < s->n_chunks; c++) {
            int64_t k = s->n - c * CHUNK < CHUNK ? s->n - c * CHUNK : CHUNK;
            memcpy(v + c * CHUNK, s->chunks[c], (size_t)k * sizeof *v);
        }
    *n = s->n;
    pthread_mutex_unlock(&s->lock);
    *out = v;
    return v ? LF_OK : LF_ENOMEM;
}
