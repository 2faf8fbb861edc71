/* The gated MLP module on the GPU: every variant against float64 (GeGLU at an odd size, SwiGLU at
 * the blog's shape on a sample of tokens), its weights moved as views of gate_up, the fused forward
 * equal to the eager one bit for bit; part of test_cuda (test_cuda.c runs it). The gated GEMM and
 * act_mul themselves, in every schedule, are cases of the table (test_cases cuda). */
#include <stdlib.h>
#include <string.h>

#include "../testutil.h"
#include "cuda_test.h"
#include "linfuse/nn.h"

void test_mlp_variants_gpu(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 41);
    static const int64_t shapes[][4] = {{2, 33, 256, 384}, {1, 8192, 768, 3072}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t B = shapes[si][0], S = shapes[si][1], D = shapes[si][2], H = shapes[si][3];
        lf_nn_gated_mlp cpu, gpu;
        lf_nn_gated_mlp_opts o = {D, H, LF_DTYPE_BF16, LF_DEVICE_CPU, si ? LF_ACT_SILU : LF_ACT_GELU_TANH};
        lf_rng r2 = rng;
        OK(lf_nn_gated_mlp_init(&cpu, &o, &rng));
        OK(lf_nn_gated_mlp_init(&gpu, &o, &r2));
        OK(lf_nn_gated_mlp_to_device(&gpu, LF_DEVICE_CUDA));
        CHECK(lf_tensor_device(gpu.gate.weight) == LF_DEVICE_CUDA &&
                  lf_tensor_shares_storage(gpu.gate.weight, gpu.gate_up),
              "moved: the views follow gate_up to the GPU");
        int64_t xs[3] = {B, S, D};
        lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 3, xs), *gx = to_gpu(x);
        double *E = NULL;
        for (int v = 0; v < LF_MLP_VARIANT_COUNT; v++) {
            lf_tensor *y = NULL;
            OK(lf_nn_gated_mlp_forward_variant(&gpu, (lf_mlp_variant)v, gx, &y));
            if (!y)
                continue;
            double e = gated_mlp_err(&cpu, x, y, B * S > 1000 ? 97 : 1);
            CHECK(e < tol_for(LF_DTYPE_BF16), "mlp %s on GPU %lldx%lldx%lldx%lld vs float64: err %.3g",
                  lf_mlp_variant_name((lf_mlp_variant)v), (long long)B, (long long)S, (long long)D, (long long)H, e);
            double *Y = to_f64(y);
            if (v == LF_MLP_EAGER)
                E = Y, Y = NULL;
            else if (v == LF_MLP_FUSED && E)
                CHECK(!memcmp(Y, E, (size_t)(B * S * D) * sizeof *Y), "fused == eager bit for bit on the GPU");
            free(Y);
            lf_tensor_free(y);
        }
        free(E);
        lf_tensor_free(x), lf_tensor_free(gx);
        lf_nn_gated_mlp_free(&cpu), lf_nn_gated_mlp_free(&gpu);
    }
}
