/* The gated MLP's pieces on the GPU: the hand-fused act*mul kernel against the GPU's own act then
 * mul, the gated GEMM (the few-token GEMV, the Hopper kernel in both its schedules, the fallback
 * for what it refuses) and every gated-MLP variant against float64; part of test_cuda
 * (test_cuda.c runs them). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../testutil.h"
#include "backend/backend_impl.h"
#include "cuda_test.h"
#include "linfuse/nn.h"

/* act(x W_g^T) * (x W_u^T) in float64 for rows step apart (large shapes: a sample of rows), W
 * (2H, K) in blocks of G rows; error against got (M, H) by the usual measure, and the relative RMS
 * error over those rows in *rms. */
static double gated_err(const lf_tensor *x, const lf_tensor *w, int64_t G, const lf_tensor *got, int64_t step,
                        lf_act act, double *rms)
{
    const int64_t M = x->shape[0], K = x->shape[1], H = w->shape[0] / 2;
    double *X = to_f64(x), *W = to_f64(w), *Y = to_f64(got), worst = 0, se = 0, sr = 0;
    double *ref = malloc((size_t)H * sizeof *ref), *mag = malloc((size_t)H * sizeof *mag);
    for (int64_t i = 0; i < M; i += step) {
        for (int64_t j = 0; j < H; j++) {
            const int64_t gr = j / G * 2 * G + j % G, ur = gr + G;
            double g = 0, u = 0, gm = 0, um = 0;
            for (int64_t k = 0; k < K; k++) {
                g += X[i * K + k] * W[gr * K + k], gm += fabs(X[i * K + k] * W[gr * K + k]);
                u += X[i * K + k] * W[ur * K + k], um += fabs(X[i * K + k] * W[ur * K + k]);
            }
            double a = lf_act_ref(act, g);
            ref[j] = a * u;
            mag[j] = (fabs(a) + gm) * (fabs(u) + um);
        }
        double e = worst_err(Y + i * H, ref, mag, H, got->dtype, NULL);
        worst = e > worst ? e : worst;
        for (int64_t j = 0; j < H; j++)
            se += (Y[i * H + j] - ref[j]) * (Y[i * H + j] - ref[j]), sr += ref[j] * ref[j];
    }
    free(X), free(W), free(Y), free(ref), free(mag);
    *rms = sqrt(se / sr);
    return worst;
}

/* The gated GEMM against float64 (the few-token GEMV up to 16 tokens, the Hopper kernel beyond,
 * in each of its three schedules): odd token counts, K not a multiple of its 64-step, gate/up stacked
 * (G = H) and interleaved in 128- and 64-row blocks (64: ping-pong only), a tile count that
 * leaves one ping-pong consumer idle, an output that is a padded view of a NaN-poisoned buffer
 * (nothing written outside it); then the shapes it refuses, which mm_gated computes through the
 * fallback. */
void test_gated_gemm(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 37);
    static const int64_t cases[][4] = {/* M, K, H, G */
                                       {1, 64, 128, 128},     {5, 776, 384, 128},    {16, 4096, 256, 256},
                                       {9, 520, 100, 100},    {77, 768, 384, 384},   {300, 136, 256, 128},
                                       {1000, 256, 512, 256}, {129, 4096, 128, 128}, {8192, 768, 3072, 3072},
                                       {200, 192, 320, 64},   {100, 64, 192, 64},    {1100, 704, 1152, 384}};
    static const lf_gated_schedule scheds[] = {LF_GATED_COOPERATIVE, LF_GATED_PINGPONG, LF_GATED_OFFLOAD};
    for (size_t cj = 0; cj < 6 * sizeof cases / sizeof cases[0]; cj++) {
        const size_t ci = cj / 6; /* each case in GeGLU's act, then SwiGLU's, in each schedule */
        const lf_act act = cj % 2 ? LF_ACT_SILU : LF_ACT_GELU_TANH;
        const lf_gated_schedule sched = scheds[cj / 2 % 3];
        const int64_t M = cases[ci][0], K = cases[ci][1], H = cases[ci][2], G = cases[ci][3], pad = 24;
        if (M <= 16 && sched != LF_GATED_COOPERATIVE) /* the GEMV has one schedule */
            continue;
        lf_gated_schedule_force(sched);
        const int pingpong = sched == LF_GATED_PINGPONG || G % 128, offload = !pingpong && sched == LF_GATED_OFFLOAD;
        int64_t xs[2] = {M, K}, ws[2] = {2 * H, K}, ds[2] = {M, H + pad};
        lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs), *w = rand_tensor(&rng, LF_DTYPE_BF16, 2, ws);
        lf_tensor *poison = NULL;
        OK(lf_tensor_empty(&poison, LF_DTYPE_BF16, 2, ds, LF_DEVICE_CPU));
        OK(lf_tensor_fill(poison, NAN));
        lf_tensor *gx = to_gpu(x), *gw = to_gpu(w), *gd = to_gpu(poison);
        lf_gemm g = {.ep = lf_epilogue_default()};
        g.ep.act = act, g.ep.gate = LF_GATE_PAIRED, g.ep.gate_group = G;
        g.a = (lf_matrix){lf_tensor_data(gx), LF_DTYPE_BF16, M, K, K, 1};
        g.b = (lf_matrix){lf_tensor_data(gw), LF_DTYPE_BF16, K, 2 * H, 1, K}; /* W^T */
        g.d = (lf_matrix){lf_tensor_data(gd), LF_DTYPE_BF16, M, H, H + pad, 1};
        char what[112];
        snprintf(what, sizeof what, "gated %s %lldx%lldx%lld G %lld %s", lf_act_name(act), (long long)M, (long long)K,
                 (long long)H, (long long)G,
                 pingpong  ? "ping-pong"
                 : offload ? "offload"
                           : "cooperative");
        lf_status s = lf_backend_gemm_supported(LF_DEVICE_CUDA, &g);
        CHECK(s == LF_OK, "%s: the Hopper kernel takes it: %s", what, s == LF_OK ? "" : lf_last_error());
        lf_kernel_info info = {0};
        s = lf_backend_gemm(LF_DEVICE_CUDA, &g, &info);
        CHECK(s == LF_OK, "%s: %s", what, lf_last_error());
        lf_device_synchronize(LF_DEVICE_CUDA);
        if (s == LF_OK) {
            /* 16 tokens or fewer take the memory-bound GEMV, more the Hopper kernel */
            const char *want = M <= 16 ? (act == LF_ACT_SILU ? "gated_gemv_bf16_silu" : "gated_gemv_bf16_gelu_tanh")
                               : act == LF_ACT_SILU ? "gated_gemm_bf16_silu"
                                                    : "gated_gemm_bf16_gelu_tanh";
            const char *tile = M <= 16    ? ""
                               : pingpong ? "_128x128_pingpong"
                               : offload  ? "_128x256_offload"
                                          : "_128x256";
            CHECK(info.name && strstr(info.name, want) && strstr(info.name, tile) &&
                      (offload || !strstr(info.name, "_offload")),
                  "%s: kernel name %s", what, info.name ? info.name : "(none)");
            if (info.timing)
                info.resolve(info.timing, &(int64_t){0}, &(int64_t){0});
            double *D = to_f64(gd), *packed = malloc((size_t)(M * H) * sizeof *packed);
            int64_t outside = 0, nan_inside = 0;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < H + pad; j++) {
                    double v = D[i * (H + pad) + j];
                    if (j < H)
                        packed[i * H + j] = v, nan_inside += isnan(v);
                    else
                        outside += !isnan(v);
                }
            CHECK(outside == 0 && nan_inside == 0, "%s: %lld writes outside the output, %lld NaNs left inside", what,
                  (long long)outside, (long long)nan_inside);
            /* gated_err reads a tensor: the packed result as one */
            float *pf = malloc((size_t)(M * H) * sizeof *pf);
            for (int64_t i = 0; i < M * H; i++)
                pf[i] = (float)packed[i];
            lf_tensor *got = NULL;
            OK(lf_tensor_from_f32(&got, LF_DTYPE_BF16, 2, (int64_t[]){M, H}, pf, LF_DEVICE_CPU));
            double rms = 0, e = gated_err(x, w, G, got, M > 2000 ? 61 : 1, act, &rms);
            CHECK(e < 1e-2, "%s: err %.3g against float64", what, e);
            if (getenv("LF_TEST_VERBOSE"))
                printf("%s: err %.3g, rel RMS %.3g against float64\n", what, e, rms);
            free(D), free(packed), free(pf);
            lf_tensor_free(got);
        }
        lf_tensor *list[] = {x, w, poison, gx, gw, gd};
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
            lf_tensor_free(list[i]);
    }
    lf_gated_schedule_force(LF_GATED_AUTO);

    /* refused shapes: the backend says why, mm_gated still computes them (GEMM + fused middle) */
    static const struct {
        lf_dtype dt;
        int64_t M, K, H, G;
        const char *why;
    } refused[] = {{LF_DTYPE_F16, 33, 64, 128, 128, "takes bf16 or scaled f8e4m3"},
                   {LF_DTYPE_BF16, 33, 64, 100, 100, "gate_group 100"},
                   {LF_DTYPE_BF16, 33, 60, 128, 128, "multiple of 16 bytes"},
                   {LF_DTYPE_BF16, 45, 64, 256, 32, "gate_group 32"}};
    for (size_t ri = 0; ri < sizeof refused / sizeof refused[0]; ri++) {
        const int64_t M = refused[ri].M, K = refused[ri].K, H = refused[ri].H, G = refused[ri].G;
        int64_t xs[2] = {M, K}, ws[2] = {2 * H, K};
        lf_tensor *x = rand_tensor(&rng, refused[ri].dt, 2, xs), *w = rand_tensor(&rng, refused[ri].dt, 2, ws);
        lf_tensor *gx = to_gpu(x), *gw = to_gpu(w), *gwt = NULL, *m = NULL;
        OK(lf_t(&gwt, gw));
        lf_gemm g = {.ep = lf_epilogue_default()};
        g.ep.act = LF_ACT_GELU_TANH, g.ep.gate = LF_GATE_PAIRED, g.ep.gate_group = G;
        g.a = (lf_matrix){lf_tensor_data(gx), refused[ri].dt, M, K, K, 1};
        g.b = (lf_matrix){lf_tensor_data(gw), refused[ri].dt, K, 2 * H, 1, K};
        lf_tensor *out = NULL;
        OK(lf_tensor_empty(&out, refused[ri].dt, 2, (int64_t[]){M, H}, LF_DEVICE_CUDA));
        g.d = (lf_matrix){lf_tensor_data(out), refused[ri].dt, M, H, H, 1};
        FAILS(LF_EUNSUPPORTED, refused[ri].why, lf_backend_gemm_supported(LF_DEVICE_CUDA, &g));
        const lf_act act = ri % 2 ? LF_ACT_SILU : LF_ACT_GELU_TANH; /* the fallback, in both activations */
        OK(lf_mm_gated(&m, gx, gwt, act, G));
        if (m) {
            double rms = 0, e = gated_err(x, w, G, m, 1, act, &rms);
            CHECK(e < 1e-2, "fallback %s G %lld: err %.3g", refused[ri].why, (long long)G, e);
        }
        lf_tensor *list[] = {x, w, gx, gw, gwt, m, out};
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
            lf_tensor_free(list[i]);
    }
}

/* Every MLP variant on the GPU against float64 (GeGLU at an odd size, SwiGLU at the blog's shape on a
 * sample of tokens), and
 * the fused forward equal to the eager one bit for bit; odd token count too. */
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

/* The hand-fused gelu_mul on the GPU equals the GPU's own gelu-then-mul bit for bit, on rows
 * that take the 16-byte path and rows that cannot (odd lengths, strided halves). */
void test_gelu_mul_gpu(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 31);
    static const int64_t sizes[][2] = {{1, 8}, {3, 7}, {17, 257}, {513, 3072}, {5, 40000}};
    for (int dt = 0; dt < LF_DTYPE_COUNT; dt++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int halves = 0; halves < 2; halves++) {
                const int64_t R = sizes[si][0], C = sizes[si][1];
                int64_t sh[2] = {R, halves ? 2 * C : C}, half[2] = {R, C}, st[2] = {halves ? 2 * C : C, 1};
                lf_tensor *hg = rand_tensor(&rng, (lf_dtype)dt, 2, sh), *hu = rand_tensor(&rng, (lf_dtype)dt, 2, sh);
                lf_tensor *dg = to_gpu(hg), *du = to_gpu(hu), *g = NULL, *u = NULL;
                OK(lf_tensor_as_strided(&g, dg, 2, half, st, 0));
                OK(lf_tensor_as_strided(&u, halves ? dg : du, 2, half, st, halves ? C : 0));
                for (int silu = 0; silu < 2; silu++) {
                    lf_tensor *f = NULL, *a = NULL, *two = NULL;
                    if (silu) {
                        OK(lf_silu_mul(&f, g, u));
                        OK(lf_silu(&a, g));
                    } else {
                        OK(lf_gelu_mul(&f, g, u, LF_GELU_TANH));
                        OK(lf_gelu(&a, g, LF_GELU_TANH));
                    }
                    OK(lf_mul(&two, a, u));
                    if (f && two) {
                        double *F = to_f64(f), *T = to_f64(two);
                        CHECK(!memcmp(F, T, (size_t)(R * C) * sizeof *F), "gpu %s == mul(act): %s %lldx%lld halves %d",
                              silu ? "silu_mul" : "gelu_mul", lf_dtype_name((lf_dtype)dt), (long long)R, (long long)C,
                              halves);
                        free(F), free(T);
                    }
                    lf_tensor_free(f), lf_tensor_free(a), lf_tensor_free(two);
                }
                lf_tensor *list[] = {hg, hu, dg, du, g, u};
                for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
                    lf_tensor_free(list[i]);
            }
}
