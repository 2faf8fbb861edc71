/* FP8 on the GPU: the quantization kernels (per row, padded, in 1 x 128 and 128 x 128 blocks) byte for byte
 * against the CPU's, cuBLASLt's scaled GEMMs (row-wise and block-scaled) and the gated kernel's
 * e4m3 forms against float64 sums of the decoded operands (exact inputs: the only error is fp32
 * accumulation and the rounded result), and the fp8 MLP against float64 and against its own recipe
 * emulated on the CPU; part of test_cuda (test_cuda.c runs them). */
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

/* The CUDA kernels write the CPU's codes and scales exactly: bf16 with an odd row length, a row of
 * zeros, a row of values near 1e-38 (its scale held at 2^-126) and an outlier; f32; transposed (column-major) views; contiguous bf16 rows of 4096 and
 * 14336 (the vectorized kernel) and of 16392 (past its limit: the generic one). */
void test_quantize_gpu(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 61);
    static const struct {
        lf_dtype dt;
        int64_t R, C;
        int transposed;
    } cases[] = {{LF_DTYPE_BF16, 37, 777, 0},
                 {LF_DTYPE_F32, 5, 4096, 0},
                 {LF_DTYPE_F16, 65, 37, 1},
                 {LF_DTYPE_BF16, 3, 14336, 0},
                 {LF_DTYPE_BF16, 300, 64, 1},
                 {LF_DTYPE_BF16, 257, 4096, 0},
                 {LF_DTYPE_BF16, 2, 16392, 0},
                 /* per row, a warp a row: 4, 8 and 16 pieces a lane, some lanes without one */
                 {LF_DTYPE_BF16, 33, 768, 0},
                 {LF_DTYPE_BF16, 6, 1032, 0},
                 {LF_DTYPE_BF16, 5, 2056, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int64_t R = cases[ci].R, C = cases[ci].C;
        lf_tensor *w = NULL;
        if (cases[ci].transposed) {
            w = rand_colmajor(&rng, cases[ci].dt, R, C);
        } else {
            float *f = malloc((size_t)(R * C) * sizeof *f);
            for (int64_t i = 0; i < R * C; i++)
                f[i] = 2.f * (float)lf_rng_uniform(&rng) - 1.f;
            memset(f + (R > 2 ? C : 0), 0, (size_t)C * sizeof *f); /* a row of zeros */
            for (int64_t i = 0; R > 3 && i < C; i++)               /* a row whose scale would be subnormal */
                f[2 * C + i] *= 1e-38f;
            f[R * C - 3] = 250.f;                                  /* an outlier in the last row */
            OK(lf_tensor_from_f32(&w, cases[ci].dt, 2, (int64_t[]){R, C}, f, LF_DEVICE_CPU));
            free(f);
        }
        lf_tensor *gw = NULL, *q = NULL, *s = NULL, *gq = NULL, *gs = NULL;
        OK(lf_tensor_to_device(&gw, w, LF_DEVICE_CUDA)); /* keeps the view's strides */
        OK(lf_quantize_fp8(&q, &s, w));
        OK(lf_quantize_fp8(&gq, &gs, gw));
        CHECK(lf_tensor_device(gq) == LF_DEVICE_CUDA && lf_tensor_device(gs) == LF_DEVICE_CUDA,
              "the codes and scales stay on the GPU");
        lf_tensor *hq = to_host(gq), *hs = to_host(gs);
        int64_t code_diff = 0, scale_diff = 0;
        const uint8_t *a = lf_tensor_data(q), *b = lf_tensor_data(hq);
        for (int64_t i = 0; i < R * C; i++)
            code_diff += a[i] != b[i];
        for (int64_t r = 0; r < R; r++)
            scale_diff += ((const float *)lf_tensor_data(s))[r] != ((const float *)lf_tensor_data(hs))[r];
        CHECK(!code_diff && !scale_diff, "%s %lldx%lld%s: %lld codes and %lld scales differ from the CPU's",
              lf_dtype_name(cases[ci].dt), (long long)R, (long long)C, cases[ci].transposed ? " transposed" : "",
              (long long)code_diff, (long long)scale_diff);
        /* the same in 1 x 128 and 128 x 128 blocks (padding scales included), and per row into 3
         * padding rows */
        static const char *const forms[3] = {"in 1 x 128 blocks", "in 128 x 128 blocks", "padded to 3 more rows"};
        for (int form = 0; form < 3; form++) {
            lf_tensor *q2 = NULL, *s2 = NULL, *gq2 = NULL, *gs2 = NULL;
            OK(form == 2 ? lf_quantize_fp8_rows(&q2, &s2, w, R + 3)
                         : form ? lf_quantize_fp8_128x128(&q2, &s2, w) : lf_quantize_fp8_1x128(&q2, &s2, w));
            OK(form == 2 ? lf_quantize_fp8_rows(&gq2, &gs2, gw, R + 3)
                         : form ? lf_quantize_fp8_128x128(&gq2, &gs2, gw) : lf_quantize_fp8_1x128(&gq2, &gs2, gw));
            lf_tensor *hq2 = to_host(gq2), *hs2 = to_host(gs2);
            const int same = lf_tensor_numel(q2) == lf_tensor_numel(hq2) && lf_tensor_numel(s2) == lf_tensor_numel(hs2) &&
                             !memcmp(lf_tensor_data(q2), lf_tensor_data(hq2), (size_t)lf_tensor_numel(q2)) &&
                             !memcmp(lf_tensor_data(s2), lf_tensor_data(hs2), (size_t)lf_tensor_numel(s2) * 4);
            CHECK(same, "%s %lldx%lld%s %s: the GPU's codes and scales are the CPU's", lf_dtype_name(cases[ci].dt),
                  (long long)R, (long long)C, cases[ci].transposed ? " transposed" : "", forms[form]);
            lf_tensor *l2[] = {q2, s2, gq2, gs2, hq2, hs2};
            for (size_t i = 0; i < sizeof l2 / sizeof l2[0]; i++)
                lf_tensor_free(l2[i]);
        }
        lf_tensor *list[] = {w, gw, q, s, gq, gs, hq, hs};
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
            lf_tensor_free(list[i]);
    }
}

/* Exact FP8 operands: a random (rows, cols) bf16 matrix quantized on the CPU; codes, scales and
 * the decoded values (code x scale, float64) handed out, the first two also on the GPU. */
typedef struct fp8_mat {
    lf_tensor *q, *s, *gq, *gs;
    double *v;
} fp8_mat;

static fp8_mat fp8_rand_as(lf_rng *rng, int64_t rows, int64_t cols, lf_scale_mode mode)
{
    fp8_mat m = {0};
    lf_tensor *w = rand_tensor(rng, LF_DTYPE_BF16, 2, (int64_t[]){rows, cols});
    const lf_status s = mode == LF_SCALE_1X128     ? lf_quantize_fp8_1x128(&m.q, &m.s, w)
                        : mode == LF_SCALE_128X128 ? lf_quantize_fp8_128x128(&m.q, &m.s, w)
                                                   : lf_quantize_fp8(&m.q, &m.s, w);
    if (s == LF_OK) {
        m.gq = to_gpu(m.q), m.gs = to_gpu(m.s);
        m.v = fp8_round_trip_as(w, mode);
    }
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
    free(m->v);
}

/* The worst error (worst_err's measure) of got (M, N) against x . w^T of decoded values, every
 * `step`-th row, with act(g) * u pairing (G-row blocks of w) when gated. */
static double decoded_err(const double *X, const double *W, int64_t M, int64_t K, int64_t N, int gated, int64_t G,
                          lf_act act, const lf_tensor *got, int64_t step)
{
    const int64_t NO = gated ? N / 2 : N;
    double *Y = to_f64(got), *ref = malloc((size_t)NO * sizeof *ref), *mag = malloc((size_t)NO * sizeof *mag), worst = 0;
    for (int64_t i = 0; i < M; i += step) {
        for (int64_t j = 0; j < NO; j++) {
            const int64_t gr = gated ? j / G * 2 * G + j % G : j, ur = gr + G;
            double g = 0, u = 0, gm = 0, um = 0;
            for (int64_t k = 0; k < K; k++) {
                g += X[i * K + k] * W[gr * K + k], gm += fabs(X[i * K + k] * W[gr * K + k]);
                if (gated)
                    u += X[i * K + k] * W[ur * K + k], um += fabs(X[i * K + k] * W[ur * K + k]);
            }
            if (gated) {
                const double a = lf_act_ref(act, g);
                ref[j] = a * u, mag[j] = (fabs(a) + gm) * (fabs(u) + um);
            } else {
                ref[j] = g, mag[j] = gm;
            }
        }
        const double e = worst_err(Y + i * NO, ref, mag, NO, got->dtype, NULL);
        worst = e > worst ? e : worst;
    }
    free(Y), free(ref), free(mag);
    return worst;
}

/* The gated kernel writing e4m3 h (lf_scaled_mm_gated_fp8's fused path) against the float64
 * reference's: the same GEMM with an f8e4m3 d on the CPU copies of the operands. The two differ
 * in fp32 accumulation order and in the activations' fast approximations (tanh.approx's 2^-11,
 * __expf), which can move a bf16 rounding and so a code by one step (1-2% of them, measured on an
 * H200): every decoded value within one step (and a scale's bf16 step) of the reference's or within
 * 2^-8 of its block's largest (tanh.approx's error near gelu's zero, relative to h's scale), codes
 * equal but for 4%, scales within one bf16 step; padded output bytes and the scales' padding rows
 * as they must be.
 * Then lf_scaled_mm_gated_fp8 at a gate_group the kernel cannot tile (64): the two-step path, with
 * its note, against the same reference. */
static void test_gated_fp8_out(lf_rng *rng)
{
    static const int64_t shapes[][4] = {{5, 784, 384, 128}, {300, 144, 256, 128}, {1000, 256, 512, 256},
                                        {256, 512, 1536, 1536}, {200, 192, 320, 64}};
    for (size_t cj = 0; cj < 2 * sizeof shapes / sizeof shapes[0]; cj++) {
        const size_t ci = cj / 2;
        const lf_act act = cj % 2 ? LF_ACT_SILU : LF_ACT_GELU_TANH;
        const int64_t M = shapes[ci][0], K = shapes[ci][1], H = shapes[ci][2], G = shapes[ci][3], pad = 32;
        const int64_t LD = LF_SCALE_LD(M), NB = LF_SCALE_BLOCKS(H);
        fp8_mat x = fp8_rand(rng, M, K), w = fp8_rand(rng, 2 * H, K);
        char what[112];
        snprintf(what, sizeof what, "fp8 gated to e4m3 %s %lldx%lldx%lld G %lld", lf_act_name(act), (long long)M,
                 (long long)K, (long long)H, (long long)G);
        /* the reference on the CPU copies */
        uint8_t *rq = malloc((size_t)(M * H));
        float *rs = malloc((size_t)(NB * LD) * sizeof *rs);
        lf_gemm g = {.ep = lf_epilogue_default()};
        g.ep.act = act, g.ep.gate = LF_GATE_PAIRED, g.ep.gate_group = G;
        g.ep.a_scale = lf_tensor_data(x.s), g.ep.b_scale = lf_tensor_data(w.s), g.ep.d_scale = rs;
        g.a = (lf_matrix){lf_tensor_data(x.q), LF_DTYPE_F8E4M3, M, K, K, 1};
        g.b = (lf_matrix){lf_tensor_data(w.q), LF_DTYPE_F8E4M3, K, 2 * H, 1, K};
        g.d = (lf_matrix){rq, LF_DTYPE_F8E4M3, M, H, H, 1};
        OK(lf_gemm_reference(&g));
        /* the GPU: through the backend into a poisoned, padded output when the kernel takes G,
         * else through the op (its two-step path) */
        uint8_t *gq = malloc((size_t)(M * (H + pad)));
        float *gs = malloc((size_t)(NB * LD) * sizeof *gs);
        int ran = 0;
        if (G % 128 == 0) {
            lf_tensor *poison = NULL, *sp = NULL;
            OK(lf_tensor_empty(&poison, LF_DTYPE_F8E4M3, 2, (int64_t[]){M, H + pad}, LF_DEVICE_CPU));
            memset(lf_tensor_data(poison), 0x7f, (size_t)(M * (H + pad)));
            OK(lf_tensor_empty(&sp, LF_DTYPE_F32, 2, (int64_t[]){NB, LD}, LF_DEVICE_CPU));
            OK(lf_tensor_fill(sp, NAN));
            lf_tensor *gd = to_gpu(poison), *gsc = to_gpu(sp);
            g.ep.a_scale = lf_tensor_data(x.gs), g.ep.b_scale = lf_tensor_data(w.gs), g.ep.d_scale = lf_tensor_data(gsc);
            g.a.data = lf_tensor_data(x.gq), g.b.data = lf_tensor_data(w.gq);
            g.d = (lf_matrix){lf_tensor_data(gd), LF_DTYPE_F8E4M3, M, H, H + pad, 1};
            lf_kernel_info info = {0};
            lf_status st = lf_backend_gemm(LF_DEVICE_CUDA, &g, &info);
            CHECK(st == LF_OK, "%s: %s", what, st == LF_OK ? "" : lf_last_error());
            lf_device_synchronize(LF_DEVICE_CUDA);
            if (st == LF_OK) {
                CHECK(info.name && strstr(info.name, "_128x256_to_f8e4m3"), "%s: kernel name %s", what,
                      info.name ? info.name : "(none)");
                if (info.timing)
                    info.resolve(info.timing, &(int64_t){0}, &(int64_t){0});
                lf_tensor *hd = to_host(gd), *hsc = to_host(gsc);
                memcpy(gq, lf_tensor_data(hd), (size_t)(M * (H + pad)));
                memcpy(gs, lf_tensor_data(hsc), (size_t)(NB * LD) * sizeof *gs);
                lf_tensor_free(hd), lf_tensor_free(hsc);
                ran = 1;
            }
            lf_tensor_free(poison), lf_tensor_free(sp), lf_tensor_free(gd), lf_tensor_free(gsc);
        } else {
            lf_tensor *wt = NULL, *h = NULL, *hs = NULL;
            OK(lf_t(&wt, w.gq));
            OK(lf_scaled_mm_gated_fp8(&h, &hs, x.gq, x.gs, wt, w.gs, act, G));
            if (h && hs) {
                lf_tensor *hd = to_host(h), *hsc = to_host(hs);
                for (int64_t i = 0; i < M; i++) {
                    memcpy(gq + i * (H + pad), (const uint8_t *)lf_tensor_data(hd) + i * H, (size_t)H);
                    memset(gq + i * (H + pad) + H, 0x7f, (size_t)pad);
                }
                memcpy(gs, lf_tensor_data(hsc), (size_t)(NB * LD) * sizeof *gs);
                lf_tensor_free(hd), lf_tensor_free(hsc);
                ran = 1;
            }
            lf_tensor_free(wt), lf_tensor_free(h), lf_tensor_free(hs);
        }
        if (ran) {
            int64_t outside = 0, far = 0, codes = 0, scales = 0, padding = 0;
            for (int64_t i = 0; i < M; i++) {
                for (int64_t j = H; j < H + pad; j++)
                    outside += gq[i * (H + pad) + j] != 0x7f;
                for (int64_t j = 0; j < H; j++) {
                    const float sr = rs[i + j / 128 * LD], sg = gs[i + j / 128 * LD];
                    const double vr = lf_f32_from_f8e4m3(rq[i * H + j]) * (double)sr,
                                 vg = lf_f32_from_f8e4m3(gq[i * (H + pad) + j]) * (double)sg;
                    codes += rq[i * H + j] != gq[i * (H + pad) + j];
                    far += !(fabs(vg - vr) <= fabs(vr) * (0x1p-3 + 0x1p-6) + sr * 448 * 0x1p-8);
                }
            }
            for (int64_t b = 0; b < NB; b++) {
                for (int64_t i = 0; i < M; i++)
                    scales += !(fabsf(gs[i + b * LD] - rs[i + b * LD]) <= rs[i + b * LD] * 0x1p-7f);
                for (int64_t i = M; i < LD; i++)
                    padding += gs[i + b * LD] != 1.f;
            }
            CHECK(!outside && !far && codes * 25 <= M * H && !scales && !padding,
                  "%s: %lld bytes written outside h, %lld values past one step of the reference, %lld of %lld codes "
                  "differ, %lld scales past one bf16 step, %lld padding scales not 1",
                  what, (long long)outside, (long long)far, (long long)codes, (long long)(M * H), (long long)scales,
                  (long long)padding);
        }
        free(rq), free(rs), free(gq), free(gs);
        fp8_free(&x), fp8_free(&w);
    }
}

/* cuBLASLt's scaled GEMM (lf_scaled_mm) and the gated kernel's FP8 form (all three schedules, both
 * activations; NaN-poisoned padded outputs through the backend) against the decoded operands in
 * float64; the shapes and layouts they refuse, by name. */
void test_scaled_gemm_gpu(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 67);
    static const int64_t plain[][3] = {{1, 64, 128}, {77, 768, 384}, {300, 4096, 1008}, {8192, 768, 3072}};
    for (size_t ci = 0; ci < sizeof plain / sizeof plain[0]; ci++) {
        const int64_t M = plain[ci][0], K = plain[ci][1], N = plain[ci][2];
        fp8_mat x = fp8_rand(&rng, M, K), w = fp8_rand(&rng, N, K);
        lf_tensor *wt = NULL, *y = NULL;
        OK(lf_t(&wt, w.gq));
        OK(lf_scaled_mm(&y, x.gq, x.gs, wt, w.gs, LF_DTYPE_BF16));
        lf_tensor *hy = to_host(y);
        const double e = decoded_err(x.v, w.v, M, K, N, 0, 0, LF_ACT_NONE, hy, M > 2000 ? 61 : 1);
        CHECK(e < 1e-2, "scaled_mm %lldx%lldx%lld: err %.3g against float64", (long long)M, (long long)K, (long long)N,
              e);
        lf_tensor_free(wt), lf_tensor_free(y), lf_tensor_free(hy);
        fp8_free(&x), fp8_free(&w);
    }
    static const int64_t gated[][4] = {/* M, K, H, G */
                                       {5, 784, 384, 128},   {129, 4096, 128, 128}, {300, 144, 256, 128},
                                       {1000, 256, 512, 256}, {200, 192, 320, 64},  {1100, 704, 1152, 384},
                                       {8192, 768, 3072, 3072}};
    static const lf_gated_schedule scheds[] = {LF_GATED_COOPERATIVE, LF_GATED_PINGPONG, LF_GATED_OFFLOAD};
    for (size_t cj = 0; cj < 6 * sizeof gated / sizeof gated[0]; cj++) {
        const size_t ci = cj / 6;
        const lf_act act = cj % 2 ? LF_ACT_SILU : LF_ACT_GELU_TANH;
        const lf_gated_schedule sched = scheds[cj / 2 % 3];
        const int64_t M = gated[ci][0], K = gated[ci][1], H = gated[ci][2], G = gated[ci][3], pad = 24;
        const int pingpong = sched == LF_GATED_PINGPONG || G % 128, offload = !pingpong && sched == LF_GATED_OFFLOAD;
        lf_gated_schedule_force(sched);
        fp8_mat x = fp8_rand(&rng, M, K), w = fp8_rand(&rng, 2 * H, K);
        lf_tensor *poison = NULL;
        OK(lf_tensor_empty(&poison, LF_DTYPE_BF16, 2, (int64_t[]){M, H + pad}, LF_DEVICE_CPU));
        OK(lf_tensor_fill(poison, NAN));
        lf_tensor *gd = to_gpu(poison);
        lf_gemm g = {.ep = lf_epilogue_default()};
        g.ep.act = act, g.ep.gate = LF_GATE_PAIRED, g.ep.gate_group = G;
        g.ep.a_scale = lf_tensor_data(x.gs), g.ep.b_scale = lf_tensor_data(w.gs);
        g.a = (lf_matrix){lf_tensor_data(x.gq), LF_DTYPE_F8E4M3, M, K, K, 1};
        g.b = (lf_matrix){lf_tensor_data(w.gq), LF_DTYPE_F8E4M3, K, 2 * H, 1, K};
        g.d = (lf_matrix){lf_tensor_data(gd), LF_DTYPE_BF16, M, H, H + pad, 1};
        char what[112];
        snprintf(what, sizeof what, "fp8 gated %s %lldx%lldx%lld G %lld %s", lf_act_name(act), (long long)M,
                 (long long)K, (long long)H, (long long)G,
                 pingpong  ? "ping-pong"
                 : offload ? "offload"
                           : "cooperative");
        lf_kernel_info info = {0};
        lf_status s = lf_backend_gemm(LF_DEVICE_CUDA, &g, &info);
        CHECK(s == LF_OK, "%s: %s", what, s == LF_OK ? "" : lf_last_error());
        lf_device_synchronize(LF_DEVICE_CUDA);
        if (s == LF_OK) {
            const char *tile = pingpong ? "_128x128_pingpong" : offload ? "_128x256_offload" : "_128x256";
            CHECK(
                info.name &&
                    strstr(info.name, act == LF_ACT_SILU ? "gated_gemm_f8e4m3_silu" : "gated_gemm_f8e4m3_gelu_tanh") &&
                    strstr(info.name, tile) && (offload || !strstr(info.name, "_offload")),
                "%s: kernel name %s", what, info.name ? info.name : "(none)");
            if (info.timing)
                info.resolve(info.timing, &(int64_t){0}, &(int64_t){0});
            double *D = to_f64(gd);
            float *pf = malloc((size_t)(M * H) * sizeof *pf);
            int64_t outside = 0, nan_inside = 0;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < H + pad; j++) {
                    const double v = D[i * (H + pad) + j];
                    if (j < H)
                        pf[i * H + j] = (float)v, nan_inside += isnan(v);
                    else
                        outside += !isnan(v);
                }
            CHECK(outside == 0 && nan_inside == 0, "%s: %lld writes outside the output, %lld NaNs left inside", what,
                  (long long)outside, (long long)nan_inside);
            lf_tensor *got = NULL;
            OK(lf_tensor_from_f32(&got, LF_DTYPE_BF16, 2, (int64_t[]){M, H}, pf, LF_DEVICE_CPU));
            const double e = decoded_err(x.v, w.v, M, K, 2 * H, 1, G, act, got, M > 2000 ? 61 : 1);
            CHECK(e < 1e-2, "%s: err %.3g against float64 of the decoded operands", what, e);
            free(D), free(pf);
            lf_tensor_free(got);
        }
        lf_tensor_free(poison), lf_tensor_free(gd);
        fp8_free(&x), fp8_free(&w);
    }
    lf_gated_schedule_force(LF_GATED_AUTO);

    /* cuBLASLt's block-scaled GEMM (x in 1 x 128 blocks, the weight in 128 x 128 ones; K 784 ends in
     * a partial block, N 304 too) */
    static const int64_t blocked[][3] = {{4, 128, 128}, {80, 784, 384}, {64, 256, 304}, {8192, 768, 3072}};
    for (size_t ci = 0; ci < sizeof blocked / sizeof blocked[0]; ci++) {
        const int64_t M = blocked[ci][0], K = blocked[ci][1], N = blocked[ci][2];
        fp8_mat x = fp8_rand_as(&rng, M, K, LF_SCALE_1X128), w = fp8_rand_as(&rng, N, K, LF_SCALE_128X128);
        lf_tensor *wt = NULL, *y = NULL;
        OK(lf_t(&wt, w.gq));
        OK(lf_scaled_mm(&y, x.gq, x.gs, wt, w.gs, LF_DTYPE_BF16));
        lf_tensor *hy = y ? to_host(y) : NULL;
        if (hy) {
            const double e = decoded_err(x.v, w.v, M, K, N, 0, 0, LF_ACT_NONE, hy, M > 2000 ? 61 : 1);
            CHECK(e < 1e-2, "block-scaled scaled_mm %lldx%lldx%lld: err %.3g against float64", (long long)M,
                  (long long)K, (long long)N, e);
        }
        lf_tensor_free(wt), lf_tensor_free(y), lf_tensor_free(hy);
        fp8_free(&x), fp8_free(&w);
    }
    test_gated_fp8_out(&rng);

    /* refused: K not a multiple of 16 (TMA's and cuBLASLt's 16-byte rows), by name; the op's own
     * checks; lf_scaled_mm_gated with a gate_group the kernel cannot tile runs the scaled GEMM and
     * act(g) * u instead */
    {
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
        lf_tensor_free(wt);
        fp8_free(&xb), fp8_free(&wb);
        fp8_mat x2 = fp8_rand(&rng, 70, 256), w2 = fp8_rand(&rng, 2 * 96, 256);
        OK(lf_t(&wt, w2.gq));
        OK(lf_scaled_mm_gated(&y, x2.gq, x2.gs, wt, w2.gs, LF_ACT_GELU_TANH, 48));
        lf_tensor *hy = y ? to_host(y) : NULL;
        if (hy) {
            const double e = decoded_err(x2.v, w2.v, 70, 256, 2 * 96, 1, 48, LF_ACT_GELU_TANH, hy, 1);
            CHECK(e < 1e-2, "fp8 gated fallback, gate_group 48: err %.3g", e);
        }
        lf_tensor_free(wt), lf_tensor_free(y), lf_tensor_free(hy);
        fp8_free(&x2), fp8_free(&w2);
    }
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
