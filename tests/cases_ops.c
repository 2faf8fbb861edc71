/* The case table's GEMM ops, called as users call them on the device's tensors: mm, mm_out (into
 * a view of a poisoned buffer), addmm with each bias form, addmm_act, linear on 1-, 2- and 3-D x,
 * matmul of a 3-D x no view flattens, mm_gated (the device's kernel or its fallback). Each run
 * checks the values against float64, the output's shape and device, the inputs untouched, and the
 * kernels the dispatcher launched: one GEMM carrying its bias (a (N) bias with beta 1 in the
 * epilogue, any other read as C), or for mm_gated one kernel, or two where lf_gated_choose says the
 * device falls back (a GEMM and act_mul). */
#include <stdlib.h>
#include <string.h>

#include "cases.h"

typedef struct op_ctx {
    const case_t *c;
    int64_t rows, N, K, No; /* rows of the flattened x */
    operand a, b, bias, out;
    double *ref, *mag, *ab;
    int64_t step;
} op_ctx;

/* out's expected dims */
static int out_shape(const op_ctx *x, int64_t *shape)
{
    const case_t *c = x->c;
    if (c->op == CASE_LINEAR && c->nd == 1)
        return shape[0] = x->No, 1;
    if ((c->op == CASE_LINEAR || c->op == CASE_MATMUL) && c->nd == 3)
        return shape[0] = c->batch, shape[1] = c->m, shape[2] = x->No, 3;
    return shape[0] = x->rows, shape[1] = x->No, 2;
}

/* The op on the device's operands; *y its new output (mm_out: NULL). */
static lf_status call(const op_ctx *x, lf_tensor **y)
{
    const case_t *c = x->c;
    const lf_tensor *a = x->a.dview, *b = x->b.dview, *bias = c->bias ? x->bias.dview : NULL;
    switch (c->op) {
    case CASE_MM:
        return lf_mm(y, a, b);
    case CASE_MM_OUT:
        return lf_mm_out(x->out.dview, a, b);
    case CASE_ADDMM:
        return lf_addmm(y, bias, a, b, c->beta, c->alpha);
    case CASE_ADDMM_ACT:
        return lf_addmm_act(y, bias, a, b, c->act);
    case CASE_LINEAR:
        return lf_linear(y, a, b, bias);
    case CASE_MATMUL:
        return lf_matmul(y, a, b);
    default:
        return lf_mm_gated(y, a, b, c->act, c->group);
    }
}

/* The kernels the op must launch, and the tokens their names carry. */
static void expect_kernels(case_run *r, const op_ctx *x, const kernel_log *k)
{
    const case_t *c = x->c;
    if (c->op == CASE_MM_GATED) {
        /* ask the one decision what the op runs: the same description, an output of its own */
        lf_tensor *scratch = NULL;
        lf_gated_choice ch = {0};
        lf_status s = lf_tensor_empty(&scratch, c->dt, 2, (int64_t[]){x->rows, x->No}, r->dev);
        if (s == LF_OK) {
            const lf_tensor *a = x->a.dview, *b = x->b.dview;
            lf_gemm g = {.ep = lf_epilogue_default()};
            g.a = (lf_matrix){lf_tensor_data(a), c->dt, a->shape[0], a->shape[1], a->stride[0], a->stride[1]};
            g.b = (lf_matrix){lf_tensor_data(b), c->dt, b->shape[0], b->shape[1], b->stride[0], b->stride[1]};
            g.d = (lf_matrix){lf_tensor_data(scratch), c->dt, x->rows, x->No, x->No, 1};
            g.ep.act = c->act, g.ep.gate = LF_GATE_PAIRED, g.ep.gate_group = c->group;
            s = lf_gated_choose(r->dev, &g, &ch);
        }
        EXPECT(r, s == LF_OK, "lf_gated_choose: %s", s == LF_OK ? "" : lf_last_error());
        lf_tensor_free(scratch);
        const int fallback = ch.kernel == LF_GATED_KERNEL_FALLBACK;
        snprintf(r->note + strlen(r->note), sizeof r->note - strlen(r->note), " [%s%s%s]",
                 lf_gated_kernel_name(ch.kernel), fallback ? ": " : "", ch.why);
        EXPECT(r, k->n == (fallback ? 2 : 1), "%d kernels, expected %d (lf_gated_choose: %s)", k->n, fallback ? 2 : 1,
               lf_gated_kernel_name(ch.kernel));
        if (r->dev == LF_DEVICE_CUDA && case_gated_here && c->cuda_refuses)
            EXPECT(r, fallback && strstr(ch.why, c->cuda_refuses), "CUDA should refuse it (\"%s\"): %s: %s",
                   c->cuda_refuses, lf_gated_kernel_name(ch.kernel), ch.why);
        return;
    }
    /* matmul's x is copied first (no view flattens it) */
    const int want = c->op == CASE_MATMUL ? 2 : 1;
    EXPECT(r, k->n == want, "%d kernels, expected %d (last %s)", k->n, want, k->last);
    int bias = c->bias != 0, cin = 0;
    if (c->op == CASE_ADDMM) {
        bias = c->bias == BIAS_VEC && c->beta == 1.0f;
        cin = c->beta != 0.0f && !bias;
    }
    EXPECT(r, name_has(k->last, "bias") == bias && name_has(k->last, "c") == cin, "kernel %s: the bias %s", k->last,
           bias  ? "in its epilogue"
           : cin ? "read as C"
                 : "absent");
    EXPECT(r, c->act == LF_ACT_NONE || name_has(k->last, lf_act_name(c->act)), "kernel %s: act %s", k->last,
           lf_act_name(c->act));
}

static void op_run(case_run *r, void *ctxp)
{
    op_ctx *x = ctxp;
    const case_t *c = x->c;
    if (c->op == CASE_MM_OUT && !operand_upload(r, &x->out, r->dev))
        return;
    lf_tensor *y = NULL;
    kernel_log k;
    kernel_log_start(&k);
    lf_status s = call(x, &y);
    kernel_log_stop();
    if (!case_ok(r, s, case_op_name(c->op)))
        return;
    s = lf_device_synchronize(r->dev);
    EXPECT(r, s == LF_OK, "synchronize: %s", s == LF_OK ? "" : lf_last_error());
    snprintf(r->note, sizeof r->note, "%s", k.last);
    expect_kernels(r, x, &k);
    double *got = NULL;
    lf_dtype out = c->dt;
    if (c->op == CASE_MM_OUT) {
        got = expect_poison_kept(r, &x->out, "out");
    } else {
        int64_t shape[3];
        const int nd = out_shape(x, shape);
        EXPECT(r,
               y->ndim == nd && !memcmp(y->shape, shape, (size_t)nd * sizeof *shape) && y->dtype == c->dt &&
                   lf_tensor_device(y) == r->dev,
               "output is %d-D %s on %s, expected %d-D [.., %lld] %s on %s", y->ndim, lf_dtype_name(y->dtype),
               lf_device_name(lf_tensor_device(y)), nd, (long long)x->No, lf_dtype_name(c->dt), lf_device_name(r->dev));
        lf_tensor *h = lf_tensor_numel(y) == x->rows * x->No ? download(r, y) : NULL;
        got = h ? to_f64(h) : NULL;
        lf_tensor_free(h);
    }
    if (got) {
        int pre = 0;
        const double bound = case_bound(c, r->dev, out, &pre);
        double *mag = x->mag, *m2 = NULL;
        if (pre) { /* cuBLASLt's epilogue on A.B rounded to the output type */
            m2 = malloc((size_t)(x->rows * x->No) * sizeof *m2);
            for (int64_t i = 0; i < x->rows * x->No; i++)
                m2[i] = x->mag[i] + 100 * x->ab[i];
            mag = m2;
        }
        int64_t at = 0;
        const double e = rows_err(got, x->ref, mag, x->rows, x->No, x->step, out, &at);
        EXPECT(r, e < bound, "err %.3g (bound %.3g) at [%lld, %lld]: got %.9g, float64 %.9g", e, bound,
               (long long)(at / x->No), (long long)(at % x->No), got[at], x->ref[at]);
        snprintf(r->note + strlen(r->note), sizeof r->note - strlen(r->note), " err %.2g < %.2g", e, bound);
        free(m2);
    }
    free(got);
    lf_tensor_free(y);
    expect_untouched(r, &x->a, "a");
    expect_untouched(r, &x->b, "b");
    expect_untouched(r, &x->bias, "bias");
}

/* (K, N) row-major from w (N, K) row-major */
static double *transposed(const double *w, int64_t N, int64_t K)
{
    double *t = malloc((size_t)(N * K) * sizeof *t);
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++)
            t[k * N + j] = w[j * K + k];
    return t;
}

void run_op_gemm_case(case_run *proto, lf_rng *rng)
{
    const case_t *c = proto->c;
    op_ctx x = {.c = c, .N = c->n, .K = c->k, .No = c->op == CASE_MM_GATED ? c->n / 2 : c->n};
    x.rows = c->op == CASE_LINEAR || c->op == CASE_MATMUL ? c->batch * c->m : c->m;
    double *B = NULL, *C = NULL;
    if (c->op == CASE_LINEAR) { /* x (K), (M, K) or (batch, M, K); w (N, K) */
        const int64_t xs[3] = {c->batch, c->m, c->k};
        operand_rand(&x.a, rng, c->dt, c->nd, c->nd == 1 ? xs + 2 : c->nd == 2 ? xs + 1 : xs, c->la);
        operand_rand(&x.b, rng, c->dt, 2, (int64_t[]){c->n, c->k}, c->lb);
        B = transposed(x.b.v, c->n, c->k);
    } else if (c->op == CASE_MATMUL) {
        operand_rand(&x.a, rng, c->dt, 3, (int64_t[]){c->batch, c->m, c->k}, c->la);
        operand_rand(&x.b, rng, c->dt, 2, (int64_t[]){c->k, c->n}, c->lb);
    } else {
        operand_rand(&x.a, rng, c->dt, 2, (int64_t[]){c->m, c->k}, c->la);
        operand_rand(&x.b, rng, c->dt, 2, (int64_t[]){c->k, c->n}, c->lb);
    }
    if (c->op == CASE_ADDMM) { /* (N), (M, N) or (M, 1), read as beta * bias broadcast */
        const int64_t vec = c->n, mat[2] = {c->m, c->n}, col[2] = {c->m, 1};
        operand_rand(&x.bias, rng, c->dt, c->bias == BIAS_VEC ? 1 : 2,
                     c->bias == BIAS_VEC   ? &vec
                     : c->bias == BIAS_MAT ? mat
                                           : col,
                     LAY_ROW);
        C = malloc((size_t)(c->m * c->n) * sizeof *C);
        for (int64_t i = 0; i < c->m; i++)
            for (int64_t j = 0; j < c->n; j++)
                C[i * c->n + j] = x.bias.v[c->bias == BIAS_VEC ? j : c->bias == BIAS_MAT ? i * c->n + j : i];
    } else if (c->bias) {
        operand_rand(&x.bias, rng, c->dt, 1, &x.N, LAY_ROW);
    }
    if (c->op == CASE_MM_OUT)
        operand_poisoned(&x.out, c->dt, c->m, c->n, POISON_ODD);
    int up = operand_upload(proto, &x.a, proto->dev) && operand_upload(proto, &x.b, proto->dev) &&
             (!c->bias || operand_upload(proto, &x.bias, proto->dev));
    const int64_t n_out = x.rows * x.No;
    x.step = ref_step(x.rows, (double)x.rows * (double)x.N * (double)x.K);
    x.ref = calloc((size_t)n_out, sizeof *x.ref);
    x.mag = calloc((size_t)n_out, sizeof *x.mag);
    x.ab = calloc((size_t)n_out, sizeof *x.ab);
    ref_gemm rg = {.M = x.rows,
                   .N = x.N,
                   .K = x.K,
                   .G = c->op == CASE_MM_GATED ? c->group : 0,
                   .A = x.a.v,
                   .B = B ? B : x.b.v,
                   .C = C,
                   .alpha = c->op == CASE_ADDMM ? c->alpha : 1.0,
                   .beta = c->op == CASE_ADDMM ? c->beta : 0.0,
                   .act = c->act,
                   .step = x.step};
    if (c->op != CASE_ADDMM && c->bias)
        rg.bias = x.bias.v;
    ref_gemm_run(&rg, x.ref, x.mag, x.ab);
    if (up)
        case_each_variant(proto, op_run, &x);
    else
        case_record(proto);
    operand_free(&x.a), operand_free(&x.b), operand_free(&x.bias), operand_free(&x.out);
    free(x.ref), free(x.mag), free(x.ab), free(B), free(C);
}
