/* Compile mode on the CPU: what the blog says torch.compile does, and what linfuse's passes add,
 * checked through the dispatcher's observer (the ops and kernels a run launches) and against
 * eager results: compiled linear = eager's one kernel and no view op; matmul-add = one GEMM
 * reading the 2-D bias as its C input; the MLP = 3 GEMMs + one fused kernel (2 kernels with the
 * gated pass); each pass's off switch; weights packed at compile time; guards and recompiles; bad
 * uses. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "linfuse/compile.h"
#include "linfuse/cpu.h"

enum { MAX_REC = 64 };

typedef struct recorder {
    int n;
    struct {
        int kind; /* 0 op, 1 kernel, 2 note */
        char name[160];
    } ev[MAX_REC];
} recorder;

static void put_ev(recorder *r, int kind, const char *name)
{
    if (r->n < MAX_REC) {
        r->ev[r->n].kind = kind;
        snprintf(r->ev[r->n].name, sizeof r->ev[r->n].name, "%s", name);
        r->n++;
    }
}
static void rec_begin(void *u, lf_op_id op, int n, const lf_op_arg *a)
{
    (void)n, (void)a;
    put_ev(u, 0, lf_op_name(op));
}
static void rec_end(void *u, lf_op_id op, lf_status s)
{
    (void)u, (void)op, (void)s;
}
static void rec_kbegin(void *u, lf_device d, lf_kernel_info *info)
{
    (void)u, (void)d;
}
static void rec_kend(void *u, lf_device d, const lf_kernel_info *info)
{
    (void)d;
    if (info)
        put_ev(u, 1, info->name);
}
static void rec_note(void *u, const char *text)
{
    put_ev(u, 2, text);
}
static void rec_note_end(void *u)
{
    (void)u;
}

static int count(const recorder *r, int kind, const char *needle)
{
    int c = 0;
    for (int i = 0; i < r->n; i++)
        c += r->ev[i].kind == kind && (!needle || strstr(r->ev[i].name, needle));
    return c;
}

static void dump(const recorder *r)
{
    for (int i = 0; i < r->n; i++)
        fprintf(stderr, "    %s %s\n",
                r->ev[i].kind == 0   ? "op"
                : r->ev[i].kind == 1 ? "kernel"
                                     : "note",
                r->ev[i].name);
}

/* One compiled run with the observer on. */
static lf_status observed_run(lf_compiled *c, lf_tensor *x, lf_tensor **y, recorder *rec)
{
    memset(rec, 0, sizeof *rec);
    lf_op_observer obs = {rec_begin, rec_end, rec_kbegin, rec_kend, rec, rec_note, rec_note_end, NULL, NULL};
    lf_ops_set_observer(&obs);
    lf_status s = lf_compiled_run(c, 1, &x, y);
    lf_ops_set_observer(NULL);
    return s;
}

/* |compiled - eager| by the usual measure, magnitudes from the eager result (both came from the
 * same float sums; compiled skips roundings eager makes between kernels). */
static double diff(const lf_tensor *a, const lf_tensor *b)
{
    int64_t n = lf_tensor_numel(a);
    if (n != lf_tensor_numel(b))
        return 1e9;
    double *A = to_f64(a), *B = to_f64(b), *mag = malloc((size_t)n * sizeof *mag), scale = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fabs(B[i]) > scale ? fabs(B[i]) : scale;
    for (int64_t i = 0; i < n; i++)
        mag[i] = 100 * scale / 4; /* 1% of |ref| + 0.25% of the largest output */
    double e = worst_err(A, B, mag, n, a->dtype, NULL);
    free(A), free(B), free(mag);
    return e;
}

/* --- the three forwards --- */

typedef struct model {
    lf_nn_linear lin;
    lf_nn_gated_mlp mlp;
    lf_tensor *w, *b;
} model;

static lf_status fwd_linear(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)n;
    return lf_nn_linear_forward(&((model *)ctx)->lin, in[0], out);
}

static lf_status fwd_matmul_add(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)n;
    const model *m = ctx;
    lf_tensor *t = NULL;
    lf_status s = lf_matmul(&t, in[0], m->w);
    if (s == LF_OK)
        s = lf_add(out, t, m->b);
    lf_tensor_free(t);
    return s;
}

static lf_status fwd_mlp(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)n;
    return lf_nn_gated_mlp_forward(&((model *)ctx)->mlp, in[0], out);
}

static lf_status fwd_identity(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)ctx, (void)n;
    return lf_view(out, in[0], in[0]->ndim, in[0]->shape);
}

static lf_status fwd_fails(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)ctx, (void)n;
    int64_t bad[2] = {3, 3};
    return lf_view(out, in[0], 2, bad);
}

static lf_compiled *compile_with(lf_forward_fn fn, model *m, lf_tensor *x, unsigned passes, int recompiles)
{
    lf_compile_opts o = lf_compile_opts_default();
    o.passes = passes;
    o.recompile_limit = recompiles;
    lf_compiled *c = NULL;
    lf_status s = lf_compile(&c, fn, m, 1, &x, &o);
    CHECK(s == LF_OK, "compile: %s", s == LF_OK ? "" : lf_last_error());
    return c;
}

/* Run compiled and eager on x; check kernels and ops of the compiled run and the result. */
static void check_run(lf_compiled *c, lf_forward_fn fn, model *m, lf_tensor *x, int kernels, const char *kernel,
                      int ops, const char *what)
{
    recorder rec;
    lf_tensor *y = NULL, *ref = NULL;
    OK(observed_run(c, x, &y, &rec));
    OK(fn(m, 1, &x, &ref));
    int good = count(&rec, 1, NULL) == kernels && (!kernel || count(&rec, 1, kernel) == 1) &&
               count(&rec, 0, NULL) == ops && count(&rec, 2, "Compiled Region: ") == 1 &&
               count(&rec, 2, "lf::guard_check") == 1;
    CHECK(good, "%s: %d kernels (%s) and %d ops expected", what, kernels, kernel ? kernel : "-", ops);
    if (!good)
        dump(&rec);
    if (y && ref) {
        CHECK(y->ndim == ref->ndim && !memcmp(y->shape, ref->shape, (size_t)y->ndim * sizeof y->shape[0]),
              "%s: output shape", what);
        /* the MLP against float64 (its passes skip roundings eager makes between kernels, so
         * compiled and eager may each be a few bf16 ulps off, in different directions) */
        double e = fn == fwd_mlp ? gated_mlp_err(&m->mlp, x, y, 1) : diff(y, ref);
        CHECK(e < tol_for(y->dtype), "%s: err %.3g (%s)", what, e, fn == fwd_mlp ? "vs float64" : "vs eager");
    }
    lf_tensor_free(y), lf_tensor_free(ref);
}

static void test_linear(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 51);
    model m = {0};
    lf_nn_linear_opts o = {32, 64, 1, LF_DTYPE_BF16, LF_DEVICE_CPU};
    OK(lf_nn_linear_init(&m.lin, &o, &rng));
    int64_t xs[2] = {37, 32};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs);
    lf_compiled *c = compile_with(fwd_linear, &m, x, LF_PASSES_DEFAULT, 0);
    /* eager's own kernel, nothing else: no lf::linear, lf::t or lf::addmm on the CPU lane */
    check_run(c, fwd_linear, &m, x, 1, "lf_cpu_gemm_bf16_12x32_tn_bias", 0, "compiled linear");
    /* new values in the same input (and in the weight): the run reads both afresh */
    OK(lf_tensor_fill_uniform(x, &rng, -1, 1));
    OK(lf_tensor_fill_uniform(m.lin.weight, &rng, -1, 1));
    check_run(c, fwd_linear, &m, x, 1, NULL, 0, "compiled linear, new values");
    lf_compiled_free(c);
    /* view folding off: the run dispatches lf::t again (one op), same kernel */
    c = compile_with(fwd_linear, &m, x, LF_PASSES_DEFAULT & ~LF_PASS_FOLD_VIEWS, 0);
    check_run(c, fwd_linear, &m, x, 1, "_tn_bias", 1, "linear, views kept");
    CHECK(lf_compiled_get_stats(c).views == 1, "one view op per run");
    lf_compiled_free(c);
    lf_tensor_free(x);
    lf_nn_linear_free(&m.lin);
}

static void test_matmul_add(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 52);
    model m = {0};
    for (int batched = 0; batched < 2; batched++) {
        int64_t sq[2] = {48, 48}, b3[3] = {4, 48, 48};
        lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, batched ? 3 : 2, batched ? b3 : sq);
        m.w = rand_tensor(&rng, LF_DTYPE_F32, 2, sq);
        m.b = rand_tensor(&rng, LF_DTYPE_F32, 2, sq); /* the blog's 2-D bias */
        lf_compiled *c = compile_with(fwd_matmul_add, &m, x, LF_PASSES_DEFAULT, 0);
        /* one GEMM whose C input is the bias, read in place: no add kernel, no copy */
        check_run(c, fwd_matmul_add, &m, x, batched ? 2 : 1, batched ? NULL : "_nn_c", 0,
                  batched ? "batched matmul-add (bias broadcast over the batch: add stays)" : "compiled matmul-add");
        lf_compiled_free(c);
        c = compile_with(fwd_matmul_add, &m, x, LF_PASSES_DEFAULT & ~LF_PASS_BIAS_EPILOGUE, 0);
        check_run(c, fwd_matmul_add, &m, x, 2, "lf_cpu_add", 0, "matmul-add, bias pass off");
        lf_compiled_free(c);
        lf_tensor_free(x), lf_tensor_free(m.w), lf_tensor_free(m.b);
    }
    /* a (N) bias row rides in the epilogue instead */
    int64_t xs[2] = {20, 24}, ws[2] = {24, 40}, n = 40;
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, 2, xs);
    m.w = rand_tensor(&rng, LF_DTYPE_F32, 2, ws);
    m.b = rand_tensor(&rng, LF_DTYPE_F32, 1, &n);
    lf_compiled *c = compile_with(fwd_matmul_add, &m, x, LF_PASSES_DEFAULT, 0);
    check_run(c, fwd_matmul_add, &m, x, 1, "_nn_bias", 0, "matmul + bias row");
    lf_compiled_free(c);
    lf_tensor_free(x), lf_tensor_free(m.w), lf_tensor_free(m.b);
}

static void test_mlp(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 53);
    for (int dt = 0; dt < 2; dt++) {
        lf_dtype d = dt ? LF_DTYPE_BF16 : LF_DTYPE_F32;
        model m = {0};
        lf_nn_gated_mlp_opts o = {48, 136, d, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
        OK(lf_nn_gated_mlp_init(&m.mlp, &o, &rng));
        int64_t xs[3] = {3, 7, 48};
        lf_tensor *x = rand_tensor(&rng, d, 3, xs);
        char what[96];
        snprintf(what, sizeof what, "compiled mlp %s", lf_dtype_name(d));
        /* 3 GEMMs + one fused gelu*mul, as torch.compile's */
        lf_compiled *c = compile_with(fwd_mlp, &m, x, LF_PASSES_DEFAULT, 0);
        check_run(c, fwd_mlp, &m, x, 4, "lf_poi_fused_gelu_mul_0", 0, what);
        lf_compiled_free(c);
        /* gated: 2 kernels, and the result within float64's tolerance */
        c = compile_with(fwd_mlp, &m, x, LF_PASSES_ALL, 0);
        snprintf(what, sizeof what, "compiled mlp, gated, %s", lf_dtype_name(d));
        check_run(c, fwd_mlp, &m, x, 2, "_gated", 0, what);
        lf_compiled_free(c);
        /* fusion off, act epilogue on: gelu goes into the gate GEMM, mul stays: 4 kernels */
        c = compile_with(fwd_mlp, &m, x, LF_PASSES_DEFAULT & ~LF_PASS_POINTWISE_FUSION, 0);
        check_run(c, fwd_mlp, &m, x, 4, "_gelu_tanh", 0, "mlp, fusion off");
        lf_compiled_free(c);
        /* no passes: eager's five kernels, replayed */
        c = compile_with(fwd_mlp, &m, x, LF_PASS_FOLD_VIEWS, 0);
        check_run(c, fwd_mlp, &m, x, 5, "lf_cpu_mul", 0, "mlp, passes off");
        lf_compiled_free(c);
        lf_tensor_free(x);
        lf_nn_gated_mlp_free(&m.mlp);
    }
    /* SwiGLU: the same passes, silu where gelu was */
    for (int dt = 0; dt < 2; dt++) {
        lf_dtype d = dt ? LF_DTYPE_BF16 : LF_DTYPE_F32;
        model m = {0};
        lf_nn_gated_mlp_opts o = {48, 136, d, LF_DEVICE_CPU, LF_ACT_SILU};
        OK(lf_nn_gated_mlp_init(&m.mlp, &o, &rng));
        int64_t xs[3] = {3, 7, 48};
        lf_tensor *x = rand_tensor(&rng, d, 3, xs);
        char what[96];
        snprintf(what, sizeof what, "compiled swiglu %s", lf_dtype_name(d));
        lf_compiled *c = compile_with(fwd_mlp, &m, x, LF_PASSES_DEFAULT, 0);
        check_run(c, fwd_mlp, &m, x, 4, "lf_poi_fused_silu_mul_0", 0, what);
        lf_compiled_free(c);
        c = compile_with(fwd_mlp, &m, x, LF_PASSES_ALL, 0);
        snprintf(what, sizeof what, "compiled swiglu, gated, %s", lf_dtype_name(d));
        check_run(c, fwd_mlp, &m, x, 2, "_silu_gated", 0, what);
        lf_compiled_free(c);
        lf_tensor_free(x);
        lf_nn_gated_mlp_free(&m.mlp);
    }
}

/* Whether two compiled runs of x give the same values, to the bit (as f32, which holds bf16's). */
static int same_bits(lf_compiled *a, lf_compiled *b, lf_tensor *x)
{
    lf_tensor *ya = NULL, *yb = NULL;
    float *fa = NULL, *fb = NULL;
    int same = 0;
    if (lf_compiled_run(a, 1, &x, &ya) == LF_OK && lf_compiled_run(b, 1, &x, &yb) == LF_OK &&
        lf_tensor_numel(ya) == lf_tensor_numel(yb)) {
        const int64_t n = lf_tensor_numel(ya);
        fa = malloc((size_t)n * sizeof *fa), fb = malloc((size_t)n * sizeof *fb);
        same = fa && fb && lf_tensor_to_f32(ya, fa, n) == LF_OK && lf_tensor_to_f32(yb, fb, n) == LF_OK &&
               !memcmp(fa, fb, (size_t)n * sizeof *fa);
    }
    free(fa), free(fb);
    lf_tensor_free(ya), lf_tensor_free(yb);
    return same;
}

/* LF_PASS_PACK_WEIGHTS: every GEMM reading a parameter reads it packed at compile time, with the
 * same kernels and the same bits as the plan without it; a decode-sized x (up to 16 rows, read
 * from B itself) and a larger one; the plan says which GEMMs it packed. */
static void test_packed_weights(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 57);
    for (int dt = 0; dt < 2; dt++)
        for (int rows = 0; rows < 2; rows++) {
            const lf_dtype d = dt ? LF_DTYPE_BF16 : LF_DTYPE_F32;
            model m = {0};
            lf_nn_gated_mlp_opts o = {48, 136, d, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
            OK(lf_nn_gated_mlp_init(&m.mlp, &o, &rng));
            int64_t xs[3] = {rows ? 3 : 1, 7, 48};
            lf_tensor *x = rand_tensor(&rng, d, 3, xs);
            for (int gated = 0; gated < 2; gated++) {
                const unsigned base = gated ? LF_PASSES_ALL : LF_PASSES_DEFAULT;
                char what[96];
                snprintf(what, sizeof what, "packed weights, %s, %s, %d rows", gated ? "gated" : "default",
                         lf_dtype_name(d), (int)(xs[0] * xs[1]));
                lf_compiled *plain = compile_with(fwd_mlp, &m, x, base, 0);
                lf_compiled *packed = compile_with(fwd_mlp, &m, x, base | LF_PASS_PACK_WEIGHTS, 0);
                check_run(packed, fwd_mlp, &m, x, gated ? 2 : 4, gated ? "_gated" : "lf_poi_fused_gelu_mul_0", 0, what);
                CHECK(same_bits(plain, packed, x), "%s: the bits of the plan without packing", what);
                const lf_cpu_isa best = lf_cpu_isa_active();
                if (best > LF_CPU_ISA_SCALAR) { /* kernels forced elsewhere after compiling: B packed per run */
                    OK(lf_cpu_isa_force(LF_CPU_ISA_SCALAR));
                    CHECK(same_bits(plain, packed, x), "%s: scalar kernels forced after compiling", what);
                    OK(lf_cpu_isa_force(best));
                }
                char *text = NULL;
                OK(lf_compiled_describe(packed, &text));
                int n = 0;
                for (const char *t = text; t && (t = strstr(t, "B packed once")); t++)
                    n++;
                /* 7 rows against a Linear weight read it directly (linfuse/cpu.h): left as they were */
                const int want = rows ? (gated ? 2 : 3) : 0;
                CHECK(n == want && (rows || strstr(text, "16 rows or fewer read the weight itself")),
                      "%s: %d GEMMs say they read a packed B (%d expected)", what, n, want);
                free(text);
                lf_compiled_free(plain), lf_compiled_free(packed);
            }
            lf_tensor_free(x);
            lf_nn_gated_mlp_free(&m.mlp);
        }
}

static void test_guards_and_recompiles(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 54);
    model m = {0};
    lf_nn_linear_opts o = {16, 24, 1, LF_DTYPE_F32, LF_DEVICE_CPU};
    OK(lf_nn_linear_init(&m.lin, &o, &rng));
    int64_t xs[2] = {10, 16}, other[2] = {12, 16};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, 2, xs), *y = NULL;
    lf_tensor *xt = rand_colmajor(&rng, LF_DTYPE_F32, 10, 16); /* same shape, transposed strides */
    lf_tensor *x2 = rand_tensor(&rng, LF_DTYPE_F32, 2, other), *xb = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs);
    lf_compiled *c = compile_with(fwd_linear, &m, x, LF_PASSES_DEFAULT, 0);
    FAILS(LF_EGUARD, "input 0: strides [1, 10], compiled for [16, 1]", lf_compiled_run(c, 1, &xt, &y));
    CHECK(y == NULL, "no output when a guard fails");
    FAILS(LF_EGUARD, "input 0: shape [12, 16], compiled for [10, 16]", lf_compiled_run(c, 1, &x2, &y));
    FAILS(LF_EGUARD, "input 0: dtype bf16, compiled for f32", lf_compiled_run(c, 1, &xb, &y));
    FAILS(LF_EGUARD, "2 inputs, compiled for 1", lf_compiled_run(c, 2, (lf_tensor *[]){x, x}, &y));
    OK(lf_compiled_run(c, 1, &x, &y)); /* still fine for what it was compiled for */
    lf_tensor_free(y), y = NULL;
    lf_compiled_free(c);

    /* recompile policy: new shapes capture again, up to the limit, with a note saying why */
    c = compile_with(fwd_linear, &m, x, LF_PASSES_DEFAULT, 2);
    recorder rec;
    OK(observed_run(c, x2, &y, &rec));
    CHECK(count(&rec, 2, "Recompile: forward (input 0: shape [12, 16], compiled for [10, 16])") == 1,
          "a recompile note names the reason");
    lf_tensor *ref = NULL;
    OK(fwd_linear(&m, 1, &x2, &ref));
    if (y && ref)
        CHECK(diff(y, ref) < 1e-5, "recompiled output equals eager");
    lf_tensor_free(y), lf_tensor_free(ref), y = ref = NULL;
    OK(observed_run(c, xt, &y, &rec)); /* the transposed layout: the second recompile */
    OK(fwd_linear(&m, 1, &xt, &ref));
    if (y && ref)
        CHECK(diff(y, ref) < 1e-5, "recompiled (transposed input) equals eager");
    lf_tensor_free(y), lf_tensor_free(ref), y = ref = NULL;
    OK(observed_run(c, x, &y, &rec)); /* the first plan again: no recompile */
    CHECK(count(&rec, 2, "Recompile") == 0, "a known input picks its plan");
    CHECK(lf_compiled_get_stats(c).plans == 3, "3 plans, got %d", lf_compiled_get_stats(c).plans);
    lf_tensor_free(y), y = NULL;
    FAILS(LF_EGUARD, "recompile limit reached", lf_compiled_run(c, 1, &xb, &y));
    /* of three plans, the nearest miss is named: x2's shape with other strides, not the shape of
     * the plan used last */
    lf_tensor *x2t = rand_colmajor(&rng, LF_DTYPE_F32, 12, 16);
    FAILS(LF_EGUARD, "input 0: strides [1, 12], compiled for [16, 1] (recompile limit reached)",
          lf_compiled_run(c, 1, &x2t, &y));
    lf_compiled_free(c);
    lf_tensor *list[] = {x, xt, x2, xb, x2t};
    for (int i = 0; i < 5; i++)
        lf_tensor_free(list[i]);
    lf_nn_linear_free(&m.lin);
}

static void test_bad_uses(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 55);
    int64_t xs[2] = {4, 6};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, 2, xs);
    lf_compiled *c = (lf_compiled *)&rng; /* must be reset to NULL on failure */
    FAILS(LF_EINVAL, "'fn' is NULL", lf_compile(&c, NULL, NULL, 1, &x, NULL));
    CHECK(c == NULL, "no compiled forward on failure");
    lf_compile_opts o = lf_compile_opts_default();
    o.recompile_limit = 99;
    FAILS(LF_EINVAL, "recompile_limit 99", lf_compile(&c, fwd_identity, NULL, 1, &x, &o));
    o = lf_compile_opts_default();
    o.passes = LF_PASSES_ALL | 0x80u;
    FAILS(LF_EINVAL, "no LF_PASS_* (0x80)", lf_compile(&c, fwd_identity, NULL, 1, &x, &o));
    FAILS(LF_EINVAL, "9 inputs", lf_compile(&c, fwd_identity, NULL, 9, &x, NULL));
    FAILS(LF_EUNSUPPORTED, "one of its inputs", lf_compile(&c, fwd_identity, NULL, 1, &x, NULL));
    FAILS(LF_ESHAPE, NULL, lf_compile(&c, fwd_fails, NULL, 1, &x, NULL));
    lf_tensor *y = NULL;
    FAILS(LF_EINVAL, "'c' is NULL", lf_compiled_run(NULL, 1, &x, &y));
    lf_compiled_free(NULL);
    lf_tensor_free(x);
}

int main(void)
{
    test_linear();
    test_matmul_add();
    test_mlp();
    test_packed_weights();
    test_guards_and_recompiles();
    test_bad_uses();
    return lf_test_finish("test_compile");
}
