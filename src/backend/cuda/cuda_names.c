/* The CUDA backend's kernel names. cuBLASLt's GEMMs as lf_cublaslt_gemm_<dtype>_<layout and
 * epilogue> (CUPTI then reports cuBLAS's own kernel under it), the pointwise kernels as
 * lf_cuda_<op>_<dtype>[_strided], and the hand-written kernels by their own C++ names, so the
 * name in a trace is the symbol in the binary: lf::gated::gated_gemm_<dtype>_<act>_<tile>[_pingpong|
 * _offload|_to_f8e4m3], lf::gemv::gated_gemv_<dtype>_<act>, lf::gemv_tma::[gated_]gemv_<dtype>[_<act>]_<tile>[_bias],
 * lf_cuda_quantize_fp8_<dtype>_<mode>.
 * Layer: backend/cuda. */
#include <stdio.h>

#include "backend/cuda/cuda_impl.h"

void lf_cuda_kernel_namer(const lf_kernel_key *k, char *buf, size_t cap)
{
    char sfx[64];
    const char *dt = lf_dtype_name((lf_dtype)k->dtype), *act = lf_act_name((lf_act)k->act);
    switch ((lf_cuda_family)k->family) {
    case LF_CUDA_KF_CUBLASLT:
        lf_kernel_gemm_suffix(k, sfx, sizeof sfx);
        snprintf(buf, cap, "lf_cublaslt_gemm_%s_%s", dt, sfx);
        break;
    case LF_CUDA_KF_GATED_COOPERATIVE:
        snprintf(buf, cap, "lf::gated::gated_gemm_%s_%s_%ux%u%s", dt, act, k->tile_m, k->tile_n,
                 k->out_dtype == LF_DTYPE_F8E4M3 ? "_to_f8e4m3" : "");
        break;
    case LF_CUDA_KF_GATED_PINGPONG:
    case LF_CUDA_KF_GATED_OFFLOAD:
        snprintf(buf, cap, "lf::gated::gated_gemm_%s_%s_%ux%u_%s", dt, act, k->tile_m, k->tile_n,
                 k->family == LF_CUDA_KF_GATED_PINGPONG ? "pingpong" : "offload");
        break;
    case LF_CUDA_KF_GEMV:
        if (k->tile_m && !(k->flags & LF_KEY_GATED)) /* the Hopper ones (gemv_hopper.cu) */
            snprintf(buf, cap, "lf::gemv_tma::gemv_%s_%ux%u%s", dt, k->tile_m, k->tile_n,
                     k->flags & LF_KEY_BIAS ? "_bias" : "");
        else if (k->tile_m)
            snprintf(buf, cap, "lf::gemv_tma::gated_gemv_%s_%s_%ux%u", dt, act, k->tile_m, k->tile_n);
        else
            snprintf(buf, cap, "lf::gemv::gated_gemv_%s_%s", dt, act);
        break;
    case LF_CUDA_KF_QUANT:
        snprintf(buf, cap, "lf_cuda_quantize_fp8_%s_%s", dt,
                 k->op == LF_SCALE_1X128     ? "1x128"
                 : k->op == LF_SCALE_128X128 ? "128x128"
                                             : "rowwise");
        break;
    case LF_CUDA_KF_POINTWISE:
    default: {
        const int is_act = k->op == LF_PW_ACT || k->op == LF_PW_ACT_MUL;
        char conv[16] = "";
        if (k->dtype != k->out_dtype)
            snprintf(conv, sizeof conv, "%s_to_", dt);
        snprintf(buf, cap, "lf_cuda_%s%s_%s%s%s", is_act ? act : lf_kernel_pw_op_name(k->op),
                 k->op == LF_PW_ACT_MUL ? "_mul" : "", conv, lf_dtype_name((lf_dtype)k->out_dtype),
                 k->flags & LF_KEY_STRIDED ? "_strided" : "");
        break;
    }
    }
}
