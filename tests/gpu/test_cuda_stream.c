/* linfuse inside a program that owns the GPU's streams and memory, as PyTorch does: on the
 * caller's stream (lf_cuda_set_stream) linfuse's work is queued in order with the caller's and
 * nothing is synchronized in between; lf_nn_gated_mlp_forward_out runs in the caller's workspace
 * (no allocation) with the allocating forward's bits, and is captured in the caller's CUDA graph;
 * DLPack hands a CUDA tensor in and out without a copy.
 *
 * The stream-ordered check: the caller's stream is made to wait on a flag in host memory
 * (cuStreamWaitValue32), then the caller queues a copy of new inputs and linfuse queues a
 * forward behind it. Were linfuse to synchronize, the call would never return (a watchdog fails
 * the test); were it on another stream, it would read the old inputs. The flag is set only after
 * every call returned. Needs a GPU; built wherever CUDA is (make test-gpu runs it). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linfuse/cuda.h"
#include "linfuse/dlpack.h"
#include "testutil.h"

static int allocs;
static void count_allocs(void *user, lf_device dev, int index, const void *addr, int64_t bytes, int64_t total,
                         int64_t reserved)
{
    (void)user, (void)dev, (void)index, (void)addr, (void)total, (void)reserved;
    allocs += bytes > 0;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_cuda_stream: a linfuse call waited for the caller's stream (it synchronized)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

/* A bf16 copy of t on the GPU. */
static lf_tensor *on_gpu(const lf_tensor *t)
{
    lf_tensor *g = NULL;
    return lf_tensor_to_device(&g, t, LF_DEVICE_CUDA) == LF_OK ? g : NULL;
}

static int same_bytes(const lf_tensor *a, const lf_tensor *b, size_t n)
{
    void *ha = malloc(n), *hb = malloc(n);
    int same = ha && hb && cudaMemcpy(ha, lf_tensor_data(a), n, cudaMemcpyDeviceToHost) == cudaSuccess &&
               cudaMemcpy(hb, lf_tensor_data(b), n, cudaMemcpyDeviceToHost) == cudaSuccess && !memcmp(ha, hb, n);
    free(ha), free(hb);
    return same;
}

static void test_stream_order(lf_nn_gated_mlp *m, const lf_tensor *x_old, const lf_tensor *x_new)
{
    const int64_t T = x_old->shape[0], D = x_old->shape[1];
    const size_t xbytes = (size_t)(T * D) * 2;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    volatile uint32_t *flag = NULL;
    CHECK(cudaHostAlloc((void **)&flag, sizeof *flag, cudaHostAllocMapped) == cudaSuccess, "host flag");
    *flag = 0;
    CUdeviceptr dflag = 0;
    CHECK(cuMemHostGetDevicePointer(&dflag, (void *)flag, 0) == CUDA_SUCCESS, "flag's device address");
    lf_tensor *x = NULL, *y = NULL, *ws = NULL, *ref = NULL;
    OK(lf_tensor_empty(&x, LF_DTYPE_BF16, 2, x_old->shape, LF_DEVICE_CUDA));
    OK(lf_tensor_empty(&y, LF_DTYPE_BF16, 2, x_old->shape, LF_DEVICE_CUDA));
    size_t need = 0;
    OK(lf_nn_gated_mlp_workspace(m, LF_MLP_GATED, T, &need));
    const int64_t wn = (int64_t)need;
    OK(lf_tensor_empty(&ws, LF_DTYPE_F8E4M3, 1, &wn, LF_DEVICE_CUDA));
    CHECK(cudaMemcpy(lf_tensor_data(x), lf_tensor_data(x_old), xbytes, cudaMemcpyDeviceToDevice) == cudaSuccess, "x");
    OK(lf_nn_gated_mlp_forward_variant(m, LF_MLP_GATED, x_new, &ref)); /* warm: plans, kernels */
    OK(lf_nn_gated_mlp_forward_out(m, LF_MLP_GATED, x, y, ws));
    OK(lf_device_synchronize(LF_DEVICE_CUDA));

    OK(lf_cuda_set_stream(s));
    void *got = NULL;
    OK(lf_cuda_get_stream(&got));
    CHECK(got == (void *)s, "lf_cuda_get_stream gives the caller's stream");
    CHECK(cuStreamWaitValue32((CUstream)s, dflag, 1, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS, "stream waits");
    CHECK(cudaMemcpyAsync(lf_tensor_data(x), lf_tensor_data(x_new), xbytes, cudaMemcpyDeviceToDevice, s) == cudaSuccess,
          "the caller's copy of the new x");
    signal(SIGALRM, on_alarm);
    alarm(20);
    allocs = 0;
    lf_tensor_set_alloc_observer(count_allocs, NULL);
    lf_status st = lf_nn_gated_mlp_forward_out(m, LF_MLP_GATED, x, y, ws);
    lf_tensor_set_alloc_observer(NULL, NULL);
    alarm(0);
    CHECK(st == LF_OK, "forward_out on the caller's stream: %s", lf_last_error());
    CHECK(allocs == 0, "%d allocations in the caller's memory", allocs);
    CHECK(cudaStreamQuery(s) == cudaErrorNotReady, "the caller's stream still waits: nothing ran ahead of the flag");
    *flag = 1;
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "the stream's work ran");
    CHECK(same_bytes(y, ref, xbytes), "y is the forward of the new x: linfuse ran after the caller's copy");
    OK(lf_cuda_use_own_stream());
    OK(lf_cuda_get_stream(&got));
    CHECK(got != (void *)s, "linfuse's own stream again");
    lf_tensor_free(x), lf_tensor_free(y), lf_tensor_free(ws), lf_tensor_free(ref);
    cudaFreeHost((void *)flag);
    cudaStreamDestroy(s);
}

/* Every variant into the caller's memory on its stream, the allocating forward's bits; then the
 * gated forward captured into the caller's graph and replayed on new inputs. */
static void test_forward_out(lf_nn_gated_mlp *m, const lf_tensor *x, const lf_tensor *x2)
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    const int64_t T = x->shape[0], D = x->shape[1];
    for (int v = 0; v <= LF_MLP_FP8; v++) {
        lf_tensor *ref = NULL, *y = NULL, *ws = NULL;
        OK(lf_nn_gated_mlp_forward_variant(m, (lf_mlp_variant)v, x, &ref));
        size_t need = 0;
        OK(lf_nn_gated_mlp_workspace(m, (lf_mlp_variant)v, T, &need));
        const int64_t wn = (int64_t)need;
        OK(lf_tensor_empty(&ws, LF_DTYPE_F8E4M3, 1, &wn, LF_DEVICE_CUDA));
        OK(lf_tensor_empty(&y, LF_DTYPE_BF16, 2, x->shape, LF_DEVICE_CUDA));
        OK(lf_cuda_set_stream(s));
        allocs = 0;
        lf_tensor_set_alloc_observer(count_allocs, NULL);
        lf_status st = lf_nn_gated_mlp_forward_out(m, (lf_mlp_variant)v, x, y, ws);
        lf_tensor_set_alloc_observer(NULL, NULL);
        OK(lf_cuda_use_own_stream());
        CHECK(st == LF_OK, "%s: %s", lf_mlp_variant_name((lf_mlp_variant)v), lf_last_error());
        CHECK(cudaStreamSynchronize(s) == cudaSuccess, "stream");
        OK(lf_device_synchronize(LF_DEVICE_CUDA));
        CHECK(allocs == 0, "%s: %d allocations", lf_mlp_variant_name((lf_mlp_variant)v), allocs);
        CHECK(same_bytes(y, ref, (size_t)(T * D) * 2), "%s: the allocating forward's bits",
              lf_mlp_variant_name((lf_mlp_variant)v));
        /* into every other column of a wider y poisoned with NaN: the columns' stride is 2, which
         * no GEMM writes, so the forward goes through the workspace and a copy */
        lf_tensor *wide = NULL, *yv = NULL;
        const int64_t ws2[2] = {T, 2 * D};
        OK(lf_tensor_empty(&wide, LF_DTYPE_BF16, 2, ws2, LF_DEVICE_CUDA));
        cudaMemset(lf_tensor_data(wide), 0xff, (size_t)(T * D) * 4);
        OK(lf_tensor_as_strided(&yv, wide, 2, x->shape, (int64_t[]){2 * D, 2}, 1));
        OK(lf_cuda_set_stream(s));
        st = lf_nn_gated_mlp_forward_out(m, (lf_mlp_variant)v, x, yv, ws);
        OK(lf_cuda_use_own_stream());
        CHECK(st == LF_OK, "%s into strided columns: %s", lf_mlp_variant_name((lf_mlp_variant)v), lf_last_error());
        CHECK(cudaStreamSynchronize(s) == cudaSuccess, "stream");
        uint16_t *hw = malloc((size_t)(T * D) * 4), *hr = malloc((size_t)(T * D) * 2);
        int same = hw && hr &&
                   cudaMemcpy(hw, lf_tensor_data(wide), (size_t)(T * D) * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
                   cudaMemcpy(hr, lf_tensor_data(ref), (size_t)(T * D) * 2, cudaMemcpyDeviceToHost) == cudaSuccess;
        for (int64_t i = 0; same && i < T * D; i++)
            same = hw[2 * i + 1] == hr[i] && hw[2 * i] == 0xffff;
        CHECK(same, "%s into every other column of a NaN-filled y: those columns only, the same bits",
              lf_mlp_variant_name((lf_mlp_variant)v));
        free(hw), free(hr);
        lf_tensor_free(yv), lf_tensor_free(wide);
        lf_tensor_free(ref), lf_tensor_free(y), lf_tensor_free(ws);
    }
    /* the per-thread default stream is not a stream handle linfuse can order against another
     * thread's work: refused, with what to pass instead */
    CHECK(lf_cuda_set_stream(cudaStreamPerThread) != LF_OK && strstr(lf_last_error(), "PerThread"),
          "cudaStreamPerThread refused: %s", lf_last_error());
    OK(lf_cuda_use_own_stream());
    /* captured into the caller's graph */
    lf_tensor *xin = NULL, *y = NULL, *ws = NULL, *ref = NULL;
    size_t need = 0;
    OK(lf_nn_gated_mlp_workspace(m, LF_MLP_GATED, T, &need));
    const int64_t wn = (int64_t)need;
    OK(lf_tensor_empty(&ws, LF_DTYPE_F8E4M3, 1, &wn, LF_DEVICE_CUDA));
    OK(lf_tensor_empty(&xin, LF_DTYPE_BF16, 2, x->shape, LF_DEVICE_CUDA));
    OK(lf_tensor_empty(&y, LF_DTYPE_BF16, 2, x->shape, LF_DEVICE_CUDA));
    const size_t xbytes = (size_t)(T * D) * 2;
    cudaMemcpy(lf_tensor_data(xin), lf_tensor_data(x), xbytes, cudaMemcpyDeviceToDevice);
    OK(lf_cuda_set_stream(s));
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture");
    lf_status st = lf_nn_gated_mlp_forward_out(m, LF_MLP_GATED, xin, y, ws);
    CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess, "end capture");
    OK(lf_cuda_use_own_stream());
    CHECK(st == LF_OK, "forward_out while the caller captures: %s", lf_last_error());
    CHECK(graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
    cudaMemcpy(lf_tensor_data(xin), lf_tensor_data(x2), xbytes, cudaMemcpyDeviceToDevice);
    CHECK(exec && cudaGraphLaunch(exec, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess, "replay");
    OK(lf_nn_gated_mlp_forward_variant(m, LF_MLP_GATED, x2, &ref));
    OK(lf_device_synchronize(LF_DEVICE_CUDA));
    CHECK(same_bytes(y, ref, xbytes), "the replayed graph computed the new input's forward");
    if (exec)
        cudaGraphExecDestroy(exec);
    if (graph)
        cudaGraphDestroy(graph);
    lf_tensor_free(xin), lf_tensor_free(y), lf_tensor_free(ws), lf_tensor_free(ref);
    cudaStreamDestroy(s);
}

/* A CUDA tensor out through DLPack and back: the same device memory, device id and strides. */
static void test_dlpack_cuda(const lf_tensor *x)
{
    lf_tensor *t = NULL, *back = NULL;
    OK(lf_tensor_t(&t, x)); /* a transposed view: strides {1, D} */
    DLManagedTensor *mt = NULL;
    OK(lf_tensor_to_dlpack(t, &mt));
    CHECK(mt->dl_tensor.device.device_type == kDLCUDA && mt->dl_tensor.device.device_id == lf_tensor_device_index(x),
          "kDLCUDA, device %d", mt->dl_tensor.device.device_id);
    OK(lf_tensor_from_dlpack(&back, mt));
    CHECK(lf_tensor_device(back) == LF_DEVICE_CUDA && lf_tensor_data(back) == lf_tensor_data(t) &&
              back->stride[0] == t->stride[0] && back->stride[1] == t->stride[1],
          "back as the same CUDA view, no copy");
    lf_tensor *sum = NULL;
    OK(lf_add(&sum, back, back)); /* and usable by ops on the GPU */
    lf_tensor_free(sum), lf_tensor_free(back), lf_tensor_free(t);
}

int main(void)
{
    if (!lf_device_available(LF_DEVICE_CUDA)) {
        fprintf(stderr, "test_cuda_stream: no GPU: %s\n", lf_last_error());
        return 1;
    }
    lf_rng rng;
    lf_rng_seed(&rng, 77);
    lf_nn_gated_mlp m;
    lf_nn_gated_mlp_opts o = {
        .dim = 512, .hidden = 1024, .dtype = LF_DTYPE_BF16, .device = LF_DEVICE_CPU, .act = LF_ACT_SILU};
    if (lf_nn_gated_mlp_init(&m, &o, &rng) || lf_nn_gated_mlp_to_device(&m, LF_DEVICE_CUDA) ||
        lf_nn_gated_mlp_quantize_fp8(&m)) {
        fprintf(stderr, "test_cuda_stream: %s\n", lf_last_error());
        return 1;
    }
    const int64_t xs[2] = {300, 512};
    lf_tensor *h1 = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs), *h2 = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs);
    lf_tensor *x1 = on_gpu(h1), *x2 = on_gpu(h2);
    if (!x1 || !x2)
        return 1;
    test_stream_order(&m, x1, x2);
    test_forward_out(&m, x1, x2);
    test_dlpack_cuda(x1);
    lf_tensor_free(h1), lf_tensor_free(h2), lf_tensor_free(x1), lf_tensor_free(x2);
    lf_nn_gated_mlp_free(&m);
    return lf_test_finish("test_cuda_stream");
}
