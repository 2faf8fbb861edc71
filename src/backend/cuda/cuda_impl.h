/* Inside the CUDA backend: what the C host code and the CUDA kernels file share.
 * Layer: backend/cuda. */
#ifndef LF_CUDA_IMPL_H
#define LF_CUDA_IMPL_H

#include <cuda_runtime.h>

#include "linfuse/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Launch the pointwise kernel for p on stream (any op, dtype and strides; 4-D index math). */
cudaError_t lf_cuda_pointwise_launch(const lf_pointwise *p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
