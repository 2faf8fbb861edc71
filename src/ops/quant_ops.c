/* FP8 ops: row-wise quantization (weights once, activations every forward) and the scaled GEMMs
 * that consume it, as torch._scaled_mm with row-wise scales: a plain one (the down projection)
 * and a gated one (gate and up, act(g) * u in the epilogue). Layer: ops/. */
#include <stdio.h>

#include "ops/dispatch.h"

static lf_status quantize_impl(lf_tensor **q, lf_tensor **scale, const lf_tensor *w)
{
    static const char fn[] = "lf_quantize_fp8";
    LF_CHECK_PTR(q, fn, "q");
    LF_CHECK_PTR(scale, fn, "scale");
    *q = NULL, *scale = NULL;
    LF_TRY(lf_check_ndim(fn, "w", w, 2));
    if (lf_capture_tls) /* a plan's graph holds GEMMs and pointwise kernels only */
        return lf_fail(LF_EUNSUPPORTED,
                       "%s: not inside compile's capture (a compiled plan has no quantization step): quantize "
                       "weights once, before compiling, and run the fp8 MLP eagerly",
                       fn);
    if (!lf_dtype_computes(w->dtype))
        return lf_fail(LF_EDTYPE, "%s: w is %s; expected bf16, f16 or f32", fn, lf_dtype_name(w->dtype));
    const int64_t R = w->shape[0], C = w->shape[1];
    lf_tensor *tq = NULL, *ts = NULL;
    lf_status s = lf_tensor_empty(&ts, LF_DTYPE_F32, 2, (int64_t[]){R, 1}, lf_tensor_device(w));
    if (s == LF_OK)
        s = lf_tensor_empty(&tq, LF_DTYPE_F8E4M3, 2, w->shape, lf_tensor_device(w));
    if (s == LF_OK) {
        lf_quant qu = {.rows = R, .cols = C, .in = lf_strided_of(w), .q = lf_tensor_data(tq), .scale = lf_tensor_data(ts)};
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
    LF_DISPATCH(QUANTIZE_FP8, args, q, quantize_impl(q, scale, w));
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

/* a (M, K) and b (K, N) f8e4m3 with their (M, 1) and (N, 1) (or 1-D) f32 scales, on one device. */
static lf_status check_scaled(const char *fn, const lf_tensor *a, const lf_tensor *as, const lf_tensor *b,
                              const lf_tensor *bs)
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
    const lf_tensor *sc[2] = {as, bs};
    const int64_t want[2] = {a->shape[0], b->shape[1]};
    for (int i = 0; i < 2; i++) {
        const lf_tensor *t = sc[i];
        if (t->dtype != LF_DTYPE_F32 || lf_tensor_numel(t) != want[i] || !lf_tensor_is_contiguous(t) ||
            t->ndim > 2 || (t->ndim == 2 && t->shape[1] != 1))
            return lf_fail(LF_ESHAPE, "%s: %s is %s %s; expected a contiguous f32 (%lld, 1), one per %s", fn,
                           i ? "scale_b" : "scale_a", lf_dtype_name(t->dtype), lf_fmt_shape(x, sizeof x, t->ndim, t->shape),
                           (long long)want[i], i ? "column of mat2" : "row of mat1");
    }
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

static lf_gemm scaled_gemm(const lf_tensor *a, const lf_tensor *as, const lf_tensor *b, const lf_tensor *bs,
                           const lf_tensor *y)
{
    lf_gemm g = {.ep = lf_epilogue_default()};
    g.a = lf_matrix_of(a);
    g.b = lf_matrix_of(b);
    g.d = lf_matrix_of(y);
    g.ep.a_scale = lf_tensor_data(as);
    g.ep.b_scale = lf_tensor_data(bs);
    return g;
}

static lf_status scaled_mm_impl(lf_tensor **out, const lf_tensor *a, const lf_tensor *as, const lf_tensor *b,
                                const lf_tensor *bs, lf_dtype out_dtype)
{
    LF_CHECK_PTR(out, "lf_scaled_mm", "out");
    *out = NULL;
    LF_TRY(check_scaled("lf_scaled_mm", a, as, b, bs));
    if (!lf_dtype_computes(out_dtype))
        return lf_fail(LF_EDTYPE, "lf_scaled_mm: out_dtype must be bf16, f16 or f32");
    lf_tensor *y;
    LF_TRY(new_out(&y, a, b->shape[1], out_dtype));
    lf_gemm g = scaled_gemm(a, as, b, bs, y);
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

static lf_status scaled_mm_gated_impl(lf_tensor **out, const lf_tensor *a, const lf_tensor *as, const lf_tensor *b,
                                      const lf_tensor *bs, lf_act act, int64_t group)
{
    static const char fn[] = "lf_scaled_mm_gated";
    LF_CHECK_PTR(out, fn, "out");
    *out = NULL;
    LF_TRY(check_scaled(fn, a, as, b, bs));
    if ((unsigned)act >= LF_ACT_COUNT)
        return lf_fail(LF_EINVAL, "%s: activation %d is not one of none, relu, gelu_tanh, gelu_erf, silu", fn, (int)act);
    if (group < 1 || b->shape[1] % (2 * group))
        return lf_fail(LF_ESHAPE, "%s: mat2 has %lld columns, expected whole blocks of 2 x group = %lld", fn,
                       (long long)b->shape[1], (long long)(2 * (group > 0 ? group : 0)));
    lf_tensor *y;
    LF_TRY(new_out(&y, a, b->shape[1] / 2, LF_DTYPE_BF16));
    lf_gemm g = scaled_gemm(a, as, b, bs, y);
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
    lf_op_arg args[] = {LF_ARG(a), LF_ARG(b), LF_ARG(a_scale), LF_ARG(b_scale), LF_ARG_SCALAR(act),
                        LF_ARG_SCALAR((double)group)};
    LF_DISPATCH(SCALED_MM_GATED, args, out, scaled_mm_gated_impl(out, a, a_scale, b, b_scale, act, group));
}
