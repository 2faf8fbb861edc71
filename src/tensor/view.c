/* Views: new shapes and strides over the same storage. Nothing here moves data; when a shape
 * needs a copy, these functions say so and lf_reshape (ops/) does the copy.
 * Layer: tensor/. */
#include "tensor/tensor_impl.h"

static int wrap_dim(int d, int ndim)
{
    return d < 0 ? d + ndim : d;
}

/* d is the wrapped dim, given what the caller passed (the message shows that). */
#define DIM_CHECK(fn, name, d, given, ndim)                                                                          \
    do {                                                                                                             \
        if ((d) < 0 || (d) >= (ndim))                                                                                \
            return lf_fail(LF_EINVAL, "%s: %s = %d is out of range for a %d-dim tensor", fn, name, (given), (ndim)); \
    } while (0)

lf_status lf_tensor_transpose(lf_tensor **out, const lf_tensor *t, int d0, int d1)
{
    LF_CHECK_PTR(out, "lf_tensor_transpose", "out");
    *out = NULL;
    LF_CHECK_PTR(t, "lf_tensor_transpose", "t");
    LF_TRY(lf_tensor_check("lf_tensor_transpose", "t", t));
    int a = wrap_dim(d0, t->ndim), b = wrap_dim(d1, t->ndim);
    DIM_CHECK("lf_tensor_transpose", "dim0", a, d0, t->ndim);
    DIM_CHECK("lf_tensor_transpose", "dim1", b, d1, t->ndim);
    int64_t shape[LF_MAX_DIMS], stride[LF_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(stride, t->stride, sizeof stride);
    shape[a] = t->shape[b], shape[b] = t->shape[a];
    stride[a] = t->stride[b], stride[b] = t->stride[a];
    return lf_tensor_alias(out, t, t->ndim, shape, stride, t->offset);
}

lf_status lf_tensor_t(lf_tensor **out, const lf_tensor *t)
{
    LF_CHECK_PTR(out, "lf_tensor_t", "out");
    *out = NULL;
    LF_CHECK_PTR(t, "lf_tensor_t", "t");
    LF_TRY(lf_tensor_check("lf_tensor_t", "t", t));
    if (t->ndim > 2)
        return lf_fail(LF_ESHAPE, "lf_tensor_t: expects a tensor with <= 2 dims, got %d dims (use transpose)", t->ndim);
    if (t->ndim < 2)
        return lf_tensor_alias(out, t, t->ndim, t->shape, t->stride, t->offset);
    return lf_tensor_transpose(out, t, 0, 1);
}

lf_status lf_tensor_permute(lf_tensor **out, const lf_tensor *t, const int *perm)
{
    LF_CHECK_PTR(out, "lf_tensor_permute", "out");
    *out = NULL;
    LF_CHECK_PTR(t, "lf_tensor_permute", "t");
    LF_TRY(lf_tensor_check("lf_tensor_permute", "t", t));
    LF_CHECK_PTR(perm, "lf_tensor_permute", "perm");
    int64_t shape[LF_MAX_DIMS], stride[LF_MAX_DIMS];
    int seen = 0;
    for (int i = 0; i < t->ndim; i++) {
        int d = wrap_dim(perm[i], t->ndim);
        DIM_CHECK("lf_tensor_permute", "perm entry", d, perm[i], t->ndim);
        if (seen & (1 << d))
            return lf_fail(LF_EINVAL, "lf_tensor_permute: dim %d appears twice in perm", d);
        seen |= 1 << d;
        shape[i] = t->shape[d];
        stride[i] = t->stride[d];
    }
    return lf_tensor_alias(out, t, t->ndim, shape, stride, t->offset);
}

lf_status lf_shape_infer(const char *what, int ndim, int64_t *shape, int64_t numel)
{
    char buf[LF_SHAPE_STR_CAP];
    if (ndim < 1 || ndim > LF_MAX_DIMS)
        return lf_fail(LF_ESHAPE, "%s: %d dims requested, expected 1 to %d", what, ndim, LF_MAX_DIMS);
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1 && infer < 0) {
            infer = i;
            continue;
        }
        if (shape[i] < 1)
            return lf_fail(LF_ESHAPE, "%s: shape %s has dim %d = %lld, expected >= 1 (or one -1)", what,
                           lf_fmt_shape(buf, sizeof buf, ndim, shape), i, (long long)shape[i]);
        if (!lf_mul_ok(known, shape[i], &known))
            return lf_fail(LF_EOVERFLOW, "%s: shape %s overflows", what, lf_fmt_shape(buf, sizeof buf, ndim, shape));
    }
    if (infer >= 0) {
        if (numel % known)
            return lf_fail(LF_ESHAPE, "%s: shape %s is invalid for %lld elements", what,
                           lf_fmt_shape(buf, sizeof buf, ndim, shape), (long long)numel);
        shape[infer] = numel / known;
        known = numel;
    }
    if (known != numel)
        return lf_fail(LF_ESHAPE, "%s: shape %s is invalid for %lld elements", what,
                       lf_fmt_shape(buf, sizeof buf, ndim, shape), (long long)numel);
    return LF_OK;
}

/* PyTorch's rule (computeStride): walk the old dims from the innermost, in chunks of dims that
 * are contiguous with each other; each chunk must be covered exactly by consecutive new dims,
 * which then get strides that step through the chunk. */
int lf_view_strides(const lf_tensor *t, int ndim, const int64_t *shape, int64_t *stride)
{
    int vd = ndim - 1;
    int64_t chunk_stride = t->stride[t->ndim - 1], tensor_numel = 1, view_numel = 1;
    for (int td = t->ndim - 1; td >= 0; td--) {
        tensor_numel *= t->shape[td];
        if (td == 0 || (t->shape[td - 1] != 1 && t->stride[td - 1] != tensor_numel * chunk_stride)) {
            while (vd >= 0 && (view_numel < tensor_numel || shape[vd] == 1)) {
                stride[vd] = view_numel * chunk_stride;
                view_numel *= shape[vd];
                vd--;
            }
            if (view_numel != tensor_numel)
                return 0;
            if (td > 0) {
                chunk_stride = t->stride[td - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return vd == -1;
}

lf_status lf_tensor_view(lf_tensor **out, const lf_tensor *t, int ndim, const int64_t *shape_in)
{
    char a[LF_SHAPE_STR_CAP], b[LF_SHAPE_STR_CAP], c[LF_SHAPE_STR_CAP];
    LF_CHECK_PTR(out, "lf_tensor_view", "out");
    *out = NULL;
    LF_CHECK_PTR(t, "lf_tensor_view", "t");
    LF_TRY(lf_tensor_check("lf_tensor_view", "t", t));
    LF_CHECK_PTR(shape_in, "lf_tensor_view", "shape");
    int64_t shape[LF_MAX_DIMS], stride[LF_MAX_DIMS];
    if (ndim < 1 || ndim > LF_MAX_DIMS)
        return lf_fail(LF_ESHAPE, "lf_tensor_view: %d dims requested, expected 1 to %d", ndim, LF_MAX_DIMS);
    memcpy(shape, shape_in, (size_t)ndim * sizeof *shape);
    LF_TRY(lf_shape_infer("lf_tensor_view", ndim, shape, lf_tensor_numel(t)));
    if (!lf_view_strides(t, ndim, shape, stride))
        return lf_fail(LF_ESHAPE,
                       "lf_tensor_view: a tensor of shape %s and strides %s cannot be viewed as %s; "
                       "use lf_reshape (it copies)",
                       lf_fmt_shape(a, sizeof a, t->ndim, t->shape), lf_fmt_shape(b, sizeof b, t->ndim, t->stride),
                       lf_fmt_shape(c, sizeof c, ndim, shape));
    return lf_tensor_alias(out, t, ndim, shape, stride, t->offset);
}

lf_status lf_tensor_as_strided(lf_tensor **out, const lf_tensor *t, int ndim, const int64_t *shape,
                               const int64_t *stride, int64_t offset)
{
    LF_CHECK_PTR(out, "lf_tensor_as_strided", "out");
    *out = NULL;
    LF_CHECK_PTR(t, "lf_tensor_as_strided", "t");
    LF_TRY(lf_tensor_check("lf_tensor_as_strided", "t", t));
    LF_CHECK_PTR(stride, "lf_tensor_as_strided", "stride");
    LF_TRY(lf_shape_check("lf_tensor_as_strided", ndim, shape, t->dtype, NULL));
    if (offset < 0)
        return lf_fail(LF_EINVAL, "lf_tensor_as_strided: offset %lld is negative", (long long)offset);
    /* The last reachable element must lie inside the storage. */
    int64_t last = offset, span;
    for (int i = 0; i < ndim; i++) {
        if (stride[i] < 0)
            return lf_fail(LF_EINVAL, "lf_tensor_as_strided: stride[%d] = %lld is negative", i, (long long)stride[i]);
        if (!lf_mul_ok(shape[i] - 1, stride[i], &span) || !lf_add_ok(last, span, &last))
            return lf_fail(LF_EOVERFLOW, "lf_tensor_as_strided: the extent of the view overflows");
    }
    int64_t capacity = (int64_t)(t->storage->nbytes / lf_dtype_size(t->dtype));
    if (last >= capacity)
        return lf_fail(LF_ESHAPE,
                       "lf_tensor_as_strided: the view reaches element %lld but the storage holds %lld elements",
                       (long long)last, (long long)capacity);
    return lf_tensor_alias(out, t, ndim, shape, stride, offset);
}

lf_status lf_tensor_unsqueeze(lf_tensor **out, const lf_tensor *t, int dim)
{
    LF_CHECK_PTR(out, "lf_tensor_unsqueeze", "out");
    *out = NULL;
    LF_CHECK_PTR(t, "lf_tensor_unsqueeze", "t");
    LF_TRY(lf_tensor_check("lf_tensor_unsqueeze", "t", t));
    if (t->ndim >= LF_MAX_DIMS)
        return lf_fail(LF_ESHAPE, "lf_tensor_unsqueeze: tensor already has %d dims, the most supported", t->ndim);
    int d = dim < 0 ? dim + t->ndim + 1 : dim;
    if (d < 0 || d > t->ndim)
        return lf_fail(LF_EINVAL, "lf_tensor_unsqueeze: dim = %d is out of range for a %d-dim tensor", dim, t->ndim);
    int64_t shape[LF_MAX_DIMS], stride[LF_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) {
        if (i == d) {
            shape[i] = 1;
            stride[i] = j < t->ndim ? t->stride[j] * t->shape[j] : 1;
        } else {
            shape[i] = t->shape[j];
            stride[i] = t->stride[j];
            j++;
        }
    }
    return lf_tensor_alias(out, t, t->ndim + 1, shape, stride, t->offset);
}

lf_status lf_tensor_flatten(lf_tensor **out, const lf_tensor *t, int start, int end)
{
    char a[LF_SHAPE_STR_CAP], b[LF_SHAPE_STR_CAP];
    LF_CHECK_PTR(out, "lf_tensor_flatten", "out");
    *out = NULL;
    LF_CHECK_PTR(t, "lf_tensor_flatten", "t");
    LF_TRY(lf_tensor_check("lf_tensor_flatten", "t", t));
    int s = wrap_dim(start, t->ndim), e = wrap_dim(end, t->ndim);
    DIM_CHECK("lf_tensor_flatten", "start_dim", s, start, t->ndim);
    DIM_CHECK("lf_tensor_flatten", "end_dim", e, end, t->ndim);
    if (s > e)
        return lf_fail(LF_EINVAL, "lf_tensor_flatten: start_dim %d is after end_dim %d", s, e);
    int64_t shape[LF_MAX_DIMS], stride[LF_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < s; i++)
        shape[n++] = t->shape[i];
    shape[n] = 1;
    for (int i = s; i <= e; i++)
        shape[n] *= t->shape[i];
    n++;
    for (int i = e + 1; i < t->ndim; i++)
        shape[n++] = t->shape[i];
    if (!lf_view_strides(t, n, shape, stride))
        return lf_fail(LF_ESHAPE,
                       "lf_tensor_flatten: dims %d..%d of a tensor with shape %s and strides %s are not "
                       "laid out as one block; use lf_reshape (it copies)",
                       s, e, lf_fmt_shape(a, sizeof a, t->ndim, t->shape),
                       lf_fmt_shape(b, sizeof b, t->ndim, t->stride));
    return lf_tensor_alias(out, t, n, shape, stride, t->offset);
}
