/* Ops through the dispatcher, what the case table (test_cases, cases.c) does not hold: the
 * dispatch chain the observer sees (linear -> t -> addmm, one kernel carrying the bias), the MLP's
 * five kernels, fused epilogues equal to the unfused op sequences, linear equal to x @ w.T + b
 * done as ops, and act_mul's refusals. Every op's values against float64 are cases of the table. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* --- an observer that writes down what the dispatcher did --- */

enum { MAX_REC = 128 };
typedef struct recorder {
    int n, depth;
    struct {
        int depth, kernel;
        char name[96];
    } ev[MAX_REC];
} recorder;

static void rec_begin(void *u, lf_op_id op, int n, const lf_op_arg *a)
{
    (void)n, (void)a;
    recorder *r = u;
    if (r->n < MAX_REC) {
        r->ev[r->n].depth = r->depth;
        r->ev[r->n].kernel = 0;
        snprintf(r->ev[r->n].name, sizeof r->ev[r->n].name, "%s", lf_op_name(op));
        r->n++;
    }
    r->depth++;
}
static void rec_end(void *u, lf_op_id op, lf_status s)
{
    (void)op, (void)s, ((recorder *)u)->depth--;
}
static void rec_kbegin(void *u, lf_device d, lf_kernel_info *info)
{
    (void)u, (void)d;
}
static void rec_kend(void *u, lf_device d, const lf_kernel_info *info)
{
    (void)d;
    recorder *r = u;
    if (r->n < MAX_REC && info) {
        r->ev[r->n].depth = r->depth;
        r->ev[r->n].kernel = 1;
        snprintf(r->ev[r->n].name, sizeof r->ev[r->n].name, "%s", info->name);
        r->n++;
    }
}

static int count_kernels(const recorder *r, const char *needle)
{
    int n = 0;
    for (int i = 0; i < r->n; i++)
        n += r->ev[i].kernel && (!needle || strstr(r->ev[i].name, needle));
    return n;
}

static int count_ops(const recorder *r, const char *name)
{
    int n = 0;
    for (int i = 0; i < r->n; i++)
        n += !r->ev[i].kernel && !strcmp(r->ev[i].name, name);
    return n;
}

static void print_rec(const recorder *r)
{
    for (int i = 0; i < r->n; i++)
        fprintf(stderr, "  %*s%s%s\n", 2 * r->ev[i].depth, "", r->ev[i].kernel ? "kernel " : "", r->ev[i].name);
}

/* linear equals x @ w.T + b done as separate ops (matmul on the transposed view, then add) */
static void test_linear_equals_matmul_add(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 12);
    int64_t xs[3] = {2, 33, 64}, ws[2] = {96, 64}, n = 96;
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, 3, xs), *w = rand_tensor(&rng, LF_DTYPE_F32, 2, ws);
    lf_tensor *b = rand_tensor(&rng, LF_DTYPE_F32, 1, &n), *y = NULL, *wt = NULL, *xw = NULL, *y2 = NULL;
    OK(lf_linear(&y, x, w, b));
    OK(lf_t(&wt, w));
    OK(lf_matmul(&xw, x, wt));
    OK(lf_add(&y2, xw, b));
    double *a = to_f64(y), *c = to_f64(y2), *mag = malloc(2 * 33 * 96 * sizeof *mag);
    for (int i = 0; i < 2 * 33 * 96; i++)
        mag[i] = fabs(c[i]) + 1;
    CHECK(worst_err(a, c, mag, 2 * 33 * 96, LF_DTYPE_F32, NULL) < 1e-6, "linear == matmul(x, w.T) + b");
    free(a), free(c), free(mag);
    lf_tensor_free(x), lf_tensor_free(w), lf_tensor_free(b), lf_tensor_free(y), lf_tensor_free(wt);
    lf_tensor_free(xw), lf_tensor_free(y2);
}

/* the chain the blog shows: linear -> t (no kernel) -> addmm, ONE kernel with the bias */
static void test_dispatch_chain(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 14);
    lf_nn_linear lin;
    lf_nn_linear_opts o = {32, 64, 1, LF_DTYPE_BF16, LF_DEVICE_CPU};
    OK(lf_nn_linear_init(&lin, &o, &rng));
    int64_t xs[2] = {1024, 32};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs), *y = NULL;
    recorder rec = {0};
    lf_op_observer obs = {rec_begin, rec_end, rec_kbegin, rec_kend, &rec, NULL, NULL, NULL, NULL};
    lf_ops_set_observer(&obs);
    lf_status s = lf_nn_linear_forward(&lin, x, &y);
    lf_ops_set_observer(NULL);
    OK(s);
    int good = rec.n == 4 && !strcmp(rec.ev[0].name, "lf::linear") && rec.ev[0].depth == 0 &&
               !strcmp(rec.ev[1].name, "lf::t") && rec.ev[1].depth == 1 && !strcmp(rec.ev[2].name, "lf::addmm") &&
               rec.ev[2].depth == 1 && rec.ev[3].kernel && rec.ev[3].depth == 2;
    CHECK(good, "linear with bias: expected linear{t, addmm{kernel}}");
    CHECK(count_kernels(&rec, NULL) == 1 && count_kernels(&rec, "_tn_bias") == 1, "one tn GEMM kernel with the bias");
    CHECK(count_kernels(&rec, "lf_cpu_add") == 0, "no add kernel");
    if (!good)
        print_rec(&rec);
    lf_tensor_free(y);
    lf_nn_linear_free(&lin);

    /* no bias: mm, one kernel, no bias in its name */
    o.bias = 0;
    OK(lf_nn_linear_init(&lin, &o, &rng));
    rec.n = 0;
    lf_ops_set_observer(&obs);
    s = lf_nn_linear_forward(&lin, x, &y);
    lf_ops_set_observer(NULL);
    OK(s);
    CHECK(count_ops(&rec, "lf::mm") == 1 && count_ops(&rec, "lf::addmm") == 0, "no bias: lf::mm");
    CHECK(count_kernels(&rec, NULL) == 1 && count_kernels(&rec, "bias") == 0, "one kernel without bias");
    lf_tensor_free(y);
    lf_nn_linear_free(&lin);
    lf_tensor_free(x);

    /* matmul-add: two kernels (GEMM, add) */
    int64_t s64[2] = {64, 64};
    lf_tensor *a = rand_tensor(&rng, LF_DTYPE_BF16, 2, s64), *w = rand_tensor(&rng, LF_DTYPE_BF16, 2, s64);
    lf_tensor *b = rand_tensor(&rng, LF_DTYPE_BF16, 2, s64), *ab = NULL;
    rec.n = 0;
    lf_ops_set_observer(&obs);
    s = lf_matmul(&ab, a, w);
    if (s == LF_OK)
        s = lf_add(&y, ab, b);
    lf_ops_set_observer(NULL);
    OK(s);
    CHECK(count_kernels(&rec, NULL) == 2 && count_kernels(&rec, "_nn") == 1 && count_kernels(&rec, "lf_cpu_add") == 1,
          "matmul-add: an nn GEMM and an add");
    lf_tensor_free(a), lf_tensor_free(w), lf_tensor_free(b), lf_tensor_free(ab), lf_tensor_free(y);
}

/* simple-mlp eager: five kernels (three GEMMs, gelu, mul); view ops launch nothing */
static void test_mlp_chain(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 15);
    lf_nn_gated_mlp mlp;
    lf_nn_gated_mlp_opts o = {64, 96, LF_DTYPE_BF16, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
    OK(lf_nn_gated_mlp_init(&mlp, &o, &rng));
    int64_t xs[3] = {2, 7, 64};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 3, xs), *y = NULL;
    recorder rec = {0};
    lf_op_observer obs = {rec_begin, rec_end, rec_kbegin, rec_kend, &rec, NULL, NULL, NULL, NULL};
    lf_ops_set_observer(&obs);
    lf_status s = lf_nn_gated_mlp_forward(&mlp, x, &y);
    lf_ops_set_observer(NULL);
    OK(s);
    CHECK(count_kernels(&rec, NULL) == 5, "five kernels, got %d", count_kernels(&rec, NULL));
    CHECK(count_kernels(&rec, "lf_cpu_gemm_") == 3 && count_kernels(&rec, "gelu_tanh") == 1 &&
              count_kernels(&rec, "lf_cpu_mul") == 1,
          "three GEMMs, one gelu, one mul");
    CHECK(count_ops(&rec, "lf::linear") == 3 && count_ops(&rec, "lf::t") == 3, "three linears, each with t");
    /* every kernel sits under a GEMM or pointwise op, never under a view op */
    int bad = 0;
    for (int i = 0; i < rec.n; i++)
        if (rec.ev[i].kernel) {
            int j = i - 1;
            while (j >= 0 && (rec.ev[j].kernel || rec.ev[j].depth >= rec.ev[i].depth))
                j--;
            bad += j < 0 || !strcmp(rec.ev[j].name, "lf::t") || !strcmp(rec.ev[j].name, "lf::view") ||
                   !strcmp(rec.ev[j].name, "lf::reshape");
        }
    CHECK(bad == 0, "%d kernels were launched by view ops", bad);
    if (count_kernels(&rec, NULL) != 5)
        print_rec(&rec);
    lf_tensor_free(x), lf_tensor_free(y);
    lf_nn_gated_mlp_free(&mlp);
}

/* fused epilogues equal the unfused op sequences */
static void test_fused_equals_unfused(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 16);
    for (int dt = 0; dt < 2; dt++) {
        lf_dtype d = dt ? LF_DTYPE_BF16 : LF_DTYPE_F32;
        const int64_t M = 65, K = 96, H = 80;
        int64_t xs[2] = {M, K}, ws[2] = {H, K};
        lf_tensor *x = rand_tensor(&rng, d, 2, xs), *w = rand_tensor(&rng, d, 2, ws), *b = rand_tensor(&rng, d, 1, &H);
        lf_tensor *wt = NULL, *fused = NULL, *lin = NULL, *unfused = NULL;
        OK(lf_t(&wt, w));
        for (int act = 0; act < LF_ACT_COUNT; act++) {
            if (act == LF_ACT_RELU)
                continue; /* no separate relu op; covered in the backend tests */
            OK(lf_addmm_act(&fused, b, x, wt, (lf_act)act));
            OK(lf_addmm(&lin, b, x, wt, 1.0f, 1.0f));
            if (act == LF_ACT_NONE)
                unfused = lin, lin = NULL;
            else if (act == LF_ACT_SILU)
                OK(lf_silu(&unfused, lin));
            else
                OK(lf_gelu(&unfused, lin, act == LF_ACT_GELU_TANH ? LF_GELU_TANH : LF_GELU_ERF));
            double *f = to_f64(fused), *u = to_f64(unfused), *mag = malloc((size_t)(M * H) * sizeof *mag);
            for (int64_t i = 0; i < M * H; i++)
                mag[i] = 1; /* both are rounded to d once or twice; compare at d's resolution */
            /* bf16: the unfused path rounds the pre-activation to bf16 before gelu, the fused
             * one does not, so they may differ by a bf16 ulp or two */
            CHECK(worst_err(f, u, mag, M * H, d, NULL) < (dt ? 2e-2 : 1e-5), "addmm_act %s %s == act(addmm)",
                  lf_act_name((lf_act)act), lf_dtype_name(d));
            free(f), free(u), free(mag);
            lf_tensor_free(fused), lf_tensor_free(lin), lf_tensor_free(unfused);
            fused = lin = unfused = NULL;
        }
        /* the gated GEMM equals gelu(x Wg^T) * (x Wu^T) with Wg, Wu interleaved in blocks of 8 */
        int64_t gs[2] = {2 * H, K};
        lf_tensor *wgu = rand_tensor(&rng, d, 2, gs), *wgut = NULL, *m = NULL;
        OK(lf_t(&wgut, wgu));
        OK(lf_mm_gated(&m, x, wgut, LF_ACT_GELU_TANH, 8));
        /* split the interleaved weight into its gate and up halves with views */
        int64_t half_shape[3] = {H / 8, 8, K}, half_stride[3] = {16 * K, K, 1};
        lf_tensor *wg3 = NULL, *wu3 = NULL, *wg = NULL, *wu = NULL;
        OK(lf_tensor_as_strided(&wg3, wgu, 3, half_shape, half_stride, 0));
        OK(lf_tensor_as_strided(&wu3, wgu, 3, half_shape, half_stride, 8 * K));
        int64_t flat[2] = {H, K};
        OK(lf_reshape(&wg, wg3, 2, flat));
        OK(lf_reshape(&wu, wu3, 2, flat));
        lf_tensor *g = NULL, *u = NULL, *a = NULL, *ref = NULL;
        OK(lf_linear(&g, x, wg, NULL));
        OK(lf_linear(&u, x, wu, NULL));
        OK(lf_gelu(&a, g, LF_GELU_TANH));
        OK(lf_mul(&ref, a, u));
        double *mf = to_f64(m), *mr = to_f64(ref), *mag = malloc((size_t)(M * H) * sizeof *mag);
        double *G = to_f64(g), *U = to_f64(u);
        for (int64_t i = 0; i < M * H; i++)
            mag[i] = (fabs(G[i]) + 1) * (fabs(U[i]) + 1);
        CHECK(worst_err(mf, mr, mag, M * H, d, NULL) < (dt ? 2e-2 : 1e-5), "gated GEMM == gelu(g) * u (%s)",
              lf_dtype_name(d));
        free(mf), free(mr), free(mag), free(G), free(U);
        lf_tensor *list[] = {x, w, b, wt, wgu, wgut, m, wg3, wu3, wg, wu, g, u, a, ref};
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
            lf_tensor_free(list[i]);
    }
}

/* gelu_mul and silu_mul refuse operands of two shapes or dtypes, an unknown approximation and
 * a missing operand, each by name, handing nothing out (their values are the table's). */
static void test_act_mul_refusals(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 23);
    int64_t s1[2] = {4, 6}, s2[2] = {4, 5};
    lf_tensor *g = rand_tensor(&rng, LF_DTYPE_F32, 2, s1), *u = rand_tensor(&rng, LF_DTYPE_F32, 2, s2);
    lf_tensor *ub = rand_tensor(&rng, LF_DTYPE_BF16, 2, s1), *o = NULL;
    FAILS(LF_ESHAPE, "must have one shape", lf_gelu_mul(&o, g, u, LF_GELU_TANH));
    FAILS(LF_EDTYPE, "expected one dtype", lf_gelu_mul(&o, g, ub, LF_GELU_TANH));
    FAILS(LF_EINVAL, "approximate = 9", lf_gelu_mul(&o, g, g, (lf_gelu_approx)9));
    FAILS(LF_EINVAL, "'u' is NULL", lf_gelu_mul(&o, g, NULL, LF_GELU_TANH));
    FAILS(LF_ESHAPE, "lf_silu_mul: g [4, 6] and u [4, 5] must have one shape", lf_silu_mul(&o, g, u));
    FAILS(LF_EINVAL, "lf_silu: argument 'x' is NULL", lf_silu(&o, NULL));
    CHECK(o == NULL, "no output on failure");
    lf_tensor_free(g), lf_tensor_free(u), lf_tensor_free(ub);
}

int main(void)
{
    test_linear_equals_matmul_add();
    test_dispatch_chain();
    test_mlp_chain();
    test_fused_equals_unfused();
    test_act_mul_refusals();
    return lf_test_finish("test_ops");
}
