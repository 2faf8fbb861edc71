/* The GeGLU MLP of the blog's simple-mlp and kernels-mlp: y = down(gelu_tanh(gate(x)) * up(x)),
 * in three variants that differ only in how many kernels carry the middle (nn.h). Layer: nn/. */
#include <math.h>
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

/* The activations a gated MLP takes. */
static int gated_act(lf_act a)
{
    return a == LF_ACT_GELU_TANH || a == LF_ACT_SILU || a == LF_ACT_GELU_ERF;
}

/* gate.weight and up.weight as row views of gate_up (old views dropped). */
static lf_status make_views(lf_nn_gated_mlp *m)
{
    const int64_t H = m->hidden, D = m->dim, shape[2] = {H, D}, stride[2] = {D, 1};
    lf_tensor *g = NULL, *u = NULL;
    lf_status s = lf_tensor_as_strided(&g, m->gate_up, 2, shape, stride, 0);
    if (s == LF_OK)
        s = lf_tensor_as_strided(&u, m->gate_up, 2, shape, stride, H * D);
    if (s != LF_OK) {
        lf_tensor_free(g);
        return s;
    }
    lf_tensor_free(m->gate.weight);
    lf_tensor_free(m->up.weight);
    m->gate.weight = g;
    m->up.weight = u;
    return LF_OK;
}

lf_status lf_nn_gated_mlp_init(lf_nn_gated_mlp *m, const lf_nn_gated_mlp_opts *o, lf_rng *rng)
{
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_init", "m");
    memset(m, 0, sizeof *m);
    LF_CHECK_PTR(o, "lf_nn_gated_mlp_init", "opts");
    LF_CHECK_PTR(rng, "lf_nn_gated_mlp_init", "rng");
    if (o->dim < 1 || o->hidden < 1)
        return lf_fail(LF_ESHAPE, "lf_nn_gated_mlp_init: dim = %lld and hidden = %lld, expected both >= 1",
                       (long long)o->dim, (long long)o->hidden);
    if (o->act != LF_ACT_NONE && !gated_act(o->act))
        return lf_fail(LF_EINVAL,
                       "lf_nn_gated_mlp_init: act %s: a gated MLP's is gelu_tanh (GeGLU), silu (SwiGLU) or gelu_erf",
                       lf_act_name(o->act));
    if (o->device != LF_DEVICE_CPU)
        return lf_fail(LF_EDEVICE,
                       "lf_nn_gated_mlp_init: device %s: parameters are created on cpu; move them with "
                       "lf_nn_gated_mlp_to_device",
                       lf_device_name(o->device));
    /* gate then up, drawn in that order as two nn.Linear(dim, hidden) would be */
    const double bound = 1.0 / sqrt((double)o->dim);
    int64_t gu[2] = {2 * o->hidden, o->dim};
    lf_nn_linear_opts outo = {
        .in_features = o->hidden, .out_features = o->dim, .bias = 0, .dtype = o->dtype, .device = LF_DEVICE_CPU};
    lf_status s = lf_tensor_empty(&m->gate_up, o->dtype, 2, gu, LF_DEVICE_CPU);
    if (s == LF_OK)
        s = lf_tensor_fill_uniform(m->gate_up, rng, -bound, bound);
    m->dim = o->dim;
    m->hidden = o->hidden;
    m->act = o->act == LF_ACT_NONE ? LF_ACT_GELU_TANH : o->act;
    if (s == LF_OK)
        s = make_views(m);
    m->gate.in_features = m->up.in_features = o->dim;
    m->gate.out_features = m->up.out_features = o->hidden;
    if (s == LF_OK)
        s = lf_nn_linear_init(&m->down, &outo, rng);
    if (s != LF_OK) {
        lf_nn_gated_mlp_free(m);
        return s;
    }
    return LF_OK;
}

lf_status lf_nn_gated_mlp_from_weights(lf_nn_gated_mlp *m, lf_tensor *gate_up, lf_tensor *down_weight, lf_act act)
{
    if (!m) { /* the weights are the module's "also when this fails": freed, as they would be */
        lf_tensor_free(gate_up);
        lf_tensor_free(down_weight);
    }
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_from_weights", "m");
    memset(m, 0, sizeof *m);
    if (!gate_up || !down_weight || !gated_act(act)) {
        lf_tensor_free(gate_up);
        lf_tensor_free(down_weight);
        if (!gated_act(act))
            return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_from_weights: act %s: gelu_tanh, silu or gelu_erf",
                           lf_act_name(act));
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_from_weights: argument '%s' is NULL",
                       gate_up ? "down_weight" : "gate_up");
    }
    char a[LF_SHAPE_STR_CAP], b[LF_SHAPE_STR_CAP];
    lf_status s = LF_OK;
    if (gate_up->ndim != 2 || down_weight->ndim != 2 || gate_up->shape[0] % 2 ||
        down_weight->shape[0] != gate_up->shape[1] || down_weight->shape[1] != gate_up->shape[0] / 2 ||
        !lf_tensor_is_contiguous(gate_up) || gate_up->dtype != down_weight->dtype ||
        lf_tensor_device(gate_up) != lf_tensor_device(down_weight))
        s = lf_fail(LF_ESHAPE,
                    "lf_nn_gated_mlp_from_weights: gate_up %s (%s) and down %s (%s): expected a contiguous (2H, D) "
                    "and a (D, H) of one dtype and device",
                    lf_fmt_shape(a, sizeof a, gate_up->ndim, gate_up->shape), lf_dtype_name(gate_up->dtype),
                    lf_fmt_shape(b, sizeof b, down_weight->ndim, down_weight->shape),
                    lf_dtype_name(down_weight->dtype));
    if (s == LF_OK) {
        m->dim = gate_up->shape[1];
        m->hidden = gate_up->shape[0] / 2;
        m->act = act;
        m->gate_up = gate_up;
        s = make_views(m);
    }
    if (s != LF_OK) { /* the weights were handed over: they go with the failure */
        memset(m, 0, sizeof *m);
        lf_tensor_free(gate_up);
        lf_tensor_free(down_weight);
        return s;
    }
    m->gate.in_features = m->up.in_features = m->dim;
    m->gate.out_features = m->up.out_features = m->hidden;
    m->down.weight = down_weight;
    m->down.in_features = m->hidden;
    m->down.out_features = m->dim;
    return LF_OK;
}

lf_status lf_nn_gated_mlp_to_device(lf_nn_gated_mlp *m, lf_device dev)
{
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_to_device", "m");
    if (!m->gate_up || !m->down.weight)
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_to_device: the module is not initialised");
    /* every parameter copied first, then swapped in: a failure leaves m as it was */
    lf_tensor **own[6] = {&m->gate_up, &m->down.weight, &m->gate_up_q, &m->gate_up_scale, &m->down_q, &m->down_scale};
    lf_tensor *moved[6] = {NULL};
    lf_status s = LF_OK;
    for (int i = 0; i < 6 && s == LF_OK; i++)
        if (*own[i])
            s = lf_tensor_to_device(&moved[i], *own[i], dev);
    lf_tensor *old_gu = m->gate_up;
    if (s == LF_OK) {
        m->gate_up = moved[0];
        s = make_views(m);
        if (s != LF_OK) /* put the old storage back: the views still point into it */
            m->gate_up = old_gu;
    }
    if (s != LF_OK) {
        for (int i = 0; i < 6; i++)
            lf_tensor_free(moved[i]);
        return s;
    }
    for (int i = 0; i < 6; i++) {
        lf_tensor_free(i == 0 ? old_gu : *own[i]);
        *own[i] = moved[i];
    }
    return LF_OK;
}

/* The FP8 weights q (gate_up's codes and scales, down's codes and scales) made the module's,
 * replacing any it had, when s is LF_OK; freed, and m (which may then be NULL) left as it was,
 * otherwise. Returns s. */
static lf_status take_fp8(lf_nn_gated_mlp *m, lf_tensor *q[4], lf_status s)
{
    if (s != LF_OK) { /* m may be NULL here */
        for (int i = 0; i < 4; i++)
            lf_tensor_free(q[i]);
        return s;
    }
    lf_tensor **own[4] = {&m->gate_up_q, &m->gate_up_scale, &m->down_q, &m->down_scale};
    for (int i = 0; i < 4; i++) {
        lf_tensor_free(*own[i]);
        *own[i] = q[i];
    }
    return LF_OK;
}

lf_status lf_nn_gated_mlp_quantize_fp8(lf_nn_gated_mlp *m)
{
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_quantize_fp8", "m");
    if (!m->gate_up || !m->down.weight)
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_quantize_fp8: the module is not initialised");
    lf_tensor *q[4] = {NULL};
    lf_status s = lf_quantize_fp8(&q[0], &q[1], m->gate_up);
    if (s == LF_OK)
        s = lf_quantize_fp8_128x128(&q[2], &q[3], m->down.weight);
    return take_fp8(m, q, s);
}

/* Whether t is a contiguous (rows, cols) tensor of dtype dt on ref's device and unit. */
static int fits(const lf_tensor *t, lf_dtype dt, int64_t rows, int64_t cols, const lf_tensor *ref)
{
    return t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols && t->dtype == dt && lf_tensor_is_contiguous(t) &&
           lf_tensor_device(t) == lf_tensor_device(ref) && lf_tensor_device_index(t) == lf_tensor_device_index(ref);
}

lf_status lf_nn_gated_mlp_set_fp8_weights(lf_nn_gated_mlp *m, lf_tensor *gate_up_q, lf_tensor *gate_up_scale,
                                          lf_tensor *down_q, lf_tensor *down_scale)
{
    static const char fn[] = "lf_nn_gated_mlp_set_fp8_weights";
    lf_tensor *q[4] = {gate_up_q, gate_up_scale, down_q, down_scale};
    static const char *const name[4] = {"gate_up_q", "gate_up_scale", "down_q", "down_scale"};
    lf_status s = LF_OK;
    if (!m)
        s = lf_fail(LF_EINVAL, "%s: argument 'm' is NULL", fn);
    else if (!m->gate_up || !m->down.weight)
        s = lf_fail(LF_EINVAL, "%s: the module is not initialised", fn);
    for (int i = 0; i < 4 && s == LF_OK; i++)
        if (!q[i])
            s = lf_fail(LF_EINVAL, "%s: argument '%s' is NULL", fn, name[i]);
    if (s == LF_OK) {
        const int64_t H = m->hidden, D = m->dim;
        int64_t ds[2];
        lf_scale_shape(LF_SCALE_128X128, D, H, ds);
        const struct {
            lf_dtype dt;
            int64_t rows, cols;
        } want[4] = {{LF_DTYPE_F8E4M3, 2 * H, D},
                     {LF_DTYPE_F32, 2 * H, 1},
                     {LF_DTYPE_F8E4M3, D, H},
                     {LF_DTYPE_F32, ds[0], ds[1]}};
        char a[LF_SHAPE_STR_CAP];
        for (int i = 0; i < 4 && s == LF_OK; i++)
            if (!fits(q[i], want[i].dt, want[i].rows, want[i].cols, m->gate_up))
                s = lf_fail(q[i]->dtype != want[i].dt ? LF_EDTYPE : LF_ESHAPE,
                            "%s: %s is %s %s on %s:%d; expected a contiguous (%lld, %lld) %s on %s:%d (the "
                            "module's dim = %lld, hidden = %lld)",
                            fn, name[i], lf_fmt_shape(a, sizeof a, q[i]->ndim, q[i]->shape), lf_dtype_name(q[i]->dtype),
                            lf_device_name(lf_tensor_device(q[i])), lf_tensor_device_index(q[i]),
                            (long long)want[i].rows, (long long)want[i].cols, lf_dtype_name(want[i].dt),
                            lf_device_name(lf_tensor_device(m->gate_up)), lf_tensor_device_index(m->gate_up),
                            (long long)D, (long long)H);
    }
    return take_fp8(m, q, s); /* handed over: on a failure they go with it */
}

/* x (..., dim) flattened to (tokens, dim), f run on that, its (tokens, n) result viewed back as
 * (..., n): the forwards that run as 2-D GEMMs. */
typedef lf_status (*on_tokens_fn)(const lf_nn_gated_mlp *m, const lf_tensor *x2, int middle_only, lf_tensor **y2);

static lf_status on_tokens(const lf_nn_gated_mlp *m, const lf_tensor *x, int64_t n, on_tokens_fn f, int middle_only,
                           lf_tensor **y)
{
    *y = NULL;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != m->dim)
        return lf_fail(LF_ESHAPE, "lf_nn_gated_mlp_forward: x's last dim is %lld, expected dim = %lld",
                       x->ndim ? (long long)x->shape[x->ndim - 1] : 0LL, (long long)m->dim);
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
    if (x->ndim < 1 || x->shape[x->ndim - 1] != m->dim)
        return lf_fail(LF_ESHAPE, "%s: x's last dim is %lld, expected dim = %lld", fn,
                       x->ndim ? (long long)x->shape[x->ndim - 1] : 0LL, (long long)m->dim);
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

void lf_nn_gated_mlp_free(lf_nn_gated_mlp *m)
{
    if (!m)
        return;
    lf_nn_linear_free(&m->gate);
    lf_nn_linear_free(&m->up);
    lf_nn_linear_free(&m->down);
    lf_tensor_free(m->gate_up);
    lf_tensor_free(m->gate_up_q), lf_tensor_free(m->gate_up_scale);
    lf_tensor_free(m->down_q), lf_tensor_free(m->down_scale);
    m->gate_up = m->gate_up_q = m->gate_up_scale = m->down_q = m->down_scale = NULL;
}

lf_status lf_nn_gated_mlp_load(lf_nn_gated_mlp *m, const lf_safetensors *st, const char *prefix, lf_act act,
                               lf_dtype dtype)
{
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_load", "m");
    memset(m, 0, sizeof *m);
    LF_CHECK_PTR(st, "lf_nn_gated_mlp_load", "st");
    LF_CHECK_PTR(prefix, "lf_nn_gated_mlp_load", "prefix");
    static const char *const part[3] = {"gate_proj", "up_proj", "down_proj"};
    lf_tensor *w[3] = {NULL, NULL, NULL}, *gu = NULL, *down = NULL;
    char name[3][512];
    lf_status s = LF_OK;
    for (int i = 0; i < 3 && s == LF_OK; i++) {
        if (snprintf(name[i], sizeof name[i], "%s.%s.weight", prefix, part[i]) >= (int)sizeof name[i])
            s = lf_fail(LF_EINVAL, "lf_nn_gated_mlp_load: prefix too long");
        else if (!lf_st_has(st, name[i]))
            s = lf_fail(LF_EINVAL, "lf_nn_gated_mlp_load: the checkpoint has no \"%.300s\" (prefix \"%.200s\")",
                        name[i], prefix);
        else /* converted to dtype, or FP8 dequantized with its scales */
            s = lf_st_get_as(st, name[i], dtype, &w[i]);
    }
    char a[LF_SHAPE_STR_CAP], b[LF_SHAPE_STR_CAP], c[LF_SHAPE_STR_CAP];
    if (s == LF_OK &&
        (w[0]->ndim != 2 || w[1]->ndim != 2 || w[2]->ndim != 2 || w[0]->shape[0] != w[1]->shape[0] ||
         w[0]->shape[1] != w[1]->shape[1] || w[2]->shape[0] != w[0]->shape[1] || w[2]->shape[1] != w[0]->shape[0]))
        s = lf_fail(LF_ESHAPE,
                    "lf_nn_gated_mlp_load: %s: gate_proj %s, up_proj %s, down_proj %s: expected (H, D), (H, D), (D, H)",
                    prefix, lf_fmt_shape(a, sizeof a, w[0]->ndim, w[0]->shape),
                    lf_fmt_shape(b, sizeof b, w[1]->ndim, w[1]->shape),
                    lf_fmt_shape(c, sizeof c, w[2]->ndim, w[2]->shape));
    if (s == LF_OK && (w[0]->dtype != w[1]->dtype || w[0]->dtype != w[2]->dtype))
        s = lf_fail(LF_EDTYPE, "lf_nn_gated_mlp_load: %s: the three weights are %s, %s, %s; expected one dtype", prefix,
                    lf_dtype_name(w[0]->dtype), lf_dtype_name(w[1]->dtype), lf_dtype_name(w[2]->dtype));
    const lf_dtype dt = s == LF_OK ? w[0]->dtype : LF_DTYPE_COUNT;
    if (s == LF_OK) { /* [Wg; Wu]: the gated GEMM's one weight */
        const int64_t H = w[0]->shape[0], D = w[0]->shape[1], gs[2] = {2 * H, D};
        s = lf_tensor_empty(&gu, dt, 2, gs, LF_DEVICE_CPU);
        if (s == LF_OK) {
            const size_t half = (size_t)(H * D) * lf_dtype_size(dt);
            memcpy(lf_tensor_data(gu), lf_tensor_data(w[0]), half);
            memcpy((char *)lf_tensor_data(gu) + half, lf_tensor_data(w[1]), half);
        }
    }
    if (s == LF_OK) /* the file's own bytes when the dtype is the file's */
        down = w[2], w[2] = NULL;
    for (int i = 0; i < 3; i++)
        lf_tensor_free(w[i]);
    if (s != LF_OK) {
        lf_tensor_free(gu), lf_tensor_free(down);
        return s;
    }
    return lf_nn_gated_mlp_from_weights(m, gu, down, act);
}
