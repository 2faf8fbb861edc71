/* An experiment's configuration and result: what experiments.c (the commands and their table),
 * exp_run.c (a run), exp_models.c (the models) and tp_run.c (the MLP over several GPUs) share,
 * and how every experiment profiles. Types only. Layer: cli/. */
#ifndef LF_CLI_EXP_CFG_H
#define LF_CLI_EXP_CFG_H

#include "linfuse/compile.h"
#include "linfuse/nn.h"
#include "linfuse/profiler.h"

typedef enum exp_kind { EXP_MATMUL_ADD, EXP_LINEAR, EXP_SIMPLE_MLP, EXP_KERNELS_MLP, EXP_COUNT } exp_kind;

typedef struct exp_cfg {
    exp_kind kind;
    int64_t size;                   /* matmul-add */
    int64_t batch, in_dim, out_dim; /* linear (batch also for the MLP) */
    int64_t seq, dim, hidden;       /* the MLPs */
    int batched, warm, compile, no_bias;
    unsigned passes; /* --compile: LF_PASS_* bits (LF_PASSES_DEFAULT, changed by the pass flags) */
    int no_cuda_graph, compile_verbose;
    lf_mlp_variant variant; /* kernels-mlp: fused (default) or gated */
    lf_dtype dtype;
    lf_device device;
    int threads; /* CPU threads, 0: the default (lf_cpu_threads) */
    lf_prof_schedule sched;
    const char *out_dir;
    int row_limit;
    int tp;     /* --tp N: the MLP over N GPUs (0, 1: one) */
    int chunks; /* --chunks N: token chunks for overlap (0: from the shape) */
    /* the MLPs: a real layer (--weights FILE|DIR --prefix P), and the activation (--act, else the
     * checkpoint's config.json, else gelu_tanh, the blog's) */
    const char *weights, *prefix;
    lf_act act;
} exp_cfg;

enum { EXP_MAX_WINDOWS = 16 };

typedef struct exp_result {
    int windows;                          /* traces written: one per scheduled window */
    char json_path[4500], txt_path[4500]; /* the last window's trace and table */
    lf_trace_summary sum;                 /* and its summary */
    char summary[320];
    double compile_ms; /* --compile: capture, passes and kernel builds, before the steps */
} exp_result;

/* How every experiment profiles (one GPU or a rank of several): c's schedule, shapes and FLOPs
 * recorded, ready called with user for each window. */
static inline lf_prof_opts lf_exp_prof_opts(const exp_cfg *c, void (*ready)(lf_profiler *p, void *user), void *user)
{
    return (lf_prof_opts){.use_schedule = 1,
                          .schedule = c->sched,
                          .record_shapes = 1,
                          .with_flops = 1,
                          .on_trace_ready = ready,
                          .user = user};
}
#endif
