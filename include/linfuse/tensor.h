/* linfuse tensors: a dtype, up to four dims with element strides and an offset, over refcounted
 * storage tagged with its device. Views (t, transpose, permute, view, as_strided, unsqueeze,
 * flatten) only rewrite shape and strides; they never copy. Copies (reshape when no view fits,
 * contiguous) are ops, in ops.h, because a copy is work a backend does.
 * Layer: tensor/ knows no backend and no profiler. */
#ifndef LINFUSE_TENSOR_H
#define LINFUSE_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "linfuse/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LF_MAX_DIMS 4

/* The dtypes linfuse computes in come first, LF_DTYPE_COUNT of them (a value APIs also take to
 * mean "unchanged"). Storage dtypes follow: tensors of them can be made, converted to and from
 * f32, copied between devices, read from and written to checkpoints; every op and kernel refuses
 * them (LF_EDTYPE). LF_DTYPE_F8E4M3 is FP8 E4M3 in its "fn" form, as torch.float8_e4m3fn. */
typedef enum lf_dtype {
    LF_DTYPE_F32,
    LF_DTYPE_BF16,
    LF_DTYPE_F16,
    LF_DTYPE_COUNT,
    LF_DTYPE_F8E4M3 = LF_DTYPE_COUNT + 1
} lf_dtype;

typedef enum lf_device { LF_DEVICE_CPU, LF_DEVICE_CUDA, LF_DEVICE_COUNT } lf_device;
/* Units of one device a process can use (GPUs: cuda:0 .. cuda:15). */
enum { LF_MAX_DEVICE_INDEX = 16 };

typedef struct lf_storage lf_storage; /* opaque: bytes on one device, refcounted */

typedef struct lf_tensor {
    lf_dtype dtype;
    int ndim;                    /* 1..LF_MAX_DIMS */
    int64_t shape[LF_MAX_DIMS];  /* each >= 1 */
    int64_t stride[LF_MAX_DIMS]; /* in elements; 0 is allowed (a broadcast view) */
    int64_t offset;              /* in elements, from the start of storage */
    lf_storage *storage;         /* shared by every view of the same data */
} lf_tensor;

/* Whether dt is a dtype linfuse computes in, or one it stores. */
static inline int lf_dtype_computes(lf_dtype dt)
{
    return (unsigned)dt < LF_DTYPE_COUNT;
}
static inline int lf_dtype_known(lf_dtype dt)
{
    return lf_dtype_computes(dt) || dt == LF_DTYPE_F8E4M3;
}
/* "f32", "bf16", "f16", "f8e4m3" */
LF_API const char *lf_dtype_name(lf_dtype dt);
/* PyTorch's spelling as profiler traces write it: "float", "c10::BFloat16", "c10::Half",
 * "c10::Float8_e4m3fn" */
LF_API const char *lf_dtype_torch_name(lf_dtype dt);
LF_API size_t lf_dtype_size(lf_dtype dt);
/* Parse "f32"/"float32", "bf16"/"bfloat16", "f16"/"float16"/"half". */
LF_API lf_status lf_dtype_parse(const char *s, lf_dtype *out);
/* "cpu", "cuda" */
LF_API const char *lf_device_name(lf_device d);

/* --- element conversions: round to nearest even; NaN stays NaN (quieted), Inf stays Inf --- */

static inline uint32_t lf_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float lf_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t lf_bf16_from_f32(float f)
{
    uint32_t x = lf_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x0040u); /* NaN: keep sign and payload top, set quiet bit */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static inline float lf_f32_from_bf16(uint16_t h)
{
    return lf_f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t lf_f16_from_f32(float f)
{
    uint32_t x = lf_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 (half-way past 65504) rounds to Inf; Inf stays Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* normal in f16: >= 2^-14 */
        ax += 0xfffu + ((ax >> 13) & 1u);
        return (uint16_t)(sign | ((ax - 0x38000000u) >> 13));
    }
    uint32_t e = ax >> 23;
    if (e < 102) /* below half the smallest subnormal (2^-25): rounds to zero */
        return sign;
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e; /* 14..24 */
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

static inline float lf_f32_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return lf_f32_from_bits(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* exact: subnormal or zero */
        return sign ? -v : v;
    }
    return lf_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* FP8 E4M3 "fn" (bias 7, no infinities, S.1111.111 NaN, largest 448): decoding is exact;
 * encoding rounds to nearest even exactly as PyTorch's host conversion (c10's
 * fp8e4m3fn_from_fp32_value), which does not saturate: a magnitude above 464 (past 448's half
 * step), Inf and NaN all give NaN. Quantizers scale into +-448 first, where every cast agrees. */
static inline float lf_f32_from_f8e4m3(uint8_t b)
{
    const uint32_t e = (b >> 3) & 0xfu, m = b & 7u, sign = (uint32_t)(b & 0x80u) << 24;
    if (e == 0xf && m == 7)
        return lf_f32_from_bits(sign | 0x7fc00000u);
    if (e == 0) {
        float v = (float)m * 0x1p-9f; /* subnormal: m/8 x 2^-6, exact */
        return sign ? -v : v;
    }
    return lf_f32_from_bits(sign | ((e + 120u) << 23) | (m << 20));
}

static inline uint8_t lf_f8e4m3_from_f32(float f)
{
    uint32_t x = lf_f32_bits(f);
    const uint32_t sign = x & 0x80000000u;
    x ^= sign;
    uint8_t r;
    if (x >= 0x43f00000u) { /* |f| >= 480, Inf, NaN */
        r = 0x7f;
    } else if (x < 0x3c800000u) { /* below 2^-6: a subnormal; adding 2^14 lets the FPU round to 2^-9 steps */
        r = (uint8_t)(lf_f32_bits(lf_f32_from_bits(x) + 0x1p14f) - 0x46800000u);
    } else { /* rebias 127 -> 7, round the 20 dropped bits to nearest even */
        x += 0xc4000000u + 0x7ffffu + ((x >> 20) & 1u);
        r = (uint8_t)(x >> 20);
    }
    return (uint8_t)(r | (sign >> 24));
}

/* The FP8 quantizers' scale (lf_quantize_fp8 and its blocks, on every device) for a row or block
 * whose largest magnitude is amax: amax lands on E4M3's largest value, 448; a block of zeros keeps
 * scale 1, and a scale stays normal (>= 2^-126) so that its reciprocal is finite. */
static inline float lf_fp8_scale_of(float amax)
{
    const float s = amax / 448.f;
    return amax == 0.f ? 1.f : s < 0x1p-126f ? 0x1p-126f : s;
}

/* Read element i of a buffer of dtype dt as float, and write one. */
static inline float lf_load_f32(const void *p, lf_dtype dt, int64_t i)
{
    switch (dt) {
    case LF_DTYPE_F8E4M3:
        return lf_f32_from_f8e4m3(((const uint8_t *)p)[i]);
    case LF_DTYPE_BF16:
        return lf_f32_from_bf16(((const uint16_t *)p)[i]);
    case LF_DTYPE_F16:
        return lf_f32_from_f16(((const uint16_t *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}

static inline void lf_store_f32(void *p, lf_dtype dt, int64_t i, float v)
{
    switch (dt) {
    case LF_DTYPE_F8E4M3:
        ((uint8_t *)p)[i] = lf_f8e4m3_from_f32(v);
        break;
    case LF_DTYPE_BF16:
        ((uint16_t *)p)[i] = lf_bf16_from_f32(v);
        break;
    case LF_DTYPE_F16:
        ((uint16_t *)p)[i] = lf_f16_from_f32(v);
        break;
    default:
        ((float *)p)[i] = v;
        break;
    }
}

/* --- a seeded generator (xoshiro256**, seeded through splitmix64) --- */

typedef struct lf_rng {
    uint64_t s[4];
} lf_rng;

LF_API void lf_rng_seed(lf_rng *rng, uint64_t seed);
LF_API uint64_t lf_rng_next(lf_rng *rng);
/* uniform in [0, 1) with 53 random bits */
LF_API double lf_rng_uniform(lf_rng *rng);

/* --- lifetime --- */

/* A new contiguous (row-major) tensor; contents are uninitialised. */
LF_API lf_status lf_tensor_empty(lf_tensor **out, lf_dtype dt, int ndim, const int64_t *shape, lf_device dev);
/* A new contiguous tensor holding src (numel floats, row-major), rounded to dt. */
LF_API lf_status lf_tensor_from_f32(lf_tensor **out, lf_dtype dt, int ndim, const int64_t *shape, const float *src,
                                    lf_device dev);
/* A contiguous CPU tensor over memory linfuse did not allocate (a mapped file, a caller's
 * buffer): nbytes must be exactly shape x dtype. No copy; when its last view goes, release(ctx)
 * is called (NULL: the memory is the caller's to keep alive and free). */
LF_API lf_status lf_tensor_from_memory(lf_tensor **out, lf_dtype dt, int ndim, const int64_t *shape, void *data,
                                       size_t nbytes, void (*release)(void *ctx), void *ctx);
/* Drop this handle; the storage goes when its last view goes. NULL is fine. */
LF_API void lf_tensor_free(lf_tensor *t);

/* Told of every storage allocation (bytes > 0) and release (bytes < 0), with the unit's (cuda:1's)
 * running total of allocated bytes: the profiler's memory events. NULL removes it. */
typedef void (*lf_alloc_observer)(void *user, lf_device dev, int index, const void *addr, int64_t bytes,
                                  int64_t total_allocated, int64_t total_reserved);
LF_API void lf_tensor_set_alloc_observer(lf_alloc_observer fn, void *user);

/* --- facts ---
 * These return a value, not a status, so their argument is a precondition: a NULL tensor is the
 * caller's bug, stopped with a message naming the function (in every build), never a crash
 * somewhere later. Functions that return lf_status check their pointers and return LF_EINVAL. */

LF_API int64_t lf_tensor_numel(const lf_tensor *t);
LF_API int lf_tensor_is_contiguous(const lf_tensor *t); /* row-major, no gaps (size-1 dims ignored) */
LF_API lf_device lf_tensor_device(const lf_tensor *t);
/* Which unit of its device t lives on: a GPU's ordinal (cuda:1 is 1), 0 on the CPU. */
LF_API int lf_tensor_device_index(const lf_tensor *t);
/* Address of element [0,...,0] (a device address for device tensors). */
LF_API void *lf_tensor_data(const lf_tensor *t);
/* Same storage, so possibly overlapping memory. */
LF_API int lf_tensor_shares_storage(const lf_tensor *a, const lf_tensor *b);

/* --- host data in and out --- */

/* A contiguous copy of t on device dev (same dtype): how data moves between host and GPU. */
LF_API lf_status lf_tensor_to_device(lf_tensor **out, const lf_tensor *t, lf_device dev);

/* Copy every element, in row-major order of the logical shape, into dst as float (device
 * tensors are copied to the host first). cap is dst's capacity in elements, >= numel. */
LF_API lf_status lf_tensor_to_f32(const lf_tensor *t, float *dst, int64_t cap);
/* Fill every element (through strides) with uniform values in [lo, hi), rounded to dtype. */
LF_API lf_status lf_tensor_fill_uniform(lf_tensor *t, lf_rng *rng, double lo, double hi);
/* Fill every element with v (rounded to dtype). */
LF_API lf_status lf_tensor_fill(lf_tensor *t, float v);

/* --- views: new handles over the same storage; no data moves --- */

/* 2-D: swap the dims; 1-D: the same shape (as torch.t). */
LF_API lf_status lf_tensor_t(lf_tensor **out, const lf_tensor *t);
/* Dims may be negative (counted from the end). */
LF_API lf_status lf_tensor_transpose(lf_tensor **out, const lf_tensor *t, int d0, int d1);
LF_API lf_status lf_tensor_permute(lf_tensor **out, const lf_tensor *t, const int *perm);
/* The new shape must be expressible with strides over the same memory (one dim may be -1);
 * otherwise LF_ESHAPE (use lf_reshape, which copies). */
LF_API lf_status lf_tensor_view(lf_tensor **out, const lf_tensor *t, int ndim, const int64_t *shape);
/* Arbitrary shape/strides/offset; every reachable element must lie inside the storage. */
LF_API lf_status lf_tensor_as_strided(lf_tensor **out, const lf_tensor *t, int ndim, const int64_t *shape,
                                      const int64_t *stride, int64_t offset);
LF_API lf_status lf_tensor_unsqueeze(lf_tensor **out, const lf_tensor *t, int dim);
/* Merge dims start..end into one; LF_ESHAPE when their strides do not allow a view. */
LF_API lf_status lf_tensor_flatten(lf_tensor **out, const lf_tensor *t, int start, int end);
#ifdef __cplusplus
}
#endif
#endif
