/* AVX-512 kernel set: a 12x32 micro-kernel (24 zmm accumulators, two B vectors, one broadcast
 * A value per row: 27 of 32 registers, so nothing spills). A and B come from packed panels
 * (A: mr values per k; B: nr values per k). Compiled with -mavx512f -mfma -mf16c and
 * only called after cpuid says the CPU has them. Layer: backend/cpu. */
#include <immintrin.h>

/* gelu_tanh in AVX-512 intrinsics: the generic loop's division is the epilogue's biggest
 * cost, and AVX-512 has a 14-bit reciprocal that one Newton step brings to ~2^-28. The exp is
 * the same Taylor polynomial as vmath.h's, with roundscale and scalef for the 2^n. */
static inline __m512 gelu_tanh_512(__m512 x)
{
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    __m512 t = _mm512_mul_ps(_mm512_set1_ps(-2.0f * 0.7978845608028654f),
                             _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x)); /* -2u */
    t = _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), t);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_scalef_ps(p, n)); /* 1 + e^(-2u) */
    __m512 q = _mm512_rcp14_ps(d);
    q = _mm512_mul_ps(q, _mm512_fnmadd_ps(d, q, _mm512_set1_ps(2.0f))); /* one Newton step */
    /* below -88, -0 rather than x / e^88 (vmath.h's lf_vgelu_tanh says why) */
    const __mmask16 far = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-88.0f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(far, _mm512_mul_ps(x, q), _mm512_set1_ps(-0.0f));
}

/* y[i] = gelu_tanh(alpha * x[i] + bias[i]) (bias may be NULL), n any length. */
static void gelu_tanh_row_512(float *y, const float *x, const float *bias, float alpha, int64_t n)
{
    const __m512 va = _mm512_set1_ps(alpha);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m512 z = _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, x + i));
        if (bias)
            z = _mm512_add_ps(z, _mm512_maskz_loadu_ps(m, bias + i));
        _mm512_mask_storeu_ps(y + i, m, gelu_tanh_512(z));
    }
}
#define LF_VEC_GELU_TANH_ROW gelu_tanh_row_512
#define LF_DOTS_COLS         4 /* 32 zmm registers: four columns by four rows */

#define LF_KSUF avx512
#include "backend/cpu/kernels_tmpl.h"
#include "backend/cpu/pack_avx.h"

#define MR 12
#define NR 32

static void ukr_12x32(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c, int accumulate)
{
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
        c0[i] = c1[i] = _mm512_setzero_ps();
        /* k unrolled by 4: the loop's own uops are a share of a step of 24 FMAs that the front end
         * feels; both cache lines of B eight steps ahead asked for (one line per step reached only
         * half of them). Both measured: fused Linear 0.910 -> 0.951 of OpenBLAS, bench/RESULTS.md */
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        _mm_prefetch((const char *)(b + 8 * NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + 8 * NR + 16), _MM_HINT_T0);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
        a += MR;
        b += NR;
    }
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        float *ci = c + i * NR;
        if (accumulate) {
            c0[i] = _mm512_add_ps(c0[i], _mm512_load_ps(ci));
            c1[i] = _mm512_add_ps(c1[i], _mm512_load_ps(ci + 16));
        }
        _mm512_store_ps(ci, c0[i]);
        _mm512_store_ps(ci + 16, c1[i]);
    }
}

LF_KERNEL_SET(LF_CPU_ISA_AVX512, MR, NR, ukr_12x32, pack_cols_avx512);
