/* The CPU backend's kernel names: lf_cpu_gemm_<dtype>_<mr>x<nr>_<layout and epilogue>,
 * lf_cpu_<op>_<dtype>[_strided], lf_cpu_quantize_fp8_<dtype>_<rowwise|1x128|128x128>. The tile
 * in a GEMM's name is its micro-kernel's, so kernels of two instruction sets differ by name.
 * Layer: backend/cpu. */
#include <stdio.h>

#include "backend/cpu/cpu_impl.h"

void lf_cpu_kernel_namer(const lf_kernel_key *k, char *buf, size_t cap)
{
    char sfx[64];
    const char *dt = lf_dtype_name((lf_dtype)k->dtype);
    switch ((lf_cpu_family)k->family) {
    case LF_CPU_KF_GEMM:
        lf_kernel_gemm_suffix(k, sfx, sizeof sfx);
        snprintf(buf, cap, "lf_cpu_gemm_%s_%ux%u_%s", dt, k->tile_m, k->tile_n, sfx);
        break;
    case LF_CPU_KF_QUANT:
        snprintf(buf, cap, "lf_cpu_quantize_fp8_%s_%s", dt,
                 k->op == LF_SCALE_1X128     ? "1x128"
                 : k->op == LF_SCALE_128X128 ? "128x128"
                                             : "rowwise");
        break;
    case LF_CPU_KF_POINTWISE:
    default: {
        const int act = k->op == LF_PW_ACT || k->op == LF_PW_ACT_MUL;
        char conv[16] = ""; /* a converting copy names both types: copy_f32_to_bf16 */
        if (k->dtype != k->out_dtype)
            snprintf(conv, sizeof conv, "%s_to_", dt);
        snprintf(buf, cap, "lf_cpu_%s%s_%s%s%s", act ? lf_act_name((lf_act)k->act) : lf_kernel_pw_op_name(k->op),
                 k->op == LF_PW_ACT_MUL ? "_mul" : "", conv, lf_dtype_name((lf_dtype)k->out_dtype),
                 k->flags & LF_KEY_STRIDED ? "_strided" : "");
        break;
    }
    }
}
