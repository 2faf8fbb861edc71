/* Measured GEMM plans kept on disk: the cuBLASLt algorithm that won the timing of a call's
 * candidates (cuda_gemm.c), remembered per GPU model, driver and cuBLASLt version so that a
 * second run needs no timing. One small file per such combination under the cache directory's
 * gemm-plans/, in plan_file.h's format, rewritten whole (atomically) when a plan is added. A
 * file that does not parse whole is never trusted: it is ignored with one warning, and the
 * plans are timed again and the file rewritten. Layer: backend/cuda. */
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/plan_file.h"

typedef struct tune_file {
    int loaded;
    char path[4096]; /* "" when there is no file to keep (no cache directory) */
    lf_plan_file plans;
} tune_file;

/* One per GPU, used with that GPU's plan-cache lock held (cuda_gemm.c): no lock of its own. */
static tune_file files[LF_CUDA_MAX_DEVICES];

/* GPU d's file: named by a hash of the GPU's model and compute capability and the driver's and
 * cuBLASLt's versions, read once. */
static tune_file *file_of(const lf_cuda_dev *d)
{
    tune_file *f = &files[d->ordinal];
    if (f->loaded)
        return f;
    f->loaded = 1;
    struct cudaDeviceProp prop;
    int driver = 0;
    char dir[3900], sub[3950];
    if (cudaGetDeviceProperties(&prop, d->ordinal) != cudaSuccess || cudaDriverGetVersion(&driver) != cudaSuccess ||
        lf_cuda_cache_dir(NULL, dir, sizeof dir) != LF_OK)
        return f; /* no file: plans are timed in each run */
    snprintf(sub, sizeof sub, "%s/gemm-plans", dir);
    if (lf_cuda_cache_dir(sub, dir, sizeof dir) != LF_OK)
        return f;
    char id[320];
    snprintf(id, sizeof id, "%s sm_%d%d driver %d cublasLt %zu", prop.name, prop.major, prop.minor, driver,
             cublasLtGetVersion());
    snprintf(f->path, sizeof f->path, "%s/%016llx.bin", dir,
             (unsigned long long)lf_fnv1a(id, strlen(id), LF_FNV_START));
    size_t n = 0;
    void *p = lf_cuda_read_file(f->path, &n);
    if (!p)
        return f; /* none yet */
    const char *bad = lf_plan_file_parse(&f->plans, p, n);
    free(p);
    if (bad)
        fprintf(stderr, "linfuse: ignoring the GEMM plan cache %s: %s; the plans will be timed again\n", f->path, bad);
    return f;
}

int lf_cuda_tune_get(const lf_cuda_dev *d, const void *key, size_t n, void *algo, size_t algo_n)
{
    const void *plan = lf_plan_file_find(&file_of(d)->plans, key, n, algo_n);
    if (plan)
        memcpy(algo, plan, algo_n);
    return plan != NULL;
}

void lf_cuda_tune_put(const lf_cuda_dev *d, const void *key, size_t n, const void *algo, size_t algo_n)
{
    tune_file *f = file_of(d);
    if (!lf_plan_file_add(&f->plans, key, n, algo, algo_n) || !f->path[0])
        return;
    size_t bytes = 0;
    void *p = lf_plan_file_bytes(&f->plans, &bytes);
    if (p)
        lf_cuda_write_file(f->path, p, bytes); /* a failed write loses the cache, not the plan */
    free(p);
}
