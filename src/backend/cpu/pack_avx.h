/* Packing vectors that are contiguous along k into k-major panels: B's columns when B is an
 * nn.Linear weight seen as W^T (a column of B is a row of W), and A's rows when A is row-major. Eight vectors by eight
 * k at a time are loaded as rows, widened to float, transposed in registers and stored as eight k-rows of the packed
 * panel. Included by the AVX2 and AVX-512 files (both have AVX2 and F16C). Layer: backend/cpu. */
#include <immintrin.h>

static inline __m256 lf_load8(const void *base, lf_dtype dt, int64_t off)
{
    switch (dt) {
    case LF_DTYPE_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)base + off));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case LF_DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + off)));
    default:
        return _mm256_loadu_ps((const float *)base + off);
    }
}

static inline __m128 lf_load4(const void *base, lf_dtype dt, int64_t off)
{
    switch (dt) {
    case LF_DTYPE_BF16: {
        __m128i h = _mm_loadl_epi64((const __m128i *)((const uint16_t *)base + off));
        return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16));
    }
    case LF_DTYPE_F16:
        return _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)((const uint16_t *)base + off)));
    default:
        return _mm_loadu_ps((const float *)base + off);
    }
}

/* r[0..7], eight rows of eight 32-bit values, transposed: row i of the result (element i of every
 * r) stored at o + i * ld. On float lanes; the bits of any 32-bit values go through unchanged. */
static inline void lf_transpose8_store(const __m256 r[8], float *o, int64_t ld)
{
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    _mm256_storeu_ps(o + 0 * ld, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(o + 1 * ld, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(o + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(o + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(o + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(o + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(o + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(o + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* lf_transpose8_store's 4 x 4 form, for a four-vector tail. */
static inline void lf_transpose4_store(__m128 q[4], float *o, int64_t ld)
{
    _MM_TRANSPOSE4_PS(q[0], q[1], q[2], q[3]);
    for (int i = 0; i < 4; i++)
        _mm_storeu_ps(o + i * ld, q[i]);
}

static void LF_K(pack_cols_)(const void *base, lf_dtype dt, const int64_t *src, int64_t K, int nr, float *dst)
{
    int64_t k0 = 0;
    for (; k0 + 8 <= K; k0 += 8) {
        int p0 = 0;
        for (; p0 + 8 <= nr; p0 += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = src[p0 + i] >= 0 ? lf_load8(base, dt, src[p0 + i] + k0) : _mm256_setzero_ps();
            lf_transpose8_store(r, dst + k0 * nr + p0, nr);
        }
        for (; p0 + 4 <= nr; p0 += 4) /* a 4-wide tail (mr = 12): two 4x4 blocks per 8 k */
            for (int64_t kk = k0; kk < k0 + 8; kk += 4) {
                __m128 q[4];
                for (int i = 0; i < 4; i++)
                    q[i] = src[p0 + i] >= 0 ? lf_load4(base, dt, src[p0 + i] + kk) : _mm_setzero_ps();
                lf_transpose4_store(q, dst + kk * nr + p0, nr);
            }
        for (; p0 < nr; p0++) /* what is left (mr = 6): one element at a time */
            for (int64_t kk = k0; kk < k0 + 8; kk++)
                dst[kk * nr + p0] = src[p0] >= 0 ? lf_load_f32(base, dt, src[p0] + kk) : 0.0f;
    }
    for (; k0 < K; k0++) /* the last K % 8 steps, one element at a time */
        for (int p = 0; p < nr; p++)
            dst[k0 * nr + p] = src[p] >= 0 ? lf_load_f32(base, dt, src[p] + k0) : 0.0f;
}
