/* DLPack in and out (linfuse/dlpack.h) on the CPU: tensors built here the way NumPy and PyTorch
 * export them (odd strides, offsets, transposed, broadcast, each dtype) come in without a copy
 * and compute the float64 answer; deleters run exactly once, when the last view goes, and never
 * on a refusal; tensors handed out describe the same bytes and drop their reference when their
 * deleter runs; every refusal names what it refused. tests/dlpack_numpy.py does the same through
 * NumPy's own exporter and importer. */
#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

#include "linfuse/dlpack.h"
#include "linfuse/ops.h"
#include "testutil.h"

/* A DLManagedTensor over a buffer of this test's, its deleter counted. */
typedef struct owned {
    DLManagedTensor mt;
    int64_t shape[5], strides[5];
    void *buf;
    int *deleted;
} owned;

static void owned_delete(DLManagedTensor *mt)
{
    owned *o = mt->manager_ctx;
    (*o->deleted)++;
    free(o->buf);
    free(o);
}

static owned *make(DLDataType dt, int ndim, const int64_t *shape, const int64_t *strides, size_t buf_elems,
                   uint64_t byte_offset, int *deleted)
{
    owned *o = calloc(1, sizeof *o);
    o->buf = calloc(buf_elems ? buf_elems : 1, 8);
    o->deleted = deleted;
    memcpy(o->shape, shape, (size_t)ndim * sizeof *shape);
    if (strides)
        memcpy(o->strides, strides, (size_t)ndim * sizeof *strides);
    DLTensor *d = &o->mt.dl_tensor;
    d->data = o->buf;
    d->device = (DLDevice){kDLCPU, 0};
    d->ndim = ndim;
    d->dtype = dt;
    d->shape = o->shape;
    d->strides = strides ? o->strides : NULL;
    d->byte_offset = byte_offset;
    o->mt.manager_ctx = o;
    o->mt.deleter = owned_delete;
    return o;
}

static const DLDataType F32 = {kDLFloat, 32, 1}, F16 = {kDLFloat, 16, 1}, BF16 = {kDLBfloat, 16, 1};

/* x (m, k) taken at an odd stride and offset, w (n, k) taken transposed as (k, n): x @ w^T equals
 * the float64 product of the values written into the buffers. */
static void test_mm_through_dlpack(void)
{
    enum { M = 7, K = 13, N = 5, LDX = 17, OFF = 3 };
    int dx = 0, dw = 0;
    const int64_t xs[2] = {M, K}, xst[2] = {LDX, 1};
    owned *x = make(F32, 2, xs, xst, OFF + M * LDX, OFF * 4, &dx);
    float *xb = x->buf;
    for (int i = 0; i < OFF + M * LDX; i++)
        xb[i] = NAN; /* what the view does not cover is poison */
    for (int i = 0; i < M; i++)
        for (int j = 0; j < K; j++)
            xb[OFF + i * LDX + j] = (float)((i * 7 + j * 3) % 11 - 5) / 8;
    const int64_t ws[2] = {K, N}, wst[2] = {1, K}; /* w^T: (k, n) over a row-major (n, k) buffer */
    owned *w = make(F32, 2, ws, wst, N * K, 0, &dw);
    float *wb = w->buf;
    for (int i = 0; i < N * K; i++)
        wb[i] = (float)((i * 5) % 9 - 4) / 4;
    lf_tensor *tx = NULL, *tw = NULL, *y = NULL;
    OK(lf_tensor_from_dlpack(&tx, &x->mt));
    OK(lf_tensor_from_dlpack(&tw, &w->mt));
    CHECK(lf_tensor_data(tx) == (char *)xb + OFF * 4, "no copy: the tensor reads the buffer at byte_offset");
    CHECK(tx->stride[0] == LDX && tw->stride[0] == 1 && tw->stride[1] == K, "strides kept");
    OK(lf_mm(&y, tx, tw));
    float got[M * N];
    OK(lf_tensor_to_f32(y, got, M * N));
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0;
            for (int k = 0; k < K; k++)
                ref += (double)xb[OFF + i * LDX + k] * wb[j * K + k];
            worst = fmax(worst, fabs(got[i * N + j] - ref));
        }
    CHECK(worst < 1e-5, "x @ w^T through DLPack: largest error %g", worst);
    /* a view keeps the memory: the deleter runs when the last one goes */
    lf_tensor *v = NULL;
    OK(lf_tensor_t(&v, tx));
    lf_tensor_free(tx);
    CHECK(dx == 0, "deleter ran while a view was alive");
    lf_tensor_free(v);
    CHECK(dx == 1, "deleter ran %d times after the last view went (expected once)", dx);
    lf_tensor_free(tw);
    CHECK(dw == 1, "w's deleter ran %d times", dw);
    lf_tensor_free(y);
}

/* f16 and bf16 with NULL strides (row-major) and a broadcast (stride 0) dim. */
static void test_dtypes(void)
{
    int d = 0;
    const int64_t s3[3] = {2, 3, 4};
    owned *h = make(F16, 3, s3, NULL, 24, 0, &d);
    uint16_t *hb = h->buf;
    for (int i = 0; i < 24; i++)
        hb[i] = lf_f16_from_f32((float)i - 11.5f);
    lf_tensor *th = NULL;
    OK(lf_tensor_from_dlpack(&th, &h->mt));
    CHECK(th->dtype == LF_DTYPE_F16 && th->stride[0] == 12 && th->stride[1] == 4 && th->stride[2] == 1,
          "NULL strides are row-major");
    float back[24];
    OK(lf_tensor_to_f32(th, back, 24));
    int same = 1;
    for (int i = 0; i < 24; i++)
        same &= back[i] == (float)i - 11.5f;
    CHECK(same, "f16 values read in place");
    lf_tensor_free(th);
    const int64_t sb[2] = {3, 4}, stb[2] = {0, 1}; /* one row, seen three times */
    owned *b = make(BF16, 2, sb, stb, 4, 0, &d);
    uint16_t *bb = b->buf;
    for (int i = 0; i < 4; i++)
        bb[i] = lf_bf16_from_f32((float)(i + 1));
    lf_tensor *tb = NULL, *sum = NULL;
    OK(lf_tensor_from_dlpack(&tb, &b->mt));
    OK(lf_add(&sum, tb, tb));
    float s[12];
    OK(lf_tensor_to_f32(sum, s, 12));
    CHECK(s[0] == 2 && s[4] == 2 && s[11] == 8, "a broadcast bf16 input: %g %g %g", s[0], s[4], s[11]);
    lf_tensor_free(tb), lf_tensor_free(sum);
    CHECK(d == 2, "two deleters ran, %d counted", d);
}

/* What cannot be taken is refused by name, and the caller keeps it (no deleter run). */
static void test_refusals(void)
{
    int d = 0;
    lf_tensor *t = NULL;
    const int64_t s2[2] = {2, 3}, s5[5] = {1, 1, 1, 1, 2}, neg[2] = {3, -1}, zero[2] = {2, 0};
    owned *o = make((DLDataType){kDLInt, 32, 1}, 2, s2, NULL, 6, 0, &d);
    FAILS(LF_EDTYPE, "int32", lf_tensor_from_dlpack(&t, &o->mt));
    o->mt.dl_tensor.dtype = (DLDataType){kDLFloat, 64, 1};
    FAILS(LF_EDTYPE, "float64", lf_tensor_from_dlpack(&t, &o->mt));
    o->mt.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 4};
    FAILS(LF_EDTYPE, "4 lanes", lf_tensor_from_dlpack(&t, &o->mt));
    o->mt.dl_tensor.dtype = (DLDataType){12, 8, 1}; /* float8_e5m2 */
    FAILS(LF_EDTYPE, "other than e4m3fn", lf_tensor_from_dlpack(&t, &o->mt));
    o->mt.dl_tensor.dtype = F32;
    o->mt.dl_tensor.device = (DLDevice){kDLROCM, 0};
    FAILS(LF_EDEVICE, "kDLROCM", lf_tensor_from_dlpack(&t, &o->mt));
    o->mt.dl_tensor.device = (DLDevice){kDLCUDA, 99};
    FAILS(LF_EDEVICE, "kDLCUDA device 99", lf_tensor_from_dlpack(&t, &o->mt));
    o->mt.dl_tensor.device = (DLDevice){kDLCPU, 0};
    o->mt.dl_tensor.byte_offset = 2;
    FAILS(LF_ESHAPE, "byte_offset 2", lf_tensor_from_dlpack(&t, &o->mt));
    o->mt.dl_tensor.byte_offset = 0;
    o->mt.dl_tensor.strides = o->strides;
    memcpy(o->strides, neg, sizeof neg);
    FAILS(LF_ESHAPE, "stride -1 of dim 1 is negative", lf_tensor_from_dlpack(&t, &o->mt));
    o->mt.dl_tensor.strides = NULL;
    o->mt.dl_tensor.ndim = 0;
    FAILS(LF_ESHAPE, "0 dims", lf_tensor_from_dlpack(&t, &o->mt));
    o->mt.dl_tensor.ndim = 5;
    o->mt.dl_tensor.shape = (int64_t *)s5;
    FAILS(LF_ESHAPE, "5 dims", lf_tensor_from_dlpack(&t, &o->mt));
    o->mt.dl_tensor.ndim = 2;
    o->mt.dl_tensor.shape = (int64_t *)zero;
    FAILS(LF_ESHAPE, NULL, lf_tensor_from_dlpack(&t, &o->mt));
    FAILS(LF_EINVAL, "'mt'", lf_tensor_from_dlpack(&t, NULL));
    CHECK(t == NULL && d == 0, "a refused tensor is left to its owner (%d deleters ran)", d);
    o->mt.dl_tensor.shape = o->shape;
    OK(lf_tensor_from_dlpack(&t, &o->mt)); /* and it is still good */
    lf_tensor_free(t);
    CHECK(d == 1, "deleter ran once");
}

/* Out and back in: the same bytes, offset and strides; the reference dropped by the deleter. */
static void test_out_and_in(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 5);
    lf_tensor *base = rand_padded(&rng, LF_DTYPE_BF16, 5, 6, 9, 4), *tt = NULL;
    OK(lf_tensor_t(&tt, base)); /* (6, 5), strides {1, 9}, offset 4 */
    DLManagedTensor *mt = NULL;
    OK(lf_tensor_to_dlpack(tt, &mt));
    const DLTensor *d = &mt->dl_tensor;
    CHECK(d->device.device_type == kDLCPU && d->dtype.code == kDLBfloat && d->dtype.bits == 16 && d->ndim == 2,
          "device, dtype, dims");
    CHECK(d->shape[0] == 6 && d->shape[1] == 5 && d->strides[0] == 1 && d->strides[1] == 9 && d->byte_offset == 8,
          "shape, strides and byte_offset of the transposed view: [%lld, %lld] {%lld, %lld} +%llu",
          (long long)d->shape[0], (long long)d->shape[1], (long long)d->strides[0], (long long)d->strides[1],
          (unsigned long long)d->byte_offset);
    CHECK((char *)d->data + d->byte_offset == lf_tensor_data(tt), "the same bytes");
    lf_tensor_free(tt);
    lf_tensor_free(base); /* mt keeps the storage */
    lf_tensor *back = NULL;
    OK(lf_tensor_from_dlpack(&back, mt)); /* linfuse owns mt now */
    float v[30];
    OK(lf_tensor_to_f32(back, v, 30));
    CHECK(!isnan(v[0]) && !isnan(v[29]), "read back within the view (padding is NaN)");
    lf_tensor_free(back); /* runs mt's deleter, which frees the last reference: ASan checks */
    DLManagedTensor *f8 = NULL;
    lf_tensor *q = NULL;
    const int64_t qs[1] = {8};
    OK(lf_tensor_empty(&q, LF_DTYPE_F8E4M3, 1, qs, LF_DEVICE_CPU));
    OK(lf_tensor_to_dlpack(q, &f8));
    CHECK(f8->dl_tensor.dtype.code == 10 && f8->dl_tensor.dtype.bits == 8, "f8e4m3 goes out as kDLFloat8_e4m3fn");
    lf_tensor *q2 = NULL;
    OK(lf_tensor_from_dlpack(&q2, f8));
    CHECK(q2->dtype == LF_DTYPE_F8E4M3, "and comes back as f8e4m3");
    lf_tensor_free(q2);
    lf_tensor_free(q);
    FAILS(LF_EINVAL, "'t'", lf_tensor_to_dlpack(NULL, &f8));
}

int main(void)
{
    test_mm_through_dlpack();
    test_dtypes();
    test_refusals();
    test_out_and_in();
    return lf_test_finish("test_dlpack");
}
