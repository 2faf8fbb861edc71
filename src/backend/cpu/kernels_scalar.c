/* Portable kernel set: a 4x8 micro-kernel in plain C (the compiler may use baseline SIMD).
 * Used on CPUs without AVX2+FMA and on non-x86 builds. Layer: backend/cpu. */
#define LF_KSUF scalar
#include "backend/cpu/kernels_tmpl.h"

#define MR 4
#define NR 8

static void ukr_4x8(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c, int accumulate)
{
    float acc[MR][NR] = {{0}};
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR)
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++)
                acc[i][j] += a[i] * b[j];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++)
            c[i * NR + j] = accumulate ? c[i * NR + j] + acc[i][j] : acc[i][j];
}

/* Column pack one element at a time (n columns, each contiguous along k). */
static void pack_cols_scalar(const void *base, lf_dtype dt, const int64_t *src, int64_t K, int n, float *dst)
{
    for (int p = 0; p < n; p++)
        for (int64_t k = 0; k < K; k++)
            dst[k * n + p] = src[p] >= 0 ? lf_load_f32(base, dt, src[p] + k) : 0.0f;
}

LF_KERNEL_SET(LF_CPU_ISA_SCALAR, MR, NR, ukr_4x8, pack_cols_scalar);
