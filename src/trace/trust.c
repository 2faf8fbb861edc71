/* What in a trace could not be trusted (lf_trace_trust): records the profiler dropped, device work
 * launched outside every step, work that overlaps the last work on its own stream (one stream runs
 * one thing at a time: overlapping records are wrong somewhere), negative durations the reader
 * read as 0, and durations no measurement has. Counted, so every verb can say them instead of
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

lf_status lf_trace_trust_count(const lf_trace *t, lf_trace_trust *out)
{
    LF_CHECK_PTR(t, "lf_trace_trust_count", "t");
    LF_CHECK_PTR(out, "lf_trace_trust_count", "out");
    *out = (lf_trace_trust){.dropped = t->meta.dropped_events, .negative_durations = t->meta.negative_durations};
    lf_span *sp;
    int64_t steps, total;
    LF_TRY(lf_trace_step_spans(t, &sp, &steps, &total));
    int64_t *when = lf_trace_launch_times(t);
    on_stream *w = malloc((size_t)(t->n + 1) * sizeof *w);
    if (!when || !w) {
        free(sp), free(when), free(w);
        return lf_fail(LF_ENOMEM, "lf_trace_trust_count: out of memory");
    }
    int64_t n = 0, first = INT64_MAX, last = INT64_MIN;
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        first = e->ts_ns < first ? e->ts_ns : first;
        last = e->ts_ns > last ? e->ts_ns : last;
        if (!lf_trace_cat_is_device(e->cat) || e->cat == LF_TC_GPU_ANNOTATION || e->dur_ns < 0)
            continue;
        out->outside_steps += steps && !lf_span_contains(sp, steps, when[i]);
        w[n++] = (on_stream){e->pid, e->tid, e->ts_ns, e->ts_ns + e->dur_ns};
    }
    qsort(w, (size_t)n, sizeof *w, by_stream);
    for (int64_t i = 1, end = n ? w[0].hi : 0; i < n; i++) {
        if (w[i].pid == w[i - 1].pid && w[i].tid == w[i - 1].tid) {
            out->stream_overlaps += w[i].lo < end - 1; /* 1 ns: a microsecond text read back rounds */
            end = w[i].hi > end ? w[i].hi : end;
        } else {
            end = w[i].hi;
        }
    }
    const int64_t span = last > first ? last - first : 0, second = 1000000000;
    for (int64_t i = 0; i < t->n; i++) {
        const int64_t d = t->ev[i].dur_ns;
        out->absurd_durations += d > second && d / 10 > span;
    }
    free(sp), free(when), free(w);
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
                 {tr->absurd_durations, "durations over 10x the trace's span"}};
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
