/* nn modules: torch-like initialisation from a seeded generator, and forwards equal to the
 * op sequences they stand for. */
#include <stdlib.h>
#include <string.h>

#include "linfuse/compile.h"
#include "testutil.h"

static void test_linear_init(void)
{
    lf_rng r1, r2, r3;
    lf_rng_seed(&r1, 5), lf_rng_seed(&r2, 5), lf_rng_seed(&r3, 6);
    lf_nn_linear a, b, c;
    lf_nn_linear_opts o = {768, 300, 1, LF_DTYPE_F32, LF_DEVICE_CPU};
    OK(lf_nn_linear_init(&a, &o, &r1));
    OK(lf_nn_linear_init(&b, &o, &r2));
    OK(lf_nn_linear_init(&c, &o, &r3));
    CHECK(a.weight->shape[0] == 300 && a.weight->shape[1] == 768 && a.bias->shape[0] == 300, "shapes");
    int64_t n = 300 * 768;
    CHECK(!memcmp(lf_tensor_data(a.weight), lf_tensor_data(b.weight), (size_t)n * 4), "same seed, same weights");
    CHECK(memcmp(lf_tensor_data(a.weight), lf_tensor_data(c.weight), (size_t)n * 4), "other seed, other weights");
    /* kaiming_uniform(a = sqrt 5): uniform in +-1/sqrt(768); mean ~0, variance bound^2 / 3 */
    const float *w = lf_tensor_data(a.weight);
    double bound = 1.0 / sqrt(768.0), mean = 0, var = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        mean += w[i];
        var += (double)w[i] * w[i];
        mx = fmax(mx, fabs(w[i]));
    }
    mean /= (double)n;
    var = var / (double)n - mean * mean;
    CHECK(mx <= bound, "max |w| %.6f <= bound %.6f", mx, bound);
    CHECK(mx > 0.99 * bound, "max |w| %.6f reaches the bound", mx);
    CHECK(fabs(mean) < 0.01 * bound, "mean %.3g near 0", mean);
    CHECK(fabs(var / (bound * bound / 3) - 1) < 0.02, "variance %.3g, expected %.3g", var, bound * bound / 3);
    const float *bv = lf_tensor_data(a.bias);
    double bmx = 0;
    for (int i = 0; i < 300; i++)
        bmx = fmax(bmx, fabs(bv[i]));
    CHECK(bmx <= bound && bmx > 0.9 * bound, "bias within +-1/sqrt(in): %.6f", bmx);
    lf_nn_linear_free(&a), lf_nn_linear_free(&b), lf_nn_linear_free(&c);
}

/* Every MLP variant (eager, fused, gated) of GeGLU and SwiGLU equals down(act(gate(x)) * up(x))
 * computed in float64, on odd token counts and a hidden size that is no multiple of any kernel's
 * tile. */
static void test_mlp_forward(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 8);
    for (int k = 0; k < 4; k++) {
        const lf_dtype d = k % 2 ? LF_DTYPE_BF16 : LF_DTYPE_F32;
        const lf_act act = k < 2 ? LF_ACT_GELU_TANH : LF_ACT_SILU;
        const int64_t B = 3, S = 11, D = 48, H = 136, T = B * S;
        lf_nn_gated_mlp m;
        lf_nn_gated_mlp_opts o = {D, H, d, LF_DEVICE_CPU, act};
        OK(lf_nn_gated_mlp_init(&m, &o, &rng));
        CHECK(m.act == act, "the module's activation");
        int64_t xs[3] = {B, S, D};
        lf_tensor *x = rand_tensor(&rng, d, 3, xs), *y = NULL;
        CHECK(lf_tensor_shares_storage(m.gate.weight, m.gate_up) && lf_tensor_shares_storage(m.up.weight, m.gate_up) &&
                  lf_tensor_data(m.up.weight) == (char *)lf_tensor_data(m.gate_up) + H * D * lf_dtype_size(d),
              "gate and up weights are the two row halves of gate_up");
        OK(lf_nn_gated_mlp_forward(&m, x, &y));
        CHECK(y->ndim == 3 && y->shape[0] == B && y->shape[1] == S && y->shape[2] == D, "output shape");
        double *Y = to_f64(y);
        for (int v = 0; v < LF_MLP_VARIANT_COUNT; v++) {
            lf_tensor *yv = NULL;
            OK(lf_nn_gated_mlp_forward_variant(&m, (lf_mlp_variant)v, x, &yv));
            if (!yv)
                continue;
            CHECK(yv->ndim == 3 && yv->shape[0] == B && yv->shape[1] == S && yv->shape[2] == D, "%s output shape",
                  lf_mlp_variant_name((lf_mlp_variant)v));
            double *V = to_f64(yv), e = gated_mlp_err(&m, x, yv, 1);
            CHECK(e < tol_for(d), "mlp forward %s %s %s: err %.3g", lf_act_name(act),
                  lf_mlp_variant_name((lf_mlp_variant)v), lf_dtype_name(d), e);
            /* the hand-fused middle rounds act(g) as the eager one does: the same bits */
            if (v == LF_MLP_FUSED)
                CHECK(!memcmp(V, Y, (size_t)(T * D) * sizeof *V), "fused forward == eager forward bit for bit (%s %s)",
                      lf_act_name(act), lf_dtype_name(d));
            free(V);
            lf_tensor_free(yv);
        }
        free(Y);
        lf_tensor_free(x), lf_tensor_free(y);
        lf_nn_gated_mlp_free(&m);
    }
}

static void test_nn_errors(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 1);
    lf_nn_linear l;
    lf_nn_linear_opts bad = {0, 4, 1, LF_DTYPE_F32, LF_DEVICE_CPU};
    FAILS(LF_ESHAPE, "in_features = 0", lf_nn_linear_init(&l, &bad, &rng));
    CHECK(l.weight == NULL && l.bias == NULL, "a failed init leaves no parameters");
    lf_nn_linear_opts ok = {8, 4, 1, LF_DTYPE_F32, LF_DEVICE_CPU};
    OK(lf_nn_linear_init(&l, &ok, &rng));
    int64_t xs[2] = {3, 9};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, 2, xs), *y = NULL;
    FAILS(LF_ESHAPE, "expects 8", lf_nn_linear_forward(&l, x, &y));
    CHECK(y == NULL, "no output on failure");
    lf_tensor_free(x);
    lf_nn_linear_free(&l);
    lf_nn_linear_free(&l); /* freeing twice is harmless */
    lf_nn_gated_mlp m;
    lf_nn_gated_mlp_opts mo = {16, 0, LF_DTYPE_F32, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
    FAILS(LF_ESHAPE, NULL, lf_nn_gated_mlp_init(&m, &mo, &rng));
    FAILS(LF_EINVAL, "'rng' is NULL", lf_nn_linear_init(&l, &ok, NULL));
    mo.hidden = 32;
    mo.act = LF_ACT_RELU;
    FAILS(LF_EINVAL, "act relu: a gated MLP's is gelu_tanh (GeGLU), silu (SwiGLU) or gelu_erf",
          lf_nn_gated_mlp_init(&m, &mo, &rng));
    mo.act = LF_ACT_SILU;
    /* parameters in a dtype linfuse computes in: an f8e4m3 module comes from quantize_fp8 */
    mo.dtype = LF_DTYPE_F8E4M3;
    FAILS(LF_EDTYPE, "dtype f8e4m3: parameters are bf16, f16 or f32", lf_nn_gated_mlp_init(&m, &mo, &rng));
    lf_nn_linear_opts f8 = ok;
    f8.dtype = LF_DTYPE_F8E4M3;
    FAILS(LF_EDTYPE, "dtype f8e4m3", lf_nn_linear_init(&l, &f8, &rng));
    mo.dtype = LF_DTYPE_F32;
    OK(lf_nn_gated_mlp_init(&m, &mo, &rng));
    /* one handle as both weights: refused, freed once (a double free under ASan before) */
    lf_tensor *one = NULL;
    OK(lf_contiguous(&one, m.gate_up)); /* a second handle on the gate_up weight */
    lf_nn_gated_mlp same;
    FAILS(LF_EINVAL, "the same handle", lf_nn_gated_mlp_from_weights(&same, one, one, LF_ACT_SILU));
    CHECK(same.gate_up == NULL && same.down.weight == NULL, "nothing kept after the refusal");
    int64_t bad_x[2] = {5, 15};
    x = rand_tensor(&rng, LF_DTYPE_F32, 2, bad_x);
    FAILS(LF_ESHAPE, "dim = 16", lf_nn_gated_mlp_forward_variant(&m, LF_MLP_GATED, x, &y));
    CHECK(y == NULL, "no output on failure (gated)");
    FAILS(LF_ESHAPE, NULL, lf_nn_gated_mlp_forward_variant(&m, LF_MLP_FUSED, x, &y));
    FAILS(LF_EINVAL, "variant 7", lf_nn_gated_mlp_forward_variant(&m, (lf_mlp_variant)7, x, &y));
    if (!lf_device_available(LF_DEVICE_CUDA)) {
        lf_tensor *gu = m.gate_up;
        FAILS(LF_EDEVICE, NULL, lf_nn_gated_mlp_to_device(&m, LF_DEVICE_CUDA));
        CHECK(m.gate_up == gu && lf_tensor_shares_storage(m.gate.weight, gu),
              "a failed move leaves the module as it was");
    }
    lf_tensor_free(x);
    lf_nn_gated_mlp_free(&m);
    lf_nn_gated_mlp_free(&m);
}

/* The forward into the caller's memory: the same bits as the allocating forward in every
 * variant (the fp8 variant runs gated here, on the CPU), into a 3-D y and into a strided view of
 * a larger tensor, nothing allocated while it runs (the allocation observer counts), and a
 * workspace one byte short, a wrong y or a workspace on another dtype's terms refused. */
static int allocs_seen;
static void count_allocs(void *user, lf_device dev, int index, const void *addr, int64_t bytes, int64_t total,
                         int64_t reserved)
{
    (void)user, (void)dev, (void)index, (void)addr, (void)total, (void)reserved;
    allocs_seen += bytes > 0;
}

static void test_forward_out(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 41);
    lf_nn_gated_mlp m;
    lf_nn_gated_mlp_opts o = {
        .dim = 24, .hidden = 40, .dtype = LF_DTYPE_BF16, .device = LF_DEVICE_CPU, .act = LF_ACT_SILU};
    OK(lf_nn_gated_mlp_init(&m, &o, &rng));
    OK(lf_nn_gated_mlp_quantize_fp8(&m));
    const int64_t xs[3] = {3, 7, 24};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 3, xs);
    for (int v = 0; v <= LF_MLP_FP8; v++) {
        lf_tensor *ref = NULL, *y = NULL, *ws = NULL, *big = NULL, *yv = NULL;
        OK(lf_nn_gated_mlp_forward_variant(&m, (lf_mlp_variant)v, x, &ref));
        size_t need = 0;
        OK(lf_nn_gated_mlp_workspace(&m, (lf_mlp_variant)v, 21, &need));
        const int64_t wsn = (int64_t)need;
        OK(lf_tensor_empty(&ws, LF_DTYPE_F8E4M3, 1, &wsn, LF_DEVICE_CPU));
        OK(lf_tensor_empty(&y, LF_DTYPE_BF16, 3, xs, LF_DEVICE_CPU));
        OK(lf_tensor_fill(y, NAN));
        allocs_seen = 0;
        lf_tensor_set_alloc_observer(count_allocs, NULL);
        lf_status s = lf_nn_gated_mlp_forward_out(&m, (lf_mlp_variant)v, x, y, ws);
        lf_tensor_set_alloc_observer(NULL, NULL);
        CHECK(s == LF_OK, "%s: forward_out: %s", lf_mlp_variant_name((lf_mlp_variant)v), lf_last_error());
        CHECK(allocs_seen == 0, "%s: %d allocations while running in the caller's memory",
              lf_mlp_variant_name((lf_mlp_variant)v), allocs_seen);
        CHECK(!memcmp(lf_tensor_data(y), lf_tensor_data(ref), 21 * 24 * 2), "%s: the allocating forward's bits",
              lf_mlp_variant_name((lf_mlp_variant)v));
        /* y as every other row of a larger tensor */
        const int64_t bs[2] = {42, 24};
        OK(lf_tensor_empty(&big, LF_DTYPE_BF16, 2, bs, LF_DEVICE_CPU));
        OK(lf_tensor_fill(big, NAN));
        OK(lf_tensor_as_strided(&yv, big, 3, xs, (int64_t[]){14 * 24, 48, 1}, 24));
        OK(lf_nn_gated_mlp_forward_out(&m, (lf_mlp_variant)v, x, yv, ws));
        int same = 1, rest_nan = 1;
        const uint16_t *b = lf_tensor_data(big), *r = lf_tensor_data(ref);
        for (int64_t t = 0; t < 21; t++)
            for (int64_t j = 0; j < 24; j++) {
                same &= b[(2 * t + 1) * 24 + j] == r[t * 24 + j];
                rest_nan &= isnan(lf_f32_from_bf16(b[2 * t * 24 + j]));
            }
        CHECK(same && rest_nan, "%s: into a strided y: its rows only, the same bits",
              lf_mlp_variant_name((lf_mlp_variant)v));
        /* y as every other column: no GEMM writes it in place, so the result goes through the
         * workspace and is copied */
        lf_tensor *wide = NULL, *yc = NULL;
        const int64_t ws2[3] = {3, 7, 48};
        OK(lf_tensor_empty(&wide, LF_DTYPE_BF16, 3, ws2, LF_DEVICE_CPU));
        OK(lf_tensor_fill(wide, NAN));
        OK(lf_tensor_as_strided(&yc, wide, 3, xs, (int64_t[]){7 * 48, 48, 2}, 1));
        allocs_seen = 0;
        lf_tensor_set_alloc_observer(count_allocs, NULL);
        s = lf_nn_gated_mlp_forward_out(&m, (lf_mlp_variant)v, x, yc, ws);
        lf_tensor_set_alloc_observer(NULL, NULL);
        CHECK(s == LF_OK && allocs_seen == 0, "%s: into every other column: %s, %d allocations",
              lf_mlp_variant_name((lf_mlp_variant)v), s == LF_OK ? "ok" : lf_last_error(), allocs_seen);
        const uint16_t *wb = lf_tensor_data(wide);
        same = 1, rest_nan = 1;
        for (int64_t t = 0; t < 21; t++)
            for (int64_t j = 0; j < 24; j++) {
                same &= wb[t * 48 + 1 + 2 * j] == r[t * 24 + j];
                rest_nan &= isnan(lf_f32_from_bf16(wb[t * 48 + 2 * j]));
            }
        CHECK(same && rest_nan, "%s: into every other column, the same bits there and nothing elsewhere",
              lf_mlp_variant_name((lf_mlp_variant)v));
        lf_tensor_free(yc), lf_tensor_free(wide);
        /* a workspace that holds y too: refused, not scribbled over */
        lf_tensor *blob = NULL, *yin = NULL;
        const int64_t bn = wsn / 2 + 1;
        OK(lf_tensor_empty(&blob, LF_DTYPE_BF16, 1, &bn, LF_DEVICE_CPU));
        OK(lf_tensor_as_strided(&yin, blob, 3, xs, (int64_t[]){7 * 24, 24, 1}, 0));
        FAILS(LF_EINVAL, "overlap", lf_nn_gated_mlp_forward_out(&m, (lf_mlp_variant)v, x, yin, blob));
        lf_tensor_free(yin), lf_tensor_free(blob);
        lf_tensor *small = NULL;
        const int64_t sn = wsn - 1;
        OK(lf_tensor_empty(&small, LF_DTYPE_F8E4M3, 1, &sn, LF_DEVICE_CPU));
        FAILS(LF_ENOMEM, "needs", lf_nn_gated_mlp_forward_out(&m, (lf_mlp_variant)v, x, y, small));
        lf_tensor_free(small);
        lf_tensor_free(ref), lf_tensor_free(y), lf_tensor_free(ws), lf_tensor_free(big), lf_tensor_free(yv);
    }
    lf_tensor *y = NULL, *ws = NULL;
    const int64_t bad[3] = {3, 7, 25}, wsn = 1 << 20;
    OK(lf_tensor_empty(&y, LF_DTYPE_BF16, 3, bad, LF_DEVICE_CPU));
    OK(lf_tensor_empty(&ws, LF_DTYPE_F32, 1, &wsn, LF_DEVICE_CPU));
    FAILS(LF_ESHAPE, "dim = 24 last", lf_nn_gated_mlp_forward_out(&m, LF_MLP_GATED, x, y, ws));
    FAILS(LF_EINVAL, "'workspace'", lf_nn_gated_mlp_forward_out(&m, LF_MLP_GATED, x, y, NULL));
    FAILS(LF_ESHAPE, ">= 1", lf_nn_gated_mlp_workspace(&m, LF_MLP_GATED, 0, (size_t[]){0}));
    /* byte counts past 2^62 refused: they wrapped, 2^56 tokens to 256 bytes with LF_OK */
    for (int v = 0; v <= LF_MLP_FP8; v++) {
        FAILS(LF_EOVERFLOW, "2^62", lf_nn_gated_mlp_workspace(&m, (lf_mlp_variant)v, (int64_t)1 << 56, (size_t[]){0}));
        FAILS(LF_EOVERFLOW, "2^62", lf_nn_gated_mlp_workspace(&m, (lf_mlp_variant)v, INT64_MAX, (size_t[]){0}));
    }
    lf_tensor_free(y), lf_tensor_free(ws), lf_tensor_free(x);
    lf_nn_gated_mlp_free(&m);
}

/* forward_raw inside lf_compile: x a buffer that is neither an input nor a value of the graph, so
 * the plan keeps it as a constant past the call; the plan runs and is freed (ASan: no header of the
 * call's outlives it) and computes what the call did. */
typedef struct raw_capture {
    lf_nn_gated_mlp m;
    const float *x;
    void *ws;
    size_t need;
} raw_capture;

static lf_status raw_forward(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)n, (void)in;
    raw_capture *c = ctx;
    const int64_t shape[2] = {4, c->m.dim};
    const lf_status s = lf_tensor_empty(out, LF_DTYPE_F32, 2, shape, LF_DEVICE_CPU);
    if (s != LF_OK)
        return s;
    return lf_nn_gated_mlp_forward_raw(&c->m, LF_MLP_GATED, c->x, 4, c->m.dim, lf_tensor_data(*out), c->m.dim, c->ws,
                                       c->need, NULL);
}

static void test_forward_raw_compiled(void)
{
    raw_capture c;
    lf_rng rng;
    lf_rng_seed(&rng, 47);
    lf_nn_gated_mlp_opts o = {
        .dim = 16, .hidden = 32, .dtype = LF_DTYPE_F32, .device = LF_DEVICE_CPU, .act = LF_ACT_SILU};
    OK(lf_nn_gated_mlp_init(&c.m, &o, &rng));
    const int64_t xs[2] = {4, 16};
    lf_tensor *xc = rand_tensor(&rng, LF_DTYPE_F32, 2, xs), *x = rand_tensor(&rng, LF_DTYPE_F32, 2, xs);
    lf_tensor *y = NULL, *ref = NULL;
    c.x = lf_tensor_data(xc);
    OK(lf_nn_gated_mlp_workspace(&c.m, LF_MLP_GATED, 4, &c.need));
    c.ws = malloc(c.need);
    OK(lf_nn_gated_mlp_forward_variant(&c.m, LF_MLP_GATED, xc, &ref));
    lf_compiled *cc = NULL;
    lf_compile_opts co = lf_compile_opts_default();
    OK(lf_compile(&cc, raw_forward, &c, 1, &x, &co));
    OK(lf_compiled_run(cc, 1, &x, &y));
    CHECK(y && !memcmp(lf_tensor_data(y), lf_tensor_data(ref), 4 * 16 * sizeof(float)),
          "forward_raw compiled: the plan computes what the call did");
    lf_tensor_free(y);
    lf_compiled_free(cc);
    lf_tensor_free(ref), lf_tensor_free(x), lf_tensor_free(xc);
    free(c.ws);
    lf_nn_gated_mlp_free(&c.m);
}

/* lf_nn_gated_mlp_forward_raw: the same bits as the allocating forward, from x and into y at row
 * strides wider than a row (the gaps untouched), every variant; and each argument refused by name. */
static void test_forward_raw(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 43);
    lf_nn_gated_mlp m;
    lf_nn_gated_mlp_opts o = {
        .dim = 24, .hidden = 40, .dtype = LF_DTYPE_BF16, .device = LF_DEVICE_CPU, .act = LF_ACT_SILU};
    OK(lf_nn_gated_mlp_init(&m, &o, &rng));
    OK(lf_nn_gated_mlp_quantize_fp8(&m));
    enum { T = 21, D = 24, XS = 32, YS = 30 };
    const int64_t xs[2] = {T, D}, xb[2] = {T, XS};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs), *xbig = rand_tensor(&rng, LF_DTYPE_BF16, 2, xb);
    uint16_t *xp = lf_tensor_data(xbig), y[T * YS];
    for (int64_t t = 0; t < T; t++) /* x's rows, XS apart, the gaps random */
        memcpy(xp + t * XS, (uint16_t *)lf_tensor_data(x) + t * D, D * 2);
    void *const none = NULL; /* a stream, which a CPU module does not use */
    for (int v = 0; v <= LF_MLP_FP8; v++) {
        const char *name = lf_mlp_variant_name((lf_mlp_variant)v);
        lf_tensor *ref = NULL, *ws = NULL;
        OK(lf_nn_gated_mlp_forward_variant(&m, (lf_mlp_variant)v, x, &ref));
        size_t need = 0;
        OK(lf_nn_gated_mlp_workspace(&m, (lf_mlp_variant)v, T, &need));
        const int64_t wsn = (int64_t)need;
        OK(lf_tensor_empty(&ws, LF_DTYPE_F8E4M3, 1, &wsn, LF_DEVICE_CPU));
        for (int i = 0; i < T * YS; i++)
            y[i] = 0x7fc1; /* a NaN */
        OK(lf_nn_gated_mlp_forward_raw(&m, (lf_mlp_variant)v, xp, T, XS, y, YS, lf_tensor_data(ws), need,
                                       v % 2 ? &none : NULL));
        int same = 1, gaps = 1;
        const uint16_t *r = lf_tensor_data(ref);
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < YS; j++) {
                if (j < D)
                    same &= y[t * YS + j] == r[t * D + j];
                else
                    gaps &= y[t * YS + j] == 0x7fc1;
            }
        CHECK(same && gaps, "%s: forward_raw at row strides %d and %d: the allocating forward's bits, gaps untouched",
              name, XS, YS);
        FAILS(LF_ENOMEM, "needs",
              lf_nn_gated_mlp_forward_raw(&m, (lf_mlp_variant)v, xp, T, XS, y, YS, lf_tensor_data(ws), need - 2, NULL));
        lf_tensor_free(ref), lf_tensor_free(ws);
    }
    uint8_t ws[1 << 16];
    FAILS(LF_ESHAPE, "rows must be >= 1",
          lf_nn_gated_mlp_forward_raw(&m, LF_MLP_GATED, xp, 0, XS, y, YS, ws, sizeof ws, NULL));
    FAILS(LF_ESHAPE, "row stride",
          lf_nn_gated_mlp_forward_raw(&m, LF_MLP_GATED, xp, T, D - 1, y, YS, ws, sizeof ws, NULL));
    FAILS(LF_ESHAPE, "row stride",
          lf_nn_gated_mlp_forward_raw(&m, LF_MLP_GATED, xp, T, XS, y, -1, ws, sizeof ws, NULL));
    FAILS(LF_ESHAPE, "row stride",
          lf_nn_gated_mlp_forward_raw(&m, LF_MLP_GATED, xp, (int64_t)1 << 62, XS, y, YS, ws, sizeof ws, NULL));
    FAILS(LF_EINVAL, "'x'", lf_nn_gated_mlp_forward_raw(&m, LF_MLP_GATED, NULL, T, XS, y, YS, ws, sizeof ws, NULL));
    FAILS(LF_EINVAL, "'y'", lf_nn_gated_mlp_forward_raw(&m, LF_MLP_GATED, xp, T, XS, NULL, YS, ws, sizeof ws, NULL));
    FAILS(LF_EINVAL, "'workspace'", lf_nn_gated_mlp_forward_raw(&m, LF_MLP_GATED, xp, T, XS, y, YS, NULL, 8, NULL));
    FAILS(LF_EINVAL, "0 workspace bytes hold no",
          lf_nn_gated_mlp_forward_raw(&m, LF_MLP_GATED, xp, T, XS, y, YS, ws, 0, NULL));
    FAILS(LF_EINVAL, "no bf16 element", lf_nn_gated_mlp_forward_raw(&m, LF_MLP_GATED, xp, T, XS, y, YS, ws, 1, NULL));
    FAILS(LF_EINVAL, "variant",
          lf_nn_gated_mlp_forward_raw(&m, (lf_mlp_variant)9, xp, T, XS, y, YS, ws, sizeof ws, NULL));
    /* y over x's own memory: refused, x untouched */
    uint16_t before[T * XS];
    memcpy(before, xp, sizeof before);
    FAILS(LF_EINVAL, "", lf_nn_gated_mlp_forward_raw(&m, LF_MLP_GATED, xp, T, XS, xp + 4, XS, ws, sizeof ws, NULL));
    CHECK(!memcmp(before, xp, sizeof before), "forward_raw with y over x: x untouched");
    lf_nn_gated_mlp blank;
    memset(&blank, 0, sizeof blank);
    FAILS(LF_EINVAL, "not initialised",
          lf_nn_gated_mlp_forward_raw(&blank, LF_MLP_GATED, xp, T, XS, y, YS, ws, sizeof ws, NULL));
    FAILS(LF_EINVAL, "'m'", lf_nn_gated_mlp_forward_raw(NULL, LF_MLP_GATED, xp, T, XS, y, YS, ws, sizeof ws, NULL));
    lf_tensor_free(x), lf_tensor_free(xbig);
    lf_nn_gated_mlp_free(&m);
}

/* FP8 weights made once and handed back to a module over the same weights (a framework keeps them
 * as its own tensors): taken as they are, and refused by name when a dtype, shape, layout or
 * argument is wrong, the module then unchanged (and the handles freed: ASan sees leaks). */
static lf_tensor *handle(const lf_tensor *t) /* a new handle over t's memory (NULL: a failed check) */
{
    lf_tensor *h = NULL;
    CHECK(lf_tensor_as_strided(&h, t, t->ndim, t->shape, t->stride, t->offset) == LF_OK, "a view: %s", lf_last_error());
    return h;
}

static void test_set_fp8_weights(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 43);
    lf_nn_gated_mlp a, b;
    lf_nn_gated_mlp_opts o = {
        .dim = 24, .hidden = 136, .dtype = LF_DTYPE_BF16, .device = LF_DEVICE_CPU, .act = LF_ACT_GELU_TANH};
    OK(lf_nn_gated_mlp_init(&a, &o, &rng));
    OK(lf_nn_gated_mlp_quantize_fp8(&a));
    OK(lf_nn_gated_mlp_from_weights(&b, handle(a.gate_up), handle(a.down.weight), LF_ACT_GELU_TANH));
    OK(lf_nn_gated_mlp_set_fp8_weights(&b, handle(a.gate_up_q), handle(a.gate_up_scale), handle(a.down_q),
                                       handle(a.down_scale)));
    CHECK(lf_tensor_shares_storage(b.gate_up_q, a.gate_up_q) && lf_tensor_shares_storage(b.down_scale, a.down_scale),
          "the FP8 weights are taken as they are, no copy");
    const int64_t xs[2] = {9, 24};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs), *ya = NULL, *yb = NULL;
    OK(lf_nn_gated_mlp_forward_variant(&a, LF_MLP_FP8, x, &ya));
    OK(lf_nn_gated_mlp_forward_variant(&b, LF_MLP_FP8, x, &yb));
    CHECK(!memcmp(lf_tensor_data(ya), lf_tensor_data(yb), 9 * 24 * 2), "the fp8 forward over handed-back weights");
    lf_tensor *const keep = b.gate_up_q;
    FAILS(LF_EDTYPE, "gate_up_q is [272, 24] bf16 on cpu:0; expected a contiguous (272, 24) f8e4m3",
          lf_nn_gated_mlp_set_fp8_weights(&b, handle(a.gate_up), handle(a.gate_up_scale), handle(a.down_q),
                                          handle(a.down_scale)));
    FAILS(LF_ESHAPE, "down_scale is [272, 1] f32 on cpu:0; expected a contiguous (1, 4) f32",
          lf_nn_gated_mlp_set_fp8_weights(&b, handle(a.gate_up_q), handle(a.gate_up_scale), handle(a.down_q),
                                          handle(a.gate_up_scale)));
    lf_tensor *qt = NULL;
    OK(lf_tensor_t(&qt, a.down_q)); /* (136, 24): a transposed view is not the layout */
    FAILS(LF_ESHAPE, "down_q is [136, 24]",
          lf_nn_gated_mlp_set_fp8_weights(&b, handle(a.gate_up_q), handle(a.gate_up_scale), qt, handle(a.down_scale)));
    FAILS(
        LF_EINVAL, "argument 'down_q' is NULL",
        lf_nn_gated_mlp_set_fp8_weights(&b, handle(a.gate_up_q), handle(a.gate_up_scale), NULL, handle(a.down_scale)));
    CHECK(b.gate_up_q == keep, "a refusal leaves the module's FP8 weights as they were");
    lf_nn_gated_mlp empty;
    memset(&empty, 0, sizeof empty);
    FAILS(LF_EINVAL, "not initialised",
          lf_nn_gated_mlp_set_fp8_weights(&empty, handle(a.gate_up_q), handle(a.gate_up_scale), handle(a.down_q),
                                          handle(a.down_scale)));
    FAILS(LF_EINVAL, "argument 'm' is NULL", lf_nn_gated_mlp_set_fp8_weights(NULL, NULL, NULL, NULL, NULL));
    lf_tensor_free(x), lf_tensor_free(ya), lf_tensor_free(yb);
    lf_nn_gated_mlp_free(&a), lf_nn_gated_mlp_free(&b);
}

int main(void)
{
    test_linear_init();
    test_mlp_forward();
    test_nn_errors();
    test_forward_out();
    test_forward_raw();
    test_forward_raw_compiled();
    test_set_fp8_weights();
    return lf_test_finish("test_nn");
}
