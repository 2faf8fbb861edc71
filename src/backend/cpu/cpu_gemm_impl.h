/* What the CPU GEMM (cpu_gemm.c) and its packers (cpu_pack.c) share: a call's plan and the
 * packers that lay out its operands for the micro-kernels. Layer: backend/cpu. */
#ifndef LF_CPU_GEMM_IMPL_H
#define LF_CPU_GEMM_IMPL_H

#include "backend/cpu/cpu_impl.h"

/* One GEMM on the CPU: its shape, blocks and kernel set (plan_for in cpu_gemm.c). */
typedef struct lf_cpu_plan {
    const lf_gemm *g;
    const lf_cpu_kernels *k;
    int64_t M, N, K; /* N counts pre-gate columns */
    int64_t No;      /* output columns of D */
    int nro;         /* output columns per micro-tile: nr, or nr/2 when gated */
    int64_t mc, nco; /* rows per A block, output columns per B panel */
    int pairs;       /* bf16 A and B packed in k-pairs for the kernel set's ukr_bf16 (pack_pairs) */
    int64_t steps;   /* a packed vector's 4-byte words: K floats, or (K + 1) / 2 pairs */
    const void *bpk; /* B packed once (lf_cpu_pack_b): every sliver, in column order, in the words
                        pairs says; NULL: pack per call */
} lf_cpu_plan;

/* Whether B's columns run along k (an nn.Linear weight seen as W^T), or there is one k: what the
 * few-rows dot products, the column packers and the bf16 path read straight. */
static inline int lf_cpu_b_along_k(const lf_gemm *g)
{
    return g->b.rs == 1 || g->a.cols == 1;
}

/* dst[i*dstep] = src[start + i*step] as float, for i < n. */
void lf_cpu_gather(const void *src, lf_dtype dt, int64_t start, int64_t step, int64_t n, float *dst, int64_t dstep);
/* The sliver whose first output column is o: each tile position's pre-gate column of B (-1 for
 * padding) and its bias (0 without one), for packing and for the epilogue. */
void lf_cpu_sliver_map(const lf_cpu_plan *pl, int64_t o, int64_t *cols, float *bias);
/* The column maps and biases of the nsl slivers from output column o0 on. */
void lf_cpu_panel_map(const lf_cpu_plan *pl, int64_t o0, int64_t nsl, int64_t *cols, float *bias);
/* B's panel of output columns [o0, o0 + nco) into slivers of (K, nr) floats at bp, with each
 * sliver's column map and biases; and in bf16 k-pairs ((K + 1) / 2, nr) (B along k). */
void lf_cpu_pack_b_panel(const lf_cpu_plan *pl, int64_t o0, int64_t nco, float *bp, int64_t *cols, float *bias);
void lf_cpu_pack_b_pairs(const lf_cpu_plan *pl, int64_t o0, int64_t nco, uint32_t *bp, int64_t *cols, float *bias);
/* A's rows [i0, i0 + mc) into slivers of (K, mr) floats, zero rows past M; and in bf16 k-pairs. */
void lf_cpu_pack_a_block(const lf_cpu_plan *pl, int64_t i0, int64_t mc, float *ap);
void lf_cpu_pack_a_pairs(const lf_cpu_plan *pl, int64_t i0, int64_t mc, uint32_t *ap);

#endif
