/* DLPack in and out (linfuse/dlpack.h): a DLManagedTensor becomes a tensor over the same memory,
 * its deleter run when the storage's last view goes (the storage's release hook), and a tensor
 * goes out as a DLManagedTensor holding a view of it. DLPack is the ecosystem's exchange format;
 * its header comes from Debian's libdlpack-dev (version 0.6, which predates the FP8 codes: the one
 * linfuse stores, e4m3fn, is named here by its DLPack 1.1 value). Layer: tensor/. */
#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

#include "linfuse/dlpack.h"
#include "tensor/tensor_impl.h"

enum { DL_FLOAT8_E4M3FN = 10 }; /* DLPack 1.1's kDLFloat8_e4m3fn (torch.float8_e4m3fn) */

static const char *dl_device_name(int type)
{
    switch (type) {
    case kDLCPU:
        return "kDLCPU";
    case kDLCUDA:
        return "kDLCUDA";
    case kDLCUDAHost:
        return "kDLCUDAHost";
    case kDLOpenCL:
        return "kDLOpenCL";
    case kDLVulkan:
        return "kDLVulkan";
    case kDLMetal:
        return "kDLMetal";
    case kDLVPI:
        return "kDLVPI";
    case kDLROCM:
        return "kDLROCM";
    case kDLROCMHost:
        return "kDLROCMHost";
    case kDLExtDev:
        return "kDLExtDev";
    case kDLCUDAManaged:
        return "kDLCUDAManaged";
    case 14:
        return "kDLOneAPI"; /* DLPack 1.x device types */
    case 15:
        return "kDLWebGPU";
    case 16:
        return "kDLHexagon";
    case 17:
        return "kDLMAIA";
    default:
        return "an unknown device type";
    }
}

static const char *dl_code_name(int code)
{
    switch (code) {
    case kDLInt:
        return "int";
    case kDLUInt:
        return "uint";
    case kDLFloat:
        return "float";
    case kDLOpaqueHandle:
        return "opaque handle";
    case kDLBfloat:
        return "bfloat";
    case kDLComplex:
        return "complex";
    case 6:
        return "bool";
    case DL_FLOAT8_E4M3FN:
        return "float8_e4m3fn";
    default:
        return code >= 7 && code <= 17 ? "an FP8/FP6/FP4 type other than e4m3fn" : "an unknown type code";
    }
}

/* linfuse's dtype for a DLPack dtype, or a refusal naming it. */
static lf_status dtype_from_dl(DLDataType t, lf_dtype *out)
{
    if (t.lanes != 1)
        return lf_fail(LF_EDTYPE, "lf_tensor_from_dlpack: dtype %s%u with %u lanes: linfuse takes one lane",
                       dl_code_name(t.code), t.bits, t.lanes);
    if (t.code == kDLFloat && t.bits == 32)
        *out = LF_DTYPE_F32;
    else if (t.code == kDLFloat && t.bits == 16)
        *out = LF_DTYPE_F16;
    else if (t.code == kDLBfloat && t.bits == 16)
        *out = LF_DTYPE_BF16;
    else if (t.code == DL_FLOAT8_E4M3FN && t.bits == 8)
        *out = LF_DTYPE_F8E4M3;
    else
        return lf_fail(LF_EDTYPE,
                       "lf_tensor_from_dlpack: dtype %s%u (DLPack code %u, %u bits) is none linfuse has (float32, "
                       "float16, bfloat16, float8_e4m3fn)%s",
                       dl_code_name(t.code), t.bits, t.code, t.bits,
                       t.code == kDLFloat || t.code == kDLBfloat || t.code == kDLInt || t.code == kDLUInt
                           ? ": cast it to one of them first (float32 for a float64's range)"
                           : "");
    return LF_OK;
}

static void run_deleter(void *ctx)
{
    DLManagedTensor *mt = ctx;
    if (mt->deleter)
        mt->deleter(mt);
}

/* The linfuse device of a DLPack device: kDLCPU and pinned host memory (the CPU reads it as any
 * other) are the CPU, kDLCUDA device N GPU N; anything else is refused by name. */
static lf_status device_from_dl(DLDevice dv, lf_device *dev, int *index)
{
    *index = 0;
    switch (dv.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
        *dev = LF_DEVICE_CPU;
        return LF_OK;
    case kDLCUDA:
        if (dv.device_id < 0 || dv.device_id >= LF_MAX_DEVICE_INDEX)
            return lf_fail(LF_EDEVICE, "lf_tensor_from_dlpack: kDLCUDA device %d: linfuse takes GPUs 0 to %d",
                           dv.device_id, LF_MAX_DEVICE_INDEX - 1);
        *dev = LF_DEVICE_CUDA;
        *index = dv.device_id;
        return LF_OK;
    default:
        return lf_fail(LF_EDEVICE,
                       "lf_tensor_from_dlpack: device type %d (%s): linfuse takes kDLCPU, kDLCUDAHost and kDLCUDA",
                       (int)dv.device_type, dl_device_name((int)dv.device_type));
    }
}

/* d's strides in elements (contiguous ones where it gives none); negative ones refused. */
static lf_status strides_from_dl(const DLTensor *d, int64_t stride[LF_MAX_DIMS])
{
    if (!d->strides) {
        lf_contiguous_strides(d->ndim, d->shape, stride);
        return LF_OK;
    }
    for (int i = 0; i < d->ndim; i++) {
        if (d->strides[i] < 0)
            return lf_fail(LF_ESHAPE,
                           "lf_tensor_from_dlpack: stride %lld of dim %d is negative: linfuse takes strides >= 0 "
                           "(make the array contiguous first)",
                           (long long)d->strides[i], i);
        stride[i] = d->strides[i];
    }
    return LF_OK;
}

/* The farthest element the view reaches from the data pointer (*last), counting offset; refused
 * past 2^62 bytes of elements of es bytes. */
static lf_status reach_of(const DLTensor *d, const int64_t *stride, int64_t offset, size_t es, uint64_t *last)
{
    *last = (uint64_t)offset;
    for (int i = 0; i < d->ndim; i++) {
        uint64_t step;
        if (__builtin_mul_overflow((uint64_t)(d->shape[i] - 1), (uint64_t)stride[i], &step) ||
            __builtin_add_overflow(*last, step, last))
            return lf_fail(LF_EOVERFLOW, "lf_tensor_from_dlpack: shape and strides reach past 2^64 elements");
    }
    if (*last >= ((uint64_t)1 << 62) / es)
        return lf_fail(LF_EOVERFLOW, "lf_tensor_from_dlpack: shape and strides reach past 2^62 bytes");
    return LF_OK;
}

lf_status lf_tensor_from_dlpack(lf_tensor **out, struct DLManagedTensor *mt)
{
    LF_CHECK_PTR(out, "lf_tensor_from_dlpack", "out");
    *out = NULL;
    LF_CHECK_PTR(mt, "lf_tensor_from_dlpack", "mt");
    const DLTensor *d = &mt->dl_tensor;
    lf_device dev = LF_DEVICE_CPU; /* set by device_from_dl; -O3 cannot see it */
    int index;
    LF_TRY(device_from_dl(d->device, &dev, &index));
    lf_dtype dt = LF_DTYPE_F32;
    LF_TRY(dtype_from_dl(d->dtype, &dt));
    if (d->ndim < 1 || d->ndim > LF_MAX_DIMS)
        return lf_fail(LF_ESHAPE, "lf_tensor_from_dlpack: %d dims: linfuse takes 1 to %d (a scalar is a [1] tensor)",
                       d->ndim, LF_MAX_DIMS);
    LF_CHECK_PTR(d->shape, "lf_tensor_from_dlpack", "dl_tensor.shape");
    if (!d->data)
        return lf_fail(LF_EINVAL, "lf_tensor_from_dlpack: dl_tensor.data is NULL");
    const size_t es = lf_dtype_size(dt);
    if (d->byte_offset % es)
        return lf_fail(LF_ESHAPE, "lf_tensor_from_dlpack: byte_offset %llu is not a multiple of %s's %zu bytes",
                       (unsigned long long)d->byte_offset, lf_dtype_name(dt), es);
    if (((uintptr_t)d->data + d->byte_offset) % es)
        return lf_fail(LF_ESHAPE,
                       "lf_tensor_from_dlpack: the data at %p + %llu bytes is not aligned to %s's %zu bytes (copy the "
                       "array into aligned memory first)",
                       d->data, (unsigned long long)d->byte_offset, lf_dtype_name(dt), es);
    int64_t numel;
    LF_TRY(lf_shape_check("lf_tensor_from_dlpack", d->ndim, d->shape, dt, &numel));
    int64_t stride[LF_MAX_DIMS];
    LF_TRY(strides_from_dl(d, stride));
    const int64_t offset = (int64_t)(d->byte_offset / es);
    uint64_t last;
    LF_TRY(reach_of(d, stride, offset, es, &last));
    /* the storage: the bytes the view reaches, the producer's deleter run when the last view goes */
    return lf_tensor_over(out, "lf_tensor_from_dlpack", dev, index, dt, d->ndim, d->shape, stride, offset, d->data,
                          (size_t)(last + 1) * es, run_deleter, mt);
}

/* What lf_tensor_to_dlpack hands out: the struct DLPack defines, the arrays it points at, and
 * the view that keeps the storage alive. */
typedef struct exported {
    DLManagedTensor mt;
    int64_t shape[LF_MAX_DIMS], strides[LF_MAX_DIMS];
    lf_tensor *view;
} exported;

static void exported_delete(DLManagedTensor *mt)
{
    exported *e = mt->manager_ctx;
    lf_tensor_free(e->view);
    free(e);
}

lf_status lf_tensor_to_dlpack(const lf_tensor *t, struct DLManagedTensor **out)
{
    LF_CHECK_PTR(out, "lf_tensor_to_dlpack", "out");
    *out = NULL;
    LF_CHECK_PTR(t, "lf_tensor_to_dlpack", "t");
    if (!lf_dtype_known(t->dtype))
        return lf_fail(LF_EDTYPE, "lf_tensor_to_dlpack: the tensor's dtype %d is none linfuse has", (int)t->dtype);
    if (t->ndim < 1 || t->ndim > LF_MAX_DIMS || !t->storage)
        return lf_fail(LF_ESHAPE, "lf_tensor_to_dlpack: the tensor has %d dims (1 to %d) or no storage", t->ndim,
                       LF_MAX_DIMS);
    exported *e = calloc(1, sizeof *e);
    if (!e)
        return lf_fail(LF_ENOMEM, "lf_tensor_to_dlpack: out of host memory");
    lf_status st = lf_tensor_alias(&e->view, t, t->ndim, t->shape, t->stride, t->offset);
    if (st != LF_OK) {
        free(e);
        return st;
    }
    const lf_storage *s = t->storage;
    DLTensor *d = &e->mt.dl_tensor;
    d->data = s->data; /* the storage's start: DLPack's byte_offset carries the view's offset */
    d->device.device_type = s->device == LF_DEVICE_CUDA ? kDLCUDA : kDLCPU;
    d->device.device_id = s->device == LF_DEVICE_CUDA ? s->index : 0;
    d->ndim = t->ndim;
    switch (t->dtype) {
    case LF_DTYPE_F32:
        d->dtype = (DLDataType){kDLFloat, 32, 1};
        break;
    case LF_DTYPE_F16:
        d->dtype = (DLDataType){kDLFloat, 16, 1};
        break;
    case LF_DTYPE_BF16:
        d->dtype = (DLDataType){kDLBfloat, 16, 1};
        break;
    default:
        d->dtype = (DLDataType){DL_FLOAT8_E4M3FN, 8, 1};
        break;
    }
    memcpy(e->shape, t->shape, (size_t)t->ndim * sizeof *e->shape);
    memcpy(e->strides, t->stride, (size_t)t->ndim * sizeof *e->strides);
    d->shape = e->shape;
    d->strides = e->strides;
    d->byte_offset = (uint64_t)t->offset * lf_dtype_size(t->dtype);
    e->mt.manager_ctx = e;
    e->mt.deleter = exported_delete;
    *out = &e->mt;
    return LF_OK;
}
