/* The GeGLU MLP of the blog's simple-mlp and kernels-mlp: y = down(gelu_tanh(gate(x)) * up(x)),
 * in variants that differ only in how many kernels carry the middle (nn.h): its forwards, into
 * new tensors or the caller's memory. Its weights (made, loaded, moved, quantized) are
 * mlp_weights.c's. Layer: nn/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "linfuse/nn.h"
#include "tensor/tensor_impl.h"

static const char *const variant_names[LF_MLP_FP8 + 1] = {"eager", "fused", "gated", "fp8"};

const char *lf_mlp_variant_name(lf_mlp_variant v)
{
    return (unsigned)v <= LF_MLP_FP8 ? variant_names[v] : "?";
}

int lf_mlp_variant_parse(const char *s)
{
    for (int v = 0; s && v <= LF_MLP_FP8; v++)
        if (!strcmp(s, variant_names[v]))
            return v;
    return -1;
}

/* x (..., dim) in the weights' dtype, said in the module's words (the GEMM's would name mat1, mat2). */
static lf_status check_x(const lf_nn_gated_mlp *m, const lf_tensor *x, const char *fn)
{
    if (x->ndim < 1 || x->shape[x->ndim - 1] != m->dim)
        return lf_fail(LF_ESHAPE, "%s: x's last dim is %lld, expected dim = %lld", fn,
                       x->ndim ? (long long)x->shape[x->ndim - 1] : 0LL, (long long)m->dim);
    if (x->dtype != m->gate_up->dtype)
        return lf_fail(LF_EDTYPE, "%s: x is %s but the weights are %s; expected one dtype", fn, lf_dtype_name(x->dtype),
                       lf_dtype_name(m->gate_up->dtype));
    return LF_OK;
}

/* x (..., dim) flattened to (tokens, dim), f run on that, its (tokens, n) result viewed back as
 * (..., n): the forwards that run as 2-D GEMMs. */
typedef lf_status (*on_tokens_fn)(const lf_nn_gated_mlp *m, const lf_tensor *x2, int middle_only, lf_tensor **y2);

static lf_status on_tokens(const lf_nn_gated_mlp *m, const lf_tensor *x, int64_t n, on_tokens_fn f, int middle_only,
                           lf_tensor **y)
{
    *y = NULL;
    LF_TRY(check_x(m, x, "lf_nn_gated_mlp_forward"));
    int64_t flat[2] = {lf_tensor_numel(x) / m->dim, m->dim}, back[LF_MAX_DIMS];
    memcpy(back, x->shape, sizeof back);
    back[x->ndim - 1] = n;
    lf_tensor *x2 = NULL, *y2 = NULL;
    lf_status s = lf_reshape(&x2, x, 2, flat);
    if (s == LF_OK)
        s = f(m, x2, middle_only, &y2);
    if (s == LF_OK)
        s = lf_view(y, y2, x->ndim, back);
    lf_tensor_free(x2), lf_tensor_free(y2);
    return s;
}

/* act(x . Wg^T) * (x . Wu^T) in one gated GEMM over gate_up: (tokens, dim) -> (tokens, hidden). */
static lf_status gated_2d(const lf_nn_gated_mlp *m, const lf_tensor *x2, int middle_only, lf_tensor **h)
{
    (void)middle_only; /* the gated variant's middle is this GEMM alone */
    lf_tensor *wt = NULL;
    lf_status s = lf_t(&wt, m->gate_up);
    if (s == LF_OK)
        s = lf_mm_gated(h, x2, wt, m->act, m->hidden);
    lf_tensor_free(wt);
    return s;
}

/* The fp8 variant on (tokens, dim): x quantized per token, the FP8 gated GEMM writing h in e4m3
 * with 1 x 128 block scales (in its epilogue on Hopper), the FP8 down GEMM over those blocks in x's
 * dtype. The block-scaled down GEMM takes whole groups of 4 tokens, so x's quantization pads to
 * them and the padding rows are dropped from y. middle_only: the FP8 gated GEMM's bf16 h. */
static lf_status fp8_2d(const lf_nn_gated_mlp *m, const lf_tensor *x2, int middle_only, lf_tensor **y)
{
    const int64_t M = x2->shape[0], M4 = middle_only ? M : LF_SCALE_LD(M);
    lf_tensor *xq = NULL, *xs = NULL, *wt = NULL, *h = NULL, *hs = NULL, *dt = NULL, *y4 = NULL;
    lf_status s = lf_quantize_fp8_rows(&xq, &xs, x2, M4);
    if (s == LF_OK)
        s = lf_t(&wt, m->gate_up_q);
    if (s == LF_OK && middle_only) {
        s = lf_scaled_mm_gated(y, xq, xs, wt, m->gate_up_scale, m->act, m->hidden);
    } else if (s == LF_OK) {
        s = lf_scaled_mm_gated_fp8(&h, &hs, xq, xs, wt, m->gate_up_scale, m->act, m->hidden);
        if (s == LF_OK)
            s = lf_t(&dt, m->down_q);
        if (s == LF_OK)
            s = lf_scaled_mm(&y4, h, hs, dt, m->down_scale, x2->dtype);
        if (s == LF_OK && M4 == M)
            *y = y4, y4 = NULL;
        else if (s == LF_OK)
            s = lf_tensor_as_strided(y, y4, 2, (int64_t[]){M, m->dim}, y4->stride, 0);
    }
    lf_tensor *tmp[] = {xq, xs, wt, h, hs, dt, y4};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++)
        lf_tensor_free(tmp[i]);
    return s;
}

/* The fp8 variant: down(act(gate(x)) * up(x)) through two FP8 GEMMs (the middle alone when
 * middle_only), or the gated variant with a note where the device has none. */
static lf_status fp8_forward(const lf_nn_gated_mlp *m, const lf_tensor *x, int middle_only, lf_tensor **y)
{
    if (!m->gate_up_q || !m->down_q)
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_forward: the fp8 variant needs FP8 weights; call "
                                  "lf_nn_gated_mlp_quantize_fp8 once after loading");
    if (lf_fp8_supported(lf_tensor_device(x)) != LF_OK) {
        char why[320];
        snprintf(why, sizeof why, "fp8 variant runs gated %s (%s)", lf_dtype_name(x->dtype), lf_last_error());
        lf_ops_note_begin(why);
        lf_status s = middle_only ? lf_nn_gated_mlp_middle(m, LF_MLP_GATED, x, y)
                                  : lf_nn_gated_mlp_forward_variant(m, LF_MLP_GATED, x, y);
        lf_ops_note_end();
        return s;
    }
    return on_tokens(m, x, middle_only ? m->hidden : m->dim, fp8_2d, middle_only, y);
}

lf_status lf_nn_gated_mlp_middle(const lf_nn_gated_mlp *m, lf_mlp_variant v, const lf_tensor *x, lf_tensor **h)
{
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_middle", "m");
    LF_CHECK_PTR(h, "lf_nn_gated_mlp_middle", "h");
    *h = NULL;
    LF_CHECK_PTR(x, "lf_nn_gated_mlp_middle", "x");
    if (v == LF_MLP_FP8)
        return fp8_forward(m, x, 1, h);
    if ((unsigned)v >= LF_MLP_VARIANT_COUNT)
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_forward: variant %d is not eager, fused, gated or fp8", (int)v);
    if (v == LF_MLP_GATED)
        return on_tokens(m, x, m->hidden, gated_2d, 1, h);
    /* PyTorch's order for down(act(gate(x)) * up(x)): gate, act, up, mul (its traces show it; the
     * act then reads g while it is still in L2) */
    lf_tensor *g = NULL, *u = NULL, *a = NULL;
    const lf_gelu_approx approx = m->act == LF_ACT_GELU_ERF ? LF_GELU_ERF : LF_GELU_TANH;
    lf_status s = lf_nn_linear_forward(&m->gate, x, &g);
    if (s == LF_OK && v == LF_MLP_EAGER)
        s = m->act == LF_ACT_SILU ? lf_silu(&a, g) : lf_gelu(&a, g, approx);
    if (s == LF_OK)
        s = lf_nn_linear_forward(&m->up, x, &u);
    if (s == LF_OK && v == LF_MLP_FUSED)
        s = m->act == LF_ACT_SILU ? lf_silu_mul(h, g, u) : lf_gelu_mul(h, g, u, approx);
    if (s == LF_OK && v == LF_MLP_EAGER)
        s = lf_mul(h, a, u);
    lf_tensor_free(g);
    lf_tensor_free(u);
    lf_tensor_free(a);
    return s;
}

lf_status lf_nn_gated_mlp_forward_variant(const lf_nn_gated_mlp *m, lf_mlp_variant v, const lf_tensor *x, lf_tensor **y)
{
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_forward", "m");
    LF_CHECK_PTR(y, "lf_nn_gated_mlp_forward", "y");
    *y = NULL;
    if (v == LF_MLP_FP8) {
        LF_CHECK_PTR(x, "lf_nn_gated_mlp_forward", "x");
        return fp8_forward(m, x, 0, y);
    }
    lf_tensor *h = NULL;
    lf_status s = lf_nn_gated_mlp_middle(m, v, x, &h);
    if (s == LF_OK)
        s = lf_nn_linear_forward(&m->down, h, y);
    lf_tensor_free(h);
    return s;
}

/* --- the forward into the caller's memory ---
 * The intermediates come from the caller's workspace (an arena, tensor_impl.h); each variant's
 * worst case is what lf_nn_gated_mlp_workspace adds up, every piece rounded to the arena's 256
 * bytes. */

static size_t piece(int64_t rows, int64_t cols, size_t elem)
{
    return ((size_t)rows * (size_t)cols * elem + 255) & ~(size_t)255;
}

lf_status lf_nn_gated_mlp_workspace(const lf_nn_gated_mlp *m, lf_mlp_variant v, int64_t tokens, size_t *bytes)
{
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_workspace", "m");
    LF_CHECK_PTR(bytes, "lf_nn_gated_mlp_workspace", "bytes");
    *bytes = 0;
    if (!m->gate_up)
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_workspace: the module is not initialised");
    if (tokens < 1)
        return lf_fail(LF_ESHAPE, "lf_nn_gated_mlp_workspace: %lld tokens, expected >= 1", (long long)tokens);
    if ((unsigned)v > LF_MLP_FP8)
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_workspace: variant %d is not eager, fused, gated or fp8", (int)v);
    /* below, a dozen pieces of at most 4 x (tokens + 3) x (2 hidden or dim) bytes: refused past
     * 2^62 bytes in all rather than wrapped (tokens near 2^63 gave LF_OK and 256 bytes) */
    if (tokens > INT64_MAX - 3 ||
        4.0 * ((double)tokens + 3) * (8.0 * (double)m->hidden + 4.0 * (double)m->dim + 16) > 0x1p62)
        return lf_fail(LF_EOVERFLOW, "lf_nn_gated_mlp_workspace: %lld tokens need more than 2^62 bytes",
                       (long long)tokens);
    const size_t es = lf_dtype_size(m->gate_up->dtype);
    const int64_t T = tokens, H = m->hidden, D = m->dim, T4 = LF_SCALE_LD(tokens);
    /* the x copy reshape makes when x's leading dims do not flatten in place, y's result when the
     * GEMM cannot write y where it is (then copied), and the arena's alignment of its start */
    size_t n = piece(T, D, es) + piece(T4, D, es) + 256;
    /* gated: h; fused: g, u, h; eager: g, act(g), u, h; a gated GEMM that falls back: its g||u */
    const size_t h = piece(T, H, es), gu = piece(T, 2 * H, es);
    const size_t gated = h + gu, fused = 3 * h, eager = 4 * h;
    /* fp8: x's codes and scales (padded to 4 tokens), h's codes and 1 x 128 scales, y padded;
     * where the device has no FP8 GEMM it runs gated */
    const size_t fp8 = piece(T4, D, 1) + piece(T4, 1, 4) + piece(T4, H, 1) +
                       piece(lf_scale_count(LF_SCALE_1X128, T4, H), 1, 4) + piece(T4, D, es) + piece(T4, H, es) +
                       piece(T4, 2 * H, es);
    n += v == LF_MLP_EAGER ? eager : v == LF_MLP_FUSED ? fused : v == LF_MLP_GATED ? gated : fp8;
    *bytes = n;
    return LF_OK;
}

/* The bytes t's elements span, [*lo, *hi). */
static void byte_span(const lf_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    const int64_t es = (int64_t)lf_dtype_size(t->dtype);
    int64_t far = 0;
    for (int i = 0; i < t->ndim; i++)
        far += (t->shape[i] - 1) * t->stride[i];
    *lo = (uintptr_t)lf_tensor_data(t);
    *hi = *lo + (uintptr_t)((far + 1) * es);
}

/* Whether two tensors' spans meet: by address, so two views of one memory through different
 * storages (two DLPack imports, say) are seen too. */
static int bytes_overlap(const lf_tensor *a, const lf_tensor *b)
{
    uintptr_t alo, ahi, blo, bhi;
    byte_span(a, &alo, &ahi);
    byte_span(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

/* y's checks: x's leading shape with dim columns, x's dtype and device. */
static lf_status check_y(const lf_nn_gated_mlp *m, const lf_tensor *x, const lf_tensor *y)
{
    char a[LF_SHAPE_STR_CAP], b[LF_SHAPE_STR_CAP];
    int same = y->ndim == x->ndim && y->shape[y->ndim - 1] == m->dim;
    for (int i = 0; same && i < x->ndim - 1; i++)
        same = y->shape[i] == x->shape[i];
    if (!same)
        return lf_fail(LF_ESHAPE,
                       "lf_nn_gated_mlp_forward_out: y is %s; for x %s it must be x's shape with dim = %lld last",
                       lf_fmt_shape(a, sizeof a, y->ndim, y->shape), lf_fmt_shape(b, sizeof b, x->ndim, x->shape),
                       (long long)m->dim);
    if (y->dtype != x->dtype || lf_tensor_device(y) != lf_tensor_device(x) ||
        lf_tensor_device_index(y) != lf_tensor_device_index(x))
        return lf_fail(LF_EDTYPE, "lf_nn_gated_mlp_forward_out: y is %s on %s:%d, x %s on %s:%d; they must agree",
                       lf_dtype_name(y->dtype), lf_device_name(lf_tensor_device(y)), lf_tensor_device_index(y),
                       lf_dtype_name(x->dtype), lf_device_name(lf_tensor_device(x)), lf_tensor_device_index(x));
    if (lf_tensor_shares_storage(y, x))
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_forward_out: y shares memory with x");
    return LF_OK;
}

/* Whether a GEMM writes y2 where it is: rows of contiguous elements, 16-byte aligned and 16 bytes
 * apart (what cuBLASLt's bf16 and FP8 GEMMs take), else the result goes through the arena. */
static int writes_in_place(const lf_tensor *y2)
{
    const int64_t es = (int64_t)lf_dtype_size(y2->dtype);
    return y2->stride[1] == 1 && (y2->stride[0] * es) % 16 == 0 && (uintptr_t)lf_tensor_data(y2) % 16 == 0;
}

/* The forward's result into y (its 2-D view, y2), inside the arena: the down GEMM writes y2 itself
 * where it can; a y of other strides, and fp8's result padded to 4 tokens, are copied. */
static lf_status forward_into(const lf_nn_gated_mlp *m, lf_mlp_variant v, const lf_tensor *x, lf_tensor *y2)
{
    const int64_t T = y2->shape[0];
    int64_t flat[2] = {T, m->dim};
    lf_tensor *x2 = NULL, *h = NULL, *dt = NULL, *r = NULL;
    const int in_place = writes_in_place(y2);
    if (v == LF_MLP_FP8 && (!m->gate_up_q || !m->down_q))
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_forward_out: the fp8 variant needs FP8 weights; call "
                                  "lf_nn_gated_mlp_quantize_fp8 once after loading");
    lf_status s = lf_reshape(&x2, x, 2, flat);
    const int fp8 = v == LF_MLP_FP8 && s == LF_OK && lf_fp8_supported(lf_tensor_device(x)) == LF_OK;
    if (s == LF_OK && fp8) {
        if (T % 4 == 0 && in_place) { /* the block-scaled GEMM writes y itself */
            lf_tensor *xq = NULL, *xs = NULL, *wt = NULL, *hs = NULL;
            s = lf_quantize_fp8_rows(&xq, &xs, x2, T);
            if (s == LF_OK)
                s = lf_t(&wt, m->gate_up_q);
            if (s == LF_OK)
                s = lf_scaled_mm_gated_fp8(&h, &hs, xq, xs, wt, m->gate_up_scale, m->act, m->hidden);
            if (s == LF_OK)
                s = lf_t(&dt, m->down_q);
            if (s == LF_OK)
                s = lf_scaled_mm_out(y2, h, hs, dt, m->down_scale);
            lf_tensor_free(xq), lf_tensor_free(xs), lf_tensor_free(wt), lf_tensor_free(hs);
        } else {
            s = on_tokens(m, x2, m->dim, fp8_2d, 0, &r);
            if (s == LF_OK)
                s = lf_copy_out(y2, r);
        }
    } else if (s == LF_OK) {
        if (v == LF_MLP_FP8) { /* no FP8 GEMM here: the gated variant, said in the trace */
            char why[320];
            snprintf(why, sizeof why, "fp8 variant runs gated %s (%s)", lf_dtype_name(x->dtype), lf_last_error());
            lf_ops_note_begin(why);
        }
        s = lf_nn_gated_mlp_middle(m, v == LF_MLP_FP8 ? LF_MLP_GATED : v, x2, &h);
        if (s == LF_OK)
            s = lf_t(&dt, m->down.weight);
        if (s == LF_OK && in_place)
            s = lf_mm_out(y2, h, dt);
        else if (s == LF_OK && (s = lf_mm(&r, h, dt)) == LF_OK) /* r from the arena */
            s = lf_copy_out(y2, r);
        if (v == LF_MLP_FP8)
            lf_ops_note_end();
    }
    lf_tensor_free(x2), lf_tensor_free(h), lf_tensor_free(dt), lf_tensor_free(r);
    return s;
}

lf_status lf_nn_gated_mlp_forward_out(const lf_nn_gated_mlp *m, lf_mlp_variant v, const lf_tensor *x, lf_tensor *y,
                                      lf_tensor *workspace)
{
    static const char fn[] = "lf_nn_gated_mlp_forward_out";
    LF_CHECK_PTR(m, fn, "m");
    LF_CHECK_PTR(x, fn, "x");
    LF_CHECK_PTR(y, fn, "y");
    LF_CHECK_PTR(workspace, fn, "workspace");
    if (!m->gate_up)
        return lf_fail(LF_EINVAL, "%s: the module is not initialised", fn);
    LF_TRY(check_x(m, x, fn));
    LF_TRY(check_y(m, x, y));
    const int64_t T = lf_tensor_numel(x) / m->dim;
    size_t need = 0;
    LF_TRY(lf_nn_gated_mlp_workspace(m, v, T, &need));
    const size_t have = (size_t)lf_tensor_numel(workspace) * lf_dtype_size(workspace->dtype);
    if (!lf_tensor_is_contiguous(workspace) || lf_tensor_device(workspace) != lf_tensor_device(x) ||
        lf_tensor_device_index(workspace) != lf_tensor_device_index(x))
        return lf_fail(LF_EINVAL, "%s: workspace must be contiguous and on x's device (%s:%d)", fn,
                       lf_device_name(lf_tensor_device(x)), lf_tensor_device_index(x));
    if (have < need)
        return lf_fail(LF_ENOMEM, "%s: workspace has %zu bytes, the %s variant needs %zu for %lld tokens", fn, have,
                       lf_mlp_variant_name(v), need, (long long)T);
    if (bytes_overlap(workspace, x) || bytes_overlap(workspace, y) || bytes_overlap(x, y))
        return lf_fail(LF_EINVAL, "%s: workspace, x and y must be apart in memory (two of them overlap)", fn);
    lf_tensor *y2 = NULL; /* (tokens, dim): y's leading dims as one */
    lf_status s = y->ndim == 1 ? lf_tensor_unsqueeze(&y2, y, 0) : lf_tensor_flatten(&y2, y, 0, y->ndim - 2);
    if (s != LF_OK)
        return lf_fail(s, "%s: y's leading dims do not flatten into one (strides); a contiguous y does", fn);
    lf_arena arena = {lf_tensor_device(x), lf_tensor_device_index(x), lf_tensor_data(workspace), have, 0};
    lf_arena *prev = lf_tensor_arena_set(&arena);
    s = forward_into(m, v, x, y2);
    lf_tensor_arena_set(prev);
    lf_tensor_free(y2);
    return s;
}

lf_status lf_nn_gated_mlp_forward(const lf_nn_gated_mlp *m, const lf_tensor *x, lf_tensor **y)
{
    return lf_nn_gated_mlp_forward_variant(m, LF_MLP_EAGER, x, y);
}
