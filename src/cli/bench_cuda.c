/* `linfuse bench cuda`: the blog's forwards on the GPU, for side-by-side runs with PyTorch
 * (bench/cuda_vs_torch.py runs both). GPU time per forward: many forwards queued back to back,
 * synchronized once, divided (the GPU is the bottleneck for these sizes, so the queue never
 * runs dry). Host time per call: one forward timed alone after the queue has drained, so it
 * is what the caller's thread spends to queue the work. Both timed by bench_time.c.
 * Layer: cli/. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/bench_time.h"
#include "cli/cli.h"
#include "linfuse/compile.h"
#include "linfuse/cuda.h"

typedef struct gcase {
    const char *name;
    /* 0 matmul-add, 1 linear, 2 mlp, 3 the gated GEMM alone, 4 one GEMM over [Wg; Wu]; in FP8 (x
     * quantized once, outside the timing): 5 the gated GEMM alone, 6 one scaled GEMM over [Wg; Wu] */
    int kind;
    int64_t a, b, c, d;
    lf_mlp_variant variant;  /* kind 2 */
    unsigned compiled;       /* 0: eager; else compile mode with these passes (one CUDA graph per run) */
    lf_act act;              /* kind 2: LF_ACT_NONE is GeGLU's gelu_tanh; LF_ACT_SILU the Llama MLP */
    lf_gated_schedule sched; /* kind 3: the gated kernel's schedule, forced for this case (0: the backend's choice) */
} gcase;

/* A case's operands: x, and what the case's kind multiplies it with. */
typedef struct operands {
    lf_tensor *x, *w, *b;
    lf_nn_linear lin;
    lf_nn_gated_mlp mlp;
} operands;

/* Case g's forward, eagerly, on x (o's own, or the one compile mode captures with) and o's
 * weights; the result to *out, or freed when out is NULL. */
static lf_status eager(const gcase *g, lf_tensor *x, const operands *o, lf_tensor **out)
{
    const lf_nn_gated_mlp *mlp = &o->mlp;
    lf_tensor *y = NULL, *t = NULL;
    lf_status s;
    if (g->kind == 0) {
        s = lf_matmul(&t, x, o->w);
        if (s == LF_OK)
            s = lf_add(&y, t, o->b);
    } else if (g->kind == 1) {
        s = lf_nn_linear_forward(&o->lin, x, &y);
    } else if (g->kind == 2) {
        s = lf_nn_gated_mlp_forward_variant(mlp, g->variant, x, &y);
    } else if (g->kind <= 4) { /* x is (tokens, dim); the gated GEMM against the plain GEMM with the same FLOPs */
        s = lf_t(&t, mlp->gate_up);
        if (s == LF_OK)
            s = g->kind == 3 ? lf_mm_gated(&y, x, t, LF_ACT_GELU_TANH, mlp->hidden) : lf_mm(&y, x, t);
    } else { /* FP8: x is already e4m3 and w holds its per-token scales */
        s = lf_t(&t, mlp->gate_up_q);
        if (s == LF_OK)
            s = g->kind == 5 ? lf_scaled_mm_gated(&y, x, o->w, t, mlp->gate_up_scale, LF_ACT_GELU_TANH, mlp->hidden)
                             : lf_scaled_mm(&y, x, o->w, t, mlp->gate_up_scale, LF_DTYPE_BF16);
    }
    lf_tensor_free(t);
    if (out)
        *out = y;
    else
        lf_tensor_free(y);
    return s;
}

static lf_status to_cuda(lf_tensor **t)
{
    lf_tensor *g = NULL;
    lf_status s = lf_tensor_to_device(&g, *t, LF_DEVICE_CUDA);
    if (s != LF_OK)
        return s;
    lf_tensor_free(*t);
    *t = g;
    return LF_OK;
}

/* One row per case, the macros' rows as written. */
/* clang-format off */
static const gcase cases[] = {
    {"matmul_add_4096", 0, 4096, 0, 0, 0, 0, 0, LF_ACT_NONE, 0},
    {"mlp_64x128x768x3072", 2, 64, 128, 768, 3072, LF_MLP_EAGER, 0, LF_ACT_NONE, 0},
    {"mlp_64x128x768x3072_fused", 2, 64, 128, 768, 3072, LF_MLP_FUSED, 0, LF_ACT_NONE, 0},
    {"mlp_64x128x768x3072_gated", 2, 64, 128, 768, 3072, LF_MLP_GATED, 0, LF_ACT_NONE, 0},
    {"gemm_gated_8192x768x3072", 3, 1, 8192, 768, 3072, 0, 0, LF_ACT_NONE, 0},
    {"gemm_concat_8192x768x6144", 4, 1, 8192, 768, 3072, 0, 0, LF_ACT_NONE, 0},
    {"mlp_8x1024x4096x11008", 2, 8, 1024, 4096, 11008, LF_MLP_EAGER, 0, LF_ACT_NONE, 0},
    {"mlp_8x1024x4096x11008_fused", 2, 8, 1024, 4096, 11008, LF_MLP_FUSED, 0, LF_ACT_NONE, 0},
    {"mlp_8x1024x4096x11008_gated", 2, 8, 1024, 4096, 11008, LF_MLP_GATED, 0, LF_ACT_NONE, 0},
    {"gemm_gated_8192x4096x11008", 3, 1, 8192, 4096, 11008, 0, 0, LF_ACT_NONE, 0},
    {"gemm_concat_8192x4096x22016", 4, 1, 8192, 4096, 11008, 0, 0, LF_ACT_NONE, 0},
    /* the gated kernel's three schedules side by side, each against one GEMM over [Wg; Wu] */
#define SCHED(T, D, H)                                                                                                  \
{"sched_cooperative_" #T "x" #D "x" #H, 3, 1, T, D, H, 0, 0, LF_ACT_NONE, LF_GATED_COOPERATIVE},                   \
    {"sched_pingpong_" #T "x" #D "x" #H, 3, 1, T, D, H, 0, 0, LF_ACT_NONE, LF_GATED_PINGPONG},                      \
    {"sched_offload_" #T "x" #D "x" #H, 3, 1, T, D, H, 0, 0, LF_ACT_NONE, LF_GATED_OFFLOAD},                        \
    {"sched_concat_" #T "x" #D "x" #H, 4, 1, T, D, H, 0, 0, LF_ACT_NONE, 0}
    SCHED(8192, 768, 3072), SCHED(8192, 4096, 11008), SCHED(4096, 2048, 8192), SCHED(512, 4096, 14336),
    SCHED(2048, 4096, 14336), SCHED(64, 4096, 14336), SCHED(8192, 4096, 14336), SCHED(1024, 768, 3072),
    SCHED(128, 4096, 14336), SCHED(256, 4096, 14336), SCHED(1024, 4096, 14336), SCHED(4096, 768, 3072),
#undef SCHED
    /* the gated GEMM in FP8 against itself in bf16 and against cuBLASLt's FP8 GEMM over [Wg; Wu] */
#define FP8(T, D, H)                                                                                                    \
{"fp8_gated_" #T "x" #D "x" #H, 5, 1, T, D, H, 0, 0, LF_ACT_NONE, 0},                                                \
    {"fp8_bf16_gated_" #T "x" #D "x" #H, 3, 1, T, D, H, 0, 0, LF_ACT_NONE, 0},                                      \
    {"fp8_concat_" #T "x" #D "x" #H, 6, 1, T, D, H, 0, 0, LF_ACT_NONE, 0}
    FP8(8192, 4096, 11008), FP8(8192, 768, 3072), FP8(512, 4096, 14336),
#undef FP8
    /* the FP8 gated kernel's three schedules side by side (an MMA takes half the time it does in
     * bf16, so the epilogue the ping-pong and offload schedules hide weighs twice as much) */
#define SCHED8(T, D, H)                                                                                                 \
{"fp8_sched_cooperative_" #T "x" #D "x" #H, 5, 1, T, D, H, 0, 0, LF_ACT_NONE, LF_GATED_COOPERATIVE},               \
    {"fp8_sched_pingpong_" #T "x" #D "x" #H, 5, 1, T, D, H, 0, 0, LF_ACT_NONE, LF_GATED_PINGPONG},                  \
    {"fp8_sched_offload_" #T "x" #D "x" #H, 5, 1, T, D, H, 0, 0, LF_ACT_NONE, LF_GATED_OFFLOAD}
    SCHED8(8192, 4096, 11008), SCHED8(8192, 768, 3072), SCHED8(512, 4096, 14336), SCHED8(2048, 4096, 14336),
    SCHED8(8192, 4096, 14336), SCHED8(1024, 768, 3072), SCHED8(4096, 2048, 8192),
#undef SCHED8
    {"mlp_64x128x768x3072_fp8", 2, 64, 128, 768, 3072, LF_MLP_FP8, 0, LF_ACT_NONE, 0},
    {"mlp_8x1024x4096x11008_fp8", 2, 8, 1024, 4096, 11008, LF_MLP_FP8, 0, LF_ACT_NONE, 0},
    {"mlp_1x16x4096x11008", 2, 1, 16, 4096, 11008, LF_MLP_EAGER, 0, LF_ACT_NONE, 0},
    {"mlp_1x16x4096x11008_fused", 2, 1, 16, 4096, 11008, LF_MLP_FUSED, 0, LF_ACT_NONE, 0},
    {"linear_1024x32x64", 1, 1024, 32, 64, 0, 0, 0, LF_ACT_NONE, 0},
    {"matmul_add_64", 0, 64, 0, 0, 0, 0, 0, LF_ACT_NONE, 0},
    /* compile mode: one CUDA graph launch per forward */
    {"compiled_linear_1024x32x64", 1, 1024, 32, 64, 0, 0, LF_PASSES_DEFAULT, LF_ACT_NONE, 0},
    {"compiled_matmul_add_4096", 0, 4096, 0, 0, 0, 0, LF_PASSES_DEFAULT, LF_ACT_NONE, 0},
    {"compiled_mlp_1x16x768x3072", 2, 1, 16, 768, 3072, LF_MLP_EAGER, LF_PASSES_DEFAULT, LF_ACT_NONE, 0},
    {"compiled_mlp_64x128x768x3072", 2, 64, 128, 768, 3072, LF_MLP_EAGER, LF_PASSES_DEFAULT, LF_ACT_NONE, 0},
    {"compiled_gated_mlp_64x128x768x3072", 2, 64, 128, 768, 3072, LF_MLP_EAGER, LF_PASSES_ALL, LF_ACT_NONE, 0},
    /* compiled FP8: the fp8 variant's forward as a plan, and the gated pass's --fp8 on the eager one */
    {"compiled_mlp_64x128x768x3072_fp8", 2, 64, 128, 768, 3072, LF_MLP_FP8, LF_PASSES_DEFAULT, LF_ACT_NONE, 0},
    {"compiled_fp8pass_mlp_64x128x768x3072", 2, 64, 128, 768, 3072, LF_MLP_EAGER, LF_PASSES_ALL | LF_PASS_FP8,
     LF_ACT_NONE, 0},
    {"compiled_mlp_8x1024x4096x11008", 2, 8, 1024, 4096, 11008, LF_MLP_EAGER, LF_PASSES_DEFAULT, LF_ACT_NONE, 0},
    {"compiled_gated_mlp_8x1024x4096x11008", 2, 8, 1024, 4096, 11008, LF_MLP_EAGER, LF_PASSES_ALL, LF_ACT_NONE, 0},
    {"compiled_mlp_8x1024x4096x11008_fp8", 2, 8, 1024, 4096, 11008, LF_MLP_FP8, LF_PASSES_DEFAULT, LF_ACT_NONE, 0},
    {"compiled_fp8pass_mlp_8x1024x4096x11008", 2, 8, 1024, 4096, 11008, LF_MLP_EAGER, LF_PASSES_ALL | LF_PASS_FP8,
     LF_ACT_NONE, 0},
    {"compiled_mlp_1x16x4096x11008", 2, 1, 16, 4096, 11008, LF_MLP_EAGER, LF_PASSES_DEFAULT, LF_ACT_NONE, 0},
    /* where a compiled --gated plan once ran 593 us against 560 us for the eager gated call */
    {"mlp_1x4096x2048x8192_gated", 2, 1, 4096, 2048, 8192, LF_MLP_GATED, 0, LF_ACT_NONE, 0},
    {"compiled_gated_mlp_1x4096x2048x8192", 2, 1, 4096, 2048, 8192, LF_MLP_EAGER, LF_PASSES_ALL, LF_ACT_NONE, 0},
    /* Llama-3-8B's MLP (SwiGLU, 4096 -> 14336) at 1, 16, 512 and 8192 tokens */
#define LLAMA(T, V, C) 2, 1, T, 4096, 14336, V, C, LF_ACT_SILU, 0
    {"llama_mlp_1", LLAMA(1, LF_MLP_EAGER, 0)},
    {"llama_mlp_1_fused", LLAMA(1, LF_MLP_FUSED, 0)},
    {"llama_mlp_1_gated", LLAMA(1, LF_MLP_GATED, 0)},
    {"compiled_llama_mlp_1", LLAMA(1, LF_MLP_EAGER, LF_PASSES_DEFAULT)},
    {"compiled_gated_llama_mlp_1", LLAMA(1, LF_MLP_EAGER, LF_PASSES_ALL)},
    {"llama_mlp_16", LLAMA(16, LF_MLP_EAGER, 0)},
    {"llama_mlp_16_fused", LLAMA(16, LF_MLP_FUSED, 0)},
    {"llama_mlp_16_gated", LLAMA(16, LF_MLP_GATED, 0)},
    {"compiled_llama_mlp_16", LLAMA(16, LF_MLP_EAGER, LF_PASSES_DEFAULT)},
    {"compiled_gated_llama_mlp_16", LLAMA(16, LF_MLP_EAGER, LF_PASSES_ALL)},
    {"llama_mlp_512", LLAMA(512, LF_MLP_EAGER, 0)},
    {"llama_mlp_512_fused", LLAMA(512, LF_MLP_FUSED, 0)},
    {"llama_mlp_512_gated", LLAMA(512, LF_MLP_GATED, 0)},
    {"llama_mlp_512_fp8", LLAMA(512, LF_MLP_FP8, 0)},
    {"compiled_llama_mlp_512", LLAMA(512, LF_MLP_EAGER, LF_PASSES_DEFAULT)},
    {"compiled_gated_llama_mlp_512", LLAMA(512, LF_MLP_EAGER, LF_PASSES_ALL)},
    {"llama_mlp_8192", LLAMA(8192, LF_MLP_EAGER, 0)},
    {"llama_mlp_8192_fused", LLAMA(8192, LF_MLP_FUSED, 0)},
    {"llama_mlp_8192_gated", LLAMA(8192, LF_MLP_GATED, 0)},
    {"llama_mlp_8192_fp8", LLAMA(8192, LF_MLP_FP8, 0)},
    {"compiled_llama_mlp_8192", LLAMA(8192, LF_MLP_EAGER, LF_PASSES_DEFAULT)},
    {"compiled_gated_llama_mlp_8192", LLAMA(8192, LF_MLP_EAGER, LF_PASSES_ALL)},
#undef LLAMA
};
/* clang-format on */

static void operands_free(operands *o)
{
    lf_tensor_free(o->x), lf_tensor_free(o->w), lf_tensor_free(o->b);
    lf_nn_linear_free(&o->lin);
    lf_nn_gated_mlp_free(&o->mlp);
    memset(o, 0, sizeof *o);
}

/* Case g's operands on the GPU, drawn from one seed (so every case of a shape gets the same
 * numbers); the MLP's FP8 weights too where fp8 is set or the case needs them. 0 (the error
 * printed) on failure, nothing left allocated. */
static int operands_build(const gcase *g, int fp8, operands *o)
{
    lf_rng rng;
    lf_rng_seed(&rng, 1);
    memset(o, 0, sizeof *o);
    lf_status s = LF_OK;
    if (g->kind == 0) {
        int64_t sq[2] = {g->a, g->a};
        s = lf_tensor_empty(&o->x, LF_DTYPE_BF16, 2, sq, LF_DEVICE_CPU);
        if (s == LF_OK)
            s = lf_tensor_empty(&o->w, LF_DTYPE_BF16, 2, sq, LF_DEVICE_CPU);
        if (s == LF_OK)
            s = lf_tensor_empty(&o->b, LF_DTYPE_BF16, 2, sq, LF_DEVICE_CPU);
        if (s == LF_OK)
            s = lf_tensor_fill_uniform(o->w, &rng, -1, 1);
        if (s == LF_OK)
            s = lf_tensor_fill_uniform(o->b, &rng, -1, 1);
        if (s == LF_OK)
            s = to_cuda(&o->w);
        if (s == LF_OK)
            s = to_cuda(&o->b);
    } else if (g->kind == 1) {
        lf_nn_linear_opts lo = {g->b, g->c, 1, LF_DTYPE_BF16, LF_DEVICE_CPU};
        int64_t xs[2] = {g->a, g->b};
        s = lf_nn_linear_init(&o->lin, &lo, &rng);
        if (s == LF_OK)
            s = lf_tensor_empty(&o->x, LF_DTYPE_BF16, 2, xs, LF_DEVICE_CPU);
        if (s == LF_OK)
            s = to_cuda(&o->lin.weight);
        if (s == LF_OK)
            s = to_cuda(&o->lin.bias);
    } else { /* the MLP, or its first layer alone as (tokens, dim) x (dim, 2H) */
        lf_nn_gated_mlp_opts mo = {g->c, g->d, LF_DTYPE_BF16, LF_DEVICE_CPU, g->act ? g->act : LF_ACT_GELU_TANH};
        int64_t xs[3] = {g->a, g->b, g->c}, x2[2] = {g->a * g->b, g->c};
        s = lf_nn_gated_mlp_init(&o->mlp, &mo, &rng);
        if (s == LF_OK)
            s = g->kind == 2 ? lf_tensor_empty(&o->x, LF_DTYPE_BF16, 3, xs, LF_DEVICE_CPU)
                             : lf_tensor_empty(&o->x, LF_DTYPE_BF16, 2, x2, LF_DEVICE_CPU);
        if (s == LF_OK && (fp8 || g->kind >= 5 || g->variant == LF_MLP_FP8))
            s = lf_nn_gated_mlp_quantize_fp8(&o->mlp);
        if (s == LF_OK)
            s = lf_nn_gated_mlp_to_device(&o->mlp, LF_DEVICE_CUDA);
    }
    if (s == LF_OK)
        s = lf_tensor_fill_uniform(o->x, &rng, -1, 1);
    if (s == LF_OK)
        s = to_cuda(&o->x);
    if (s == LF_OK && g->kind >= 5) { /* x in FP8 once, its scales in w */
        lf_tensor *xq = NULL;
        s = lf_quantize_fp8(&xq, &o->w, o->x);
        if (s == LF_OK) {
            lf_tensor_free(o->x);
            o->x = xq;
        }
    }
    if (s != LF_OK) {
        fprintf(stderr, "linfuse bench cuda: %s: %s\n", g->name, lf_last_error());
        operands_free(o);
        return 0;
    }
    return 1;
}

/* One case being timed on its operands: its compiled forward when it has one, the first error,
 * and its samples (GPU seconds per forward). */
typedef struct timing {
    const gcase *g;
    operands *o;
    lf_compiled *c; /* its context is this struct (lf_compile keeps it for recompiles) */
    lf_status s;
    int oom; /* the harness could not be made */
    lf_bench b;
} timing;

enum { PER_SAMPLE = 50, MAX_SAMPLES = 64 }; /* forwards queued back to back per sample, one synchronize */

/* A sched_ case forces its schedule while it runs (capture, samples, host time); every other case
 * keeps what was chosen before it (LINFUSE_GATED_SCHEDULE or the backend's rule), so the variable
 * works for them too. Returns what to restore. */
static lf_gated_schedule sched_enter(const gcase *g)
{
    const lf_gated_schedule before = lf_gated_schedule_forced();
    if (g->sched != LF_GATED_AUTO)
        lf_gated_schedule_force(g->sched);
    return before;
}

/* The same forward as compile mode captures it: ctx is the case's timing. */
static lf_status captured(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    const timing *tm = ctx;
    (void)n;
    return eager(tm->g, in[0], tm->o, out);
}

/* --flush-l2's two buffers, 128 MiB each (NULL: no flush): one copied into the other touches 256
 * MiB, twice the largest L2 of any GPU linfuse runs on (an H200's is 60 MiB). */
static lf_tensor *flush_src, *flush_dst;

/* The copy, then a synchronize: queued alone it would still be running when the sample's clock
 * starts, and the forward would wait behind it on the clock (seen on an H200: 177 us for a 95 us
 * forward). */
static lf_status flush_l2(void *ctx)
{
    (void)ctx;
    const lf_status s = lf_copy_out(flush_dst, flush_src);
    return s == LF_OK ? lf_device_synchronize(LF_DEVICE_CUDA) : s;
}

static void flush_end(void)
{
    lf_tensor_free(flush_src), lf_tensor_free(flush_dst);
    flush_src = flush_dst = NULL;
}

static int flush_begin(void)
{
    const int64_t n = 32 << 20; /* f32: 128 MiB */
    if (lf_tensor_empty(&flush_src, LF_DTYPE_F32, 1, &n, LF_DEVICE_CUDA) == LF_OK &&
        lf_tensor_empty(&flush_dst, LF_DTYPE_F32, 1, &n, LF_DEVICE_CUDA) == LF_OK)
        return 1;
    fprintf(stderr, "linfuse bench cuda: --flush-l2: %s\n", lf_last_error());
    flush_end();
    return 0;
}

/* One forward (the harness's): the compiled one's graph when the case has one, else eagerly. */
static lf_status run_forward(void *ctx)
{
    timing *tm = ctx;
    if (!tm->c)
        return eager(tm->g, tm->o->x, tm->o, NULL);
    lf_tensor *y = NULL;
    const lf_status s = lf_compiled_run(tm->c, 1, &tm->o->x, &y);
    lf_tensor_free(y);
    return s;
}

static lf_status sync_gpu(void *ctx)
{
    (void)ctx;
    return lf_device_synchronize(LF_DEVICE_CUDA);
}

/* settle_ms with the GPU idle (the queue drained first). */
static void settle(int settle_ms)
{
    lf_device_synchronize(LF_DEVICE_CUDA);
    struct timespec ts = {settle_ms / 1000, (long)(settle_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* Compile case g when it is a compiled one, leave the GPU idle settle_ms (0: not at all), and
 * warm it up (plans, allocator): 20 forwards, one synchronize. */
static void timing_begin(timing *tm, const gcase *g, operands *o, int reps, int settle_ms)
{
    memset(tm, 0, sizeof *tm);
    tm->g = g, tm->o = o;
    const lf_gated_schedule before = sched_enter(g);
    if (g->compiled) {
        lf_compile_opts co = lf_compile_opts_default();
        co.name = g->name;
        co.passes = g->compiled;
        tm->s = lf_compile(&tm->c, captured, tm, 1, &o->x, &co);
    }
    const lf_bench_opts bo = {.warmup = 20,
                              .per_sample = flush_src ? 1 : PER_SAMPLE,
                              .samples = reps < MAX_SAMPLES ? reps : MAX_SAMPLES,
                              .forward = run_forward,
                              .sync = sync_gpu,
                              .before_sample = flush_src ? flush_l2 : NULL,
                              .ctx = tm};
    if (!lf_bench_init(&tm->b, &bo) && tm->s == LF_OK)
        tm->s = LF_ENOMEM, tm->oom = 1;
    if (settle_ms)
        settle(settle_ms);
    if (tm->s == LF_OK)
        tm->s = lf_bench_warm(&tm->b);
    lf_gated_schedule_force(before);
}

/* One sample: PER_SAMPLE forwards back to back, one synchronize, divided (none once it has all). */
static void timing_sample(timing *tm)
{
    if (tm->s != LF_OK)
        return;
    const lf_gated_schedule before = sched_enter(tm->g);
    tm->s = lf_bench_sample(&tm->b);
    lf_gated_schedule_force(before);
}

/* Host time per call, then the case's line (or its error); frees the compiled forward and the
 * samples. 0 on failure. */
static int timing_end(timing *tm)
{
    const gcase *g = tm->g;
    const lf_gated_schedule before = sched_enter(g);
    double host = 0;
    if (tm->s == LF_OK)
        tm->s = lf_bench_host(&tm->b, tm->b.o.samples, &host);
    if (tm->s != LF_OK) {
        fprintf(stderr, "linfuse bench cuda: %s: %s\n", g->name, tm->oom ? "out of memory" : lf_last_error());
    } else {
        const double us = lf_bench_median(&tm->b) * 1e6;
        printf("case=%s linfuse_us_per_forward=%.2f linfuse_host_us_per_call=%.2f", g->name, us, host * 1e6);
        if (g->kind == 2) /* the MLP's weights, read once per forward: what a few tokens are bound by */
            printf(" weights_gb_per_s=%.1f",
                   3.0 * (double)g->c * (double)g->d * (g->variant == LF_MLP_FP8 ? 1.0 : 2.0) / (us * 1e3));
        printf("\n");
        fflush(stdout); /* each line as it comes, through a pipe too */
    }
    lf_gated_schedule_force(before);
    lf_bench_free(&tm->b);
    lf_compiled_free(tm->c);
    tm->c = NULL;
    return tm->s == LF_OK;
}

/* Time case g on its own from start to end (after settle_ms of idle GPU); 0 on failure. */
static int time_alone(timing *tm, const gcase *g, operands *o, int reps, int settle_ms)
{
    timing_begin(tm, g, o, reps, settle_ms);
    for (int r = 0; r < tm->b.o.samples; r++)
        timing_sample(tm);
    return timing_end(tm);
}

/* Build case g's operands, time it, free them; 0 (the error printed) on failure. */
static int run_case(const gcase *g, int reps)
{
    operands o;
    if (!operands_build(g, 0, &o))
        return 0;
    timing tm;
    const int ok = time_alone(&tm, g, &o, reps, 0);
    operands_free(&o);
    return ok;
}

/* "TxDxH[,TxDxH...]" (tokens, model dim, hidden dim) into shapes; at most cap of them. */
static int parse_shapes(const char *text, int64_t (*shapes)[3], int cap)
{
    int n = 0;
    for (const char *p = text; *p;) {
        int64_t v[3];
        for (int i = 0; i < 3; i++) {
            char *end;
            errno = 0;
            long long x = strtoll(p, &end, 10);
            if (end == p || errno || x < 1 || x > (i ? 65536 : 1 << 20) || *p == '-' || *p == '+' ||
                (i < 2 && *end != 'x') || (i == 2 && *end && *end != ',')) {
                fprintf(stderr,
                        "linfuse bench cuda: --mlp takes TOKENSxDIMxHIDDEN[,...] with tokens 1 to 1048576 and dims "
                        "1 to 65536, e.g. 512x4096x14336; got '%s'\n",
                        text);
                return -1;
            }
            v[i] = x;
            p = *end ? end + 1 : end;
        }
        if (n == cap) {
            fprintf(stderr, "linfuse bench cuda: --mlp takes at most %d shapes\n", cap);
            return -1;
        }
        memcpy(shapes[n++], v, sizeof v);
    }
    if (!n)
        fprintf(stderr, "linfuse bench cuda: --mlp needs at least one TOKENSxDIMxHIDDEN\n");
    return n ? n : -1;
}

/* The MLP's forms that --mlp times, in the order of its output: each a case name's prefix and
 * suffix, the module's variant and the compile passes (0: eager), and the word --forms takes. */
static const struct {
    const char *prefix, *suffix, *word;
    lf_mlp_variant variant;
    unsigned compiled;
} forms[] = {{"", "", "eager", LF_MLP_EAGER, 0},
             {"", "_fused", "fused", LF_MLP_FUSED, 0},
             {"", "_gated", "gated", LF_MLP_GATED, 0},
             {"", "_fp8", "fp8", LF_MLP_FP8, 0},
             {"compiled_", "", "compiled", LF_MLP_EAGER, LF_PASSES_DEFAULT},
             {"compiled_gated_", "", "compiled_gated", LF_MLP_EAGER, LF_PASSES_ALL}};
enum { FORMS = sizeof forms / sizeof forms[0] };

/* --forms' comma-separated words as a bit per form (NULL: all); 0 after saying what is wrong. */
static unsigned parse_forms(const char *text)
{
    if (!text)
        return (1u << FORMS) - 1;
    unsigned mask = 0;
    for (const char *p = text;;) {
        const size_t n = strcspn(p, ",");
        int f = 0;
        while (f < FORMS && (strlen(forms[f].word) != n || strncmp(p, forms[f].word, n)))
            f++;
        if (f == FORMS) {
            fprintf(stderr,
                    "linfuse bench cuda: --forms takes a comma-separated list of eager, fused, gated, fp8, compiled "
                    "and compiled_gated; got '%s'\n",
                    text);
            return 0;
        }
        mask |= 1u << f;
        if (!p[n])
            return mask;
        p += n + 1;
    }
}

/* What --mlp times: the forms asked for (run: indices into forms), whether one needs FP8 weights. */
typedef struct sweep {
    int run[FORMS], n, fp8;
    lf_act act;
    int reps, settle_ms;
} sweep;

/* The forms of w at one shape (tokens, dim, hidden); 0 on any failure (said). One module per
 * shape (bf16, and FP8 weights when a form asked for needs them) for all its forms: drawing and
 * quantizing the weights on the CPU costs seconds at the large shapes. Without settle_ms the forms
 * take turns, one sample each per round: timed one after the other, a form that came later ran on
 * a hotter GPU (at 256 x 4096 -> 14336 the fused form, which does less work than the eager one
 * after it, ran 2-7% slower in every round; bench/RESULTS.md, 2026-12-01, bdff73f). Taking turns puts every
 * form on the clock the mix of forms leaves, which is not how a program runs one of them: at 512 x
 * 4096 -> 14336 the eager and fused forms ran 7-10% slower among the others than each alone
 * (2026-12-01, 6f4024a). With settle_ms each form is timed alone, after that long with the GPU idle, as
 * bench/mlp_sweep_vs_torch.py times PyTorch. */
static int time_shape(const sweep *w, const int64_t *shp)
{
    const gcase shape = {"mlp", 2, 1, shp[0], shp[1], shp[2], LF_MLP_EAGER, 0, w->act, 0};
    operands o;
    if (!operands_build(&shape, w->fp8, &o))
        return 0;
    char names[FORMS][96];
    gcase g[FORMS];
    timing tm[FORMS];
    int ok = 1;
    for (int j = 0; j < w->n; j++) {
        const int f = w->run[j];
        snprintf(names[f], sizeof names[f], "%smlp_%s_1x%lldx%lldx%lld%s", forms[f].prefix, lf_act_name(w->act),
                 (long long)shp[0], (long long)shp[1], (long long)shp[2], forms[f].suffix);
        g[f] = shape;
        g[f].name = names[f], g[f].variant = forms[f].variant, g[f].compiled = forms[f].compiled;
        if (w->settle_ms)
            ok &= time_alone(&tm[f], &g[f], &o, w->reps, w->settle_ms);
        else
            timing_begin(&tm[f], &g[f], &o, w->reps, 0);
    }
    for (int r = 0; !w->settle_ms && r < (w->reps < MAX_SAMPLES ? w->reps : MAX_SAMPLES); r++)
        for (int j = 0; j < w->n; j++)
            timing_sample(&tm[w->run[j]]);
    for (int j = 0; !w->settle_ms && j < w->n; j++)
        ok &= timing_end(&tm[w->run[j]]);
    operands_free(&o);
    return ok;
}

/* What --mlp asks for, or the built-in cases; 1 when every one ran. */
static int run_all(const lf_cli_bench_cuda_opts *co, int64_t (*shapes)[3], int nshapes, unsigned mask)
{
    int ok = 1;
    if (co->mlp_shapes) { /* the MLP forms asked for, eager and compiled, at each shape asked for */
        sweep w = {.n = 0, .act = co->act, .reps = co->reps, .settle_ms = co->settle_ms};
        for (int f = 0; f < FORMS; f++)
            if (mask & 1u << f)
                w.run[w.n++] = f, w.fp8 |= forms[f].variant == LF_MLP_FP8;
        for (int i = 0; i < nshapes; i++)
            ok &= time_shape(&w, shapes[i]);
        return ok;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!co->only || strstr(cases[i].name, co->only))
            ok &= run_case(&cases[i], co->reps);
    return ok;
}

int lf_cli_bench_cuda(const lf_cli_bench_cuda_opts *co)
{
    enum { MAX_SHAPES = 32 };
    int64_t shapes[MAX_SHAPES][3];
    int nshapes = co->mlp_shapes ? parse_shapes(co->mlp_shapes, shapes, MAX_SHAPES) : 0;
    const unsigned mask = parse_forms(co->form_words);
    if (nshapes < 0 || !mask)
        return LF_EXIT_USAGE;
    if ((co->form_words || co->settle_ms) && !co->mlp_shapes) {
        fprintf(stderr, "linfuse bench cuda: --forms and --settle-ms go with --mlp\n");
        return LF_EXIT_USAGE;
    }
    if (co->mlp_shapes && co->only) {
        fprintf(stderr, "linfuse bench cuda: --case picks from the built-in cases, --mlp names its own; not both\n");
        return LF_EXIT_USAGE;
    }
    if (!lf_device_available(LF_DEVICE_CUDA)) {
        lf_device_synchronize(LF_DEVICE_CUDA);
        fprintf(stderr, "linfuse bench cuda: %s\n", lf_last_error());
        return LF_EXIT_FAIL;
    }
    if (co->flush_l2 && !flush_begin())
        return LF_EXIT_FAIL;
    printf("# linfuse on cuda, bf16 (fp8 cases: e4m3 weights and activations; the fp8 MLP's h and down weight in "
           "blocks); median over %d samples of %s\n",
           co->reps,
           co->flush_l2 ? "one forward each, after 256 MiB copied on the GPU (L2 flushed; the time counts the launch)"
                        : "back-to-back forwards");
    const int ok = run_all(co, shapes, nshapes, mask);
    flush_end();
    return ok ? LF_EXIT_OK : LF_EXIT_FAIL;
}
