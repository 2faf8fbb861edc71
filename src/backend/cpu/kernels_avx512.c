/* AVX-512 kernel set: a 12x32 micro-kernel (24 zmm accumulators, two B vectors, one broadcast
 * A value per row: 27 of 32 registers, so nothing spills). A and B come from packed panels
 * (A: mr values per k; B: nr values per k). Compiled with -mavx512f -mfma -mf16c and
 * only called after cpuid says the CPU has them. Layer: backend/cpu. */
#include <immintrin.h>

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
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        _mm_prefetch((const char *)(b + 8 * NR), _MM_HINT_T0);
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
