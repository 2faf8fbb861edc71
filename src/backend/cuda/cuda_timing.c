/* Timing launches on the device when no tracer reports them (CUPTI could not start): a pair of
 * events around each launch, and an anchor event, recorded and waited for, that ties the GPU's
 * clock to CLOCK_MONOTONIC (it reads a few microseconds late: the wait's return). Anchors are
 * renewed each second so float milliseconds between events stay precise.
 * Layer: backend/cuda. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cuda/cuda_impl.h"

struct lf_cuda_timing {
    lf_cuda_timing *next;
    int ordinal; /* the GPU its events belong to */
    cudaEvent_t start, end;
    cudaEvent_t anchor;
    int64_t anchor_ns;
};

/* Per GPU: events are the GPU's own, and so is its clock. */
static pthread_mutex_t timing_lock = PTHREAD_MUTEX_INITIALIZER;
static lf_cuda_timing *timing_free[LF_CUDA_MAX_DEVICES];
static cudaEvent_t anchor_ev[LF_CUDA_MAX_DEVICES];
static int64_t anchor_ns[LF_CUDA_MAX_DEVICES] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
_Static_assert(LF_CUDA_MAX_DEVICES == 16, "one anchor per GPU, each starting unset");

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void give_back(lf_cuda_timing *t)
{
    pthread_mutex_lock(&timing_lock);
    t->next = timing_free[t->ordinal];
    timing_free[t->ordinal] = t;
    pthread_mutex_unlock(&timing_lock);
}

/* A fresh anchor for GPU d when its last is older than a second; called with the lock. */
static void renew_anchor(const lf_cuda_dev *d)
{
    const int k = d->ordinal;
    int64_t now = mono_ns();
    if (anchor_ns[k] >= 0 && now - anchor_ns[k] <= 1000000000)
        return;
    cudaEvent_t ev;
    if (LF_CU_CHECK(RUNTIME, cudaEventCreate(&ev)) != LF_OK)
        return;
    if (LF_CU_CHECK(RUNTIME, cudaEventRecord(ev, lf_cuda_stream(d))) == LF_OK &&
        LF_CU_CHECK(RUNTIME, cudaEventSynchronize(ev)) == LF_OK) {
        anchor_ev[k] = ev; /* older anchors stay alive: handles still in flight refer to them */
        anchor_ns[k] = mono_ns();
    } else {
        cudaEventDestroy(ev);
    }
}

lf_cuda_timing *lf_cuda_time_begin(const lf_cuda_dev *d, const lf_kernel_info *info)
{
    if (!info || !info->time_on_device)
        return NULL;
    const int k = d->ordinal;
    pthread_mutex_lock(&timing_lock);
    lf_cuda_timing *t = timing_free[k];
    if (t)
        timing_free[k] = t->next;
    renew_anchor(d);
    cudaEvent_t anchor = anchor_ev[k];
    int64_t at = anchor_ns[k];
    pthread_mutex_unlock(&timing_lock);
    if (at < 0) {
        if (t)
            give_back(t);
        return NULL;
    }
    if (!t) {
        t = malloc(sizeof *t);
        if (!t)
            return NULL;
        t->ordinal = k;
        if (LF_CU_CHECK(RUNTIME, cudaEventCreate(&t->start)) != LF_OK) {
            free(t);
            return NULL;
        }
        if (LF_CU_CHECK(RUNTIME, cudaEventCreate(&t->end)) != LF_OK) {
            cudaEventDestroy(t->start);
            free(t);
            return NULL;
        }
    }
    t->anchor = anchor;
    t->anchor_ns = at;
    if (LF_CU_CHECK(RUNTIME, cudaEventRecord(t->start, lf_cuda_stream(d))) != LF_OK) {
        give_back(t);
        return NULL;
    }
    return t;
}

static int timing_resolve(void *h, int64_t *begin_ns, int64_t *end_ns)
{
    lf_cuda_timing *t = h;
    float a = 0, b = 0;
    int ok = LF_CU_CHECK(RUNTIME, cudaEventSynchronize(t->end)) == LF_OK &&
             LF_CU_CHECK(RUNTIME, cudaEventElapsedTime(&a, t->anchor, t->start)) == LF_OK &&
             LF_CU_CHECK(RUNTIME, cudaEventElapsedTime(&b, t->anchor, t->end)) == LF_OK;
    *begin_ns = t->anchor_ns + (int64_t)((double)a * 1e6);
    *end_ns = t->anchor_ns + (int64_t)((double)b * 1e6);
    give_back(t);
    return ok ? 0 : -1;
}

void lf_cuda_time_cancel(lf_cuda_timing *t)
{
    if (t)
        give_back(t);
}

void lf_cuda_time_end(const lf_cuda_dev *d, lf_kernel_info *info, lf_cuda_timing *t)
{
    if (!info || !t)
        return;
    if (LF_CU_CHECK(RUNTIME, cudaEventRecord(t->end, lf_cuda_stream(d))) != LF_OK) {
        give_back(t); /* the launch stands; it goes untimed */
        return;
    }
    info->timing = t;
    info->resolve = timing_resolve;
    info->device_index = d->ordinal;
    info->stream = 1;
}
