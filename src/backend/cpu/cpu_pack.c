/* The CPU GEMM's packers (cpu_gemm.c runs them): A's row blocks and B's column panels copied
 * into the micro-kernels' slivers, read through their strides (so nn, tn, nt and tt cost the same),
 * bf16/f16 widened to f32, or bf16 kept in k-pairs for the AVX512_BF16 micro-kernel; B's column
 * map (padding, a paired gate's gate and up columns side by side) and biases per sliver. Layer:
 * backend/cpu. */
#include <string.h>

#include "backend/cpu/cpu_gemm_impl.h"

/* dst[i*dstep] = src[start + i*step] as float, for i < n. */
void lf_cpu_gather(const void *src, lf_dtype dt, int64_t start, int64_t step, int64_t n, float *dst, int64_t dstep)
{
    if (step == 1 && dstep == 1) { /* contiguous run: a copy or a vectorizable widening loop */
        if (dt == LF_DTYPE_F32) {
            memcpy(dst, (const float *)src + start, (size_t)n * sizeof *dst);
        } else if (dt == LF_DTYPE_BF16) {
            const uint16_t *s = (const uint16_t *)src + start;
            for (int64_t i = 0; i < n; i++)
                dst[i] = lf_f32_from_bits((uint32_t)s[i] << 16);
        } else {
            const uint16_t *s = (const uint16_t *)src + start;
            for (int64_t i = 0; i < n; i++)
                dst[i] = lf_f32_from_f16(s[i]);
        }
        return;
    }
    switch (dt) {
    case LF_DTYPE_F32: {
        const float *s = (const float *)src + start;
        for (int64_t i = 0; i < n; i++)
            dst[i * dstep] = s[i * step];
        break;
    }
    case LF_DTYPE_BF16: {
        const uint16_t *s = (const uint16_t *)src + start;
        for (int64_t i = 0; i < n; i++)
            dst[i * dstep] = lf_f32_from_bf16(s[i * step]);
        break;
    }
    default: {
        const uint16_t *s = (const uint16_t *)src + start;
        for (int64_t i = 0; i < n; i++)
            dst[i * dstep] = lf_f32_from_f16(s[i * step]);
        break;
    }
    }
}

/* Pre-gate column of B feeding tile position p of the sliver whose first output column is o,
 * or -1 for padding. Gated tiles hold nr/2 gates then their nr/2 partners. */
static int64_t tile_col(const lf_cpu_plan *pl, int64_t o, int p)
{
    if (pl->g->ep.gate != LF_GATE_PAIRED) {
        int64_t j = o + p;
        return j < pl->N ? j : -1;
    }
    int half = pl->k->nr / 2, q = p < half ? p : p - half;
    int64_t j = o + q, grp = pl->g->ep.gate_group;
    if (j >= pl->No)
        return -1;
    int64_t gcol = (j / grp) * 2 * grp + j % grp;
    return p < half ? gcol : gcol + grp;
}

/* The sliver whose first output column is o: each tile position's pre-gate column of B (-1 for
 * padding) and its bias (0 without one), for packing and for the epilogue. */
void lf_cpu_sliver_map(const lf_cpu_plan *pl, int64_t o, int64_t *cols, float *bias)
{
    const lf_epilogue *ep = &pl->g->ep;
    for (int p = 0; p < pl->k->nr; p++) {
        const int64_t c = cols[p] = tile_col(pl, o, p);
        bias[p] = c >= 0 && ep->bias ? lf_load_f32(ep->bias, ep->bias_dtype, c) : 0.0f;
    }
}

/* B panel: output columns [o0, o0+nco) -> slivers of (K, nr) floats, plus each sliver's column
 * map and bias values for the epilogue. */
/* Whether each sliver's columns are one run (c, c+1, ...) followed only by padding. */
static int runs_ok(const int64_t *cols, int64_t nsl, int nr)
{
    if (nsl > LF_CPU_PANEL_MAX)
        return 0;
    for (int64_t s = 0; s < nsl; s++) {
        const int64_t *c = cols + s * nr;
        int v = 0;
        while (v < nr && c[v] >= 0)
            v++;
        if (v == 0)
            return 0;
        for (int p = 1; p < v; p++)
            if (c[p] != c[p - 1] + 1)
                return 0;
        for (int p = v; p < nr; p++)
            if (c[p] >= 0)
                return 0;
    }
    return 1;
}

/* The column maps and biases of the nsl slivers from output column o0 on. */
void lf_cpu_panel_map(const lf_cpu_plan *pl, int64_t o0, int64_t nsl, int64_t *cols, float *bias)
{
    for (int64_t s = 0; s < nsl; s++)
        lf_cpu_sliver_map(pl, o0 + s * pl->nro, cols + s * pl->k->nr, bias + s * pl->k->nr);
}

void lf_cpu_pack_b_panel(const lf_cpu_plan *pl, int64_t o0, int64_t nco, float *bp, int64_t *cols, float *bias)
{
    const lf_matrix *b = &pl->g->b;
    const int nr = pl->k->nr;
    const int64_t K = pl->K, nsl = (nco + pl->nro - 1) / pl->nro;
    lf_cpu_panel_map(pl, o0, nsl, cols, bias);
    if (lf_cpu_b_along_k(pl->g)) { /* columns contiguous along k (the nn.Linear weight): transpose */
        for (int64_t s = 0; s < nsl; s++) {
            int64_t src[LF_CPU_NR_MAX];
            for (int p = 0; p < nr; p++)
                src[p] = cols[s * nr + p] >= 0 ? cols[s * nr + p] * b->cs : -1;
            pl->k->pack_cols(b->data, b->dtype, src, K, nr, bp + s * K * nr);
        }
        return;
    }
    if (b->cs == 1 && runs_ok(cols, nsl, nr)) { /* row-major B, every sliver one run: the nn case */
        int64_t start[LF_CPU_PANEL_MAX];
        int valid[LF_CPU_PANEL_MAX];
        for (int64_t s = 0; s < nsl; s++) {
            int v = 0;
            while (v < nr && cols[s * nr + v] >= 0)
                v++;
            start[s] = cols[s * nr];
            valid[s] = v;
        }
        pl->k->pack_rows(b->data, b->dtype, b->rs, start, valid, nsl, K, nr, bp);
        return;
    }
    /* General strides or gated column maps: walk k outside so each row of B is read once, in
     * order, in runs of consecutive columns. */
    for (int64_t k = 0; k < K; k++)
        for (int64_t s = 0; s < nsl; s++) {
            const int64_t *cs = cols + s * nr;
            float *row = bp + s * K * nr + k * nr;
            int p = 0;
            while (p < nr) {
                if (cs[p] < 0) {
                    row[p++] = 0.0f;
                    continue;
                }
                int q = p + 1;
                while (q < nr && cs[q] == cs[q - 1] + 1)
                    q++;
                lf_cpu_gather(b->data, b->dtype, k * b->rs + cs[p] * b->cs, b->cs, q - p, row + p, 1);
                p = q;
            }
        }
}

/* A block: rows [i0, i0+mc) -> slivers of (K, mr) floats, zero rows past M. */
void lf_cpu_pack_a_block(const lf_cpu_plan *pl, int64_t i0, int64_t mc, float *ap)
{
    const lf_matrix *a = &pl->g->a;
    const int mr = pl->k->mr;
    const int64_t K = pl->K;
    for (int64_t s = 0; s * mr < mc; s++) {
        float *dst = ap + s * K * mr;
        const int64_t r0 = i0 + s * mr, valid = mc - s * mr < mr ? mc - s * mr : mr;
        if (a->cs == 1 || K == 1) { /* row-major A: each row is contiguous along k */
            int64_t src[LF_CPU_NR_MAX];
            for (int r = 0; r < mr; r++)
                src[r] = r < valid ? (r0 + r) * a->rs : -1;
            pl->k->pack_cols(a->data, a->dtype, src, K, mr, dst);
        } else { /* A's columns are the contiguous direction (or neither is): read k-rows */
            for (int64_t k = 0; k < K; k++) {
                lf_cpu_gather(a->data, a->dtype, k * a->cs + r0 * a->rs, a->rs, valid, dst + k * mr, 1);
                for (int r = (int)valid; r < mr; r++)
                    dst[k * mr + r] = 0.0f;
            }
        }
    }
}

/* The k-pair panels of the bf16 path (cpu_impl.h's pack_pairs layout): (K + 1) / 2 words a vector
 * where the f32 panels have K, so the workspace's f32 layout holds them. */

/* A panel of n vectors of K bf16 values from general strides: vector p at element start[p] (-1:
 * zeros), its values step apart. What pack_pairs does for vectors contiguous along k. */
static void pairs_strided(const uint16_t *base, const int64_t *start, int64_t step, int64_t K, int n, uint32_t *dst)
{
    for (int64_t kp = 0; kp < (K + 1) / 2; kp++)
        for (int p = 0; p < n; p++)
            dst[kp * n + p] = start[p] < 0 ? 0u : lf_bf16_pair(base, start[p], step, K, kp);
}

/* lf_cpu_pack_b_panel in k-pairs: B along k (lf_cpu_b_along_k; the plan takes pairs only then). */
void lf_cpu_pack_b_pairs(const lf_cpu_plan *pl, int64_t o0, int64_t nco, uint32_t *bp, int64_t *cols, float *bias)
{
    const lf_matrix *b = &pl->g->b;
    const int nr = pl->k->nr;
    const int64_t K = pl->K, kp = (K + 1) / 2, nsl = (nco + pl->nro - 1) / pl->nro;
    lf_cpu_panel_map(pl, o0, nsl, cols, bias);
    for (int64_t s = 0; s < nsl; s++) {
        int64_t src[LF_CPU_NR_MAX];
        for (int p = 0; p < nr; p++)
            src[p] = cols[s * nr + p] >= 0 ? cols[s * nr + p] * b->cs : -1;
        pl->k->pack_pairs(b->data, src, K, nr, bp + s * kp * nr);
    }
}

/* lf_cpu_pack_a_block in k-pairs: rows [i0, i0+mc) -> slivers of ((K + 1) / 2, mr) pairs, zero rows past M. */
void lf_cpu_pack_a_pairs(const lf_cpu_plan *pl, int64_t i0, int64_t mc, uint32_t *ap)
{
    const lf_matrix *a = &pl->g->a;
    const int mr = pl->k->mr;
    const int64_t K = pl->K, kp = (K + 1) / 2;
    for (int64_t s = 0; s * mr < mc; s++) {
        int64_t src[LF_CPU_NR_MAX];
        const int64_t r0 = i0 + s * mr;
        for (int r = 0; r < mr; r++)
            src[r] = r0 + r < i0 + mc ? (r0 + r) * a->rs : -1;
        if (a->cs == 1 || K == 1)
            pl->k->pack_pairs(a->data, src, K, mr, ap + s * kp * mr);
        else
            pairs_strided(a->data, src, a->cs, K, mr, ap + s * kp * mr);
    }
}
