// The gated GEMM for a few tokens (1 to 16): act(x . Wg^T) * (x . Wu^T) as a memory-bound pass
// over the weights. A 128-row tile at a few tokens computes mostly padding and cannot keep
// enough of the weights (the whole cost: 2 x hidden x dim bf16) in flight; a GEMV on CUDA cores
// reads them fast at one token but its multiply-adds grow with the tokens (Llama-3-8B's MLP on an
// H200: 98 us a forward at one token, 292 at sixteen with CUDA-core sums). Here the multiply runs on the
// tensor cores (mma.sync m16n8k16, bf16 in, fp32 sums): the up-to-16 tokens are the mma's 16
// rows (rows past the tokens are zeros, never read), 8 outputs' gate and up rows its two n8
// tiles, so one token and sixteen cost the same read of the weights.
//
// Each lane streams 16 bytes (8 consecutive k) of its output's gate and up rows per 32 k; the
// mma's fragments are filled straight from those loads: the dot product does not care in which
// order the k are summed, so lane (g, t) gives fragment positions 2t, 2t+1, 2t+8, 2t+9 the k
// t*8 + 0..3 (first mma) and t*8 + 4..7 (second), and loads the same k of x for rows g and g+8.
// The four warps of a block split k; their sums meet in shared memory and warp 0 writes
// act(g) * u, so g and u never reach memory. sm_80 or newer (mma.sync with bf16).
// Layer: backend/cuda.
#include <atomic>

#include <cuda_bf16.h>

#include "backend/cuda/cuda_impl.h"

namespace lf
{
namespace gemv
{

constexpr int WARPS = 4;       // split k in a block of 8 outputs
constexpr int U = 4;           // 32-k chunks a warp has in flight: 4 x 2 x 512 bytes of weights

// The activations, as types, so a profiler shows lf::gemv::gated_gemv_bf16<lf::gemv::silu>.
struct silu {
    static __device__ __forceinline__ float f(float x)
    {
        return x / (1.f + __expf(-x));
    }
};
struct gelu_tanh {
    static __device__ __forceinline__ float f(float x)
    {
        float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        return x / (1.f + __expf(-2.f * u));
    }
};
struct gelu_erf {
    static __device__ __forceinline__ float f(float x)
    {
        return 0.5f * x * erfcf(-x * 0.7071067811865476f);
    }
};

// 16 bytes of a weight row, read once: not kept in L1, and L2 asked to fetch the 256 bytes around
// it (the lanes after this one read the rest soon). On an H200 this read the gated weights ~1.3%
// faster than ld.global.cs and took 0.9-1.1% off the decode MLP with the down GEMM after it (in a
// CUDA graph, 1 and 16 tokens); reading each warp's k as one contiguous range instead, faster
// alone, made cuBLASLt's down GEMM after it 20% slower (bench/RESULTS.md, "decode GEMV loads").
__device__ __forceinline__ uint4 load_stream(const __nv_bfloat16 *p)
{
    uint4 v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
#else
    v = __ldcs(reinterpret_cast<const uint4 *>(p));
#endif
    return v;
}

// c += a . b for a 16x16 bf16 a (row), a 16x8 bf16 b (col), fp32 c: PTX's fragment layouts.
__device__ __forceinline__ void mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    (void)c, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
    __trap(); // lf_cuda_gemv_supported never lets a launch reach an older architecture
#endif
}

// out[m][j] = act(x[m] . w[gr(j)]) * (x[m] . w[gr(j) + G]) for m < M, j < H, where gate row
// gr(j) = j / G * 2G + j % G: [Wg; Wu] in blocks of G rows (G = H: stacked). Block b: outputs
// 8b .. 8b + 7. Lane (g = lane / 4, t = lane % 4): output 8b + g's rows, tokens g and g + 8.
template <class Act>
__global__ void __launch_bounds__(WARPS * 32)
    gated_gemv_bf16(const __nv_bfloat16 *__restrict__ x, long long ldx, const __nv_bfloat16 *__restrict__ w,
                    __nv_bfloat16 *__restrict__ out, long long ldo, int M, int K, int H, int G)
{
    __shared__ float part[WARPS - 1][8][32]; // warps 1.. : their gate and up sums, lane-major
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int j0 = blockIdx.x * 8;
    const int j = j0 + g < H ? j0 + g : H - 1; // a column past H is read, never stored
    const long long gr = (long long)(j / G) * 2 * G + j % G;
    const __nv_bfloat16 *wg = w + gr * K + t * 8, *wu = w + (gr + G) * K + t * 8;
    const __nv_bfloat16 *x0 = x + (long long)g * ldx + t * 8, *x1 = x + (long long)(g + 8) * ldx + t * 8;
    const bool row0 = g < M, row1 = g + 8 < M;
    float cg[4] = {0.f, 0.f, 0.f, 0.f}, cu[4] = {0.f, 0.f, 0.f, 0.f};
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int c = warp; c * 32 < K; c += WARPS * U) { // chunks warp, warp + WARPS, ...
        uint4 vg[U], vu[U], va[U], vb[U];
#pragma unroll
        for (int u = 0; u < U; u++) { // every load of the step first: U x 2 x 512 bytes in flight
            const int k = (c + u * WARPS) * 32;
            const bool in = k + t * 8 < K; // K is a multiple of 8: a lane's 8 are all in or all out
            vg[u] = in ? load_stream(wg + k) : zero; // streamed once
            vu[u] = in ? load_stream(wu + k) : zero;
            va[u] = in && row0 ? __ldg(reinterpret_cast<const uint4 *>(x0 + k)) : zero;
            vb[u] = in && row1 ? __ldg(reinterpret_cast<const uint4 *>(x1 + k)) : zero;
        }
#pragma unroll
        for (int u = 0; u < U; u++) { // k t*8 + 0..3, then t*8 + 4..7
            mma(cg, va[u].x, vb[u].x, va[u].y, vb[u].y, vg[u].x, vg[u].y);
            mma(cg, va[u].z, vb[u].z, va[u].w, vb[u].w, vg[u].z, vg[u].w);
            mma(cu, va[u].x, vb[u].x, va[u].y, vb[u].y, vu[u].x, vu[u].y);
            mma(cu, va[u].z, vb[u].z, va[u].w, vb[u].w, vu[u].z, vu[u].w);
        }
    }
    if (warp > 0)
#pragma unroll
        for (int i = 0; i < 4; i++)
            part[warp - 1][i][lane] = cg[i], part[warp - 1][4 + i][lane] = cu[i];
    __syncthreads();
    if (warp > 0)
        return;
#pragma unroll
    for (int p = 0; p < WARPS - 1; p++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            cg[i] += part[p][i][lane], cu[i] += part[p][4 + i][lane];
#pragma unroll
    for (int i = 0; i < 4; i++) { // the accumulator: c0, c1 token g, c2, c3 token g + 8; outputs 2t, 2t + 1
        const int m = g + (i >= 2 ? 8 : 0), col = j0 + 2 * t + (i & 1);
        if (m < M && col < H) // in fp32 to the one rounding, as the Hopper kernel's epilogue
            out[m * ldo + col] = __float2bfloat16_rn(Act::f(cg[i]) * cu[i]);
    }
}

template <class Act> cudaError_t launch(const lf_gemm *g, cudaStream_t stream)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    const int M = (int)A->rows, K = (int)A->cols, H = (int)D->cols, G = (int)g->ep.gate_group;
    const unsigned blocks = (unsigned)((H + 7) / 8);
    gated_gemv_bf16<Act><<<blocks, WARPS * 32, 0, stream>>>(static_cast<const __nv_bfloat16 *>(A->data), A->rs,
                                                            static_cast<const __nv_bfloat16 *>(B->data),
                                                            static_cast<__nv_bfloat16 *>(D->data), D->rs, M, K, H, G);
    return cudaGetLastError();
}

// Whether this GPU runs the kernel: compute capability 8.0 or newer and the module built with
// code for it (CMAKE_CUDA_ARCHITECTURES may name older ones only). Asked once per GPU.
bool runs_here()
{
    static std::atomic<signed char> known[LF_CUDA_MAX_DEVICES]; // 0 not asked, 1 yes, -1 no
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= LF_CUDA_MAX_DEVICES) {
        cudaGetLastError();
        return false;
    }
    signed char k = known[dev].load(std::memory_order_relaxed);
    if (k == 0) {
        cudaFuncAttributes fa;
        const bool yes = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                         major >= 8 && cudaFuncGetAttributes(&fa, gated_gemv_bf16<silu>) == cudaSuccess &&
                         (fa.binaryVersion >= 80 || fa.ptxVersion >= 80);
        cudaGetLastError();
        k = yes ? 1 : -1;
        known[dev].store(k, std::memory_order_relaxed);
    }
    return k > 0;
}

} // namespace gemv
} // namespace lf

extern "C" int lf_cuda_gemv_supported(const lf_gemm *g)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    return lf_cuda_gemv_shape(g) && B->cs == A->cols && D->cols >= 1 && g->ep.gate_group >= 1 &&
           A->cols <= 0x7fffffffLL - 32 * 16 && D->cols <= 0x7fffffffLL && lf::gemv::runs_here();
}

extern "C" cudaError_t lf_cuda_gemv_launch(const lf_gemm *g, cudaStream_t stream)
{
    switch (g->ep.act) {
    case LF_ACT_SILU:
        return lf::gemv::launch<lf::gemv::silu>(g, stream);
    case LF_ACT_GELU_TANH:
        return lf::gemv::launch<lf::gemv::gelu_tanh>(g, stream);
    default:
        return lf::gemv::launch<lf::gemv::gelu_erf>(g, stream);
    }
}
