/* What in a trace could not be trusted (lf_trace_trust): records the profiler dropped, device work
 * launched outside every step, work that overlaps the last work on its own stream (one stream runs
 * one thing at a time unless the second was launched with PDL), negative durations the reader
 * read as 0, and durations no measurement has (over a day: a garbage or unset timestamp). Counted, so every verb can say them instead of
 * summing them in. Layer: trace/. */
#include <stdio.h>
#include <stdlib.h>

#include "trace/trace_impl.h"

typedef struct on_stream {
    int64_t pid, tid, lo, hi;
} on_stream;

static int by_stream(const void *a, const void *b)
{
    const on_stream *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* A step's span on its rank's host (pid: a merged trace's rank, else 0 for every step). */
typedef struct step_at {
    int64_t pid, lo, hi;
} step_at;

static int by_pid_lo(const void *a, const void *b)
{
    const step_at *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Whether time t on rank pid lies in one of its steps (binary search). */
static int in_step(const step_at *s, int64_t n, int64_t pid, int64_t t)
{
    int64_t a = 0, b = n;
    while (a < b) { /* the last step of pid starting at or before t */
        const int64_t mid = (a + b) / 2;
        if (s[mid].pid < pid || (s[mid].pid == pid && s[mid].lo <= t))
            a = mid + 1;
        else
            b = mid;
    }
    return a > 0 && s[a - 1].pid == pid && t <= s[a - 1].hi;
}

enum { DAY_NS = 86400 }; /* seconds, times 1e9 below */

lf_status lf_trace_trust_count(const lf_trace *t, lf_trace_trust *out)
{
    LF_CHECK_PTR(t, "lf_trace_trust_count", "t");
    LF_CHECK_PTR(out, "lf_trace_trust_count", "out");
    *out = (lf_trace_trust){.dropped = t->meta.dropped_events, .negative_durations = t->meta.negative_durations};
    const int merged = t->meta.merged_ranks > 0; /* a rank's work is outside its own steps, not the others' */
    int64_t *when = lf_trace_launch_times(t);
    on_stream *w = malloc((size_t)(t->n + 1) * sizeof *w);
    step_at *st = malloc((size_t)(t->n + 1) * sizeof *st);
    if (!when || !w || !st) {
        free(when), free(w), free(st);
        return lf_fail(LF_ENOMEM, "lf_trace_trust_count: out of memory");
    }
    int64_t n = 0, steps = 0;
    for (int64_t i = 0; i < t->n; i++)
        if (lf_trace_is_step(&t->ev[i]))
            st[steps++] = (step_at){merged ? t->ev[i].pid : 0, t->ev[i].ts_ns, t->ev[i].ts_ns + t->ev[i].dur_ns};
    if (steps)
        qsort(st, (size_t)steps, sizeof *st, by_pid_lo);
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        out->absurd_durations += e->dur_ns / 1000000000 > DAY_NS;
        if (!lf_trace_cat_is_device(e->cat) || e->cat == LF_TC_GPU_ANNOTATION || e->dur_ns < 0)
            continue;
        out->outside_steps += steps && !in_step(st, steps, merged ? e->pid : 0, when[i]);
        w[n++] = (on_stream){e->pid, e->tid, e->ts_ns, e->ts_ns + e->dur_ns};
    }
    if (n)
        qsort(w, (size_t)n, sizeof *w, by_stream);
    for (int64_t i = 1, end = n ? w[0].hi : 0; i < n; i++) {
        if (w[i].pid == w[i - 1].pid && w[i].tid == w[i - 1].tid) {
            out->stream_overlaps += w[i].lo < end - 1; /* 1 ns: a microsecond text read back rounds */
            end = w[i].hi > end ? w[i].hi : end;
        } else {
            end = w[i].hi;
        }
    }
    free(when), free(w), free(st);
    return LF_OK;
}

void lf_trace_trust_line(const lf_trace_trust *tr, char *buf, size_t cap)
{
    if (!buf || !cap)
        return;
    buf[0] = '\0';
    if (!tr)
        return;
    const struct {
        int64_t n;
        const char *what;
    } parts[] = {{tr->dropped, "records the profiler dropped"},
                 {tr->outside_steps, "kernels, copies or sets launched outside every step (in no step's numbers)"},
                 {tr->stream_overlaps, "kernels, copies or sets overlapping the last on their stream (launched with PDL, or a wrong record)"},
                 {tr->negative_durations, "negative durations (read as 0)"},
                 {tr->absurd_durations, "durations over a day"}};
    size_t used = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (!parts[i].n || used + 1 >= cap)
            continue;
        int w = snprintf(buf + used, cap - used, "%s%lld %s", used ? ", " : "not trusted: ", (long long)parts[i].n,
                         parts[i].what);
        used = w < 0 ? used : used + (size_t)w < cap ? used + (size_t)w : cap - 1;
    }
}

void lf_trace_trust_json(const lf_trace_trust *tr, char *buf, size_t cap)
{
    if (!buf || !cap)
        return;
    const lf_trace_trust z = {0};
    if (!tr)
        tr = &z;
    snprintf(buf, cap,
             "{\"dropped\": %lld, \"outside_steps\": %lld, \"stream_overlaps\": %lld, \"negative_durations\": %lld, "
             "\"absurd_durations\": %lld}",
             (long long)tr->dropped, (long long)tr->outside_steps, (long long)tr->stream_overlaps,
             (long long)tr->negative_durations, (long long)tr->absurd_durations);
}
