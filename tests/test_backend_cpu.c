/* The CPU backend against float64 references: every GEMM layout (nn, tn, nt, tt and offset,
 * padded views), odd sizes, every epilogue combination including the paired gate, on every
 * instruction set this CPU has; poisoned outputs checked fully written and nothing written
 * outside D; the vector math against libm; pointwise kernels with broadcasting. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "backend/cuda/gated_rule.h"
#include "backend/plan_file.h"
#include "testutil.h"

typedef enum { LAY_ROW, LAY_COL, LAY_PAD } layout;

static lf_tensor *make_operand(lf_rng *rng, lf_dtype dt, int64_t rows, int64_t cols, layout l)
{
    switch (l) {
    case LAY_COL:
        return rand_colmajor(rng, dt, rows, cols);
    case LAY_PAD:
        return rand_padded(rng, dt, rows, cols, cols + 3, 5);
    default: {
        int64_t s[2] = {rows, cols};
        return rand_tensor(rng, dt, 2, s);
    }
    }
}

static lf_matrix mat(const lf_tensor *t)
{
    return (lf_matrix){lf_tensor_data(t), t->dtype, t->shape[0], t->shape[1], t->stride[0], t->stride[1]};
}

typedef struct gcase {
    int64_t M, N, K; /* N: pre-gate columns */
    lf_dtype dt;
    layout la, lb;
    int bias, c_input;
    lf_act act;
    int64_t group; /* 0: no gate */
    float alpha, beta;
} gcase;

static int n_cases;

/* Run one case through lf_backend_gemm and compare with a float64 computation done here. */
static void run_case(lf_rng *rng, const gcase *gc)
{
    const int64_t M = gc->M, N = gc->N, K = gc->K, No = gc->group ? N / 2 : N;
    lf_tensor *a = make_operand(rng, gc->dt, M, K, gc->la), *b = make_operand(rng, gc->dt, K, N, gc->lb);
    lf_tensor *bias = NULL, *c = NULL, *dbuf = NULL, *d = NULL;
    if (gc->bias) {
        bias = rand_tensor(rng, gc->dt, 1, &N);
    }
    if (gc->c_input)
        c = make_operand(rng, gc->dt, M, N, LAY_PAD);
    /* D lives inside a NaN-poisoned buffer with a gap after every row */
    int64_t ld = No + 2, total = 3 + M * ld;
    OK(lf_tensor_empty(&dbuf, gc->dt, 1, &total, LF_DEVICE_CPU));
    OK(lf_tensor_fill(dbuf, NAN));
    int64_t ds[2] = {M, No}, dst[2] = {ld, 1};
    OK(lf_tensor_as_strided(&d, dbuf, 2, ds, dst, 3));

    lf_gemm g = {.a = mat(a), .b = mat(b), .d = mat(d), .ep = lf_epilogue_default()};
    g.ep.alpha = gc->alpha;
    g.ep.act = gc->act;
    if (bias) {
        g.ep.bias = lf_tensor_data(bias);
        g.ep.bias_dtype = bias->dtype;
    }
    if (c) {
        g.c = mat(c);
        g.ep.beta = gc->beta;
    }
    if (gc->group) {
        g.ep.gate = LF_GATE_PAIRED;
        g.ep.gate_group = gc->group;
    }
    lf_kernel_info info;
    OK(lf_backend_gemm(LF_DEVICE_CPU, &g, &info));

    double *A = to_f64(a), *B = to_f64(b), *Bias = bias ? to_f64(bias) : NULL, *C = c ? to_f64(c) : NULL;
    double *got = to_f64(d), *ref = malloc((size_t)(M * No) * sizeof *ref),
           *mag = malloc((size_t)(M * No) * sizeof *mag);
    double *z = malloc((size_t)N * sizeof *z), *zm = malloc((size_t)N * sizeof *zm);
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double s = 0, m = 0;
            for (int64_t k = 0; k < K; k++) {
                s += A[i * K + k] * B[k * N + j];
                m += fabs(A[i * K + k] * B[k * N + j]);
            }
            s *= gc->alpha;
            m *= fabs(gc->alpha);
            if (C) {
                s += gc->beta * C[i * N + j];
                m += fabs(gc->beta * C[i * N + j]);
            }
            if (Bias) {
                s += Bias[j];
                m += fabs(Bias[j]);
            }
            z[j] = s;
            zm[j] = m;
        }
        for (int64_t jo = 0; jo < No; jo++) {
            if (!gc->group) {
                ref[i * No + jo] = lf_act_ref(gc->act, z[jo]);
                mag[i * No + jo] = zm[jo];
            } else {
                int64_t gcol = (jo / gc->group) * 2 * gc->group + jo % gc->group, ucol = gcol + gc->group;
                double gv = lf_act_ref(gc->act, z[gcol]);
                ref[i * No + jo] = gv * z[ucol];
                mag[i * No + jo] = (fabs(gv) + zm[gcol]) * (fabs(z[ucol]) + zm[ucol]);
            }
        }
    }
    int64_t where = 0;
    double e = worst_err(got, ref, mag, M * No, gc->dt, &where);
    CHECK(e < tol_for(gc->dt),
          "%s M=%lld N=%lld K=%lld %s lay=%d/%d bias=%d c=%d act=%s group=%lld: err %.3g at %lld (got %.9g ref %.9g)",
          info.name, (long long)M, (long long)N, (long long)K, lf_dtype_name(gc->dt), gc->la, gc->lb, gc->bias,
          gc->c_input, lf_act_name(gc->act), (long long)gc->group, e, (long long)where, got[where], ref[where]);
    /* the gaps between D's rows and the elements before D must still be NaN */
    double *all = to_f64(dbuf);
    int touched = 0;
    for (int64_t i = 0; i < total; i++) {
        int inside = i >= 3 && (i - 3) % ld < No;
        touched += !inside && !isnan(all[i]);
    }
    CHECK(touched == 0, "%s wrote %d elements outside D", info.name, touched);
    /* the kernel's name carries its work */
    CHECK(strncmp(info.name, "lf_cpu_gemm_", 12) == 0, "name %s", info.name);
    CHECK(!gc->bias == !strstr(info.name, "_bias"), "bias in name %s", info.name);
    CHECK(!gc->group == !strstr(info.name, "_gated"), "gated in name %s", info.name);
    CHECK(gc->act == LF_ACT_NONE || strstr(info.name, lf_act_name(gc->act)), "act in name %s", info.name);
    /* the report every backend gives (backend/report.c): 2*M*N*K over all N product columns
     * (gates and partners alike; the epilogue is not counted), and each operand's bytes once in
     * its own dtype: A, B, C, the bias and D */
    const double es = (double)lf_dtype_size(gc->dt);
    double want_bytes = es * (double)(M * K + K * N + M * No + (c ? M * N : 0) + (bias ? N : 0));
    CHECK(info.flops == 2.0 * (double)M * (double)N * (double)K, "%s: flops %.0f, expected 2*%lld*%lld*%lld", info.name,
          info.flops, (long long)M, (long long)N, (long long)K);
    CHECK(info.bytes == want_bytes, "%s (bias %d, c %d): bytes %.0f, expected %.0f", info.name, gc->bias, gc->c_input,
          info.bytes, want_bytes);
    n_cases++;
    free(all), free(A), free(B), free(Bias), free(C), free(got), free(ref), free(mag), free(z), free(zm);
    lf_tensor_free(a), lf_tensor_free(b), lf_tensor_free(bias), lf_tensor_free(c), lf_tensor_free(d);
    lf_tensor_free(dbuf);
}

static void test_gemm_isa(lf_cpu_isa isa)
{
    OK(lf_cpu_isa_force(isa));
    lf_rng rng;
    lf_rng_seed(&rng, 100 + isa);
    /* odd sizes: 1, 7, 33, 257 and the prime 1031, one large dim at a time */
    static const int64_t shapes[][3] = {{1, 1, 1},     {7, 33, 257},  {33, 7, 1031}, {257, 33, 7},
                                        {1031, 9, 33}, {13, 1031, 5}, {33, 257, 1},  {40, 64, 400}};
    const int n_shapes = sizeof shapes / sizeof shapes[0];
    for (int si = 0; si < n_shapes; si++)
        for (int dt = 0; dt < LF_DTYPE_COUNT; dt++)
            for (int la = 0; la < 3; la++)
                for (int lb = 0; lb < 3; lb++) {
                    gcase gc = {shapes[si][0],
                                shapes[si][1],
                                shapes[si][2],
                                (lf_dtype)dt,
                                (layout)la,
                                (layout)lb,
                                (la + lb + si) % 2,
                                0,
                                (lf_act)((la + 2 * lb + si) % LF_ACT_COUNT),
                                0,
                                1.0f,
                                0.0f};
                    run_case(&rng, &gc);
                }
    /* every epilogue combination on one odd shape, f32 and bf16 */
    for (int dt = 0; dt < 2; dt++)
        for (int act = 0; act < LF_ACT_COUNT; act++)
            for (int bias = 0; bias < 2; bias++)
                for (int ci = 0; ci < 2; ci++)
                    for (int ab = 0; ab < 2; ab++) {
                        gcase gc = {37,
                                    45,
                                    70,
                                    dt ? LF_DTYPE_BF16 : LF_DTYPE_F32,
                                    LAY_ROW,
                                    LAY_COL,
                                    bias,
                                    ci,
                                    (lf_act)act,
                                    0,
                                    ab ? -0.75f : 1.0f,
                                    ab ? 2.5f : 1.0f};
                        run_case(&rng, &gc);
                    }
    /* the paired gate: interleaved (group 1), blocks, and [gate | up] halves; odd token counts */
    static const int64_t gshapes[][4] = {
        {33, 64, 47, 1}, {7, 96, 33, 4}, {129, 2 * 50, 65, 50}, {1, 2, 3, 1}, {257, 2 * 48, 31, 16}};
    for (size_t i = 0; i < sizeof gshapes / sizeof gshapes[0]; i++)
        for (int dt = 0; dt < LF_DTYPE_COUNT; dt++)
            for (int act = 0; act < LF_ACT_COUNT; act++) {
                gcase gc = {gshapes[i][0],
                            gshapes[i][1],
                            gshapes[i][2],
                            (lf_dtype)dt,
                            (layout)(i % 3),
                            i % 2 ? LAY_COL : LAY_ROW,
                            (int)(i + act) % 2,
                            0,
                            (lf_act)act,
                            gshapes[i][3],
                            1.0f,
                            0.0f};
                run_case(&rng, &gc);
            }
}

/* The same GEMM on 1 and 2 threads gives the same bits (each element's sum order is fixed). */
static void test_threads_deterministic(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 7);
    int64_t sa[2] = {301, 129}, sb[2] = {129, 203};
    lf_tensor *a = rand_tensor(&rng, LF_DTYPE_F32, 2, sa), *b = rand_tensor(&rng, LF_DTYPE_F32, 2, sb), *y1 = NULL,
              *y2 = NULL;
    lf_cpu_set_threads(1);
    OK(lf_mm(&y1, a, b));
    lf_cpu_set_threads(2);
    OK(lf_mm(&y2, a, b));
    lf_cpu_set_threads(0);
    CHECK(!memcmp(lf_tensor_data(y1), lf_tensor_data(y2), 301 * 203 * sizeof(float)), "1 and 2 threads agree bitwise");
    lf_tensor_free(a), lf_tensor_free(b), lf_tensor_free(y1), lf_tensor_free(y2);
}

/* The vectorized activations against libm in float64, over a dense range and the edges. */
static void test_activations(lf_cpu_isa isa)
{
    OK(lf_cpu_isa_force(isa));
    enum { N = 40003 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (int i = 0; i < N; i++)
        x[i] = -20.0f + 40.0f * (float)i / (N - 1);
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-30f, x[3] = -1e-30f, x[4] = 88.5f, x[5] = -88.5f, x[6] = INFINITY;
    x[7] = -INFINITY;
    for (int act = 1; act < LF_ACT_COUNT; act++) {
        lf_pointwise p = {.op = LF_PW_ACT, .act = (lf_act)act, .ndim = 1, .shape = {N}};
        p.out = (lf_strided){y, LF_DTYPE_F32, {1}};
        p.in[0] = (lf_strided){x, LF_DTYPE_F32, {1}};
        OK(lf_backend_pointwise(LF_DEVICE_CPU, &p, NULL));
        double worst = 0;
        int at = 0;
        for (int i = 0; i < N; i++) {
            double r = lf_act_ref((lf_act)act, x[i]);
            if (isinf(x[i])) { /* gelu(+Inf) = +Inf; gelu(-Inf) is 0 (or NaN from -Inf * 0: not required) */
                if (x[i] > 0)
                    CHECK(y[i] == INFINITY, "%s(+Inf) = %g", lf_act_name((lf_act)act), y[i]);
                continue;
            }
            /* relative to the result, or to one float ulp of the input where the result has
             * decayed far below it (gelu's negative tail: exp(-x^2/2) of an input rounded to
             * float carries that input's relative error times x^2) */
            double e = fabs(y[i] - r) / (fabs(r) + 0x1p-24 * fabs((double)x[i]) + 1e-300);
            if (e > worst)
                worst = e, at = i;
        }
        CHECK(worst < 2e-6, "%s on %s: worst relative error %.3g at x=%.9g (got %.9g, ref %.9g)",
              lf_act_name((lf_act)act), lf_cpu_isa_name(isa), worst, x[at], y[at], lf_act_ref((lf_act)act, x[at]));
    }
    free(x), free(y);
}

static void test_pointwise(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 9);
    for (int dt = 0; dt < LF_DTYPE_COUNT; dt++) {
        int64_t s3[3] = {3, 5, 1031}, sb[2] = {1, 1031};
        lf_tensor *x = rand_tensor(&rng, (lf_dtype)dt, 3, s3), *b = rand_tensor(&rng, (lf_dtype)dt, 2, sb), *y = NULL;
        OK(lf_add(&y, x, b));
        double *X = to_f64(x), *B = to_f64(b), *Y = to_f64(y);
        int64_t n = 3 * 5 * 1031;
        double *ref = malloc((size_t)n * sizeof *ref), *mag = malloc((size_t)n * sizeof *mag);
        for (int64_t i = 0; i < n; i++) {
            ref[i] = X[i] + B[i % 1031];
            mag[i] = fabs(X[i]) + fabs(B[i % 1031]);
        }
        CHECK(worst_err(Y, ref, mag, n, (lf_dtype)dt, NULL) < tol_for((lf_dtype)dt), "broadcast add %s",
              lf_dtype_name((lf_dtype)dt));
        free(Y);
        lf_tensor_free(y);
        /* mul with a transposed (non-contiguous) operand */
        int64_t s2[2] = {257, 33};
        lf_tensor *p = rand_tensor(&rng, (lf_dtype)dt, 2, s2), *q = rand_colmajor(&rng, (lf_dtype)dt, 257, 33);
        OK(lf_mul(&y, p, q));
        double *P = to_f64(p), *Q = to_f64(q);
        Y = to_f64(y);
        for (int64_t i = 0; i < 257 * 33; i++) {
            ref[i] = P[i] * Q[i];
            mag[i] = fabs(ref[i]);
        }
        CHECK(worst_err(Y, ref, mag, 257 * 33, (lf_dtype)dt, NULL) < tol_for((lf_dtype)dt), "strided mul %s",
              lf_dtype_name((lf_dtype)dt));
        free(X), free(B), free(Y), free(P), free(Q), free(ref), free(mag);
        lf_tensor_free(x), lf_tensor_free(b), lf_tensor_free(y), lf_tensor_free(p), lf_tensor_free(q);
    }
}

/* The GEMM plan cache's file format (plan_file.h): what it writes reads back; every truncation
 * reads back only when it falls between plans (then those before it), and no flipped byte is
 * ever trusted. */
static void test_plan_file(void)
{
    lf_plan_file f = {0};
    unsigned char key[3][40], plan[64];
    const size_t key_n[3] = {40, 7, 24};
    for (int r = 0; r < 3; r++)
        for (size_t i = 0; i < sizeof key[r]; i++)
            key[r][i] = (unsigned char)(31 * r + 7 * i + 1);
    for (size_t i = 0; i < sizeof plan; i++)
        plan[i] = (unsigned char)(3 * i + 5);
    for (int r = 0; r < 3; r++)
        CHECK(lf_plan_file_add(&f, key[r], key_n[r], plan + r, 64 - (size_t)r), "add plan %d", r);
    CHECK(!lf_plan_file_add(&f, key[0], 0, plan, 64) && !lf_plan_file_add(&f, key[0], 4, plan, LF_PLAN_MAX_BYTES + 1),
          "empty and overlong lengths refused");
    size_t n = 0;
    unsigned char *bytes = lf_plan_file_bytes(&f, &n);
    CHECK(bytes && n == 8 + (4 + 40 + 4 + 64 + 8) + (4 + 7 + 4 + 63 + 8) + (4 + 24 + 4 + 62 + 8), "file size %zu", n);
    lf_plan_file g = {0};
    CHECK(lf_plan_file_parse(&g, bytes, n) == NULL && g.n == 3, "whole file reads back: %zu plans", g.n);
    for (int r = 0; r < 3; r++) {
        const unsigned char *got = lf_plan_file_find(&g, key[r], key_n[r], 64 - (size_t)r);
        CHECK(got && !memcmp(got, plan + r, 64 - (size_t)r), "plan %d found and equal", r);
    }
    CHECK(!lf_plan_file_find(&g, key[1], key_n[1], 64), "a plan of another size is not found");
    CHECK(!lf_plan_file_find(&g, key[1], 6, 63), "a shorter key is not found");
    lf_plan_file_free(&g);
    const size_t ends[4] = {8, 8 + 120, 8 + 120 + 86, n}; /* where whole plans end */
    int trunc_bad = 0, flip_bad = 0;
    for (size_t cut = 0; cut < n; cut++) {
        int boundary = -1;
        for (int b = 0; b < 4; b++)
            if (cut == ends[b])
                boundary = b;
        const char *why = lf_plan_file_parse(&g, bytes, cut);
        if (boundary >= 0 ? why != NULL || g.n != (size_t)boundary : why == NULL || g.n != 0)
            trunc_bad++;
        lf_plan_file_free(&g);
    }
    CHECK(trunc_bad == 0, "every truncation of a %zu-byte file: %d read wrong", n, trunc_bad);
    for (size_t i = 0; i < n; i++)
        for (int bit = 0; bit < 8; bit++) {
            bytes[i] ^= (unsigned char)(1u << bit);
            const char *why = lf_plan_file_parse(&g, bytes, n);
            if (why == NULL || g.n != 0)
                flip_bad++;
            lf_plan_file_free(&g);
            bytes[i] ^= (unsigned char)(1u << bit);
        }
    CHECK(flip_bad == 0, "every one-bit flip of %zu bytes refused: %d trusted", n, flip_bad);
    CHECK(lf_plan_file_parse(&g, "LFGEMM1\n", 8) == NULL && g.n == 0, "a file of no plans is valid");
    const char *why = lf_plan_file_parse(&g, "garbage!", 8);
    CHECK(why && strstr(why, "does not start"), "another file's bytes: %s", why ? why : "(trusted)");
    free(bytes);
    lf_plan_file_free(&f);
}

/* The Hopper gated GEMM's schedule rule (backend/cuda/gated_rule.h, host code the CPU can run):
 * at every shape measured on an H200 (132 SMs) it picks the schedule that was faster there, a draw
 * being either; what the two kernels compute is test_cuda's. */
static void test_gated_rule(void)
{
    static const struct {
        long long M, K, H;
        lf_gated_schedule want;
    } shapes[] = {
        {64, 4096, 14336, LF_GATED_COOPERATIVE},  /* under 128 tokens */
        {128, 4096, 14336, LF_GATED_COOPERATIVE}, /* 2 half-tile steps against 2, K long: a draw */
        {256, 4096, 14336, LF_GATED_COOPERATIVE}, /* 4 against 4, K long: cooperative 7% faster */
        {512, 4096, 14336, LF_GATED_PINGPONG},    /* 8 against 7 */
        {1024, 4096, 14336, LF_GATED_OFFLOAD},    /* 896 tiles: four waves and more, bf16 */
        {2048, 4096, 14336, LF_GATED_OFFLOAD},    {8192, 4096, 14336, LF_GATED_OFFLOAD},
        {8192, 4096, 11008, LF_GATED_OFFLOAD},    {4096, 2048, 8192, LF_GATED_OFFLOAD},
        {1024, 768, 3072, LF_GATED_PINGPONG}, /* 4 against 3 */
        {4096, 768, 3072, LF_GATED_OFFLOAD},      {8192, 768, 3072, LF_GATED_OFFLOAD},
    };
    static const char *const sched_names[] = {"auto", "cooperative", "ping-pong", "offload"};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const lf_gated_schedule got =
            lf_gated_rule(shapes[i].M, shapes[i].K, shapes[i].H, shapes[i].H, 0, 0, 132, LF_GATED_AUTO);
        CHECK(got == shapes[i].want, "gated schedule at %lld x %lld -> %lld on 132 SMs: %s, expected %s", shapes[i].M,
              shapes[i].K, shapes[i].H, sched_names[got], sched_names[shapes[i].want]);
        /* in FP8 the offload kernel's activation falls behind the MMAs: cooperative there */
        const lf_gated_schedule got8 =
            lf_gated_rule(shapes[i].M, shapes[i].K, shapes[i].H, shapes[i].H, 1, 0, 132, LF_GATED_AUTO);
        CHECK(got8 == (shapes[i].want == LF_GATED_OFFLOAD ? LF_GATED_COOPERATIVE : shapes[i].want),
              "fp8 gated schedule at %lld x %lld -> %lld on 132 SMs: %s", shapes[i].M, shapes[i].K, shapes[i].H,
              sched_names[got8]);
    }
    /* short K and both ending together under four waves: ping-pong (its hidden epilogue) */
    CHECK(lf_gated_rule(2048, 768, 3072, 3072, 0, 0, 132, LF_GATED_AUTO) == LF_GATED_PINGPONG,
          "2048 x 768 -> 3072 (384 tiles, 6 against 6, K short) takes ping-pong");
    /* what decides before the shape: the gate group, the e4m3 output, then a forced schedule */
    CHECK(lf_gated_rule(8192, 4096, 11008, 64, 0, 0, 132, LF_GATED_COOPERATIVE) == LF_GATED_PINGPONG,
          "a gate group of 64 fits only ping-pong");
    CHECK(lf_gated_rule(512, 4096, 14336, 14336, 0, 1, 132, LF_GATED_PINGPONG) == LF_GATED_COOPERATIVE,
          "h in e4m3 takes the cooperative tiles");
    CHECK(lf_gated_rule(8192, 4096, 11008, 11008, 0, 0, 132, LF_GATED_PINGPONG) == LF_GATED_PINGPONG &&
              lf_gated_rule(512, 4096, 14336, 14336, 0, 0, 132, LF_GATED_COOPERATIVE) == LF_GATED_COOPERATIVE,
          "a forced schedule is kept");
    CHECK(lf_gated_rule(8192, 768, 3072, 3072, 0, 0, 132, LF_GATED_OFFLOAD) == LF_GATED_OFFLOAD &&
              lf_gated_rule(8192, 768, 3072, 3072, 0, 1, 132, LF_GATED_OFFLOAD) == LF_GATED_COOPERATIVE &&
              lf_gated_rule(8192, 768, 3072, 64, 0, 0, 132, LF_GATED_OFFLOAD) == LF_GATED_PINGPONG,
          "a forced offload is kept where its tile fits: bf16 h, gate groups of 128");
    /* offload exactly where there are four waves of tiles or more (768 -> 3072: 24 column-tiles, so
     * 22 row-tiles on 132 SMs), in bf16 */
    for (long long M = 1; M <= 16384; M *= 2) {
        const int four_waves = (M + 127) / 128 * 24 >= 4 * 132;
        CHECK((lf_gated_rule(M, 768, 3072, 3072, 0, 0, 132, LF_GATED_AUTO) == LF_GATED_OFFLOAD) == four_waves &&
                  lf_gated_rule(M, 768, 3072, 3072, 1, 0, 132, LF_GATED_AUTO) != LF_GATED_OFFLOAD,
              "offload at %lld tokens of 768 -> 3072: only in bf16 and with four waves (%d)", M, four_waves);
    }
    /* no SM count (no device yet): a shape is still decided */
    CHECK(lf_gated_rule(512, 4096, 14336, 14336, 0, 0, 0, LF_GATED_AUTO) == LF_GATED_OFFLOAD &&
              lf_gated_rule(512, 4096, 14336, 14336, 1, 0, 0, LF_GATED_AUTO) == LF_GATED_COOPERATIVE,
          "with no SM count every shape is many waves: the 128 x 256 tile, offload in bf16");
}

int main(void)
{
    lf_cpu_isa best = lf_cpu_isa_detect();
    printf("best instruction set here: %s\n", lf_cpu_isa_name(best));
    for (int isa = 0; isa <= (int)best; isa++) {
        test_gemm_isa((lf_cpu_isa)isa);
        test_activations((lf_cpu_isa)isa);
    }
    CHECK(lf_cpu_isa_force(best) == LF_OK, "restore %s", lf_cpu_isa_name(best));
    test_threads_deterministic();
    test_pointwise();
    test_plan_file();
    test_gated_rule();
    printf("%d GEMM cases\n", n_cases);
    return lf_test_finish("test_backend_cpu");
}
