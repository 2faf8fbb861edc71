/* AVX2 kernel set: a 6x16 micro-kernel (12 ymm accumulators, two B vectors, one broadcast:
 * 15 of 16 registers). Compiled with -mavx2 -mfma -mf16c, called only when cpuid has them.
 * Layer: backend/cpu. */
#include <immintrin.h>

#define LF_KSUF avx2
#include "backend/cpu/kernels_tmpl.h"
#include "backend/cpu/pack_avx.h"

#define MR 6
#define NR 16

static void ukr_6x16(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c, int accumulate)
{
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
        c0[i] = c1[i] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            __m256 ai = _mm256_broadcast_ss(a + i);
            c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
        }
        a += MR;
        b += NR;
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        float *ci = c + i * NR;
        if (accumulate) {
            c0[i] = _mm256_add_ps(c0[i], _mm256_load_ps(ci));
            c1[i] = _mm256_add_ps(c1[i], _mm256_load_ps(ci + 8));
        }
        _mm256_store_ps(ci, c0[i]);
        _mm256_store_ps(ci + 8, c1[i]);
    }
}

LF_KERNEL_SET(LF_CPU_ISA_AVX2, MR, NR, ukr_6x16, pack_cols_avx2);
