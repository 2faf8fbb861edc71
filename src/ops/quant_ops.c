/* FP8 quantization of weights: the op the FP8 GEMM's weights come from. Weights are quantized
 * once, when a model is loaded, so the op computes on the host whatever the tensor's device (a
 * GPU tensor is read back and its results placed beside it) and is refused inside compile's
 * capture, whose plans replay device launches only. Layer: ops/. */
#include <math.h>
#include <stdlib.h>

#include "ops/dispatch.h"

static lf_status quantize_impl(lf_tensor **q, lf_tensor **scale, const lf_tensor *w)
{
    static const char fn[] = "lf_quantize_fp8";
    LF_CHECK_PTR(q, fn, "q");
    LF_CHECK_PTR(scale, fn, "scale");
    *q = NULL, *scale = NULL;
    LF_TRY(lf_check_ndim(fn, "w", w, 2));
    if (lf_capture_tls)
        return lf_fail(LF_EUNSUPPORTED,
                       "%s: not inside compile's capture (a plan replays device launches, and "
                       "this runs on the host): quantize the weights once, before compiling",
                       fn);
    const int64_t R = w->shape[0], C = w->shape[1];
    const lf_device dev = lf_tensor_device(w);
    float *f = malloc((size_t)(R * C) * sizeof *f);
    lf_tensor *hq = NULL, *hs = NULL;
    lf_status s = f ? lf_tensor_to_f32(w, f, R * C) : lf_fail(LF_ENOMEM, "%s: out of host memory", fn);
    if (s == LF_OK)
        s = lf_tensor_empty(&hq, LF_DTYPE_F8E4M3, 2, w->shape, LF_DEVICE_CPU);
    if (s == LF_OK)
        s = lf_tensor_empty(&hs, LF_DTYPE_F32, 2, (int64_t[]){R, 1}, LF_DEVICE_CPU);
    for (int64_t r = 0; r < R && s == LF_OK; r++) {
        const float *row = f + r * C;
        float amax = 0;
        for (int64_t c = 0; c < C; c++) {
            if (!isfinite(row[c])) {
                s = lf_fail(LF_EINVAL, "%s: w[%lld, %lld] is %g; a weight to quantize must be finite", fn, (long long)r,
                            (long long)c, (double)row[c]);
                break;
            }
            amax = fabsf(row[c]) > amax ? fabsf(row[c]) : amax;
        }
        /* the row's largest magnitude lands on E4M3's largest value; an all-zero row keeps scale 1 */
        const float sc = amax > 0 ? amax / 448.f : 1.f;
        ((float *)lf_tensor_data(hs))[r] = sc;
        uint8_t *out = (uint8_t *)lf_tensor_data(hq) + r * C;
        for (int64_t c = 0; c < C && s == LF_OK; c++)
            out[c] = lf_f8e4m3_from_f32(row[c] / sc);
    }
    free(f);
    if (s == LF_OK && dev != LF_DEVICE_CPU) { /* beside w */
        s = lf_tensor_to_device(q, hq, dev);
        if (s == LF_OK)
            s = lf_tensor_to_device(scale, hs, dev);
        lf_tensor_free(hq), lf_tensor_free(hs);
        hq = hs = NULL;
    } else if (s == LF_OK) {
        *q = hq, *scale = hs;
        hq = hs = NULL;
    }
    lf_tensor_free(hq), lf_tensor_free(hs);
    if (s != LF_OK) {
        lf_tensor_free(*q), lf_tensor_free(*scale);
        *q = NULL, *scale = NULL;
    }
    return s;
}

lf_status lf_quantize_fp8(lf_tensor **q, lf_tensor **scale, const lf_tensor *w)
{
    lf_op_arg args[] = {LF_ARG(w)};
    LF_DISPATCH(QUANTIZE_FP8, args, q, quantize_impl(q, scale, w));
}
