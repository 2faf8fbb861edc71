/* FP8 on the CPU, what the case table (test_cases, cases.c: the quantizers' bytes in every form,
 * the scaled GEMMs where a device has them) does not hold: lf_quantize_fp8's refusals (a non-finite
 * weight, a vector, an f8e4m3 input), compiled as a step of a plan; what the profiler's observer
 * sees of it; scaled GEMM descriptions, the float64 reference with row and block scales and an
 * f8e4m3 d, and the CPU's refusal of them by name; the fp8 MLP variant running gated bf16 here,
 * with a note; and the FP8 recipe's accuracy, emulated exactly. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "linfuse/compile.h"
#include "linfuse/nn.h"
#include "testutil.h"

/* A forward for compile mode: in[0] quantized per row (ctx NULL: the codes are the output) or in
 * 1 x 128 blocks (ctx non-NULL: the scales are). */
static lf_status quantize_fwd(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)n;
    lf_tensor *q = NULL, *scale = NULL;
    lf_status s = ctx ? lf_quantize_fp8_1x128(&q, &scale, in[0]) : lf_quantize_fp8(&q, &scale, in[0]);
    *out = ctx ? scale : q;
    lf_tensor_free(ctx ? q : scale);
    return s;
}

static int quantize_ops_seen, quant_kernels_seen;
static char note_seen[400];
static void obs_begin(void *user, lf_op_id op, int n, const lf_op_arg *args)
{
    (void)user, (void)n, (void)args;
    quantize_ops_seen += op == LF_OP_QUANTIZE_FP8;
}
static void obs_end(void *user, lf_op_id op, lf_status s)
{
    (void)user, (void)op, (void)s;
}
static void obs_kernel_begin(void *user, lf_device dev, lf_kernel_info *info)
{
    (void)user, (void)dev, (void)info;
}
static void obs_kernel_end(void *user, lf_device dev, const lf_kernel_info *info)
{
    (void)user, (void)dev;
    quant_kernels_seen += info && info->name && !strcmp(info->name, "lf_cpu_quantize_fp8_bf16_rowwise");
}
static void obs_note(void *user, const char *text)
{
    (void)user;
    snprintf(note_seen, sizeof note_seen, "%s", text);
}
static void obs_note_end(void *user)
{
    (void)user;
}
static const lf_op_observer observer = {.op_begin = obs_begin,
                                        .op_end = obs_end,
                                        .kernel_begin = obs_kernel_begin,
                                        .kernel_end = obs_kernel_end,
                                        .note_begin = obs_note,
                                        .note_end = obs_note_end};

static void test_quantize(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 23);
    int64_t ws[2] = {37, 65};
    lf_tensor *w = rand_tensor(&rng, LF_DTYPE_BF16, 2, ws), *q1 = NULL, *s1 = NULL;
    float *f = malloc(37 * 65 * sizeof *f);
    OK(lf_tensor_to_f32(w, f, 37 * 65));
    OK(lf_quantize_fp8(&q1, &s1, w));
    /* refusals, with nothing handed out */
    lf_tensor *q = NULL, *sc = NULL;
    f[2] = NAN;
    lf_tensor *wn = NULL, *v = NULL;
    OK(lf_tensor_from_f32(&wn, LF_DTYPE_F32, 2, ws, f, LF_DEVICE_CPU));
    FAILS(LF_EINVAL, "element [0, 2] is nan; a tensor to quantize must be finite", lf_quantize_fp8(&q, &sc, wn));
    CHECK(!q && !sc, "nothing handed out on failure");
    OK(lf_tensor_from_f32(&v, LF_DTYPE_F32, 1, (int64_t[]){8}, f + 100, LF_DEVICE_CPU));
    FAILS(LF_ESHAPE, "must have 2 dims", lf_quantize_fp8(&q, &sc, v));
    FAILS(LF_EDTYPE, "f8e4m3, a dtype linfuse stores", lf_quantize_fp8(&q, &sc, q1));
    FAILS(LF_EINVAL, "'scale' is NULL", lf_quantize_fp8(&q, NULL, w));
    /* compiled: the quantization is a step of the plan (activations quantized inside a forward),
     * its codes and scales those of an eager call on the input of the run, not the capture's */
    for (int blocks = 0; blocks < 2; blocks++) {
        lf_compiled *c = NULL;
        lf_tensor *y = NULL, *eq = NULL, *es = NULL, *w3 = rand_tensor(&rng, LF_DTYPE_BF16, 2, w->shape);
        OK(lf_compile(&c, quantize_fwd, blocks ? &rng : NULL, 1, &w, NULL));
        if (c) {
            OK(lf_compiled_run(c, 1, &w3, &y));
            OK(blocks ? lf_quantize_fp8_1x128(&eq, &es, w3) : lf_quantize_fp8(&eq, &es, w3));
            const lf_tensor *want = blocks ? es : eq;
            char *plan = NULL;
            OK(lf_compiled_describe(c, &plan));
            CHECK(y && lf_tensor_numel(y) == lf_tensor_numel(want) &&
                      !memcmp(lf_tensor_data(y), lf_tensor_data(want),
                              (size_t)lf_tensor_numel(want) * lf_dtype_size(want->dtype)),
                  "compiled quantization (%s) writes what an eager one does",
                  blocks ? "1 x 128 scales" : "per-row codes");
            CHECK(lf_compiled_get_stats(c).kernels == 1 && plan && strstr(plan, blocks ? "quantize_fp8" : "per row"),
                  "one step in the plan: %s", plan ? plan : "");
            free(plan);
        }
        lf_compiled_free(c);
        lf_tensor_free(eq), lf_tensor_free(es), lf_tensor_free(w3), lf_tensor_free(y);
    }
    /* the profiler sees it as an op of its own */
    lf_ops_set_observer(&observer);
    OK(lf_quantize_fp8(&q, &sc, w));
    lf_ops_set_observer(NULL);
    CHECK(quantize_ops_seen == 1 && !strcmp(lf_op_name(LF_OP_QUANTIZE_FP8), "lf::quantize_fp8"),
          "lf::quantize_fp8 seen by the observer once (%d)", quantize_ops_seen);
    CHECK(quant_kernels_seen == 1, "its kernel reported as lf_cpu_quantize_fp8_bf16_rowwise (%d)", quant_kernels_seen);
    lf_tensor *list[] = {w, q1, s1, wn, v, q, sc};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        lf_tensor_free(list[i]);
    free(f);
}

/* What FP8 costs an MLP, emulated exactly on the CPU: x quantized per token and every weight per
 * output channel (lf_quantize_fp8), products of the decoded values summed in float64 (FP8 tensor
 * cores multiply e4m3 exactly and add in fp32), the hidden activation for the down GEMM kept in
 * bf16 or quantized per token to e4m3 again. Each forward's relative RMS and largest error
 * against the float64 forward of the unquantized module, beside linfuse's bf16 forward, GeGLU
 * and SwiGLU (LF_TEST_VERBOSE=1 prints them). Measured at 64 x 256 -> 512: bf16 3.8e-3 relative
 * RMS; FP8 with a bf16 hidden 5.7e-2 to 5.8e-2, with an e4m3 hidden 6.2e-2 to 6.3e-2 (E4M3's half
 * step is 2^-4: about 3.6e-2 RMS per value, and a sum of products of random sign keeps that
 * relative error, twice over); the bounds give each a fifth more. The fp8 variant's recipe (h in
 * 1 x 128 blocks, the down weight in 128 x 128 ones) measured 6.17e-2 / 6.26e-2: no worse than per
 * token (random data has no outliers for the finer blocks to isolate). */
static void test_fp8_mlp_accuracy(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 41);
    const int64_t T = 64, D = 256, H = 512;
    for (int k = 0; k < 2; k++) {
        const lf_act act = k ? LF_ACT_SILU : LF_ACT_GELU_TANH;
        lf_nn_gated_mlp m;
        lf_nn_gated_mlp_opts o = {D, H, LF_DTYPE_BF16, LF_DEVICE_CPU, act};
        OK(lf_nn_gated_mlp_init(&m, &o, &rng));
        int64_t xs[2] = {T, D};
        lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs), *yb = NULL;
        OK(lf_nn_gated_mlp_forward_variant(&m, LF_MLP_EAGER, x, &yb));
        double *X = to_f64(x), *GU = to_f64(m.gate_up), *WD = to_f64(m.down.weight), *YB = to_f64(yb);
        /* the float64 forward, and the FP8 one */
        double *g = mm_nt(X, GU, T, 2 * H, D), *Xq = fp8_round_trip(x), *GUq = fp8_round_trip(m.gate_up),
               *WDq = fp8_round_trip(m.down.weight), *gq = mm_nt(Xq, GUq, T, 2 * H, D);
        double *h = gated_mid(g, T, H, act), *hq = gated_mid(gq, T, H, act);
        double *ref = mm_nt(h, WD, T, D, H), *hb = malloc((size_t)(T * H) * sizeof *hb);
        for (int64_t i = 0; i < T * H; i++)
            hb[i] = lf_f32_from_bf16(lf_bf16_from_f32((float)hq[i]));
        double *h8 = fp8_round_trip_values(hq, T, H, LF_DTYPE_F32, LF_SCALE_ROWS), *y_b = mm_nt(hb, WDq, T, D, H),
               *y_8 = mm_nt(h8, WDq, T, D, H);
        /* the fp8 variant's recipe: h rounded to bf16 and quantized in 1 x 128 blocks, the down weight in
         * 128 x 128 ones */
        double *hk = fp8_round_trip_values(hq, T, H, LF_DTYPE_BF16, LF_SCALE_1X128),
               *WDk = fp8_round_trip_as(m.down.weight, LF_SCALE_128X128), *y_k = mm_nt(hk, WDk, T, D, H);
        double r_bf, m_bf, r_fb, m_fb, r_f8, m_f8, r_k, m_k;
        rel_errors(YB, ref, T * D, &r_bf, &m_bf);
        rel_errors(y_b, ref, T * D, &r_fb, &m_fb);
        rel_errors(y_8, ref, T * D, &r_f8, &m_f8);
        rel_errors(y_k, ref, T * D, &r_k, &m_k);
        if (getenv("LF_TEST_VERBOSE"))
            printf("%s %lldx%lldx%lld: bf16 rel RMS %.2e max %.2e; FP8, hidden bf16 %.2e / %.2e; FP8, hidden e4m3 "
                   "per token %.2e / %.2e; FP8, hidden and down in blocks %.2e / %.2e\n",
                   lf_act_name(act), (long long)T, (long long)D, (long long)H, r_bf, m_bf, r_fb, m_fb, r_f8, m_f8, r_k,
                   m_k);
        CHECK(r_k < 7e-2 && m_k < 9e-2 && r_k < 1.02 * r_f8,
              "%s FP8, blocks: rel RMS %.3g (no worse than per token, %.3g), max %.3g", lf_act_name(act), r_k, r_f8,
              m_k);
        CHECK(r_bf < 5e-3 && m_bf < 1e-2, "%s bf16 forward: rel RMS %.3g, max %.3g", lf_act_name(act), r_bf, m_bf);
        CHECK(r_fb < 7e-2 && m_fb < 9e-2, "%s FP8, bf16 hidden: rel RMS %.3g, max %.3g", lf_act_name(act), r_fb, m_fb);
        CHECK(r_f8 < 7.5e-2 && m_f8 < 1e-1, "%s FP8, e4m3 hidden: rel RMS %.3g, max %.3g", lf_act_name(act), r_f8,
              m_f8);
        CHECK(r_fb > 2 * r_bf && r_f8 >= r_fb * 0.9,
              "%s: FP8 costs more than bf16 (%.3g vs %.3g), e4m3 hidden no less than bf16 hidden (%.3g)",
              lf_act_name(act), r_fb, r_bf, r_f8);
        double *list[] = {X, GU, WD, YB, g, Xq, GUq, WDq, gq, h, hq, ref, hb, h8, y_b, y_8, hk, WDk, y_k};
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
            free(list[i]);
        lf_tensor_free(x), lf_tensor_free(yb);
        lf_nn_gated_mlp_free(&m);
    }
}

/* Scaled GEMM descriptions: what lf_gemm_validate takes and refuses, the float64 reference with
 * scales against a sum written out here, and the CPU's refusal by name (it has no FP8 GEMM). */
static void test_scaled_gemm_cpu(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 29);
    const int64_t M = 5, K = 48, N = 6;
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, (int64_t[]){M, K});
    lf_tensor *w = rand_tensor(&rng, LF_DTYPE_BF16, 2, (int64_t[]){N, K});
    lf_tensor *xq = NULL, *xs = NULL, *wq = NULL, *ws = NULL, *wt = NULL, *y = NULL;
    OK(lf_quantize_fp8(&xq, &xs, x));
    OK(lf_quantize_fp8(&wq, &ws, w));
    OK(lf_t(&wt, wq));
    float d[5 * 6];
    for (int i = 0; i < 30; i++)
        d[i] = NAN;
    lf_gemm g = {.ep = lf_epilogue_default()};
    g.a = (lf_matrix){lf_tensor_data(xq), LF_DTYPE_F8E4M3, M, K, K, 1};
    g.b = (lf_matrix){lf_tensor_data(wq), LF_DTYPE_F8E4M3, K, N, 1, K};
    g.d = (lf_matrix){d, LF_DTYPE_F32, M, N, N, 1};
    FAILS(LF_EINVAL, "need both scale vectors", lf_gemm_validate(&g));
    g.ep.a_scale = lf_tensor_data(xs), g.ep.b_scale = lf_tensor_data(ws);
    OK(lf_gemm_reference(&g));
    const uint8_t *A = lf_tensor_data(xq), *B = lf_tensor_data(wq);
    const float *sa = lf_tensor_data(xs), *sb = lf_tensor_data(ws);
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += (double)lf_f32_from_f8e4m3(A[i * K + k]) * lf_f32_from_f8e4m3(B[j * K + k]);
            acc *= (double)sa[i] * sb[j];
            worst = fmax(worst, fabs(d[i * N + j] - acc) / (fabs(acc) + 1e-30));
        }
    CHECK(worst < 1e-6, "the reference applies a_scale[i] * b_scale[j] (worst relative %.3g)", worst);
    FAILS(LF_EUNSUPPORTED, "no FP8 (f8e4m3) GEMM on the CPU", lf_backend_gemm(LF_DEVICE_CPU, &g, NULL));
    FAILS(LF_EUNSUPPORTED, "no FP8", lf_backend_gemm_supported(LF_DEVICE_CPU, &g));
    g.d.dtype = LF_DTYPE_F8E4M3;
    FAILS(LF_EINVAL, "an f8e4m3 d needs its block scales", lf_gemm_validate(&g));
    g.d.dtype = LF_DTYPE_F32;
    g.ep.d_scale = d;
    FAILS(LF_EINVAL, "d_scale is for an f8e4m3 d", lf_gemm_validate(&g));
    g.ep.d_scale = NULL;
    g.ep.blockwise = 2;
    FAILS(LF_EINVAL, "blockwise 2", lf_gemm_validate(&g));
    g.ep.blockwise = 0;
    g.a.dtype = g.b.dtype = LF_DTYPE_BF16;
    FAILS(LF_EINVAL, "scale vectors are for f8e4m3 operands", lf_gemm_validate(&g));
    /* the ops: CPU refusals by name, bad operands before any device is asked */
    FAILS(LF_EUNSUPPORTED, "no FP8", lf_scaled_mm(&y, xq, xs, wt, ws, LF_DTYPE_BF16));
    FAILS(LF_EUNSUPPORTED, "no FP8", lf_scaled_mm_gated(&y, xq, xs, wt, ws, LF_ACT_SILU, 3));
    FAILS(LF_EDTYPE, "a scaled GEMM takes f8e4m3", lf_scaled_mm(&y, x, xs, wt, ws, LF_DTYPE_BF16));
    FAILS(LF_ESHAPE, "one per row of mat1", lf_scaled_mm(&y, xq, ws, wt, ws, LF_DTYPE_BF16));
    FAILS(LF_ESHAPE, "whole blocks of 2 x group", lf_scaled_mm_gated(&y, xq, xs, wt, ws, LF_ACT_SILU, 2));
    FAILS(LF_EDTYPE, "out_dtype", lf_scaled_mm(&y, xq, xs, wt, ws, LF_DTYPE_F8E4M3));
    CHECK(!y, "nothing handed out on failure");
    FAILS(LF_EUNSUPPORTED, "no FP8", lf_fp8_supported(LF_DEVICE_CPU));
    lf_tensor *list[] = {x, w, xq, xs, wq, ws, wt};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        lf_tensor_free(list[i]);
}

/* Block scales on the CPU (the quantizers' bytes are the table's): the reference applies block
 * scales term by term (300 columns: a partial last block; one block 60x larger than the others),
 * and writes an f8e4m3 d as lf_quantize_fp8_1x128 of its bf16 rounding; lf_quantize_fp8_rows
 * refuses too few rows; the CPU refuses the block-scaled ops by name, and mixed scale forms by
 * shape. */
static void test_blocks_cpu(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 43);
    const int64_t R = 6, C = 300, N = 8, LD = LF_SCALE_LD(R), NB = LF_SCALE_BLOCKS(C);
    float *f = malloc((size_t)(R * C) * sizeof *f), *f2 = malloc((size_t)(N * C) * sizeof *f2);
    for (int64_t i = 0; i < R * C; i++)
        f[i] = (float)(lf_rng_uniform(&rng) * 2 - 1) * (i % C >= 128 && i % C < 256 ? 60.f : 1.f);
    for (int64_t i = 0; i < N * C; i++)
        f2[i] = (float)(lf_rng_uniform(&rng) * 2 - 1);
    lf_tensor *w = NULL, *w2 = NULL, *q = NULL, *sc = NULL, *qr = NULL, *sr = NULL;
    OK(lf_tensor_from_f32(&w, LF_DTYPE_BF16, 2, (int64_t[]){R, C}, f, LF_DEVICE_CPU));
    OK(lf_tensor_from_f32(&w2, LF_DTYPE_BF16, 2, (int64_t[]){N, C}, f2, LF_DEVICE_CPU));
    OK(lf_quantize_fp8_1x128(&q, &sc, w));
    OK(lf_quantize_fp8(&qr, &sr, w));
    const uint8_t *Q = lf_tensor_data(q);
    const float *S = lf_tensor_data(sc);
    lf_tensor *bad = NULL, *bads = NULL;
    FAILS(LF_ESHAPE, "cannot hold", lf_quantize_fp8_rows(&bad, &bads, w, R - 1));
    /* the reference, block-scaled, plain and with an f8e4m3 d */
    lf_tensor *q2 = NULL, *s2 = NULL, *t2 = NULL, *y = NULL, *h = NULL, *hs = NULL;
    OK(lf_quantize_fp8_128x128(&q2, &s2, w2));
    OK(lf_t(&t2, q2));
    float d[6 * 8];
    lf_gemm g = {.ep = lf_epilogue_default()};
    g.a = (lf_matrix){lf_tensor_data(q), LF_DTYPE_F8E4M3, R, C, C, 1};
    g.b = (lf_matrix){lf_tensor_data(q2), LF_DTYPE_F8E4M3, C, N, 1, C};
    g.d = (lf_matrix){d, LF_DTYPE_F32, R, N, N, 1};
    g.ep.a_scale = S, g.ep.b_scale = lf_tensor_data(s2), g.ep.blockwise = 1;
    OK(lf_gemm_reference(&g));
    const uint8_t *Q2 = lf_tensor_data(q2);
    const float *S2 = lf_tensor_data(s2);
    double worst = 0;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < C; k++)
                acc += (double)lf_f32_from_f8e4m3(Q[i * C + k]) * S[i + k / 128 * LD] *
                       lf_f32_from_f8e4m3(Q2[j * C + k]) * S2[j / 128 * LF_SCALE_LD(NB) + k / 128];
            worst = fmax(worst, fabs(d[i * N + j] - acc) / (fabs(acc) + 1e-30));
        }
    CHECK(worst < 1e-6, "the reference applies each block's two scales (worst relative %.3g)", worst);
    uint8_t d8[6 * 8];
    float ds[LF_SCALE_LD(6)];
    for (int i = 0; i < LD; i++)
        ds[i] = NAN;
    g.d = (lf_matrix){d8, LF_DTYPE_F8E4M3, R, N, N, 1};
    g.ep.d_scale = ds;
    OK(lf_gemm_reference(&g));
    lf_tensor *db = NULL, *dq = NULL, *dqs = NULL;
    OK(lf_tensor_from_f32(&db, LF_DTYPE_BF16, 2, (int64_t[]){R, N}, d, LF_DEVICE_CPU));
    OK(lf_quantize_fp8_1x128(&dq, &dqs, db));
    CHECK(!memcmp(d8, lf_tensor_data(dq), sizeof d8) && !memcmp(ds, lf_tensor_data(dqs), sizeof ds),
          "an f8e4m3 d is lf_quantize_fp8_1x128 of the bf16 result, padding scales included");
    /* the ops on the CPU */
    FAILS(LF_EUNSUPPORTED, "no FP8", lf_scaled_mm(&y, q, sc, t2, s2, LF_DTYPE_BF16));
    FAILS(LF_ESHAPE, "the same form for both scales", lf_scaled_mm(&y, qr, sr, t2, s2, LF_DTYPE_BF16));
    lf_tensor *q2r = NULL, *s2r = NULL, *t2r = NULL;
    OK(lf_quantize_fp8(&q2r, &s2r, w2));
    OK(lf_t(&t2r, q2r));
    FAILS(LF_EUNSUPPORTED, "no FP8", lf_scaled_mm_gated_fp8(&h, &hs, qr, sr, t2r, s2r, LF_ACT_SILU, 4));
    FAILS(LF_ESHAPE, "whole blocks of 2 x group", lf_scaled_mm_gated_fp8(&h, &hs, qr, sr, t2r, s2r, LF_ACT_SILU, 3));
    CHECK(!y && !h && !hs && !bad && !bads, "nothing handed out on failure");
    lf_tensor *list[] = {w, w2, q, sc, qr, sr, q2, s2, t2, db, dq, dqs, q2r, s2r, t2r};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        lf_tensor_free(list[i]);
    free(f), free(f2);
}

static lf_status eager_mlp(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)n;
    return lf_nn_gated_mlp_forward_variant(ctx, LF_MLP_EAGER, in[0], out);
}

/* Compile's FP8 gated pass where the device has no FP8 GEMM (the CPU): the plan says why and
 * keeps the bf16 gated GEMM, the same bytes as the gated pass alone. */
static void test_compile_fp8_cpu(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 47);
    lf_nn_gated_mlp m;
    lf_nn_gated_mlp_opts o = {64, 128, LF_DTYPE_BF16, LF_DEVICE_CPU, LF_ACT_SILU};
    OK(lf_nn_gated_mlp_init(&m, &o, &rng));
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, (int64_t[]){12, 64}), *y[2] = {NULL, NULL};
    char *plan = NULL;
    for (int k = 0; k < 2; k++) {
        lf_compile_opts co = lf_compile_opts_default();
        co.passes = LF_PASSES_ALL | (k ? LF_PASS_FP8 : 0);
        lf_compiled *c = NULL;
        OK(lf_compile(&c, eager_mlp, &m, 1, &x, &co));
        if (c)
            OK(lf_compiled_run(c, 1, &x, &y[k]));
        if (c && k)
            OK(lf_compiled_describe(c, &plan));
        CHECK(c && lf_compiled_get_stats(c).kernels == 2, "%s: 2 kernels (gated, down)", k ? "--fp8" : "gated");
        lf_compiled_free(c); /* y[k] views the plan's buffer: copy first */
        if (y[k]) {
            lf_tensor *keep = NULL;
            OK(lf_contiguous(&keep, y[k]));
            lf_tensor_free(y[k]);
            y[k] = keep;
        }
    }
    CHECK(plan && strstr(plan, "fp8: not here (cpu gemm: no FP8") && strstr(plan, "gated: silu(g) * u"),
          "the plan says why FP8 did not happen: %s", plan ? plan : "");
    CHECK(y[0] && y[1] && !memcmp(lf_tensor_data(y[0]), lf_tensor_data(y[1]), (size_t)lf_tensor_numel(y[0]) * 2),
          "and computes what the gated pass alone does");
    free(plan);
    lf_tensor_free(x), lf_tensor_free(y[0]), lf_tensor_free(y[1]);
    lf_nn_gated_mlp_free(&m);
}

/* The fp8 MLP variant where the device has no FP8 GEMM (the CPU): it needs its FP8 weights, then
 * runs the gated variant, equal to it bit for bit, and says why in a note the observer sees. */
static void test_fp8_variant_cpu(void)
{
    CHECK(lf_mlp_variant_parse("fp8") == LF_MLP_FP8 && !strcmp(lf_mlp_variant_name(LF_MLP_FP8), "fp8") &&
              lf_mlp_variant_parse("gated") == LF_MLP_GATED && lf_mlp_variant_parse("fp16") == -1,
          "fp8 by name");
    lf_rng rng;
    lf_rng_seed(&rng, 31);
    lf_nn_gated_mlp m;
    lf_nn_gated_mlp_opts o = {64, 96, LF_DTYPE_BF16, LF_DEVICE_CPU, LF_ACT_SILU};
    OK(lf_nn_gated_mlp_init(&m, &o, &rng));
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 3, (int64_t[]){2, 7, 64}), *y8 = NULL, *yg = NULL, *h8 = NULL;
    FAILS(LF_EINVAL, "lf_nn_gated_mlp_quantize_fp8", lf_nn_gated_mlp_forward_variant(&m, LF_MLP_FP8, x, &y8));
    OK(lf_nn_gated_mlp_quantize_fp8(&m));
    OK(lf_nn_gated_mlp_quantize_fp8(&m));             /* again: the first ones are replaced, not leaked */
    OK(lf_nn_gated_mlp_to_device(&m, LF_DEVICE_CPU)); /* they move with the module */
    CHECK(m.gate_up_q && m.gate_up_q->dtype == LF_DTYPE_F8E4M3 && m.gate_up_scale->shape[0] == 192 && m.down_scale &&
              m.down_scale->shape[0] == 1 && m.down_scale->shape[1] == 4,
          "FP8 weights: gate_up (192, 64) e4m3 with 192 scales, down's (64, 96) in one 128 x 128 block (1, 4)");
    note_seen[0] = 0;
    lf_ops_set_observer(&observer);
    OK(lf_nn_gated_mlp_forward_variant(&m, LF_MLP_FP8, x, &y8));
    lf_ops_set_observer(NULL);
    CHECK(strstr(note_seen, "fp8 variant runs gated bf16") && strstr(note_seen, "no FP8"),
          "the trace says why bf16 ran: '%s'", note_seen);
    OK(lf_nn_gated_mlp_forward_variant(&m, LF_MLP_GATED, x, &yg));
    OK(lf_nn_gated_mlp_middle(&m, LF_MLP_FP8, x, &h8));
    if (y8 && yg && h8) {
        double *a = to_f64(y8), *b = to_f64(yg);
        CHECK(y8->ndim == 3 && y8->shape[2] == 64 && !memcmp(a, b, 2 * 7 * 64 * sizeof *a),
              "fp8 on the CPU is the gated forward bit for bit");
        CHECK(h8->ndim == 3 && h8->shape[2] == 96, "the fp8 middle is (2, 7, 96)");
        free(a), free(b);
    }
    lf_tensor_free(x), lf_tensor_free(y8), lf_tensor_free(yg), lf_tensor_free(h8);
    lf_nn_gated_mlp_free(&m);
}

int main(void)
{
    test_quantize();
    test_scaled_gemm_cpu();
    test_blocks_cpu();
    test_fp8_variant_cpu();
    test_compile_fp8_cpu();
    test_fp8_mlp_accuracy();
    return lf_test_finish("test_fp8");
}
