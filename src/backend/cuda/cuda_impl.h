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

/* Fused pointwise kernels built with NVRTC (fused_nvrtc.c). */
lf_status lf_cuda_fused_prepare(lf_fused *f, const char *cache_dir, int verbose);
lf_status lf_cuda_fused_launch(const lf_fused *f, cudaStream_t stream);
void lf_cuda_fused_release(lf_fused *f);

#ifdef __cplusplus
}
#endif
#endif
