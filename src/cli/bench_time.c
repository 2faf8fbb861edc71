/* The benches' one timing method (bench_time.h): bench cpu, cuda, tp and profiler, and the
 * demo's forwards, are timed here and nowhere else. Layer: cli/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_time.h"
#include "cli/cli.h"

/* A bench's options are its constants: out of range is the bench's bug (checked in every build). */
static void require(int ok, const char *fn, const char *what)
{
    if (!ok) {
        fprintf(stderr, "linfuse: %s: %s (a bug of the bench)\n", fn, what);
        abort();
    }
}

int lf_bench_init(lf_bench *b, const lf_bench_opts *o)
{
    memset(b, 0, sizeof *b);
    b->o = *o;
    if (!b->o.cap)
        b->o.cap = o->samples;
    require(o->forward && o->warmup >= 0 && o->per_sample >= 1 && o->samples >= 1 && b->o.cap >= o->samples,
            "lf_bench_init", "options out of range");
    b->t = malloc((size_t)b->o.cap * sizeof *b->t);
    b->work = malloc((size_t)b->o.cap * sizeof *b->work);
    return b->t && b->work;
}

void lf_bench_free(lf_bench *b)
{
    free(b->t), free(b->work);
    b->t = b->work = NULL;
}

static lf_status sync_all(lf_bench *b)
{
    if (b->st == LF_OK && b->o.sync)
        b->st = b->o.sync(b->o.ctx);
    return b->st;
}

lf_status lf_bench_warm(lf_bench *b)
{
    for (int k = 0; k < b->o.warmup && b->st == LF_OK; k++)
        b->st = b->o.forward(b->o.ctx);
    return sync_all(b);
}

lf_status lf_bench_sample(lf_bench *b)
{
    if (b->st != LF_OK || b->n == b->o.cap)
        return b->st;
    if (b->o.before_sample && (b->st = b->o.before_sample(b->o.ctx)) != LF_OK)
        return b->st;
    const double t0 = lf_cli_now();
    for (int k = 0; k < b->o.per_sample && b->st == LF_OK; k++)
        b->st = b->o.forward(b->o.ctx);
    if (sync_all(b) == LF_OK)
        b->t[b->n++] = (lf_cli_now() - t0) / b->o.per_sample;
    return b->st;
}

lf_status lf_bench_run(lf_bench *b)
{
    if (lf_bench_warm(b) != LF_OK)
        return b->st;
    const double start = lf_cli_now();
    for (int i = 0; b->st == LF_OK && b->n < b->o.cap && (i < b->o.samples || lf_cli_now() - start < b->o.min_seconds);
         i++)
        lf_bench_sample(b);
    return b->st;
}

double lf_bench_median(const lf_bench *b)
{
    if (b->n < 1)
        return 0;
    memcpy(b->work, b->t, (size_t)b->n * sizeof *b->work); /* sorted there: the samples keep their order */
    return lf_cli_median(b->work, b->n);
}

lf_status lf_bench_host(lf_bench *b, int calls, double *median)
{
    require(calls >= 1 && calls <= b->o.cap, "lf_bench_host", "calls out of range");
    *median = 0;
    int n = 0;
    for (; n < calls && sync_all(b) == LF_OK; n++) {
        const double t0 = lf_cli_now();
        b->st = b->o.forward(b->o.ctx);
        b->work[n] = lf_cli_now() - t0;
    }
    if (sync_all(b) == LF_OK)
        *median = lf_cli_median(b->work, n);
    return b->st;
}
