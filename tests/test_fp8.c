/* FP8 weights: lf_quantize_fp8 against the per-row recipe and E4M3's error bound, on odd sizes,
 * a row of zeros, an outlier, a transposed (non-contiguous) view and f32 input; its refusals (a
 * non-finite weight, a vector, an f8e4m3 input, inside compile's capture); and what the profiler's
 * observer sees of it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "linfuse/compile.h"
#include "linfuse/nn.h"
#include "testutil.h"

/* Quantize w and check q and scale against its values: each row's scale its largest magnitude
 * over 448, each code within half an E4M3 step of w / scale. */
static void check_quantized(const lf_tensor *w, const char *what)
{
    const int64_t R = w->shape[0], C = w->shape[1];
    lf_tensor *q = NULL, *sc = NULL;
    OK(lf_quantize_fp8(&q, &sc, w));
    if (!q || !sc)
        return;
    CHECK(q->dtype == LF_DTYPE_F8E4M3 && q->shape[0] == R && q->shape[1] == C && sc->dtype == LF_DTYPE_F32 &&
              sc->ndim == 2 && sc->shape[0] == R && sc->shape[1] == 1,
          "%s: q (%lld, %lld) f8e4m3, scale (%lld, 1) f32", what, (long long)R, (long long)C, (long long)R);
    float *wf = malloc((size_t)(R * C) * sizeof *wf), *s = malloc((size_t)R * sizeof *s);
    OK(lf_tensor_to_f32(w, wf, R * C));
    OK(lf_tensor_to_f32(sc, s, R));
    const uint8_t *codes = lf_tensor_data(q);
    int bad_scale = 0, bad_code = 0;
    double worst = 0;
    for (int64_t r = 0; r < R; r++) {
        float amax = 0;
        for (int64_t c = 0; c < C; c++)
            amax = fmaxf(amax, fabsf(wf[r * C + c]));
        bad_scale += s[r] != (amax > 0 ? amax / 448.f : 1.f);
        for (int64_t c = 0; c < C; c++) {
            const double x = wf[r * C + c], y = (double)lf_f32_from_f8e4m3(codes[r * C + c]) * s[r];
            /* E4M3 keeps 3 mantissa bits: half a step is 2^-4 of the value in the normal range,
             * and 2^-10 of the scale below it (subnormals step by 2^-9) */
            const double bound = fmax(fabs(x) * 0x1p-4, s[r] * 0x1p-10) * (1 + 1e-6);
            bad_code += !(fabs(x - y) <= bound);
            worst = fmax(worst, fabs(x - y) / (fabs(x) + s[r] * 0x1p-6));
        }
    }
    CHECK(!bad_scale, "%s: %d of %lld row scales are not max|w| / 448", what, bad_scale, (long long)R);
    CHECK(!bad_code, "%s: %d of %lld codes further than half an E4M3 step from w / scale", what, bad_code,
          (long long)(R * C));
    CHECK(worst > 0, "%s: the codes round something (worst relative error %.3g)", what, worst);
    free(wf), free(s);
    lf_tensor_free(q), lf_tensor_free(sc);
}

static lf_status quantize_fwd(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)ctx, (void)n;
    lf_tensor *scale = NULL;
    lf_status s = lf_quantize_fp8(out, &scale, in[0]);
    lf_tensor_free(scale);
    return s;
}

static int quantize_ops_seen;
static void obs_begin(void *user, lf_op_id op, int n, const lf_op_arg *args)
{
    (void)user, (void)n, (void)args;
    quantize_ops_seen += op == LF_OP_QUANTIZE_FP8;
}
static void obs_end(void *user, lf_op_id op, lf_status s)
{
    (void)user, (void)op, (void)s;
}

static void test_quantize(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 23);
    int64_t ws[2] = {37, 65};
    lf_tensor *w = rand_tensor(&rng, LF_DTYPE_BF16, 2, ws);
    float *f = malloc(37 * 65 * sizeof *f);
    OK(lf_tensor_to_f32(w, f, 37 * 65));
    memset(f + 3 * 65, 0, 65 * sizeof *f); /* a row of zeros */
    f[5 * 65 + 7] = 300.f;                 /* an outlier: the rest of its row lands low in E4M3's range */
    f[9 * 65 + 1] = 1e-30f;                /* far below the smallest subnormal of its row */
    lf_tensor *w2 = NULL;
    OK(lf_tensor_from_f32(&w2, LF_DTYPE_BF16, 2, ws, f, LF_DEVICE_CPU));
    check_quantized(w2, "bf16 37x65");
    lf_tensor *wf = NULL;
    OK(lf_tensor_from_f32(&wf, LF_DTYPE_F32, 2, ws, f, LF_DEVICE_CPU));
    check_quantized(wf, "f32 37x65");
    /* a transposed view quantizes as its contiguous copy does */
    int64_t ts[2] = {65, 37};
    lf_tensor *base = rand_tensor(&rng, LF_DTYPE_F16, 2, ts), *wt = NULL, *wc = NULL;
    OK(lf_t(&wt, base));
    OK(lf_contiguous(&wc, wt));
    check_quantized(wt, "f16 transposed view");
    lf_tensor *q1 = NULL, *s1 = NULL, *q2 = NULL, *s2 = NULL;
    OK(lf_quantize_fp8(&q1, &s1, wt));
    OK(lf_quantize_fp8(&q2, &s2, wc));
    CHECK(q1 && q2 && !memcmp(lf_tensor_data(q1), lf_tensor_data(q2), 37 * 65) &&
              !memcmp(lf_tensor_data(s1), lf_tensor_data(s2), 37 * sizeof(float)),
          "a view and its copy quantize alike");
    /* refusals, with nothing handed out */
    lf_tensor *q = NULL, *sc = NULL;
    f[2] = NAN;
    lf_tensor *wn = NULL, *v = NULL;
    OK(lf_tensor_from_f32(&wn, LF_DTYPE_F32, 2, ws, f, LF_DEVICE_CPU));
    FAILS(LF_EINVAL, "w[0, 2] is nan; a weight to quantize must be finite", lf_quantize_fp8(&q, &sc, wn));
    CHECK(!q && !sc, "nothing handed out on failure");
    OK(lf_tensor_from_f32(&v, LF_DTYPE_F32, 1, (int64_t[]){8}, f + 100, LF_DEVICE_CPU));
    FAILS(LF_ESHAPE, "must have 2 dims", lf_quantize_fp8(&q, &sc, v));
    FAILS(LF_EDTYPE, "f8e4m3, a dtype linfuse stores", lf_quantize_fp8(&q, &sc, q1));
    FAILS(LF_EINVAL, "'scale' is NULL", lf_quantize_fp8(&q, NULL, w));
    /* compile's plans replay device launches: quantizing inside a captured forward is refused */
    lf_compiled *c = NULL;
    FAILS(LF_EUNSUPPORTED, "before compiling", lf_compile(&c, quantize_fwd, NULL, 1, &w, NULL));
    CHECK(!c, "no plan made");
    /* the profiler sees it as an op of its own */
    const lf_op_observer obs = {.op_begin = obs_begin, .op_end = obs_end};
    lf_ops_set_observer(&obs);
    OK(lf_quantize_fp8(&q, &sc, w));
    lf_ops_set_observer(NULL);
    CHECK(quantize_ops_seen == 1 && !strcmp(lf_op_name(LF_OP_QUANTIZE_FP8), "lf::quantize_fp8"),
          "lf::quantize_fp8 seen by the observer once (%d)", quantize_ops_seen);
    lf_tensor *list[] = {w, w2, wf, base, wt, wc, q1, s1, q2, s2, wn, v, q, sc};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        lf_tensor_free(list[i]);
    free(f);
}

/* a (n, k) . b (m, k)^T in float64 */
static double *mm_nt(const double *a, const double *b, int64_t n, int64_t m, int64_t k)
{
    double *c = calloc((size_t)(n * m), sizeof *c);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            double acc = 0;
            for (int64_t p = 0; p < k; p++)
                acc += a[i * k + p] * b[j * k + p];
            c[i * m + j] = acc;
        }
    return c;
}

/* t quantized per row by lf_quantize_fp8 and decoded back (code x scale), in float64. */
static double *fp8_round_trip(const lf_tensor *t)
{
    lf_tensor *q = NULL, *sc = NULL;
    const lf_status st = lf_quantize_fp8(&q, &sc, t);
    CHECK(st == LF_OK, "quantize: %s", st == LF_OK ? "" : lf_last_error());
    const int64_t R = t->shape[0], C = t->shape[1];
    double *d = malloc((size_t)(R * C) * sizeof *d);
    const uint8_t *codes = q ? lf_tensor_data(q) : NULL;
    const float *s = sc ? lf_tensor_data(sc) : NULL;
    for (int64_t i = 0; i < R * C; i++)
        d[i] = codes && s ? (double)lf_f32_from_f8e4m3(codes[i]) * s[i / C] : NAN;
    lf_tensor_free(q), lf_tensor_free(sc);
    return d;
}

/* relative RMS and largest error (over the largest magnitude) of y against ref */
static void errors(const double *y, const double *ref, int64_t n, double *rms, double *max)
{
    double se = 0, sr = 0, me = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        se += (y[i] - ref[i]) * (y[i] - ref[i]), sr += ref[i] * ref[i];
        me = fmax(me, fabs(y[i] - ref[i])), mr = fmax(mr, fabs(ref[i]));
    }
    *rms = sqrt(se / sr), *max = me / mr;
}

/* What FP8 costs an MLP, emulated exactly on the CPU: x quantized per token and every weight per
 * output channel (lf_quantize_fp8), products of the decoded values summed in float64 (FP8 tensor
 * cores multiply e4m3 exactly and add in fp32), the hidden activation for the down GEMM kept in
 * bf16 or quantized per token to e4m3 again. Each forward's relative RMS and largest error
 * against the float64 forward of the unquantized module, beside linfuse's bf16 forward, GeGLU
 * and SwiGLU (LF_TEST_VERBOSE=1 prints them). Measured at 64 x 256 -> 512: bf16 3.8e-3 relative
 * RMS; FP8 with a bf16 hidden 5.7e-2 to 5.8e-2, with an e4m3 hidden 6.2e-2 to 6.3e-2 (E4M3's half
 * step is 2^-4: about 3.6e-2 RMS per value, and a sum of products of random sign keeps that
 * relative error, twice over); the bounds give each a fifth more. */
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
        double *h = malloc((size_t)(T * H) * sizeof *h), *hq = malloc((size_t)(T * H) * sizeof *hq);
        float *hf = malloc((size_t)(T * H) * sizeof *hf);
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < H; j++) {
                h[t * H + j] = lf_act_ref(act, g[t * 2 * H + j]) * g[t * 2 * H + H + j];
                hq[t * H + j] = lf_act_ref(act, gq[t * 2 * H + j]) * gq[t * 2 * H + H + j];
                hf[t * H + j] = (float)hq[t * H + j];
            }
        double *ref = mm_nt(h, WD, T, D, H), *hb = malloc((size_t)(T * H) * sizeof *hb);
        for (int64_t i = 0; i < T * H; i++)
            hb[i] = lf_f32_from_bf16(lf_bf16_from_f32(hf[i]));
        lf_tensor *ht = NULL;
        OK(lf_tensor_from_f32(&ht, LF_DTYPE_F32, 2, (int64_t[]){T, H}, hf, LF_DEVICE_CPU));
        double *h8 = fp8_round_trip(ht), *y_b = mm_nt(hb, WDq, T, D, H), *y_8 = mm_nt(h8, WDq, T, D, H);
        double r_bf, m_bf, r_fb, m_fb, r_f8, m_f8;
        errors(YB, ref, T * D, &r_bf, &m_bf);
        errors(y_b, ref, T * D, &r_fb, &m_fb);
        errors(y_8, ref, T * D, &r_f8, &m_f8);
        if (getenv("LF_TEST_VERBOSE"))
            printf("%s %lldx%lldx%lld: bf16 rel RMS %.2e max %.2e; FP8, hidden bf16 %.2e / %.2e; FP8, hidden e4m3 "
                   "%.2e / %.2e\n",
                   lf_act_name(act), (long long)T, (long long)D, (long long)H, r_bf, m_bf, r_fb, m_fb, r_f8, m_f8);
        CHECK(r_bf < 5e-3 && m_bf < 1e-2, "%s bf16 forward: rel RMS %.3g, max %.3g", lf_act_name(act), r_bf, m_bf);
        CHECK(r_fb < 7e-2 && m_fb < 9e-2, "%s FP8, bf16 hidden: rel RMS %.3g, max %.3g", lf_act_name(act), r_fb, m_fb);
        CHECK(r_f8 < 7.5e-2 && m_f8 < 1e-1, "%s FP8, e4m3 hidden: rel RMS %.3g, max %.3g", lf_act_name(act), r_f8,
              m_f8);
        CHECK(r_fb > 2 * r_bf && r_f8 >= r_fb * 0.9,
              "%s: FP8 costs more than bf16 (%.3g vs %.3g), e4m3 hidden no less than bf16 hidden (%.3g)",
              lf_act_name(act), r_fb, r_bf, r_f8);
        double *list[] = {X, GU, WD, YB, g, Xq, GUq, WDq, gq, h, hq, ref, hb, h8, y_b, y_8};
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
            free(list[i]);
        free(hf);
        lf_tensor_free(x), lf_tensor_free(yb), lf_tensor_free(ht);
        lf_nn_gated_mlp_free(&m);
    }
}

int main(void)
{
    test_quantize();
    test_fp8_mlp_accuracy();
    return lf_test_finish("test_fp8");
}
