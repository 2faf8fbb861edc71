// The gated GEMM's offload schedule (sm_90a): the cooperative kernel's 128 x 256 tile and
// mainloop, with the activation taken off the consumers. In the cooperative kernel (gated_gemm.cu)
// the two consumer warpgroups compute act(g) * u, stage h and hand it to the TMA engine while
// the tensor cores wait; at K = 768 that epilogue is a fifth of the kernel's time (bench/RESULTS.md:
// 118 us with it, 92 without). Ping-pong hides it behind the other consumer's MMAs but halves the
// tile. Here the producer warpgroup, whose warps 1-3 sat idle beside the one thread that issues
// the TMA copies, does it:
//   - the consumers write a tile's g and u, as bf16, into two 32 KiB tiles of shared memory
//     (laid out as the staged output, 64 x 64 boxes in the 128-byte swizzle) and go back to their
//     MMAs; in FP8 they apply the row and column scales first;
//   - warps 1-3 (96 threads) compute act(g) * u in place over the g tile, 16 bytes at a time, and
//     one of them hands it to the TMA engine; once the engine has read it the tiles are free;
//   - two mbarriers hand the pair of tiles back and forth (gu_full: both consumer warpgroups
//     have written; gu_empty: the stores have read);
//   - the tiles take the ring's fourth stage: 3 stages of 48 KiB, 209 KiB in all.
// What it costs: g and u are rounded to bf16 before act(g) * u, as PyTorch's eager forward rounds
// them (the cooperative kernel rounds only the product; relative RMS error against float64 2.9e-3
// against 1.7e-3), and the ring is a stage shorter (the cooperative kernel with 3 stages was
// measured no slower). Three warps keep up with bf16 MMAs but not with FP8's, which take half the
// time: at 8192 x 768 -> 3072 FP8 the offload kernel ran 87-88 us against 74-77 cooperative. So
// the rule (gated_rule.h) takes it in bf16 at four waves of tiles or more, where it was 2-8%
// faster at every shape measured; LINFUSE_GATED_SCHEDULE=offload forces it anywhere.
// Layer: backend/cuda.
#include "backend/cuda/gated_kernels.cuh"

namespace lf {
namespace gated {
using namespace offload;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// act(g) * u for eight bf16 pairs of columns held as 16 bytes each.
template <int ACT> __device__ __forceinline__ uint4 act_mul8(uint4 g, uint4 u)
{
    const __nv_bfloat162 *gp = reinterpret_cast<const __nv_bfloat162 *>(&g),
                         *up = reinterpret_cast<const __nv_bfloat162 *>(&u);
    uint4 h;
    __nv_bfloat162 *hp = reinterpret_cast<__nv_bfloat162 *>(&h);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 gf = __bfloat1622float2(gp[i]), uf = __bfloat1622float2(up[i]);
        hp[i] = __floats2bfloat162_rn(act_of<ACT>(gf.x) * uf.x, act_of<ACT>(gf.y) * uf.y);
    }
    return h;
}
#endif

// Long, and read best as one, for the reason coop_body's comment gives (gated_gemm.cu): the
// producer, the epilogue warps and the consumers are one pipeline, its barriers read in one place.
template <int ACT, bool FP8, bool QOUT>
__device__ __forceinline__ void offload_body(const CUtensorMap &x, const CUtensorMap &w, const CUtensorMap &out,
                                             const float *sa, const float *sb, float *ds, int ds_ld, int M, int H,
                                             int K, int G, int band)
{
    static_assert(!QOUT, "the offload kernel writes bf16 h");
    (void)ds, (void)ds_ld;
    constexpr int BK = elem<FP8>::BK;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES], gu_full, gu_empty;
    unsigned char *ring = ring_start<STAGES>(smem_raw, full, empty, 2, [&] {
        mbar_init(&gu_full, 2);  // one per consumer warpgroup, after its writes
        mbar_init(&gu_empty, 1); // the thread that issued the stores, once they have read
    });
    unsigned char *g_tile = ring + STAGES * STAGE_BYTES, *u_tile = g_tile + GU_BYTES;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int m_tiles = (M + BM - 1) / BM, n_tiles = H / (BN / 2), tiles = m_tiles * n_tiles;
    const int kb = (K + BK - 1) / BK;

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 72;");
        if (tid == 0) {
            produce<BM, BN, BK, STAGES>(x, w, ring, full, empty, M, H, K, G, band);
        } else if (tid >= 32) { // warps 1-3: the epilogue
            const int wt = tid - 32;
            uint4 *gv = reinterpret_cast<uint4 *>(g_tile);
            const uint4 *uv = reinterpret_cast<const uint4 *>(u_tile);
            int n = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x, n++) {
                int mb, nb;
                tile_of(t, m_tiles, n_tiles, band, mb, nb);
                mbar_wait(&gu_full, n & 1);
#pragma unroll 2
                for (int i = wt; i < GU_BYTES / 16; i += 96)
                    gv[i] = act_mul8<ACT>(gv[i], uv[i]);
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                asm volatile("bar.sync 3, 96;" ::: "memory");
                if (wt == 0) {
                    for (int half = 0; half < 2; half++) { // rows 0-63, then 64-127; columns 0-63, 64-127
                        const unsigned char *staged = g_tile + half * (GU_BYTES / 2);
                        tma_store(&out, staged, nb * (BN / 2), mb * BM + half * (BM / 2));
                        tma_store(&out, staged + 8192, nb * (BN / 2) + 64, mb * BM + half * (BM / 2));
                    }
                    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
                    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
                    mbar_arrive(&gu_empty);
                }
            }
            if (wt == 0) // the last stores must have finished before the CTA leaves
                asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        }
    } else { // consumers: warpgroup 1 takes rows 0-63 of each tile, warpgroup 2 rows 64-127
        asm volatile("setmaxnreg.inc.sync.aligned.u32 216;");
        const int half = wg - 1, warp = tid / 32, lane = tid % 32;
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; i++)
            d[i] = 0.f;
        int stage = 0, phase = 0, gu_phase = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x, gu_phase ^= 1) {
            int mb, nb;
            tile_of(t, m_tiles, n_tiles, band, mb, nb);
            mainloop_256<FP8, STAGES, STAGE_BYTES, A_BYTES>(d, ring, full, empty, kb, half, tid, stage, phase);
            // g and u out as bf16, where the cooperative kernel stages h: the D fragment's register
            // 4i + 2h + e holds row 16 * warp + lane / 4 + 8h, column 8i + 2 * (lane % 4) + e;
            // gate register r pairs with up register r + 64 (gated_gemm.cu).
            const int j0 = nb * (BN / 2), gate_row = j0 / G * 2 * G + j0 % G;
            uint32_t gp[32], up[32];
            fragment_pairs<FP8, 16>(d, mb * BM + half * (BM / 2) + warp * 16 + lane / 4, M, sa, sb, gate_row, G, lane,
                                    [&](int p, float g0, float g1, float u0, float u1) {
                                        gp[p] = bf16x2_bits(__floats2bfloat162_rn(g0, g1));
                                        up[p] = bf16x2_bits(__floats2bfloat162_rn(u0, u1));
                                    });
            mbar_wait(&gu_empty, gu_phase ^ 1); // the previous tile's stores have read the tiles
            stage_rows16<16>(g_tile + half * (GU_BYTES / 2), warp * 16, gp, lane);
            stage_rows16<16>(u_tile + half * (GU_BYTES / 2), warp * 16, up, lane);
            wg_barrier(1 + half); // the warpgroup's writes, then one arrival for them
            if (tid == 0)
                mbar_arrive(&gu_full);
        }
    }
#else
    __trap(); // built only for sm_90a; the host checks the device before launching
#endif
}

LF_GATED_KERNELS(offload_body, 128x256_offload)

} // namespace gated
} // namespace lf
