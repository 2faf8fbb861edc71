// The gated GEMM for a few tokens (1 to 16): act(x . Wg^T) * (x . Wu^T) as a memory-bound pass
// over the weights. At one token a 128-row tile computes one useful row in 128 and the weights
// (the whole cost: 2 x hidden x dim bf16) are not read at the rate the GPU can; here each warp
// streams two gate rows and their two up rows with 16-byte loads, keeps one sum per token per
// row in registers, and writes act(g) * u itself, so the weights are read once, at memory speed,
// and g and u never reach memory. x (tokens x dim) is read from L1/L2, shared by the block's
// warps. Built for every architecture the module targets. Layer: backend/cuda.
#include <cuda_bf16.h>

#include "backend/cuda/cuda_impl.h"

namespace lf {
namespace gemv {

constexpr int MAX_TOKENS = 16, WARPS = 8, COLS = 2; // each warp: COLS outputs for every token

// The activations, as types, so a profiler shows lf::gemv::gated_gemv_bf16<lf::gemv::silu, 1>.
struct silu {
    static __device__ __forceinline__ float f(float x) { return x / (1.f + __expf(-x)); }
};
struct gelu_tanh {
    static __device__ __forceinline__ float f(float x)
    {
        float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        return x / (1.f + __expf(-2.f * u));
    }
};
struct gelu_erf {
    static __device__ __forceinline__ float f(float x) { return 0.5f * x * erfcf(-x * 0.7071067811865476f); }
};

__device__ __forceinline__ void widen(uint4 v, float f[8])
{
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 p = __bfloat1622float2(h[i]);
        f[2 * i] = p.x, f[2 * i + 1] = p.y;
    }
}

// out[m][j] = act(x[m] . w[gr(j)]) * (x[m] . w[gr(j) + G]) for m < M, j < H, where gate row
// gr(j) = j / G * 2G + j % G: [Wg; Wu] in blocks of G rows (G = H: stacked).
template <class Act, int MT>
__global__ void __launch_bounds__(WARPS * 32)
    gated_gemv_bf16(const __nv_bfloat16 *__restrict__ x, long long ldx, const __nv_bfloat16 *__restrict__ w,
                    __nv_bfloat16 *__restrict__ out, long long ldo, int M, int K, int H, int G)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int j0 = (blockIdx.x * WARPS + warp) * COLS;
    if (j0 >= H)
        return;
    const __nv_bfloat16 *rows[2 * COLS]; // gate rows, then up rows
    bool live[COLS];
#pragma unroll
    for (int c = 0; c < COLS; c++) {
        const int j = j0 + c < H ? j0 + c : j0; // a last odd column repeats one, never stored
        live[c] = j0 + c < H;
        const long long gr = (long long)(j / G) * 2 * G + j % G;
        rows[c] = w + gr * K;
        rows[COLS + c] = w + (gr + G) * K;
    }
    float acc[2 * COLS][MT];
#pragma unroll
    for (int r = 0; r < 2 * COLS; r++)
#pragma unroll
        for (int m = 0; m < MT; m++)
            acc[r][m] = 0.f;
    for (int k = lane * 8; k < K; k += 32 * 8) { // 16 bytes a lane, a warp reads 512 bytes of a row
        float wf[2 * COLS][8];
#pragma unroll
        for (int r = 0; r < 2 * COLS; r++)
            widen(__ldcs(reinterpret_cast<const uint4 *>(rows[r] + k)), wf[r]); // streamed once: no caching
#pragma unroll
        for (int m = 0; m < MT; m++) {
            if (m >= M)
                break;
            float xf[8];
            widen(__ldg(reinterpret_cast<const uint4 *>(x + m * ldx + k)), xf);
#pragma unroll
            for (int r = 0; r < 2 * COLS; r++)
#pragma unroll
                for (int i = 0; i < 8; i++)
                    acc[r][m] = fmaf(wf[r][i], xf[i], acc[r][m]);
        }
    }
#pragma unroll
    for (int r = 0; r < 2 * COLS; r++)
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int o = 16; o > 0; o /= 2)
                acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], o);
    if (lane == 0)
#pragma unroll
        for (int m = 0; m < MT; m++) {
            if (m >= M)
                break;
#pragma unroll
            for (int c = 0; c < COLS; c++)
                if (live[c]) // in fp32 to the one rounding, as the Hopper kernel's epilogue
                    out[m * ldo + j0 + c] = __float2bfloat16_rn(Act::f(acc[c][m]) * acc[COLS + c][m]);
        }
}

template <class Act>
cudaError_t launch(const lf_gemm *g, cudaStream_t stream)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    const int M = (int)A->rows, K = (int)A->cols, H = (int)D->cols, G = (int)g->ep.gate_group;
    const unsigned blocks = (unsigned)((H + WARPS * COLS - 1) / (WARPS * COLS));
    auto *x = static_cast<const __nv_bfloat16 *>(A->data);
    auto *w = static_cast<const __nv_bfloat16 *>(B->data);
    auto *o = static_cast<__nv_bfloat16 *>(D->data);
    if (M <= 1)
        gated_gemv_bf16<Act, 1><<<blocks, WARPS * 32, 0, stream>>>(x, A->rs, w, o, D->rs, M, K, H, G);
    else if (M <= 4)
        gated_gemv_bf16<Act, 4><<<blocks, WARPS * 32, 0, stream>>>(x, A->rs, w, o, D->rs, M, K, H, G);
    else
        gated_gemv_bf16<Act, MAX_TOKENS><<<blocks, WARPS * 32, 0, stream>>>(x, A->rs, w, o, D->rs, M, K, H, G);
    return cudaGetLastError();
}

} // namespace gemv
} // namespace lf

extern "C" int lf_cuda_gemv_supported(const lf_gemm *g)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    return g->ep.gate == LF_GATE_PAIRED && A->rows >= 1 && A->rows <= lf::gemv::MAX_TOKENS &&
           (g->ep.act == LF_ACT_SILU || g->ep.act == LF_ACT_GELU_TANH || g->ep.act == LF_ACT_GELU_ERF) &&
           A->dtype == LF_DTYPE_BF16 && B->dtype == LF_DTYPE_BF16 && D->dtype == LF_DTYPE_BF16 && !g->c.data &&
           !g->ep.bias && g->ep.alpha == 1.0f && A->cs == 1 && A->rs % 8 == 0 && A->cols % 8 == 0 &&
           (uintptr_t)A->data % 16 == 0 && B->rs == 1 && B->cs == A->cols && (uintptr_t)B->data % 16 == 0 &&
           D->cs == 1 && A->cols <= 0x7fffffffLL && D->cols <= 0x7fffffffLL;
}

extern "C" cudaError_t lf_cuda_gemv_launch(const lf_gemm *g, cudaStream_t stream)
{
    switch (g->ep.act) {
    case LF_ACT_SILU: return lf::gemv::launch<lf::gemv::silu>(g, stream);
    case LF_ACT_GELU_TANH: return lf::gemv::launch<lf::gemv::gelu_tanh>(g, stream);
    default: return lf::gemv::launch<lf::gemv::gelu_erf>(g, stream);
    }
}
