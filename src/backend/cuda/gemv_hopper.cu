// The GEMMs of a few tokens (1 to 16) on Hopper (sm_90a) as one pass over the weights, fed by TMA
// into shared memory and multiplied by wgmma with the weights as the MMA's M side ("swap AB": 64
// weight rows a wgmma, the tokens its N of 8 or 16): the gated GEMM act(x . Wg^T) * (x . Wu^T),
// and a plain x . W^T (+ bias), the decode step's down projection that reads what the gated one
// wrote.
//
// Why beside gemv.cu's mma.sync GEMV: that one holds the bytes it has in flight in registers, and
// stopped at 88% of the read bandwidth whatever was tried (loads, orders, unrolls, L2 prefetch, a
// persistent grid; bench/RESULTS.md, 2026-12-02, 8413b24), while cuBLASLt's down GEMM after it, fed by
// TMA, read at 95%. Here the copies land in shared memory: each SM keeps 64 KiB of weights or
// more in flight without spending a register on them, and the copy engine makes the weight reads
// regular (64 rows x 128 bytes a box).
//
// Shape of the kernel:
//   - a gated CTA owns 64 outputs (a tile), their 64 gate rows and the 64 up rows G rows on,
//     which is why G must be a multiple of 64; each stage brings one K step (64 k, 128 bytes a
//     row) of those boxes and the tokens' box (8 or 16 rows of x: rows past M are the copy
//     engine's zeros). A plain CTA owns 32 outputs, and each stage brings two K steps of their
//     rows, stacked into the wgmma's 64 (the fold, below the ring);
//   - one producer warp (one thread issues the copies) and one consumer warpgroup that runs
//     wgmma m64nNk16 (N: 8 or 16 tokens, twice that folded), four k16 steps a stage, and hands
//     the stage back;
//   - where there are fewer tiles than SMs the K range is split over a cluster of `splits` CTAs;
//     ranks 1.. leave their fp32 sums in their own shared memory and rank 0 adds them in rank
//     order over DSMEM (deterministic: no atomics, no workspace, nothing to reset between calls),
//     then writes act(g) * u, or the sum plus the bias, in bf16 (fp32 to the one rounding).
//
// The two kernels of a decode step's MLP overlap by programmatic dependent launch (PDL): the gated
// kernel lets the next kernel launch once each of its CTAs has issued its last copy, and the plain
// one, launched with PDL, is placed on the SMs the gated kernel frees as it drains and waits there
// (griddepcontrol.wait) for it to finish before it reads anything. Alone, the plain form is about
// as fast as cuBLASLt's split-K GEMM plus its reduce (31.0-31.4 us against 29.3 + 1.6 at
// Llama-3-8B's down projection, bench/RESULTS.md, 2026-12-03, 6f03d83); with the gap and the ramp between
// the two kernels gone, the MLP is 1.0-1.5 us faster eager and under a CUDA graph (2026-12-02, a0ed321;
// 2026-12-03, 6f03d83), so cuda_gemm.c takes it for the GEMM that reads what the gated GEMV has just written.
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

constexpr int ROWS = 64;                        // outputs a tile: wgmma's M
constexpr int BK = 64;                          // k a stage: 128 bytes of every row
constexpr int W_BYTES = ROWS * 128;             // a box of weight rows: 8 KiB
constexpr int X_ROWS = LF_CUDA_GEMV_MAX_TOKENS; // the most tokens
constexpr int THREADS = 160;                    // the consumer warpgroup, the producer warp
constexpr int MAX_SPLITS = 8;                   // a portable cluster
constexpr int FOLD = 2;                         // plain: K steps a stage, ROWS / FOLD outputs a tile
#ifndef LF_GEMV_MAX_CPS
#define LF_GEMV_MAX_CPS 4
#endif
constexpr int MAX_CPS = LF_GEMV_MAX_CPS; // plain CTAs that may share an SM

// The ring, by kind: a gated stage holds a gate box, an up box and x's (18 KiB), four of them 64
// KiB of weights in flight a CTA (measured no slower than six, bench/RESULTS.md, 2026-12-02, 9e747e1) in 73
// KiB of shared memory, so two CTAs share an SM; a plain one two K steps of 32 weight rows and
// x's two boxes (12 KiB), sixteen of them 128 KiB of weights in flight in 193 KiB, one CTA an SM
// (a Llama-3-8B decode MLP 0.4-0.9 us faster than with twelve in 15 of 16 pairs, 0.04 in the
// last; eighteen no better; bench/RESULTS.md, 2026-12-03, 6f03d83. Before the fold, with 64-row tiles split
// over clusters, sixteen were no better than twelve, and twelve 0.8 us faster than eight at 16
// tokens, 2026-12-02, a0ed321). Sixteen is the most: with more plain tiles than SMs, c CTAs share an SM
// with a shorter ring each (plain_stages, below), all in flight together up to four an SM (528
// tiles on an H200; past that, the rest follow as CTAs finish). Run as a second wave on
// one CTA an SM, d = 5120's 160 tiles took 54.9 us where two an SM with 9 stages took 39.0, the
// MLP 122.7 us against 107.1 (bench/RESULTS.md, 2026-12-03, d4ca296).
template <bool GATED> struct ring {
    static constexpr int STAGE_BYTES = GATED ? 2 * W_BYTES + X_ROWS * 128 : W_BYTES + FOLD * X_ROWS * 128; // KiBs
    static constexpr int STAGES = GATED ? 4 : 16;
    static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024; // + room to align to 1024 B
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using gated::fence_acc;
using gated::mbar_arrive;
using gated::mbar_expect_tx;
using gated::mbar_wait;
using gated::smem_addr;
using gated::smem_desc;
using gated::tma_load;

// Programmatic dependent launch: let the grid launched after this one (with PDL) start once every
// CTA of this one has said so; wait until the grid before this one has finished and its writes
// are visible (at once when this grid was not launched with PDL).
__device__ __forceinline__ void launch_dependents()
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void wait_for_prior_grid()
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

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
    else if constexpr (N == 16)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, "
                     "%9, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                       "+f"(d[7])
                     : "l"(da), "l"(db), "r"(scale_d));
    else {
        static_assert(N == 32, "wgmma_n: N is 8, 16 or 32");
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, "
                     "%10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                       "+f"(d[15])
                     : "l"(da), "l"(db), "r"(scale_d));
    }
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

// The products of a tile: GATED, out[m][j] = act(x[m] . w[gr(j)]) * (x[m] . w[gr(j) + G]) with
// gr(j) = j / G * 2G + j % G, for j < H (a multiple of 64); plain, out[m][j] = x[m] . w[j] (+
// bias[j], bf16 or f32: bias_f32) for j < H (64 or more; rows of w past H are the copy engine's
// zeros).
// A plain tile is R = ROWS / FOLD outputs, and each stage brings FOLD K steps of them: the boxes
// of the FOLD steps, stacked, are the wgmma's 64 rows, and x's boxes of the same steps, stacked,
// its FOLD N columns, so block f of the product (rows f R.., columns f N..) is step f's share of
// the tile and the blocks off the diagonal are discarded (the MMA has time to spare: the kernel
// waits on memory). With the K range split inside the MMA, Llama-3-8B's down projection (64 tiles
// of 64 rows) runs as 128 tiles of 32 on their own, where two CTAs a tile added their sums across
// a cluster: the kernel 0.4-1.4 us faster, the MLP 1.0-1.5 us (bench/RESULTS.md, 2026-12-03, 249cb52;
// without the cluster and with the sums added through L2 behind a counter, 1.4 us slower).
// x: map over (M, K) in N-row boxes; w: over (2H or H, K) in 64-row boxes (ROWS / FOLD, plain);
// grid: tiles x splits CTAs, a cluster of `splits` on each tile, rank r on stages [r ks / splits,
// (r + 1) ks / splits) of ks (K steps a stage: 1, or FOLD). Long, and read best as one: the
// producer's branch and the consumers' are two sides of one ring, and the reduction after them
// needs every thread of the cluster.
template <int ACT, int N, bool GATED>
__global__ void __launch_bounds__(THREADS, GATED ? 1 : MAX_CPS)
    gemv_bf16_tma(const __grid_constant__ CUtensorMap x, const __grid_constant__ CUtensorMap w,
                  __nv_bfloat16 *__restrict__ out, long long ldo, const void *bias, int bias_f32, int M, int K,
                  int H, int G, int splits, int nstages)
{
    constexpr int STAGES = ring<GATED>::STAGES, STAGE_BYTES = ring<GATED>::STAGE_BYTES;
    // Stages in use: the plain ring's is the host's choice (kept in [2, STAGES]: the barriers are
    // STAGES, and a consumer hands a stage back only once it is on the next one).
    const int NST = GATED ? STAGES : nstages < 2 ? 2 : nstages > STAGES ? STAGES : nstages;
    constexpr int X_AT = (GATED ? 2 : 1) * W_BYTES;               // x's boxes in a stage
    constexpr int NA = GATED ? 2 : 1;                             // accumulators: g and u, or one
    constexpr int F = GATED ? 1 : FOLD, R = ROWS / F, NB = F * N; // K steps a stage, outputs, MMA's N
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    unsigned char *ring = gated::ring_start<STAGES>(smem_raw, full, empty, 1, [] {});
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tile = blockIdx.x / splits, rank = blockIdx.x % splits; // clusters run along x
    const int ks = ((K + BK - 1) / BK + F - 1) / F, k0 = (int)((long long)rank * ks / splits),
              k1 = (int)((long long)(rank + 1) * ks / splits);
    const int j0 = tile * R, row0 = GATED ? j0 / G * 2 * G + j0 % G : j0;
    float acc[NA][NB / 2];
#pragma unroll
    for (int a = 0; a < NA; a++)
#pragma unroll
        for (int i = 0; i < NB / 2; i++)
            acc[a][i] = 0.f;
    if (!GATED)
        // Launched with PDL after the kernel that writes x: nothing is read before that kernel
        // has finished and its writes are visible. (Asking L2 for the first weights before the
        // wait measured slower, filling the ring with them no faster: bench/RESULTS.md, 2026-12-02, a0ed321.)
        wait_for_prior_grid();

    if (warp == 4) { // the producer
        if (lane == 0) {
            int stage = 0, phase = 0;
            for (int k = k0; k < k1; k++) {
                mbar_wait(&empty[stage], phase ^ 1);
                unsigned char *s = ring + stage * STAGE_BYTES;
                mbar_expect_tx(&full[stage], X_AT + F * N * 128); // a step past K: the engine's zeros
#pragma unroll
                for (int f = 0; f < F; f++) {
                    tma_load(s + f * R * 128, &w, &full[stage], (k * F + f) * BK, row0);
                    tma_load(s + X_AT + f * N * 128, &x, &full[stage], (k * F + f) * BK, 0);
                }
                if (GATED)
                    tma_load(s + W_BYTES, &w, &full[stage], k * BK, row0 + G);
                if (++stage == NST)
                    stage = 0, phase ^= 1;
            }
            if (GATED) // the down projection after it may start filling its ring
                launch_dependents();
        }
    } else { // the consumer warpgroup: one group of MMAs in flight, the stage before it handed back
        int stage = 0, phase = 0, prev = -1;
        for (int k = k0; k < k1; k++) {
            mbar_wait(&full[stage], phase);
            const unsigned char *s = ring + stage * STAGE_BYTES;
            const uint64_t dx = smem_desc(s + X_AT);
#pragma unroll
            for (int a = 0; a < NA; a++)
                fence_acc(acc[a]);
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) // 32 bytes a k16 step: 2 descriptor units
#pragma unroll
                for (int a = 0; a < NA; a++)
                    wgmma_n<NB>(acc[a], smem_desc(s + a * W_BYTES) + 2 * kk, dx + 2 * kk, 1);
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
            if (prev >= 0 && threadIdx.x == 0)
                mbar_arrive(&empty[prev]);
            prev = stage;
            if (++stage == NST)
                stage = 0, phase ^= 1;
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
        for (int a = 0; a < NA; a++)
            fence_acc(acc[a]);
        // Every consumer warp past its last wgmma before any of them writes into the ring (the
        // sums below, the fold's hand-off): one warp's wait does not say another's reads are done.
        asm volatile("bar.sync 1, 128;" ::: "memory");
    }

    // Rank r > 0 of a split tile leaves its sums in its own ring (every copy into it has landed
    // and been read), thread-major so the 32 lanes of a warp touch 32 banks; rank 0 adds them in
    // rank order. The second meeting keeps every rank's shared memory alive until rank 0 has read.
    if (splits > 1) {
        float *part = reinterpret_cast<float *>(ring);
        if (rank > 0 && warp < 4)
#pragma unroll
            for (int a = 0; a < NA; a++)
#pragma unroll
                for (int i = 0; i < NB / 2; i++)
                    part[(a * NB / 2 + i) * 128 + threadIdx.x] = acc[a][i];
        cluster_sync();
        if (rank == 0 && warp < 4)
            for (int r = 1; r < splits; r++)
#pragma unroll
                for (int a = 0; a < NA; a++)
#pragma unroll
                    for (int i = 0; i < NB / 2; i++)
                        acc[a][i] += ld_peer(part + (a * NB / 2 + i) * 128 + threadIdx.x, (unsigned)r);
        cluster_sync();
    }
    if (rank != 0 || warp == 4)
        return;
    // A folded tile: warp w of row block f > 0 holds, in the registers of column block f, the sums
    // of the rows warp w - f R / 16 holds in column block 0 (same lane, same register): handed
    // over in the ring (all its copies landed and read), added in block order.
    if constexpr (F > 1) {
        float *hand = reinterpret_cast<float *>(ring);
        const int fb = 16 * warp / R, w0 = warp % (R / 16); // this warp's row block, its block-0 warp
#pragma unroll
        for (int f = 1; f < F; f++) // registers named at compile time: no local memory
            if (fb == f)
#pragma unroll
                for (int q = 0; q < N / 2; q++)
                    hand[(((f - 1) * (R / 16) + w0) * (N / 2) + q) * 32 + lane] = acc[0][f * N / 2 + q];
        asm volatile("bar.sync 1, 128;" ::: "memory"); // the consumer warpgroup alone
        if (fb > 0)
            return;
        for (int f = 1; f < F; f++)
#pragma unroll
            for (int q = 0; q < N / 2; q++)
                acc[0][q] += hand[(((f - 1) * (R / 16) + w0) * (N / 2) + q) * 32 + lane];
    }
    // wgmma's D fragment: register 4i + 2h + e holds row 16 warp + lane / 4 + 8h (an output),
    // column 8i + 2 (lane % 4) + e (a token). In fp32 to the one rounding.
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int j = j0 + 16 * warp + lane / 4 + 8 * h; // warp < R / 16
        if (j >= H)
            continue;
        float b = 0.f;
        if (!GATED && bias)
            b = bias_f32 ? static_cast<const float *>(bias)[j]
                         : __bfloat162float(static_cast<const __nv_bfloat16 *>(bias)[j]);
#pragma unroll
        for (int i = 0; i < N / 8; i++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int m = 8 * i + 2 * (lane % 4) + e, q = 4 * i + 2 * h + e;
                if (m < M)
                    out[m * ldo + j] =
                        __float2bfloat16_rn(GATED ? act<ACT>(acc[0][q]) * acc[NA - 1][q] : acc[0][q] + b);
            }
    }
#else
    (void)x, (void)w, (void)out, (void)ldo, (void)bias, (void)bias_f32, (void)M, (void)K, (void)H, (void)G,
        (void)splits, (void)nstages;
    __trap(); // built only for sm_90a; the host checks the device before launching
#endif
}

typedef void (*kernel_fn)(const CUtensorMap, const CUtensorMap, __nv_bfloat16 *, long long, const void *, int, int,
                          int, int, int, int, int);

// The instantiations: gated by activation, and plain, each for N 8 and 16.
template <int N> kernel_fn kernel_for(lf_gate gate, lf_act a)
{
    return gate == LF_GATE_NONE      ? gemv_bf16_tma<LF_ACT_NONE, N, false>
           : a == LF_ACT_SILU        ? gemv_bf16_tma<LF_ACT_SILU, N, true>
           : a == LF_ACT_GELU_TANH   ? gemv_bf16_tma<LF_ACT_GELU_TANH, N, true>
                                     : gemv_bf16_tma<LF_ACT_GELU_ERF, N, true>;
}

// The plain ring's stages when c CTAs share an SM (c = 1..MAX_CPS), by device: the most, up to
// ring<false>::STAGES and no fewer than four, that the occupancy calculator lets c of them hold at
// once, for both token widths. 0: none fits. Filled by gemv_init, under ready_device's lock.
static int plain_stages[LF_CUDA_MAX_DEVICES][MAX_CPS + 1];

static int plain_smem(int stages)
{
    return stages * ring<false>::STAGE_BYTES + 1024;
}

} // namespace gemv_tma

bool gated::gemv_init(int dev)
{
    struct {
        lf_gate gate;
        lf_act act;
    } kinds[4] = {{LF_GATE_NONE, LF_ACT_NONE}, {LF_GATE_PAIRED, LF_ACT_SILU}, {LF_GATE_PAIRED, LF_ACT_GELU_TANH},
                  {LF_GATE_PAIRED, LF_ACT_GELU_ERF}};
    for (const auto &k : kinds) {
        const int smem = k.gate == LF_GATE_NONE ? gemv_tma::ring<false>::SMEM_BYTES : gemv_tma::ring<true>::SMEM_BYTES;
        if (cudaFuncSetAttribute(gemv_tma::kernel_for<8>(k.gate, k.act), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 smem) != cudaSuccess ||
            cudaFuncSetAttribute(gemv_tma::kernel_for<16>(k.gate, k.act), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 smem) != cudaSuccess)
            return false;
    }
    for (int c = 1; c <= gemv_tma::MAX_CPS; c++) {
        int st = gemv_tma::ring<false>::STAGES;
        for (; st >= 4; st--) {
            int f8 = 0, f16 = 0;
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f8, gemv_tma::kernel_for<8>(LF_GATE_NONE, LF_ACT_NONE),
                                                              gemv_tma::THREADS, gemv_tma::plain_smem(st)) !=
                    cudaSuccess ||
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f16, gemv_tma::kernel_for<16>(LF_GATE_NONE, LF_ACT_NONE),
                                                              gemv_tma::THREADS, gemv_tma::plain_smem(st)) !=
                    cudaSuccess) {
                cudaGetLastError(); // not left for the next launch to report as its own
                st = 0;
                break;
            }
            if (f8 >= c && f16 >= c)
                break;
        }
        gemv_tma::plain_stages[dev][c] = st >= 4 ? st : 0;
    }
    return true;
}

} // namespace lf

// Which few-token kernels run: LINFUSE_GEMV_KERNEL (auto|mma|tma), read once.
enum { GEMV_AUTO, GEMV_MMA, GEMV_TMA };
static int gemv_kernel_setting()
{
    static std::atomic<int> v{-1};
    int k = v.load(std::memory_order_relaxed);
    if (k < 0) {
        k = lf_setting_choice_or(LF_SET_GEMV_KERNEL, GEMV_AUTO);
        v.store(k, std::memory_order_relaxed);
    }
    return k;
}

// What TMA's maps take of x and of the weight, in either form: whole rows in each stride (one
// token's x gets a stride that holds its row, a broadcast x may carry 0), K below 2^31 - 64 (kb's
// rounding), strides under TMA's 2^40 bytes, at least one tile of outputs.
static bool tma_operands(const lf_gemm *g)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    return (A->rows == 1 || A->rs >= A->cols) && B->cs >= B->rows && A->cols >= 1 && A->cols <= 0x7fffffffLL - 64 &&
           A->rs < (1LL << 39) && B->cs < (1LL << 39) && B->cs % 8 == 0 && D->cols >= lf::gemv_tma::ROWS &&
           D->cols <= 0x3fffffffLL;
}

extern "C" int lf_cuda_gemv_tma_supported(const lf_gemm *g)
{
    return gemv_kernel_setting() != GEMV_MMA && lf_cuda_gemv_shape(g) && tma_operands(g) &&
           g->d.cols % lf::gemv_tma::ROWS == 0 && g->ep.gate_group % lf::gemv_tma::ROWS == 0 &&
           lf::gated::ready_device() >= 0;
}

// The last gated GEMV this thread launched: its stream and where it wrote.
static thread_local struct {
    cudaStream_t stream;
    const void *out;
} last_gated;

extern "C" int lf_cuda_gemv_plain_takes(const lf_gemm *g, cudaStream_t stream)
{
    const bool follows = last_gated.out && last_gated.out == g->a.data && last_gated.stream == stream;
    last_gated.out = NULL; // one GEMM after it, whichever
    const int setting = gemv_kernel_setting();
    if (setting == GEMV_MMA || (setting == GEMV_AUTO && !follows))
        return 0;
    const lf_epilogue *e = &g->ep;
    return e->gate == LF_GATE_NONE && e->act == LF_ACT_NONE && !e->a_scale &&
           (!e->bias || e->bias_dtype == LF_DTYPE_BF16 || e->bias_dtype == LF_DTYPE_F32) &&
           g->a.cols >= 256 && // a read of the weights, not a launch
           lf_cuda_gemv_operands(g) && tma_operands(g) && lf::gated::ready_device() >= 0;
}

extern "C" cudaError_t lf_cuda_gemv_tma_launch(const lf_gemm *g, cudaStream_t stream)
{
    using namespace lf::gemv_tma;
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    const int dev = lf::gated::ready_device();
    if (dev < 0)
        return cudaErrorInvalidDevice;
    const bool gated = g->ep.gate == LF_GATE_PAIRED;
    const int M = (int)A->rows, K = (int)A->cols, H = (int)D->cols, G = gated ? (int)g->ep.gate_group : 0;
    const int n = M <= 8 ? 8 : 16;
    CUtensorMap xm, wm;
    // One token: its row stride is never used (a broadcast x may give 0); TMA is given one that
    // holds the row.
    const long long ldx = M == 1 ? A->cols : A->rs;
    const int fold = gated ? 1 : FOLD, rows = ROWS / fold; // K steps a stage; outputs a tile, rows a box
    if (!lf::gated::make_map(&xm, A->data, A->rows, A->cols, ldx, n, false) ||
        !lf::gated::make_map(&wm, B->data, B->cols, B->rows, B->cs, rows, false))
        return cudaErrorInvalidValue;
    // Split K over a cluster only where the tiles alone leave SMs idle, and never below four
    // stages a CTA. The gated form rounds up (more CTAs than SMs share them); the plain one, its
    // sixteen-stage ring keeping one CTA an SM busy, rounds down (Llama-3-8B's down projection,
    // 128 folded tiles on 132 SMs, is not split).
    const int tiles = (H + rows - 1) / rows, sms = lf::gated::device_sms(dev);
    const int ks = ((K + BK - 1) / BK + fold - 1) / fold; // stages, as the kernel counts them
    int splits = tiles >= sms ? 1 : gated ? (sms + tiles - 1) / tiles : sms / tiles;
    if (splits > MAX_SPLITS)
        splits = MAX_SPLITS;
    while (splits > 1 && ks / splits < 4)
        splits--;
    // More plain tiles than SMs: c = ceil(tiles / SMs) CTAs (at most MAX_CPS) share an SM, each with
    // the stages c of them can hold, so that the tiles are in flight together rather than a wave
    // and a tail (once the gated kernel before them has drained).
    int stages = ring<false>::STAGES;
    if (!gated) {
        int c = tiles > sms ? (tiles + sms - 1) / sms : 1;
        if (c > MAX_CPS)
            c = MAX_CPS;
        while (c > 1 && !plain_stages[dev][c])
            c--;
        if (plain_stages[dev][c])
            stages = plain_stages[dev][c];
    }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    cfg.gridDim = dim3((unsigned)(tiles * splits));
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = gated ? ring<true>::SMEM_BYTES : plain_smem(stages);
    cfg.stream = stream;
    cfg.attrs = attr;
    if (splits > 1) {
        attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
        attr[cfg.numAttrs].val.clusterDim.x = (unsigned)splits;
        attr[cfg.numAttrs].val.clusterDim.y = 1;
        attr[cfg.numAttrs].val.clusterDim.z = 1;
        cfg.numAttrs++;
    }
    if (!gated) { // placed on the SMs the kernel before it frees as it drains; the kernel waits for it
        attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
        cfg.numAttrs++;
    }
    const kernel_fn fn = n == 8 ? kernel_for<8>(g->ep.gate, g->ep.act) : kernel_for<16>(g->ep.gate, g->ep.act);
    const cudaError_t e =
        cudaLaunchKernelEx(&cfg, fn, xm, wm, static_cast<__nv_bfloat16 *>(D->data), (long long)D->rs, g->ep.bias,
                           (int)(g->ep.bias_dtype == LF_DTYPE_F32), M, K, H, G, splits, stages);
    if (e == cudaSuccess && gated)
        last_gated.stream = stream, last_gated.out = D->data;
    return e;
}
