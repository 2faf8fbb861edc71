/* The one-line reading of a trace: kernels and CPU ops per step, how busy the device was
 * during the steps, and whether the run is overhead-bound (the device mostly waits for the
 * host) or compute-bound. Layer: trace/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"

typedef struct span {
    int64_t lo, hi;
} span;

static int by_lo(const void *a, const void *b)
{
    int64_t x = ((const span *)a)->lo, y = ((const span *)b)->lo;
    return (x > y) - (x < y);
}

static int is_step(const lf_trace_event *e)
{
    return e->cat == LF_TC_USER_ANNOTATION && !strncmp(e->name, "ProfilerStep#", 13);
}

lf_status lf_trace_summarize(const lf_trace *t, lf_trace_summary *out)
{
    LF_CHECK_PTR(t, "lf_trace_summarize", "t");
    LF_CHECK_PTR(out, "lf_trace_summarize", "out");
    memset(out, 0, sizeof *out);
    int64_t steps = 0, step_ns = 0, kernels = 0, ops = 0, dev_ns = 0;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t i = 0; i < t->n; i++)
        steps += is_step(&t->ev[i]);
    span *sp = malloc((size_t)(steps + 1) * sizeof *sp);
    if (!sp)
        return lf_fail(LF_ENOMEM, "lf_trace_summarize: out of memory");
    for (int64_t i = 0, k = 0; i < t->n; i++)
        if (is_step(&t->ev[i])) {
            sp[k++] = (span){t->ev[i].ts_ns, t->ev[i].ts_ns + t->ev[i].dur_ns};
            step_ns += t->ev[i].dur_ns;
        }
    qsort(sp, (size_t)steps, sizeof *sp, by_lo);
    int64_t *when = lf_trace_launch_times(t);
    if (!when) {
        free(sp);
        return lf_fail(LF_ENOMEM, "lf_trace_summarize: out of memory");
    }
    /* ops count when they start inside a step, device work when it was launched inside one
     * (or anywhere, without steps) */
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        int64_t a = 0, b = steps; /* the last step starting at or before e's launch */
        while (a < b) {
            int64_t mid = (a + b) / 2;
            if (sp[mid].lo <= when[i])
                a = mid + 1;
            else
                b = mid;
        }
        int in_step = !steps || (a > 0 && when[i] <= sp[a - 1].hi);
        if (!in_step || e->dur_ns < 0)
            continue;
        if (e->cat == LF_TC_KERNEL || e->cat == LF_TC_MEMCPY || e->cat == LF_TC_MEMSET) {
            kernels += e->cat == LF_TC_KERNEL; /* memcpy and memset are device time, not kernels */
            dev_ns += e->dur_ns;
        } else if (e->cat == LF_TC_CPU_OP) {
            ops++;
        }
        if (!lf_trace_cat_is_device(e->cat)) {
            lo = e->ts_ns < lo ? e->ts_ns : lo;
            hi = e->ts_ns + e->dur_ns > hi ? e->ts_ns + e->dur_ns : hi;
        }
    }
    free(sp);
    free(when);
    if (!steps) { /* no steps: the span of host activity is one step */
        steps = 1;
        step_ns = hi > lo ? hi - lo : 0;
    }
    out->steps = steps;
    out->kernels_per_step = (double)kernels / (double)steps;
    out->cpu_ops_per_step = (double)ops / (double)steps;
    out->step_ns = (double)step_ns / (double)steps;
    out->device_ns_per_step = (double)dev_ns / (double)steps;
    out->device_busy = step_ns > 0 ? (double)dev_ns / (double)step_ns : 0;
    if (out->device_busy > 1)
        out->device_busy = 1; /* concurrent streams can overlap */
    out->compute_bound = out->device_busy >= 0.5;
    return LF_OK;
}

void lf_trace_summary_line(const lf_trace_summary *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "kernels/step=%g cpu_ops/step=%g device_busy=%.0f%% verdict=%s", s->kernels_per_step,
             s->cpu_ops_per_step, 100.0 * s->device_busy, s->compute_bound ? "compute-bound" : "overhead-bound");
}
