/* Row-wise FP8 quantization on the CPU (lf_quant): the row's largest magnitude, then every
 * element times the reciprocal of the row's scale (both rounded to nearest) and rounded to e4m3 by lf_f8e4m3_from_f32 (c10's own
 * conversion). A non-finite input is an error here, where it can be reported: weights are
 * quantized on the host once, at load. Layer: backend/cpu. */
#include <math.h>

#include "backend/cpu/cpu_impl.h"

lf_status lf_cpu_quantize_fp8(const lf_quant *q, lf_kernel_info *info)
{
    const int64_t R = q->rows, C = q->cols, rs = q->in.stride[0], cs = q->in.stride[1];
    for (int64_t r = 0; r < R; r++) {
        float amax = 0;
        for (int64_t c = 0; c < C; c++) {
            const float v = lf_load_f32(q->in.data, q->in.dtype, r * rs + c * cs);
            if (!isfinite(v))
                return lf_fail(LF_EINVAL, "lf_quantize_fp8: element [%lld, %lld] is %g; a tensor to quantize must be finite",
                               (long long)r, (long long)c, (double)v);
            amax = fabsf(v) > amax ? fabsf(v) : amax;
        }
        /* the row's largest magnitude lands on E4M3's largest value; a row of zeros keeps scale 1, and
         * a scale stays normal (>= 2^-126) so that its reciprocal is finite */
        const float s0 = amax / 448.f, sc = amax == 0.f ? 1.f : s0 < 0x1p-126f ? 0x1p-126f : s0;
        q->scale[r] = sc;
        const float inv = 1.f / sc; /* a multiply per element, as the GPU's (a divide costs it 20 instructions) */
        uint8_t *out = q->q + r * C;
        for (int64_t c = 0; c < C; c++)
            out[c] = lf_f8e4m3_from_f32(lf_load_f32(q->in.data, q->in.dtype, r * rs + c * cs) * inv);
    }
    if (info)
        lf_quant_report(q, LF_KF_CPU_QUANT, info);
    return LF_OK;
}
