/* The case table's FP8 families: the quantizers on every device (their bytes against their
 * definition), and where the device has an FP8 GEMM (lf_fp8_supported) the scaled ops: lf_scaled_mm
 * row-wise and block-scaled, lf_scaled_mm_gated and lf_scaled_mm_gated_fp8, against float64 of the
 * decoded operands (exact inputs: the error is fp32 accumulation and the rounded result). The
 * operands are quantized here, on the host, and their codes and scales uploaded. */
#include <stdlib.h>
#include <string.h>

#include "cases.h"

static lf_tensor *quantized(lf_rng *rng, int64_t rows, int64_t cols, lf_scale_mode m, lf_tensor **scale)
{
    lf_tensor *w = rand_tensor(rng, LF_DTYPE_BF16, 2, (int64_t[]){rows, cols}), *q = NULL;
    const lf_status s = m == LF_SCALE_1X128     ? lf_quantize_fp8_1x128(&q, scale, w)
                        : m == LF_SCALE_128X128 ? lf_quantize_fp8_128x128(&q, scale, w)
                                                : lf_quantize_fp8(&q, scale, w);
    if (s != LF_OK) {
        fprintf(stderr, "test_cases: quantize on the host: %s\n", lf_last_error());
        abort();
    }
    lf_tensor_free(w);
    return q;
}

void fp8_operands(lf_rng *rng, const case_t *c, operand *a, operand *b, lf_tensor **sa, lf_tensor **sb)
{
    const int blocks = c->scale != LF_SCALE_ROWS;
    operand_from(a, quantized(rng, c->m, c->k, blocks ? LF_SCALE_1X128 : LF_SCALE_ROWS, sa), 0);
    operand_from(b, quantized(rng, c->n, c->k, blocks ? LF_SCALE_128X128 : LF_SCALE_ROWS, sb), 1);
}

/* The gated kernel's e4m3 h differs from the reference's in fp32 accumulation order and in the
 * activations' fast approximations (tanh.approx's 2^-11, __expf), which can move a bf16 rounding
 * and so a code by one step (1-2% of them on an H200). */
void expect_fp8_codes(case_run *r, const uint8_t *rq, const float *rs, const uint8_t *gq, int64_t ldg, const float *gs,
                      int64_t M, int64_t H)
{
    const int64_t LD = LF_SCALE_LD(M), NB = LF_SCALE_BLOCKS(H);
    int64_t far = 0, codes = 0, scales = 0, padding = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < H; j++) {
            const float sr = rs[i + j / 128 * LD], sg = gs[i + j / 128 * LD];
            const double vr = lf_f32_from_f8e4m3(rq[i * H + j]) * (double)sr,
                         vg = lf_f32_from_f8e4m3(gq[i * ldg + j]) * (double)sg;
            codes += rq[i * H + j] != gq[i * ldg + j];
            far += !(fabs(vg - vr) <= fabs(vr) * (0x1p-3 + 0x1p-6) + sr * 448 * 0x1p-8);
        }
    for (int64_t bl = 0; bl < NB; bl++) {
        for (int64_t i = 0; i < M; i++)
            scales += !(fabsf(gs[i + bl * LD] - rs[i + bl * LD]) <= rs[i + bl * LD] * 0x1p-7f);
        for (int64_t i = M; i < LD; i++)
            padding += gs[i + bl * LD] != 1.f;
    }
    EXPECT(r, !far && codes * 25 <= M * H && !scales && !padding,
           "%lld values past one step of the reference, %lld of %lld codes differ, %lld scales past one bf16 step, "
           "%lld padding scales not 1",
           (long long)far, (long long)codes, (long long)(M * H), (long long)scales, (long long)padding);
    snprintf(r->note + strlen(r->note), sizeof r->note - strlen(r->note), " codes %lld/%lld differ", (long long)codes,
             (long long)(M * H));
}

/* --- quantization --- */

typedef struct quant_ctx {
    const case_t *c;
    operand x;
    int64_t rows; /* of q: x's plus the padding */
    uint8_t *q;   /* the definition's codes (rows, C) and scales */
    float *s;
    int64_t ns;
} quant_ctx;

/* The quantizers' definition (ops.h): per row, 1 x 128 or 128 x 128 block, the largest magnitude's
 * scale (lf_fp8_scale_of) and each code lf_f8e4m3_from_f32 of x times the scale's reciprocal;
 * padding rows zero codes, padding scales 1. */
static void quant_define(quant_ctx *x)
{
    const case_t *c = x->c;
    const int64_t R = c->m, C = c->n;
    const lf_scale_mode m = c->scale;
    int64_t shape[2];
    lf_scale_shape(m, x->rows, C, shape);
    x->ns = shape[0] * shape[1];
    x->q = calloc((size_t)(x->rows * C), 1);
    x->s = malloc((size_t)x->ns * sizeof *x->s);
    for (int64_t i = 0; i < x->ns; i++)
        x->s[i] = 1.f;
    const int64_t bh = m == LF_SCALE_128X128 ? 128 : 1, bw = m == LF_SCALE_ROWS ? C : 128;
    for (int64_t r0 = 0; r0 < R; r0 += bh)
        for (int64_t c0 = 0; c0 < C; c0 += bw) {
            float amax = 0;
            for (int64_t r = r0; r < R && r < r0 + bh; r++)
                for (int64_t j = c0; j < C && j < c0 + bw; j++)
                    amax = fmaxf(amax, fabsf((float)x->x.v[r * C + j]));
            const float sc = lf_fp8_scale_of(amax), inv = 1.f / sc;
            x->s[lf_scale_index(m, x->rows, C, r0, c0)] = sc;
            for (int64_t r = r0; r < R && r < r0 + bh; r++)
                for (int64_t j = c0; j < C && j < c0 + bw; j++)
                    x->q[r * C + j] = lf_f8e4m3_from_f32((float)x->x.v[r * C + j] * inv);
        }
}

static void quant_run(case_run *r, void *ctxp)
{
    quant_ctx *x = ctxp;
    const case_t *c = x->c;
    lf_tensor *q = NULL, *s = NULL, *w = x->x.dview;
    kernel_log k;
    kernel_log_start(&k);
    lf_status st = c->pad_rows                    ? lf_quantize_fp8_rows(&q, &s, w, x->rows)
                   : c->scale == LF_SCALE_1X128   ? lf_quantize_fp8_1x128(&q, &s, w)
                   : c->scale == LF_SCALE_128X128 ? lf_quantize_fp8_128x128(&q, &s, w)
                                                  : lf_quantize_fp8(&q, &s, w);
    kernel_log_stop();
    if (!case_ok(r, st, "quantize"))
        return;
    snprintf(r->note, sizeof r->note, "%s", k.last);
    EXPECT(r, k.n == 1, "%d kernels", k.n);
    int64_t shape[2];
    lf_scale_shape(c->scale, x->rows, c->n, shape);
    EXPECT(r,
           q->dtype == LF_DTYPE_F8E4M3 && q->ndim == 2 && q->shape[0] == x->rows && q->shape[1] == c->n &&
               lf_tensor_device(q) == r->dev && s->dtype == LF_DTYPE_F32 && s->ndim == 2 && s->shape[0] == shape[0] &&
               s->shape[1] == shape[1] && lf_tensor_device(s) == r->dev,
           "q [%lld, %lld] %s on %s, scale [%lld, %lld]: expected [%lld, %lld] f8e4m3 and [%lld, %lld] f32 on %s",
           (long long)q->shape[0], (long long)q->shape[1], lf_dtype_name(q->dtype), lf_device_name(lf_tensor_device(q)),
           (long long)s->shape[0], (long long)s->shape[1], (long long)x->rows, (long long)c->n, (long long)shape[0],
           (long long)shape[1], lf_device_name(r->dev));
    lf_tensor *hq = r->failed ? NULL : download(r, q), *hs = r->failed ? NULL : download(r, s);
    if (hq && hs) {
        const uint8_t *gq = lf_tensor_data(hq);
        const float *gs = lf_tensor_data(hs);
        int64_t codes = 0, scales = 0, first = -1;
        for (int64_t i = 0; i < x->rows * c->n; i++)
            if (gq[i] != x->q[i] && codes++ == 0)
                first = i;
        for (int64_t i = 0; i < x->ns; i++)
            scales += memcmp(&gs[i], &x->s[i], sizeof *gs) != 0;
        EXPECT(r, !codes && !scales, "%lld codes (first at %lld: 0x%02x, defined 0x%02x) and %lld scales differ",
               (long long)codes, (long long)first, first >= 0 ? gq[first] : 0, first >= 0 ? x->q[first] : 0,
               (long long)scales);
    }
    lf_tensor_free(hq), lf_tensor_free(hs), lf_tensor_free(q), lf_tensor_free(s);
    expect_untouched(r, &x->x, "x");
}

/* x with the values quantization has to get right: a row of zeros, a row near 1e-38 (its scale
 * held at 2^-126), an outlier in the last row, a value far below its row's smallest subnormal. */
static lf_tensor *special_input(lf_rng *rng, const case_t *c)
{
    const int64_t R = c->m, C = c->n;
    float *f = malloc((size_t)(R * C) * sizeof *f);
    for (int64_t i = 0; i < R * C; i++)
        f[i] = 2.f * (float)lf_rng_uniform(rng) - 1.f;
    if (R > 2)
        memset(f + C, 0, (size_t)C * sizeof *f);
    for (int64_t i = 0; R > 3 && i < C; i++)
        f[2 * C + i] *= 1e-38f;
    if (R > 4 && C > 2)
        f[4 * C + 1] = 1e-30f;
    f[R * C - 1 - (C > 3 ? 2 : 0)] = 250.f;
    lf_tensor *t = NULL;
    if (lf_tensor_from_f32(&t, c->dt, 2, (int64_t[]){R, C}, f, LF_DEVICE_CPU) != LF_OK)
        abort();
    free(f);
    return t;
}

static void run_quantize(case_run *proto, lf_rng *rng)
{
    const case_t *c = proto->c;
    quant_ctx x = {.c = c, .rows = c->m + c->pad_rows};
    if (c->special)
        operand_from(&x.x, special_input(rng, c), 0);
    else
        operand_rand(&x.x, rng, c->dt, 2, (int64_t[]){c->m, c->n}, c->la);
    quant_define(&x);
    if (operand_upload(proto, &x.x, proto->dev))
        case_each_variant(proto, quant_run, &x);
    else
        case_record(proto);
    operand_free(&x.x);
    free(x.q), free(x.s);
}

/* --- the scaled ops --- */

typedef struct scaled_ctx {
    const case_t *c;
    int64_t M, N, K, No;
    operand a, b;
    lf_tensor *hsa, *hsb, *dsa, *dsb;
    double *ref, *mag;
    int64_t step;
    uint8_t *rq; /* scaled_mm_gated_fp8: the reference's codes and scales */
    float *rs;
} scaled_ctx;

static void scaled_run(case_run *r, void *ctxp)
{
    scaled_ctx *x = ctxp;
    const case_t *c = x->c;
    lf_tensor *y = NULL, *ys = NULL;
    kernel_log k;
    kernel_log_start(&k);
    lf_status s = c->op == CASE_SCALED_MM ? lf_scaled_mm(&y, x->a.dview, x->dsa, x->b.dview, x->dsb, LF_DTYPE_BF16)
                  : c->op == CASE_SCALED_MM_GATED
                      ? lf_scaled_mm_gated(&y, x->a.dview, x->dsa, x->b.dview, x->dsb, c->act, c->group)
                      : lf_scaled_mm_gated_fp8(&y, &ys, x->a.dview, x->dsa, x->b.dview, x->dsb, c->act, c->group);
    kernel_log_stop();
    if (!case_ok(r, s, case_op_name(c->op)))
        return;
    s = lf_device_synchronize(r->dev);
    EXPECT(r, s == LF_OK, "synchronize: %s", s == LF_OK ? "" : lf_last_error());
    snprintf(r->note, sizeof r->note, "%s (%d kernels)", k.last, k.n);
    const lf_dtype out = c->op == CASE_SCALED_MM_GATED_FP8 ? LF_DTYPE_F8E4M3 : LF_DTYPE_BF16;
    EXPECT(r,
           y->ndim == 2 && y->shape[0] == x->M && y->shape[1] == x->No && y->dtype == out &&
               lf_tensor_device(y) == r->dev,
           "output [%lld, %lld] %s, expected [%lld, %lld] %s", (long long)y->shape[0], (long long)y->shape[1],
           lf_dtype_name(y->dtype), (long long)x->M, (long long)x->No, lf_dtype_name(out));
    lf_tensor *h = r->failed ? NULL : download(r, y), *hs = ys && !r->failed ? download(r, ys) : NULL;
    if (h && c->op == CASE_SCALED_MM_GATED_FP8) {
        EXPECT(r, hs && lf_tensor_numel(hs) == lf_scale_count(LF_SCALE_1X128, x->M, x->No),
               "h's scales: %lld, expected %lld", hs ? (long long)lf_tensor_numel(hs) : -1LL,
               (long long)lf_scale_count(LF_SCALE_1X128, x->M, x->No));
        if (hs && lf_tensor_numel(hs) == lf_scale_count(LF_SCALE_1X128, x->M, x->No))
            expect_fp8_codes(r, x->rq, x->rs, lf_tensor_data(h), x->No, lf_tensor_data(hs), x->M, x->No);
    } else if (h) {
        double *got = to_f64(h);
        int64_t at = 0;
        const double e = rows_err(got, x->ref, x->mag, x->M, x->No, x->step, out, &at);
        EXPECT(r, e < 1e-2, "err %.3g (bound 1e-2) at [%lld, %lld]: got %.9g, float64 %.9g", e, (long long)(at / x->No),
               (long long)(at % x->No), got[at], x->ref[at]);
        snprintf(r->note + strlen(r->note), sizeof r->note - strlen(r->note), " err %.2g < 1e-2", e);
        free(got);
    }
    lf_tensor_free(h), lf_tensor_free(hs), lf_tensor_free(y), lf_tensor_free(ys);
    expect_untouched(r, &x->a, "a");
    expect_untouched(r, &x->b, "b");
}

static void run_scaled(case_run *proto, lf_rng *rng)
{
    const case_t *c = proto->c;
    if (lf_fp8_supported(proto->dev) != LF_OK) { /* the CPU: its reason, once for the case */
        EXPECT(proto, !case_gated_here, "a GPU with the gated kernel has FP8 GEMMs: %s", lf_last_error());
        case_skip(proto, "%s", lf_last_error());
        case_record(proto);
        return;
    }
    scaled_ctx x = {.c = c, .M = c->m, .N = c->n, .K = c->k, .No = c->group ? c->n / 2 : c->n};
    fp8_operands(rng, c, &x.a, &x.b, &x.hsa, &x.hsb);
    int up = operand_upload(proto, &x.a, proto->dev) && operand_upload(proto, &x.b, proto->dev) &&
             case_ok(proto, lf_tensor_to_device(&x.dsa, x.hsa, proto->dev), "scales") &&
             case_ok(proto, lf_tensor_to_device(&x.dsb, x.hsb, proto->dev), "scales");
    const int64_t n_out = x.M * x.No;
    if (up && c->op == CASE_SCALED_MM_GATED_FP8) { /* the reference writes h as the op must */
        x.rq = malloc((size_t)n_out);
        x.rs = malloc((size_t)lf_scale_count(LF_SCALE_1X128, x.M, x.No) * sizeof *x.rs);
        lf_gemm g = {.ep = lf_epilogue_default()};
        const lf_tensor *ha = x.a.hview, *hb = x.b.hview;
        g.a = (lf_matrix){lf_tensor_data(ha), LF_DTYPE_F8E4M3, x.M, x.K, ha->stride[0], ha->stride[1]};
        g.b = (lf_matrix){lf_tensor_data(hb), LF_DTYPE_F8E4M3, x.K, x.N, hb->stride[0], hb->stride[1]};
        g.d = (lf_matrix){x.rq, LF_DTYPE_F8E4M3, x.M, x.No, x.No, 1};
        g.ep.act = c->act, g.ep.gate = LF_GATE_PAIRED, g.ep.gate_group = c->group;
        g.ep.a_scale = lf_tensor_data(x.hsa), g.ep.b_scale = lf_tensor_data(x.hsb), g.ep.d_scale = x.rs;
        up = case_ok(proto, lf_gemm_reference(&g), "lf_gemm_reference");
    } else if (up) {
        x.step = ref_step(x.M, (double)x.M * (double)x.N * (double)x.K);
        x.ref = calloc((size_t)n_out, sizeof *x.ref);
        x.mag = calloc((size_t)n_out, sizeof *x.mag);
        ref_gemm rg = {.M = x.M,
                       .N = x.N,
                       .K = x.K,
                       .G = c->group,
                       .A = x.a.v,
                       .B = x.b.v,
                       .sa = lf_tensor_data(x.hsa),
                       .sb = lf_tensor_data(x.hsb),
                       .blockwise = c->scale != LF_SCALE_ROWS,
                       .alpha = 1.0,
                       .act = c->act,
                       .step = x.step};
        ref_gemm_run(&rg, x.ref, x.mag, NULL);
    }
    if (up)
        case_each_variant(proto, scaled_run, &x);
    else
        case_record(proto);
    operand_free(&x.a), operand_free(&x.b);
    lf_tensor_free(x.hsa), lf_tensor_free(x.hsb), lf_tensor_free(x.dsa), lf_tensor_free(x.dsb);
    free(x.ref), free(x.mag), free(x.rq), free(x.rs);
}

void run_fp8_case(case_run *proto, lf_rng *rng)
{
    if (proto->c->op == CASE_QUANTIZE)
        run_quantize(proto, rng);
    else
        run_scaled(proto, rng);
}
