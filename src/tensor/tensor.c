/* Tensor lifetime, facts about a tensor, and host data in and out. Layer: tensor/. */
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor_impl.h"

static const struct {
    const char *name, *torch;
    size_t size;
} dtype_info[LF_DTYPE_F8E4M3 + 1] = {
    [LF_DTYPE_F32] = {"f32", "float", 4},
    [LF_DTYPE_BF16] = {"bf16", "c10::BFloat16", 2},
    [LF_DTYPE_F16] = {"f16", "c10::Half", 2},
    [LF_DTYPE_F8E4M3] = {"f8e4m3", "c10::Float8_e4m3fn", 1},
};

const char *lf_dtype_name(lf_dtype dt)
{
    return lf_dtype_known(dt) ? dtype_info[dt].name : "?";
}
const char *lf_dtype_torch_name(lf_dtype dt)
{
    return lf_dtype_known(dt) ? dtype_info[dt].torch : "?";
}
size_t lf_dtype_size(lf_dtype dt)
{
    return lf_dtype_known(dt) ? dtype_info[dt].size : 0;
}

lf_status lf_dtype_parse(const char *s, lf_dtype *out)
{
    static const struct {
        const char *s;
        lf_dtype dt;
    } names[] = {
        {"f32", LF_DTYPE_F32},     {"float32", LF_DTYPE_F32},   {"fp32", LF_DTYPE_F32},
        {"bf16", LF_DTYPE_BF16},   {"bfloat16", LF_DTYPE_BF16}, {"f16", LF_DTYPE_F16},
        {"float16", LF_DTYPE_F16}, {"fp16", LF_DTYPE_F16},      {"half", LF_DTYPE_F16},
    };
    LF_CHECK_PTR(s, "lf_dtype_parse", "s");
    LF_CHECK_PTR(out, "lf_dtype_parse", "out");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].s)) {
            *out = names[i].dt;
            return LF_OK;
        }
    return lf_fail(LF_EINVAL, "unknown dtype '%s' (expected bf16, f16 or f32)", s);
}

const char *lf_device_name(lf_device d)
{
    return d == LF_DEVICE_CPU ? "cpu" : d == LF_DEVICE_CUDA ? "cuda" : "?";
}

/* --- allocators --- */

static lf_allocator allocators[LF_DEVICE_COUNT] = {
    [LF_DEVICE_CPU] = {lf_host_alloc, lf_host_free, NULL, lf_host_reserved, NULL}};

static int (*device_starter)(lf_device dev);

void lf_tensor_set_device_starter(int (*start)(lf_device dev))
{
    device_starter = start;
}

void lf_tensor_set_allocator(lf_device dev, const lf_allocator *a)
{
    LF_ASSERT((unsigned)dev < LF_DEVICE_COUNT);
    if (a)
        allocators[dev] = *a;
    else
        memset(&allocators[dev], 0, sizeof allocators[dev]);
}

/* --- allocation observer (the profiler's memory events) --- */

static _Atomic(lf_alloc_observer) alloc_obs;
static void *_Atomic alloc_obs_user;
static atomic_llong allocated_bytes[LF_DEVICE_COUNT][LF_MAX_DEVICE_INDEX];

void lf_tensor_set_alloc_observer(lf_alloc_observer fn, void *user)
{
    atomic_store(&alloc_obs_user, user);
    atomic_store(&alloc_obs, fn);
}

static void note_alloc(lf_device dev, int index, const void *p, int64_t bytes)
{
    long long total = atomic_fetch_add(&allocated_bytes[dev][index], bytes) + bytes;
    lf_alloc_observer fn = atomic_load_explicit(&alloc_obs, memory_order_acquire);
    if (__builtin_expect(fn != NULL, 0)) {
        const lf_allocator *a = &allocators[dev];
        int64_t reserved = a->reserved ? a->reserved(index, a->ctx) : (int64_t)total;
        fn(atomic_load(&alloc_obs_user), dev, index, p, bytes, (int64_t)total, reserved);
    }
}

/* --- shapes --- */

lf_status lf_shape_check(const char *what, int ndim, const int64_t *shape, lf_dtype dt, int64_t *numel)
{
    char buf[LF_SHAPE_STR_CAP];
    if (!lf_dtype_known(dt))
        return lf_fail(LF_EDTYPE, "%s: dtype %d is not one of bf16, f16, f32, f8e4m3", what, (int)dt);
    if (ndim < 1 || ndim > LF_MAX_DIMS)
        return lf_fail(LF_ESHAPE, "%s: %d dims requested, expected 1 to %d", what, ndim, LF_MAX_DIMS);
    if (!shape)
        return lf_fail(LF_EINVAL, "%s: argument 'shape' is NULL", what);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1)
            return lf_fail(LF_ESHAPE, "%s: shape %s has dim %d = %lld, expected every dim >= 1", what,
                           lf_fmt_shape(buf, sizeof buf, ndim, shape), i, (long long)shape[i]);
        if (!lf_mul_ok(n, shape[i], &n))
            return lf_fail(LF_EOVERFLOW, "%s: shape %s has more elements than fit in 63 bits", what,
                           lf_fmt_shape(buf, sizeof buf, ndim, shape));
    }
    int64_t bytes;
    if (!lf_mul_ok(n, (int64_t)lf_dtype_size(dt), &bytes))
        return lf_fail(LF_EOVERFLOW, "%s: shape %s of %s needs more bytes than fit in 63 bits", what,
                       lf_fmt_shape(buf, sizeof buf, ndim, shape), lf_dtype_name(dt));
    if (numel)
        *numel = n;
    return LF_OK;
}

void lf_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i];
    }
}

/* --- lifetime --- */

static void keep_memory(void *ctx);
static _Thread_local lf_arena *tls_arena;

lf_arena *lf_tensor_arena_set(lf_arena *a)
{
    lf_arena *prev = tls_arena;
    tls_arena = a;
    return prev;
}

/* Storage carved from the thread's arena (tensor_impl.h). */
static lf_status storage_from_arena(lf_storage **out, lf_arena *ar, size_t nbytes, const char *what)
{
    /* 256-byte aligned by address: a workspace handed in as a view may start anywhere */
    const uintptr_t base = (uintptr_t)ar->base;
    const size_t at = (size_t)(((base + ar->used + 255) & ~(uintptr_t)255) - base);
    if (at > ar->size || nbytes > ar->size - at)
        return lf_fail(LF_ENOMEM, "%s: the caller's workspace of %zu bytes is used up (%zu taken, %zu more asked)",
                       what, ar->size, ar->used, nbytes);
    lf_storage *s = malloc(sizeof *s);
    if (!s)
        return lf_fail(LF_ENOMEM, "%s: out of host memory for a storage header", what);
    atomic_init(&s->refs, 1);
    s->device = ar->dev;
    s->index = ar->index;
    s->nbytes = nbytes;
    s->data = ar->base + at;
    s->release = keep_memory, s->release_ctx = NULL;
    s->tag = NULL;
    ar->used = at + nbytes;
    *out = s;
    return LF_OK;
}

static lf_status storage_new(lf_storage **out, lf_device dev, size_t nbytes, const char *what)
{
    if ((unsigned)dev >= LF_DEVICE_COUNT)
        return lf_fail(LF_EDEVICE, "%s: device %d is not cpu or cuda", what, (int)dev);
    if (tls_arena && tls_arena->dev == dev)
        return storage_from_arena(out, tls_arena, nbytes, what);
    const lf_allocator *a = &allocators[dev];
    if (!a->alloc && device_starter)
        device_starter(dev);
    if (!a->alloc)
        return lf_fail(LF_EDEVICE, "%s: no %s backend is running (this build or this machine has none)", what,
                       lf_device_name(dev));
    lf_storage *s = malloc(sizeof *s);
    if (!s)
        return lf_fail(LF_ENOMEM, "%s: out of host memory for a storage header", what);
    int index = 0;
    void *tag = NULL;
    s->data = a->alloc(nbytes, &index, &tag, a->ctx);
    if (!s->data) {
        free(s);
        return lf_fail(LF_ENOMEM, "%s: could not allocate %zu bytes on %s", what, nbytes, lf_device_name(dev));
    }
    LF_ASSERT(index >= 0 && index < LF_MAX_DEVICE_INDEX);
    atomic_init(&s->refs, 1);
    s->device = dev;
    s->index = index;
    s->nbytes = nbytes;
    s->release = NULL, s->release_ctx = NULL;
    s->tag = tag;
    note_alloc(dev, index, s->data, (int64_t)nbytes);
    *out = s;
    return LF_OK;
}

static void storage_release(lf_storage *s)
{
    if (s && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1) {
        if (s->release) { /* someone else's memory: hand it back */
            s->release(s->release_ctx);
        } else {
            note_alloc(s->device, s->index, s->data, -(int64_t)s->nbytes);
            allocators[s->device].free(s->data, s->nbytes, s->index, s->tag, allocators[s->device].ctx);
        }
        free(s);
    }
}

static void keep_memory(void *ctx)
{
    (void)ctx; /* the caller's memory: nothing to give back */
}

lf_status lf_tensor_over(lf_tensor **out, const char *what, lf_device dev, int index, lf_dtype dt, int ndim,
                         const int64_t *shape, const int64_t *stride, int64_t offset, void *data, size_t nbytes,
                         void (*release)(void *ctx), void *ctx)
{
    lf_tensor *t = calloc(1, sizeof *t);
    lf_storage *s = malloc(sizeof *s);
    if (!t || !s) {
        free(t), free(s);
        return lf_fail(LF_ENOMEM, "%s: out of host memory for a tensor header", what);
    }
    atomic_init(&s->refs, 1);
    s->device = dev;
    s->index = index;
    s->nbytes = nbytes;
    s->data = data;
    s->release = release ? release : keep_memory, s->release_ctx = ctx;
    s->tag = NULL;
    t->storage = s;
    t->dtype = dt;
    t->ndim = ndim;
    t->offset = offset;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    memcpy(t->stride, stride, (size_t)ndim * sizeof *stride);
    *out = t;
    return LF_OK;
}

lf_status lf_tensor_from_memory(lf_tensor **out, lf_dtype dt, int ndim, const int64_t *shape, void *data, size_t nbytes,
                                void (*release)(void *ctx), void *ctx)
{
    LF_CHECK_PTR(out, "lf_tensor_from_memory", "out");
    *out = NULL;
    LF_CHECK_PTR(data, "lf_tensor_from_memory", "data");
    int64_t numel;
    LF_TRY(lf_shape_check("lf_tensor_from_memory", ndim, shape, dt, &numel));
    if ((uint64_t)numel * lf_dtype_size(dt) != nbytes)
        return lf_fail(LF_ESHAPE, "lf_tensor_from_memory: %lld elements of %s are %llu bytes, the memory holds %zu",
                       (long long)numel, lf_dtype_name(dt), (unsigned long long)numel * lf_dtype_size(dt), nbytes);
    int64_t stride[LF_MAX_DIMS];
    lf_contiguous_strides(ndim, shape, stride);
    return lf_tensor_over(out, "lf_tensor_from_memory", LF_DEVICE_CPU, 0, dt, ndim, shape, stride, 0, data, nbytes,
                          release, ctx);
}

lf_status lf_tensor_empty(lf_tensor **out, lf_dtype dt, int ndim, const int64_t *shape, lf_device dev)
{
    LF_CHECK_PTR(out, "lf_tensor_empty", "out");
    *out = NULL;
    int64_t numel;
    LF_TRY(lf_shape_check("lf_tensor_empty", ndim, shape, dt, &numel));
    lf_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return lf_fail(LF_ENOMEM, "lf_tensor_empty: out of host memory for a tensor header");
    lf_status st = storage_new(&t->storage, dev, (size_t)numel * lf_dtype_size(dt), "lf_tensor_empty");
    if (st != LF_OK) {
        free(t);
        return st;
    }
    t->dtype = dt;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    lf_contiguous_strides(ndim, shape, t->stride);
    *out = t;
    return LF_OK;
}

lf_status lf_tensor_alias(lf_tensor **out, const lf_tensor *t, int ndim, const int64_t *shape, const int64_t *stride,
                          int64_t offset)
{
    lf_tensor *v = calloc(1, sizeof *v);
    if (!v)
        return lf_fail(LF_ENOMEM, "out of host memory for a view header");
    v->dtype = t->dtype;
    v->ndim = ndim;
    memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
    memcpy(v->stride, stride, (size_t)ndim * sizeof *stride);
    v->offset = offset;
    v->storage = t->storage;
    atomic_fetch_add_explicit(&t->storage->refs, 1, memory_order_relaxed);
    *out = v;
    return LF_OK;
}

void lf_tensor_free(lf_tensor *t)
{
    if (!t)
        return;
    storage_release(t->storage);
    free(t);
}

/* --- facts --- */

int64_t lf_tensor_numel(const lf_tensor *t)
{
    LF_PRECOND(t, "lf_tensor_numel", "argument 't' is NULL");
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

int lf_tensor_is_contiguous(const lf_tensor *t)
{
    LF_PRECOND(t, "lf_tensor_is_contiguous", "argument 't' is NULL");
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s)
            return 0;
        s *= t->shape[i];
    }
    return 1;
}

lf_device lf_tensor_device(const lf_tensor *t)
{
    LF_PRECOND(t && t->storage, "lf_tensor_device", "argument 't' is NULL or has no storage");
    return t->storage->device;
}

int lf_tensor_device_index(const lf_tensor *t)
{
    LF_PRECOND(t && t->storage, "lf_tensor_device_index", "argument 't' is NULL or has no storage");
    return t->storage->index;
}

void *lf_tensor_data(const lf_tensor *t)
{
    LF_PRECOND(t && t->storage, "lf_tensor_data", "argument 't' is NULL or has no storage");
    return (char *)t->storage->data + t->offset * (int64_t)lf_dtype_size(t->dtype);
}

int lf_tensor_shares_storage(const lf_tensor *a, const lf_tensor *b)
{
    LF_PRECOND(a && b, "lf_tensor_shares_storage", "an argument is NULL");
    return a->storage == b->storage;
}

/* --- host data --- */

lf_status lf_tensor_check(const char *fn, const char *name, const lf_tensor *t)
{
    if (!t)
        return lf_fail(LF_EINVAL, "%s: argument '%s' is NULL", fn, name);
    if (!t->storage || t->ndim < 1 || t->ndim > LF_MAX_DIMS || !lf_dtype_known(t->dtype))
        return lf_fail(LF_EINVAL, "%s: argument '%s' is not a valid tensor", fn, name);
    int64_t last = t->offset, size = (int64_t)lf_dtype_size(t->dtype), span, n = 1;
    int ok = t->offset >= 0, fits = 1;
    for (int d = 0; d < t->ndim && ok; d++) {
        ok = t->shape[d] >= 1 && t->stride[d] >= 0 && lf_mul_ok(t->shape[d] - 1, t->stride[d], &span) &&
             lf_add_ok(last, span, &last);
        fits = fits && lf_mul_ok(n, t->shape[d], &n);
    }
    if (!ok || !lf_mul_ok(last + 1, size, &span) || span > (int64_t)t->storage->nbytes) {
        char sh[LF_SHAPE_STR_CAP], st[LF_SHAPE_STR_CAP];
        return lf_fail(LF_ESHAPE,
                       "%s: argument '%s' (shape %s, strides %s, offset %lld) reaches past its storage of %zu bytes",
                       fn, name, lf_fmt_shape(sh, sizeof sh, t->ndim, t->shape),
                       lf_fmt_shape(st, sizeof st, t->ndim, t->stride), (long long)t->offset, t->storage->nbytes);
    }
    if (!fits) {
        char sh[LF_SHAPE_STR_CAP];
        return lf_fail(LF_EOVERFLOW, "%s: argument '%s' (shape %s) has more elements than 63 bits count", fn, name,
                       lf_fmt_shape(sh, sizeof sh, t->ndim, t->shape));
    }
    return LF_OK;
}

static lf_status host_check(const lf_tensor *t, const char *fn)
{
    LF_TRY(lf_tensor_check(fn, "t", t));
    if (lf_tensor_device(t) != LF_DEVICE_CPU)
        return lf_fail(LF_EDEVICE, "%s: tensor is on %s, expected cpu (copy it to the host first)", fn,
                       lf_device_name(lf_tensor_device(t)));
    return LF_OK;
}

/* Walk every element of t in row-major order of its logical shape, calling body with the
 * element's offset (from lf_tensor_data) and its linear index. */
#define LF_FOR_EACH_ELEMENT(t, off, lin, body)                                               \
    do {                                                                                     \
        int64_t sh_[4] = {1, 1, 1, 1}, st_[4] = {0, 0, 0, 0};                                \
        int pad_ = 4 - (t)->ndim;                                                            \
        for (int d_ = 0; d_ < (t)->ndim; d_++)                                               \
            sh_[pad_ + d_] = (t)->shape[d_], st_[pad_ + d_] = (t)->stride[d_];               \
        int64_t lin = 0;                                                                     \
        for (int64_t i0 = 0; i0 < sh_[0]; i0++)                                              \
            for (int64_t i1 = 0; i1 < sh_[1]; i1++)                                          \
                for (int64_t i2 = 0; i2 < sh_[2]; i2++)                                      \
                    for (int64_t i3 = 0; i3 < sh_[3]; i3++, lin++) {                         \
                        int64_t off = i0 * st_[0] + i1 * st_[1] + i2 * st_[2] + i3 * st_[3]; \
                        body;                                                                \
                    }                                                                        \
    } while (0)

/* The bytes of t's storage on the host: the storage itself for CPU tensors, else a staged copy
 * (*staged, freed by the caller). */
static lf_status host_bytes(const lf_tensor *t, const char *fn, const void **bytes, void **staged)
{
    *staged = NULL;
    LF_TRY(lf_tensor_check(fn, "t", t));
    lf_device dev = lf_tensor_device(t);
    if (dev == LF_DEVICE_CPU) {
        *bytes = t->storage->data;
        return LF_OK;
    }
    const lf_allocator *a = &allocators[dev];
    void *h = malloc(t->storage->nbytes ? t->storage->nbytes : 1);
    if (!h)
        return lf_fail(LF_ENOMEM, "%s: out of host memory to stage %zu bytes", fn, t->storage->nbytes);
    if (!a->copy || a->copy(h, t->storage->data, t->storage->nbytes, 1, t->storage->index, a->ctx) != 0) {
        free(h);
        return lf_fail(LF_EDEVICE, "%s: copying %zu bytes from %s failed", fn, t->storage->nbytes, lf_device_name(dev));
    }
    *bytes = h;
    *staged = h;
    return LF_OK;
}

lf_status lf_tensor_to_device(lf_tensor **out, const lf_tensor *t, lf_device dev)
{
    LF_CHECK_PTR(out, "lf_tensor_to_device", "out");
    *out = NULL;
    LF_CHECK_PTR(t, "lf_tensor_to_device", "t");
    const void *src;
    void *staged;
    LF_TRY(host_bytes(t, "lf_tensor_to_device", &src, &staged));
    /* gather the view into a contiguous host buffer, then place it */
    lf_tensor *h = NULL, *y = NULL;
    lf_status s = lf_tensor_empty(&h, t->dtype, t->ndim, t->shape, LF_DEVICE_CPU);
    if (s == LF_OK) {
        const size_t es = lf_dtype_size(t->dtype);
        char *dst = h->storage->data;
        const char *base = (const char *)src + t->offset * (int64_t)es;
        LF_FOR_EACH_ELEMENT(t, off, lin, memcpy(dst + lin * (int64_t)es, base + off * (int64_t)es, es));
        if (dev == LF_DEVICE_CPU) {
            y = h, h = NULL;
        } else {
            s = lf_tensor_empty(&y, t->dtype, t->ndim, t->shape, dev);
            if (s == LF_OK && allocators[dev].copy(y->storage->data, h->storage->data, h->storage->nbytes, 0,
                                                   y->storage->index, allocators[dev].ctx) != 0)
                s = lf_fail(LF_EDEVICE, "lf_tensor_to_device: copying to %s failed", lf_device_name(dev));
        }
    }
    free(staged);
    lf_tensor_free(h);
    if (s != LF_OK) {
        lf_tensor_free(y);
        return s;
    }
    *out = y;
    return LF_OK;
}

lf_status lf_tensor_to_f32(const lf_tensor *t, float *dst, int64_t cap)
{
    LF_CHECK_PTR(t, "lf_tensor_to_f32", "t");
    LF_CHECK_PTR(dst, "lf_tensor_to_f32", "dst");
    LF_TRY(lf_tensor_check("lf_tensor_to_f32", "t", t)); /* before its element count is trusted */
    int64_t n = lf_tensor_numel(t);
    if (cap < n)
        return lf_fail(LF_EINVAL, "lf_tensor_to_f32: dst holds %lld elements, tensor has %lld", (long long)cap,
                       (long long)n);
    const void *bytes;
    void *staged;
    LF_TRY(host_bytes(t, "lf_tensor_to_f32", &bytes, &staged));
    const void *p = (const char *)bytes + t->offset * (int64_t)lf_dtype_size(t->dtype);
    lf_dtype dt = t->dtype;
    LF_FOR_EACH_ELEMENT(t, off, lin, dst[lin] = lf_load_f32(p, dt, off));
    free(staged);
    return LF_OK;
}

lf_status lf_tensor_from_f32(lf_tensor **out, lf_dtype dt, int ndim, const int64_t *shape, const float *src,
                             lf_device dev)
{
    LF_CHECK_PTR(out, "lf_tensor_from_f32", "out");
    *out = NULL;
    LF_CHECK_PTR(src, "lf_tensor_from_f32", "src");
    if (dev != LF_DEVICE_CPU)
        return lf_fail(LF_EDEVICE,
                       "lf_tensor_from_f32: device %s: only cpu tensors are filled from host "
                       "data here; create on cpu and copy",
                       lf_device_name(dev));
    lf_tensor *t;
    LF_TRY(lf_tensor_empty(&t, dt, ndim, shape, dev));
    void *p = lf_tensor_data(t);
    int64_t n = lf_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        lf_store_f32(p, dt, i, src[i]);
    *out = t;
    return LF_OK;
}

lf_status lf_tensor_fill_uniform(lf_tensor *t, lf_rng *rng, double lo, double hi)
{
    LF_TRY(host_check(t, "lf_tensor_fill_uniform"));
    LF_CHECK_PTR(rng, "lf_tensor_fill_uniform", "rng");
    if (!(lo <= hi))
        return lf_fail(LF_EINVAL, "lf_tensor_fill_uniform: range [%g, %g) is empty", lo, hi);
    void *p = lf_tensor_data(t);
    lf_dtype dt = t->dtype;
    LF_FOR_EACH_ELEMENT(t, off, lin, (void)lin;
                        lf_store_f32(p, dt, off, (float)(lo + (hi - lo) * lf_rng_uniform(rng))));
    return LF_OK;
}

lf_status lf_tensor_fill(lf_tensor *t, float v)
{
    LF_TRY(host_check(t, "lf_tensor_fill"));
    void *p = lf_tensor_data(t);
    lf_dtype dt = t->dtype;
    LF_FOR_EACH_ELEMENT(t, off, lin, (void)lin; lf_store_f32(p, dt, off, v));
    return LF_OK;
}
