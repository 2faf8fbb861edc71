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

/* A length field at p (4 bytes, which the caller has checked are there). */
static size_t length_at(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

const char *lf_plan_file_parse(lf_plan_file *f, const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    const char *bad = NULL;
    if (n < sizeof MAGIC || memcmp(p, MAGIC, sizeof MAGIC))
        return "it does not start as a linfuse GEMM plan file";
    for (size_t at = sizeof MAGIC; at < n && !bad;) {
        if (n - at < 4) {
            bad = "it ends inside a plan";
            break;
        }
        const size_t kn = length_at(p + at);
        if (kn == 0 || kn > LF_PLAN_MAX_BYTES || n - at - 4 < kn + 4) {
            bad = "a key's length is out of range";
            break;
        }
        const unsigned char *key = p + at + 4;
        at += 4 + kn;
        const size_t pn = length_at(p + at);
        if (pn == 0 || pn > LF_PLAN_MAX_BYTES || n - at - 4 < pn + 8) {
            bad = "a plan's length is out of range";
            break;
        }
        const unsigned char *plan = p + at + 4;
        at += 4 + pn;
        uint64_t sum;
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
