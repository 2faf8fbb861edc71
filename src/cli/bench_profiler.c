/* `linfuse bench profiler`: what recording costs. The same work runs with the profiler off and
 * on, in alternating blocks; the difference divided by the events recorded is the cost of one
 * event, and the difference per step is what a user's step pays. Timed by bench_time.c.
 * Layer: cli/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_time.h"
#include "cli/cli.h"

typedef struct pcase {
    const char *name;
    int kind; /* 0: lf_t on a small tensor (one cpu_op event, no kernel); 1: linear; 2: mlp */
    int64_t batch, seq, dim, hidden;
    int inner; /* calls per timed sample */
    int record_shapes;
    int windows; /* 1: one window per sample (a schedule of active 1, repeat forever), stepped between samples */
} pcase;

typedef struct work {
    lf_tensor *x, *small;
    lf_nn_linear lin;
    lf_nn_gated_mlp mlp;
} work;

/* One call of the case's work, as the harness calls it (ctx: a run_ctx). */
typedef struct run_ctx {
    const pcase *c;
    work *w;
} run_ctx;

static lf_status run_once(void *ctx)
{
    const run_ctx *r = ctx;
    lf_tensor *y = NULL;
    lf_status s;
    if (r->c->kind == 0)
        s = lf_t(&y, r->w->small);
    else if (r->c->kind == 1)
        s = lf_nn_linear_forward(&r->w->lin, r->w->x, &y);
    else
        s = lf_nn_gated_mlp_forward(&r->w->mlp, r->w->x, &y);
    lf_tensor_free(y);
    return s;
}

/* With windows: each completed window's events, added up. */
static void count_window(lf_profiler *p, void *user)
{
    const lf_trace *tr = NULL;
    if (lf_prof_trace(p, &tr) == LF_OK)
        *(int64_t *)user += lf_trace_count(tr);
}

/* Median seconds per call over `samples` samples of c->inner calls, profiler on or off. With it
 * on, one session spans every sample (buffers grow as they fill, amortized), and the events per
 * call are counted from its trace; with c->windows each sample is a window of its own, stepped
 * (and turned into a trace) between samples, untimed, as a long run under a schedule is. */
static lf_status measure(const pcase *c, work *w, int on, int samples, double *per_call, double *events_per_call)
{
    run_ctx rc = {c, w};
    lf_bench b;
    const lf_bench_opts bo = {
        .warmup = c->inner, .per_sample = c->inner, .samples = samples, .forward = run_once, .ctx = &rc};
    if (!lf_bench_init(&b, &bo)) {
        lf_bench_free(&b);
        return LF_ENOMEM;
    }
    lf_status s = LF_OK;
    lf_profiler *p = NULL;
    int64_t window_events = 0;
    lf_prof_opts o = {.record_shapes = c->record_shapes,
                      .use_schedule = c->windows,
                      .schedule = {.active = 1},
                      .on_trace_ready = c->windows ? count_window : NULL,
                      .user = &window_events};
    if (on)
        s = lf_prof_start(&p, &o);
    if (s == LF_OK) /* a warm-up block, then the samples */
        s = lf_bench_warm(&b);
    for (int i = 0; i < samples && s == LF_OK; i++) {
        s = lf_bench_sample(&b);
        if (on && c->windows && s == LF_OK)
            s = lf_prof_step(p);
    }
    if (on) {
        if (s == LF_OK)
            s = lf_prof_stop(p);
        const lf_trace *tr = NULL;
        if (s == LF_OK && lf_prof_trace(p, &tr) == LF_OK)
            *events_per_call =
                (double)(c->windows ? window_events : lf_trace_count(tr)) / ((double)(samples + 1) * c->inner);
        lf_prof_free(p);
    }
    *per_call = lf_bench_median(&b);
    lf_bench_free(&b);
    return s;
}

int lf_cli_bench_profiler(int reps)
{
    static const pcase cases[] = {
        {"view_op_event", 0, 0, 0, 0, 0, 20000, 0, 0},
        {"view_op_event_record_shapes", 0, 0, 0, 0, 0, 20000, 1, 0},
        {"view_op_event_windows", 0, 0, 0, 0, 0, 20000, 0, 1},
        {"linear_1024x32x64_step", 1, 1024, 0, 32, 64, 50, 1, 0},
        {"simple_mlp_1x16x768x3072_step", 2, 1, 16, 768, 3072, 10, 1, 0},
        {"simple_mlp_8x128x768x3072_step", 2, 8, 128, 768, 3072, 2, 1, 0},
    };
    printf("# profiler off vs on (record_shapes as named), same work, alternating blocks; median per call\n");
    int rc = LF_EXIT_OK;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && rc == LF_EXIT_OK; i++) {
        const pcase *c = &cases[i];
        work w;
        memset(&w, 0, sizeof w);
        lf_rng rng;
        lf_rng_seed(&rng, 3);
        lf_status s = LF_OK;
        int64_t small[2] = {4, 4};
        if (c->kind == 0) {
            s = lf_tensor_empty(&w.small, LF_DTYPE_F32, 2, small, LF_DEVICE_CPU);
        } else if (c->kind == 1) {
            lf_nn_linear_opts o = {c->dim, c->hidden, 1, LF_DTYPE_BF16, LF_DEVICE_CPU};
            int64_t xs[2] = {c->batch, c->dim};
            s = lf_nn_linear_init(&w.lin, &o, &rng);
            if (s == LF_OK)
                s = lf_tensor_empty(&w.x, LF_DTYPE_BF16, 2, xs, LF_DEVICE_CPU);
        } else {
            lf_nn_gated_mlp_opts o = {c->dim, c->hidden, LF_DTYPE_BF16, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
            int64_t xs[3] = {c->batch, c->seq, c->dim};
            s = lf_nn_gated_mlp_init(&w.mlp, &o, &rng);
            if (s == LF_OK)
                s = lf_tensor_empty(&w.x, LF_DTYPE_BF16, 3, xs, LF_DEVICE_CPU);
        }
        if (s == LF_OK && w.x)
            s = lf_tensor_fill_uniform(w.x, &rng, -1, 1);
        double off = 0, on = 0, off2 = 0, events = 0;
        for (int round = 0; round < 2 && s == LF_OK; round++) { /* off, on, off: drift shows */
            s = measure(c, &w, 0, reps, round ? &off2 : &off, &events);
            if (s == LF_OK && !round)
                s = measure(c, &w, 1, reps, &on, &events);
        }
        if (s != LF_OK) {
            fprintf(stderr, "linfuse bench profiler: %s: %s\n", c->name, lf_last_error());
            rc = LF_EXIT_FAIL;
        } else {
            double base = 0.5 * (off + off2);
            printf("case=%s off_us=%.3f on_us=%.3f overhead_pct=%.2f events_per_call=%.0f ns_per_event=%.1f\n", c->name,
                   base * 1e6, on * 1e6, 100.0 * (on - base) / base, events,
                   events > 0 ? (on - base) * 1e9 / events : 0.0);
        }
        lf_tensor_free(w.x), lf_tensor_free(w.small);
        lf_nn_linear_free(&w.lin);
        lf_nn_gated_mlp_free(&w.mlp);
    }
    return rc;
}
