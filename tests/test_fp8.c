/* FP8 weights: lf_quantize_fp8 against the per-row recipe and E4M3's error bound, on odd sizes,
 * a row of zeros, an outlier, a transposed (non-contiguous) view and f32 input; its refusals (a
 * non-finite weight, a vector, an f8e4m3 input, inside compile's capture); and what the profiler's
 * observer sees of it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "linfuse/compile.h"
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

int main(void)
{
    test_quantize();
    return lf_test_finish("test_fp8");
}
