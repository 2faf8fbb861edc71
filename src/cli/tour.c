/* `linfuse tour`: the blog's experiments one after another on the default device, then the
 * blog's conclusion table measured here. Layer: cli/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/experiments.h"

/* the blog's order: matmul-add, linear, the MLP eager, then compiled; then kernels-mlp with the
 * hand-fused middle, and with the gated GEMM that goes beyond the blog; the last over 2 GPUs */
enum { RUNS = 7 };
static const struct {
    exp_kind kind;
    int compile;
    lf_mlp_variant variant;
    const char *changed;
} runs[RUNS] = {
    {EXP_MATMUL_ADD, 0, LF_MLP_EAGER, "matmul then add: two kernels, the add re-reads the GEMM's output"},
    {EXP_LINEAR, 0, LF_MLP_EAGER,
     "linear: t() is a view (no kernel); the bias rides in the GEMM's epilogue: one kernel"},
    {EXP_SIMPLE_MLP, 0, LF_MLP_EAGER, "GeGLU: gelu and mul are two more passes over the [tokens, hidden] intermediate"},
    {EXP_SIMPLE_MLP, 1, LF_MLP_EAGER, "compiled: gelu*mul generated as one kernel, no ops dispatched per step"},
    {EXP_KERNELS_MLP, 0, LF_MLP_FUSED, "gelu and mul hand-fused: one pass reads g and u once"},
    {EXP_KERNELS_MLP, 0, LF_MLP_GATED, "gated GEMM: gelu(g)*u in the epilogue; g and u never reach memory"},
    {EXP_KERNELS_MLP, 0, LF_MLP_GATED, "2 GPUs (Megatron's split): half the hidden each, then one NCCL all-reduce"},
};

/* The tour's flags (--out DIR, into *out; --threads N, into *threads): -1 to go on, else the exit
 * status (--help printed, or a wrong flag said). */
static int parse(int argc, char **argv, const char **out, int *threads)
{
    const char *v;
    enum { T_OUT, T_THREADS };
    const lf_cli_opt opts[] = {{"out", 1, T_OUT, 0}, {"threads", 1, T_THREADS, 0}};
    lf_cli_args a;
    lf_cli_args_init(&a, "linfuse tour", argc, argv, opts, 2);
    for (int id; (id = lf_cli_next(&a, &v)) != LF_CLI_END;) {
        int64_t n;
        if (id == T_OUT && *v) {
            *out = v;
        } else if (id == T_THREADS) {
            if (!lf_cli_int("linfuse tour", "--threads", v, 1, 4096, &n))
                return LF_EXIT_USAGE;
            *threads = (int)n;
        } else if (id == LF_CLI_HELP) {
            printf("usage: linfuse tour [--out DIR] [--threads N]\nRuns matmul-add, linear, simple-mlp (eager, then "
                   "--compile) and kernels-mlp (fused, then gated) at the blog's sizes on the default device, and the "
                   "gated MLP over 2 GPUs when there are two, writes their traces to DIR (traces), and prints what "
                   "changed between them. --threads: CPU threads (default: OMP_NUM_THREADS when set, else one per "
                   "core; on a machine other work keeps busy, 1 gives steadier times).\n");
            return LF_EXIT_OK;
        } else {
            if (id == T_OUT)
                fprintf(stderr, "linfuse tour: --out needs a directory\n");
            else if (id == LF_CLI_WORD)
                fprintf(stderr, "linfuse tour: unexpected argument '%s'\n", v);
            return LF_EXIT_USAGE;
        }
    }
    return -1;
}

/* Each run's configuration on the default device, into out; the MLPs smaller on a CPU, with a
 * note saying so. How many runs there are: the last only where there are two GPUs. */
static int plan_runs(exp_cfg cfg[RUNS], const char *notes[RUNS], const char *out, int threads)
{
    const int n_runs = lf_device_count(LF_DEVICE_CUDA) >= 2 ? RUNS : RUNS - 1;
    for (int k = 0; k < n_runs; k++) {
        lf_exp_defaults(&cfg[k], runs[k].kind);
        cfg[k].tp = k == RUNS - 1 ? 2 : 0;
        cfg[k].compile = runs[k].compile;
        cfg[k].variant = runs[k].variant;
        cfg[k].out_dir = out;
        cfg[k].threads = threads;
        cfg[k].sched.active = 7; /* steps enough for a median and a range that says what noise does */
        cfg[k].device = lf_device_available(LF_DEVICE_CUDA) ? LF_DEVICE_CUDA : LF_DEVICE_CPU;
        notes[k] = NULL;
        if (cfg[k].device == LF_DEVICE_CPU && (cfg[k].kind == EXP_SIMPLE_MLP || cfg[k].kind == EXP_KERNELS_MLP)) {
            /* 64 x 128 tokens through three 768x3072 GEMMs is ~0.4 s a forward on a small CPU */
            cfg[k].batch = 8;
            notes[k] = "batch 64 -> 8 on the CPU, so the tour takes seconds";
        }
    }
    return n_runs;
}

/* A time over the steps of a run: the median of its samples and their range, in ms. */
typedef struct spread {
    double median, lo, hi;
} spread;

static int by_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static spread spread_of(double *v, int n)
{
    if (n == 0)
        return (spread){0, 0, 0};
    qsort(v, (size_t)n, sizeof *v, by_double);
    return (spread){lf_cli_median(v, n), v[0], v[n - 1]};
}

enum { MAX_STEPS = 64 };

/* A run's times step by step, read back from its trace: the device time of each step and GPU (its
 * kernels' busy time, from the breakdown) and each step's wall time; 0 when the trace cannot be
 * read. */
static int step_times(const char *path, spread *dev, spread *wall)
{
    lf_trace *t = NULL;
    lf_breakdown bd;
    if (lf_trace_read_json(&t, path) != LF_OK)
        return 0;
    double d[MAX_STEPS], w[MAX_STEPS];
    int nd = 0, nw = 0;
    if (lf_trace_breakdown(t, &bd) == LF_OK) {
        for (int64_t i = 0; i < bd.n_steps && nd < MAX_STEPS; i++)
            d[nd++] = (bd.steps[i].compute_us + bd.steps[i].comm_us + bd.steps[i].memory_us) / 1e3;
        lf_breakdown_free(&bd);
    }
    for (int64_t i = 0; i < lf_trace_count(t) && nw < MAX_STEPS; i++) {
        const lf_trace_event *e = lf_trace_get(t, i);
        if (e->cat == LF_TC_USER_ANNOTATION && !strncmp(e->name, "ProfilerStep#", 13) && e->dur_ns >= 0)
            w[nw++] = (double)e->dur_ns / 1e6;
    }
    lf_trace_free(t);
    *dev = spread_of(d, nd), *wall = spread_of(w, nw);
    return nd > 0 && nw > 0;
}

/* The MLP forms measured against the eager MLP (run 2): their device time's ratio of medians, or,
 * where the two runs' ranges overlap, that the steps' spread covers the difference: no change is
 * claimed that the machine's noise could have made. */
static void versus(char *buf, size_t cap, int k, const spread dev[RUNS])
{
    const int base = 2;
    if (k <= base || runs[k].kind == EXP_MATMUL_ADD || dev[k].median <= 0 || dev[base].median <= 0)
        snprintf(buf, cap, "-");
    else if (dev[k].lo <= dev[base].hi && dev[base].lo <= dev[k].hi)
        snprintf(buf, cap, "within noise");
    else
        snprintf(buf, cap, "%.2fx", dev[k].median / dev[base].median);
}

/* The blog's conclusion table, measured: each run's kernels and ops per forward, the median of its
 * steps' times with their spread, and the MLP forms against the eager MLP. */
static void print_table(const exp_cfg cfg[RUNS], const exp_result res[RUNS], char setup[RUNS][160], int n_runs)
{
    spread dev[RUNS], wall[RUNS];
    for (int k = 0; k < n_runs; k++)
        if (!step_times(res[k].json_path, &dev[k], &wall[k])) /* the summary's means, no spread */
            dev[k] = (spread){res[k].sum.device_ns_per_step / 1e6, 0, 1e300},
            wall[k] = (spread){res[k].sum.step_ns / 1e6, 0, 1e300};
    printf("\n%-44s %8s %8s %13s %7s %13s %13s  %s\n", "setup", "kernels", "cpu ops", "device/fwd", "spread", "CPU/fwd",
           "vs eager MLP", "what changed");
    for (int k = 0; k < n_runs; k++) {
        char vs[32], sp[16] = "-";
        versus(vs, sizeof vs, k, dev);
        if (dev[k].median > 0 && dev[k].hi < 1e300)
            snprintf(sp, sizeof sp, "%.0f%%", 100 * (dev[k].hi - dev[k].lo) / dev[k].median);
        printf("%-44s %8g %8g %10.3f ms %7s %10.3f ms %13s  %s\n", setup[k], res[k].sum.kernels_per_step,
               res[k].sum.cpu_ops_per_step, dev[k].median, sp, wall[k].median, vs, runs[k].changed);
    }
    printf("\n(per forward, the median of %d steps: kernels and ops counted in the trace; device time is kernel "
           "time, CPU time the step's wall time; spread: the steps' range over the median; vs eager MLP: the "
           "device time's ratio to simple-mlp's, or 'within noise' where the two runs' ranges overlap%s)\n",
           cfg[0].sched.active,
           cfg[0].device == LF_DEVICE_CPU
               ? ";\n on the CPU the kernels run on the same cores, so both columns measure the same seconds"
               : "");
}

int lf_cli_tour(int argc, char **argv)
{
    const char *out = "traces";
    int threads = 0; /* 0: the default */
    const int rc = parse(argc, argv, &out, &threads);
    if (rc >= 0)
        return rc;
    exp_cfg cfg[RUNS];
    const char *notes[RUNS];
    const int n_runs = plan_runs(cfg, notes, out, threads);
    printf("linfuse tour: the blog's experiments on %s, %s, schedule wait=1 warmup=1 active=%d\n\n",
           lf_device_name(cfg[0].device), lf_dtype_name(cfg[0].dtype), cfg[0].sched.active);
    exp_result res[RUNS];
    char setup[RUNS][160];
    for (int k = 0; k < n_runs; k++) {
        char shape[96];
        lf_exp_shape(&cfg[k], shape, sizeof shape);
        snprintf(setup[k], sizeof setup[k], "%s%s%s%s %s", lf_exp_name(cfg[k].kind),
                 cfg[k].variant == LF_MLP_GATED ? " --variant gated" : "", cfg[k].compile ? " --compile" : "",
                 cfg[k].tp > 1 ? " --tp 2" : "", shape);
        printf("[%d/%d] %s ...\n", k + 1, n_runs, setup[k]);
        fflush(stdout);
        if (notes[k])
            printf("      note: %s\n", notes[k]);
        int code = lf_exp_run(&cfg[k], &res[k], 0);
        if (code != LF_EXIT_OK)
            return code;
        printf("      %s\n      trace: %s\n", res[k].summary, res[k].json_path);
    }
    print_table(cfg, res, setup, n_runs);
    return LF_EXIT_OK;
}
