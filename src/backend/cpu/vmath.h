/* Branch-free float math that compilers vectorize: exp, and the activations built on it. Each
 * instruction-set file includes this, so the same source becomes AVX-512, AVX2 or scalar code.
 * Why hand-written: libm's expf/tanhf/erff are scalar calls, which would make the GEMM epilogue
 * cost more than the GEMM. Accuracy: about 2 ulp for exp; gelu within 1e-6 relative (tested
 * against float64 libm in tests/test_backend_cpu.c). Layer: backend/cpu. */
#ifndef LF_VMATH_H
#define LF_VMATH_H

#include "linfuse/tensor.h" /* lf_f32_bits, lf_f32_from_bits */

/* e^x: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial (truncation
 * < 6e-9), 2^n put in the exponent bits. Inputs are clamped to [-87, 88], so the result is a
 * normal float (tiny or huge, never Inf or a denormal): callers rely on that. */
static inline float lf_vexpf(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* Round x/ln2 to nearest by adding 1.5*2^23: the integer lands in the low mantissa bits. */
    const float magic = 12582912.0f;
    float t = x * 1.44269504088896341f + magic;
    float n = t - magic;
    float r = x - n * 0.693359375f; /* ln2 split in two so n*ln2 is exact */
    r = r - n * -2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t ni = (int32_t)(lf_f32_bits(t) - 0x4B400000u);
    return p * lf_f32_from_bits((uint32_t)(ni + 127) << 23);
}

static inline float lf_vrelu(float x)
{
    return x < 0.0f ? 0.0f : x; /* NaN stays NaN, as torch.relu keeps it */
}

/* 0.5 x (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + e^(-2u)): one exp, no cancellation for
 * negative x (where 1 + tanh(u) would lose every digit). Below x = -88 the true value is under
 * 1e-37 but the clamped exp would leave x / e^88 (-0.006 at x = -1e36): -0 there. */
static inline float lf_vgelu_tanh(float x)
{
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x < -88.0f ? -0.0f : x / (1.0f + lf_vexpf(-2.0f * u));
}

/* erfc(z) for z >= 0 with the Numerical Recipes Chebyshev fit (fractional error < 1.2e-7
 * everywhere), which stays accurate in the tail where 1 + erf(x) would cancel. */
static inline float lf_verfc_pos(float z)
{
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    return t * lf_vexpf(p - z * z);
}

/* 0.5 x (1 + erf(x/sqrt2)) = 0.5 x erfc(-x/sqrt2). */
static inline float lf_vgelu_erf(float x)
{
    float z = x * 0.7071067811865476f;
    float az = z < 0.0f ? -z : z;
    float e = lf_verfc_pos(az);        /* erfc(|z|) */
    float c = z < 0.0f ? e : 2.0f - e; /* erfc(-z) */
    return 0.5f * x * c;
}

/* x sigmoid(x) = x / (1 + e^-x): one exp; for very negative x the quotient goes to -0, as it should. */
static inline float lf_vsilu(float x)
{
    return x < -88.0f ? -0.0f : x / (1.0f + lf_vexpf(-x)); /* as gelu_tanh: not x / e^88 below -88 */
}

/* bf16/f16 stores inside vector loops (the same rounding as tensor.h's, written branch-free). */
static inline uint16_t lf_vbf16(float f)
{
    uint32_t x = lf_f32_bits(f);
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x40u;
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : r);
}

#endif
