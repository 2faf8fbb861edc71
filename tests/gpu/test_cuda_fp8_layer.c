/* The fp8 MLP on a layer shaped like a trained one, read through the safetensors path: a SwiGLU
 * MLP written as a Hugging Face checkpoint writes it (model.layers.0.mlp.{gate,up,down}_proj,
 * bf16), loaded by lf_nn_gated_mlp_load, quantized and run on the GPU. No trained checkpoint can
 * reach this project's machines, so the layer is synthetic, with the structure trained layers are
 * known for and random data lacks: rows of weights at different scales with heavy tails, tokens
 * at different scales, a few input features that are large on every token (the outlier features
 * of LLM.int8) and two tokens with one massive activation (a thousand times the rest). The FP8
 * forward is stated against float64 of the loaded weights, beside the bf16 gated forward and
 * beside the per-token recipe emulated on the CPU, over all outputs and for the worst token (the
 * massive tokens' outputs would hide the others' error in an overall figure); part of test_cuda. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../testutil.h"
#include "cuda_test.h"
#include "linfuse/nn.h"
#include "linfuse/safetensors.h"

/* A standard normal value (Box-Muller; u1 kept away from 0). */
static double normal(lf_rng *rng)
{
    const double u1 = 1.0 - lf_rng_uniform(rng), u2 = lf_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* rows x cols weights: each row at its own scale (log-uniform over 4x around 1/sqrt(cols)), one
 * entry in 100 five times its row's spread. */
static lf_tensor *trained_like_weight(lf_rng *rng, int64_t rows, int64_t cols)
{
    float *v = malloc((size_t)(rows * cols) * sizeof *v);
    for (int64_t r = 0; r < rows; r++) {
        const double s = exp2(2.0 * lf_rng_uniform(rng) - 1.0) / sqrt((double)cols);
        for (int64_t c = 0; c < cols; c++)
            v[r * cols + c] = (float)(s * normal(rng) * (lf_rng_uniform(rng) < 0.01 ? 5.0 : 1.0));
    }
    lf_tensor *t = NULL;
    if (lf_tensor_from_f32(&t, LF_DTYPE_BF16, 2, (int64_t[]){rows, cols}, v, LF_DEVICE_CPU) != LF_OK) {
        fprintf(stderr, "trained_like_weight: %s\n", lf_last_error());
        abort();
    }
    free(v);
    return t;
}

/* Errors of y against ref (T x D) over all outputs and for the worst token. */
static void token_errors(const double *y, const double *ref, int64_t T, int64_t D, double *all, double *worst)
{
    double mx;
    rel_errors(y, ref, T * D, all, &mx);
    *worst = 0;
    for (int64_t t = 0; t < T; t++) {
        double r, m;
        rel_errors(y + t * D, ref + t * D, D, &r, &m);
        *worst = fmax(*worst, r);
    }
}

void test_fp8_layer_gpu(void)
{
    const int64_t T = 256, D = 512, H = 1408;
    if (!lf_test_tmpdir("lf_cuda_"))
        return;
    char path[128];
    snprintf(path, sizeof path, "%s", lf_test_path("trained_like_mlp.safetensors"));
    lf_rng rng;
    lf_rng_seed(&rng, 83);
    lf_tensor *w[3] = {trained_like_weight(&rng, H, D), trained_like_weight(&rng, H, D),
                       trained_like_weight(&rng, D, H)};
    lf_st_entry e[3] = {{"model.layers.0.mlp.gate_proj.weight", w[0]},
                        {"model.layers.0.mlp.up_proj.weight", w[1]},
                        {"model.layers.0.mlp.down_proj.weight", w[2]}};
    OK(lf_st_write(path, e, 3));
    float *xv = malloc((size_t)(T * D) * sizeof *xv);
    static const int64_t outlier_dims[4] = {7, 100, 311, 508};
    for (int64_t t = 0; t < T; t++) {
        const double s = exp2(4.0 * lf_rng_uniform(&rng) - 2.0);
        for (int64_t c = 0; c < D; c++)
            xv[t * D + c] = (float)(s * normal(&rng));
        for (int k = 0; k < 4; k++)
            xv[t * D + outlier_dims[k]] *= 30.f;
    }
    xv[3 * D + 100] = 1000.f, xv[200 * D + 311] = -1000.f; /* two massive activations */
    lf_tensor *x = NULL;
    OK(lf_tensor_from_f32(&x, LF_DTYPE_BF16, 2, (int64_t[]){T, D}, xv, LF_DEVICE_CPU));
    free(xv);

    lf_safetensors *st = NULL;
    lf_nn_gated_mlp m;
    OK(lf_st_open(&st, path));
    if (!st || !x || lf_nn_gated_mlp_load(&m, st, "model.layers.0.mlp", LF_ACT_SILU, LF_DTYPE_COUNT) != LF_OK) {
        CHECK(0, "trained-like layer: %s", lf_last_error());
        lf_st_close(st), lf_tensor_free(x), remove(path), remove(lf_test_dir);
        for (int i = 0; i < 3; i++)
            lf_tensor_free(w[i]);
        return;
    }
    /* float64 of the loaded weights, and the per-token recipe on the CPU (x, [Wg; Wu], h and down
     * each quantized per row, h from bf16 as a separate GEMM's output would be) */
    double *X = to_f64(x), *GU = to_f64(m.gate_up), *WD = to_f64(m.down.weight);
    double *g = mm_nt(X, GU, T, 2 * H, D), *h = gated_mid(g, T, H, LF_ACT_SILU);
    double *Xq = fp8_round_trip(x), *GUq = fp8_round_trip(m.gate_up), *gq = mm_nt(Xq, GUq, T, 2 * H, D),
           *mq = gated_mid(gq, T, H, LF_ACT_SILU);
    double *ref = mm_nt(h, WD, T, D, H), *hq = fp8_round_trip_values(mq, T, H, LF_DTYPE_BF16, LF_SCALE_ROWS),
           *WDq = fp8_round_trip(m.down.weight), *tok = mm_nt(hq, WDq, T, D, H);

    lf_tensor *gx = to_gpu(x), *y8 = NULL, *yb = NULL, *c8 = NULL, *cb = NULL;
    OK(lf_nn_gated_mlp_quantize_fp8(&m));
    OK(lf_nn_gated_mlp_to_device(&m, LF_DEVICE_CUDA));
    OK(lf_nn_gated_mlp_forward_variant(&m, LF_MLP_FP8, gx, &y8));
    OK(lf_nn_gated_mlp_forward_variant(&m, LF_MLP_GATED, gx, &yb));
    if (y8 && yb) {
        OK(lf_tensor_to_device(&c8, y8, LF_DEVICE_CPU));
        OK(lf_tensor_to_device(&cb, yb, LF_DEVICE_CPU));
    }
    if (c8 && cb) {
        double *Y8 = to_f64(c8), *YB = to_f64(cb), a8, w8, ab, wb, at, wt;
        token_errors(Y8, ref, T, D, &a8, &w8);
        token_errors(YB, ref, T, D, &ab, &wb);
        token_errors(tok, ref, T, D, &at, &wt);
        if (getenv("LF_TEST_VERBOSE"))
            printf("fp8 mlp on a trained-like layer (safetensors, silu %lldx%lldx%lld, outlier features, massive "
                   "activations): rel RMS vs float64 all / worst token: fp8 %.2e / %.2e, bf16 gated %.2e / %.2e, "
                   "per-token recipe emulated %.2e / %.2e\n",
                   (long long)T, (long long)D, (long long)H, a8, w8, ab, wb, at, wt);
        CHECK(a8 < 7.5e-2 && w8 < 1e-1,
              "fp8 on a trained-like layer: rel RMS %.3g overall, %.3g for the worst token (bounds 7.5e-2, 1e-1)", a8,
              w8);
        CHECK(ab < 5e-3 && wb < 1e-2, "bf16 gated on it: rel RMS %.3g overall, %.3g worst token", ab, wb);
        free(Y8), free(YB);
    }
    double *list[] = {X, GU, WD, g, h, Xq, GUq, gq, mq, ref, hq, WDq, tok};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        free(list[i]);
    lf_tensor *tl[] = {x, gx, y8, yb, c8, cb, w[0], w[1], w[2]};
    for (size_t i = 0; i < sizeof tl / sizeof tl[0]; i++)
        lf_tensor_free(tl[i]);
    lf_nn_gated_mlp_free(&m);
    lf_st_close(st);
    remove(path);
    remove(lf_test_dir);
}
