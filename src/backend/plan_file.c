/* The plan file's format (plan_file.h): parsed strictly, written whole. Layer: backend/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/plan_file.h"
#include "core/core.h"

static const char MAGIC[8] = {'L', 'F', 'G', 'E', 'M', 'M', '1', '\n'};

static uint64_t checksum(const void *key, size_t kn, const void *plan, size_t pn)
{
    return lf_fnv1a(plan, pn, lf_fnv1a(key, kn, LF_FNV_START));
}

void lf_plan_file_free(lf_plan_file *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->recs[i].key), free(f->recs[i].plan);
    free(f->recs);
    f->recs = NULL, f->n = f->cap = 0;
}

int lf_plan_file_add(lf_plan_file *f, const void *key, size_t key_n, const void *plan, size_t plan_n)
{
    if (!key_n || !plan_n || key_n > LF_PLAN_MAX_BYTES || plan_n > LF_PLAN_MAX_BYTES)
        return 0;
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        lf_plan_rec *r = realloc(f->recs, cap * sizeof *r);
        if (!r)
            return 0;
        f->recs = r, f->cap = cap;
    }
    lf_plan_rec *r = &f->recs[f->n];
    r->key = malloc(key_n), r->plan = malloc(plan_n);
    if (!r->key || !r->plan) {
        free(r->key), free(r->plan);
        return 0;
    }
    memcpy(r->key, key, key_n), memcpy(r->plan, plan, plan_n);
    r->key_n = key_n, r->plan_n = plan_n;
    f->n++;
    return 1;
}

/* At *at: a 4-byte length, then that many bytes, then `after` more bytes the caller reads next.
 * The bytes (and *len, *at moved past them), or NULL when the length is 0, over the limit, or
 * runs past the end. */
static const unsigned char *field(const unsigned char *p, size_t n, size_t *at, size_t after, size_t *len)
{
    if (n - *at < 4)
        return NULL;
    uint32_t k;
    memcpy(&k, p + *at, 4);
    if (k == 0 || k > LF_PLAN_MAX_BYTES || n - *at - 4 < (size_t)k + after)
        return NULL;
    const unsigned char *v = p + *at + 4;
    *at += 4 + (size_t)k, *len = k;
    return v;
}

const char *lf_plan_file_parse(lf_plan_file *f, const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    const char *bad = NULL;
    if (n < sizeof MAGIC || memcmp(p, MAGIC, sizeof MAGIC))
        return "it does not start as a linfuse GEMM plan file";
    for (size_t at = sizeof MAGIC; at < n && !bad;) {
        size_t kn, pn;
        const unsigned char *key = field(p, n, &at, 4, &kn), *plan = key ? field(p, n, &at, 8, &pn) : NULL;
        uint64_t sum;
        if (!key || !plan) {
            bad = "a length is out of range or the file ends inside a plan";
            break;
        }
        memcpy(&sum, p + at, 8);
        at += 8;
        if (sum != checksum(key, kn, plan, pn))
            bad = "a plan's checksum does not match";
        else if (!lf_plan_file_add(f, key, kn, plan, pn))
            bad = "out of memory";
    }
    if (bad)
        lf_plan_file_free(f);
    return bad;
}

const void *lf_plan_file_find(const lf_plan_file *f, const void *key, size_t key_n, size_t plan_n)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->recs[i].key_n == key_n && f->recs[i].plan_n == plan_n && !memcmp(f->recs[i].key, key, key_n))
            return f->recs[i].plan;
    return NULL;
}

void *lf_plan_file_bytes(const lf_plan_file *f, size_t *n)
{
    size_t bytes = sizeof MAGIC;
    for (size_t i = 0; i < f->n; i++)
        bytes += 4 + f->recs[i].key_n + 4 + f->recs[i].plan_n + 8;
    unsigned char *p = malloc(bytes), *w = p;
    if (!p)
        return NULL;
    memcpy(w, MAGIC, sizeof MAGIC), w += sizeof MAGIC;
    for (size_t i = 0; i < f->n; i++) {
        const lf_plan_rec *r = &f->recs[i];
        const uint32_t kn = (uint32_t)r->key_n, pn = (uint32_t)r->plan_n;
        const uint64_t sum = checksum(r->key, kn, r->plan, pn);
        memcpy(w, &kn, 4), memcpy(w + 4, r->key, kn), w += 4 + kn;
        memcpy(w, &pn, 4), memcpy(w + 4, r->plan, pn), w += 4 + pn;
        memcpy(w, &sum, 8), w += 8;
    }
    *n = bytes;
    return p;
}
