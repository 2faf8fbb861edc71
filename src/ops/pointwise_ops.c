/* Pointwise ops with numpy broadcasting: add, mul, gelu, and the fused gelu_mul. A broadcast operand is a stride-0
 * view, never an expanded copy. Layer: ops/. */
#include "ops/dispatch.h"

/* Broadcast a and b to one shape; fill each operand's strides for that shape. */
static lf_status broadcast(const char *op, const lf_tensor *a, const lf_tensor *b, int *ndim, int64_t *shape,
                           int64_t *sa, int64_t *sb)
{
    char x[LF_SHAPE_STR_CAP], y[LF_SHAPE_STR_CAP];
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - a->ndim), ib = i - (n - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return lf_fail(LF_ESHAPE, "%s: shapes %s and %s do not broadcast (dim %d: %lld vs %lld)", op,
                           lf_fmt_shape(x, sizeof x, a->ndim, a->shape), lf_fmt_shape(y, sizeof y, b->ndim, b->shape),
                           i, (long long)da, (long long)db);
        shape[i] = da > db ? da : db;
        sa[i] = ia >= 0 && da != 1 ? a->stride[ia] : 0;
        sb[i] = ib >= 0 && db != 1 ? b->stride[ib] : 0;
    }
    *ndim = n;
    return LF_OK;
}

static lf_status binary_impl(lf_pw_op op, const char *fn, lf_tensor **out, const lf_tensor *a, const lf_tensor *b)
{
    LF_CHECK_PTR(out, fn, "out");
    *out = NULL;
    LF_TRY(lf_check_tensor(fn, "a", a));
    LF_TRY(lf_check_tensor(fn, "b", b));
    LF_TRY(lf_check_same(fn, "a", a, "b", b));
    lf_pointwise p = {.op = op};
    int64_t sa[LF_MAX_DIMS], sb[LF_MAX_DIMS];
    LF_TRY(broadcast(fn, a, b, &p.ndim, p.shape, sa, sb));
    lf_tensor *y;
    LF_TRY(lf_new_output(&y, a, p.ndim, p.shape));
    p.in[0] = (lf_strided){lf_tensor_data(a), a->dtype, {0}};
    p.in[1] = (lf_strided){lf_tensor_data(b), b->dtype, {0}};
    memcpy(p.in[0].stride, sa, sizeof sa);
    memcpy(p.in[1].stride, sb, sizeof sb);
    return lf_pointwise_into(out, y, &p);
}

lf_status lf_add(lf_tensor **out, const lf_tensor *a, const lf_tensor *b)
{
    lf_op_arg args[] = {LF_ARG(a), LF_ARG(b)};
    LF_DISPATCH(ADD, args, out, binary_impl(LF_PW_ADD, "lf_add", out, a, b));
}

lf_status lf_mul(lf_tensor **out, const lf_tensor *a, const lf_tensor *b)
{
    lf_op_arg args[] = {LF_ARG(a), LF_ARG(b)};
    LF_DISPATCH(MUL, args, out, binary_impl(LF_PW_MUL, "lf_mul", out, a, b));
}

/* act(x) by one pointwise kernel; fn names the op in messages. */
static lf_status act_impl(const char *fn, lf_tensor **out, const lf_tensor *x, lf_act act)
{
    LF_CHECK_PTR(out, fn, "out");
    *out = NULL;
    LF_TRY(lf_check_tensor(fn, "x", x));
    lf_tensor *y;
    LF_TRY(lf_new_output(&y, x, x->ndim, x->shape));
    lf_pointwise p = {.op = LF_PW_ACT, .act = act, .in = {lf_strided_of(x)}};
    return lf_pointwise_into(out, y, &p);
}

/* act(g) * u in one pass, act(g) rounded to the dtype first (so it equals mul(act(g), u)). */
static lf_status act_mul_impl(const char *fn, lf_tensor **out, const lf_tensor *g, const lf_tensor *u, lf_act act)
{
    char x[LF_SHAPE_STR_CAP], y[LF_SHAPE_STR_CAP];
    LF_CHECK_PTR(out, fn, "out");
    *out = NULL;
    LF_TRY(lf_check_tensor(fn, "g", g));
    LF_TRY(lf_check_tensor(fn, "u", u));
    LF_TRY(lf_check_same(fn, "g", g, "u", u));
    if (g->ndim != u->ndim || memcmp(g->shape, u->shape, (size_t)g->ndim * sizeof g->shape[0]))
        return lf_fail(LF_ESHAPE, "%s: g %s and u %s must have one shape", fn,
                       lf_fmt_shape(x, sizeof x, g->ndim, g->shape), lf_fmt_shape(y, sizeof y, u->ndim, u->shape));
    lf_tensor *o;
    LF_TRY(lf_new_output(&o, g, g->ndim, g->shape));
    lf_pointwise p = {.op = LF_PW_ACT_MUL, .act = act, .in = {lf_strided_of(g), lf_strided_of(u)}};
    return lf_pointwise_into(out, o, &p);
}

static lf_status gelu_impl(lf_tensor **out, const lf_tensor *x, lf_gelu_approx approx)
{
    if (approx != LF_GELU_ERF && approx != LF_GELU_TANH)
        return lf_fail(LF_EINVAL, "lf_gelu: approximate = %d, expected LF_GELU_ERF or LF_GELU_TANH", (int)approx);
    return act_impl("lf_gelu", out, x, approx == LF_GELU_TANH ? LF_ACT_GELU_TANH : LF_ACT_GELU_ERF);
}

lf_status lf_gelu(lf_tensor **out, const lf_tensor *x, lf_gelu_approx approx)
{
    lf_op_arg args[] = {LF_ARG(x)};
    LF_DISPATCH(GELU, args, out, gelu_impl(out, x, approx));
}

static lf_status gelu_mul_impl(lf_tensor **out, const lf_tensor *g, const lf_tensor *u, lf_gelu_approx approx)
{
    if (approx != LF_GELU_ERF && approx != LF_GELU_TANH)
        return lf_fail(LF_EINVAL, "lf_gelu_mul: approximate = %d, expected LF_GELU_ERF or LF_GELU_TANH", (int)approx);
    return act_mul_impl("lf_gelu_mul", out, g, u, approx == LF_GELU_TANH ? LF_ACT_GELU_TANH : LF_ACT_GELU_ERF);
}

lf_status lf_gelu_mul(lf_tensor **out, const lf_tensor *g, const lf_tensor *u, lf_gelu_approx approx)
{
    lf_op_arg args[] = {LF_ARG(g), LF_ARG(u)};
    LF_DISPATCH(GELU_MUL, args, out, gelu_mul_impl(out, g, u, approx));
}

lf_status lf_silu(lf_tensor **out, const lf_tensor *x)
{
    lf_op_arg args[] = {LF_ARG(x)};
    LF_DISPATCH(SILU, args, out, act_impl("lf_silu", out, x, LF_ACT_SILU));
}

lf_status lf_silu_mul(lf_tensor **out, const lf_tensor *g, const lf_tensor *u)
{
    lf_op_arg args[] = {LF_ARG(g), LF_ARG(u)};
    LF_DISPATCH(SILU_MUL, args, out, act_mul_impl("lf_silu_mul", out, g, u, LF_ACT_SILU));
}
