/* `linfuse bench tp`: the MLP split over the GPUs of this machine (one thread per GPU, NCCL),
 * each variant with and without overlap and compiled, for bench/tp_vs_torch.py to put beside
 * PyTorch's Megatron split under torchrun. Timed as `bench cuda` times, by the same harness
 * (bench_time.c) on every rank: forwards queued back to back on every rank, every GPU synchronized
 * once and the ranks met, divided (median of rank 0's samples); host time per call is rank 0's one
 * call timed alone after the queues drained. Layer: cli/. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cli/bench_time.h"
#include "cli/cli.h"
#include "linfuse/compile.h"
#include "linfuse/dist.h"

typedef struct tcase {
    const char *shape; /* "64x128x768x3072": batch x seq x dim x hidden */
    int64_t b, s, d, h;
    lf_mlp_variant v;
    int chunks;        /* token chunks: 1 is no overlap */
    unsigned compiled; /* 0: eager; else compile mode's passes (one CUDA graph per rank, chunks 1) */
} tcase;

typedef struct tshared {
    const tcase *c;
    int n, reps;
    lf_comm **comms;
    lf_nn_gated_mlp full;
    lf_tensor *x_host;
    pthread_barrier_t bar;
    double t, h; /* rank 0's medians: GPU seconds per forward, host seconds per call */
    lf_status st[LF_MAX_DEVICE_INDEX];
    char err[LF_MAX_DEVICE_INDEX][256];
} tshared;

typedef struct trank {
    tshared *sh;
    int r;
    lf_nn_tp_mlp m;
    lf_tensor *x;
    lf_compiled *c;
    lf_status s; /* the rank's first failure */
    lf_bench b;  /* made before the ranks' threads start */
} trank;

static lf_status fwd(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    const trank *k = ctx;
    (void)n;
    return lf_nn_tp_mlp_forward(&k->m, k->sh->c->v, in[0], out);
}

static lf_status once(const trank *k)
{
    lf_tensor *y = NULL;
    lf_status s = k->c ? lf_compiled_run(k->c, 1, (lf_tensor *const *)&k->x, &y) : fwd((void *)k, 1, &k->x, &y);
    lf_tensor_free(y);
    return s;
}

/* The harness's callbacks. Every rank meets the others at the same barriers whatever happens: a
 * rank that failed keeps its error in k->s, stops running forwards and goes on meeting (so none
 * waits forever), and the callbacks report LF_OK to the harness so that it never stops early. */
static lf_status rank_forward(void *ctx)
{
    trank *k = ctx;
    if (k->s == LF_OK)
        k->s = once(k);
    return LF_OK;
}

/* The rank's GPU done, then every rank's: the slowest rank is the time. */
static lf_status rank_sync(void *ctx)
{
    trank *k = ctx;
    if (k->s == LF_OK)
        k->s = lf_device_synchronize(LF_DEVICE_CUDA);
    pthread_barrier_wait(&k->sh->bar);
    return LF_OK;
}

/* Before each sample, untimed: every rank starts it together. */
static lf_status rank_meet(void *ctx)
{
    pthread_barrier_wait(&((trank *)ctx)->sh->bar);
    return LF_OK;
}

/* Every rank runs this: set up, then the same harness calls, meeting at its barriers. */
static void *rank_bench(void *arg)
{
    trank *k = arg;
    tshared *sh = k->sh;
    k->s = lf_device_select(LF_DEVICE_CUDA, k->r);
    if (k->s == LF_OK)
        k->s = lf_nn_tp_mlp_shard(&k->m, &sh->full, k->r, sh->n, sh->comms[k->r], LF_DEVICE_CUDA);
    k->m.chunks = sh->c->compiled ? 1 : sh->c->chunks;
    if (k->s == LF_OK)
        k->s = lf_tensor_to_device(&k->x, sh->x_host, LF_DEVICE_CUDA);
    if (k->s == LF_OK && sh->c->compiled) {
        lf_compile_opts co = lf_compile_opts_default();
        co.name = "tp_mlp";
        co.passes = sh->c->compiled;
        k->s = lf_compile(&k->c, fwd, k, 1, &k->x, &co);
    }
    double host = 0;
    lf_bench_warm(&k->b);
    for (int r = 0; r < k->b.o.samples; r++)
        lf_bench_sample(&k->b);
    lf_bench_host(&k->b, k->b.o.samples, &host); /* one call alone, queues drained */
    if (k->r == 0)
        sh->t = lf_bench_median(&k->b), sh->h = host;
    sh->st[k->r] = k->s;
    if (k->s != LF_OK)
        snprintf(sh->err[k->r], sizeof sh->err[k->r], "%s", lf_last_error());
    lf_compiled_free(k->c);
    lf_tensor_free(k->x);
    lf_nn_tp_mlp_free(&k->m);
    return NULL;
}

/* The ranks of one case, each on a thread of its own (rank 0 on this one); 0 when out of memory
 * (nothing started). */
static int run_ranks(tshared *sh)
{
    trank ranks[LF_MAX_DEVICE_INDEX];
    pthread_t th[LF_MAX_DEVICE_INDEX];
    int ok = 1;
    for (int r = 0; r < sh->n; r++) {
        ranks[r] = (trank){.sh = sh, .r = r, .s = LF_OK};
        const lf_bench_opts o = {.warmup = 20,
                                 .per_sample = 50,
                                 .samples = sh->reps,
                                 .forward = rank_forward,
                                 .sync = rank_sync,
                                 .before_sample = rank_meet,
                                 .ctx = &ranks[r]};
        ok &= lf_bench_init(&ranks[r].b, &o);
    }
    if (ok) {
        pthread_barrier_init(&sh->bar, NULL, (unsigned)sh->n);
        for (int r = 1; r < sh->n; r++)
            pthread_create(&th[r], NULL, rank_bench, &ranks[r]);
        rank_bench(&ranks[0]);
        for (int r = 1; r < sh->n; r++)
            pthread_join(th[r], NULL);
        pthread_barrier_destroy(&sh->bar);
    }
    for (int r = 0; r < sh->n; r++)
        lf_bench_free(&ranks[r].b);
    return ok;
}

/* chunk counts spelled out, so every count the automatic choice can make is measured */
#define BLOG  "64x128x768x3072", 64, 128, 768, 3072
#define BIG   "8x1024x4096x11008", 8, 1024, 4096, 11008
#define SMALL "1x16x4096x11008", 1, 16, 4096, 11008
static const tcase cases[] = {
    {BLOG, LF_MLP_EAGER, 1, 0},
    {BLOG, LF_MLP_EAGER, 2, 0},
    {BLOG, LF_MLP_EAGER, 4, 0},
    {BLOG, LF_MLP_FUSED, 2, 0},
    {BLOG, LF_MLP_GATED, 1, 0},
    {BLOG, LF_MLP_GATED, 2, 0},
    {BLOG, LF_MLP_GATED, 4, 0},
    {BLOG, LF_MLP_EAGER, 1, LF_PASSES_DEFAULT},
    {BLOG, LF_MLP_EAGER, 1, LF_PASSES_ALL},
    {BIG, LF_MLP_EAGER, 1, 0},
    {BIG, LF_MLP_EAGER, 2, 0},
    {BIG, LF_MLP_EAGER, 4, 0},
    {BIG, LF_MLP_FUSED, 2, 0},
    {BIG, LF_MLP_GATED, 1, 0},
    {BIG, LF_MLP_GATED, 2, 0},
    {BIG, LF_MLP_GATED, 4, 0},
    {BIG, LF_MLP_EAGER, 1, LF_PASSES_DEFAULT},
    {BIG, LF_MLP_EAGER, 1, LF_PASSES_ALL},
    {SMALL, LF_MLP_EAGER, 1, 0},
    {SMALL, LF_MLP_FUSED, 1, 0},
    {SMALL, LF_MLP_GATED, 1, 0},
    {SMALL, LF_MLP_EAGER, 1, LF_PASSES_DEFAULT},
    {SMALL, LF_MLP_EAGER, 1, LF_PASSES_ALL},
};
#undef BLOG
#undef BIG
#undef SMALL

int lf_cli_bench_tp(int reps, const char *only, int tp)
{
    const int n = tp ? tp : lf_device_count(LF_DEVICE_CUDA);
    if (n < 2) {
        fprintf(stderr, "linfuse bench tp: needs 2 or more GPUs, this machine has %d\n",
                lf_device_count(LF_DEVICE_CUDA));
        return LF_EXIT_FAIL;
    }
    lf_comm *comms[LF_MAX_DEVICE_INDEX] = {0};
    if (lf_comm_init_local(comms, n, LF_DEVICE_CUDA) != LF_OK) {
        fprintf(stderr, "linfuse bench tp: %s\n", lf_last_error());
        return LF_EXIT_FAIL;
    }
    printf("# linfuse tensor parallel over %d GPUs (%s), bf16; median over %d samples of back-to-back "
           "forwards\n",
           n, lf_comm_library(comms[0]), reps);
    int code = LF_EXIT_OK;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && code == LF_EXIT_OK; i++) {
        const tcase *c = &cases[i];
        char name[128];
        if (c->compiled)
            snprintf(name, sizeof name, "tp%d_mlp_%s_compiled%s", n, c->shape,
                     c->compiled == LF_PASSES_ALL ? "_gated" : "");
        else
            snprintf(name, sizeof name, "tp%d_mlp_%s_%s_c%d", n, c->shape, lf_mlp_variant_name(c->v), c->chunks);
        if (only && !strstr(name, only))
            continue;
        tshared sh;
        memset(&sh, 0, sizeof sh);
        sh.c = c, sh.n = n, sh.reps = reps < 64 ? reps : 64, sh.comms = comms;
        lf_rng rng;
        lf_rng_seed(&rng, 1);
        lf_nn_gated_mlp_opts o = {c->d, c->h, LF_DTYPE_BF16, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
        int64_t xs[3] = {c->b, c->s, c->d};
        lf_status s = lf_nn_gated_mlp_init(&sh.full, &o, &rng);
        if (s == LF_OK)
            s = lf_tensor_empty(&sh.x_host, LF_DTYPE_BF16, 3, xs, LF_DEVICE_CPU);
        if (s == LF_OK)
            s = lf_tensor_fill_uniform(sh.x_host, &rng, -1, 1);
        if (s != LF_OK) {
            fprintf(stderr, "linfuse bench tp: %s: %s\n", name, lf_last_error());
            code = LF_EXIT_FAIL;
            break;
        }
        const int ran = run_ranks(&sh);
        if (!ran) {
            fprintf(stderr, "linfuse bench tp: %s: out of memory\n", name);
            code = LF_EXIT_FAIL;
        }
        for (int r = 0; r < n && ran; r++)
            if (sh.st[r] != LF_OK) {
                fprintf(stderr, "linfuse bench tp: %s: rank %d: %s\n", name, r, sh.err[r]);
                code = LF_EXIT_FAIL;
            }
        if (code == LF_EXIT_OK)
            printf("case=%s linfuse_us_per_forward=%.2f linfuse_host_us_per_call=%.2f\n", name, sh.t * 1e6, sh.h * 1e6);
        fflush(stdout);
        lf_nn_gated_mlp_free(&sh.full);
        lf_tensor_free(sh.x_host);
    }
    for (int r = 0; r < n; r++)
        lf_comm_free(comms[r]);
    return code;
}
