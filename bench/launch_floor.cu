// The host-time floor under a Linear on the GPU: what one call costs the calling thread when
// it goes straight to cuBLASLt (the same call linfuse makes for the blog's 1024x32->64 Linear:
// bf16, fp32 accumulation, bias epilogue, plan and algorithm chosen once), and what a bare
// launch of an empty kernel costs. Timed as `linfuse bench cuda` times host time: the queue
// drained, one call, median. bench/RESULTS.md reads linfuse's and PyTorch's host time against
// these two numbers. usage: launch_floor [samples]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void empty_kernel() {}

static double now_us()
{
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        if ((x) != 0) {                                                                                                \
            std::fprintf(stderr, "launch_floor: %s failed at line %d\n", #x, __LINE__);                               \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

template <class F> static double median_host_us(int samples, F call)
{
    std::vector<double> t;
    for (int i = 0; i < samples; i++) {
        cudaDeviceSynchronize();
        double t0 = now_us();
        call();
        t.push_back(now_us() - t0);
    }
    cudaDeviceSynchronize();
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main(int argc, char **argv)
{
    const int samples = argc > 1 ? std::atoi(argv[1]) : 200;
    if (samples < 1) {
        std::fprintf(stderr, "launch_floor: samples must be >= 1\n");
        return 2;
    }
    const int m = 1024, k = 32, n = 64; // x (m, k), weight (n, k), bias (n), y (m, n)
    __nv_bfloat16 *x, *w, *bias, *y;
    void *ws;
    const size_t ws_bytes = 32u << 20;
    CK(cudaMalloc(&x, sizeof(*x) * m * k));
    CK(cudaMalloc(&w, sizeof(*w) * n * k));
    CK(cudaMalloc(&bias, sizeof(*bias) * n));
    CK(cudaMalloc(&y, sizeof(*y) * m * n));
    CK(cudaMalloc(&ws, ws_bytes));
    CK(cudaMemset(x, 0x3c, sizeof(*x) * m * k)); // bf16 0x3c3c = 0.0115: real numbers, not zeros
    CK(cudaMemset(w, 0x3c, sizeof(*w) * n * k));
    CK(cudaMemset(bias, 0x3c, sizeof(*bias) * n));
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    // Row-major y = x @ w^T + bias is column-major y^T (n x m) = w (k x n, transposed) * x^T (k x m)
    cublasLtHandle_t lt;
    CK(cublasLtCreate(&lt));
    cublasLtMatmulDesc_t desc;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    cudaDataType_t bias_type = CUDA_R_16BF;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    cublasLtMatrixLayout_t la, lb, ld;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, n, k));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, m, k));
    CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, n, m, n));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                            sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &res, &found));
    if (!found) {
        std::fprintf(stderr, "launch_floor: cuBLASLt found no algorithm\n");
        return 1;
    }
    const float alpha = 1, beta = 0;
    auto gemm = [&] {
        cublasLtMatmul(lt, desc, &alpha, w, la, x, lb, &beta, y, ld, y, ld, &res.algo, ws, ws_bytes, stream);
    };
    auto launch = [&] { empty_kernel<<<1, 32, 0, stream>>>(); };
    for (int i = 0; i < 50; i++) // warm-up: modules loaded, caches filled
        gemm(), launch();
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    std::printf("cublasLt_matmul_bias_host_us=%.2f empty_kernel_launch_host_us=%.2f (median of %d, queue drained "
                "before each)\n",
                median_host_us(samples, gemm), median_host_us(samples, launch), samples);
    CK(cudaGetLastError());
    return 0;
}
