/* The CPU backend's own parts: the vector math against libm on every instruction set this CPU
 * has, the same GEMM on 1 and 2 threads giving the same bits, a GEMM called from inside the
 * caller's own OpenMP team, B packed once (lf_cpu_pack_b) giving the per-call packing's bits, the
 * GEMM plan file's format, and the Hopper gated GEMM's schedule rule held to the H200's
 * measurements. The GEMMs and pointwise kernels themselves are cases of the
 * table (test_cases, cases.c), run on each instruction set. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/backend_impl.h"
#include "backend/cuda/gated_rule.h"
#include "backend/plan_file.h"
#include "testutil.h"

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

/* A GEMM called from inside the caller's own OpenMP parallel region, where the library's team
 * gets one thread (OpenMP nests none by default): every part of D is still written, the same
 * bits as outside. Both paths: a few rows against a Linear weight (dot products) and the tiled
 * one; each large enough to be split for two threads. */
static void test_inside_callers_team(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 11);
    static const int64_t shapes[2][3] = {{1, 2048, 8192}, {64, 256, 1024}}; /* M, K, N */
    for (int c = 0; c < 2; c++) {
        const int64_t M = shapes[c][0], K = shapes[c][1], N = shapes[c][2];
        int64_t sa[2] = {M, K}, sw[2] = {N, K};
        lf_tensor *a = rand_tensor(&rng, LF_DTYPE_F32, 2, sa), *w = rand_tensor(&rng, LF_DTYPE_F32, 2, sw), *wt = NULL,
                  *ref = NULL, *got[2] = {NULL, NULL};
        OK(lf_t(&wt, w));
        lf_cpu_set_threads(2);
        OK(lf_mm(&ref, a, wt));
        lf_status st[2] = {LF_OK, LF_OK};
#pragma omp parallel num_threads(2)
        {
            const int t = omp_get_thread_num();
            if (t < 2)
                st[t] = lf_mm(&got[t], a, wt);
        }
        lf_cpu_set_threads(0);
        for (int t = 0; t < 2; t++)
            CHECK(st[t] == LF_OK && got[t] &&
                      !memcmp(lf_tensor_data(got[t]), lf_tensor_data(ref), (size_t)(M * N) * sizeof(float)),
                  "%lld x %lld x %lld from thread %d of the caller's team: all of D, the same bits", (long long)M,
                  (long long)K, (long long)N, t);
        lf_tensor_free(a), lf_tensor_free(w), lf_tensor_free(wt), lf_tensor_free(ref);
        lf_tensor_free(got[0]), lf_tensor_free(got[1]);
    }
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
 * being either; what the kernels compute is test_cases cuda's. */
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

/* Random values in [-1, 1) as dt (f32 or bf16) into n elements of p. */
static void fill(lf_rng *rng, void *p, lf_dtype dt, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const float v = (float)(2 * lf_rng_uniform(rng) - 1);
        if (dt == LF_DTYPE_BF16)
            ((uint16_t *)p)[i] = (uint16_t)(lf_f32_bits(v) >> 16);
        else
            ((float *)p)[i] = v;
    }
}

/* B packed once (lf_cpu_pack_b, linfuse/cpu.h): lf_cpu_gemm_packed gives lf_backend_gemm's bits
 * over every layout of B (a Linear's weight seen transposed, row-major, strided, bf16), with and
 * without a paired gate, a bias and an activation the packing never saw, with 1 and 2 threads
 * asked (two run from 3.2e7 flops: two of the cases), at a few rows (which read B itself against a
 * Linear weight) and at many, D poisoned first; it reads its copy, not B; and it refuses a GEMM
 * it does not fit. */
/* g into d1 through lf_backend_gemm and into d2 through the packed B p, both poisoned first;
 * 1 when both calls succeed and the n outputs have the same bits (and the last is a number). */
static int packed_matches(lf_gemm *g, const lf_cpu_packed_b *p, float *d1, float *d2, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        d1[i] = d2[i] = NAN;
    g->d.data = d1;
    const lf_status s1 = lf_backend_gemm(LF_DEVICE_CPU, g, NULL);
    g->d.data = d2;
    const lf_status s2 = lf_cpu_gemm_packed(g, p, NULL);
    if (s1 != LF_OK || s2 != LF_OK)
        fprintf(stderr, "packed_matches: %s / %s: %s\n", lf_status_name(s1), lf_status_name(s2), lf_last_error());
    return s1 == LF_OK && s2 == LF_OK && !memcmp(d1, d2, (size_t)n * 4) && d2[n - 1] == d2[n - 1];
}

static void test_packed_b(lf_cpu_isa isa)
{
    OK(lf_cpu_isa_force(isa));
    lf_rng rng;
    lf_rng_seed(&rng, 23);
    enum { LINEAR, ROWMAJOR, STRIDED };
    static const struct {
        int64_t M, K, N;
        int layout, gated;
        lf_dtype bdt;
    } cases[] = {
        /* two B panels (2048 columns a panel); two threads (from 3.2e7 flops), gated and not */
        {20, 40, 2100, LINEAR, 0, LF_DTYPE_F32},
        {200, 256, 400, LINEAR, 0, LF_DTYPE_F32},
        {200, 192, 512, LINEAR, 1, LF_DTYPE_BF16},
        {100, 70, 45, LINEAR, 0, LF_DTYPE_F32},
        {37, 33, 64, ROWMAJOR, 0, LF_DTYPE_F32},
        {29, 40, 50, STRIDED, 0, LF_DTYPE_F32},
        /* few rows of a B that is not a Linear weight: the tiled path, reading the packing */
        {5, 40, 70, ROWMAJOR, 0, LF_DTYPE_F32},
        {7, 24, 48, STRIDED, 1, LF_DTYPE_F32},
        {64, 48, 160, LINEAR, 1, LF_DTYPE_F32},
        {3, 64, 96, LINEAR, 0, LF_DTYPE_F32},
        {50, 80, 120, LINEAR, 1, LF_DTYPE_BF16},
        {21, 17, 90, ROWMAJOR, 1, LF_DTYPE_BF16},
        /* bf16 against a Linear weight packs in k-pairs where the CPU has bf16 dot products: an
         * odd K, its last pair half past the end */
        {33, 37, 96, LINEAR, 0, LF_DTYPE_BF16},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t M = cases[c].M, K = cases[c].K, N = cases[c].N, No = cases[c].gated ? N / 2 : N;
        const int lay = cases[c].layout;
        const lf_dtype bdt = cases[c].bdt;
        const size_t es = lf_dtype_size(bdt);
        const int64_t bn = lay == STRIDED ? 2 * K * N : K * N; /* a strided B skips every other element */
        /* A in B's dtype (the GEMM takes one), D f32; D sized for the ungated refusal below */
        float *bias = malloc((size_t)N * 4), *d1 = malloc((size_t)(M * N) * 4), *d2 = malloc((size_t)(M * N) * 4);
        void *a = malloc((size_t)(M * K) * es), *b = malloc((size_t)bn * es);
        fill(&rng, a, bdt, M * K), fill(&rng, b, bdt, bn), fill(&rng, bias, LF_DTYPE_F32, N);
        lf_gemm g = {.ep = lf_epilogue_default()};
        g.a = (lf_matrix){a, bdt, M, K, K, 1};
        g.b = lay == LINEAR     ? (lf_matrix){b, bdt, K, N, 1, K}
              : lay == ROWMAJOR ? (lf_matrix){b, bdt, K, N, N, 1}
                                : (lf_matrix){b, bdt, K, N, 2 * N, 2};
        g.d = (lf_matrix){d1, LF_DTYPE_F32, M, No, No, 1};
        if (cases[c].gated) {
            g.ep.gate = LF_GATE_PAIRED;
            g.ep.gate_group = No % 16 == 0 ? 16 : No % 12 == 0 ? 12 : No; /* blocks of gates, or stacked */
        }
        lf_cpu_packed_b *p = NULL;
        { /* packing reads B alone: a bias (the call's own) and A in memory that cannot be read, as a
           * compiled plan's capture-time addresses may be */
            const size_t page = (size_t)sysconf(_SC_PAGESIZE), len = ((size_t)N * 4 + page - 1) / page * page;
            void *none = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            CHECK(none != MAP_FAILED, "mmap");
            if (none != MAP_FAILED) {
                lf_gemm h = g;
                h.ep.bias = none, h.ep.bias_dtype = LF_DTYPE_F32, h.a.data = none;
                OK(lf_cpu_pack_b(&h, &p));
                lf_cpu_packed_b_free(p), p = NULL;
                munmap(none, len);
            }
        }
        OK(lf_cpu_pack_b(&g, &p)); /* packed with no bias and no activation */
        g.ep.bias = bias, g.ep.bias_dtype = LF_DTYPE_F32, g.ep.act = cases[c].gated ? LF_ACT_SILU : LF_ACT_GELU_TANH;
        for (int threads = 1; threads <= 2; threads++) {
            lf_cpu_set_threads(threads);
            CHECK(packed_matches(&g, p, d1, d2, M * No),
                  "%s: B packed once, %lld x %lld x %lld, layout %d, %s%s, %d threads: lf_backend_gemm's bits",
                  lf_cpu_isa_name(isa), (long long)M, (long long)K, (long long)N, lay, lf_dtype_name(bdt),
                  cases[c].gated ? ", gated" : "", threads);
        }
        lf_cpu_set_threads(0);
        /* the packing is what the tiled path reads (white-box: the contract asks B to stay as
         * packed): B changed after packing leaves a packed call's bits as they were */
        if (M > 16 || lay != LINEAR) {
            fill(&rng, b, bdt, bn);
            for (int64_t i = 0; i < M * No; i++)
                d1[i] = NAN;
            g.d.data = d1;
            OK(lf_cpu_gemm_packed(&g, p, NULL));
            CHECK(!memcmp(d1, d2, (size_t)(M * No) * 4), "%s: %lld x %lld x %lld, layout %d: the packed copy is read",
                  lf_cpu_isa_name(isa), (long long)M, (long long)K, (long long)N, lay);
        }
        /* what it does not fit: another B at another address, another shape, no gate, other kernels */
        lf_gemm h = g;
        h.b.data = (char *)b + es;
        FAILS(LF_EINVAL, "not the one packed", lf_cpu_gemm_packed(&h, p, NULL));
        h = g;
        h.a.cols = h.b.rows = K - 1;
        FAILS(LF_EINVAL, "not the one packed", lf_cpu_gemm_packed(&h, p, NULL));
        if (cases[c].gated) {
            h = g;
            h.ep.gate = LF_GATE_NONE, h.d.cols = h.d.rs = N;
            FAILS(LF_EINVAL, "packed for a paired gate", lf_cpu_gemm_packed(&h, p, NULL));
            if (No % 2 == 0 && g.ep.gate_group % 2 == 0) { /* the same B in smaller gate groups */
                h = g;
                h.ep.gate_group /= 2;
                FAILS(LF_EINVAL, "gate group", lf_cpu_gemm_packed(&h, p, NULL));
            }
        }
        if (isa > LF_CPU_ISA_SCALAR) { /* kernels forced elsewhere since: B packed again, as unpacked */
            OK(lf_cpu_isa_force(LF_CPU_ISA_SCALAR));
            CHECK(packed_matches(&g, p, d1, d2, M * No), "%s packing, scalar kernels in use: lf_backend_gemm's bits",
                  lf_cpu_isa_name(isa));
            OK(lf_cpu_isa_force(isa));
        }
        FAILS(LF_EINVAL, "packed", lf_cpu_gemm_packed(NULL, p, NULL));
        FAILS(LF_EINVAL, "packed", lf_cpu_gemm_packed(&g, NULL, NULL));
        lf_cpu_packed_b_free(p);
        free(a), free(b), free(bias), free(d1), free(d2);
    }
    /* sizes past 63 bits, valid with broadcast strides (a few bytes of memory): a clear refusal,
     * where 4 K nr wrapped to 0 (a division by zero) and the packed size to 0 past 2^64 - 63 */
    static float tiny[64];
    const int nr = isa == LF_CPU_ISA_AVX512 ? 32 : isa == LF_CPU_ISA_AVX2 ? 16 : 8;
    const int64_t huge_k = (int64_t)(((uint64_t)1 << 62) / (uint64_t)nr);
    lf_gemm big = {.ep = lf_epilogue_default()};
    big.a = (lf_matrix){tiny, LF_DTYPE_F32, 32, huge_k, 0, 0};
    big.b = (lf_matrix){tiny + 1, LF_DTYPE_F32, huge_k, 64, 0, 0};
    big.d = (lf_matrix){tiny, LF_DTYPE_F32, 32, 64, 64, 1};
    float *dbig = malloc(32 * 64 * sizeof(float));
    big.d.data = dbig;
    lf_cpu_packed_b *p = (lf_cpu_packed_b *)&rng;
    FAILS(LF_EOVERFLOW, "is past the", lf_cpu_pack_b(&big, &p));
    CHECK(p == NULL, "a refused packing leaves NULL");
    FAILS(LF_EOVERFLOW, "past", lf_backend_gemm(LF_DEVICE_CPU, &big, NULL));
    if (isa == LF_CPU_ISA_SCALAR) { /* 179951 x 8 x 3203431780337 slivers x 4 bytes = 2^64 - 32 */
        big.a.rows = big.d.rows = 1, big.a.cols = big.b.rows = 179951;
        big.b.cols = big.d.cols = (int64_t)8 * 3203431780337LL, big.d.rs = big.d.cols;
        FAILS(LF_EOVERFLOW, "63 bits", lf_cpu_pack_b(&big, &p));
    }
    free(dbig);
    p = (lf_cpu_packed_b *)&rng;
    FAILS(LF_EINVAL, "", lf_cpu_pack_b(NULL, &p));
    CHECK(p == NULL, "a refused packing leaves NULL");
    lf_cpu_packed_b_free(NULL);
}

/* A one-column D with a huge column stride (valid: one column never steps by it): the epilogue's
 * prefetch of D once walked nro strides of it, for ever at 2^40. Killed by the alarm if so. */
static void test_one_column_stride(void)
{
    float a[64 * 8], b[8], d[64];
    for (int i = 0; i < 64 * 8; i++)
        a[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 8; i++)
        b[i] = 0.5f * (float)i;
    lf_gemm g = {.ep = lf_epilogue_default()};
    g.a = (lf_matrix){a, LF_DTYPE_F32, 64, 8, 8, 1};
    g.b = (lf_matrix){b, LF_DTYPE_F32, 8, 1, 1, 8};
    g.d = (lf_matrix){d, LF_DTYPE_F32, 64, 1, 1, (int64_t)1 << 40};
    alarm(60);
    OK(lf_backend_gemm(LF_DEVICE_CPU, &g, NULL));
    alarm(0);
    int ok = 1;
    for (int r = 0; r < 64; r++) {
        float want = 0;
        for (int k = 0; k < 8; k++)
            want += a[r * 8 + k] * b[k];
        ok &= d[r] == want;
    }
    CHECK(ok, "a one-column D of column stride 2^40: computed, at once");
}

int main(void)
{
    lf_cpu_isa best = lf_cpu_isa_detect();
    printf("best instruction set here: %s\n", lf_cpu_isa_name(best));
    for (int isa = 0; isa <= (int)best; isa++)
        test_activations((lf_cpu_isa)isa);
    CHECK(lf_cpu_isa_force(best) == LF_OK, "restore %s", lf_cpu_isa_name(best));
    test_threads_deterministic();
    test_inside_callers_team();
    test_one_column_stride();
    for (int isa = 0; isa <= (int)best; isa++)
        test_packed_b((lf_cpu_isa)isa);
    CHECK(lf_cpu_isa_force(best) == LF_OK, "restore %s", lf_cpu_isa_name(best));
    test_plan_file();
    test_gated_rule();
    return lf_test_finish("test_backend_cpu");
}
