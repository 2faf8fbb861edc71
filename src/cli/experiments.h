/* The experiments' configuration and results, shared by their commands and the tour. Each
 * experiment is one row of a table in experiments.c (its name, label, the flags it takes, its
 * shape, model and forward), as ops.def is for ops. Layer: cli/. */
#ifndef LF_CLI_EXPERIMENTS_H
#define LF_CLI_EXPERIMENTS_H

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

const char *lf_exp_name(exp_kind k);
/* How every experiment profiles (one GPU or a rank of several): c's schedule, shapes and FLOPs
 * recorded, ready called with user for each window. In the header, so that tp_run.c, which
 * experiments.c calls, needs nothing of experiments.c. */
static inline lf_prof_opts lf_exp_prof_opts(const exp_cfg *c, void (*ready)(lf_profiler *p, void *user), void *user)
{
    return (lf_prof_opts){.use_schedule = 1,
                          .schedule = c->sched,
                          .record_shapes = 1,
                          .with_flops = 1,
                          .on_trace_ready = ready,
                          .user = user};
}
/* Find an experiment by its command name ("simple-mlp" or "simple_mlp"); -1 when none is. */
int lf_exp_find(const char *name);
void lf_exp_defaults(exp_cfg *c, exp_kind k);
/* "64", "1024x32x64", "64x128x768x3072" */
void lf_exp_shape(const exp_cfg *c, char *buf, size_t cap);
/* Run one experiment: files written, summary filled; prints the tables when print is set. */
int lf_exp_run(const exp_cfg *c, exp_result *r, int print);

/* The MLP an experiment runs: random at its sizes, or its --weights layer (dims from the file). */
lf_status lf_exp_build_mlp(const exp_cfg *c, lf_rng *rng, lf_nn_gated_mlp *m);

/* An MLP experiment over several GPUs (tp_run.c): what experiments.c hands it. */
typedef struct exp_tp_job {
    const exp_cfg *c;
    const char *name, *label; /* "simple-mlp", "mlp_fwd" */
    const char *base;         /* <dir>/<shape>_<dtype>_<cold|warm>_<mode>; _rank<R> is added */
    lf_mlp_variant variant;
    void *run; /* tp_run.c's own state */
} exp_tp_job;
int lf_exp_run_tp(exp_tp_job *j, exp_result *r, int print);

/* `linfuse <experiment> [flags]` (argv[0] is its name). */
int lf_cli_experiment(exp_kind k, int argc, char **argv);
int lf_cli_tour(int argc, char **argv);

#endif
