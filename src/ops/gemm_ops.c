/* GEMM ops: mm, addmm, addmm_act, mm_gated, and the composites matmul and linear that reach
 * them the way torch does. Operands go to the backend as strided views: a transposed weight is
 * a stride swap (layout "tn"), never a copy. Layer: ops/. */
#include "ops/dispatch.h"

/* Check a (M, K) and b (K, N) for op `fn`. */
static lf_status check_operands(const char *fn, const lf_tensor *a, const lf_tensor *b)
{
    char x[LF_SHAPE_STR_CAP], y[LF_SHAPE_STR_CAP];
    LF_TRY(lf_check_ndim(fn, "mat1", a, 2));
    LF_TRY(lf_check_ndim(fn, "mat2", b, 2));
    LF_TRY(lf_check_same(fn, "mat1", a, "mat2", b));
    if (a->shape[1] != b->shape[0])
        return lf_fail(LF_ESHAPE, "%s: mat1 %s and mat2 %s cannot be multiplied (%lld != %lld)", fn,
                       lf_fmt_shape(x, sizeof x, 2, a->shape), lf_fmt_shape(y, sizeof y, 2, b->shape),
                       (long long)a->shape[1], (long long)b->shape[0]);
    return LF_OK;
}

/* Allocate out (M, n_out), fill in A, B, D and run the GEMM. */
static lf_status run_gemm(lf_tensor **out, const lf_tensor *a, const lf_tensor *b, int64_t n_out, lf_gemm *g)
{
    int64_t shape[2] = {a->shape[0], n_out};
    lf_tensor *y;
    LF_TRY(lf_new_output(&y, a, 2, shape));
    g->a = lf_matrix_of(a);
    g->b = lf_matrix_of(b);
    g->d = lf_matrix_of(y);
    lf_status s = lf_launch_gemm(lf_tensor_device(a), g);
    if (s != LF_OK) {
        lf_tensor_free(y);
        return s;
    }
    *out = y;
    return LF_OK;
}

static lf_status mm_impl(lf_tensor **out, const lf_tensor *a, const lf_tensor *b)
{
    LF_CHECK_PTR(out, "lf_mm", "out");
    *out = NULL;
    LF_TRY(check_operands("lf_mm", a, b));
    lf_gemm g = {.ep = lf_epilogue_default()};
    return run_gemm(out, a, b, b->shape[1], &g);
}

lf_status lf_mm(lf_tensor **out, const lf_tensor *a, const lf_tensor *b)
{
    lf_op_arg args[] = {LF_ARG(a), LF_ARG(b)};
    LF_DISPATCH(MM, args, out, mm_impl(out, a, b));
}

static lf_status mm_out_impl(lf_tensor *out, const lf_tensor *a, const lf_tensor *b)
{
    char x[LF_SHAPE_STR_CAP];
    LF_TRY(check_operands("lf_mm_out", a, b));
    LF_TRY(lf_check_ndim("lf_mm_out", "out", out, 2));
    LF_TRY(lf_check_same("lf_mm_out", "out", out, "mat1", a));
    if (out->shape[0] != a->shape[0] || out->shape[1] != b->shape[1])
        return lf_fail(LF_ESHAPE, "lf_mm_out: out is %s, the product is [%lld, %lld]",
                       lf_fmt_shape(x, sizeof x, 2, out->shape), (long long)a->shape[0], (long long)b->shape[1]);
    if (lf_tensor_shares_storage(out, a) || lf_tensor_shares_storage(out, b))
        return lf_fail(LF_EINVAL, "lf_mm_out: out shares memory with an operand");
    lf_gemm g = {.ep = lf_epilogue_default()};
    g.a = lf_matrix_of(a);
    g.b = lf_matrix_of(b);
    g.d = lf_matrix_of(out);
    return lf_launch_gemm(lf_tensor_device(a), &g);
}

lf_status lf_mm_out(lf_tensor *out, const lf_tensor *a, const lf_tensor *b)
{
    lf_op_arg args[] = {LF_ARG(a), LF_ARG(b), LF_ARG(out)};
    lf_tensor **none = NULL; /* the result is out itself, not a new tensor */
    LF_DISPATCH(MM_OUT, args, none, mm_out_impl(out, a, b));
}

/* Check a bias for an (M, N) result and say how to apply it: as the epilogue's bias vector
 * (*as_vector) or as a C matrix broadcast through stride-0 dims (*c). */
static lf_status bias_plan(const char *fn, const lf_tensor *bias, const lf_tensor *a, int64_t M, int64_t N,
                           int *as_vector, lf_matrix *c)
{
    char x[LF_SHAPE_STR_CAP];
    LF_TRY(lf_check_tensor(fn, "bias", bias));
    LF_TRY(lf_check_same(fn, "bias", bias, "mat1", a));
    int64_t rows = bias->ndim == 2 ? bias->shape[0] : 1, cols = bias->shape[bias->ndim - 1];
    if (bias->ndim > 2 || (rows != 1 && rows != M) || (cols != 1 && cols != N))
        return lf_fail(LF_ESHAPE, "%s: bias of shape %s does not broadcast to the result's [%lld, %lld]", fn,
                       lf_fmt_shape(x, sizeof x, bias->ndim, bias->shape), (long long)M, (long long)N);
    int64_t cs = cols == 1 ? 0 : bias->stride[bias->ndim - 1];
    int64_t rs = rows == 1 || bias->ndim == 1 ? 0 : bias->stride[0];
    *as_vector = rows == 1 && cols == N && (cs == 1 || N == 1);
    *c = (lf_matrix){lf_tensor_data(bias), bias->dtype, M, N, rs, cs};
    return LF_OK;
}

static lf_status addmm_impl(lf_tensor **out, const lf_tensor *bias, const lf_tensor *a, const lf_tensor *b, float beta,
                            float alpha)
{
    LF_CHECK_PTR(out, "lf_addmm", "out");
    *out = NULL;
    LF_TRY(check_operands("lf_addmm", a, b));
    const int64_t M = a->shape[0], N = b->shape[1];
    int as_vector = 0;
    lf_matrix c = {0};
    LF_TRY(bias_plan("lf_addmm", bias, a, M, N, &as_vector, &c));
    lf_gemm g = {.ep = lf_epilogue_default()};
    g.ep.alpha = alpha;
    if (as_vector && beta == 1.0f) { /* the nn.Linear case: bias in the epilogue */
        g.ep.bias = c.data;
        g.ep.bias_dtype = c.dtype;
    } else if (beta != 0.0f) { /* read as C, scaled by beta: still no copy */
        g.c = c;
        g.ep.beta = beta;
    }
    return run_gemm(out, a, b, N, &g);
}

lf_status lf_addmm(lf_tensor **out, const lf_tensor *bias, const lf_tensor *a, const lf_tensor *b, float beta,
                   float alpha)
{
    lf_op_arg args[] = {LF_ARG(bias), LF_ARG(a), LF_ARG(b), LF_ARG_SCALAR(beta), LF_ARG_SCALAR(alpha)};
    LF_DISPATCH(ADDMM, args, out, addmm_impl(out, bias, a, b, beta, alpha));
}

/* addmm_act's GEMM description (its D left for the caller), its inputs checked. */
static lf_status addmm_act_describe(const char *fn, const lf_tensor *bias, const lf_tensor *a, const lf_tensor *b,
                                    lf_act act, lf_gemm *g)
{
    char x[LF_SHAPE_STR_CAP];
    LF_TRY(check_operands(fn, a, b));
    if ((unsigned)act >= LF_ACT_COUNT)
        return lf_fail(LF_EINVAL, "%s: activation %d is not one of none, relu, gelu_tanh, gelu_erf, silu", fn,
                       (int)act);
    *g = (lf_gemm){.ep = lf_epilogue_default()};
    g->ep.act = act;
    if (bias) {
        LF_TRY(lf_check_ndim(fn, "bias", bias, 1));
        LF_TRY(lf_check_same(fn, "bias", bias, "mat1", a));
        if (bias->shape[0] != b->shape[1])
            return lf_fail(LF_ESHAPE, "%s: bias has shape %s, expected [%lld] (mat2's columns)", fn,
                           lf_fmt_shape(x, sizeof x, 1, bias->shape), (long long)b->shape[1]);
        if (bias->stride[0] != 1 && bias->shape[0] != 1)
            return lf_fail(LF_ESHAPE, "%s: bias must be contiguous (stride %lld); use lf_contiguous", fn,
                           (long long)bias->stride[0]);
        g->ep.bias = lf_tensor_data(bias);
        g->ep.bias_dtype = bias->dtype;
    }
    return LF_OK;
}

static lf_status addmm_act_impl(lf_tensor **out, const lf_tensor *bias, const lf_tensor *a, const lf_tensor *b,
                                lf_act act)
{
    LF_CHECK_PTR(out, "lf_addmm_act", "out");
    *out = NULL;
    lf_gemm g;
    LF_TRY(addmm_act_describe("lf_addmm_act", bias, a, b, act, &g));
    return run_gemm(out, a, b, b->shape[1], &g);
}

lf_status lf_addmm_act(lf_tensor **out, const lf_tensor *bias, const lf_tensor *a, const lf_tensor *b, lf_act act)
{
    lf_op_arg args[] = {LF_ARG(bias), LF_ARG(a), LF_ARG(b), LF_ARG_SCALAR(act)};
    LF_DISPATCH(ADDMM_ACT, args, out, addmm_act_impl(out, bias, a, b, act));
}

/* out is an existing (rows, cols) result for a's dtype and device, apart from a and b. */
static lf_status check_out(const char *fn, const lf_tensor *out, const lf_tensor *a, const lf_tensor *b, int64_t rows,
                           int64_t cols)
{
    char x[LF_SHAPE_STR_CAP];
    LF_TRY(lf_check_ndim(fn, "out", out, 2));
    LF_TRY(lf_check_same(fn, "out", out, "mat1", a));
    if (out->shape[0] != rows || out->shape[1] != cols)
        return lf_fail(LF_ESHAPE, "%s: out is %s, the result is [%lld, %lld]", fn,
                       lf_fmt_shape(x, sizeof x, 2, out->shape), (long long)rows, (long long)cols);
    if (lf_tensor_shares_storage(out, a) || lf_tensor_shares_storage(out, b))
        return lf_fail(LF_EINVAL, "%s: out shares memory with an operand", fn);
    return LF_OK;
}

static lf_status addmm_act_out_impl(lf_tensor *out, const lf_tensor *bias, const lf_tensor *a, const lf_tensor *b,
                                    lf_act act)
{
    LF_CHECK_PTR(out, "lf_addmm_act_out", "out");
    lf_gemm g;
    LF_TRY(addmm_act_describe("lf_addmm_act_out", bias, a, b, act, &g));
    LF_TRY(check_out("lf_addmm_act_out", out, a, b, a->shape[0], b->shape[1]));
    g.a = lf_matrix_of(a);
    g.b = lf_matrix_of(b);
    g.d = lf_matrix_of(out);
    return lf_launch_gemm(lf_tensor_device(a), &g);
}

lf_status lf_addmm_act_out(lf_tensor *out, const lf_tensor *bias, const lf_tensor *a, const lf_tensor *b, lf_act act)
{
    lf_op_arg args[] = {LF_ARG(bias), LF_ARG(a), LF_ARG(b), LF_ARG_SCALAR(act), LF_ARG(out)};
    lf_tensor **none = NULL; /* the result is out itself */
    LF_DISPATCH(ADDMM_ACT, args, none, addmm_act_out_impl(out, bias, a, b, act));
}

lf_status lf_gate_pairs(lf_tensor *y, const lf_tensor *p, lf_act act, int64_t group)
{
    /* p (M, 2H) as (M, H/G, G) twice: gates at column 2G*blk + j, their partners G later */
    const int64_t M = p->shape[0], H = p->shape[1] / 2, G = group;
    lf_pointwise pw = {.op = LF_PW_ACT_MUL, .act = act, .ndim = 3, .shape = {M, H / G, G}};
    pw.out = (lf_strided){lf_tensor_data(y), y->dtype, {y->stride[0], G * y->stride[1], y->stride[1]}};
    pw.in[0] = (lf_strided){lf_tensor_data(p), p->dtype, {p->stride[0], 2 * G * p->stride[1], p->stride[1]}};
    pw.in[1] = pw.in[0];
    pw.in[1].data = (char *)pw.in[0].data + G * p->stride[1] * (int64_t)lf_dtype_size(p->dtype);
    return lf_launch_pointwise(lf_tensor_device(y), &pw);
}

/* The gated GEMM when the backend has no kernel for it (on CUDA: not Hopper, not bf16, a
 * gate_group the kernel cannot tile...): one plain GEMM over all 2H columns, then act(g) * u
 * in one pass over column-group views of that product. The trace shows why, as a note. */
static lf_status gated_fallback(lf_tensor *y, const lf_tensor *a, const lf_tensor *b, lf_act act, int64_t group)
{
    char why[320];
    snprintf(why, sizeof why, "lf::mm_gated fallback (%s)", lf_last_error());
    lf_ops_note_begin(why);
    lf_tensor *p = NULL;
    lf_status s = lf_mm(&p, a, b);
    if (s == LF_OK)
        s = lf_gate_pairs(y, p, act, group);
    lf_tensor_free(p);
    lf_ops_note_end();
    return s;
}

static lf_status mm_gated_check(const char *fn, const lf_tensor *a, const lf_tensor *b, lf_act act, int64_t group)
{
    LF_TRY(check_operands(fn, a, b));
    if ((unsigned)act >= LF_ACT_COUNT)
        return lf_fail(LF_EINVAL, "%s: activation %d is not one of none, relu, gelu_tanh, gelu_erf, silu", fn,
                       (int)act);
    if (group < 1 || group > b->shape[1] / 2 || b->shape[1] % (2 * group)) /* 2 x group may not fit */
        return lf_fail(LF_ESHAPE, "%s: mat2 has %lld columns, expected whole blocks of 2 x group (group %lld)", fn,
                       (long long)b->shape[1], (long long)group);
    return LF_OK;
}

/* y = act(g) * u of a . b into y: the gated kernel lf_gated_choose picks, or the fallback. */
static lf_status mm_gated_into(lf_tensor *y, const lf_tensor *a, const lf_tensor *b, lf_act act, int64_t group)
{
    lf_gemm g = {.ep = lf_epilogue_default()};
    g.ep.act = act;
    g.ep.gate = LF_GATE_PAIRED;
    g.ep.gate_group = group;
    g.a = lf_matrix_of(a);
    g.b = lf_matrix_of(b);
    g.d = lf_matrix_of(y);
    const lf_device dev = lf_tensor_device(a);
    lf_status s = lf_backend_gemm_supported(dev, &g);
    if (s == LF_OK)
        s = lf_launch_gemm(dev, &g);
    else if (s == LF_EUNSUPPORTED)
        s = gated_fallback(y, a, b, act, group);
    return s;
}

static lf_status mm_gated_impl(lf_tensor **out, const lf_tensor *a, const lf_tensor *b, lf_act act, int64_t group)
{
    LF_CHECK_PTR(out, "lf_mm_gated", "out");
    *out = NULL;
    LF_TRY(mm_gated_check("lf_mm_gated", a, b, act, group));
    int64_t shape[2] = {a->shape[0], b->shape[1] / 2};
    lf_tensor *y;
    LF_TRY(lf_new_output(&y, a, 2, shape));
    lf_status s = mm_gated_into(y, a, b, act, group);
    if (s != LF_OK) {
        lf_tensor_free(y);
        return s;
    }
    *out = y;
    return LF_OK;
}

static lf_status mm_gated_out_impl(lf_tensor *out, const lf_tensor *a, const lf_tensor *b, lf_act act, int64_t group)
{
    LF_CHECK_PTR(out, "lf_mm_gated_out", "out");
    LF_TRY(mm_gated_check("lf_mm_gated_out", a, b, act, group));
    LF_TRY(check_out("lf_mm_gated_out", out, a, b, a->shape[0], b->shape[1] / 2));
    return mm_gated_into(out, a, b, act, group);
}

lf_status lf_mm_gated_out(lf_tensor *out, const lf_tensor *a, const lf_tensor *b, lf_act act, int64_t group)
{
    lf_op_arg args[] = {LF_ARG(a), LF_ARG(b), LF_ARG_SCALAR(act), LF_ARG_SCALAR((double)group), LF_ARG(out)};
    lf_tensor **none = NULL; /* the result is out itself */
    LF_DISPATCH(MM_GATED, args, none, mm_gated_out_impl(out, a, b, act, group));
}

lf_status lf_mm_gated(lf_tensor **out, const lf_tensor *a, const lf_tensor *b, lf_act act, int64_t group)
{
    lf_op_arg args[] = {LF_ARG(a), LF_ARG(b), LF_ARG_SCALAR(act), LF_ARG_SCALAR((double)group)};
    LF_DISPATCH(MM_GATED, args, out, mm_gated_impl(out, a, b, act, group));
}

/* (B, S, K) -> (B*S, K) through reshape, run f on 2-D, view the result back as (B, S, N).
 * f_ctx is passed to f. */
typedef lf_status (*gemm2d_fn)(lf_tensor **out, const lf_tensor *x2, const void *ctx);

static lf_status over_leading_dims(lf_tensor **out, const lf_tensor *x, int64_t n_out, gemm2d_fn f, const void *ctx)
{
    int64_t rows = 1;
    for (int i = 0; i < x->ndim - 1; i++)
        rows *= x->shape[i];
    int64_t flat[2] = {rows, x->shape[x->ndim - 1]};
    lf_tensor *x2 = NULL, *y2 = NULL;
    LF_TRY(lf_reshape(&x2, x, 2, flat));
    lf_status s = f(&y2, x2, ctx);
    lf_tensor_free(x2);
    if (s != LF_OK)
        return s;
    int64_t shape[LF_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = n_out;
    s = lf_view(out, y2, x->ndim, shape);
    lf_tensor_free(y2);
    return s;
}

static lf_status mm_with(lf_tensor **out, const lf_tensor *x2, const void *ctx)
{
    return lf_mm(out, x2, (const lf_tensor *)ctx);
}

static lf_status matmul_impl(lf_tensor **out, const lf_tensor *a, const lf_tensor *b)
{
    char x[LF_SHAPE_STR_CAP], y[LF_SHAPE_STR_CAP];
    LF_CHECK_PTR(out, "lf_matmul", "out");
    *out = NULL;
    LF_TRY(lf_check_tensor("lf_matmul", "a", a));
    LF_TRY(lf_check_tensor("lf_matmul", "b", b));
    if (b->ndim != 2 || a->ndim < 2)
        return lf_fail(LF_EUNSUPPORTED,
                       "lf_matmul: shapes %s x %s: supported are (M, K) x (K, N) and (..., K) x (K, N)",
                       lf_fmt_shape(x, sizeof x, a->ndim, a->shape), lf_fmt_shape(y, sizeof y, b->ndim, b->shape));
    if (a->ndim == 2)
        return lf_mm(out, a, b);
    if (a->shape[a->ndim - 1] != b->shape[0])
        return lf_fail(LF_ESHAPE, "lf_matmul: %s and %s cannot be multiplied (%lld != %lld)",
                       lf_fmt_shape(x, sizeof x, a->ndim, a->shape), lf_fmt_shape(y, sizeof y, 2, b->shape),
                       (long long)a->shape[a->ndim - 1], (long long)b->shape[0]);
    return over_leading_dims(out, a, b->shape[1], mm_with, b);
}

lf_status lf_matmul(lf_tensor **out, const lf_tensor *a, const lf_tensor *b)
{
    lf_op_arg args[] = {LF_ARG(a), LF_ARG(b)};
    LF_DISPATCH(MATMUL, args, out, matmul_impl(out, a, b));
}

typedef struct addmm_ctx {
    const lf_tensor *bias, *wt;
} addmm_ctx;

static lf_status addmm_with(lf_tensor **out, const lf_tensor *x2, const void *ctx)
{
    const addmm_ctx *c = ctx;
    return lf_addmm(out, c->bias, x2, c->wt, 1.0f, 1.0f);
}

static lf_status linear_impl(lf_tensor **out, const lf_tensor *x, const lf_tensor *w, const lf_tensor *b)
{
    char s1[LF_SHAPE_STR_CAP], s2[LF_SHAPE_STR_CAP];
    LF_CHECK_PTR(out, "lf_linear", "out");
    *out = NULL;
    LF_TRY(lf_check_tensor("lf_linear", "input", x));
    LF_TRY(lf_check_ndim("lf_linear", "weight", w, 2));
    LF_TRY(lf_check_same("lf_linear", "input", x, "weight", w));
    if (x->shape[x->ndim - 1] != w->shape[1])
        return lf_fail(LF_ESHAPE, "lf_linear: input %s has %lld features but weight %s expects %lld",
                       lf_fmt_shape(s1, sizeof s1, x->ndim, x->shape), (long long)x->shape[x->ndim - 1],
                       lf_fmt_shape(s2, sizeof s2, 2, w->shape), (long long)w->shape[1]);
    if (b) {
        LF_TRY(lf_check_ndim("lf_linear", "bias", b, 1));
        LF_TRY(lf_check_same("lf_linear", "input", x, "bias", b));
        if (b->shape[0] != w->shape[0])
            return lf_fail(LF_ESHAPE, "lf_linear: bias %s does not match weight %s (expected [%lld])",
                           lf_fmt_shape(s1, sizeof s1, 1, b->shape), lf_fmt_shape(s2, sizeof s2, 2, w->shape),
                           (long long)w->shape[0]);
    }
    lf_tensor *wt;
    LF_TRY(lf_t(&wt, w)); /* a stride swap: the GEMM reads W in place (layout "tn") */
    lf_status s;
    if (x->ndim == 2)
        s = b ? lf_addmm(out, b, x, wt, 1.0f, 1.0f) : lf_mm(out, x, wt);
    else if (b)
        s = over_leading_dims(out, x, w->shape[0], addmm_with, &(addmm_ctx){b, wt});
    else if (x->ndim >= 3)
        s = lf_matmul(out, x, wt);
    else /* 1-D input: a single row */
        s = over_leading_dims(out, x, w->shape[0], mm_with, wt);
    lf_tensor_free(wt);
    return s;
}

lf_status lf_linear(lf_tensor **out, const lf_tensor *x, const lf_tensor *w, const lf_tensor *b)
{
    lf_op_arg args[] = {LF_ARG(x), LF_ARG(w), LF_ARG(b)};
    LF_DISPATCH(LINEAR, args, out, linear_impl(out, x, w, b));
}
