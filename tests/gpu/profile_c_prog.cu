// A CUDA program with no framework and nothing of linfuse's in it, for `linfuse profile` to trace
// from outside (tests/gpu/profile_check.py): each of its 3 steps, an NVTX range ProfilerStep#N
// (NVTX v3, header only) around
//   - saxpy launched with <<<...>>>,
//   - scale launched with cudaLaunchKernelEx,
//   - add launched through the driver API (cuLaunchKernel on the function cudaGetFuncBySymbol gives),
//   - one replay of a CUDA graph captured from a stream inside NVTX ranges (two kernels: scale
//     under "capture" > "scale_part", then add under "capture" > "add_part"),
//   - a copy to the device, a memset and a copy back, inside an NVTX range "io",
// then a second host thread launches one saxpy of its own, and the program exits with status 5.
// Built by profile_check.py with nvcc (not by CMake: nothing in CI runs it).
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <thread>

__global__ void saxpy(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

__global__ void scale(int n, float a, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] *= a;
}

__global__ void add(int n, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += x[i];
}

#define CHECK(call)                                                     \
    do {                                                                \
        cudaError_t e_ = (call);                                        \
        if (e_ != cudaSuccess) {                                        \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_)); \
            exit(1);                                                    \
        }                                                               \
    } while (0)

int main()
{
    const int n = 1 << 20, threads = 256, blocks = (n + threads - 1) / threads;
    float *x, *y, *h = (float *)calloc(n, sizeof(float));
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    // the graph: scale, then add, captured once
    cudaGraph_t g;
    cudaGraphExec_t ge;
    nvtxRangePushA("capture");
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    nvtxRangePushA("scale_part");
    scale<<<blocks, threads, 0, s>>>(n, 0.5f, y);
    nvtxRangePop();
    nvtxRangePushA("add_part");
    add<<<blocks, threads, 0, s>>>(n, x, y);
    nvtxRangePop();
    CHECK(cudaStreamEndCapture(s, &g));
    nvtxRangePop();
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    cudaFunction_t add_fn;
    CHECK(cudaGetFuncBySymbol(&add_fn, (const void *)add));
    for (int step = 1; step <= 3; step++) {
        char name[32];
        snprintf(name, sizeof name, "ProfilerStep#%d", step);
        nvtxRangePushA(name);
        saxpy<<<blocks, threads, 0, s>>>(n, 2.0f, x, y);
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(blocks), cfg.blockDim = dim3(threads), cfg.stream = s;
        CHECK(cudaLaunchKernelEx(&cfg, scale, n, 0.25f, y));
        int nn = n;
        void *args[] = {&nn, &x, &y};
        if (cuLaunchKernel((CUfunction)add_fn, blocks, 1, 1, threads, 1, 1, 0, s, args, NULL) != CUDA_SUCCESS) {
            fprintf(stderr, "cuLaunchKernel failed\n");
            return 1;
        }
        CHECK(cudaGraphLaunch(ge, s));
        nvtxRangePushA("io");
        CHECK(cudaMemcpyAsync(x, h, n * sizeof(float), cudaMemcpyHostToDevice, s));
        CHECK(cudaMemsetAsync(y, 0, n * sizeof(float), s));
        CHECK(cudaMemcpyAsync(h, y, n * sizeof(float), cudaMemcpyDeviceToHost, s));
        nvtxRangePop();
        CHECK(cudaStreamSynchronize(s));
        nvtxRangePop();
    }
    std::thread t([&] { // a second thread's own launch, on the legacy default stream
        saxpy<<<blocks, threads>>>(n, 3.0f, x, y);
        CHECK(cudaDeviceSynchronize());
    });
    t.join();
    printf("profile_c_prog: done\n");
    return 5;
}
