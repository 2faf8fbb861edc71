/* The float64 references every fast path is checked against: the activations and the GEMM with
 * its whole epilogue (bias, C, alpha/beta, activation, the paired gate, FP8 scales and an e4m3 D in
 * 1 x 128 blocks), one element at a time on host memory. Layer: backend/. */
#include <math.h>
#include <stdlib.h>

#include "backend/backend_impl.h"

double lf_act_ref(lf_act act, double x)
{
    switch (act) {
    case LF_ACT_RELU:
        return x < 0 ? 0 : x; /* NaN stays NaN */
    case LF_ACT_GELU_TANH:    /* 0.5 x (1 + tanh(u)) written as x sigmoid(2u): no cancellation for x < 0 */
        return x / (1.0 + exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case LF_ACT_GELU_ERF:
        return 0.5 * x * erfc(-x * 0.7071067811865476);
    case LF_ACT_SILU:
        return x / (1.0 + exp(-x));
    default:
        return x;
    }
}

static double mat_get(const lf_matrix *m, int64_t i, int64_t j)
{
    return lf_load_f32(m->data, m->dtype, i * m->rs + j * m->cs);
}

/* Product term (i, k) x (k, j)'s scale in a scaled GEMM (row-wise, or a's 1 x 128 block times b's
 * 128 x 128 one). */
static double term_scale(const lf_gemm *g, int64_t i, int64_t k, int64_t j)
{
    const lf_epilogue *ep = &g->ep;
    const int64_t M = g->a.rows, K = g->a.cols, N = g->b.cols;
    return (double)ep->a_scale[lf_scale_index(ep->blockwise ? LF_SCALE_1X128 : LF_SCALE_ROWS, M, K, i, k)] *
           ep->b_scale[lf_scale_index(ep->blockwise ? LF_SCALE_128X128 : LF_SCALE_ROWS, N, K, j, k)];
}

/* Row i of an f8e4m3 D, computed into v: rounded to bf16 (in place), then quantized in 1 x 128 blocks. */
static void store_blocks(const lf_gemm *g, int64_t i, double *v)
{
    const int64_t n = g->d.cols;
    for (int64_t j = 0; j < n; j++)
        v[j] = lf_f32_from_bf16(lf_bf16_from_f32((float)v[j]));
    for (int64_t j0 = 0; j0 < n; j0 += LF_SCALE_BLOCK) {
        const int64_t j1 = j0 + LF_SCALE_BLOCK < n ? j0 + LF_SCALE_BLOCK : n;
        float amax = 0;
        for (int64_t j = j0; j < j1; j++)
            amax = fabsf((float)v[j]) > amax ? fabsf((float)v[j]) : amax;
        const float sc = lf_fp8_scale_of(amax), inv = 1.f / sc;
        g->ep.d_scale[lf_scale_index(LF_SCALE_1X128, g->d.rows, n, i, j0)] = sc;
        for (int64_t j = j0; j < j1; j++)
            ((uint8_t *)g->d.data)[i * g->d.rs + j * g->d.cs] = lf_f8e4m3_from_f32((float)v[j] * inv);
    }
}

lf_status lf_gemm_reference(const lf_gemm *g)
{
    LF_TRY(lf_gemm_validate(g));
    const int64_t M = g->a.rows, K = g->a.cols, N = g->b.cols;
    if (K > ((int64_t)1 << 40)) /* valid only with broadcast strides, and 2^40 sums an output: never done */
        return lf_fail(LF_EOVERFLOW, "lf_gemm_reference: K = %lld is past the 2^40 the reference sums", (long long)K);
    const lf_epilogue *ep = &g->ep;
    const int gated = ep->gate == LF_GATE_PAIRED;
    double *row = NULL;
    if (ep->d_scale) {
        row = malloc((size_t)g->d.cols * sizeof *row);
        if (!row)
            return lf_fail(LF_ENOMEM, "lf_gemm_reference: no memory for a row of %lld", (long long)g->d.cols);
        for (int64_t i = M; i < LF_SCALE_LD(M); i++) /* the padding rows of every block */
            for (int64_t j = 0; j < g->d.cols; j += LF_SCALE_BLOCK)
                ep->d_scale[lf_scale_index(LF_SCALE_1X128, M, g->d.cols, i, j)] = 1.f;
    }
    for (int64_t i = 0; i < M; i++) {
        for (int64_t jo = 0; jo < g->d.cols; jo++) {
            /* the one or two pre-gate columns this output needs */
            int64_t cols[2] = {jo, -1};
            if (gated) {
                int64_t grp = ep->gate_group;
                cols[0] = (jo / grp) * 2 * grp + jo % grp;
                cols[1] = cols[0] + grp;
            }
            double z[2] = {0, 0};
            for (int q = 0; q < 1 + gated; q++) {
                int64_t j = cols[q];
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += mat_get(&g->a, i, k) * mat_get(&g->b, k, j) * (ep->a_scale ? term_scale(g, i, k, j) : 1.0);
                s *= ep->alpha;
                if (g->c.data)
                    s += ep->beta * mat_get(&g->c, i, j);
                if (ep->bias)
                    s += lf_load_f32(ep->bias, ep->bias_dtype, j);
                z[q] = s;
            }
            double v = lf_act_ref(ep->act, z[0]);
            if (gated)
                v *= z[1];
            if (row)
                row[jo] = v;
            else
                lf_store_f32(g->d.data, g->d.dtype, i * g->d.rs + jo * g->d.cs, (float)v);
        }
        if (row)
            store_blocks(g, i, row);
    }
    free(row);
    (void)N;
    return LF_OK;
}
