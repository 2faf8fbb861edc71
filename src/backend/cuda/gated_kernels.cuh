// What the Hopper gated GEMM kernels share (gated_gemm.cu: cooperative, gated_pingpong.cu:
// ping-pong, gated_offload.cu: offload): their tile sizes, their declarations for the host code,
// and the PTX they are built from (mbarriers, TMA copies, wgmma, the activations, the tile order,
// the 128 x 256 tile's consumer mainloop). Device code here is for sm_90a only; see gated_gemm.cu
// for the design. Layer: backend/cuda.
#ifndef LF_BACKEND_CUDA_GATED_KERNELS_CUH
#define LF_BACKEND_CUDA_GATED_KERNELS_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/fp8.cuh"

namespace lf {
namespace gated {

// Cooperative: one 128-token x 256-column tile (128 gates + their 128 ups) per CTA, its two
// consumer warpgroups on 64 rows each; K in steps of 64 through a 4-stage ring.
// (Sizes in bytes hold for both operand types: a K step is 128 bytes of every row.)
namespace coop {
constexpr int BM = 128, BN = 256, ROW_BYTES = 128, STAGES = 4;
constexpr int A_BYTES = BM * ROW_BYTES, HALF_B_BYTES = (BN / 2) * ROW_BYTES, B_BYTES = 2 * HALF_B_BYTES;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;         // 48 KiB
constexpr int OUT_BYTES = BM * (BN / 2) * 2;            // the output tile staged for TMA stores: 32 KiB
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + OUT_BYTES + 1024; // + room to align to 1024 B
} // namespace coop

// Ping-pong: each consumer warpgroup owns a whole 128-token x 128-column tile (64 gates + their
// 64 ups), the two on different tiles; a 6-stage ring of 32 KiB stages.
namespace pp {
constexpr int BM = 128, BN = 128, ROW_BYTES = 128, STAGES = 6;
constexpr int A_BYTES = BM * ROW_BYTES, HALF_B_BYTES = (BN / 2) * ROW_BYTES, B_BYTES = 2 * HALF_B_BYTES;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;          // 32 KiB
constexpr int OUT_BYTES = BM * (BN / 2) * 2;             // one consumer's staged output: 16 KiB
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 2 * OUT_BYTES + 1024; // 225 KiB of the 227
} // namespace pp

// Offload: the cooperative tile and mainloop, the activation done by the producer warpgroup's
// spare warps from g and u the consumers leave in two bf16 tiles (gated_offload.cu); the tiles
// take the ring's fourth stage and the cooperative kernel's 32 KiB staging tile.
namespace offload {
constexpr int BM = 128, BN = 256, ROW_BYTES = 128, STAGES = 3;
constexpr int A_BYTES = BM * ROW_BYTES, HALF_B_BYTES = (BN / 2) * ROW_BYTES, B_BYTES = 2 * HALF_B_BYTES;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;                         // 48 KiB
constexpr int GU_BYTES = BM * (BN / 2) * 2;                            // g's tile, then u's: 32 KiB each
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 2 * GU_BYTES + 1024; // 209 KiB
} // namespace offload

// FP8 (e4m3) operands take the same tiles and the same 128-byte rows of shared memory: a K step
// of 128 elements instead of 64, wgmma's k32 form instead of k16, so each stage feeds twice the
// multiply-adds at twice the rate, and the pipeline keeps its balance.
template <bool FP8> struct elem {
    static constexpr int BYTES = FP8 ? 1 : 2, BK = 128 / BYTES, KSTEP = FP8 ? 32 : 16;
};

// Rows of x one TMA copy brings per K step: the tile's BM, or, where all M tokens fit in one
// row-tile, M rounded up to 16. A box past the tensor's last row is filled with zeros by the copy
// engine, and that fill was measured slow: at 4096 -> 14336 the cooperative kernel took 74.4 us at
// 17 tokens against 64.4 at 64 with the same 112 tiles (bench/RESULTS.md, 2026-12-01, 6f4024a). Rows past
// the box keep what the stage held before; they meet only output rows past the box, which are
// never stored (the output map ends at row M) nor scaled (ds ends at M rounded up to 4).
__host__ __device__ __forceinline__ int x_box_rows(int M, int BM)
{
    return M < BM ? (M + 15) / 16 * 16 : BM;
}

// The kernels, one per schedule, operand type and activation, each named for what it computes
// and its tile (the names traces show). x: tensor map over (M, K) row-major (bf16 or e4m3); w:
// over (2H, K), [Wg; Wu] in blocks of G rows; out: over (M, H) bf16; band: row-tiles per band of
// the tile order. FP8: sa (M) and sb (2H, in w's row order) scale each product before the
// activation; the bf16 kernels take them as NULL. The "_to_f8e4m3" kernels (cooperative, FP8 in)
// write h as e4m3 (out over (M, H) bytes) with one scale per 1 x 128 block of a row, ds[row +
// tile column * ds_ld] (ds_ld: M rounded up to 4); the others take ds as NULL.
#define LF_GATED_KERNEL(name)                                                                                          \
    __global__ void __launch_bounds__(384, 1) name(const __grid_constant__ CUtensorMap x,                              \
                                                   const __grid_constant__ CUtensorMap w,                              \
                                                   const __grid_constant__ CUtensorMap out, const float *sa,           \
                                                   const float *sb, float *ds, int ds_ld, int M, int H, int K, int G,  \
                                                   int band)
// One schedule's four kernels, {bf16, f8e4m3} x {gelu_tanh, silu}, named for their tile; the
// definitions each run body<ACT, FP8, QOUT> (the schedule's device function).
#define LF_GATED_KERNEL_ONE(body, name, ACT, FP8, QOUT)                                                                \
    LF_GATED_KERNEL(name) { body<ACT, FP8, QOUT>(x, w, out, sa, sb, ds, ds_ld, M, H, K, G, band); }
#define LF_GATED_KERNELS(body, tile)                                                                                   \
    LF_GATED_KERNEL_ONE(body, gated_gemm_bf16_gelu_tanh_##tile, LF_ACT_GELU_TANH, false, false)                       \
    LF_GATED_KERNEL_ONE(body, gated_gemm_bf16_silu_##tile, LF_ACT_SILU, false, false)                                 \
    LF_GATED_KERNEL_ONE(body, gated_gemm_f8e4m3_gelu_tanh_##tile, LF_ACT_GELU_TANH, true, false)                      \
    LF_GATED_KERNEL_ONE(body, gated_gemm_f8e4m3_silu_##tile, LF_ACT_SILU, true, false)
#define LF_GATED_DECLS(tile)                                                                                           \
    LF_GATED_KERNEL(gated_gemm_bf16_gelu_tanh_##tile);                                                                 \
    LF_GATED_KERNEL(gated_gemm_bf16_silu_##tile);                                                                      \
    LF_GATED_KERNEL(gated_gemm_f8e4m3_gelu_tanh_##tile);                                                               \
    LF_GATED_KERNEL(gated_gemm_f8e4m3_silu_##tile);
LF_GATED_DECLS(128x256)
LF_GATED_DECLS(128x128_pingpong)
LF_GATED_DECLS(128x256_offload)
LF_GATED_KERNEL(gated_gemm_f8e4m3_gelu_tanh_128x256_to_f8e4m3);
LF_GATED_KERNEL(gated_gemm_f8e4m3_silu_128x256_to_f8e4m3);

// The host side every Hopper kernel's launch shares (gated_gemm.cu).
// The calling thread's GPU, checked once (sm_90, every kernel loads, shared-memory limits raised,
// the tensor-map encoder found); -1 when it cannot run them (lf_cuda_gated_supported says why).
int ready_device();
// The SM count of a GPU ready_device returned.
int device_sms(int dev);
// A (rows, cols) row-major matrix of bf16 (or of e4m3, fp8) with row stride ld elements, in boxes
// of box_rows x 128 bytes (64 bf16, 128 e4m3) with the 128-byte swizzle; reads past the end give
// zeros, writes there are dropped.
bool make_map(CUtensorMap *map, const void *p, long long rows, long long cols, long long ld, int box_rows, bool fp8);
// The few-token GEMV's kernels (gemv_hopper.cu) made ready on GPU dev, the current one: their shared-memory
// limits raised, and the plain form's ring depth for 1 to 4 CTAs an SM read from the occupancy
// calculator. Called once per GPU by ready_device, under its lock.
bool gemv_init(int dev);

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Wait until the phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}" ::"r"(smem_addr(bar)),
                 "r"(parity)
                 : "memory");
}

// One box of a 2-D tensor map into shared memory; completion is counted on bar.
__device__ __forceinline__ void tma_load(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(dst)),
                 "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
                 : "memory");
}

// A box of shared memory out to a 2-D tensor map (rows past the map's end are not written).
__device__ __forceinline__ void tma_store(const CUtensorMap *map, const void *src, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map),
                 "r"(smem_addr(src)), "r"(c0), "r"(c1)
                 : "memory");
}

// A barrier for the 128 threads of one warpgroup (ids 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void wg_barrier(int id)
{
    asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

// A wgmma shared-memory descriptor for a K-major tile written by TMA with the 128-byte
// swizzle: rows of 128 bytes, 8-row groups 1024 bytes apart (stride byte offset), the
// leading byte offset unused in this mode (1), swizzle mode 1 in bits 62-63.
__device__ __forceinline__ uint64_t smem_desc(const void *p)
{
    uint64_t a = smem_addr(p);
    return ((a & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

// d (64 x 256 per warpgroup, fp32) [+]= A (64 x k) . B (k x 256), k = 16 bf16 or 32 e4m3 (32 bytes
// either way); both operands K-major in shared memory (e4m3 has no other form). scale_d = 0
// overwrites d. The bf16 form's trailing "0, 0" say neither operand is transposed.
#define LF_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                 "+f"(d[i + 6]), "+f"(d[i + 7])
#define LF_R64                                                                                                        \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                       \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                             \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                             \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define LF_R128                                                                                                       \
    LF_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                   \
           "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                     \
           "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "          \
           "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define LF_WGMMA(instr, regs, a, b, p, tail, ...)                                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " p ", 0;\n" instr " {" regs "}, " a ", " b ", p, 1, 1" tail   \
                 ";\n}\n"                                                                                            \
                 : __VA_ARGS__                                                                                       \
                 : "l"(da), "l"(db), "r"(scale_d))
template <bool FP8> __device__ __forceinline__ void wgmma_256(float (&d)[128], uint64_t da, uint64_t db, int scale_d)
{
    if constexpr (FP8)
        LF_WGMMA("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3", LF_R128, "%128", "%129", "%130", "",
                 LF_D8(0), LF_D8(8), LF_D8(16), LF_D8(24), LF_D8(32), LF_D8(40), LF_D8(48), LF_D8(56), LF_D8(64),
                 LF_D8(72), LF_D8(80), LF_D8(88), LF_D8(96), LF_D8(104), LF_D8(112), LF_D8(120));
    else
        LF_WGMMA("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", LF_R128, "%128", "%129", "%130", ", 0, 0",
                 LF_D8(0), LF_D8(8), LF_D8(16), LF_D8(24), LF_D8(32), LF_D8(40), LF_D8(48), LF_D8(56), LF_D8(64),
                 LF_D8(72), LF_D8(80), LF_D8(88), LF_D8(96), LF_D8(104), LF_D8(112), LF_D8(120));
}

// d (64 x 128 per warpgroup, fp32) [+]= A (64 x k) . B (k x 128), as wgmma_256.
template <bool FP8> __device__ __forceinline__ void wgmma_128(float (&d)[64], uint64_t da, uint64_t db, int scale_d)
{
    if constexpr (FP8)
        LF_WGMMA("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", LF_R64, "%64", "%65", "%66", "", LF_D8(0),
                 LF_D8(8), LF_D8(16), LF_D8(24), LF_D8(32), LF_D8(40), LF_D8(48), LF_D8(56));
    else
        LF_WGMMA("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", LF_R64, "%64", "%65", "%66", ", 0, 0",
                 LF_D8(0), LF_D8(8), LF_D8(16), LF_D8(24), LF_D8(32), LF_D8(40), LF_D8(48), LF_D8(56));
}
#undef LF_WGMMA
#undef LF_R128
#undef LF_R64
#undef LF_D8

// Keep the compiler from moving accumulator reads or writes across wgmma's asynchrony.
template <int N> __device__ __forceinline__ void fence_acc(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

// 0.5 x (1 + tanh(u)) with the hardware tanh (one MUFU op; relative error about 2^-11, under
// the 2^-9 of the bf16 result it feeds), so the epilogue's math stays short.
__device__ __forceinline__ float gelu_tanh(float x)
{
    float u = 0.7978845608028654f * x * (1.f + 0.044715f * x * x), t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
    return 0.5f * x * (1.f + t);
}

// x sigmoid(x) with the fast exp and divide (relative error about 2^-21), for SwiGLU.
__device__ __forceinline__ float silu(float x)
{
    return __fdividef(x, 1.f + __expf(-x));
}

template <int ACT> __device__ __forceinline__ float act_of(float x)
{
    return ACT == LF_ACT_SILU ? silu(x) : gelu_tanh(x);
}

// Two adjacent product columns c, c + 1 of a tile in FP8: g0, g1 the gates' fp32 accumulators
// (w's rows gate_row + c, + 1), u0, u1 their partners' (G rows on), each multiplied by its row's
// scale rs and its w row's scale (sb, 8-byte aligned pairs). In bf16 there are no scales.
template <bool FP8>
__device__ __forceinline__ void scale_pair(float &g0, float &g1, float &u0, float &u1, float rs, const float *sb,
                                           int gate_row, int G, int c)
{
    if constexpr (FP8) {
        const float2 gs = __ldg(reinterpret_cast<const float2 *>(sb + gate_row + c)),
                     us = __ldg(reinterpret_cast<const float2 *>(sb + gate_row + G + c));
        g0 = g0 * rs * gs.x, g1 = g1 * rs * gs.y, u0 = u0 * rs * us.x, u1 = u1 * rs * us.y;
    } else {
        (void)g0, (void)g1, (void)u0, (void)u1, (void)rs, (void)sb, (void)gate_row, (void)G, (void)c;
    }
}

// act(g) * u for two adjacent columns, as bf16, in fp32 up to the one rounding.
template <int ACT> __device__ __forceinline__ __nv_bfloat162 act_pair(float g0, float g1, float u0, float u1)
{
    return __floats2bfloat162_rn(act_of<ACT>(g0) * u0, act_of<ACT>(g1) * u1);
}

// A warp's 16 rows of a consumer's D fragment after a tile's mainloop, pair by pair: NI groups of
// 8 gate columns, their ups 4 * NI registers on (register 4i + 2h + e holds row row0 + 8h, column
// 8i + 2 * (lane % 4) + e; row0 is the row of lane / 4). For group i and row half h,
// emit(2i + h, g0, g1, u0, u1) gets the pair's gate and up sums, scaled in FP8 (scale_pair): the
// index is where stage_rows16 wants the pair. The cooperative and offload kernels (NI 16, a
// warpgroup's 64 x 256) and the ping-pong kernel (NI 8, each 64-row half of its 128 x 128) build
// their bf16 epilogues on it; the e4m3 epilogue needs a row's amax first and keeps its own loop.
template <bool FP8, int NI, class Emit>
__device__ __forceinline__ void fragment_pairs(const float (&d)[8 * NI], int row0, int M, const float *sa,
                                               const float *sb, int gate_row, int G, int lane, Emit &&emit)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = row0 + 8 * h;
        const float rs = FP8 && row < M ? sa[row] : 1.f;
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const int q = 4 * i + 2 * h;
            float g0 = d[q], g1 = d[q + 1], u0 = d[q + 4 * NI], u1 = d[q + 4 * NI + 1];
            scale_pair<FP8>(g0, g1, u0, u1, rs, sb, gate_row, G, 8 * i + 2 * (lane % 4));
            emit(2 * i + h, g0, g1, u0, u1);
        }
    }
}

// Tile t of the persistent walk -> (row-tile, column-tile): row-tiles vary fastest within
// bands of `band` row-tiles, so the CTAs running together share the weight tiles they load
// (a band of 16 row-tiles of 128 tokens reads each weight tile once from memory for 2048 tokens).
__device__ __forceinline__ void tile_of(int t, int m_tiles, int n_tiles, int band, int &mb, int &nb)
{
    const int b = t / (band * n_tiles), rem = t % (band * n_tiles);
    const int first = b * band, rows = min(band, m_tiles - first);
    mb = first + rem % rows;
    nb = rem / rows;
}

// The producer warpgroup's one thread: every tile of this CTA in order (t = blockIdx.x, then a
// grid's stride on), each K step into the next stage of the ring: BM rows of x, then the tile's
// BN / 2 gate rows and their BN / 2 up rows, G rows later, as two copies.
template <int BM, int BN, int BK, int STAGES>
__device__ __forceinline__ void produce(const CUtensorMap &x, const CUtensorMap &w, unsigned char *ring,
                                        uint64_t *full, uint64_t *empty, int M, int H, int K, int G, int band)
{
    // BK elements of 128 / BK bytes: 128 bytes of every row per stage
    constexpr int A_BYTES = BM * 128, HALF_B_BYTES = (BN / 2) * 128, STAGE_BYTES = A_BYTES + 2 * HALF_B_BYTES;
    const int m_tiles = (M + BM - 1) / BM, n_tiles = H / (BN / 2), tiles = m_tiles * n_tiles, kb = (K + BK - 1) / BK;
    const unsigned copy_bytes = x_box_rows(M, BM) * 128 + 2 * HALF_B_BYTES; // what a stage's copies bring
    int stage = 0, phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int mb, nb;
        tile_of(t, m_tiles, n_tiles, band, mb, nb);
        const int j0 = nb * (BN / 2), gate_row = j0 / G * 2 * G + j0 % G;
        for (int k = 0; k < kb; k++) {
            mbar_wait(&empty[stage], phase ^ 1);
            unsigned char *a = ring + stage * STAGE_BYTES, *b = a + A_BYTES;
            mbar_expect_tx(&full[stage], copy_bytes);
            tma_load(a, &x, &full[stage], k * BK, mb * BM);
            tma_load(b, &w, &full[stage], k * BK, gate_row);
            tma_load(b + HALF_B_BYTES, &w, &full[stage], k * BK, gate_row + G);
            if (++stage == STAGES)
                stage = 0, phase ^= 1;
        }
    }
}

// One consumer warpgroup's share of a 128 x 256 tile (the cooperative and offload kernels): its 64
// rows (half 0 or 1) of every K step in the ring, multiplied into d, each stage handed back to
// the producer once the MMAs of the step after it are issued (one group stays in flight). stage
// and phase carry from tile to tile; on return d holds the tile's products, every MMA done.
template <bool FP8, int STAGES, int STAGE_BYTES, int A_BYTES>
__device__ __forceinline__ void mainloop_256(float (&d)[128], const unsigned char *ring, uint64_t *full,
                                             uint64_t *empty, int kb, int half, int tid, int &stage, int &phase)
{
    constexpr int BK = elem<FP8>::BK, KSTEP = elem<FP8>::KSTEP;
    int prev = -1;
    for (int k = 0; k < kb; k++) {
        mbar_wait(&full[stage], phase);
        const unsigned char *a = ring + stage * STAGE_BYTES, *b = a + A_BYTES;
        const uint64_t da = smem_desc(a + half * 64 * 128), db = smem_desc(b);
        fence_acc(d);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / KSTEP; kk++) // one k step = 32 bytes = 2 descriptor units
            wgmma_256<FP8>(d, da + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        // keep this step's group in flight; the previous step's is done, so its stage goes back
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        if (prev >= 0 && tid == 0)
            mbar_arrive(&empty[prev]);
        prev = stage;
        if (++stage == STAGES)
            stage = 0, phase ^= 1;
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    fence_acc(d);
    if (prev >= 0 && tid == 0)
        mbar_arrive(&empty[prev]);
}

// The start every gated kernel shares: thread 0 sets up the ring's barriers (full[s]: the
// producer's one expect_tx arrival, then the copies' bytes; empty[s]: one arrival per consumer
// warpgroup that reads the stage, `readers`) and whatever more the schedule needs (`more`), and
// fences their initialization; then all threads meet. Returns the ring: dynamic shared memory
// rounded up to 1024 bytes, the alignment the 128-byte swizzle wants of every box.
template <int STAGES, class More>
__device__ __forceinline__ unsigned char *ring_start(unsigned char *smem_raw, uint64_t *full, uint64_t *empty,
                                                     unsigned readers, More more)
{
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], readers);
        }
        more();
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    return (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
}

// One warp's 16 rows of a wgmma D fragment, as bf16 pairs, into staging boxes of 64 rows x 64
// columns (128 bytes a row, 8 KiB a box, the 128-byte swizzle): v[2i + h] is the pair at row
// r0 + lane / 4 + 8h of the box, columns 8i + 2 * (lane % 4) of the 8 NI. An 8 x 8 block of the
// fragment is stmatrix's m8n8 layout, so one stmatrix.x4 stores four of them, 16 bytes a thread,
// where 4-byte stores take four instructions (CUTLASS's SM90 epilogues stage the same way); lane
// L gives the address of row L % 8 of block L / 8: blocks (i, h 0), (i, h 1), (i + 1, h 0),
// (i + 1, h 1). r0 is a multiple of 16, so a row's swizzle is its lane's L % 8.
template <int NI>
__device__ __forceinline__ void stage_rows16(unsigned char *boxes, int r0, const uint32_t (&v)[2 * NI], int lane)
{
    const int blk = lane / 8, r = r0 + lane % 8 + 8 * (blk % 2);
#pragma unroll
    for (int i = 0; i < NI; i += 2) {
        const int c = i + blk / 2; // the block's 16-byte chunk before the swizzle (i even: same box)
        const uint32_t a = smem_addr(boxes + c / 8 * 8192 + r * 128 + ((c % 8) ^ (r % 8)) * 16);
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v[2 * i]),
                     "r"(v[2 * i + 1]), "r"(v[2 * i + 2]), "r"(v[2 * i + 3])
                     : "memory");
    }
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

// A consumer warpgroup's staged output boxes of 64 rows x 128 bytes (8 KiB apart) out: the first
// to (col, row), a second (boxes 2) to (col + dcol, row + drow). Its writes made visible to the
// TMA engine, then its first thread issues the stores. Nobody waits for them but the next use of
// the staging tile and the CTA's end.
__device__ __forceinline__ void store_out(const CUtensorMap &out, const unsigned char *staged, int tid, int wg_bar,
                                          int col, int row, int dcol, int drow, int boxes = 2)
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    wg_barrier(wg_bar);
    if (tid == 0) {
        tma_store(&out, staged, col, row);
        if (boxes == 2)
            tma_store(&out, staged + 8192, col + dcol, row + drow);
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
}
#endif

} // namespace gated
} // namespace lf

#endif
