/* Measured GEMM plans kept on disk: the cuBLASLt algorithm that won the timing of a call's
 * candidates (cuda_gemm.c), remembered per GPU model, driver and cuBLASLt version so that a
 * second run needs no timing. One small file per such combination under the cache directory's
 * gemm-plans/, rewritten whole (atomically) when a plan is added. A file that does not read back
 * whole, in its format and checksummed is never trusted: it is ignored with one warning, and
 * the plans are timed again and the file rewritten.
 * Layer: backend/cuda. */
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"

/* The file: MAGIC, then per plan [key bytes: u32][key][algo bytes: u32][algo][FNV-1a of the
 * key and algo: u64], in native byte order (the file names its machine through its GPU). */
static const char MAGIC[8] = {'L', 'F', 'G', 'E', 'M', 'M', '1', '\n'};

typedef struct tuned {
    unsigned char *key, *algo;
    size_t key_n, algo_n;
} tuned;

typedef struct tune_file {
    int loaded;
    char path[4096];
    tuned *plans;
    size_t n, cap;
} tune_file;

/* One per GPU, used with that GPU's plan-cache lock held (cuda_gemm.c): no lock of its own. */
static tune_file files[LF_CUDA_MAX_DEVICES];

static void forget(tune_file *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->plans[i].key), free(f->plans[i].algo);
    free(f->plans);
    f->plans = NULL, f->n = f->cap = 0;
}

static int add(tune_file *f, const void *key, size_t key_n, const void *algo, size_t algo_n)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        tuned *p = realloc(f->plans, cap * sizeof *p);
        if (!p)
            return 0;
        f->plans = p, f->cap = cap;
    }
    tuned *t = &f->plans[f->n];
    t->key = malloc(key_n), t->algo = malloc(algo_n);
    if (!t->key || !t->algo) {
        free(t->key), free(t->algo);
        return 0;
    }
    memcpy(t->key, key, key_n), memcpy(t->algo, algo, algo_n);
    t->key_n = key_n, t->algo_n = algo_n;
    f->n++;
    return 1;
}

/* Parse a file's bytes into f; NULL when they are whole, else what is wrong. */
static const char *parse(tune_file *f, const unsigned char *p, size_t n)
{
    if (n < sizeof MAGIC || memcmp(p, MAGIC, sizeof MAGIC))
        return "it does not start as a linfuse GEMM plan file";
    size_t at = sizeof MAGIC;
    while (at < n) {
        uint32_t kn, an;
        uint64_t sum;
        if (n - at < 4)
            return "it ends inside a plan";
        memcpy(&kn, p + at, 4);
        if (kn == 0 || kn > 4096 || n - at - 4 < (size_t)kn + 4)
            return "a key's length is out of range";
        const unsigned char *key = p + at + 4;
        at += 4 + kn;
        memcpy(&an, p + at, 4);
        if (an == 0 || an > 4096 || n - at - 4 < (size_t)an + 8)
            return "an algorithm's length is out of range";
        const unsigned char *algo = p + at + 4;
        at += 4 + an;
        memcpy(&sum, p + at, 8);
        at += 8;
        if (sum != lf_fnv1a(algo, an, lf_fnv1a(key, kn, LF_FNV_START)))
            return "a plan's checksum does not match";
        if (!add(f, key, kn, algo, an))
            return "out of memory";
    }
    return NULL;
}

/* GPU d's file: named by the GPU's model and compute capability, the driver's and cuBLASLt's
 * versions, read once. */
static tune_file *file_of(const lf_cuda_dev *d)
{
    tune_file *f = &files[d->ordinal];
    if (f->loaded)
        return f;
    f->loaded = 1;
    struct cudaDeviceProp prop;
    int driver = 0;
    char dir[3900];
    if (cudaGetDeviceProperties(&prop, d->ordinal) != cudaSuccess || cudaDriverGetVersion(&driver) != cudaSuccess ||
        lf_cuda_cache_dir(NULL, dir, sizeof dir) != LF_OK) {
        f->path[0] = '\0'; /* no file: plans are timed each run */
        return f;
    }
    char sub[3950];
    snprintf(sub, sizeof sub, "%s/gemm-plans", dir);
    if (lf_cuda_cache_dir(sub, dir, sizeof dir) != LF_OK) {
        f->path[0] = '\0';
        return f;
    }
    char id[320];
    snprintf(id, sizeof id, "%s sm_%d%d driver %d cublasLt %zu", prop.name, prop.major, prop.minor, driver,
             cublasLtGetVersion());
    snprintf(f->path, sizeof f->path, "%s/%016llx.bin", dir, (unsigned long long)lf_fnv1a(id, strlen(id), LF_FNV_START));
    size_t n = 0;
    unsigned char *p = lf_cuda_read_file(f->path, &n);
    if (!p)
        return f; /* none yet */
    const char *bad = parse(f, p, n);
    free(p);
    if (bad) {
        forget(f);
        fprintf(stderr, "linfuse: ignoring the GEMM plan cache %s: %s; the plans will be timed again\n", f->path, bad);
    }
    return f;
}

int lf_cuda_tune_get(const lf_cuda_dev *d, const void *key, size_t n, void *algo, size_t algo_n)
{
    const tune_file *f = file_of(d);
    for (size_t i = 0; i < f->n; i++)
        if (f->plans[i].key_n == n && f->plans[i].algo_n == algo_n && !memcmp(f->plans[i].key, key, n)) {
            memcpy(algo, f->plans[i].algo, algo_n);
            return 1;
        }
    return 0;
}

void lf_cuda_tune_put(const lf_cuda_dev *d, const void *key, size_t n, const void *algo, size_t algo_n)
{
    tune_file *f = file_of(d);
    if (!add(f, key, n, algo, algo_n) || !f->path[0])
        return;
    size_t bytes = sizeof MAGIC;
    for (size_t i = 0; i < f->n; i++)
        bytes += 4 + f->plans[i].key_n + 4 + f->plans[i].algo_n + 8;
    unsigned char *p = malloc(bytes), *w = p;
    if (!p)
        return;
    memcpy(w, MAGIC, sizeof MAGIC), w += sizeof MAGIC;
    for (size_t i = 0; i < f->n; i++) {
        const tuned *t = &f->plans[i];
        const uint32_t kn = (uint32_t)t->key_n, an = (uint32_t)t->algo_n;
        const uint64_t sum = lf_fnv1a(t->algo, an, lf_fnv1a(t->key, kn, LF_FNV_START));
        memcpy(w, &kn, 4), memcpy(w + 4, t->key, kn), w += 4 + kn;
        memcpy(w, &an, 4), memcpy(w + 4, t->algo, an), w += 4 + an;
        memcpy(w, &sum, 8), w += 8;
    }
    lf_cuda_write_file(f->path, p, bytes); /* a failed write loses the cache, not the plan */
    free(p);
}
