/* The gated MLP module on the GPU: every variant against float64 (GeGLU at an odd size, SwiGLU at
 * the blog's shape on a sample of tokens), its weights moved as views of gate_up, the fused forward
 * equal to the eager one bit for bit; a decode step's two kernels. Part of test_cuda (test_cuda.c
 * runs them). The gated GEMM and act_mul themselves, in every schedule, are cases of the table
 * (test_cases cuda). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../testutil.h"
#include "cuda_test.h"
#include "linfuse/backend.h"
#include "linfuse/compile.h"
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

static lf_status mlp_fwd(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)n;
    return lf_nn_gated_mlp_forward(ctx, in[0], out);
}

/* One GEMM on the GPU through the backend, with what it launched: info->name. */
static lf_status run_gemm(const lf_gemm *g, lf_kernel_info *info)
{
    memset(info, 0, sizeof *info);
    return lf_backend_gemm(LF_DEVICE_CUDA, g, info);
}

/* worst_err of y (M x D, on the GPU) against float64 of h (M x K, on the GPU) . w^T (+ bias, D):
 * the error measure of every numeric test, NaN the worst. */
static double down_err(const lf_tensor *h, const lf_tensor *w, const lf_tensor *bias, const lf_tensor *y, int64_t M,
                       int64_t D, int64_t K)
{
    double *H64 = to_f64(h), *Y64 = to_f64(y), *W64 = to_f64(w), *B64 = bias ? to_f64(bias) : NULL;
    double *R = mm_nt(H64, W64, M, D, K), *mag = calloc((size_t)(M * D), sizeof *mag);
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < D; j++) {
            mag[m * D + j] = B64 ? fabs(B64[j]) : 0;
            R[m * D + j] += B64 ? B64[j] : 0;
            for (int64_t k = 0; k < K; k++)
                mag[m * D + j] += fabs(H64[m * K + k] * W64[j * K + k]);
        }
    const double worst = worst_err(Y64, R, mag, M * D, LF_DTYPE_BF16, NULL);
    free(H64), free(Y64), free(W64), free(B64), free(R), free(mag);
    return worst;
}

/* A decode step's MLP (1 to 17 tokens; the gated GEMV, then the down projection that reads its h)
 * against float64, eager and compiled into a CUDA graph, at a dim that ends in a part tile and a
 * hidden size of 19 tiles; then which kernels ran: on Hopper (where the gated GEMM is the
 * TMA-fed GEMV) the down projection right after it is the GEMV's plain form, launched to overlap
 * it, and the same GEMM after anything else is cuBLASLt's (unless LINFUSE_GEMV_KERNEL says
 * otherwise). */
void test_mlp_decode_gpu(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 43);
    const int64_t D = 328, H = 1216;
    lf_nn_gated_mlp cpu, gpu;
    lf_nn_gated_mlp_opts o = {D, H, LF_DTYPE_BF16, LF_DEVICE_CPU, LF_ACT_SILU};
    lf_rng r2 = rng;
    OK(lf_nn_gated_mlp_init(&cpu, &o, &rng));
    OK(lf_nn_gated_mlp_init(&gpu, &o, &r2));
    OK(lf_nn_gated_mlp_to_device(&gpu, LF_DEVICE_CUDA));
    static const int64_t tokens[] = {1, 5, 13, 16, 17};
    for (size_t ti = 0; ti < sizeof tokens / sizeof tokens[0]; ti++) {
        int64_t xs[2] = {tokens[ti], D};
        lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs), *gx = to_gpu(x), *y = NULL;
        for (int rep = 0; rep < 2; rep++) { /* twice: the second forward follows the first's down GEMM */
            OK(lf_nn_gated_mlp_forward_variant(&gpu, LF_MLP_GATED, gx, &y));
            const double e = y ? gated_mlp_err(&cpu, x, y, 1) : 1e30;
            CHECK(e < tol_for(LF_DTYPE_BF16), "decode mlp, %lld tokens, forward %d vs float64: err %.3g",
                  (long long)tokens[ti], rep, e);
            lf_tensor_free(y), y = NULL;
        }
        if (ti == 0 || ti == 2) { /* compiled with the gated pass, one CUDA graph */
            lf_compile_opts co = lf_compile_opts_default();
            co.passes = LF_PASSES_ALL;
            lf_compiled *c = NULL;
            OK(lf_compile(&c, mlp_fwd, &gpu, 1, &gx, &co));
            for (int run = 0; c && run < 3; run++) {
                OK(lf_compiled_run(c, 1, &gx, &y));
                const double e = y ? gated_mlp_err(&cpu, x, y, 1) : 1e30;
                CHECK(e < tol_for(LF_DTYPE_BF16), "compiled decode mlp, %lld tokens, run %d vs float64: err %.3g",
                      (long long)tokens[ti], run, e);
                lf_tensor_free(y), y = NULL;
            }
            lf_compiled_free(c);
        }
        lf_tensor_free(x), lf_tensor_free(gx);
    }

    /* The kernels: x (1, D) . gate_up^T into h (1, H), then h . down^T into y (1, D). */
    int64_t xs[2] = {1, D}, hs[2] = {1, H};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs), *gx = to_gpu(x), *h = NULL, *y = NULL;
    OK(lf_tensor_empty(&h, LF_DTYPE_BF16, 2, hs, LF_DEVICE_CUDA));
    OK(lf_tensor_empty(&y, LF_DTYPE_BF16, 2, xs, LF_DEVICE_CUDA));
    lf_gemm gated = {.a = {lf_tensor_data(gx), LF_DTYPE_BF16, 1, D, D, 1},
                     .b = {lf_tensor_data(gpu.gate_up), LF_DTYPE_BF16, D, 2 * H, 1, D},
                     .d = {lf_tensor_data(h), LF_DTYPE_BF16, 1, H, H, 1},
                     .ep = {.alpha = 1.0f, .act = LF_ACT_SILU, .gate = LF_GATE_PAIRED, .gate_group = H}};
    lf_gemm down = {.a = {lf_tensor_data(h), LF_DTYPE_BF16, 1, H, H, 1},
                    .b = {lf_tensor_data(gpu.down.weight), LF_DTYPE_BF16, H, D, 1, H},
                    .d = {lf_tensor_data(y), LF_DTYPE_BF16, 1, D, D, 1},
                    .ep = {.alpha = 1.0f}};
    lf_gated_choice ch;
    OK(lf_gated_choose(LF_DEVICE_CUDA, &gated, &ch));
    const char *setting = getenv("LINFUSE_GEMV_KERNEL");
    const int tma = ch.kernel == LF_GATED_KERNEL_GEMV && ch.tile_m > 0, every = setting && !strcmp(setting, "tma");
    lf_kernel_info gi, after, alone;
    OK(run_gemm(&gated, &gi));
    OK(run_gemm(&down, &after));
    OK(run_gemm(&down, &alone));
    printf("decode step on the GPU: %s, then %s; the same down GEMM alone: %s\n", gi.name ? gi.name : "?",
           after.name ? after.name : "?", alone.name ? alone.name : "?");
    CHECK(after.name && !strcmp(after.name, tma ? "lf::gemv_tma::gemv_bf16_8x32" : alone.name),
          "the down GEMM after the gated GEMV: %s", after.name ? after.name : "?");
    CHECK(alone.name && (strstr(alone.name, "gemv_tma") != NULL) == (tma && every),
          "the down GEMM after another GEMM: %s", alone.name ? alone.name : "?");
    /* y against the float64 product of the h the GPU wrote */
    const double worst = down_err(h, cpu.down.weight, NULL, y, 1, D, H);
    CHECK(worst < tol_for(LF_DTYPE_BF16), "the down GEMM's y against float64 of its h: err %.3g", worst);
    lf_tensor_free(x), lf_tensor_free(gx), lf_tensor_free(h), lf_tensor_free(y);
    lf_nn_gated_mlp_free(&cpu), lf_nn_gated_mlp_free(&gpu);
}

/* The race the overlap could open, hunted: h poisoned with NaN before every gated GEMV, so a down
 * projection that read h before the gated kernel had finished would return NaN. At 3 and 16
 * tokens, a down GEMM whose ring goes round (K = 2560: 20 stages of two K steps, more than the
 * ring's 16), with a bias (f32 where the plain form runs), over D = 4200 outputs (132 tiles of 32,
 * one an SM, the last part filled) and D = 8424 (264 tiles: two CTAs share an SM, each with a
 * smaller ring); 100 steps each, every y the same bits as the first, the first against float64. */
static void decode_race(lf_rng *rng, int64_t D)
{
    const int64_t H = 2560;
    int64_t gs[2] = {2 * H, D}, ws[2] = {D, H}, bs[1] = {D};
    lf_tensor *gu = rand_tensor(rng, LF_DTYPE_BF16, 2, gs), *w = rand_tensor(rng, LF_DTYPE_BF16, 2, ws),
              *b32 = rand_tensor(rng, LF_DTYPE_F32, 1, bs), *b16 = rand_tensor(rng, LF_DTYPE_BF16, 1, bs);
    lf_tensor *ggu = to_gpu(gu), *gw = to_gpu(w), *gb32 = to_gpu(b32), *gb16 = to_gpu(b16);
    static const int64_t tokens[] = {3, 16};
    for (size_t ti = 0; ti < sizeof tokens / sizeof tokens[0]; ti++) {
        const int64_t M = tokens[ti];
        int64_t xs[2] = {M, D}, hs[2] = {M, H};
        lf_tensor *x = rand_tensor(rng, LF_DTYPE_BF16, 2, xs), *gx = to_gpu(x), *nan = NULL, *gnan = NULL;
        lf_tensor *h = NULL, *y = NULL;
        OK(lf_tensor_empty(&nan, LF_DTYPE_BF16, 2, hs, LF_DEVICE_CPU));
        OK(lf_tensor_fill(nan, NAN));
        gnan = to_gpu(nan);
        OK(lf_tensor_empty(&h, LF_DTYPE_BF16, 2, hs, LF_DEVICE_CUDA));
        OK(lf_tensor_empty(&y, LF_DTYPE_BF16, 2, xs, LF_DEVICE_CUDA));
        lf_gemm gated = {.a = {lf_tensor_data(gx), LF_DTYPE_BF16, M, D, D, 1},
                         .b = {lf_tensor_data(ggu), LF_DTYPE_BF16, D, 2 * H, 1, D},
                         .d = {lf_tensor_data(h), LF_DTYPE_BF16, M, H, H, 1},
                         .ep = {.alpha = 1.0f, .act = LF_ACT_SILU, .gate = LF_GATE_PAIRED, .gate_group = H}};
        lf_gated_choice ch;
        OK(lf_gated_choose(LF_DEVICE_CUDA, &gated, &ch));
        const int tma = ch.kernel == LF_GATED_KERNEL_GEMV && ch.tile_m > 0;
        /* An f32 bias where the plain form runs (cuBLASLt refuses one beside a bf16 output) */
        const lf_tensor *b = tma ? gb32 : gb16, *hb = tma ? b32 : b16;
        lf_gemm down = {
            .a = {lf_tensor_data(h), LF_DTYPE_BF16, M, H, H, 1},
            .b = {lf_tensor_data(gw), LF_DTYPE_BF16, H, D, 1, H},
            .d = {lf_tensor_data(y), LF_DTYPE_BF16, M, D, D, 1},
            .ep = {.alpha = 1.0f, .bias = lf_tensor_data(b), .bias_dtype = tma ? LF_DTYPE_F32 : LF_DTYPE_BF16}};
        const size_t bytes = (size_t)(M * D) * 2;
        unsigned char *first = malloc(bytes);
        int same = 1, named = 1;
        for (int step = 0; step < 100; step++) {
            lf_kernel_info gi, di;
            OK(lf_copy_out(h, gnan)); /* on the stream, before the gated GEMV */
            OK(run_gemm(&gated, &gi));
            OK(run_gemm(&down, &di));
            named &= di.name && (strstr(di.name, "gemv_tma") != NULL) == tma;
            lf_tensor *yh = NULL;
            OK(lf_tensor_to_device(&yh, y, LF_DEVICE_CPU));
            if (step == 0) {
                memcpy(first, lf_tensor_data(yh), bytes);
                const double e = down_err(h, w, hb, y, M, D, H);
                CHECK(e < tol_for(LF_DTYPE_BF16), "decode race, %lld x %lld: y against float64 of its h: err %.3g",
                      (long long)M, (long long)D, e);
            } else
                same &= !memcmp(first, lf_tensor_data(yh), bytes);
            lf_tensor_free(yh);
        }
        CHECK(same, "decode race, %lld x %lld: 100 steps, every y the same bits as the first", (long long)M,
              (long long)D);
        CHECK(named, "decode race, %lld x %lld: the down GEMM ran the %s", (long long)M, (long long)D,
              tma ? "TMA GEMV's plain form" : "cuBLASLt plan");
        free(first);
        lf_tensor_free(x), lf_tensor_free(gx), lf_tensor_free(nan), lf_tensor_free(gnan);
        lf_tensor_free(h), lf_tensor_free(y);
    }
    lf_tensor_free(gu), lf_tensor_free(w), lf_tensor_free(b32), lf_tensor_free(b16);
    lf_tensor_free(ggu), lf_tensor_free(gw), lf_tensor_free(gb32), lf_tensor_free(gb16);
}

void test_mlp_decode_race_gpu(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 47);
    decode_race(&rng, 4200);
    decode_race(&rng, 8424);
}
