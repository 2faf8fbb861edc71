/* The one-line reading of a trace: kernels and CPU ops per step, how busy the device was
 * during the steps, whether the run is overhead-bound (the device mostly waits for the host),
 * compute-bound, or comm-bound (collectives no compute hides), and how much of its
 * communication overlaps computation, as HTA measures it. Layer: trace/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"

/* A collective's kernel: NCCL's (ncclDevKernel_*, ncclKernel_*), or linfuse's own timing of one
 * when CUPTI is off ("nccl:all_reduce bf16"). */
static int is_comm(const lf_trace_event *e)
{
    return e->cat == LF_TC_KERNEL && !strncmp(e->name, "nccl", 4);
}

typedef struct ival {
    int64_t dev, lo, hi;
} ival;

static int by_dev_lo(const void *a, const void *b)
{
    const ival *x = a, *y = b;
    return x->dev != y->dev ? (x->dev < y->dev ? -1 : 1) : x->lo != y->lo ? (x->lo < y->lo ? -1 : 1) : 0;
}

/* Merge sorted intervals (by dev, lo) in place into disjoint ones; returns how many. */
static int64_t merge(ival *v, int64_t n)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (k && v[k - 1].dev == v[i].dev && v[i].lo <= v[k - 1].hi) {
            if (v[i].hi > v[k - 1].hi)
                v[k - 1].hi = v[i].hi;
        } else {
            v[k++] = v[i];
        }
    }
    return k;
}

/* Collective time inside the steps and the part of it compute kernels on the same GPU overlap. */
static lf_status comm_overlap(const lf_trace *t, double *comm_ns, double *hidden_ns, int *found)
{
    *comm_ns = *hidden_ns = 0;
    *found = 0;
    lf_span *sp;
    int64_t steps, total;
    LF_TRY(lf_trace_step_spans(t, &sp, &steps, &total));
    int64_t *when = lf_trace_launch_times(t);
    ival *c = malloc((size_t)(t->n + 1) * sizeof *c), *k = malloc((size_t)(t->n + 1) * sizeof *k);
    if (!when || !c || !k) {
        free(sp), free(when), free(c), free(k);
        return lf_fail(LF_ENOMEM, "lf_trace_summarize: out of memory");
    }
    int64_t nc = 0, nk = 0;
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (e->cat != LF_TC_KERNEL || e->dur_ns <= 0 || (steps && !lf_span_contains(sp, steps, when[i])))
            continue;
        ival v = {e->device >= 0 ? e->device : e->pid, e->ts_ns, e->ts_ns + e->dur_ns};
        if (is_comm(e))
            c[nc++] = v;
        else
            k[nk++] = v;
    }
    qsort(c, (size_t)nc, sizeof *c, by_dev_lo);
    qsort(k, (size_t)nk, sizeof *k, by_dev_lo);
    nc = merge(c, nc);
    nk = merge(k, nk);
    /* both lists disjoint and sorted: one sweep adds up each comm interval's overlap */
    for (int64_t i = 0, j = 0; i < nc; i++) {
        *comm_ns += (double)(c[i].hi - c[i].lo);
        while (j < nk && (k[j].dev < c[i].dev || (k[j].dev == c[i].dev && k[j].hi <= c[i].lo)))
            j++;
        for (int64_t q = j; q < nk && k[q].dev == c[i].dev && k[q].lo < c[i].hi; q++) {
            int64_t lo = k[q].lo > c[i].lo ? k[q].lo : c[i].lo, hi = k[q].hi < c[i].hi ? k[q].hi : c[i].hi;
            if (hi > lo)
                *hidden_ns += (double)(hi - lo);
        }
    }
    *found = nc > 0;
    free(sp), free(when), free(c), free(k);
    return LF_OK;
}

static int by_value(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Kernels launched in the steps that a cudaGraphLaunch replayed (their correlation is its), and of
 * their time the shares traced back to a capture-time range (their External id is a device-side
 * annotation's) and carrying Python frames. */
static lf_status graph_kernels(const lf_trace *t, double *count, double *ranged, double *framed)
{
    *count = *ranged = *framed = 0;
    int64_t *ids = malloc((size_t)(t->n + 1) * sizeof *ids), n_ids = 0;
    int64_t *spans = malloc((size_t)(t->n + 1) * sizeof *spans), n_spans = 0;
    lf_span *sp = NULL;
    int64_t steps = 0, total = 0;
    int64_t *when = lf_trace_launch_times(t);
    if (!ids || !spans || !when || lf_trace_step_spans(t, &sp, &steps, &total) != LF_OK) {
        free(ids), free(spans), free(when), free(sp);
        return lf_fail(LF_ENOMEM, "lf_trace_summarize: out of memory");
    }
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if ((e->cat == LF_TC_RUNTIME || e->cat == LF_TC_DRIVER) && e->correlation &&
            !strncmp(e->name, "cudaGraphLaunch", 15))
            ids[n_ids++] = e->correlation;
        if (e->cat == LF_TC_GPU_ANNOTATION && e->ext_id)
            spans[n_spans++] = e->ext_id;
    }
    qsort(ids, (size_t)n_ids, sizeof *ids, by_value);
    qsort(spans, (size_t)n_spans, sizeof *spans, by_value);
    double ns = 0, ranged_ns = 0, framed_ns = 0;
    for (int64_t i = 0; i < t->n && n_ids; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (e->cat != LF_TC_KERNEL || !e->correlation || (steps && !lf_span_contains(sp, steps, when[i])) ||
            !bsearch(&e->correlation, ids, (size_t)n_ids, sizeof *ids, by_value))
            continue;
        const double d = e->dur_ns > 0 ? (double)e->dur_ns : 0;
        *count += 1, ns += d;
        if (e->ext_id && bsearch(&e->ext_id, spans, (size_t)n_spans, sizeof *spans, by_value))
            ranged_ns += d;
        if (e->stack)
            framed_ns += d;
    }
    if (ns > 0)
        *ranged = ranged_ns / ns, *framed = framed_ns / ns;
    free(ids), free(spans), free(when), free(sp);
    return LF_OK;
}

/* How busy the device was in the steps: the union of the device work launched in each step (by its
 * launch call, so a graph's kernels count in the step that launched it), per GPU, over the step's
 * window: from its start, or the end of the last step's window where the host ran ahead, to the
 * later of its end and its last work's end (a graph launch returns long before its kernels end;
 * overlapping streams count once), less the time its first work waited after its launch. Without
 * steps, one window from the first host event. 0 where there is no device work. */
typedef struct placed {
    int64_t step, dev, lo, hi, when;
} placed;

static int by_step_dev_lo(const void *a, const void *b)
{
    const placed *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static lf_status busy_share(const lf_trace *t, double *busy)
{
    *busy = 0;
    lf_span *sp;
    int64_t steps, total;
    LF_TRY(lf_trace_step_spans(t, &sp, &steps, &total));
    int64_t *when = lf_trace_launch_times(t);
    placed *w = malloc((size_t)(t->n + 1) * sizeof *w);
    if (!when || !w) {
        free(sp), free(when), free(w);
        return lf_fail(LF_ENOMEM, "lf_trace_summarize: out of memory");
    }
    lf_span whole = {INT64_MAX, INT64_MIN};
    int64_t n = 0;
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (!lf_trace_cat_is_device(e->cat)) {
            if (!steps && e->dur_ns >= 0 && e->cat != LF_TC_GPU_ANNOTATION) {
                whole.lo = e->ts_ns < whole.lo ? e->ts_ns : whole.lo;
                whole.hi = e->ts_ns + e->dur_ns > whole.hi ? e->ts_ns + e->dur_ns : whole.hi;
            }
            continue;
        }
        if (e->dur_ns <= 0 || e->cat == LF_TC_GPU_ANNOTATION)
            continue;
        int64_t a = 0;
        if (steps) { /* the last step starting at or before the launch, if it holds it */
            int64_t b = steps;
            while (a < b) {
                const int64_t mid = (a + b) / 2;
                if (sp[mid].lo <= when[i])
                    a = mid + 1;
                else
                    b = mid;
            }
            if (a == 0 || when[i] > sp[a - 1].hi)
                continue;
            a--;
        }
        w[n++] = (placed){a, e->device >= 0 ? e->device : e->pid, e->ts_ns, e->ts_ns + e->dur_ns, when[i]};
    }
    if (!steps && whole.lo < whole.hi)
        sp[0] = whole, steps = 1;
    qsort(w, (size_t)n, sizeof *w, by_step_dev_lo);
    double union_ns = 0, window_ns = 0;
    int64_t prev_end = INT64_MIN;
    for (int64_t i = 0; i < n && steps;) {
        const int64_t s = w[i].step;
        int64_t end = sp[s].hi, gpus = 0;
        /* the device cannot start a step's work before it ends the last step's (the host ran ahead) */
        const int64_t start = sp[s].lo > prev_end ? sp[s].lo : prev_end;
        double queued = 0;
        for (; i < n && w[i].step == s; gpus++) { /* one GPU's work in this step */
            const int64_t dev = w[i].dev;
            /* its first work launched and waiting (on work or a peer this trace does not show) is no
             * wait for the host: that part of the window is left out */
            const int64_t from = w[i].when > start ? w[i].when : start;
            if (w[i].lo > from)
                queued += (double)(w[i].lo - from);
            int64_t lo = w[i].lo, hi = w[i].hi;
            for (; i < n && w[i].step == s && w[i].dev == dev; i++) {
                if (w[i].lo > hi) {
                    union_ns += (double)(hi - lo);
                    lo = w[i].lo;
                }
                hi = w[i].hi > hi ? w[i].hi : hi;
            }
            union_ns += (double)(hi - lo);
            end = hi > end ? hi : end;
        }
        window_ns += (double)gpus * (double)(end - start) - queued;
        prev_end = end;
    }
    if (window_ns > 0)
        *busy = union_ns / window_ns < 1 ? union_ns / window_ns : 1; /* work begun before its step */
    free(sp), free(when), free(w);
    return LF_OK;
}

/* The summary is the step profile's totals (diff.c), read as a verdict. */
lf_status lf_trace_summarize(const lf_trace *t, lf_trace_summary *out)
{
    LF_CHECK_PTR(t, "lf_trace_summarize", "t");
    LF_CHECK_PTR(out, "lf_trace_summarize", "out");
    memset(out, 0, sizeof *out);
    lf_step_profile p;
    LF_TRY(lf_step_profile_build(t, &p));
    out->steps = p.steps;
    out->kernels_per_step = p.kernels_per_step;
    out->cpu_ops_per_step = p.ops_per_step;
    out->step_ns = p.cpu_ns_per_step;
    out->device_ns_per_step = p.device_ns_per_step;
    lf_status st = busy_share(t, &out->device_busy);
    if (st != LF_OK) {
        lf_step_profile_free(&p);
        return st;
    }
    out->compute_bound = out->device_busy >= 0.5;
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_cat c = t->ev[i].cat;
        out->device_events += c == LF_TC_KERNEL || c == LF_TC_MEMCPY || c == LF_TC_MEMSET;
    }
    const double steps = (double)(p.steps > 0 ? p.steps : 1);
    lf_step_profile_free(&p);
    double comm = 0, hidden = 0, replayed = 0;
    LF_TRY(graph_kernels(t, &replayed, &out->graph_ranged, &out->graph_framed));
    out->graph_kernels_per_step = replayed / steps;
    LF_TRY(comm_overlap(t, &comm, &hidden, &out->has_comm));
    if (out->has_comm) {
        out->comm_ns_per_step = comm / steps;
        out->exposed_comm_ns_per_step = (comm - hidden) / steps;
        out->overlap = comm > 0 ? hidden / comm : 0;
        out->comm_bound = out->exposed_comm_ns_per_step > out->device_ns_per_step - out->comm_ns_per_step;
    }
    return LF_OK;
}

/* A trace with no device work at all (a CPU-only PyTorch trace) has no bound to name: the
 * device neither waited nor worked, so "overhead-bound" would point at launches that never were. */
static const char *verdict(const lf_trace_summary *s)
{
    if (s->device_events == 0 && !s->has_comm)
        return "no-device-work";
    return s->has_comm && s->comm_bound ? "comm-bound" : s->compute_bound ? "compute-bound" : "overhead-bound";
}

void lf_trace_summary_line(const lf_trace_summary *s, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "kernels/step=%g", s->kernels_per_step);
    if (s->graph_kernels_per_step > 0 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " graph_kernels/step=%g", s->graph_kernels_per_step);
    if (s->graph_kernels_per_step > 0 && (s->graph_ranged > 0 || s->graph_framed > 0) && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " graph_ranged=%.0f%% graph_framed=%.0f%%", 100 * s->graph_ranged,
                      100 * s->graph_framed);
    if (n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " cpu_ops/step=%g device_busy=%.0f%%", s->cpu_ops_per_step,
                      100.0 * s->device_busy);
    if (s->has_comm && n > 0 && (size_t)n < cap) {
        char a[32], b[32];
        n += snprintf(buf + n, cap - (size_t)n, " comm/step=%s exposed_comm/step=%s overlap=%.0f%%",
                      lf_fmt_time(a, sizeof a, s->comm_ns_per_step),
                      lf_fmt_time(b, sizeof b, s->exposed_comm_ns_per_step), 100.0 * s->overlap);
    }
    if (n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " verdict=%s", verdict(s));
}

lf_status lf_trace_summary_format(const lf_trace *t, int64_t rank, int json, char **text)
{
    LF_CHECK_PTR(t, "lf_trace_summary_format", "t");
    LF_CHECK_PTR(text, "lf_trace_summary_format", "text");
    *text = NULL;
    lf_trace_summary s;
    LF_TRY(lf_trace_summarize(t, &s));
    lf_trace_trust tr;
    LF_TRY(lf_trace_trust_count(t, &tr));
    char trust[640];
    lf_sbuf b = {0};
    if (json) {
        lf_sbuf_printf(&b, "{");
        if (rank >= 0)
            lf_sbuf_printf(&b, "\"rank\": %lld, ", (long long)rank);
        lf_sbuf_printf(&b,
                       "\"steps\": %lld, \"kernels_per_step\": %g, \"graph_kernels_per_step\": %g, "
                       "\"cpu_ops_per_step\": %g, \"device_busy\": %.4f, \"step_us\": %.3f, "
                       "\"device_us_per_step\": %.3f, \"device_events\": %lld, \"events\": %lld",
                       (long long)s.steps, s.kernels_per_step, s.graph_kernels_per_step, s.cpu_ops_per_step,
                       s.device_busy, s.step_ns / 1e3, s.device_ns_per_step / 1e3, (long long)s.device_events,
                       (long long)lf_trace_count(t));
        if (s.graph_kernels_per_step > 0)
            lf_sbuf_printf(&b, ", \"graph_ranged\": %.4f, \"graph_framed\": %.4f", s.graph_ranged, s.graph_framed);
        if (s.has_comm)
            lf_sbuf_printf(&b, ", \"comm_us_per_step\": %.3f, \"exposed_comm_us_per_step\": %.3f, \"overlap\": %.4f",
                           s.comm_ns_per_step / 1e3, s.exposed_comm_ns_per_step / 1e3, s.overlap);
        lf_trace_trust_json(&tr, trust, sizeof trust);
        lf_sbuf_printf(&b, ", \"verdict\": \"%s\", \"trust\": %s}", verdict(&s), trust);
    } else {
        char line[360], who[32] = "";
        if (rank >= 0)
            snprintf(who, sizeof who, "rank=%lld ", (long long)rank);
        lf_trace_summary_line(&s, line, sizeof line);
        lf_sbuf_printf(&b, "%s%s\n%ssteps=%lld step_time=%.3fus device_time/step=%.3fus events=%lld\n", who, line, who,
                       (long long)s.steps, s.step_ns / 1e3, s.device_ns_per_step / 1e3, (long long)lf_trace_count(t));
        lf_trace_trust_line(&tr, trust, sizeof trust);
        if (trust[0])
            lf_sbuf_printf(&b, "%s%s\n", who, trust);
    }
    if (b.oom) {
        free(b.p);
        return lf_fail(LF_ENOMEM, "lf_trace_summary_format: out of memory");
    }
    *text = b.p;
    return LF_OK;
}
