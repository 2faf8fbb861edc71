/* AVX-512 kernel set: a 12x32 micro-kernel (24 zmm accumulators, two B vectors, one broadcast
 * A value per row: 27 of 32 registers, so nothing spills). A and B come from packed panels
 * (A: mr values per k; B: nr values per k). Compiled with -mavx512f -mfma -mf16c and
 * only called after cpuid says the CPU has them. Layer: backend/cpu. */
#include <immintrin.h>
#include <stdint.h>

#include "backend/cpu/cpu_impl.h"

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
/* acc[r * ld + p] = a[r] . col[p] in bf16 (the dots contract of cpu_impl.h, a's rows K apart),
 * with VDPBF16PS: 32 bf16 products an instruction, summed in pairs into 16 f32 lanes (the products
 * are exact in f32; inputs below bf16's normal range read as zero, as AVX512_BF16 defines). A bf16
 * Linear's few rows read the weight as it is: widened to f32 first, as the f32 dots need, a decode
 * step's bf16 MLP ran at half the speed of PyTorch's oneDNN on the same cores (bench/RESULTS.md).
 * Four columns by four rows, sixteen sums; K's tail in masked loads. Compiled for AVX512_BF16
 * here alone and called only where cpuid says the CPU has it (lf_cpu_has_bf16_dots). */
#define LF_BF16_TARGET        __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define LF_BF16_LOAD(p, k, m) ((__m512bh)_mm512_maskz_loadu_epi16((m), (p) + (k)))
#define LF_BF16_MASK(K, k)    ((K) - (k) >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << ((K) - (k))) - 1u))

/* One row against four columns: four sums. Named accumulators, so they stay in registers. */
LF_BF16_TARGET static inline void dots_bf16_1x4(const uint16_t *x0, const uint16_t *const w[4], int64_t K, float out[4])
{
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t k = 0; k < K; k += 32) {
        const __mmask32 mk = LF_BF16_MASK(K, k);
        const __m512bh y = LF_BF16_LOAD(x0, k, mk);
        s0 = _mm512_dpbf16_ps(s0, y, LF_BF16_LOAD(w[0], k, mk));
        s1 = _mm512_dpbf16_ps(s1, y, LF_BF16_LOAD(w[1], k, mk));
        s2 = _mm512_dpbf16_ps(s2, y, LF_BF16_LOAD(w[2], k, mk));
        s3 = _mm512_dpbf16_ps(s3, y, LF_BF16_LOAD(w[3], k, mk));
    }
    out[0] = _mm512_reduce_add_ps(s0), out[1] = _mm512_reduce_add_ps(s1);
    out[2] = _mm512_reduce_add_ps(s2), out[3] = _mm512_reduce_add_ps(s3);
}

/* Four rows against four columns: sixteen sums (with the eight loads, 24 of 32 registers). */
LF_BF16_TARGET static inline void dots_bf16_4x4(const uint16_t *const x[4], const uint16_t *const w[4], int64_t K,
                                                float out[16])
{
    __m512 s00 = _mm512_setzero_ps(), s01 = s00, s02 = s00, s03 = s00, s10 = s00, s11 = s00, s12 = s00, s13 = s00,
           s20 = s00, s21 = s00, s22 = s00, s23 = s00, s30 = s00, s31 = s00, s32 = s00, s33 = s00;
    for (int64_t k = 0; k < K; k += 32) {
        const __mmask32 mk = LF_BF16_MASK(K, k);
        const __m512bh u0 = LF_BF16_LOAD(w[0], k, mk), u1 = LF_BF16_LOAD(w[1], k, mk), u2 = LF_BF16_LOAD(w[2], k, mk),
                       u3 = LF_BF16_LOAD(w[3], k, mk);
        __m512bh y = LF_BF16_LOAD(x[0], k, mk);
        s00 = _mm512_dpbf16_ps(s00, y, u0), s01 = _mm512_dpbf16_ps(s01, y, u1);
        s02 = _mm512_dpbf16_ps(s02, y, u2), s03 = _mm512_dpbf16_ps(s03, y, u3);
        y = LF_BF16_LOAD(x[1], k, mk);
        s10 = _mm512_dpbf16_ps(s10, y, u0), s11 = _mm512_dpbf16_ps(s11, y, u1);
        s12 = _mm512_dpbf16_ps(s12, y, u2), s13 = _mm512_dpbf16_ps(s13, y, u3);
        y = LF_BF16_LOAD(x[2], k, mk);
        s20 = _mm512_dpbf16_ps(s20, y, u0), s21 = _mm512_dpbf16_ps(s21, y, u1);
        s22 = _mm512_dpbf16_ps(s22, y, u2), s23 = _mm512_dpbf16_ps(s23, y, u3);
        y = LF_BF16_LOAD(x[3], k, mk);
        s30 = _mm512_dpbf16_ps(s30, y, u0), s31 = _mm512_dpbf16_ps(s31, y, u1);
        s32 = _mm512_dpbf16_ps(s32, y, u2), s33 = _mm512_dpbf16_ps(s33, y, u3);
    }
    const __m512 all[16] = {s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, s31, s32, s33};
    for (int i = 0; i < 16; i++)
        out[i] = _mm512_reduce_add_ps(all[i]);
}

/* acc[r * ld + p] = a[r] . col[p] in bf16 (the dots contract of cpu_impl.h, a's rows K apart),
 * with VDPBF16PS: 32 bf16 products an instruction, summed in pairs into 16 f32 lanes (the products
 * are exact in f32; inputs below bf16's normal range read as zero, as AVX512_BF16 defines). A bf16
 * Linear's few rows read the weight as it is: widened to f32 first, as the f32 dots need, a decode
 * step's bf16 MLP ran at half the speed of PyTorch's oneDNN on the same cores (bench/RESULTS.md).
 * Four columns by four rows, or by one row; K's tail in masked loads. Compiled for AVX512_BF16
 * here alone and called only where cpuid says the CPU has it (lf_cpu_has_bf16_dots). */
LF_BF16_TARGET static void dots_bf16_avx512(const uint16_t *a, int64_t m, int64_t K, const uint16_t *const *col, int n,
                                            float *acc, int64_t ld)
{
    for (int p0 = 0; p0 < n; p0 += 4) {
        const int q = n - p0 < 4 ? n - p0 : 4;
        const uint16_t *c[4] = {NULL, NULL, NULL, NULL}, *any = NULL;
        for (int j = 0; j < q; j++)
            if ((c[j] = col[p0 + j]) && !any)
                any = c[j];
        if (!any) {
            lf_dots_zero_block(acc, ld, m, p0, q);
            continue;
        }
        /* a missing column reads another's values; its sums are stored as zeros */
        const uint16_t *const w[4] = {c[0] ? c[0] : any, c[1] ? c[1] : any, c[2] ? c[2] : any, c[3] ? c[3] : any};
        for (int64_t r0 = 0; r0 < m; r0 += 4) {
            const int64_t nr4 = m - r0 < 4 ? m - r0 : 4;
            float s[16];
            if (nr4 == 1) { /* one row (a decode step's token): four sums, not sixteen */
                dots_bf16_1x4(a + r0 * K, w, K, s);
            } else { /* rows past m read the last real row again; their sums are not stored */
                const uint16_t *const x[4] = {a + r0 * K, a + (r0 + 1) * K, a + (r0 + (nr4 > 2 ? 2 : 1)) * K,
                                              a + (r0 + nr4 - 1) * K};
                dots_bf16_4x4(x, w, K, s);
            }
            for (int64_t i = 0; i < nr4; i++)
                for (int j = 0; j < q; j++)
                    acc[(r0 + i) * ld + p0 + j] = c[j] ? s[i * 4 + j] : 0.0f;
        }
    }
}

#define LF_VEC_GELU_TANH_ROW gelu_tanh_row_512
#define LF_DOTS_COLS         4 /* 32 zmm registers: four columns by four rows */
#define LF_DOTS_BF16         dots_bf16_avx512
#define LF_UKR_BF16          ukr_bf16_12x32
#define LF_PACK_PAIRS        pack_pairs_avx512

#define LF_KSUF avx512
#include "backend/cpu/kernels_tmpl.h"
#include "backend/cpu/pack_avx.h"

#define MR 12
#define NR 32

/* A 12 x 32 tile's sums (c0: columns 0-15, c1: 16-31 of each row) out to c, added to what c
 * holds where accumulate: both micro-kernels' last step. Inlined, so the sums stay registers. */
static inline __attribute__((always_inline)) void store_12x32(__m512 c0[MR], __m512 c1[MR], float *restrict c,
                                                              int accumulate)
{
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
    store_12x32(c0, c1, c, accumulate);
}

/* The packed path in bf16 (cpu_impl.h's ukr_bf16): the 12 x 32 tile and its registers as
 * ukr_12x32, each step a k-pair: a row's two values broadcast as one 32-bit word, 32 columns' pairs
 * in two vectors, VDPBF16PS summing both products into each f32 lane. A step does twice the
 * multiply-adds of an f32 one in as many instructions, from half the bytes of B. Widened to f32
 * while packing, a bf16 Linear of 64 to 512 tokens ran 1.7-2.0x slower than PyTorch's oneDNN on
 * the same cores (bench/RESULTS.md, 2026-12-03, 9f03749). */
LF_BF16_TARGET static void ukr_bf16_12x32(int64_t kp, const uint32_t *restrict a, const uint32_t *restrict b,
                                          float *restrict c, int accumulate)
{
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
        c0[i] = c1[i] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int64_t k = 0; k < kp; k++) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
        _mm_prefetch((const char *)(b + 8 * NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + 8 * NR + 16), _MM_HINT_T0);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
            c0[i] = _mm512_dpbf16_ps(c0[i], ai, b0);
            c1[i] = _mm512_dpbf16_ps(c1[i], ai, b1);
        }
        a += MR;
        b += NR;
    }
    store_12x32(c0, c1, c, accumulate);
}

/* cpu_impl.h's pack_pairs: pack_cols's transpose on k-pairs instead of floats, the bits kept as
 * they are. Eight vectors by eight pairs (sixteen bf16, one 32-byte load each) at a time, a
 * 4 x 4 block for a four-vector tail (mr = 12), the last pairs (a partial one past K's end among
 * them) one at a time. */
static void pack_pairs_avx512(const uint16_t *base, const int64_t *src, int64_t K, int n, uint32_t *dst)
{
    const int64_t full = K / 2; /* pairs with both values inside K */
    int64_t kp0 = 0;
    for (; kp0 + 8 <= full; kp0 += 8) {
        int p0 = 0;
        for (; p0 + 8 <= n; p0 += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = src[p0 + i] >= 0 ? _mm256_loadu_ps((const float *)(base + src[p0 + i] + 2 * kp0))
                                        : _mm256_setzero_ps();
            lf_transpose8_store(r, (float *)(dst + kp0 * n + p0), n);
        }
        for (; p0 + 4 <= n; p0 += 4)
            for (int64_t kk = kp0; kk < kp0 + 8; kk += 4) {
                __m128 q[4];
                for (int i = 0; i < 4; i++)
                    q[i] = src[p0 + i] >= 0 ? _mm_loadu_ps((const float *)(base + src[p0 + i] + 2 * kk))
                                            : _mm_setzero_ps();
                lf_transpose4_store(q, (float *)(dst + kk * n + p0), n);
            }
        for (; p0 < n; p0++)
            for (int64_t kk = kp0; kk < kp0 + 8; kk++)
                dst[kk * n + p0] = src[p0] >= 0 ? lf_bf16_pair(base, src[p0], 1, K, kk) : 0u;
    }
    for (; kp0 < (K + 1) / 2; kp0++)
        for (int p = 0; p < n; p++)
            dst[kp0 * n + p] = src[p] >= 0 ? lf_bf16_pair(base, src[p], 1, K, kp0) : 0u;
}

LF_KERNEL_SET(LF_CPU_ISA_AVX512, MR, NR, ukr_12x32, pack_cols_avx512);
