// The gated GEMM for a few tokens (1 to 16) on Hopper (sm_90a): act(x . Wg^T) * (x . Wu^T) as one
// pass over the weights, fed by TMA into shared memory and multiplied by wgmma, the weights as the
// MMA's M side ("swap AB": 64 weight rows a wgmma, the tokens its N of 8 or 16).
//
// Why a second GEMV beside gemv.cu's mma.sync one: that one holds the bytes it has in flight in
// registers, and stopped at 88% of the read bandwidth whatever was tried (loads, orders, unrolls,
// L2 prefetch, a persistent grid; bench/RESULTS.md, session 13), while cuBLASLt's down GEMM after
// it, fed by TMA, reads at 95%. Here the copies land in shared memory: each CTA keeps a ring of
// four 18 KiB stages in flight without spending a register on them, and the copy engine makes the
// weight reads regular (64 rows x 128 bytes a box).
//
// Shape of the kernel:
//   - a CTA owns 64 outputs (a tile): their 64 gate rows and the 64 up rows G rows on, which is why
//     G must be a multiple of 64; every K step (64 k, 128 bytes a row) brings the gate box, the up
//     box and the tokens' box (8 or 16 rows of x: rows past M are the copy engine's zeros);
//   - one producer warp (one thread issues the copies) and one consumer warpgroup that runs
//     wgmma m64nNk16 for g and u, four k16 steps a stage, and hands the stage back;
//   - where there are fewer tiles than SMs the K range is split over a cluster of `splits` CTAs;
//     ranks 1.. leave their fp32 sums in their own shared memory and rank 0 adds them in rank
//     order over DSMEM (deterministic: no atomics, no workspace, nothing to reset between calls),
//     then writes act(g) * u in bf16, g and u in fp32 to the one rounding, as gemv.cu does.
// Layer: backend/cuda.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>

#include "backend/backend_impl.h"
#include "backend/cuda/gated_kernels.cuh"
#include "linfuse/settings.h"

namespace lf {
namespace gemv_tma {

constexpr int ROWS = 64;  // outputs a tile: wgmma's M
constexpr int BK = 64;    // k a stage: 128 bytes of every row
constexpr int STAGES = 4; // 64 KiB of weights in flight a CTA; measured no slower than six (RESULTS, session 16)
constexpr int W_BYTES = ROWS * 128;                              // a gate or an up box: 8 KiB
constexpr int X_ROWS = LF_CUDA_GEMV_MAX_TOKENS;                   // the most tokens
constexpr int STAGE_BYTES = 2 * W_BYTES + X_ROWS * 128;          // 18 KiB (1024-byte multiples)
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024;          // + room to align to 1024 B
constexpr int THREADS = 160;                                     // the consumer warpgroup, the producer warp
constexpr int MAX_SPLITS = 8;                                    // a portable cluster

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using gated::fence_acc;
using gated::mbar_arrive;
using gated::mbar_expect_tx;
using gated::mbar_wait;
using gated::smem_addr;
using gated::smem_desc;
using gated::tma_load;

// d (64 x N per warpgroup, fp32) [+]= A (64 x 16 bf16) . B (16 x N), both K-major in shared
// memory with the 128-byte swizzle; scale_d = 0 overwrites d.
template <int N> __device__ __forceinline__ void wgmma_n(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d)
{
    if constexpr (N == 8)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n"
                     "}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "l"(da), "l"(db), "r"(scale_d));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, "
                     "%9, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                       "+f"(d[7])
                     : "l"(da), "l"(db), "r"(scale_d));
}

// Every thread of every CTA of the cluster meets here; shared-memory writes before it are seen
// by reads after it, in any CTA of the cluster.
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// A float at the same shared-memory offset as p in the cluster's CTA `rank`.
__device__ __forceinline__ float ld_peer(const float *p, unsigned rank)
{
    uint32_t a;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(smem_addr(p)), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
    return v;
}

template <int ACT> __device__ __forceinline__ float act(float x)
{
    if constexpr (ACT == LF_ACT_GELU_ERF)
        return 0.5f * x * erfcf(-x * 0.7071067811865476f);
    else
        return gated::act_of<ACT>(x);
}
#endif

// out[m][j] = act(x[m] . w[gr(j)]) * (x[m] . w[gr(j) + G]) for m < M, j < H, gr(j) = j / G * 2G +
// j % G. x: map over (M, K) in N-row boxes; w: over (2H, K) in 64-row boxes; grid: H / 64 tiles x
// splits CTAs, a cluster of `splits` on each tile, rank r on K steps [r kb / splits, (r + 1) kb /
// splits). Long, and read best as one: the producer's branch and the consumers' are two sides of
// one ring, and the reduction after them needs every thread of the cluster.
template <int ACT, int N>
__global__ void __launch_bounds__(THREADS, 1)
    gated_gemv_bf16_tma(const __grid_constant__ CUtensorMap x, const __grid_constant__ CUtensorMap w,
                        __nv_bfloat16 *__restrict__ out, long long ldo, int M, int K, int G, int splits)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    unsigned char *ring = gated::ring_start<STAGES>(smem_raw, full, empty, 1, [] {});
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tile = blockIdx.x / splits, rank = blockIdx.x % splits; // clusters run along x
    const int kb = (K + BK - 1) / BK, k0 = (int)((long long)rank * kb / splits),
              k1 = (int)((long long)(rank + 1) * kb / splits);
    const int j0 = tile * ROWS, gate_row = j0 / G * 2 * G + j0 % G;
    float g[N / 2], u[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++)
        g[i] = u[i] = 0.f;

    if (warp == 4) { // the producer
        if (lane == 0) {
            int stage = 0, phase = 0;
            for (int k = k0; k < k1; k++) {
                mbar_wait(&empty[stage], phase ^ 1);
                unsigned char *s = ring + stage * STAGE_BYTES;
                mbar_expect_tx(&full[stage], 2 * W_BYTES + N * 128);
                tma_load(s, &w, &full[stage], k * BK, gate_row);
                tma_load(s + W_BYTES, &w, &full[stage], k * BK, gate_row + G);
                tma_load(s + 2 * W_BYTES, &x, &full[stage], k * BK, 0);
                if (++stage == STAGES)
                    stage = 0, phase ^= 1;
            }
        }
    } else { // the consumer warpgroup: one group of MMAs in flight, the stage before it handed back
        int stage = 0, phase = 0, prev = -1;
        for (int k = k0; k < k1; k++) {
            mbar_wait(&full[stage], phase);
            const unsigned char *s = ring + stage * STAGE_BYTES;
            const uint64_t dg = smem_desc(s), du = smem_desc(s + W_BYTES), dx = smem_desc(s + 2 * W_BYTES);
            fence_acc(g);
            fence_acc(u);
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) { // 32 bytes a k16 step: 2 descriptor units
                wgmma_n<N>(g, dg + 2 * kk, dx + 2 * kk, 1);
                wgmma_n<N>(u, du + 2 * kk, dx + 2 * kk, 1);
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
            if (prev >= 0 && threadIdx.x == 0)
                mbar_arrive(&empty[prev]);
            prev = stage;
            if (++stage == STAGES)
                stage = 0, phase ^= 1;
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        fence_acc(g);
        fence_acc(u);
    }

    // Rank r > 0 of a split tile leaves its sums in its own ring (every copy into it has landed
    // and been read), thread-major so the 32 lanes of a warp touch 32 banks; rank 0 adds them in
    // rank order. The second meeting keeps every rank's shared memory alive until rank 0 has read.
    if (splits > 1) {
        float *part = reinterpret_cast<float *>(ring);
        if (rank > 0 && warp < 4)
#pragma unroll
            for (int i = 0; i < N / 2; i++)
                part[i * 128 + threadIdx.x] = g[i], part[(N / 2 + i) * 128 + threadIdx.x] = u[i];
        cluster_sync();
        if (rank == 0 && warp < 4)
            for (int r = 1; r < splits; r++)
#pragma unroll
                for (int i = 0; i < N / 2; i++) {
                    g[i] += ld_peer(part + i * 128 + threadIdx.x, (unsigned)r);
                    u[i] += ld_peer(part + (N / 2 + i) * 128 + threadIdx.x, (unsigned)r);
                }
        cluster_sync();
    }
    if (rank != 0 || warp == 4)
        return;
    // wgmma's D fragment: register 4i + 2h + e holds row 16 warp + lane / 4 + 8h (an output),
    // column 8i + 2 (lane % 4) + e (a token).
#pragma unroll
    for (int i = 0; i < N / 8; i++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int r = 16 * warp + lane / 4 + 8 * h, m = 8 * i + 2 * (lane % 4) + e, q = 4 * i + 2 * h + e;
                if (m < M)
                    out[m * ldo + j0 + r] = __float2bfloat16_rn(act<ACT>(g[q]) * u[q]);
            }
#else
    (void)x, (void)w, (void)out, (void)ldo, (void)M, (void)K, (void)G, (void)splits;
    __trap(); // built only for sm_90a; the host checks the device before launching
#endif
}

typedef void (*kernel_fn)(const CUtensorMap, const CUtensorMap, __nv_bfloat16 *, long long, int, int, int, int);

// The instantiations, by activation and N.
template <int N> kernel_fn kernel_for(lf_act a)
{
    return a == LF_ACT_SILU        ? gated_gemv_bf16_tma<LF_ACT_SILU, N>
           : a == LF_ACT_GELU_TANH ? gated_gemv_bf16_tma<LF_ACT_GELU_TANH, N>
                                   : gated_gemv_bf16_tma<LF_ACT_GELU_ERF, N>;
}

} // namespace gemv_tma

bool gated::gemv_init()
{
    const lf_act acts[3] = {LF_ACT_SILU, LF_ACT_GELU_TANH, LF_ACT_GELU_ERF};
    for (lf_act a : acts)
        if (cudaFuncSetAttribute(gemv_tma::kernel_for<8>(a), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 gemv_tma::SMEM_BYTES) != cudaSuccess ||
            cudaFuncSetAttribute(gemv_tma::kernel_for<16>(a), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 gemv_tma::SMEM_BYTES) != cudaSuccess)
            return false;
    return true;
}

} // namespace lf

// Which few-token GEMV runs: LINFUSE_GEMV_KERNEL (auto|mma|tma), read once.
static int gemv_kernel_setting()
{
    static std::atomic<int> v{-1};
    int k = v.load(std::memory_order_relaxed);
    if (k < 0) {
        k = lf_setting_choice_or(LF_SET_GEMV_KERNEL, 0);
        v.store(k, std::memory_order_relaxed);
    }
    return k;
}

extern "C" int lf_cuda_gemv_tma_supported(const lf_gemm *g)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    if (gemv_kernel_setting() == 1) // mma
        return 0;
    return lf_cuda_gemv_shape(g) && (A->rows == 1 || A->rs >= A->cols) &&
           B->cs >= B->rows && // TMA's strides hold whole rows
           A->cols >= 1 && A->cols <= 0x7fffffffLL - 64 && A->rs < (1LL << 39) && B->cs < (1LL << 39) &&
           B->cs % 8 == 0 && D->cols >= lf::gemv_tma::ROWS &&
           D->cols % lf::gemv_tma::ROWS == 0 && D->cols <= 0x3fffffffLL && g->ep.gate_group % lf::gemv_tma::ROWS == 0 &&
           lf::gated::ready_device() >= 0;
}

extern "C" cudaError_t lf_cuda_gemv_tma_launch(const lf_gemm *g, cudaStream_t stream)
{
    using namespace lf::gemv_tma;
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    const int dev = lf::gated::ready_device();
    if (dev < 0)
        return cudaErrorInvalidDevice;
    const int M = (int)A->rows, K = (int)A->cols, H = (int)D->cols, G = (int)g->ep.gate_group;
    const int n = M <= 8 ? 8 : 16;
    CUtensorMap xm, wm;
    // One token: its row stride is never used (a broadcast x may give 0); TMA is given one that
    // holds the row.
    const long long ldx = M == 1 ? A->cols : A->rs;
    if (!lf::gated::make_map(&xm, A->data, A->rows, A->cols, ldx, n, false) ||
        !lf::gated::make_map(&wm, B->data, B->cols, B->rows, B->cs, ROWS, false))
        return cudaErrorInvalidValue;
    // Split K over a cluster only where the tiles alone leave SMs idle, and never below four K
    // steps a CTA.
    const int tiles = H / ROWS, kb = (K + BK - 1) / BK, sms = lf::gated::device_sms(dev);
    int splits = tiles >= sms ? 1 : (sms + tiles - 1) / tiles;
    if (splits > MAX_SPLITS)
        splits = MAX_SPLITS;
    while (splits > 1 && kb / splits < 4)
        splits--;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3((unsigned)(tiles * splits));
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = SMEM_BYTES;
    cfg.stream = stream;
    if (splits > 1) {
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = (unsigned)splits;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    const kernel_fn fn = n == 8 ? kernel_for<8>(g->ep.act) : kernel_for<16>(g->ep.act);
    __nv_bfloat16 *out = static_cast<__nv_bfloat16 *>(D->data);
    return cudaLaunchKernelEx(&cfg, fn, xm, wm, out, (long long)D->rs, M, K, G, splits);
}
