/* FP8 quantization on the CPU (lf_quant), per row, per 1 x 128 block of a row or per 128 x 128
 * block (lf_scale_mode): the span's largest magnitude, its scale (lf_fp8_scale_of), then every
 * element times the scale's reciprocal (both rounded to nearest: a multiply per element, as the
 * GPU's, where a divide costs it some 20 instructions) rounded to e4m3 by lf_f8e4m3_from_f32 (c10's
 * own conversion). A non-finite input is an error here, where it can be reported: weights are
 * quantized on the host once, at load. Layer: backend/cpu. */
#include <math.h>

#include "backend/cpu/cpu_impl.h"

/* Rows r0..r1-1 x columns c0..c1-1 quantized with one scale, stored at *scale. */
static lf_status span(const lf_quant *q, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float *scale)
{
    const int64_t C = q->cols, rs = q->in.stride[0], cs = q->in.stride[1];
    float amax = 0;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++) {
            const float v = lf_load_f32(q->in.data, q->in.dtype, r * rs + c * cs);
            if (!isfinite(v))
                return lf_fail(LF_EINVAL,
                               "lf_quantize_fp8: element [%lld, %lld] is %g; a tensor to quantize must be finite",
                               (long long)r, (long long)c, (double)v);
            amax = fabsf(v) > amax ? fabsf(v) : amax;
        }
    const float sc = lf_fp8_scale_of(amax), inv = 1.f / sc;
    *scale = sc;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++)
            q->q[r * C + c] = lf_f8e4m3_from_f32(lf_load_f32(q->in.data, q->in.dtype, r * rs + c * cs) * inv);
    return LF_OK;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

lf_status lf_cpu_quantize_fp8(const lf_quant *q, lf_kernel_info *info)
{
    const int64_t R = q->rows, C = q->cols, B = LF_SCALE_BLOCK;
    for (int64_t i = 0, n = lf_quant_scales(q); i < n; i++) /* padding entries (rows, blocks) keep 1 */
        q->scale[i] = 1.f;
    /* the spans one scale covers: a row, 1 x 128 or 128 x 128 */
    const int64_t span_r = q->mode == LF_SCALE_128X128 ? B : 1, span_c = q->mode == LF_SCALE_ROWS ? C : B;
    for (int64_t r0 = 0; r0 < R; r0 += span_r)
        for (int64_t c0 = 0; c0 < C; c0 += span_c)
            LF_TRY(span(q, r0, min64(r0 + span_r, R), c0, min64(c0 + span_c, C),
                        &q->scale[lf_scale_index(q->mode, R, C, r0, c0)]));
    for (int64_t r = R; q->mode == LF_SCALE_ROWS && r < q->pad_rows; r++) /* padding tokens: zero codes */
        for (int64_t c = 0; c < C; c++)
            q->q[r * C + c] = 0;
    if (info)
        lf_quant_report(q, lf_cpu_kernel_namer, LF_CPU_KF_QUANT, info);
    return LF_OK;
}
