/* `linfuse bench cpu`: the CPU GEMM and the fused Linear+bias+GELU against OpenBLAS, measured
 * side by side in one run on one machine with the same thread count. OpenBLAS is opened at run
 * time (dlopen) because it is a yardstick, not a dependency. Each case checks that both sides
 * computed the same numbers before it reports a speed. linfuse's side is one call of the public
 * backend GEMM (lf_backend_gemm) with bias and GELU in its epilogue; the unfused side is OpenBLAS's
 * sgemm, then linfuse's public ops lf_add (the bias) and lf_gelu, each writing a new tensor, as a
 * program calls them (until 0.2 the two passes were the backend's pointwise kernels run in place,
 * an internal call: the ops add their dispatch, a few microseconds, and take their outputs from
 * the host block cache, against about 18 ms of work). Timed by bench_time.c. Layer: cli/. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/bench_time.h"
#include "cli/cli.h"
#include "linfuse/cpu.h"

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                         const float *b, int ldb, float beta, float *c, int ldc);

typedef struct openblas {
    void *lib;
    sgemm_fn sgemm;
    void (*set_threads)(int);
    char *(*corename)(void);
    char *(*config)(void);
} openblas;

static int openblas_open(openblas *ob)
{
    static const char *const names[] = {"libopenblas.so.0", "libopenblas.so"};
    memset(ob, 0, sizeof *ob);
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !ob->lib; i++)
        ob->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!ob->lib) {
        fprintf(stderr, "linfuse bench cpu: OpenBLAS is not installed (it is the yardstick).\n"
                        "  install it with: apt-get install libopenblas0-pthread   (or run `make bench`)\n");
        return 0;
    }
    ob->sgemm = (sgemm_fn)dlsym(ob->lib, "cblas_sgemm");
    ob->set_threads = (void (*)(int))dlsym(ob->lib, "openblas_set_num_threads");
    ob->corename = (char *(*)(void))dlsym(ob->lib, "openblas_get_corename");
    ob->config = (char *(*)(void))dlsym(ob->lib, "openblas_get_config");
    if (!ob->sgemm || !ob->set_threads) {
        fprintf(stderr, "linfuse bench cpu: the OpenBLAS found lacks cblas_sgemm or openblas_set_num_threads\n");
        dlclose(ob->lib);
        return 0;
    }
    return 1;
}

/* One GEMM-shaped case: y (M, N) = x (M, K) . B, where B is W^T (W (N, K), the Linear) or a
 * row-major (K, N) matrix; optionally + bias and gelu_tanh. */
typedef struct bcase {
    const char *name;
    int64_t M, N, K;
    int linear;   /* B = W^T read in place ("tn"); else B row-major ("nn") */
    int epilogue; /* bias + gelu_tanh */
    int packed;   /* linfuse packs B once (lf_cpu_pack_b, at the first call) instead of at every call */
} bcase;

typedef struct bufs {
    float *x, *w, *bias, *y_lf, *y_ob;
    lf_tensor *y_ob_t, *bias_t; /* y_ob (M, N) and bias (N) as tensors, for the unfused side's ops */
    lf_tensor *unfused;         /* the unfused side's last output: gelu(y_ob + bias) */
    lf_cpu_packed_b *packed;    /* B packed once, for a packed case */
} bufs;

typedef enum side { SIDE_LINFUSE, SIDE_OPENBLAS, SIDE_OPENBLAS_UNFUSED } side;

/* The unfused side's two passes over sgemm's y_ob: lf_add then lf_gelu, as a program calls them. */
static lf_status unfused_passes(bufs *b)
{
    lf_tensor *sum = NULL, *out = NULL;
    lf_status st = lf_add(&sum, b->y_ob_t, b->bias_t);
    if (st == LF_OK)
        st = lf_gelu(&out, sum, LF_GELU_TANH);
    lf_tensor_free(sum);
    if (st == LF_OK) {
        lf_tensor_free(b->unfused);
        b->unfused = out;
    }
    return st;
}

static lf_status run_side(const bcase *c, bufs *b, const openblas *ob, side s)
{
    const int64_t M = c->M, N = c->N, K = c->K;
    if (s == SIDE_LINFUSE) {
        lf_gemm g = {.ep = lf_epilogue_default()};
        g.a = (lf_matrix){b->x, LF_DTYPE_F32, M, K, K, 1};
        g.b = c->linear ? (lf_matrix){b->w, LF_DTYPE_F32, K, N, 1, K} : (lf_matrix){b->w, LF_DTYPE_F32, K, N, N, 1};
        g.d = (lf_matrix){b->y_lf, LF_DTYPE_F32, M, N, N, 1};
        if (c->epilogue) {
            g.ep.bias = b->bias;
            g.ep.act = LF_ACT_GELU_TANH;
        }
        if (!c->packed)
            return lf_backend_gemm(LF_DEVICE_CPU, &g, NULL);
        lf_status st = LF_OK;
        if (!b->packed) /* at the first (warm-up) call: what a model does when it loads its weights */
            st = lf_cpu_pack_b(&g, &b->packed);
        return st != LF_OK ? st : lf_cpu_gemm_packed(&g, b->packed, NULL);
    }
    ob->sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, c->linear ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)M, (int)N, (int)K, 1.0f,
              b->x, (int)K, b->w, c->linear ? (int)K : (int)N, 0.0f, b->y_ob, (int)N);
    return s == SIDE_OPENBLAS_UNFUSED && c->epilogue ? unfused_passes(b) : LF_OK;
}

enum { ROUNDS = 3, MAX_CALLS = 600 };

/* One side of a case, as the timing harness calls it. */
typedef struct side_run {
    const bcase *c;
    bufs *b;
    const openblas *ob;
    side s;
} side_run;

static lf_status side_forward(void *ctx)
{
    side_run *r = ctx;
    return run_side(r->c, r->b, r->ob, r->s);
}

/* Median seconds per call of each side. Sides run in blocks (2 warm-up calls, then at least
 * `reps` calls and 0.3 s, each call timed alone), and the blocks take turns over ROUNDS rounds, so
 * a slow moment of the machine hits every side alike. Blocks rather than single calls: OpenMP's
 * and OpenBLAS's worker threads spin for a while after each call, and alternating single calls
 * would make each library run beside the other's spinning threads. The unfused side runs last, so
 * its output (b->unfused) is of the last block. 0 with *st LF_OK when out of memory. */
static int time_sides(const bcase *c, bufs *b, const openblas *ob, const side *sides, int n_sides, int reps,
                      double *median, lf_status *st)
{
    side_run runs[3];
    lf_bench bench[3];
    int ok = 1;
    *st = LF_OK;
    for (int k = 0; k < n_sides; k++) {
        runs[k] = (side_run){c, b, ob, sides[k]};
        const lf_bench_opts o = {.warmup = 2,
                                 .per_sample = 1,
                                 .samples = reps,
                                 .min_seconds = 0.3,
                                 .cap = MAX_CALLS,
                                 .forward = side_forward,
                                 .ctx = &runs[k]};
        ok &= lf_bench_init(&bench[k], &o);
    }
    for (int round = 0; round < ROUNDS && ok && *st == LF_OK; round++)
        for (int k = 0; k < n_sides && *st == LF_OK; k++)
            *st = lf_bench_run(&bench[k]);
    for (int k = 0; k < n_sides; k++) {
        median[k] = lf_bench_median(&bench[k]);
        lf_bench_free(&bench[k]);
    }
    return ok;
}

static double max_rel_diff(const float *a, const float *b, int64_t n)
{
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs((double)b[i]));
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
    }
    return scale > 0 ? diff / scale : diff;
}

/* The case's buffers drawn from one seed, and the unfused side's tensors over them; 0 when out of
 * memory. */
static int bufs_make(const bcase *c, bufs *b)
{
    const int64_t M = c->M, N = c->N, K = c->K;
    *b = (bufs){malloc((size_t)(M * K) * 4),
                malloc((size_t)(K * N) * 4),
                malloc((size_t)N * 4),
                malloc((size_t)(M * N) * 4),
                malloc((size_t)(M * N) * 4),
                NULL,
                NULL,
                NULL,
                NULL};
    if (!b->x || !b->w || !b->bias || !b->y_lf || !b->y_ob)
        return 0;
    const int64_t ys[2] = {M, N}, bs[1] = {N};
    if (lf_tensor_from_memory(&b->y_ob_t, LF_DTYPE_F32, 2, ys, b->y_ob, (size_t)(M * N) * 4, NULL, NULL) != LF_OK ||
        lf_tensor_from_memory(&b->bias_t, LF_DTYPE_F32, 1, bs, b->bias, (size_t)N * 4, NULL, NULL) != LF_OK)
        return 0;
    lf_rng rng;
    lf_rng_seed(&rng, 42);
    for (int64_t i = 0; i < M * K; i++)
        b->x[i] = (float)(2 * lf_rng_uniform(&rng) - 1);
    for (int64_t i = 0; i < K * N; i++)
        b->w[i] = (float)((2 * lf_rng_uniform(&rng) - 1) / sqrt((double)K));
    for (int64_t i = 0; i < N; i++)
        b->bias[i] = (float)(2 * lf_rng_uniform(&rng) - 1);
    return 1;
}

static void bufs_free(bufs *b)
{
    lf_tensor_free(b->y_ob_t), lf_tensor_free(b->bias_t), lf_tensor_free(b->unfused);
    lf_cpu_packed_b_free(b->packed);
    free(b->x), free(b->w), free(b->bias), free(b->y_lf), free(b->y_ob);
}

static int run_case(const bcase *c, const openblas *ob, int reps)
{
    const int64_t M = c->M, N = c->N, K = c->K;
    bufs b;
    int ok = bufs_make(c, &b);
    lf_status st = LF_OK;
    double t[3] = {0, 0, 0}, diff = 0;
    if (ok) {
        const side sides[3] = {SIDE_LINFUSE, SIDE_OPENBLAS, SIDE_OPENBLAS_UNFUSED};
        ok = time_sides(c, &b, ob, sides, c->epilogue ? 3 : 2, reps, t, &st);
        if (ok && st == LF_OK) /* OpenBLAS's answer: sgemm's, or the unfused side's last */
            diff = max_rel_diff(b.y_lf, b.unfused ? lf_tensor_data(b.unfused) : b.y_ob, M * N);
    }
    const double t_lf = t[0], t_ob = t[1], t_unf = t[2];
    if (!ok || st != LF_OK) {
        fprintf(stderr, "linfuse bench cpu: case %s failed: %s\n", c->name, ok ? lf_last_error() : "out of memory");
        ok = 0;
    } else if (diff > 1e-4) {
        fprintf(stderr, "linfuse bench cpu: case %s: linfuse and OpenBLAS disagree (max rel diff %.2e)\n", c->name,
                diff);
        ok = 0;
    } else {
        double gf = 2.0 * (double)M * (double)N * (double)K * 1e-9;
        printf("case=%s linfuse_gflops=%.1f openblas_gflops=%.1f ratio=%.3f max_rel_diff=%.1e\n", c->name, gf / t_lf,
               gf / t_ob, t_ob / t_lf, diff);
        if (c->epilogue)
            printf("case=%s_vs_unfused linfuse_gflops=%.1f openblas_gflops=%.1f ratio=%.3f max_rel_diff=%.1e\n",
                   c->name, gf / t_lf, gf / t_unf, t_unf / t_lf, diff);
    }
    bufs_free(&b);
    return ok;
}

static int bench_cpu(int reps)
{
    openblas ob;
    if (!openblas_open(&ob))
        return LF_EXIT_FAIL;
    int threads = lf_cpu_threads();
    ob.set_threads(threads);
    if (getenv("OPENBLAS_CORETYPE") || getenv("OPENBLAS_L2_SIZE"))
        fprintf(stderr, "linfuse bench cpu: warning: OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE are set and slow OpenBLAS "
                        "down; `make bench` unsets them for this command\n");
    printf("# linfuse %s kernels, OpenBLAS %s (%s), %d threads each, f32, median of >= %d calls\n",
           lf_cpu_isa_name(lf_cpu_isa_active()), ob.corename ? ob.corename() : "?", ob.config ? ob.config() : "?",
           threads, reps);
    static const bcase cases[] = {
        {"sgemm_1024x3072x768", 1024, 3072, 768, 0, 0, 0},
        {"sgemm_2048x2048x2048", 2048, 2048, 2048, 0, 0, 0},
        {"linear_bias_gelu_tanh_1024x3072x768", 1024, 3072, 768, 1, 1, 0},
        /* the same Linear with its weight packed once, as an inference model holds it (OpenBLAS,
         * which has no packing call, still packs it at every call: the ratio is what a model
         * gains, not a like-for-like GEMM) */
        {"linear_bias_gelu_tanh_1024x3072x768_packed", 1024, 3072, 768, 1, 1, 1},
        /* a decode step's Linear, one token and sixteen: linfuse's dot products from the weight */
        {"linear_1x8192x2048", 1, 8192, 2048, 1, 0, 0},
        {"linear_16x8192x2048", 16, 8192, 2048, 1, 0, 0},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ok &= run_case(&cases[i], &ob, reps);
    dlclose(ob.lib);
    return ok ? LF_EXIT_OK : LF_EXIT_FAIL;
}

static void bench_usage(void)
{
    printf("usage: linfuse bench cpu|profiler|cuda|tp [--reps N] [--case NAME] [--tp N]\n"
           "       linfuse bench cuda --mlp TOKENSxDIMxHIDDEN[,...] [--act gelu_tanh|silu] [--forms LIST]\n"
           "                          [--settle-ms MS] [--flush-l2]\n"
           "  cpu:      f32 GEMMs and the fused Linear+bias+gelu_tanh against OpenBLAS, same threads\n"
           "  profiler: what recording costs per event and per step, profiler on vs off\n"
           "  cuda:     the blog's forwards on the GPU (bench/cuda_vs_torch.py puts PyTorch beside them);\n"
           "            --case runs only the cases whose names contain NAME; --mlp times every MLP\n"
           "            variant, eager and compiled, at the shapes given instead (up to 32; --act picks\n"
           "            GeGLU, the default, or SwiGLU; bench/mlp_sweep_vs_torch.py runs PyTorch beside);\n"
           "            --forms times only some: eager,fused,gated,fp8,compiled,compiled_gated; the\n"
           "            forms take turns sample by sample, or with --settle-ms each is timed alone\n"
           "            after MS milliseconds of idle GPU (0 to 10000); --flush-l2: each sample is one\n"
           "            forward after 256 MiB copied on the GPU, so it reads its weights from memory\n"
           "  tp:       the MLP split over the GPUs (--tp N of them, default all), each variant with and\n"
           "            without overlap and compiled (bench/tp_vs_torch.py puts PyTorch beside them)\n"
           "  --reps N: samples per case, 1 to 200 (10)\n");
}

int lf_cli_bench(int argc, char **argv)
{
    int64_t reps = 10, tp = 0, settle_ms = 0;
    int flush_l2 = 0;
    const char *what = NULL, *only = NULL, *mlp = NULL, *form_words = NULL, *v;
    lf_act act = LF_ACT_GELU_TANH;
    int act_given = 0;
    enum { B_REPS, B_CASE, B_TP, B_MLP, B_ACT, B_FORMS, B_SETTLE, B_FLUSH };
    const lf_cli_opt opts[] = {{"reps", 1, B_REPS, 0},        {"case", 1, B_CASE, 0},     {"tp", 1, B_TP, 0},
                               {"mlp", 1, B_MLP, 0},          {"act", 1, B_ACT, 0},       {"forms", 1, B_FORMS, 0},
                               {"settle-ms", 1, B_SETTLE, 0}, {"flush-l2", 0, B_FLUSH, 0}};
    lf_cli_args a;
    lf_cli_args_init(&a, "linfuse bench", argc, argv, opts, 8);
    for (int id; (id = lf_cli_next(&a, &v)) != LF_CLI_END;) {
        if (id == B_REPS) {
            if (!lf_cli_int("linfuse bench", "--reps", v, 1, 200, &reps))
                return LF_EXIT_USAGE;
        } else if (id == B_TP) {
            if (!lf_cli_int("linfuse bench", "--tp", v, 2, LF_MAX_DEVICE_INDEX, &tp))
                return LF_EXIT_USAGE;
        } else if (id == B_CASE && *v) {
            only = v;
        } else if (id == B_MLP) {
            mlp = v;
        } else if (id == B_FORMS) {
            form_words = v;
        } else if (id == B_FLUSH) {
            flush_l2 = 1;
        } else if (id == B_SETTLE) {
            if (!lf_cli_int("linfuse bench", "--settle-ms", v, 0, 10000, &settle_ms))
                return LF_EXIT_USAGE;
        } else if (id == B_ACT) {
            if (strcmp(v, "gelu_tanh") && strcmp(v, "silu")) {
                fprintf(stderr, "linfuse bench: --act takes gelu_tanh (GeGLU) or silu (SwiGLU), not '%s'\n", v);
                return LF_EXIT_USAGE;
            }
            act = strcmp(v, "silu") ? LF_ACT_GELU_TANH : LF_ACT_SILU, act_given = 1;
        } else if (id == LF_CLI_HELP) {
            bench_usage();
            return LF_EXIT_OK;
        } else if (id == LF_CLI_WORD && !what) {
            what = v;
        } else {
            if (id == B_CASE)
                fprintf(stderr, "linfuse bench: --case needs a name (or part of one)\n");
            else if (id == LF_CLI_WORD)
                fprintf(stderr, "linfuse bench: unexpected argument '%s'\n", v);
            return LF_EXIT_USAGE;
        }
    }
    if (what && !strcmp(what, "profiler"))
        return lf_cli_bench_profiler((int)reps);
    if ((mlp || act_given || form_words || settle_ms || flush_l2) && !(what && !strcmp(what, "cuda"))) {
        fprintf(stderr,
                "linfuse bench: --mlp, --act, --forms, --settle-ms and --flush-l2 are for `linfuse bench cuda`\n");
        return LF_EXIT_USAGE;
    }
    if (act_given && !mlp) {
        fprintf(stderr, "linfuse bench cuda: --act goes with --mlp\n");
        return LF_EXIT_USAGE;
    }
    if (what && !strcmp(what, "cuda")) {
        const lf_cli_bench_cuda_opts co = {(int)reps, only, mlp, form_words, (int)settle_ms, flush_l2, act};
        return lf_cli_bench_cuda(&co);
    }
    if (what && !strcmp(what, "tp"))
        return lf_cli_bench_tp((int)reps, only, (int)tp);
    if (tp) {
        fprintf(stderr, "linfuse bench: --tp is for `linfuse bench tp`\n");
        return LF_EXIT_USAGE;
    }
    if (only) {
        fprintf(stderr, "linfuse bench: --case is for `linfuse bench cuda` and `linfuse bench tp`\n");
        return LF_EXIT_USAGE;
    }
    if (!what || strcmp(what, "cpu")) {
        fprintf(stderr, "linfuse bench: expected `linfuse bench cpu`, `profiler`, `cuda` or `tp`%s%s\n",
                what ? ", got " : "", what ? what : "");
        return LF_EXIT_USAGE;
    }
    return bench_cpu((int)reps);
}
