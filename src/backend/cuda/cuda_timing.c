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
    cudaEvent_t start, end;
    cudaEvent_t anchor;
    int64_t anchor_ns;
};

static pthread_mutex_t timing_lock = PTHREAD_MUTEX_INITIALIZER;
static lf_cuda_timing *timing_free;
static cudaEvent_t anchor_ev;
static int64_t anchor_ns = -1;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void give_back(lf_cuda_timing *t)
{
    pthread_mutex_lock(&timing_lock);
    t->next = timing_free;
    timing_free = t;
    pthread_mutex_unlock(&timing_lock);
}

/* A fresh anchor when the last is older than a second; called with the lock. */
static void renew_anchor(void)
{
    int64_t now = mono_ns();
    if (anchor_ns >= 0 && now - anchor_ns <= 1000000000)
        return;
    cudaEvent_t ev;
    if (LF_CU_CHECK(RUNTIME, cudaEventCreate(&ev)) != LF_OK)
        return;
    if (LF_CU_CHECK(RUNTIME, cudaEventRecord(ev, lf_cuda.stream)) == LF_OK &&
        LF_CU_CHECK(RUNTIME, cudaEventSynchronize(ev)) == LF_OK) {
        anchor_ev = ev; /* older anchors stay alive: handles still in flight refer to them */
        anchor_ns = mono_ns();
    } else {
        cudaEventDestroy(ev);
    }
}

lf_cuda_timing *lf_cuda_time_begin(const lf_kernel_info *info)
{
    if (!info || !info->time_on_device)
        return NULL;
    pthread_mutex_lock(&timing_lock);
    lf_cuda_timing *t = timing_free;
    if (t)
        timing_free = t->next;
    renew_anchor();
    cudaEvent_t anchor = anchor_ev;
    int64_t at = anchor_ns;
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
    if (LF_CU_CHECK(RUNTIME, cudaEventRecord(t->start, lf_cuda.stream)) != LF_OK) {
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

void lf_cuda_time_end(lf_kernel_info *info, lf_cuda_timing *t)
{
    if (!info || !t)
        return;
    if (LF_CU_CHECK(RUNTIME, cudaEventRecord(t->end, lf_cuda.stream)) != LF_OK) {
        give_back(t); /* the launch stands; it goes untimed */
        return;
    }
    info->timing = t;
    info->resolve = timing_resolve;
    info->device_index = 0;
    info->stream = 1;
}
