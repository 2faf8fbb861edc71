// The gated GEMM's ping-pong schedule (sm_90a), as CUTLASS's warp-specialized ping-pong kernels:
// the two consumer warpgroups work on different output tiles, so while one runs its epilogue
// (act(g) * u, the staging tile, the TMA store) the other's wgmma keeps the tensor cores busy.
// In the cooperative schedule (gated_gemm.cu) both consumers finish a tile together and the
// tensor cores wait out the epilogue: at K = 768 that is a tenth of a tile's time.
//
//   - tiles of 128 tokens x 128 product columns (64 gates + their 64 ups): one consumer holds
//     a whole tile, two wgmma m64n128k16 per 16 k (rows 0-63 and 64-127), the same 128 fp32
//     accumulators a thread holds in the cooperative kernel;
//   - the producer fills a 6-stage ring (32 KiB a stage) with the CTA's tiles in order; the
//     CTA's i-th tile belongs to consumer i % 2, which finds its stages at ring position i * kb;
//     each stage is released by the one consumer that read it;
//   - the mainloops take turns (an mbarrier per consumer, `turn`): tile i's starts once tile
//     i - 1's has seen all its stages arrive. Besides keeping one tile's MMAs together, this is
//     what makes the parity waits sound: a consumer waiting on ring position p must know that
//     position p - STAGES, on the same barrier, has completed, or a parity wait would take the
//     earlier phase for its own (a consumer left to run ahead reads the other's stage);
//   - each consumer stages its output in its own 16 KiB of shared memory.
// The cost: each 128-token block of x is loaded for 128 product columns instead of 256, so a stage
// (x 16 KiB + weights 16 KiB) feeds half the MMAs a 48 KiB cooperative stage does: a third more
// bytes from L2 per FLOP. Which one wins is a measurement (gated_gemm.cu's
// gated_schedule, bench/RESULTS.md). Layer: backend/cuda.
#include "backend/cuda/gated_kernels.cuh"

namespace lf {
namespace gated {
using namespace pp;

// Long, and read best as one, for the reason coop_body's comment gives (gated_gemm.cu): the
// producer and the two consumers taking turns are one pipeline, its barriers read in one place.
// QOUT (an e4m3 h) is the cooperative kernel's alone: a ping-pong tile holds 64 of a row's 128
// columns, half a scale's block. ds and ds_ld are unused here.
template <int ACT, bool FP8, bool QOUT>
__device__ __forceinline__ void pingpong_body(const CUtensorMap &x, const CUtensorMap &w, const CUtensorMap &out,
                                              const float *sa, const float *sb, float *ds, int ds_ld, int M, int H,
                                              int K, int G, int band)
{
    static_assert(!QOUT, "the ping-pong kernel writes bf16 h");
    (void)ds, (void)ds_ld;
    constexpr int BK = elem<FP8>::BK, KSTEP = elem<FP8>::KSTEP;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES], turn[2];
    unsigned char *ring = ring_start<STAGES>(smem_raw, full, empty, 1, [&] { // one consumer reads a stage
        for (int c = 0; c < 2; c++)
            mbar_init(&turn[c], 1); // the other consumer's mainloop has seen its last stage
    });
    unsigned char *out_tiles = ring + STAGES * STAGE_BYTES;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int m_tiles = (M + BM - 1) / BM, n_tiles = H / (BN / 2), tiles = m_tiles * n_tiles;
    const int kb = (K + BK - 1) / BK;

    if (wg == 0) { // producer: every tile of this CTA, in order, whichever consumer takes it
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (tid == 0)
            produce<BM, BN, BK, STAGES>(x, w, ring, full, empty, M, H, K, G, band);
    } else { // consumer c takes the CTA's tiles c, c + 2, c + 4, ...
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
        const int c = wg - 1, warp = tid / 32, lane = tid % 32;
        unsigned char *stage_out = out_tiles + c * OUT_BYTES;
        float d0[64], d1[64]; // rows 0-63 and 64-127 of the tile
#pragma unroll
        for (int i = 0; i < 64; i++)
            d0[i] = d1[i] = 0.f;
        int i = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x, i++) {
            if ((i & 1) != c)
                continue;
            int mb, nb;
            tile_of(t, m_tiles, n_tiles, band, mb, nb);
            const long long first = (long long)i * kb; // this tile's first position in the ring
            int stage = (int)(first % STAGES), phase = (int)(first / STAGES & 1), prev = -1;
            if (i > 0) // tile i - 1 (the other consumer's ((i - 1) / 2)-th) has seen all its stages
                mbar_wait(&turn[c], (i - 1) / 2 & 1);
            for (int k = 0; k < kb; k++) {
                mbar_wait(&full[stage], phase);
                if (k == kb - 1 && tid == 0) // the other consumer's turn
                    mbar_arrive(&turn[c ^ 1]);
                const unsigned char *a = ring + stage * STAGE_BYTES, *b = a + A_BYTES;
                const uint64_t da0 = smem_desc(a), da1 = smem_desc(a + (BM / 2) * ROW_BYTES), db = smem_desc(b);
                fence_acc(d0);
                fence_acc(d1);
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
                for (int kk = 0; kk < BK / KSTEP; kk++) { // one k step = 32 bytes = 2 descriptor units
                    wgmma_128<FP8>(d0, da0 + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
                    wgmma_128<FP8>(d1, da1 + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
                }
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); // the previous step's are done
                if (prev >= 0 && tid == 0)
                    mbar_arrive(&empty[prev]);
                prev = stage;
                if (++stage == STAGES)
                    stage = 0, phase ^= 1;
            }
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            fence_acc(d0);
            fence_acc(d1);
            if (prev >= 0 && tid == 0)
                mbar_arrive(&empty[prev]);
            // Epilogue. m64n128's D fragment: register 4j + 2h + e holds row 16*warp + lane/4 + 8h
            // of its 64, column 8j + 2*(lane%4) + e; columns 0-63 are gates, 64-127 their ups, so
            // gate register r pairs with up register r + 32. Each 64-row half goes to one 64 x 64
            // box of this consumer's staging tile, 128-byte swizzled as in the cooperative kernel.
            // FP8: scales as in the cooperative kernel.
            const int j0 = nb * (BN / 2), gate_row = j0 / G * 2 * G + j0 % G;
            if (tid == 0) // this consumer's previous stores have finished reading its staging tile
                asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            wg_barrier(1 + c);
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const float(&d)[64] = half ? d1 : d0;
                uint32_t v[16];
                fragment_pairs<FP8, 8>(d, mb * BM + half * (BM / 2) + warp * 16 + lane / 4, M, sa, sb, gate_row, G,
                                       lane, [&](int p, float g0, float g1, float u0, float u1) {
                                           v[p] = bf16x2_bits(act_pair<ACT>(g0, g1, u0, u1));
                                       });
                stage_rows16<8>(stage_out + half * 8192, warp * 16, v, lane);
            }
            store_out(out, stage_out, tid, 1 + c, nb * (BN / 2), mb * BM, 0, BM / 2); // rows 0-63, then 64-127
        }
        if (tid == 0) // the last stores must have read shared memory before the CTA leaves
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
#else
    __trap(); // built only for sm_90a; the host checks the device before launching
#endif
}

LF_GATED_KERNELS(pingpong_body, 128x128_pingpong)

} // namespace gated
} // namespace lf
