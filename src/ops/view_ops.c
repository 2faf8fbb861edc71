/* View ops (t, transpose, view) and the two that may copy (reshape, contiguous). Views are
 * recorded so traces show them, and launch nothing. Layer: ops/. */
#include "ops/dispatch.h"

static lf_status t_impl(lf_tensor **out, const lf_tensor *x)
{
    LF_TRY(lf_check_stored("lf_t", "x", x)); /* a view: any stored dtype */
    return lf_tensor_t(out, x);
}

lf_status lf_t(lf_tensor **out, const lf_tensor *x)
{
    lf_op_arg args[] = {LF_ARG(x)};
    LF_DISPATCH(T, args, out, t_impl(out, x));
}

static lf_status transpose_impl(lf_tensor **out, const lf_tensor *x, int d0, int d1)
{
    LF_TRY(lf_check_stored("lf_transpose", "x", x)); /* a view: any stored dtype */
    return lf_tensor_transpose(out, x, d0, d1);
}

lf_status lf_transpose(lf_tensor **out, const lf_tensor *x, int d0, int d1)
{
    lf_op_arg args[] = {LF_ARG(x), LF_ARG_SCALAR(d0), LF_ARG_SCALAR(d1)};
    LF_DISPATCH(TRANSPOSE, args, out, transpose_impl(out, x, d0, d1));
}

static lf_status view_impl(lf_tensor **out, const lf_tensor *x, int ndim, const int64_t *shape)
{
    LF_TRY(lf_check_stored("lf_view", "x", x)); /* a view: any stored dtype */
    return lf_tensor_view(out, x, ndim, shape);
}

lf_status lf_view(lf_tensor **out, const lf_tensor *x, int ndim, const int64_t *shape)
{
    lf_op_arg args[] = {LF_ARG(x)};
    LF_DISPATCH(VIEW, args, out, view_impl(out, x, ndim, shape));
}

/* The copy kernel behind contiguous and reshape: a new row-major tensor with x's values. */
static lf_status copy_contiguous(lf_tensor **out, const lf_tensor *x)
{
    lf_tensor *y;
    LF_TRY(lf_new_output(&y, x, x->ndim, x->shape));
    lf_pointwise p = {.op = LF_PW_COPY, .in = {lf_strided_of(x)}};
    return lf_pointwise_into(out, y, &p);
}

/* The bytes t's elements span: [*lo, *hi), from its first to past its last (any stride signs). */
static void byte_span(const lf_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    const int64_t es = (int64_t)lf_dtype_size(t->dtype);
    int64_t below = 0, above = 0; /* elements before and after element [0, ..., 0] */
    for (int d = 0; d < t->ndim; d++) {
        const int64_t reach = (t->shape[d] - 1) * t->stride[d];
        *(reach < 0 ? &below : &above) += reach;
    }
    const uintptr_t at = (uintptr_t)lf_tensor_data(t);
    *lo = at + (uintptr_t)(below * es), *hi = at + (uintptr_t)((above + 1) * es);
}

/* Whether out and x may touch the same bytes: the same storage and overlapping spans (two rows of
 * one matrix do not; torch's copy_ takes them too). */
static int copy_overlaps(const lf_tensor *out, const lf_tensor *x)
{
    if (!lf_tensor_shares_storage(out, x))
        return 0;
    if (lf_tensor_numel(out) == 0 || lf_tensor_numel(x) == 0)
        return 0;
    uintptr_t olo, ohi, xlo, xhi;
    byte_span(out, &olo, &ohi), byte_span(x, &xlo, &xhi);
    return olo < xhi && xlo < ohi;
}

static lf_status copy_out_impl(lf_tensor *out, const lf_tensor *x)
{
    char a[LF_SHAPE_STR_CAP], b[LF_SHAPE_STR_CAP];
    LF_TRY(lf_check_tensor("lf_copy_out", "out", out));
    LF_TRY(lf_check_tensor("lf_copy_out", "x", x));
    if (lf_tensor_device(out) != lf_tensor_device(x) || lf_tensor_device_index(out) != lf_tensor_device_index(x))
        return lf_fail(LF_EDEVICE, "lf_copy_out: out is on %s:%d, x on %s:%d (lf_tensor_to_device moves tensors)",
                       lf_device_name(lf_tensor_device(out)), lf_tensor_device_index(out),
                       lf_device_name(lf_tensor_device(x)), lf_tensor_device_index(x));
    if (out->ndim != x->ndim || memcmp(out->shape, x->shape, (size_t)x->ndim * sizeof *x->shape))
        return lf_fail(LF_ESHAPE, "lf_copy_out: out is %s, x is %s", lf_fmt_shape(a, sizeof a, out->ndim, out->shape),
                       lf_fmt_shape(b, sizeof b, x->ndim, x->shape));
    if (copy_overlaps(out, x))
        return lf_fail(LF_EINVAL, "lf_copy_out: out and x overlap in memory");
    for (int d = 0; d < out->ndim; d++) /* torch's internal-overlap check: the case it can tell */
        if (out->stride[d] == 0 && out->shape[d] > 1)
            return lf_fail(LF_EINVAL,
                           "lf_copy_out: out's elements overlap (dim %d: %lld elements at stride 0), so each "
                           "would be written many times",
                           d, (long long)out->shape[d]);
    lf_pointwise p = {.op = LF_PW_COPY, .in = {lf_strided_of(x)}, .out = lf_strided_of(out), .ndim = x->ndim};
    memcpy(p.shape, x->shape, sizeof p.shape);
    return lf_launch_pointwise(lf_tensor_device(x), &p);
}

lf_status lf_copy_out(lf_tensor *out, const lf_tensor *x)
{
    lf_op_arg args[] = {LF_ARG(out), LF_ARG(x)};
    lf_tensor **none = NULL; /* the result is out itself */
    LF_DISPATCH(COPY, args, none, copy_out_impl(out, x));
}

static lf_status contiguous_impl(lf_tensor **out, const lf_tensor *x)
{
    LF_CHECK_PTR(out, "lf_contiguous", "out");
    *out = NULL;
    LF_TRY(lf_check_tensor("lf_contiguous", "x", x));
    if (lf_tensor_is_contiguous(x))
        return lf_tensor_alias(out, x, x->ndim, x->shape, x->stride, x->offset);
    return copy_contiguous(out, x);
}

lf_status lf_contiguous(lf_tensor **out, const lf_tensor *x)
{
    lf_op_arg args[] = {LF_ARG(x)};
    LF_DISPATCH(CONTIGUOUS, args, out, contiguous_impl(out, x));
}

static lf_status reshape_impl(lf_tensor **out, const lf_tensor *x, int ndim, const int64_t *shape_in)
{
    LF_CHECK_PTR(out, "lf_reshape", "out");
    *out = NULL;
    LF_TRY(lf_check_tensor("lf_reshape", "x", x));
    LF_CHECK_PTR(shape_in, "lf_reshape", "shape");
    if (ndim < 1 || ndim > LF_MAX_DIMS)
        return lf_fail(LF_ESHAPE, "lf_reshape: %d dims requested, expected 1 to %d", ndim, LF_MAX_DIMS);
    int64_t shape[LF_MAX_DIMS], stride[LF_MAX_DIMS];
    memcpy(shape, shape_in, (size_t)ndim * sizeof *shape);
    LF_TRY(lf_shape_infer("lf_reshape", ndim, shape, lf_tensor_numel(x)));
    if (lf_view_strides(x, ndim, shape, stride))
        return lf_view(out, x, ndim, shape);
    lf_tensor *c;
    LF_TRY(copy_contiguous(&c, x));
    lf_status s = lf_view(out, c, ndim, shape);
    lf_tensor_free(c); /* the view keeps the storage */
    return s;
}

lf_status lf_reshape(lf_tensor **out, const lf_tensor *x, int ndim, const int64_t *shape)
{
    lf_op_arg args[] = {LF_ARG(x)};
    LF_DISPATCH(RESHAPE, args, out, reshape_impl(out, x, ndim, shape));
}
