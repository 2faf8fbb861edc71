/* What test_cuda's files share: a tensor copied to the GPU (aborts on failure: a test that
 * cannot even upload has nothing to check), and the tests that live in test_cuda_mlp.c,
 * test_cuda_fp8.c and test_cuda_fp8_layer.c. */
#ifndef LF_TEST_CUDA_H
#define LF_TEST_CUDA_H

#include "linfuse/tensor.h"

lf_tensor *to_gpu(const lf_tensor *t);
void test_mlp_variants_gpu(void);
void test_mlp_decode_gpu(void);
void test_mlp_decode_race_gpu(void);
void test_scaled_refusals_gpu(void);
void test_fp8_mlp_gpu(void);
void test_fp8_layer_gpu(void);

#endif
