/* The CUDA backend's devices: each GPU with one non-blocking stream, started the first time a
 * thread uses it, and each thread on the GPU it selected (0 by default), as the CUDA runtime's
 * own current device (no GPU or no driver simply means the device is not available); cuBLASLt's
 * workspaces per stream; the one check every CUDA, cuBLASLt, CUPTI and NVRTC call goes through.
 * Every other file of the module stands on this one. Layer: backend/cuda. */
#include <cublasLt.h>
#include <cupti.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "backend/cuda/cuda_impl.h"

static lf_cuda_dev devs[LF_CUDA_MAX_DEVICES];
static _Atomic int dev_state[LF_CUDA_MAX_DEVICES]; /* 0 not started, 1 running, -1 failed */
static char dev_why[LF_CUDA_MAX_DEVICES][192];
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static int n_devices;
static int backend_ready;
static char why_not[192];                  /* why the device is not available */
static _Thread_local lf_cuda_dev *tls_dev; /* this thread's GPU, once it has used one */
_Thread_local lf_cuda_thread_stream lf_cuda_tls_stream;

/* cuBLASLt's workspaces beyond each GPU's own stream's (lf_cuda_workspace). */
enum { MAX_STREAM_WORKSPACES = 64 };
static struct {
    int ordinal;
    cudaStream_t stream;
    void *p;
} workspaces[MAX_STREAM_WORKSPACES];
static int n_workspaces;
static pthread_mutex_t workspace_lock = PTHREAD_MUTEX_INITIALIZER;

void *lf_cuda_workspace(lf_cuda_dev *d, cudaStream_t s)
{
    if (s == d->stream)
        return d->workspace;
    void *p = NULL;
    pthread_mutex_lock(&workspace_lock);
    for (int i = 0; i < n_workspaces && !p; i++)
        if (workspaces[i].ordinal == d->ordinal && workspaces[i].stream == s)
            p = workspaces[i].p;
    if (!p && n_workspaces == MAX_STREAM_WORKSPACES)
        lf_fail(LF_EUNSUPPORTED,
                "cuda: GEMMs on more than %d streams of the caller's: each needs a cuBLASLt workspace of its own",
                MAX_STREAM_WORKSPACES);
    else if (!p) {
        /* A stream first seen while the caller captures a graph on it (PyTorch's torch.cuda.graph):
         * cudaMalloc is no stream work, and relaxed mode lets it run without invalidating the
         * capture, as PyTorch's own allocator does. */
        enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        cudaThreadExchangeStreamCaptureMode(&mode);
        const cudaError_t e = cudaMalloc(&p, LF_CUDA_WORKSPACE_BYTES);
        cudaThreadExchangeStreamCaptureMode(&mode);
        if (LF_CU_CHECK(RUNTIME, e) == LF_OK)
            workspaces[n_workspaces++] = (__typeof__(workspaces[0])){d->ordinal, s, p};
        else
            p = NULL;
    }
    pthread_mutex_unlock(&workspace_lock);
    return p;
}

lf_status lf_cu_status(lf_cu_lib lib, int code, const char *call)
{
    if (code == 0)
        return LF_OK;
    const char *what = "?", *prefix = "cuda";
    switch (lib) {
    case LF_CU_RUNTIME:
        what = cudaGetErrorString((cudaError_t)code);
        cudaGetLastError(); /* a sticky error stays; a plain one is cleared for the next call */
        break;
    case LF_CU_CUBLASLT:
        prefix = "cuBLASLt";
        what = cublasLtGetStatusString((cublasStatus_t)code);
        break;
    case LF_CU_CUPTI:
        prefix = "CUPTI";
        cuptiGetResultString((CUptiResult)code, &what);
        break;
    case LF_CU_NVRTC:
        prefix = "NVRTC";
        what = nvrtcGetErrorString((nvrtcResult)code);
        break;
    }
    return lf_fail(LF_EDEVICE, "%s: %s: %s (code %d)", prefix, call, what ? what : "?", code);
}

/* Start GPU k: its stream, cuBLASLt handle and workspace. Leaves the calling thread's current
 * GPU as it was. */
static lf_status start_device(lf_cuda_dev *d, int k)
{
    int prev = 0;
    LF_CU_TRY(RUNTIME, cudaGetDevice(&prev));
    d->ordinal = k;
    lf_status s = LF_CU_CHECK(RUNTIME, cudaSetDevice(k));
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaDeviceGetAttribute(&d->sm_count, cudaDevAttrMultiProcessorCount, k));
    int major = 0, minor = 0;
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, k));
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, k));
    d->cc = 10 * major + minor;
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaMalloc(&d->workspace, LF_CUDA_WORKSPACE_BYTES));
    cublasLtHandle_t lt = NULL;
    if (s == LF_OK)
        s = LF_CU_CHECK(CUBLASLT, cublasLtCreate(&lt));
    d->lt = lt;
    cudaSetDevice(prev);
    return s;
}

lf_cuda_dev *lf_cuda_dev_get(int k)
{
    if (k < 0 || k >= n_devices) {
        lf_fail(LF_EDEVICE, "cuda:%d does not exist: the driver sees %d GPU%s", k, n_devices,
                n_devices == 1 ? "" : "s");
        return NULL;
    }
    int st = atomic_load_explicit(&dev_state[k], memory_order_acquire);
    if (__builtin_expect(st == 0, 0)) {
        pthread_mutex_lock(&start_lock);
        st = atomic_load_explicit(&dev_state[k], memory_order_relaxed);
        if (st == 0) {
            st = start_device(&devs[k], k) == LF_OK ? 1 : -1;
            if (st < 0)
                snprintf(dev_why[k], sizeof dev_why[k], "cuda:%d cannot start: %s", k, lf_last_error());
            atomic_store_explicit(&dev_state[k], st, memory_order_release);
        }
        pthread_mutex_unlock(&start_lock);
    }
    if (st < 0) {
        lf_fail(LF_EDEVICE, "%s", dev_why[k]);
        return NULL;
    }
    return &devs[k];
}

lf_status lf_cuda_select(int k)
{
    lf_cuda_dev *d = lf_cuda_dev_get(k);
    if (!d)
        return LF_EDEVICE;
    if (tls_dev != d) {
        LF_CU_TRY(RUNTIME, cudaSetDevice(k));
        tls_dev = d;
    }
    return LF_OK;
}

lf_cuda_dev *lf_cuda_cur(void)
{
    lf_cuda_dev *d = tls_dev;
    if (__builtin_expect(d != NULL, 1))
        return d;
    return lf_cuda_select(0) == LF_OK ? tls_dev : NULL; /* a thread starts on GPU 0, as the runtime's */
}

int lf_cuda_current(void)
{
    return tls_dev ? tls_dev->ordinal : 0;
}

int lf_cuda_device_count(void)
{
    return n_devices;
}

lf_status lf_cuda_synchronize_all(void)
{
    int prev = 0;
    LF_CU_TRY(RUNTIME, cudaGetDevice(&prev));
    lf_status s = LF_OK;
    for (int k = 0; k < n_devices; k++)
        if (atomic_load_explicit(&dev_state[k], memory_order_acquire) == 1) {
            lf_status sk = LF_CU_CHECK(RUNTIME, cudaSetDevice(k));
            if (sk == LF_OK)
                sk = LF_CU_CHECK(RUNTIME, cudaDeviceSynchronize());
            if (s == LF_OK)
                s = sk;
        }
    cudaSetDevice(prev);
    return s;
}

static void start(void)
{
    int n = 0;
    if (LF_CU_CHECK(RUNTIME, cudaGetDeviceCount(&n)) != LF_OK) {
        snprintf(why_not, sizeof why_not, "%s", lf_last_error());
        return;
    }
    if (n == 0) {
        snprintf(why_not, sizeof why_not, "the driver sees no CUDA device");
        return;
    }
    n_devices = n < LF_CUDA_MAX_DEVICES ? n : LF_CUDA_MAX_DEVICES;
    backend_ready = 1;
}

int lf_cuda_available(const char **why)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, start);
    if (why)
        *why = why_not;
    return backend_ready;
}
