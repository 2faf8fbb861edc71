/* FP8 on the GPU, what the case table (test_cases cuda: the quantizers' bytes, lf_scaled_mm
 * row-wise and in blocks, the gated kernel's e4m3 forms in every schedule, against float64) does
 * not hold: the refusals by name (K not a multiple of 16, a block-scaled M not a multiple of 4, a
 * scale of the wrong length), and the fp8 MLP against float64 and against its own recipe emulated
 * on the CPU, compiled, and through compile's --fp8 pass; part of test_cuda (test_cuda.c runs
 * them). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../testutil.h"
#include "backend/backend_impl.h"
#include "cuda_test.h"
#include "linfuse/compile.h"
#include "linfuse/nn.h"

/* A host copy of a GPU tensor. */
static lf_tensor *to_host(const lf_tensor *t)
{
    lf_tensor *h = NULL;
    if (lf_tensor_to_device(&h, t, LF_DEVICE_CPU) != LF_OK) {
        fprintf(stderr, "to_host: %s\n", lf_last_error());
        abort();
    }
    return h;
}

/* FP8 operands: a random (rows, cols) bf16 matrix quantized on the CPU, its codes and scales
 * there and on the GPU. */
typedef struct fp8_mat {
    lf_tensor *q, *s, *gq, *gs;
} fp8_mat;

static fp8_mat fp8_rand_as(lf_rng *rng, int64_t rows, int64_t cols, lf_scale_mode mode)
{
    fp8_mat m = {0};
    lf_tensor *w = rand_tensor(rng, LF_DTYPE_BF16, 2, (int64_t[]){rows, cols});
    const lf_status s = mode == LF_SCALE_1X128     ? lf_quantize_fp8_1x128(&m.q, &m.s, w)
                        : mode == LF_SCALE_128X128 ? lf_quantize_fp8_128x128(&m.q, &m.s, w)
                                                   : lf_quantize_fp8(&m.q, &m.s, w);
    if (s == LF_OK)
        m.gq = to_gpu(m.q), m.gs = to_gpu(m.s);
    lf_tensor_free(w);
    return m;
}

static fp8_mat fp8_rand(lf_rng *rng, int64_t rows, int64_t cols)
{
    return fp8_rand_as(rng, rows, cols, LF_SCALE_ROWS);
}

static void fp8_free(fp8_mat *m)
{
    lf_tensor_free(m->q), lf_tensor_free(m->s), lf_tensor_free(m->gq), lf_tensor_free(m->gs);
}

/* What the FP8 GEMMs refuse on the GPU, by name, with nothing handed out: K not a multiple of 16
 * (TMA's and cuBLASLt's 16-byte rows), a scale vector of the wrong length, cuBLASLt's block-scaled
 * GEMM at an M that is not a multiple of 4. (Where the gated kernel cannot tile a group,
 * lf_scaled_mm_gated computes it another way: a case of the table.) */
void test_scaled_refusals_gpu(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 67);
    fp8_mat x = fp8_rand(&rng, 33, 40), w = fp8_rand(&rng, 256, 40);
    lf_tensor *wt = NULL, *y = NULL;
    OK(lf_t(&wt, w.gq));
    FAILS(LF_EUNSUPPORTED, "multiples of 16", lf_scaled_mm(&y, x.gq, x.gs, wt, w.gs, LF_DTYPE_BF16));
    FAILS(LF_EUNSUPPORTED, "16 bytes", lf_scaled_mm_gated(&y, x.gq, x.gs, wt, w.gs, LF_ACT_SILU, 128));
    FAILS(LF_ESHAPE, "one per column of mat2", lf_scaled_mm(&y, x.gq, x.gs, wt, x.gs, LF_DTYPE_BF16));
    CHECK(!y, "nothing handed out on failure");
    lf_tensor_free(wt);
    fp8_free(&x), fp8_free(&w);
    fp8_mat xb = fp8_rand_as(&rng, 77, 256, LF_SCALE_1X128), wb = fp8_rand_as(&rng, 128, 256, LF_SCALE_128X128);
    OK(lf_t(&wt, wb.gq));
    FAILS(LF_EUNSUPPORTED, "M a multiple of 4", lf_scaled_mm(&y, xb.gq, xb.gs, wt, wb.gs, LF_DTYPE_BF16));
    CHECK(!y, "nothing handed out on failure");
    lf_tensor_free(wt);
    fp8_free(&xb), fp8_free(&wb);
}

/* The fp8 MLP on the GPU: against float64 of the unquantized module (the recipe's cost, beside the
 * bf16 gated forward's) and against the recipe emulated on the CPU from the same codes (x and
 * gate_up per row, h rounded to bf16 and quantized in 1 x 128 blocks as the gated kernel writes it,
 * the down weight in 128 x 128 blocks): the second isolates the kernels, whose only error is fp32
 * accumulation and bf16 results. GeGLU at an odd token count (333: padded to 336 for the down
 * GEMM), SwiGLU at the blog's size. */
static lf_status fp8_forward(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)n;
    return lf_nn_gated_mlp_forward_variant(ctx, LF_MLP_FP8, in[0], out);
}

static lf_status eager_forward(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)n;
    return lf_nn_gated_mlp_forward_variant(ctx, LF_MLP_EAGER, in[0], out);
}

/* Compile's FP8 gated pass on the module's eager forward: x quantized per token, the gated GEMM in
 * e4m3 with [Wg; Wu] quantized at compile time, down in bf16 (3 kernels, one graph), the bytes of
 * the same three steps run as ops. */
static void check_compile_fp8_pass(lf_nn_gated_mlp *gpu, lf_tensor *gx, lf_act act)
{
    lf_compile_opts co = lf_compile_opts_default();
    co.passes = LF_PASSES_ALL | LF_PASS_FP8;
    lf_compiled *c = NULL;
    lf_tensor *yc = NULL, *xq = NULL, *xs = NULL, *wt = NULL, *h = NULL, *dt = NULL, *ye = NULL;
    char *plan = NULL;
    OK(lf_compile(&c, eager_forward, gpu, 1, &gx, &co));
    if (!c)
        return;
    OK(lf_compiled_run(c, 1, &gx, &yc));
    OK(lf_compiled_describe(c, &plan));
    OK(lf_quantize_fp8(&xq, &xs, gx));
    OK(lf_t(&wt, gpu->gate_up_q));
    OK(lf_scaled_mm_gated(&h, xq, xs, wt, gpu->gate_up_scale, act, gpu->hidden));
    OK(lf_t(&dt, gpu->down.weight));
    OK(lf_mm(&ye, h, dt));
    lf_device_synchronize(LF_DEVICE_CUDA);
    const lf_compiled_stats st = lf_compiled_get_stats(c);
    lf_tensor *hc = yc ? to_host(yc) : NULL, *he = ye ? to_host(ye) : NULL;
    CHECK(st.kernels == 3 && st.graph && plan && strstr(plan, "fp8: nodes"),
          "compile --fp8 %s: %d kernels (3), graph %d; plan: %s", lf_act_name(act), st.kernels, st.graph,
          plan ? plan : "");
    CHECK(hc && he && lf_tensor_numel(hc) == lf_tensor_numel(he) &&
              !memcmp(lf_tensor_data(hc), lf_tensor_data(he), (size_t)lf_tensor_numel(he) * 2),
          "compile --fp8 %s: the bytes of quantize, scaled gated GEMM and bf16 down run as ops", lf_act_name(act));
    free(plan);
    lf_tensor *tl[] = {yc, xq, xs, wt, h, dt, ye, hc, he};
    for (size_t i = 0; i < sizeof tl / sizeof tl[0]; i++)
        lf_tensor_free(tl[i]);
    lf_compiled_free(c);
}

void test_fp8_mlp_gpu(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 71);
    static const int64_t shapes[][3] = {{333, 256, 512}, {1024, 768, 3072}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t T = shapes[si][0], D = shapes[si][1], H = shapes[si][2];
        const lf_act act = si ? LF_ACT_SILU : LF_ACT_GELU_TANH;
        lf_nn_gated_mlp cpu, gpu;
        lf_nn_gated_mlp_opts o = {D, H, LF_DTYPE_BF16, LF_DEVICE_CPU, act};
        lf_rng r2 = rng;
        OK(lf_nn_gated_mlp_init(&cpu, &o, &rng));
        OK(lf_nn_gated_mlp_init(&gpu, &o, &r2));
        OK(lf_nn_gated_mlp_quantize_fp8(&gpu));
        OK(lf_nn_gated_mlp_to_device(&gpu, LF_DEVICE_CUDA));
        CHECK(lf_tensor_device(gpu.gate_up_q) == LF_DEVICE_CUDA && lf_tensor_device(gpu.down_scale) == LF_DEVICE_CUDA,
              "the FP8 weights move with the module");
        lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, (int64_t[]){T, D}), *gx = to_gpu(x), *y8 = NULL, *yb = NULL;
        OK(lf_nn_gated_mlp_forward_variant(&gpu, LF_MLP_FP8, gx, &y8));
        OK(lf_nn_gated_mlp_forward_variant(&gpu, LF_MLP_GATED, gx, &yb));
        lf_tensor *h8 = to_host(y8), *hb = to_host(yb);
        double *X = to_f64(x), *GU = to_f64(cpu.gate_up), *WD = to_f64(cpu.down.weight);
        double *g = mm_nt(X, GU, T, 2 * H, D), *h = gated_mid(g, T, H, act);
        double *Xq = fp8_round_trip(x), *GUq = fp8_round_trip(cpu.gate_up),
               *WDq = fp8_round_trip_as(cpu.down.weight, LF_SCALE_128X128);
        double *gq = mm_nt(Xq, GUq, T, 2 * H, D), *mq = gated_mid(gq, T, H, act);
        double *ref = mm_nt(h, WD, T, D, H), *hq = fp8_round_trip_values(mq, T, H, LF_DTYPE_BF16, LF_SCALE_1X128),
               *emu = mm_nt(hq, WDq, T, D, H);
        double *Y8 = to_f64(h8), *YB = to_f64(hb), r8, m8, rb, mb, re, me;
        rel_errors(Y8, ref, T * D, &r8, &m8);
        rel_errors(YB, ref, T * D, &rb, &mb);
        rel_errors(Y8, emu, T * D, &re, &me);
        if (getenv("LF_TEST_VERBOSE"))
            printf("fp8 mlp %s %lldx%lldx%lld on the GPU: rel RMS / max vs float64 %.2e / %.2e (bf16 gated %.2e / "
                   "%.2e); vs the CPU emulation %.2e / %.2e\n",
                   lf_act_name(act), (long long)T, (long long)D, (long long)H, r8, m8, rb, mb, re, me);
        CHECK(r8 < 7.5e-2 && m8 < 1e-1, "fp8 mlp %s: rel RMS %.3g, max %.3g against float64 (bound 7.5e-2, 1e-1)",
              lf_act_name(act), r8, m8);
        CHECK(rb < 5e-3, "bf16 gated beside it: rel RMS %.3g", rb);
        CHECK(re < 1e-2, "fp8 mlp %s: rel RMS %.3g against the recipe emulated on the CPU (kernels only)",
              lf_act_name(act), re);
        /* compiled: the same three kernels in one CUDA graph, the same bytes as the eager forward */
        lf_compiled *c = NULL;
        lf_tensor *yc = NULL;
        OK(lf_compile(&c, fp8_forward, &gpu, 1, &gx, NULL));
        if (c) {
            OK(lf_compiled_run(c, 1, &gx, &yc));
            lf_device_synchronize(LF_DEVICE_CUDA);
            const lf_compiled_stats st = lf_compiled_get_stats(c);
            lf_tensor *hc = yc ? to_host(yc) : NULL;
            CHECK(hc && lf_tensor_numel(hc) == lf_tensor_numel(h8) &&
                      !memcmp(lf_tensor_data(hc), lf_tensor_data(h8), (size_t)lf_tensor_numel(h8) * 2),
                  "fp8 mlp %s compiled: the eager forward's bytes", lf_act_name(act));
            CHECK(st.kernels == 3 && st.graph, "fp8 mlp compiled: %d kernels (3), graph %d", st.kernels, st.graph);
            lf_tensor_free(hc);
        }
        lf_tensor_free(yc);
        lf_compiled_free(c);
        check_compile_fp8_pass(&gpu, gx, act);
        double *list[] = {X, GU, WD, g, h, Xq, GUq, WDq, gq, mq, ref, hq, emu, Y8, YB};
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
            free(list[i]);
        lf_tensor *tl[] = {x, gx, y8, yb, h8, hb};
        for (size_t i = 0; i < sizeof tl / sizeof tl[0]; i++)
            lf_tensor_free(tl[i]);
        lf_nn_gated_mlp_free(&cpu), lf_nn_gated_mlp_free(&gpu);
    }
}
