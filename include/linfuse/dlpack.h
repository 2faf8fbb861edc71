/* DLPack in and out: linfuse tensors exchanged with NumPy, PyTorch, JAX, CuPy or any library that
 * speaks DLPack (github.com/dmlc/dlpack), without copying a byte. Include <dlpack/dlpack.h>
 * (Debian's libdlpack-dev) to build a DLManagedTensor; this header only names the struct.
 *
 * Taken: a CPU tensor (kDLCPU, and kDLCUDAHost: pinned host memory) or a tensor on GPU N
 * (kDLCUDA, device_id N); f32, f16, bf16 (kDLFloat 32/16, kDLBfloat 16) and FP8 E4M3 "fn"
 * (DLPack 1.1's kDLFloat8_e4m3fn, code 10), one lane; 1 to 4 dims, each >= 1; any strides >= 0
 * in elements (NULL: row-major), and a byte_offset that is a multiple of the element size. What
 * cannot be taken is refused with a message naming the dtype, device, dims or stride.
 * Layer: tensor/. */
#ifndef LINFUSE_DLPACK_H
#define LINFUSE_DLPACK_H

#include "linfuse/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct DLManagedTensor;

/* A linfuse tensor over mt's memory, with its shape and strides: no copy. On success linfuse owns
 * mt: its deleter runs once, when the last linfuse view of that memory is freed (views made from
 * *out share it), on the thread that frees it. On failure nothing is taken: mt is still the
 * caller's, its deleter not run. On a GPU the deleter's running says nothing of linfuse's queued
 * work: free the last view once that work is done, or in its stream's order (the producer's
 * memory is then reused after it, as PyTorch's allocator does on its current stream, which is
 * where linfuse works when handed that stream: linfuse/cuda.h). */
LF_API lf_status lf_tensor_from_dlpack(lf_tensor **out, struct DLManagedTensor *mt);

/* t handed out as a DLManagedTensor over the same memory, with t's shape, strides and offset
 * (in byte_offset): no copy. It holds a reference to t's storage, so t may be freed at once;
 * the consumer calls (*out)->deleter(*out) when done, which drops that reference. On a GPU the
 * consumer orders its reads after linfuse's work on t (the same stream, or a synchronize). */
LF_API lf_status lf_tensor_to_dlpack(const lf_tensor *t, struct DLManagedTensor **out);

#ifdef __cplusplus
}
#endif
#endif
