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

/* The Hopper gated GEMM (gated_gemm.cu): whether it can run g (1), else 0 with why filled;
 * and its launch. */
int lf_cuda_gated_supported(const lf_gemm *g, char *why, size_t cap);
cudaError_t lf_cuda_gated_launch(const lf_gemm *g, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
