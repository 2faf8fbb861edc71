/* Tensors: dtype conversions (round to nearest even, NaN/Inf kept), views that never copy
 * (the blog's t() example first), reshape's view-or-copy rule, storage lifetime, host memory. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define LF_TEST_ASAN 1
#else
#define LF_TEST_ASAN 0
#endif

/* bf16 rounding done the slow, obvious way: the two neighbours, the nearer wins, ties to even. */
static uint16_t bf16_slow(float f)
{
    uint32_t u = lf_f32_bits(f);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double x = f, a = lf_f32_from_bf16(lo), b = lf_f32_from_bf16(hi);
    if ((u & 0xffff) == 0)
        return lo;
    double da = fabs(x - a), db = fabs(x - b);
    if (da < db)
        return lo;
    if (db < da)
        return hi;
    return (lo & 1) ? hi : lo;
}

/* The f16 reference: the compiler's _Float16 where it has one (gcc), else the same rounding done
 * in double arithmetic (clang 14 has no _Float16 on x86): rint rounds to nearest, ties to even,
 * and every step here is exact in double. */
#ifdef __FLT16_MAX__
static uint16_t f16_ref(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

static float f16_ref_to_f32(uint16_t b)
{
    _Float16 h;
    memcpy(&h, &b, 2);
    return (float)h;
}
#else
static uint16_t f16_ref(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (isnan(f))
        return sign | 0x7e00;
    if (a < 0x1p-14) /* subnormal (or zero): a multiple of 2^-24; 1024 of them is the smallest normal */
        return sign | (uint16_t)rint(a * 0x1p24);
    int ex;
    frexp(a, &ex); /* a = fr * 2^ex, fr in [0.5, 1): the unbiased exponent is ex - 1 */
    int e = ex - 1;
    double q = rint(ldexp(a, 10 - e)); /* 1024..2048 */
    if (q == 2048)
        q = 1024, e++;
    if (e + 15 >= 31)
        return sign | 0x7c00;
    return sign | (uint16_t)((e + 15) << 10 | ((int)q - 1024));
}

static float f16_ref_to_f32(uint16_t b)
{
    int e = b >> 10 & 31, m = b & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return b & 0x8000 ? -v : v;
}
#endif

static void test_conversions(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 1);
    int bad_bf16 = 0, bad_f16 = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits = (uint32_t)lf_rng_next(&rng);
        float f = lf_f32_from_bits(bits);
        if (isnan(f))
            continue;
        /* keep finite values whose bf16 rounding stays finite for the slow reference */
        if (fabs(f) < 3.38e38f && lf_bf16_from_f32(f) != bf16_slow(f) && bad_bf16++ < 5)
            fprintf(stderr, "bf16(%a): got %04x want %04x\n", f, lf_bf16_from_f32(f), bf16_slow(f));
        /* f16 against the reference (round to nearest even, IEEE) */
        float g = f * 0x1p-110f; /* bring most draws into f16 range, subnormals included */
        uint16_t hb = f16_ref(g);
        if (lf_f16_from_f32(g) != hb && bad_f16++ < 5)
            fprintf(stderr, "f16(%a): got %04x want %04x\n", g, lf_f16_from_f32(g), hb);
    }
    CHECK(bad_bf16 == 0, "%d bf16 roundings differ from nearest-even", bad_bf16);
    CHECK(bad_f16 == 0, "%d f16 roundings differ from the reference", bad_f16);

    /* every f16 and bf16 value survives a trip through f32 (NaNs stay NaN) */
    int bad_rt = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = lf_f32_from_f16((uint16_t)h), b = lf_f32_from_bf16((uint16_t)h);
        float ref = f16_ref_to_f32((uint16_t)h);
        if (isnan(a) ? !isnan(ref) : a != ref)
            bad_rt++;
        if (isnan(a) ? !isnan(lf_f32_from_f16(lf_f16_from_f32(a))) : lf_f16_from_f32(a) != h)
            bad_rt++;
        if (isnan(b) ? !isnan(lf_f32_from_bf16(lf_bf16_from_f32(b))) : lf_bf16_from_f32(b) != h)
            bad_rt++;
    }
    CHECK(bad_rt == 0, "%d f16/bf16 values do not round-trip", bad_rt);

    CHECK(lf_bf16_from_f32(INFINITY) == 0x7f80 && lf_bf16_from_f32(-INFINITY) == 0xff80, "bf16 keeps Inf");
    CHECK(lf_f16_from_f32(INFINITY) == 0x7c00 && lf_f16_from_f32(-INFINITY) == 0xfc00, "f16 keeps Inf");
    CHECK(isnan(lf_f32_from_bf16(lf_bf16_from_f32(NAN))) && isnan(lf_f32_from_f16(lf_f16_from_f32(NAN))),
          "NaN stays NaN");
    /* a NaN whose payload sits only in the low bits must not become Inf */
    CHECK(isnan(lf_f32_from_bf16(lf_bf16_from_f32(lf_f32_from_bits(0x7f800001u)))), "low-payload NaN stays NaN");
    CHECK(lf_f16_from_f32(65519.0f) == 0x7bff && lf_f16_from_f32(65520.0f) == 0x7c00, "f16 overflow threshold");
    CHECK(lf_bf16_from_f32(1.00390625f) == 0x3f80, "bf16 tie rounds to even (down)");
    CHECK(lf_bf16_from_f32(1.01171875f) == 0x3f82, "bf16 tie rounds to even (up)");
}

/* The blog's example: M (3,2) strides (2,1); t(M) is (2,3) strides (1,2), same data, reads
 * 0 2 4 / 1 3 5, and materializing it gives 0,2,4,1,3,5. */
static void test_blog_transpose(void)
{
    const float v[6] = {0, 1, 2, 3, 4, 5};
    int64_t shape[2] = {3, 2};
    lf_tensor *m = NULL, *mt = NULL, *c = NULL;
    OK(lf_tensor_from_f32(&m, LF_DTYPE_F32, 2, shape, v, LF_DEVICE_CPU));
    CHECK(m->stride[0] == 2 && m->stride[1] == 1, "M strides (%lld, %lld)", (long long)m->stride[0],
          (long long)m->stride[1]);
    OK(lf_t(&mt, m));
    CHECK(mt->shape[0] == 2 && mt->shape[1] == 3, "t(M) shape");
    CHECK(mt->stride[0] == 1 && mt->stride[1] == 2, "t(M) strides (%lld, %lld)", (long long)mt->stride[0],
          (long long)mt->stride[1]);
    CHECK(lf_tensor_data(mt) == lf_tensor_data(m), "t(M) shares M's data pointer");
    CHECK(!lf_tensor_is_contiguous(mt), "t(M) is not contiguous");
    float r[6];
    OK(lf_tensor_to_f32(mt, r, 6));
    const float want[6] = {0, 2, 4, 1, 3, 5};
    CHECK(!memcmp(r, want, sizeof r), "t(M) reads %g %g %g / %g %g %g", r[0], r[1], r[2], r[3], r[4], r[5]);
    OK(lf_contiguous(&c, mt));
    CHECK(lf_tensor_is_contiguous(c) && lf_tensor_data(c) != lf_tensor_data(m), "contiguous copies");
    const float *raw = lf_tensor_data(c);
    CHECK(!memcmp(raw, want, sizeof want), "materialized memory is %g,%g,%g,%g,%g,%g", raw[0], raw[1], raw[2], raw[3],
          raw[4], raw[5]);
    lf_tensor_free(c);
    lf_tensor_free(mt);
    lf_tensor_free(m);
}

static void test_views(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 2);
    int64_t s3[3] = {2, 3, 4};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, 3, s3), *v = NULL, *w = NULL;
    float xv[24], vv[24];
    OK(lf_tensor_to_f32(x, xv, 24));

    /* permute (2,0,1): element [i,j,k] of v is x[j,k,i] */
    int perm[3] = {2, 0, 1};
    OK(lf_tensor_permute(&v, x, perm));
    OK(lf_tensor_to_f32(v, vv, 24));
    int bad = 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 3; k++)
                bad += vv[(i * 2 + j) * 3 + k] != xv[(j * 3 + k) * 4 + i];
    CHECK(bad == 0 && lf_tensor_data(v) == lf_tensor_data(x), "permute reads through strides");
    lf_tensor_free(v);

    /* view with -1, and a view that cannot exist */
    int64_t s2[2] = {-1, 4};
    OK(lf_tensor_view(&v, x, 2, s2));
    CHECK(v->shape[0] == 6 && v->stride[0] == 4, "view [-1, 4] is [6, 4]");
    lf_tensor_free(v);
    OK(lf_tensor_transpose(&w, x, 1, 2)); /* (2,4,3) strides (12,1,4) */
    int64_t s_flat[2] = {2, 12};
    FAILS(LF_ESHAPE, "use lf_reshape", lf_tensor_view(&v, w, 2, s_flat));
    CHECK(v == NULL, "a failed view leaves out NULL");
    /* flatten of the leading dims of a transposed tensor still works: dims 0 and 1 */
    int64_t s_lead[2] = {8, 3};
    FAILS(LF_ESHAPE, NULL, lf_tensor_view(&v, w, 2, s_lead));
    OK(lf_tensor_flatten(&v, x, 0, 1));
    CHECK(v->ndim == 2 && v->shape[0] == 6 && v->shape[1] == 4, "flatten(0,1) of [2,3,4] is [6,4]");
    lf_tensor_free(v);
    FAILS(LF_ESHAPE, "use lf_reshape", lf_tensor_flatten(&v, w, 1, 2));

    /* reshape: a view when strides allow it, a copy otherwise (as torch) */
    OK(lf_reshape(&v, x, 2, s_flat));
    CHECK(lf_tensor_shares_storage(v, x), "reshape of a contiguous tensor is a view");
    lf_tensor_free(v);
    OK(lf_reshape(&v, w, 2, s_flat));
    CHECK(!lf_tensor_shares_storage(v, w) && lf_tensor_is_contiguous(v), "reshape of a transposed tensor copies");
    float wv[24];
    OK(lf_tensor_to_f32(w, wv, 24));
    OK(lf_tensor_to_f32(v, vv, 24));
    CHECK(!memcmp(wv, vv, sizeof wv), "the copy holds the same values in the same order");
    lf_tensor_free(v);

    /* unsqueeze and as_strided */
    OK(lf_tensor_unsqueeze(&v, x, 1));
    CHECK(v->ndim == 4 && v->shape[1] == 1 && v->shape[2] == 3, "unsqueeze(1) of [2,3,4] is [2,1,3,4]");
    lf_tensor_free(v);
    int64_t as_shape[2] = {3, 2}, as_stride[2] = {1, 3};
    OK(lf_tensor_as_strided(&v, x, 2, as_shape, as_stride, 5));
    OK(lf_tensor_to_f32(v, vv, 6));
    CHECK(vv[0] == xv[5] && vv[1] == xv[8] && vv[2] == xv[6] && vv[5] == xv[10], "as_strided reads offset+strides");
    lf_tensor_free(v);
    int64_t far_stride[2] = {10, 3};
    FAILS(LF_ESHAPE, "storage holds 24", lf_tensor_as_strided(&v, x, 2, as_shape, far_stride, 5));

    /* storage lives while any view does: free the base first */
    OK(lf_tensor_transpose(&v, w, 1, 2));
    lf_tensor_free(x);
    lf_tensor_free(w);
    OK(lf_tensor_to_f32(v, vv, 24));
    CHECK(vv[0] == xv[0], "a view outlives its base");
    lf_tensor_free(v);
}

static void test_contiguous_dtypes(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 3);
    for (int dt = 0; dt < LF_DTYPE_COUNT; dt++) {
        lf_tensor *x = rand_colmajor(&rng, (lf_dtype)dt, 33, 7), *c = NULL;
        float a[231], b[231];
        OK(lf_tensor_to_f32(x, a, 231));
        OK(lf_contiguous(&c, x));
        OK(lf_tensor_to_f32(c, b, 231));
        CHECK(!memcmp(a, b, sizeof a), "contiguous keeps %s values exactly", lf_dtype_name((lf_dtype)dt));
        lf_tensor_free(c);
        OK(lf_contiguous(&c, x));
        lf_tensor *cc = NULL;
        OK(lf_contiguous(&cc, c));
        CHECK(lf_tensor_data(cc) == lf_tensor_data(c), "contiguous of a contiguous tensor is no copy");
        lf_tensor_free(cc);
        lf_tensor_free(c);
        lf_tensor_free(x);
    }
}

/* FP8 E4M3 ("fn"), a storage dtype: every code decodes to the spec's value and encodes back to
 * itself; values between two codes round to the nearer, ties to the even code, by PyTorch's rule
 * (no saturation: from 464 up, and Inf and NaN, give NaN); tensors of it convert and copy, and
 * every op and the GEMM refuse it with a message that says why. */
static void test_fp8(void)
{
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        const uint8_t b = (uint8_t)c;
        const int e = (c >> 3) & 15, m = c & 7;
        const double want = (c & 0x80 ? -1 : 1) * (e ? ldexp(8 + m, e - 10) : ldexp(m, -9));
        const float v = lf_f32_from_f8e4m3(b);
        if ((c & 0x7f) == 0x7f)
            bad += !isnan(v) || lf_f8e4m3_from_f32(v) != (uint8_t)(0x7f | (c & 0x80));
        else
            bad += (double)v != want || lf_f8e4m3_from_f32(v) != b || (c == 0x80 && !signbit(v));
    }
    CHECK(!bad, "e4m3: %d of 256 codes decode wrong or do not encode back to themselves", bad);
    bad = 0;
    for (int c = 0; c < 0x7e; c++) { /* the midpoints between neighbours, and just either side */
        const float lo = lf_f32_from_f8e4m3((uint8_t)c), hi = lf_f32_from_f8e4m3((uint8_t)(c + 1));
        const float mid = (float)(((double)lo + hi) / 2);
        const uint8_t even = (uint8_t)(c % 2 ? c + 1 : c);
        bad += lf_f8e4m3_from_f32(mid) != even || lf_f8e4m3_from_f32(nextafterf(mid, 1000)) != c + 1 ||
               lf_f8e4m3_from_f32(nextafterf(mid, 0)) != c || lf_f8e4m3_from_f32(-mid) != (even | 0x80);
    }
    CHECK(!bad, "e4m3: %d of 126 gaps round wrong (nearest, ties to even)", bad);
    static const struct {
        float f;
        uint8_t b;
    } edge[] = {{448.f, 0x7e},    {463.9f, 0x7e},    {464.f, 0x7e},  {464.1f, 0x7f},   {479.f, 0x7f},
                {480.f, 0x7f},    {1e6f, 0x7f},      {-1e6f, 0xff},  {INFINITY, 0x7f}, {NAN, 0x7f},
                {0x1p-10f, 0x00}, {0x1.8p-9f, 0x02}, {1e-30f, 0x00}, {-0.f, 0x80}};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        CHECK(lf_f8e4m3_from_f32(edge[i].f) == edge[i].b, "e4m3(%g) = 0x%02x, got 0x%02x", (double)edge[i].f, edge[i].b,
              lf_f8e4m3_from_f32(edge[i].f));
    CHECK(!strcmp(lf_dtype_name(LF_DTYPE_F8E4M3), "f8e4m3") &&
              !strcmp(lf_dtype_torch_name(LF_DTYPE_F8E4M3), "c10::Float8_e4m3fn") &&
              lf_dtype_size(LF_DTYPE_F8E4M3) == 1 && lf_dtype_known(LF_DTYPE_F8E4M3) &&
              !lf_dtype_computes(LF_DTYPE_F8E4M3) && !lf_dtype_known(LF_DTYPE_COUNT),
          "f8e4m3's facts");
    /* tensors: from and to f32, a copy, and refusals */
    const float v[6] = {1.f, -2.5f, 0.0625f, 300.f, 1000.f, 0x1p-9f};
    const float back[6] = {1.f, -2.5f, 0.0625f, 288.f, NAN, 0x1p-9f}; /* 300 rounds to 288; 1000 is NaN */
    lf_tensor *q = NULL, *c = NULL, *y = NULL;
    OK(lf_tensor_from_f32(&q, LF_DTYPE_F8E4M3, 2, (int64_t[]){2, 3}, v, LF_DEVICE_CPU));
    if (q) {
        float got[6];
        OK(lf_tensor_to_f32(q, got, 6));
        int wrong = 0;
        for (int i = 0; i < 6; i++)
            wrong += isnan(back[i]) ? !isnan(got[i]) : got[i] != back[i];
        CHECK(!wrong && q->dtype == LF_DTYPE_F8E4M3 && lf_dtype_size(q->dtype) == 1, "f32 -> f8e4m3 -> f32");
        OK(lf_tensor_to_device(&c, q, LF_DEVICE_CPU));
        CHECK(c && !memcmp(lf_tensor_data(c), lf_tensor_data(q), 6), "a copy keeps the bytes");
        FAILS(LF_EDTYPE, "'a' is f8e4m3, a dtype linfuse stores but does not compute in", lf_add(&y, q, q));
        FAILS(LF_EDTYPE, "is f8e4m3", lf_contiguous(&y, q));
        lf_tensor *qt = NULL; /* a view moves no values: the FP8 GEMMs read weights transposed */
        OK(lf_t(&qt, q));
        CHECK(qt && qt->dtype == LF_DTYPE_F8E4M3 && qt->stride[0] == 1, "lf_t views f8e4m3");
        lf_tensor_free(qt);
        lf_gemm g = {.ep = lf_epilogue_default()};
        g.a = (lf_matrix){lf_tensor_data(q), LF_DTYPE_F8E4M3, 2, 3, 3, 1};
        g.b = (lf_matrix){lf_tensor_data(q), LF_DTYPE_F8E4M3, 3, 2, 1, 3};
        float d[4];
        g.d = (lf_matrix){d, LF_DTYPE_F32, 2, 2, 2, 1};
        FAILS(LF_EINVAL, "f8e4m3 operands need both scale vectors", /* a GEMM takes FP8 scaled only */
              lf_backend_gemm_supported(LF_DEVICE_CPU, &g));
        CHECK(!y, "nothing made");
    }
    lf_dtype parsed;
    FAILS(LF_EINVAL, "unknown dtype", lf_dtype_parse("f8e4m3", &parsed)); /* flags name dtypes that compute */
    lf_tensor_free(q), lf_tensor_free(c);
}

/* Host tensors are 64-byte aligned at every size, writable to their last byte, and (under
 * AddressSanitizer) poisoned one byte before and one byte past, so an overrun is caught. */
static void test_host_memory(void)
{
    static const int64_t sizes[] = {1, 3, 63, 64, 65, 1000, 4096, 6 * 1024 * 1024 + 7};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        lf_tensor *t = NULL;
        OK(lf_tensor_empty(&t, LF_DTYPE_F8E4M3, 1, &sizes[i], LF_DEVICE_CPU));
        if (!t)
            continue;
        unsigned char *p = lf_tensor_data(t);
        CHECK((uintptr_t)p % 64 == 0, "%lld bytes: data at %p is not 64-byte aligned", (long long)sizes[i], (void *)p);
        memset(p, 0xA5, (size_t)sizes[i]);
        CHECK(p[0] == 0xA5 && p[sizes[i] - 1] == 0xA5, "%lld bytes: written end to end", (long long)sizes[i]);
#if LF_TEST_ASAN
        CHECK(__asan_address_is_poisoned(p + sizes[i]) && __asan_address_is_poisoned(p - 1),
              "%lld bytes: the bytes around the tensor are poisoned", (long long)sizes[i]);
#endif
        lf_tensor_free(t);
    }
    /* a large block freed is kept and handed to the next request of its size (rounded to a page),
     * poisoned while it waits */
    const int64_t big = (1 << 20) + 10, bigger = (1 << 20) + 20;
    lf_tensor *a = NULL, *b = NULL;
    OK(lf_tensor_empty(&a, LF_DTYPE_F8E4M3, 1, &big, LF_DEVICE_CPU));
    unsigned char *pa = a ? lf_tensor_data(a) : NULL;
    lf_tensor_free(a);
#if LF_TEST_ASAN
    CHECK(pa && __asan_address_is_poisoned(pa), "a cached block is poisoned");
#endif
    OK(lf_tensor_empty(&b, LF_DTYPE_F8E4M3, 1, &bigger, LF_DEVICE_CPU));
    unsigned char *pb = b ? lf_tensor_data(b) : NULL;
    CHECK(pb && pb == pa, "the block freed is the block taken again (%p, %p)", (void *)pa, (void *)pb);
    if (pb) {
        memset(pb, 1, (size_t)bigger);
#if LF_TEST_ASAN
        CHECK(__asan_address_is_poisoned(pb + bigger), "a reused block is poisoned past its new size");
#endif
    }
    lf_tensor_free(b);
}

/* What the allocator holds (Total Reserved) and what is in use, as the memory observer last saw. */
static int64_t seen_reserved, seen_allocated;
static void seen(void *user, lf_device dev, int index, const void *addr, int64_t bytes, int64_t total_allocated,
                 int64_t total_reserved)
{
    (void)user, (void)dev, (void)index, (void)addr, (void)bytes;
    seen_reserved = total_reserved, seen_allocated = total_allocated;
}

/* After a 1 MiB tensor is freed, a small allocation sees the block still held (cached) by
 * default, and not with LINFUSE_HOST_CACHE_MB=0; "abc" is no number and leaves the default.
 * 0 if as expected. Run in a child process: the cap is decided once per process. */
static int cache_holds(const char *env_value, int expect_held)
{
    if (env_value)
        setenv("LINFUSE_HOST_CACHE_MB", env_value, 1);
    lf_tensor_set_alloc_observer(seen, NULL);
    const int64_t big = 1 << 20, small = 64;
    lf_tensor *a = NULL, *b = NULL;
    if (lf_tensor_empty(&a, LF_DTYPE_F8E4M3, 1, &big, LF_DEVICE_CPU) != LF_OK)
        return 2;
    lf_tensor_free(a);
    if (lf_tensor_empty(&b, LF_DTYPE_F8E4M3, 1, &small, LF_DEVICE_CPU) != LF_OK)
        return 2;
    const int held = seen_reserved - seen_allocated >= big;
    lf_tensor_free(b);
    lf_tensor_set_alloc_observer(NULL, NULL);
    return held == expect_held ? 0 : 1;
}

static void test_host_cache_setting(void)
{
    static const struct {
        const char *value;
        int held;
    } cases[] = {{NULL, 1}, {"0", 0}, {"abc", 1}, {"16", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fflush(NULL);
        const pid_t pid = fork();
        if (pid == 0)
            _exit(cache_holds(cases[i].value, cases[i].held));
        int status = -1;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "LINFUSE_HOST_CACHE_MB=%s: a freed 1 MiB block %s held (child status %d)",
              cases[i].value ? cases[i].value : "(unset)", cases[i].held ? "stays" : "is not", status);
    }
}

int main(void)
{
    test_host_cache_setting();
    test_host_memory();
    test_conversions();
    test_blog_transpose();
    test_views();
    test_contiguous_dtypes();
    test_fp8();
    return lf_test_finish("test_tensor");
}
