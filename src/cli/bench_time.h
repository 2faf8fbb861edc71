/* One timing method for every `linfuse bench` (bench_time.c): warm-up forwards and one
 * synchronize, then samples, each a run of forwards queued back to back, one synchronize at its
 * end, the time divided by the forwards; the median of the samples (each kept, in order). Host time
 * per call is one forward timed alone after the queue has drained. The benches give the forward,
 * how to wait for the device, and what to do untimed before each sample (an L2 flush, ranks
 * meeting at a barrier, the last output freed). Layer: cli/. */
#ifndef LF_CLI_BENCH_TIME_H
#define LF_CLI_BENCH_TIME_H

#include "linfuse/status.h"

typedef struct lf_bench_opts {
    int warmup;                            /* forwards before the first sample, then one sync; untimed */
    int per_sample;                        /* forwards back to back in a sample (>= 1) */
    int samples;                           /* lf_bench_run takes at least this many */
    double min_seconds;                    /* lf_bench_run keeps taking samples until this long has passed (0: no) */
    int cap;                               /* the most samples kept, over every lf_bench_run (0: samples) */
    lf_status (*forward)(void *ctx);       /* one forward (on a GPU: queued) */
    lf_status (*sync)(void *ctx);          /* until every forward queued is done; NULL: none needed (CPU) */
    lf_status (*before_sample)(void *ctx); /* NULL, or what runs untimed before each sample */
    void *ctx;
} lf_bench_opts;

typedef struct lf_bench {
    lf_bench_opts o;
    lf_status st; /* the first failure of a callback (its message in lf_last_error); nothing runs after it */
    int n;        /* samples taken */
    double *t;    /* (cap) seconds per forward of each sample, in the order taken */
    double *work; /* (cap) host times and sorted copies: nothing is allocated while timing */
} lf_bench;

/* A bench with no samples yet, for options in range (asserted: they are the bench's constants);
 * 0 when out of memory. lf_bench_free frees it (also after a failed init). */
int lf_bench_init(lf_bench *b, const lf_bench_opts *o);
void lf_bench_free(lf_bench *b);
/* The warm-up forwards, then one sync. */
lf_status lf_bench_warm(lf_bench *b);
/* One sample, appended to b->t (nothing when the bench is full): before_sample, then the clock
 * runs over per_sample forwards and one sync. */
lf_status lf_bench_sample(lf_bench *b);
/* lf_bench_warm, then samples until this call has taken o.samples and o.min_seconds have passed
 * since the warm-up, or the bench is full. Called again, it adds to the samples. */
lf_status lf_bench_run(lf_bench *b);
/* The median of the samples taken (0 when none). */
double lf_bench_median(const lf_bench *b);
/* Host seconds per call into *median: calls (at most cap) times, the queue drained (sync,
 * untimed), one forward timed alone; then one sync. What the caller's thread spends to queue a
 * forward. */
lf_status lf_bench_host(lf_bench *b, int calls, double *median);

#endif
