// The FP8 quantizers' rules on the GPU, shared by the quantization kernels (quant.cu) and the
// gated kernel's FP8-out epilogue, so that every path writes the CPU's bytes: the scale of a span
// whose largest magnitude is amax is lf_fp8_scale_of's (amax / 448 rounded to nearest, 1 for a span
// of zeros, at least 2^-126), and a code is the product of a value and the scale's reciprocal,
// each rounded to nearest, converted by the hardware (nearest even, saturating). Layer: backend/cuda.
#ifndef LF_BACKEND_CUDA_FP8_CUH
#define LF_BACKEND_CUDA_FP8_CUH

#include <cuda_fp8.h>

namespace lf {

__device__ __forceinline__ float fp8_scale(float amax)
{
    const float s = __fdiv_rn(amax, 448.f);
    return amax == 0.f ? 1.f : s < 0x1p-126f ? 0x1p-126f : s;
}

// Two values times inv (the scale's reciprocal, __frcp_rn), as two e4m3 codes, x in the low byte.
__device__ __forceinline__ unsigned short fp8_codes(float x, float y, float inv)
{
    return __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(x, inv), __fmul_rn(y, inv)), __NV_SATFINITE, __NV_E4M3);
}

} // namespace lf

#endif
