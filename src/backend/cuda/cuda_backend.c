/* The CUDA backend's table and start: one GPU, one non-blocking stream per process, started on
 * first use (no GPU or no driver simply means the device is not available); pointwise and fused
 * launches, CUDA graphs, and the module entry the core library looks up when it loads
 * liblinfuse_cuda.so. GEMMs are in cuda_gemm.c, memory in cuda_alloc.c, event timing in
 * cuda_timing.c, CUPTI in cupti_source.c. Layer: backend/cuda. */
#include <cublasLt.h>
#include <cupti.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>

#include "backend/cuda/cuda_impl.h"

lf_cuda_state lf_cuda;
static char why_not[192]; /* why the device is not available */

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

static lf_status start_device(void)
{
    int n = 0;
    LF_CU_TRY(RUNTIME, cudaGetDeviceCount(&n));
    if (n == 0)
        return lf_fail(LF_EDEVICE, "the driver sees no CUDA device");
    LF_CU_TRY(RUNTIME, cudaSetDevice(0));
    LF_CU_TRY(RUNTIME, cudaDeviceGetAttribute(&lf_cuda.sm_count, cudaDevAttrMultiProcessorCount, 0));
    LF_CU_TRY(RUNTIME, cudaStreamCreateWithFlags(&lf_cuda.stream, cudaStreamNonBlocking));
    LF_CU_TRY(RUNTIME, cudaMalloc(&lf_cuda.workspace, LF_CUDA_WORKSPACE_BYTES));
    cublasLtHandle_t lt;
    LF_CU_TRY(CUBLASLT, cublasLtCreate(&lt));
    lf_cuda.lt = lt;
    return LF_OK;
}

static void start(void)
{
    if (start_device() != LF_OK) {
        snprintf(why_not, sizeof why_not, "%s", lf_last_error());
        return;
    }
    lf_cuda_alloc_register();
    lf_cuda.available = 1;
}

int lf_cuda_available(const char **why)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, start);
    if (why)
        *why = why_not;
    return lf_cuda.available;
}

static lf_status cuda_synchronize(void)
{
    return LF_CU_CHECK(RUNTIME, cudaStreamSynchronize(lf_cuda.stream));
}

static lf_status cuda_memory(int64_t *available, int64_t *total)
{
    size_t free_b = 0, total_b = 0;
    LF_TRY(LF_CU_CHECK(RUNTIME, cudaMemGetInfo(&free_b, &total_b)));
    *available = (int64_t)free_b;
    *total = (int64_t)total_b;
    return LF_OK;
}

/* --- pointwise and fused launches --- */

static lf_status cuda_pointwise(const lf_pointwise *p, lf_kernel_info *info)
{
    lf_cuda_timing *tm = lf_cuda_time_begin(info);
    lf_status s = LF_CU_CHECK(RUNTIME, lf_cuda_pointwise_launch(p, lf_cuda.stream));
    if (s != LF_OK) {
        lf_cuda_time_cancel(tm);
        return s;
    }
    lf_cuda_time_end(info, tm);
    if (info)
        lf_pointwise_report(p, LF_KF_CUDA_POINTWISE, info);
    return LF_OK;
}

static lf_status cuda_fused(const lf_fused *f, lf_kernel_info *info)
{
    lf_cuda_timing *tm = lf_cuda_time_begin(info);
    lf_status s = lf_cuda_fused_launch(f, lf_cuda.stream);
    if (s != LF_OK) {
        lf_cuda_time_cancel(tm);
        return s;
    }
    lf_cuda_time_end(info, tm);
    if (info)
        lf_fused_report(f, info);
    return LF_OK;
}

/* --- CUDA graphs: the backend's stream captured, then replayed as one launch --- */

static lf_status cuda_graph_begin(void)
{
    return LF_CU_CHECK(RUNTIME, cudaStreamBeginCapture(lf_cuda.stream, cudaStreamCaptureModeThreadLocal));
}

static lf_status cuda_graph_end(void **out)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    lf_status s = LF_CU_CHECK(RUNTIME, cudaStreamEndCapture(lf_cuda.stream, &g));
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaGraphInstantiate(&x, g, 0));
    if (g)
        cudaGraphDestroy(g);
    if (s == LF_OK)
        *out = x;
    return s;
}

static lf_status cuda_graph_launch(void *graph)
{
    return LF_CU_CHECK(RUNTIME, cudaGraphLaunch((cudaGraphExec_t)graph, lf_cuda.stream));
}

static void cuda_graph_free(void *graph)
{
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static const lf_backend_ops cuda_ops = {.name = "cuda",
                                        .available = lf_cuda_available,
                                        .synchronize = cuda_synchronize,
                                        .memory = cuda_memory,
                                        .gemm = lf_cuda_gemm,
                                        .pointwise = cuda_pointwise,
                                        .gemm_supports = lf_cuda_gemm_supports,
                                        .fused_prepare = lf_cuda_fused_prepare,
                                        .fused = cuda_fused,
                                        .fused_release = lf_cuda_fused_release,
                                        .graph_begin = cuda_graph_begin,
                                        .graph_end = cuda_graph_end,
                                        .graph_launch = cuda_graph_launch,
                                        .graph_free = cuda_graph_free,
                                        .events = &lf_cupti_events};

/* What the core library finds by name when it loads this module (backend/module.c). */
__attribute__((visibility("default"))) const lf_backend_ops *lf_backend_module_init(int abi)
{
    return abi == LF_BACKEND_ABI ? &cuda_ops : NULL;
}
