// GEMMs at a few tokens (1 to 16): the gated GEMM act(x . Wg^T) * (x . Wu^T), and a Linear
// x . W^T (+ b) (the MLP's down projection at decode), as memory-bound passes over the weights. A
// 128-row tile at a few tokens computes mostly padding and cannot keep enough of the weights (the
// whole cost: 2 x hidden x dim bf16 for the gated GEMM) in flight; a GEMV on CUDA cores reads
// them fast at one token but its multiply-adds grow with the tokens (Llama-3-8B's MLP on an H200:
// 98 us a forward at one token, 292 at sixteen with CUDA-core sums). Here the multiply runs on
// the tensor cores (mma.sync m16n8k16, bf16 in, fp32 sums): the up-to-16 tokens are the mma's 16
// rows (rows past the tokens are zeros, never read), 8 outputs' two weight rows (gate and up, or
// two outputs of the Linear) its two n8 tiles, so one token and sixteen cost the same read.
//
// Each lane streams 16 bytes (8 consecutive k) of its two rows per 32 k; the mma's fragments are
// filled straight from those loads: the dot product does not care in which order the k are
// summed, so lane (g, t) gives fragment positions 2t, 2t+1, 2t+8, 2t+9 the k t*8 + 0..3 (first
// mma) and t*8 + 4..7 (second), and loads the same k of x for rows g and g+8. The warps of a block
// split k; their sums meet in shared memory and warp 0 writes the outputs (act(g) * u for the
// gated GEMM, so g and u never reach memory). The two kernels of an MLP's decode step overlap:
// each lets the next start as soon as it runs, and asks L2 for its first weights before it waits
// for the previous one's output (programmatic dependent launch, compute capability 9.0).
// sm_80 or newer (mma.sync with bf16).
// Layer: backend/cuda.
#include <atomic>

#include <cooperative_groups.h>

#include <cuda_bf16.h>

#include "backend/cuda/cuda_impl.h"

namespace lf
{
namespace gemv
{

constexpr int MAX_TOKENS = 16; // the mma's rows
constexpr int WARPS = 4;       // split k in a block
constexpr int U = 4;           // 32-k chunks a warp has in flight: 4 x 2 x 512 bytes of weights
constexpr int MAX_SPLITS = 8;  // blocks of a cluster that split a Linear's k (8: the portable cluster size)

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

// Programmatic dependent launch (sm_90): a kernel launched with the attribute may start while
// the kernel before it drains; it must wait (griddepcontrol.wait) before it reads what that
// kernel wrote, and it lets the kernel after it start early (launch_dependents) as soon as it
// runs. Both are no-ops where there is no such neighbour.
__device__ __forceinline__ void let_next_start()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The sums of a block's 16 weight rows against up to 16 tokens: lane (g = lane / 4, t = lane % 4)
// streams rows w0 and w1 (its output's two rows), tokens g and g + 8. The k of the rows are split
// over the WARPS warps of each of SPLITS blocks (split: this block's place among them): warp
// (split, warp) takes the 32-k chunks split * WARPS + warp, then every WARPS * SPLITS-th. Before
// waiting for the kernel before it (which may still be writing x), a block asks L2 for its first
// step of weights, which depend on nothing. The block's warps' sums meet in part; warp 0 ends
// holding them (c0: w0's, c1: w1's; c[0], c[1] token g, c[2], c[3] token g + 8, the rows' outputs
// 2t, 2t + 1 of the mma's n8 tile). Every thread returns (a cluster barrier may follow).
template <int SPLITS>
__device__ __forceinline__ void block_sums(const __nv_bfloat16 *__restrict__ x, long long ldx, const __nv_bfloat16 *w0,
                                           const __nv_bfloat16 *w1, int M, int K, int split, float (*part)[8][32],
                                           float c0[4], float c1[4])
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    constexpr int step = WARPS * SPLITS; // a compile-time step: the loads' addresses stay simple
    const int first = split * WARPS + warp;
    w0 += t * 8, w1 += t * 8;
    let_next_start();
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int k = (first + u * step) * 32;
        if (k + t * 8 < K)
            asm volatile("prefetch.global.L2 [%0];\n\tprefetch.global.L2 [%1];" ::"l"(w0 + k), "l"(w1 + k));
    }
    wait_for_previous();
    const __nv_bfloat16 *x0 = x + (long long)g * ldx + t * 8, *x1 = x + (long long)(g + 8) * ldx + t * 8;
    const bool row0 = g < M, row1 = g + 8 < M;
#pragma unroll
    for (int i = 0; i < 4; i++)
        c0[i] = 0.f, c1[i] = 0.f;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int c = first; c * 32 < K; c += step * U) {
        uint4 v0[U], v1[U], va[U], vb[U];
#pragma unroll
        for (int u = 0; u < U; u++) { // every load of the step first: U x 2 x 512 bytes in flight
            const int k = (c + u * step) * 32;
            const bool in = k + t * 8 < K; // K is a multiple of 8: a lane's 8 are all in or all out
            v0[u] = in ? __ldcs(reinterpret_cast<const uint4 *>(w0 + k)) : zero; // streamed once
            v1[u] = in ? __ldcs(reinterpret_cast<const uint4 *>(w1 + k)) : zero;
            va[u] = in && row0 ? __ldg(reinterpret_cast<const uint4 *>(x0 + k)) : zero;
            vb[u] = in && row1 ? __ldg(reinterpret_cast<const uint4 *>(x1 + k)) : zero;
        }
#pragma unroll
        for (int u = 0; u < U; u++) { // k t*8 + 0..3, then t*8 + 4..7
            mma(c0, va[u].x, vb[u].x, va[u].y, vb[u].y, v0[u].x, v0[u].y);
            mma(c0, va[u].z, vb[u].z, va[u].w, vb[u].w, v0[u].z, v0[u].w);
            mma(c1, va[u].x, vb[u].x, va[u].y, vb[u].y, v1[u].x, v1[u].y);
            mma(c1, va[u].z, vb[u].z, va[u].w, vb[u].w, v1[u].z, v1[u].w);
        }
    }
    if (warp > 0)
#pragma unroll
        for (int i = 0; i < 4; i++)
            part[warp - 1][i][lane] = c0[i], part[warp - 1][4 + i][lane] = c1[i];
    __syncthreads();
    if (warp == 0)
#pragma unroll
        for (int p = 0; p < WARPS - 1; p++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                c0[i] += part[p][i][lane], c1[i] += part[p][4 + i][lane];
}

// out[m][j] = act(x[m] . w[gr(j)]) * (x[m] . w[gr(j) + G]) for m < M, j < H, where gate row
// gr(j) = j / G * 2G + j % G: [Wg; Wu] in blocks of G rows (G = H: stacked). Block b: outputs
// 8b .. 8b + 7; lane g's rows are output 8b + g's gate and up. H / 8 blocks are enough to keep
// every SM's loads in flight at the MLPs' sizes: k is not split over blocks.
template <class Act>
__global__ void __launch_bounds__(WARPS * 32)
    gated_gemv_bf16(const __nv_bfloat16 *__restrict__ x, long long ldx, const __nv_bfloat16 *__restrict__ w,
                    long long ldw, __nv_bfloat16 *__restrict__ out, long long ldo, int M, int K, int H, int G)
{
    __shared__ float part[WARPS - 1][8][32]; // warps 1.. : their gate and up sums, lane-major
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int j0 = blockIdx.x * 8;
    const int j = j0 + g < H ? j0 + g : H - 1; // a column past H is read, never stored
    const long long gr = (long long)(j / G) * 2 * G + j % G;
    float cg[4], cu[4];
    block_sums<1>(x, ldx, w + gr * ldw, w + (gr + G) * ldw, M, K, 0, part, cg, cu);
    if (threadIdx.x >= 32)
        return;
#pragma unroll
    for (int i = 0; i < 4; i++) { // token g (c0, c1) or g + 8 (c2, c3); outputs 2t, 2t + 1
        const int m = g + (i >= 2 ? 8 : 0), col = j0 + 2 * t + (i & 1);
        if (m < M && col < H) // in fp32 to the one rounding, as the Hopper kernel's epilogue
            out[m * ldo + col] = __float2bfloat16_rn(Act::f(cg[i]) * cu[i]);
    }
}

// out[m][n] = x[m] . w[n] (+ bias[n]) for m < M, n < N: a Linear at a few tokens (the MLP's down
// projection at decode), the same pass over the weights as the gated GEMV. A group of 16 outputs
// (lane g's rows 16q + g and 16q + 8 + g) is split over k across a cluster of SPLITS blocks
// (blockIdx.x = q * SPLITS + rank): a down projection has few rows and long ones (Llama-3-8B's:
// 4096 of 14336), and 256 blocks of 16 rows would leave the SMs too few loads in flight. The
// cluster's blocks add their sums into its first block's shared memory (distributed shared
// memory, compute capability 9.0), which writes the outputs.
template <int SPLITS>
__global__ void __launch_bounds__(WARPS * 32)
    gemv_bf16(const __nv_bfloat16 *__restrict__ x, long long ldx, const __nv_bfloat16 *__restrict__ w, long long ldw,
              const __nv_bfloat16 *__restrict__ bias, __nv_bfloat16 *__restrict__ out, long long ldo, int M, int K,
              int N)
{
    constexpr int splits = SPLITS;
    __shared__ float part[WARPS - 1][8][32];
    __shared__ float others[MAX_SPLITS - 1][8][32]; // the first block's: the other blocks' sums
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int rank = (int)(blockIdx.x % (unsigned)splits), n0 = (int)(blockIdx.x / (unsigned)splits) * 16;
    const int r0 = n0 + g < N ? n0 + g : N - 1, r1 = n0 + 8 + g < N ? n0 + 8 + g : N - 1; // read, never stored
    float c0[4], c1[4];
    block_sums<SPLITS>(x, ldx, w + (long long)r0 * ldw, w + (long long)r1 * ldw, M, K, rank, part, c0, c1);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (SPLITS > 1) { // every thread of the cluster reaches both barriers
        namespace cg = cooperative_groups;
        cg::cluster_group cluster = cg::this_cluster();
        if (rank > 0 && threadIdx.x < 32) {
            float *to = cluster.map_shared_rank(&others[rank - 1][0][0], 0);
#pragma unroll
            for (int i = 0; i < 4; i++)
                to[i * 32 + lane] = c0[i], to[(4 + i) * 32 + lane] = c1[i];
        }
        cluster.sync();
        if (rank > 0)
            return;
        if (threadIdx.x < 32)
            for (int p = 0; p < splits - 1; p++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    c0[i] += others[p][i][lane], c1[i] += others[p][4 + i][lane];
    }
#endif
    if (threadIdx.x >= 32)
        return;
#pragma unroll
    for (int i = 0; i < 8; i++) { // c0 then c1: outputs n0 + 2t (+1), then n0 + 8 + 2t (+1)
        const int m = g + (i % 4 >= 2 ? 8 : 0), col = n0 + (i >= 4 ? 8 : 0) + 2 * t + (i & 1);
        const float v = i < 4 ? c0[i] : c1[i - 4];
        if (m < M && col < N)
            out[m * ldo + col] = __float2bfloat16_rn(bias ? v + __bfloat162float(bias[col]) : v);
    }
}

// Launched with programmatic stream serialization where the GPU has it (compute capability 9.0 or
// newer): the kernel may then begin while the one before it on the stream drains (block_sums
// waits before it reads x or writes out). Without a neighbour that lets it start early the
// attribute changes nothing; in a captured graph it becomes a programmatic edge.
// A build with -DLF_GEMV_PDL=0 launches without the attribute, to measure what it gives.
#ifndef LF_GEMV_PDL
#define LF_GEMV_PDL 1
#endif
int arch_here();
static bool pdl_here()
{
    return LF_GEMV_PDL && arch_here() >= 9;
}

// cluster > 1: blocks in clusters of that many along x.
template <class Kern, class... Args>
cudaError_t launch_pdl(Kern kernel, unsigned blocks, unsigned cluster, cudaStream_t stream, Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    cfg.gridDim = dim3(blocks), cfg.blockDim = dim3(WARPS * 32), cfg.stream = stream, cfg.attrs = attr;
    if (pdl_here()) {
        attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) {
        attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
        attr[cfg.numAttrs++].val.clusterDim = {cluster, 1, 1};
    }
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}

template <class Act> cudaError_t launch(const lf_gemm *g, cudaStream_t stream)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    const int M = (int)A->rows, K = (int)A->cols, H = (int)D->cols, G = (int)g->ep.gate_group;
    return launch_pdl(gated_gemv_bf16<Act>, (unsigned)((H + 7) / 8), 1, stream,
                      static_cast<const __nv_bfloat16 *>(A->data), (long long)A->rs,
                      static_cast<const __nv_bfloat16 *>(B->data), (long long)B->cs,
                      static_cast<__nv_bfloat16 *>(D->data), (long long)D->rs, M, K, H, G);
}

// The current GPU's compute capability (major) when it runs these kernels (8.0 or newer and the
// module built with code for it: CMAKE_CUDA_ARCHITECTURES may name older ones only), else 0.
// Asked once per GPU.
int arch_here()
{
    static std::atomic<signed char> known[LF_CUDA_MAX_DEVICES]; // 0 not asked, -1 no, else the major
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= LF_CUDA_MAX_DEVICES) {
        cudaGetLastError();
        return 0;
    }
    signed char k = known[dev].load(std::memory_order_relaxed);
    if (k == 0) {
        cudaFuncAttributes fa;
        const bool yes = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                         major >= 8 && cudaFuncGetAttributes(&fa, gated_gemv_bf16<silu>) == cudaSuccess &&
                         (fa.binaryVersion >= 80 || fa.ptxVersion >= 80);
        cudaGetLastError();
        k = yes ? (signed char)major : -1;
        known[dev].store(k, std::memory_order_relaxed);
    }
    return k > 0 ? k : 0;
}

bool runs_here()
{
    return arch_here() >= 8;
}

// Blocks of the Linear's kernel the current GPU holds at once (its SMs times blocks per SM), asked
// once per GPU; 0 when it cannot be told.
int linear_resident()
{
    static std::atomic<int> known[LF_CUDA_MAX_DEVICES]; // 0 not asked, -1 unknown
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= LF_CUDA_MAX_DEVICES) {
        cudaGetLastError();
        return 0;
    }
    int k = known[dev].load(std::memory_order_relaxed);
    if (k == 0) {
        int sms = 0, per = 0;
        const bool ok = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
                        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, gemv_bf16<2>, WARPS * 32, 0) == cudaSuccess;
        cudaGetLastError();
        k = ok && sms * per > 0 ? sms * per : -1;
        known[dev].store(k, std::memory_order_relaxed);
    }
    return k > 0 ? k : 0;
}

// How many blocks split each 16-output group's k: as many as fill the GPU's resident blocks once
// (a second, partial wave would idle most SMs while it runs), at most a cluster's portable size,
// and no more than leave each warp a full step of loads; 1 (no cluster) before compute
// capability 9.0.
int linear_splits(int N, int K)
{
    const int groups = (N + 15) / 16, steps = (K / 8 + 3) / 4 / (WARPS * U); // 32-k chunks / a block's step
    int s = arch_here() >= 9 ? linear_resident() / groups : 1;
    s = s < steps ? s : steps;
    return s < 1 ? 1 : s > MAX_SPLITS ? MAX_SPLITS : s;
}

} // namespace gemv
} // namespace lf

// What both kernels take: 1 to 16 bf16 tokens in rows of 16-byte multiples, K a multiple of 8,
// the (N, K) weight seen transposed in rows of 16-byte multiples (B->rs == 1), a unit-stride d,
// no C, no alpha, no FP8 scales.
static int few_tokens(const lf_gemm *g)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    return A->rows >= 1 && A->rows <= lf::gemv::MAX_TOKENS && A->dtype == LF_DTYPE_BF16 && B->dtype == LF_DTYPE_BF16 &&
           D->dtype == LF_DTYPE_BF16 && !g->c.data && !g->ep.a_scale && g->ep.alpha == 1.0f && A->cs == 1 &&
           A->rs % 8 == 0 && A->cols % 8 == 0 && A->cols >= 8 && (uintptr_t)A->data % 16 == 0 && B->rs == 1 &&
           B->cs % 8 == 0 && B->cs >= A->cols && (uintptr_t)B->data % 16 == 0 && D->cs == 1 && D->cols >= 1 &&
           A->cols <= 0x7fffffffLL - 32 * 16 && D->cols <= 0x7fffffffLL - 16 && lf::gemv::runs_here();
}

extern "C" int lf_cuda_gemv_supported(const lf_gemm *g)
{
    return g->ep.gate == LF_GATE_PAIRED &&
           (g->ep.act == LF_ACT_SILU || g->ep.act == LF_ACT_GELU_TANH || g->ep.act == LF_ACT_GELU_ERF) && !g->ep.bias &&
           g->ep.gate_group >= 1 && few_tokens(g);
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

extern "C" int lf_cuda_linear_gemv_supported(const lf_gemm *g)
{
    return g->ep.gate == LF_GATE_NONE && g->ep.act == LF_ACT_NONE &&
           (!g->ep.bias || g->ep.bias_dtype == LF_DTYPE_BF16) && few_tokens(g);
}

extern "C" cudaError_t lf_cuda_linear_gemv_launch(const lf_gemm *g, cudaStream_t stream)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    const int M = (int)A->rows, K = (int)A->cols, N = (int)D->cols;
    const int splits = lf::gemv::linear_splits(N, K);
    const unsigned blocks = (unsigned)((N + 15) / 16 * splits);
    const __nv_bfloat16 *x = static_cast<const __nv_bfloat16 *>(A->data),
                        *w = static_cast<const __nv_bfloat16 *>(B->data),
                        *bias = static_cast<const __nv_bfloat16 *>(g->ep.bias);
    __nv_bfloat16 *out = static_cast<__nv_bfloat16 *>(D->data);
    const long long ldx = A->rs, ldw = B->cs, ldo = D->rs;
    using lf::gemv::gemv_bf16;
    using lf::gemv::launch_pdl;
    switch (splits) { // one kernel per cluster size: its k step known at compile time
    case 1:
        return launch_pdl(gemv_bf16<1>, blocks, 1, stream, x, ldx, w, ldw, bias, out, ldo, M, K, N);
    case 2:
        return launch_pdl(gemv_bf16<2>, blocks, 2, stream, x, ldx, w, ldw, bias, out, ldo, M, K, N);
    case 3:
        return launch_pdl(gemv_bf16<3>, blocks, 3, stream, x, ldx, w, ldw, bias, out, ldo, M, K, N);
    case 4:
        return launch_pdl(gemv_bf16<4>, blocks, 4, stream, x, ldx, w, ldw, bias, out, ldo, M, K, N);
    case 5:
        return launch_pdl(gemv_bf16<5>, blocks, 5, stream, x, ldx, w, ldw, bias, out, ldo, M, K, N);
    case 6:
        return launch_pdl(gemv_bf16<6>, blocks, 6, stream, x, ldx, w, ldw, bias, out, ldo, M, K, N);
    case 7:
        return launch_pdl(gemv_bf16<7>, blocks, 7, stream, x, ldx, w, ldw, bias, out, ldo, M, K, N);
    default:
        return launch_pdl(gemv_bf16<8>, blocks, 8, stream, x, ldx, w, ldw, bias, out, ldo, M, K, N);
    }
}
