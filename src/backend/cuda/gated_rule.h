/* Which schedule the Hopper gated GEMM runs at a shape (gated_gemm.cu): a pure function of the
 * shape and the SM count, in C so that the CPU tests hold it to the choices measured on an H200
 * (test_backend_cpu). The numbers behind each branch are beside it; the runs are in
 * bench/RESULTS.md ("ping-pong against cooperative" and the later entries; µs cooperative /
 * ping-pong, bf16 unless said). Layer: backend/cuda. */
#ifndef LF_BACKEND_CUDA_GATED_RULE_H
#define LF_BACKEND_CUDA_GATED_RULE_H

#include "backend/backend_impl.h"

/* The cooperative kernel's tile: 128 tokens x 128 columns of h (its 128 gates and their 128 ups);
 * a ping-pong tile is half of it (gated_gemm.cu asserts both against the kernels' sizes). */
#define LF_GATED_COOP_ROWS 128
#define LF_GATED_COOP_COLS 128

/* M tokens, K the model dim, H the hidden dim (columns of h), gate_group the rows of w between a
 * gate and its up, in_fp8: x and w in e4m3, out_fp8: h written as e4m3; sms the GPU's SM count;
 * forced the schedule asked for (LF_GATED_AUTO: none).
 * - A gate group that is not a multiple of 128 fits only ping-pong's 64-column halves, and the
 *   e4m3 output only the cooperative tiles (whole 128-column scale blocks): those decide first.
 * - Below 128 tokens a tile is mostly padding and the two ping-pong consumers take turns on the
 *   few tiles there are: cooperative (64 x 4096 -> 14336 68.5 / 91.8).
 * - With four waves of cooperative tiles or more, the 128 x 256 tile: ping-pong's third more L2
 *   traffic per FLOP and one warpgroup issuing at a time cost more than its hidden epilogue saves
 *   (8192 x 4096 -> 11008 2207 / 2463, 8192 x 4096 -> 14336 2890 / 3232, 2048 x 4096 -> 14336
 *   721 / 755, 8192 x 768 -> 3072 113.5 / 115.1). In bf16 the offload kernel (the activation on
 *   the producer's spare warps) beat the cooperative one at every such shape, two rounds, µs
 *   cooperative / offload: 8192 x 768 -> 3072 130.4 / 124.4, 131.1 / 120.4; 4096 x 768 -> 3072
 *   58.2 / 56.7, 58.7 / 57.4; 8192 x 4096 -> 11008 2207 / 2146, 2217 / 2146; 8192 x 4096 -> 14336
 *   2891 / 2802, 2908 / 2803; 4096 x 2048 -> 8192 422.8 / 403.9, 422.1 / 407.6; 2048 x 4096 ->
 *   14336 722.0 / 699.1, 719.9 / 698.3; 1024 x 4096 -> 14336 362.7 / 353.2, 366.4 / 354.2. Under
 *   four waves it lost (256 x 4096 -> 14336 96.5 / 108.3, 100.7 / 105.9; 128 and 64 tokens 4-5%
 *   slower), and in FP8, where a tile's MMAs take half as long, its three warps of activation
 *   fall behind them (8192 x 768 -> 3072 74.4-76.9 / 87.3-88.0; at 8192 x 4096 -> 11008 a draw).
 * - Under four waves the last wave decides. In half-tiles the cooperative kernel ends after
 *   2 * ceil(tiles / sms) steps and ping-pong after ceil(2 * tiles / sms). Ping-pong where it ends
 *   sooner: 512 x 4096 -> 14336 (448 tiles on 132 SMs: 8 against 7) 201-202 / 191-196, then a
 *   draw, then 195.0 / 185.0 (FP8 103.7 / 97.2); 1024 x 768 -> 3072 (192 tiles: 4 against 3)
 *   22.0 / 16.7. Where both end together, ping-pong only for K under 2048, where its hidden
 *   epilogue is a large share of a tile's time: 256 x 4096 -> 14336 (224 tiles: 4 against 4)
 *   108.4 / 97.8 and 98.3 / 112.3, then 91.0-91.4 / 97.5-98.7 and 105.1 / 112.9 (with ping-pong
 *   the gated SwiGLU MLP was slower than PyTorch eager there); 128 tokens (2 against 2)
 *   65.2-66.5 / 64.5-65.1, a draw. */
static inline lf_gated_schedule lf_gated_rule(long long M, long long K, long long H, long long gate_group, int in_fp8,
                                              int out_fp8, int sms, lf_gated_schedule forced)
{
    if (gate_group % LF_GATED_COOP_COLS)
        return LF_GATED_PINGPONG;
    if (out_fp8)
        return LF_GATED_COOPERATIVE;
    if (forced != LF_GATED_AUTO)
        return forced;
    const long long n = sms > 0 ? sms : 1,
                    tiles = (M + LF_GATED_COOP_ROWS - 1) / LF_GATED_COOP_ROWS * (H / LF_GATED_COOP_COLS);
    if (M < LF_GATED_COOP_ROWS)
        return LF_GATED_COOPERATIVE;
    if (tiles >= 4 * n)
        return in_fp8 ? LF_GATED_COOPERATIVE : LF_GATED_OFFLOAD;
    const long long coop_end = 2 * ((tiles + n - 1) / n), pp_end = (2 * tiles + n - 1) / n;
    return pp_end < coop_end || K < 2048 ? LF_GATED_PINGPONG : LF_GATED_COOPERATIVE;
}

#endif
