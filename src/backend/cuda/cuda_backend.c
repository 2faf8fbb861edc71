/* The CUDA backend's table: pointwise and fused launches, CUDA graphs, streams, and the module
 * entry the core library looks up when it loads liblinfuse_cuda.so. Devices and their start are
 * in cuda_device.c, GEMMs in cuda_gemm.c, memory in cuda_alloc.c, event timing in cuda_timing.c,
 * CUPTI in cupti_source.c. Layer: backend/cuda. */
#include <pthread.h>

#include "backend/cuda/cuda_impl.h"

/* The table's available: the devices (cuda_device.c), then the tensor layer's allocator and
 * copies for them, once. */
static pthread_once_t alloc_once = PTHREAD_ONCE_INIT;

static int cuda_available(const char **why)
{
    if (!lf_cuda_available(why))
        return 0;
    pthread_once(&alloc_once, lf_cuda_alloc_register);
    return 1;
}

static lf_status cuda_set_stream(void *stream, int own)
{
    lf_cuda_dev *d = lf_cuda_cur();
    if (!d)
        return LF_EDEVICE;
    /* one handle that names a different stream on every thread: blocks and workspaces keyed by
     * it would be shared by threads whose work is not ordered */
    if (!own && (cudaStream_t)stream == cudaStreamPerThread)
        return lf_fail(LF_EINVAL, "lf_cuda_set_stream: cudaStreamPerThread names another stream on each thread; "
                                  "pass the stream itself (for PyTorch, torch.cuda.current_stream().cuda_stream)");
    /* the stream's cuBLASLt workspace now, not inside a later call that must not allocate */
    if (!own && !lf_cuda_workspace(d, (cudaStream_t)stream))
        return LF_EDEVICE;
    lf_cuda_tls_stream.set[d->ordinal] = !own;
    lf_cuda_tls_stream.stream[d->ordinal] = own ? NULL : (cudaStream_t)stream;
    return LF_OK;
}

static void *cuda_get_stream(void)
{
    lf_cuda_dev *d = lf_cuda_cur();
    return d ? (void *)lf_cuda_stream(d) : NULL;
}

/* The calling thread's GPU as d, or return LF_EDEVICE from the enclosing function. */
#define CUR_OR_FAIL(d)              \
    lf_cuda_dev *d = lf_cuda_cur(); \
    if (!d)                         \
    return LF_EDEVICE

static lf_status cuda_synchronize(void)
{
    CUR_OR_FAIL(d);
    return LF_CU_CHECK(RUNTIME, cudaStreamSynchronize(lf_cuda_stream(d)));
}

static lf_status cuda_memory(int64_t *available, int64_t *total)
{
    CUR_OR_FAIL(d);
    (void)d;
    size_t free_b = 0, total_b = 0;
    LF_TRY(LF_CU_CHECK(RUNTIME, cudaMemGetInfo(&free_b, &total_b)));
    *available = (int64_t)free_b;
    *total = (int64_t)total_b;
    return LF_OK;
}

/* --- pointwise and fused launches --- */

/* A launch's status s, its timing (begun before it) ended, or cancelled when it failed. */
static lf_status timed(const lf_cuda_dev *d, lf_kernel_info *info, lf_cuda_timing *tm, lf_status s)
{
    if (s != LF_OK) {
        lf_cuda_time_cancel(tm);
        return s;
    }
    lf_cuda_time_end(d, info, tm);
    return LF_OK;
}

static lf_status cuda_pointwise(const lf_pointwise *p, lf_kernel_info *info)
{
    CUR_OR_FAIL(d);
    lf_cuda_timing *tm = lf_cuda_time_begin(d, info);
    LF_TRY(timed(d, info, tm, LF_CU_CHECK(RUNTIME, lf_cuda_pointwise_launch(p, lf_cuda_stream(d)))));
    if (info)
        lf_pointwise_report(p, lf_cuda_kernel_namer, LF_CUDA_KF_POINTWISE, info);
    return LF_OK;
}

static lf_status cuda_quantize_fp8(const lf_quant *q, lf_kernel_info *info)
{
    CUR_OR_FAIL(d);
    lf_cuda_timing *tm = lf_cuda_time_begin(d, info);
    LF_TRY(timed(d, info, tm, LF_CU_CHECK(RUNTIME, lf_cuda_quantize_launch(q, lf_cuda_stream(d)))));
    if (info)
        lf_quant_report(q, lf_cuda_kernel_namer, LF_CUDA_KF_QUANT, info);
    return LF_OK;
}

static lf_status cuda_fused(const lf_fused *f, lf_kernel_info *info)
{
    CUR_OR_FAIL(d);
    lf_cuda_timing *tm = lf_cuda_time_begin(d, info);
    LF_TRY(timed(d, info, tm, lf_cuda_fused_launch(f, lf_cuda_stream(d))));
    if (info)
        lf_fused_report(f, info);
    return LF_OK;
}

/* --- CUDA graphs: the backend's stream captured, then replayed as one launch --- */

static lf_status cuda_graph_begin(void)
{
    CUR_OR_FAIL(d);
    return LF_CU_CHECK(RUNTIME, cudaStreamBeginCapture(lf_cuda_stream(d), cudaStreamCaptureModeThreadLocal));
}

static lf_status cuda_graph_end(void **out)
{
    CUR_OR_FAIL(d);
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    lf_status s = LF_CU_CHECK(RUNTIME, cudaStreamEndCapture(lf_cuda_stream(d), &g));
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
    CUR_OR_FAIL(d);
    return LF_CU_CHECK(RUNTIME, cudaGraphLaunch((cudaGraphExec_t)graph, lf_cuda_stream(d)));
}

static void cuda_graph_free(void *graph)
{
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static const lf_backend_ops cuda_ops = {.name = "cuda",
                                        .available = cuda_available,
                                        .synchronize = cuda_synchronize,
                                        .unit_count = lf_cuda_device_count,
                                        .select = lf_cuda_select,
                                        .current = lf_cuda_current,
                                        .memory = cuda_memory,
                                        .gemm = lf_cuda_gemm,
                                        .pointwise = cuda_pointwise,
                                        .quantize_fp8 = cuda_quantize_fp8,
                                        .gemm_supports = lf_cuda_gemm_supports,
                                        .gated_choose = lf_cuda_gated_choose,
                                        .set_stream = cuda_set_stream,
                                        .get_stream = cuda_get_stream,
                                        .fused_prepare = lf_cuda_fused_prepare,
                                        .fused = cuda_fused,
                                        .fused_release = lf_cuda_fused_release,
                                        .graph_begin = cuda_graph_begin,
                                        .graph_end = cuda_graph_end,
                                        .graph_launch = cuda_graph_launch,
                                        .graph_free = cuda_graph_free,
                                        .comm_unique_id = lf_cuda_comm_unique_id,
                                        .comm_init = lf_cuda_comm_init,
                                        .comm_init_all = lf_cuda_comm_init_all,
                                        .all_reduce = lf_cuda_all_reduce,
                                        .comm_wait = lf_cuda_comm_wait,
                                        .comm_free = lf_cuda_comm_free,
                                        .comm_library = lf_cuda_comm_library,
                                        .events = &lf_cupti_events};

/* What the core library finds by name when it loads this module (backend/module.c): the host's
 * table in, this backend's out. */
__attribute__((visibility("default"))) const lf_backend_ops *lf_backend_module_init(int abi,
                                                                                    const lf_backend_host *host)
{
    if (abi != LF_BACKEND_ABI || !host)
        return NULL;
    lf_cuda_host_set(host);
    return &cuda_ops;
}
