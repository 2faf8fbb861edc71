/* `linfuse demo`: build the blog's GeGLU MLP on the CPU, run one forward with an observer on
 * the dispatcher and print the op chain and the kernels it launched, then time forwards (with
 * bench_time.c, as the benches do). Layer: cli/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/bench_time.h"
#include "cli/cli.h"
#include "linfuse/cpu.h"

enum { MAX_EVENTS = 256 };

typedef struct demo_event {
    int depth;
    int is_kernel;
    char text[160];
    double seconds; /* kernels: wall time of the synchronous CPU kernel */
    double flops;
} demo_event;

typedef struct demo_log {
    demo_event ev[MAX_EVENTS];
    int n, depth, lost;
    double kernel_t0;
} demo_log;

static demo_event *push(demo_log *l)
{
    if (l->n == MAX_EVENTS) {
        l->lost++;
        return NULL;
    }
    return &l->ev[l->n++];
}

static void on_op_begin(void *user, lf_op_id op, int n_args, const lf_op_arg *args)
{
    demo_log *l = user;
    demo_event *e = push(l);
    if (e) {
        e->depth = l->depth;
        e->is_kernel = 0;
        int n = snprintf(e->text, sizeof e->text, "%s(", lf_op_name(op));
        for (int i = 0; i < n_args && n < (int)sizeof e->text; i++) {
            const lf_op_arg *a = &args[i];
            n += snprintf(e->text + n, sizeof e->text - (size_t)n, "%s", i ? ", " : "");
            if (a->is_scalar)
                n += snprintf(e->text + n, sizeof e->text - (size_t)n, "%g", a->scalar);
            else if (!a->t)
                n += snprintf(e->text + n, sizeof e->text - (size_t)n, "None");
            else
                for (int d = 0; d < a->t->ndim && n < (int)sizeof e->text; d++)
                    n += snprintf(e->text + n, sizeof e->text - (size_t)n, d ? "x%lld" : "[%lld",
                                  (long long)a->t->shape[d]);
            if (a->t && !a->is_scalar && n < (int)sizeof e->text)
                n += snprintf(e->text + n, sizeof e->text - (size_t)n, "]");
        }
        if (n < (int)sizeof e->text)
            snprintf(e->text + n, sizeof e->text - (size_t)n, ")");
    }
    l->depth++;
}

static void on_op_end(void *user, lf_op_id op, lf_status s)
{
    (void)op, (void)s;
    ((demo_log *)user)->depth--;
}

static void on_kernel_begin(void *user, lf_device dev, lf_kernel_info *info)
{
    (void)dev, (void)info;
    ((demo_log *)user)->kernel_t0 = lf_cli_now();
}

static void on_kernel_end(void *user, lf_device dev, const lf_kernel_info *info)
{
    demo_log *l = user;
    double dt = lf_cli_now() - l->kernel_t0;
    demo_event *e = push(l);
    if (!e || !info)
        return;
    e->depth = l->depth;
    e->is_kernel = 1;
    e->seconds = dt;
    e->flops = info->flops;
    snprintf(e->text, sizeof e->text, "%s  [%s]", info->name, lf_device_name(dev));
}

static void demo_usage(FILE *f)
{
    fputs("usage: linfuse demo [--batch N] [--seq N] [--dim N] [--hidden N] [--dtype bf16|f16|f32]\n"
          "                    [--reps N] [--threads N] [--seed N]\n"
          "Runs y = down(gelu_tanh(gate(x)) * up(x)) on x [batch, seq, dim] on the CPU.\n"
          "Defaults: batch 4, seq 128, dim 768, hidden 3072 (the blog's MLP with batch 64 -> 4\n"
          "so the CPU answers in about a second), bf16, 5 timed forwards.\n",
          f);
}

/* The demo's sizes and settings, from its flags. */
typedef struct demo_cfg {
    int64_t batch, seq, dim, hidden, reps, threads, seed;
    lf_dtype dtype;
} demo_cfg;

/* The flags into d; -1 to go on, else the exit status (the message or the help printed). */
static int demo_args(int argc, char **argv, demo_cfg *d)
{
    *d = (demo_cfg){4, 128, 768, 3072, 5, 0, 0, LF_DTYPE_BF16};
    enum { D_BATCH, D_SEQ, D_DIM, D_HIDDEN, D_REPS, D_THREADS, D_SEED, D_DTYPE };
    const lf_cli_opt opts[] = {{"batch", 1, D_BATCH, 0},   {"seq", 1, D_SEQ, 0},    {"dim", 1, D_DIM, 0},
                               {"hidden", 1, D_HIDDEN, 0}, {"reps", 1, D_REPS, 0},  {"threads", 1, D_THREADS, 0},
                               {"seed", 1, D_SEED, 0},     {"dtype", 1, D_DTYPE, 0}};
    const char *cmd = "linfuse demo", *v;
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
    for (int id; (id = lf_cli_next(&a, &v)) != LF_CLI_END;) {
        int ok = 1;
        switch (id) {
        case LF_CLI_HELP:
            demo_usage(stdout);
            return LF_EXIT_OK;
        case D_BATCH:
            ok = lf_cli_int(cmd, "--batch", v, 1, 1 << 20, &d->batch);
            break;
        case D_SEQ:
            ok = lf_cli_int(cmd, "--seq", v, 1, 1 << 20, &d->seq);
            break;
        case D_DIM:
            ok = lf_cli_int(cmd, "--dim", v, 1, 1 << 20, &d->dim);
            break;
        case D_HIDDEN:
            ok = lf_cli_int(cmd, "--hidden", v, 1, 1 << 20, &d->hidden);
            break;
        case D_REPS:
            ok = lf_cli_int(cmd, "--reps", v, 1, 10000, &d->reps);
            break;
        case D_THREADS:
            ok = lf_cli_int(cmd, "--threads", v, 1, 4096, &d->threads);
            break;
        case D_SEED:
            ok = lf_cli_int(cmd, "--seed", v, 0, INT64_MAX, &d->seed);
            break;
        case D_DTYPE:
            if (lf_dtype_parse(v, &d->dtype) != LF_OK) {
                fprintf(stderr, "%s: --dtype: %s\n", cmd, lf_last_error());
                return LF_EXIT_USAGE;
            }
            break;
        case LF_CLI_WORD:
            fprintf(stderr, "%s: unexpected argument '%s'\n", cmd, v);
            ok = 0;
            break;
        default:
            ok = 0;
            break;
        }
        if (!ok) /* said above, in a line of its own */
            return LF_EXIT_USAGE;
    }
    return -1;
}

/* The observed forward: ops nested, kernels with their times. */
static void print_log(const demo_log *log)
{
    int kernels = 0;
    double kernel_s = 0;
    printf("One forward (the fourth; three warmed up), as the dispatcher saw it (ops nest; kernels are what "
           "ran):\n");
    for (int i = 0; i < log->n; i++) {
        const demo_event *e = &log->ev[i];
        if (e->is_kernel) {
            kernels++;
            kernel_s += e->seconds;
            printf("%*s-> kernel %s  %.3f ms", 2 * e->depth + 2, "", e->text, e->seconds * 1e3);
            if (e->flops > 1e6 && e->seconds > 0)
                printf("  %.1f GFLOP/s", e->flops / e->seconds * 1e-9);
            printf("\n");
        } else {
            printf("%*s%s\n", 2 * e->depth + 2, "", e->text);
        }
    }
    if (log->lost)
        printf("  (%d events not shown: the demo's log holds %d)\n", log->lost, MAX_EVENTS);
    printf("\nkernels per forward: %d (3 GEMMs, gelu, mul); view ops (t, reshape, view) launched none\n", kernels);
    printf("kernel time in that forward: %.3f ms\n", kernel_s * 1e3);
}

/* The forward the demo times, and its last output (freed untimed before the next sample). */
typedef struct demo_run {
    const lf_nn_gated_mlp *mlp;
    const lf_tensor *x;
    lf_tensor *y;
} demo_run;

static lf_status demo_forward(void *ctx)
{
    demo_run *r = ctx;
    return lf_nn_gated_mlp_forward(r->mlp, r->x, &r->y);
}

static lf_status demo_drop_output(void *ctx)
{
    demo_run *r = ctx;
    lf_tensor_free(r->y);
    r->y = NULL;
    return LF_OK;
}

/* d->reps forwards, each timed alone (the observed one warmed up; its output y, taken here, is
 * freed untimed before the first); the median. */
static int time_forwards(const demo_cfg *d, const lf_nn_gated_mlp *mlp, const lf_tensor *x, lf_tensor **y)
{
    demo_run r = {mlp, x, *y};
    *y = NULL;
    const lf_bench_opts o = {.warmup = 0,
                             .per_sample = 1,
                             .samples = (int)d->reps,
                             .forward = demo_forward,
                             .before_sample = demo_drop_output,
                             .ctx = &r};
    lf_bench b;
    int rc = LF_EXIT_OK;
    if (!lf_bench_init(&b, &o)) {
        fprintf(stderr, "linfuse demo: out of memory\n");
        rc = LF_EXIT_FAIL;
    } else if (lf_bench_run(&b) != LF_OK) {
        fprintf(stderr, "linfuse demo: forward failed: %s\n", lf_last_error());
        rc = LF_EXIT_FAIL;
    } else {
        const double flops = 3.0 * 2.0 * (double)(d->batch * d->seq) * (double)d->dim * (double)d->hidden;
        const double med = lf_bench_median(&b);
        printf("time per forward: median of %lld = %.3f ms (%.1f GFLOP/s over the three GEMMs)\n", (long long)d->reps,
               med * 1e3, flops / med * 1e-9);
    }
    lf_bench_free(&b);
    lf_tensor_free(r.y);
    return rc;
}

int lf_cli_demo(int argc, char **argv)
{
    demo_cfg d;
    int rc = demo_args(argc, argv, &d);
    if (rc >= 0)
        return rc;
    if (d.threads)
        lf_cpu_set_threads((int)d.threads);

    lf_rng rng;
    lf_rng_seed(&rng, (uint64_t)d.seed);
    lf_nn_gated_mlp mlp;
    lf_nn_gated_mlp_opts mo = {d.dim, d.hidden, d.dtype, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
    lf_tensor *x = NULL, *y = NULL;
    int64_t xs[3] = {d.batch, d.seq, d.dim};
    if (lf_nn_gated_mlp_init(&mlp, &mo, &rng) != LF_OK || lf_tensor_empty(&x, d.dtype, 3, xs, LF_DEVICE_CPU) != LF_OK ||
        lf_tensor_fill_uniform(x, &rng, -1.0, 1.0) != LF_OK) {
        fprintf(stderr, "linfuse demo: %s\n", lf_last_error());
        lf_nn_gated_mlp_free(&mlp);
        lf_tensor_free(x);
        return LF_EXIT_FAIL;
    }
    printf("linfuse demo: GeGLU MLP, x [%lld, %lld, %lld], hidden %lld, %s, cpu (%s kernels, %d thread%s)\n\n",
           (long long)d.batch, (long long)d.seq, (long long)d.dim, (long long)d.hidden, lf_dtype_name(d.dtype),
           lf_cpu_isa_name(lf_cpu_isa_active()), lf_cpu_threads(), lf_cpu_threads() == 1 ? "" : "s");

    demo_log *log = calloc(1, sizeof *log);
    lf_op_observer obs = {on_op_begin, on_op_end, on_kernel_begin, on_kernel_end, log, NULL, NULL, NULL, NULL};
    lf_status s = LF_ENOMEM;
    if (log) {
        /* the watched forward is the fourth: the ones before pay for first touches of their
         * buffers, the threads' start and the host allocator's cache of freed blocks filling up
         * (watched second, gelu and mul still ran 4-7x their steady time, 3.4 against 0.6 ms) */
        s = LF_OK;
        for (int warm = 0; warm < 3 && s == LF_OK; warm++) {
            s = lf_nn_gated_mlp_forward(&mlp, x, &y);
            lf_tensor_free(y), y = NULL;
        }
        lf_ops_set_observer(&obs);
        if (s == LF_OK)
            s = lf_nn_gated_mlp_forward(&mlp, x, &y);
        lf_ops_set_observer(NULL);
    }
    rc = LF_EXIT_FAIL;
    if (!log)
        fprintf(stderr, "linfuse demo: out of memory\n");
    else if (s != LF_OK)
        fprintf(stderr, "linfuse demo: forward failed: %s\n", lf_last_error());
    else
        print_log(log), rc = time_forwards(&d, &mlp, x, &y);
    free(log);
    lf_tensor_free(x);
    lf_tensor_free(y);
    lf_nn_gated_mlp_free(&mlp);
    return rc;
}
