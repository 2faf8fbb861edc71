/* FP8 ops: quantization per row (torch._scaled_mm's row-wise recipe: weights once, activations
 * every forward), per 1 x 128 block of a row or per 128 x 128 block (DeepSeek-V3's recipe for
 * activations and weights, which the fp8 MLP's h and down weight take), and the scaled GEMMs that
 * consume them: a plain one (the down projection), a gated one (gate and up, act(g) * u in the
 * epilogue) and a gated one whose h leaves already quantized in 1 x 128 blocks. Layer: ops/. */
#include <stdio.h>

#include "ops/dispatch.h"

/* w quantized with scales in mode m (row-wise: into rows >= w's rows, the rest padding). */
static lf_status quantize_impl(const char *fn, lf_tensor **q, lf_tensor **scale, const lf_tensor *w, lf_scale_mode m,
                               int64_t rows)
{
    LF_CHECK_PTR(q, fn, "q");
    LF_CHECK_PTR(scale, fn, "scale");
    *q = NULL, *scale = NULL;
    LF_TRY(lf_check_ndim(fn, "w", w, 2));
    if (!lf_dtype_computes(w->dtype))
        return lf_fail(LF_EDTYPE, "%s: w is %s; expected bf16, f16 or f32", fn, lf_dtype_name(w->dtype));
    const int64_t R = w->shape[0], C = w->shape[1];
    if (m != LF_SCALE_ROWS)
        rows = R;
    if (rows < R)
        return lf_fail(LF_ESHAPE, "%s: %lld rows cannot hold w's %lld", fn, (long long)rows, (long long)R);
    int64_t sshape[2];
    lf_scale_shape(m, m == LF_SCALE_ROWS ? rows : R, C, sshape);
    lf_tensor *tq = NULL, *ts = NULL;
    lf_status s = lf_tensor_empty(&ts, LF_DTYPE_F32, 2, sshape, lf_tensor_device(w));
    if (s == LF_OK)
        s = lf_tensor_empty(&tq, LF_DTYPE_F8E4M3, 2, (int64_t[]){rows, C}, lf_tensor_device(w));
    if (s == LF_OK) {
        lf_quant qu = {.rows = R,
                       .cols = C,
                       .in = lf_strided_of(w),
                       .q = lf_tensor_data(tq),
                       .scale = lf_tensor_data(ts),
                       .mode = m,
                       .pad_rows = m == LF_SCALE_ROWS ? rows : 0};
        s = lf_launch_quant(lf_tensor_device(w), &qu);
    }
    if (s != LF_OK) {
        lf_tensor_free(tq), lf_tensor_free(ts);
        return s;
    }
    *q = tq, *scale = ts;
    return LF_OK;
}

lf_status lf_quantize_fp8(lf_tensor **q, lf_tensor **scale, const lf_tensor *w)
{
    lf_op_arg args[] = {LF_ARG(w)};
    LF_DISPATCH(QUANTIZE_FP8, args, q,
                quantize_impl("lf_quantize_fp8", q, scale, w, LF_SCALE_ROWS, w && w->ndim == 2 ? w->shape[0] : 0));
}

lf_status lf_quantize_fp8_rows(lf_tensor **q, lf_tensor **scale, const lf_tensor *x, int64_t rows)
{
    lf_op_arg args[] = {LF_ARG(x), LF_ARG_SCALAR((double)rows)};
    LF_DISPATCH(QUANTIZE_FP8, args, q, quantize_impl("lf_quantize_fp8_rows", q, scale, x, LF_SCALE_ROWS, rows));
}

lf_status lf_quantize_fp8_1x128(lf_tensor **q, lf_tensor **scale, const lf_tensor *x)
{
    lf_op_arg args[] = {LF_ARG(x)};
    LF_DISPATCH(QUANTIZE_FP8_1X128, args, q, quantize_impl("lf_quantize_fp8_1x128", q, scale, x, LF_SCALE_1X128, 0));
}

lf_status lf_quantize_fp8_128x128(lf_tensor **q, lf_tensor **scale, const lf_tensor *w)
{
    lf_op_arg args[] = {LF_ARG(w)};
    LF_DISPATCH(QUANTIZE_FP8_128X128, args, q,
                quantize_impl("lf_quantize_fp8_128x128", q, scale, w, LF_SCALE_128X128, 0));
}

lf_status lf_fp8_supported(lf_device dev)
{
    /* Asked with a probe the size of one tile (128 tokens, 64 -> 2 x 128), never launched: each
     * backend's answer depends on the device, and on the shape only through rules the probe meets. */
    static _Alignas(256) unsigned char a[128 * 64], b[64 * 256], d[128 * 128 * 2];
    static _Alignas(256) float sa[128], sb[256];
    lf_gemm g = {.ep = lf_epilogue_default()};
    g.a = (lf_matrix){a, LF_DTYPE_F8E4M3, 128, 64, 64, 1};
    g.b = (lf_matrix){b, LF_DTYPE_F8E4M3, 64, 256, 1, 64}; /* a (256, 64) weight seen transposed */
    g.d = (lf_matrix){d, LF_DTYPE_BF16, 128, 128, 128, 1};
    g.ep.a_scale = sa, g.ep.b_scale = sb;
    g.ep.act = LF_ACT_SILU, g.ep.gate = LF_GATE_PAIRED, g.ep.gate_group = 128;
    return lf_backend_gemm_supported(dev, &g);
}

/* Whether t is the row-wise scale of n rows ((n, 1) or (n)): 0; block scales of the shape given: 1;
 * else -1. f32 and contiguous either way. */
static int scale_form(const lf_tensor *t, int64_t n, const int64_t blocks[2])
{
    if (t->dtype != LF_DTYPE_F32 || !lf_tensor_is_contiguous(t) || t->ndim > 2)
        return -1;
    if (t->ndim == 2 && t->shape[0] == blocks[0] && t->shape[1] == blocks[1])
        return 1;
    return lf_tensor_numel(t) == n && (t->ndim < 2 || t->shape[1] == 1) ? 0 : -1;
}

/* a (M, K) and b (K, N) f8e4m3 with their scales on one device: both row-wise ((M, 1) and (N, 1),
 * or 1-D), or blockwise (a in 1 x 128 blocks, b's transpose, the weight, in 128 x 128 ones);
 * *block says which (0 or 1). */
static lf_status check_scaled(const char *fn, const lf_tensor *a, const lf_tensor *as, const lf_tensor *b,
                              const lf_tensor *bs, int *block)
{
    char x[LF_SHAPE_STR_CAP], y[LF_SHAPE_STR_CAP];
    LF_TRY(lf_check_stored(fn, "mat1", a));
    LF_TRY(lf_check_stored(fn, "mat2", b));
    if (a->ndim != 2 || b->ndim != 2)
        return lf_fail(LF_ESHAPE, "%s: mat1 %s and mat2 %s must both have 2 dims", fn,
                       lf_fmt_shape(x, sizeof x, a->ndim, a->shape), lf_fmt_shape(y, sizeof y, b->ndim, b->shape));
    LF_TRY(lf_check_tensor(fn, "scale_a", as));
    LF_TRY(lf_check_tensor(fn, "scale_b", bs));
    if (a->dtype != LF_DTYPE_F8E4M3 || b->dtype != LF_DTYPE_F8E4M3)
        return lf_fail(LF_EDTYPE, "%s: mat1 is %s and mat2 %s; a scaled GEMM takes f8e4m3 (lf_quantize_fp8)", fn,
                       lf_dtype_name(a->dtype), lf_dtype_name(b->dtype));
    if (a->shape[1] != b->shape[0])
        return lf_fail(LF_ESHAPE, "%s: mat1 %s and mat2 %s cannot be multiplied (%lld != %lld)", fn,
                       lf_fmt_shape(x, sizeof x, 2, a->shape), lf_fmt_shape(y, sizeof y, 2, b->shape),
                       (long long)a->shape[1], (long long)b->shape[0]);
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    int64_t ab[2], bb[2];
    lf_scale_shape(LF_SCALE_1X128, M, K, ab);
    lf_scale_shape(LF_SCALE_128X128, N, K, bb);
    const int fa = scale_form(as, M, ab), fb = scale_form(bs, N, bb);
    if (fa < 0 || fb < 0 || fa != fb) {
        const int bad_a = fa < 0 || (fb >= 0 && fa != fb);
        const lf_tensor *t = bad_a ? as : bs;
        const int64_t *blk = bad_a ? ab : bb;
        return lf_fail(LF_ESHAPE,
                       "%s: %s is %s %s; expected contiguous f32 (%lld, 1), one per %s, or (%lld, %lld), its %s "
                       "blocks, the same form for both scales",
                       fn, bad_a ? "scale_a" : "scale_b", lf_dtype_name(t->dtype),
                       lf_fmt_shape(x, sizeof x, t->ndim, t->shape), (long long)(bad_a ? M : N),
                       bad_a ? "row of mat1" : "column of mat2", (long long)blk[0], (long long)blk[1],
                       bad_a ? "1 x 128" : "128 x 128");
    }
    *block = fa;
    if (lf_tensor_device(a) != lf_tensor_device(b) || lf_tensor_device(a) != lf_tensor_device(as) ||
        lf_tensor_device(a) != lf_tensor_device(bs))
        return lf_fail(LF_EDEVICE, "%s: the operands and their scales must be on one device", fn);
    return LF_OK;
}

/* A new (M, n) tensor of dtype dt on a's device. */
static lf_status new_out(lf_tensor **y, const lf_tensor *a, int64_t n, lf_dtype dt)
{
    return lf_tensor_empty(y, dt, 2, (int64_t[]){a->shape[0], n}, lf_tensor_device(a));
}

static lf_gemm scaled_gemm(const lf_tensor *a, const lf_tensor *as, const lf_tensor *b, const lf_tensor *bs, int block,
                           const lf_tensor *y)
{
    lf_gemm g = {.ep = lf_epilogue_default()};
    g.a = lf_matrix_of(a);
    g.b = lf_matrix_of(b);
    g.d = lf_matrix_of(y);
    g.ep.a_scale = lf_tensor_data(as);
    g.ep.b_scale = lf_tensor_data(bs);
    g.ep.blockwise = block;
    return g;
}

static lf_status scaled_mm_impl(lf_tensor **out, const lf_tensor *a, const lf_tensor *as, const lf_tensor *b,
                                const lf_tensor *bs, lf_dtype out_dtype)
{
    LF_CHECK_PTR(out, "lf_scaled_mm", "out");
    *out = NULL;
    int block;
    LF_TRY(check_scaled("lf_scaled_mm", a, as, b, bs, &block));
    if (!lf_dtype_computes(out_dtype))
        return lf_fail(LF_EDTYPE, "lf_scaled_mm: out_dtype must be bf16, f16 or f32");
    lf_tensor *y;
    LF_TRY(new_out(&y, a, b->shape[1], out_dtype));
    lf_gemm g = scaled_gemm(a, as, b, bs, block, y);
    lf_status s = lf_launch_gemm(lf_tensor_device(a), &g);
    if (s != LF_OK) {
        lf_tensor_free(y);
        return s;
    }
    *out = y;
    return LF_OK;
}

lf_status lf_scaled_mm(lf_tensor **out, const lf_tensor *a, const lf_tensor *a_scale, const lf_tensor *b,
                       const lf_tensor *b_scale, lf_dtype out_dtype)
{
    lf_op_arg args[] = {LF_ARG(a), LF_ARG(b), LF_ARG(a_scale), LF_ARG(b_scale), LF_ARG_SCALAR(out_dtype)};
    LF_DISPATCH(SCALED_MM, args, out, scaled_mm_impl(out, a, a_scale, b, b_scale, out_dtype));
}

static lf_status scaled_mm_out_impl(lf_tensor *out, const lf_tensor *a, const lf_tensor *as, const lf_tensor *b,
                                    const lf_tensor *bs)
{
    char x[LF_SHAPE_STR_CAP];
    LF_TRY(lf_check_tensor("lf_scaled_mm_out", "out", out));
    int block;
    LF_TRY(check_scaled("lf_scaled_mm_out", a, as, b, bs, &block));
    if (!lf_dtype_computes(out->dtype))
        return lf_fail(LF_EDTYPE, "lf_scaled_mm_out: out is %s; it must be bf16, f16 or f32",
                       lf_dtype_name(out->dtype));
    if (out->ndim != 2 || out->shape[0] != a->shape[0] || out->shape[1] != b->shape[1])
        return lf_fail(LF_ESHAPE, "lf_scaled_mm_out: out is %s, the result is [%lld, %lld]",
                       lf_fmt_shape(x, sizeof x, out->ndim, out->shape), (long long)a->shape[0],
                       (long long)b->shape[1]);
    if (lf_tensor_device(out) != lf_tensor_device(a) || lf_tensor_device_index(out) != lf_tensor_device_index(a))
        return lf_fail(LF_EDEVICE, "lf_scaled_mm_out: out and mat1 are on different devices");
    lf_gemm g = scaled_gemm(a, as, b, bs, block, out);
    return lf_launch_gemm(lf_tensor_device(a), &g);
}

lf_status lf_scaled_mm_out(lf_tensor *out, const lf_tensor *a, const lf_tensor *a_scale, const lf_tensor *b,
                           const lf_tensor *b_scale)
{
    lf_op_arg args[] = {LF_ARG(a), LF_ARG(b), LF_ARG(a_scale), LF_ARG(b_scale), LF_ARG(out)};
    lf_tensor **none = NULL; /* the result is out itself */
    LF_DISPATCH(SCALED_MM, args, none, scaled_mm_out_impl(out, a, a_scale, b, b_scale));
}

/* The scaled gated GEMM where the device has no kernel for it (an FP8 GPU that is not Hopper, a
 * gate_group the kernel cannot tile): one scaled GEMM over all 2H columns, then act(g) * u in
 * one pass over column-group views of it. The trace shows why, as a note. */
static lf_status scaled_gated_fallback(lf_tensor *y, const lf_tensor *a, const lf_tensor *as, const lf_tensor *b,
                                       const lf_tensor *bs, lf_act act, int64_t group)
{
    char why[320];
    snprintf(why, sizeof why, "lf::scaled_mm_gated fallback (%s)", lf_last_error());
    lf_ops_note_begin(why);
    lf_tensor *p = NULL;
    lf_status s = lf_scaled_mm(&p, a, as, b, bs, y->dtype);
    if (s == LF_OK)
        s = lf_gate_pairs(y, p, act, group);
    lf_tensor_free(p);
    lf_ops_note_end();
    return s;
}

/* check_scaled, and the gate: a known activation, b's columns whole blocks of 2 x group. */
static lf_status check_gated(const char *fn, const lf_tensor *a, const lf_tensor *as, const lf_tensor *b,
                             const lf_tensor *bs, lf_act act, int64_t group, int *block)
{
    LF_TRY(check_scaled(fn, a, as, b, bs, block));
    if ((unsigned)act >= LF_ACT_COUNT)
        return lf_fail(LF_EINVAL, "%s: activation %d is not one of none, relu, gelu_tanh, gelu_erf, silu", fn,
                       (int)act);
    if (group < 1 || group > b->shape[1] / 2 || b->shape[1] % (2 * group)) /* 2 x group may not fit */
        return lf_fail(LF_ESHAPE, "%s: mat2 has %lld columns, expected whole blocks of 2 x group (group %lld)", fn,
                       (long long)b->shape[1], (long long)group);
    return LF_OK;
}

static lf_status scaled_mm_gated_impl(lf_tensor **out, const lf_tensor *a, const lf_tensor *as, const lf_tensor *b,
                                      const lf_tensor *bs, lf_act act, int64_t group)
{
    static const char fn[] = "lf_scaled_mm_gated";
    LF_CHECK_PTR(out, fn, "out");
    *out = NULL;
    int block;
    LF_TRY(check_gated(fn, a, as, b, bs, act, group, &block));
    lf_tensor *y;
    LF_TRY(new_out(&y, a, b->shape[1] / 2, LF_DTYPE_BF16));
    lf_gemm g = scaled_gemm(a, as, b, bs, block, y);
    g.ep.act = act;
    g.ep.gate = LF_GATE_PAIRED;
    g.ep.gate_group = group;
    const lf_device dev = lf_tensor_device(a);
    lf_status s = lf_backend_gemm_supported(dev, &g);
    if (s == LF_OK) {
        s = lf_launch_gemm(dev, &g);
    } else if (s == LF_EUNSUPPORTED) { /* the plain scaled GEMM may still run here */
        char why[256];
        snprintf(why, sizeof why, "%s", lf_last_error());
        lf_gemm plain = g; /* only asked about, never launched: its d is y's pointer as (M, 2H) */
        plain.ep.act = LF_ACT_NONE, plain.ep.gate = LF_GATE_NONE, plain.ep.gate_group = 1;
        plain.d.cols = plain.d.rs = b->shape[1];
        if (lf_backend_gemm_supported(dev, &plain) == LF_OK)
            s = scaled_gated_fallback(y, a, as, b, bs, act, group);
        else
            s = lf_fail(LF_EUNSUPPORTED, "%s: %s", fn, why);
    }
    if (s != LF_OK) {
        lf_tensor_free(y);
        return s;
    }
    *out = y;
    return LF_OK;
}

lf_status lf_scaled_mm_gated(lf_tensor **out, const lf_tensor *a, const lf_tensor *a_scale, const lf_tensor *b,
                             const lf_tensor *b_scale, lf_act act, int64_t group)
{
    lf_op_arg args[] = {LF_ARG(a),       LF_ARG(b),          LF_ARG(a_scale),
                        LF_ARG(b_scale), LF_ARG_SCALAR(act), LF_ARG_SCALAR((double)group)};
    LF_DISPATCH(SCALED_MM_GATED, args, out, scaled_mm_gated_impl(out, a, a_scale, b, b_scale, act, group));
}

static lf_status scaled_mm_gated_fp8_impl(lf_tensor **h, lf_tensor **h_scale, const lf_tensor *a, const lf_tensor *as,
                                          const lf_tensor *b, const lf_tensor *bs, lf_act act, int64_t group)
{
    static const char fn[] = "lf_scaled_mm_gated_fp8";
    LF_CHECK_PTR(h, fn, "h");
    LF_CHECK_PTR(h_scale, fn, "h_scale");
    *h = NULL, *h_scale = NULL;
    int block;
    LF_TRY(check_gated(fn, a, as, b, bs, act, group, &block));
    const int64_t M = a->shape[0], H = b->shape[1] / 2;
    const lf_device dev = lf_tensor_device(a);
    int64_t hs_shape[2];
    lf_scale_shape(LF_SCALE_1X128, M, H, hs_shape);
    lf_tensor *q = NULL, *qs = NULL;
    lf_status s = new_out(&q, a, H, LF_DTYPE_F8E4M3);
    if (s == LF_OK)
        s = lf_tensor_empty(&qs, LF_DTYPE_F32, 2, hs_shape, dev);
    if (s != LF_OK) {
        lf_tensor_free(q);
        return s;
    }
    lf_gemm g = scaled_gemm(a, as, b, bs, block, q);
    g.ep.act = act;
    g.ep.gate = LF_GATE_PAIRED;
    g.ep.gate_group = group;
    g.ep.d_scale = lf_tensor_data(qs);
    s = lf_backend_gemm_supported(dev, &g);
    if (s == LF_OK) {
        s = lf_launch_gemm(dev, &g);
    } else if (s == LF_EUNSUPPORTED) { /* the gated GEMM in bf16 h, then h quantized: two kernels */
        char why[320];
        snprintf(why, sizeof why, "lf::scaled_mm_gated_fp8 fallback (%s)", lf_last_error());
        lf_tensor_free(q), lf_tensor_free(qs);
        q = qs = NULL;
        lf_ops_note_begin(why);
        lf_tensor *hb = NULL;
        s = lf_scaled_mm_gated(&hb, a, as, b, bs, act, group);
        if (s == LF_OK)
            s = lf_quantize_fp8_1x128(&q, &qs, hb);
        lf_tensor_free(hb);
        lf_ops_note_end();
    }
    if (s != LF_OK) {
        lf_tensor_free(q), lf_tensor_free(qs);
        return s;
    }
    *h = q, *h_scale = qs;
    return LF_OK;
}

lf_status lf_scaled_mm_gated_fp8(lf_tensor **h, lf_tensor **h_scale, const lf_tensor *a, const lf_tensor *a_scale,
                                 const lf_tensor *b, const lf_tensor *b_scale, lf_act act, int64_t group)
{
    lf_op_arg args[] = {LF_ARG(a),       LF_ARG(b),          LF_ARG(a_scale),
                        LF_ARG(b_scale), LF_ARG_SCALAR(act), LF_ARG_SCALAR((double)group)};
    LF_DISPATCH(SCALED_MM_GATED_FP8, args, h, scaled_mm_gated_fp8_impl(h, h_scale, a, a_scale, b, b_scale, act, group));
}
