/* The questions people bring to HTA, answered from any Kineto-schema trace: per step and GPU,
 * how the device's time splits into compute, communication, memory and idle (and why idle);
 * each kernel's duration distribution; how launches keep up; what each CUDA graph replay ran.
 * Its text and JSON are breakdown_format.c's. Layer: trace/. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"

enum { K_COMPUTE, K_COMM, K_MEMORY };

static int is_work(const lf_trace_event *e)
{
    return (e->cat == LF_TC_KERNEL || e->cat == LF_TC_MEMCPY || e->cat == LF_TC_MEMSET) && e->dur_ns >= 0;
}

static int kind_of(const lf_trace_event *e)
{
    if (e->cat != LF_TC_KERNEL)
        return K_MEMORY;
    return strncmp(e->name, "nccl", 4) ? K_COMPUTE : K_COMM; /* NCCL's kernels, as the summary counts them */
}

static int is_graph_launch(const lf_trace_event *e)
{
    return (e->cat == LF_TC_RUNTIME || e->cat == LF_TC_DRIVER) && !strncmp(e->name, "cudaGraphLaunch", 15);
}

/* numpy's default percentile: linear between the two nearest ranks of sorted v. */
static double quantile(const double *v, int64_t n, double q)
{
    if (n == 0)
        return 0;
    double pos = q * (double)(n - 1);
    int64_t lo = (int64_t)floor(pos);
    return lo + 1 < n ? v[lo] + (v[lo + 1] - v[lo]) * (pos - (double)lo) : v[n - 1];
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One piece of device work, placed. */
typedef struct work {
    int64_t step, dev, lo, hi, when;
    int kind, graph;
} work;

static int by_step_dev_lo(const void *a, const void *b)
{
    const work *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* A boundary of the sweep: a piece of work starting (+1) or ending (-1) at time. */
typedef struct edge {
    int64_t time, when;
    int delta, kind;
} edge;

static int by_time(const void *a, const void *b)
{
    const edge *x = a, *y = b;
    return (x->time > y->time) - (x->time < y->time);
}

/* The window of one step on one GPU, its busy time by kind and its idle time by cause. */
static void sweep(const work *w, int64_t n, edge *e, lf_breakdown_step *out)
{
    int64_t lo = w[0].lo, hi = w[0].hi, m = 0;
    for (int64_t i = 0; i < n; i++) {
        lo = w[i].lo < lo ? w[i].lo : lo;
        hi = w[i].hi > hi ? w[i].hi : hi;
        e[m++] = (edge){w[i].lo, w[i].when, +1, w[i].kind};
        e[m++] = (edge){w[i].hi, w[i].when, -1, w[i].kind};
        if (w[i].kind == K_COMM)
            out->comm_total_us += (double)(w[i].hi - w[i].lo) / 1e3;
        out->kernels += w[i].kind != K_MEMORY;
        out->graph_kernels += w[i].graph && w[i].kind != K_MEMORY;
    }
    qsort(e, (size_t)m, sizeof *e, by_time);
    out->window_us = (double)(hi - lo) / 1e3;
    int64_t live[3] = {0, 0, 0}, prev = lo;
    for (int64_t i = 0; i < m;) {
        const int64_t t = e[i].time;
        int64_t j = i, first_launch = INT64_MAX;
        for (; j < m && e[j].time == t; j++)
            if (e[j].delta > 0 && e[j].when < first_launch)
                first_launch = e[j].when;
        const double span = (double)(t - prev) / 1e3;
        if (t > prev) {
            if (live[K_COMPUTE] && live[K_COMM])
                out->comm_hidden_us += span;
            if (live[K_COMPUTE])
                out->compute_us += span;
            else if (live[K_COMM])
                out->comm_us += span;
            else if (live[K_MEMORY])
                out->memory_us += span;
            else if (first_launch >= prev) /* nothing was queued when the GPU ran dry */
                out->idle_host_us += span;
            else
                out->idle_other_us += span;
        }
        for (; i < j; i++)
            live[e[i].kind] += e[i].delta;
        prev = t;
    }
    out->idle_us = out->idle_host_us + out->idle_other_us;
}

typedef struct corr {
    int64_t id, idx;
} corr;

static int by_id(const void *a, const void *b)
{
    int64_t x = ((const corr *)a)->id, y = ((const corr *)b)->id;
    return (x > y) - (x < y);
}

static int64_t find_corr(const corr *c, int64_t n, int64_t id)
{
    corr key = {id, 0};
    const corr *f = id ? bsearch(&key, c, (size_t)n, sizeof *c, by_id) : NULL;
    return f ? f->idx : -1;
}

static int by_total(const void *a, const void *b)
{
    double x = ((const lf_kernel_stats *)a)->total_us, y = ((const lf_kernel_stats *)b)->total_us;
    return (x < y) - (x > y);
}

/* The op (or else range) of each External id, for the graph launches that carry one. */
static int64_t op_of(const corr *ops, int64_t n_ops, const corr *ranges, int64_t n_ranges, int64_t ext)
{
    int64_t i = find_corr(ops, n_ops, ext);
    return i >= 0 ? i : find_corr(ranges, n_ranges, ext);
}

static lf_status graph_replays(const lf_trace *t, const corr *calls, int64_t n_calls, lf_breakdown *out)
{
    const int64_t n = t->n;
    corr *ops = malloc((size_t)(n + 1) * sizeof *ops), *ranges = malloc((size_t)(n + 1) * sizeof *ranges);
    int64_t *group = malloc((size_t)(n + 1) * sizeof *group), n_ops = 0, n_ranges = 0, n_launches = 0;
    lf_strmap by_op = {0};
    lf_status st = LF_OK;
    if (!ops || !ranges || !group || !lf_strmap_init(&by_op, 64)) {
        st = lf_fail(LF_ENOMEM, "lf_trace_breakdown: out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) { /* External ids are one op's each (Kineto's), so any match is the op */
        const lf_trace_event *ev = &t->ev[i];
        if (ev->ext_id && ev->cat == LF_TC_CPU_OP)
            ops[n_ops++] = (corr){ev->ext_id, i};
        else if (ev->ext_id && ev->cat == LF_TC_USER_ANNOTATION)
            ranges[n_ranges++] = (corr){ev->ext_id, i};
        n_launches += is_graph_launch(ev);
    }
    qsort(ops, (size_t)n_ops, sizeof *ops, by_id);
    qsort(ranges, (size_t)n_ranges, sizeof *ranges, by_id);
    out->graphs = calloc((size_t)(n_launches + 1), sizeof *out->graphs);
    if (!out->graphs) {
        st = lf_fail(LF_ENOMEM, "lf_trace_breakdown: out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        const lf_trace_event *ev = &t->ev[i];
        group[i] = -1;
        if (!is_graph_launch(ev))
            continue;
        const int64_t o = ev->ext_id ? op_of(ops, n_ops, ranges, n_ranges, ev->ext_id) : -1;
        const char *op = o >= 0 ? t->ev[o].name : "(no op)";
        lf_strmap_entry *g = lf_strmap_get(&by_op, op, 0);
        if (!g) {
            st = lf_fail(LF_ENOMEM, "lf_trace_breakdown: out of memory");
            goto done;
        }
        if (g->val < 0) {
            g->val = out->n_graphs++;
            out->graphs[g->val].op = op;
        }
        out->graphs[g->val].launches++;
        group[i] = g->val;
    }
    for (int64_t i = 0; i < n && out->n_graphs; i++) { /* each replayed piece of work, to its launch's op */
        const lf_trace_event *d = &t->ev[i];
        const int64_t c = is_work(d) ? find_corr(calls, n_calls, d->correlation) : -1;
        if (c >= 0 && group[c] >= 0) {
            out->graphs[group[c]].kernels += d->cat == LF_TC_KERNEL;
            out->graphs[group[c]].device_us += (double)d->dur_ns / 1e3;
        }
    }
done:
    free(ops), free(ranges), free(group);
    lf_strmap_free(&by_op);
    return st;
}

/* What the breakdown works from: the steps (by start, with their numbers), the launch calls (by
 * correlation), the device work placed in steps, and scratch for the sweep and the durations. */
typedef struct census {
    const lf_trace *t;
    int64_t n;
    int64_t *when; /* each event's launch time (lf_trace_launch_times) */
    lf_span *steps;
    int64_t *step_no, n_steps;
    corr *calls;
    int64_t n_calls;
    work *w;
    int64_t nw;
    edge *e;     /* (2 nw) */
    double *dur; /* (nw) */
    double *delays;
    int64_t n_delays;
    int64_t *order;
    lf_strmap names; /* work by name: its index in out->kernels */
} census;

static lf_status oom(void)
{
    return lf_fail(LF_ENOMEM, "lf_trace_breakdown: out of memory");
}

static void census_free(census *c)
{
    free(c->when), free(c->steps), free(c->step_no), free(c->calls), free(c->w), free(c->e), free(c->dur);
    free(c->delays), free(c->order);
    lf_strmap_free(&c->names);
}

static lf_status census_init(census *c, const lf_trace *t)
{
    const int64_t n = t->n;
    *c = (census){.t = t, .n = n};
    c->when = lf_trace_launch_times(t);
    c->steps = malloc((size_t)(n + 1) * sizeof *c->steps);
    c->step_no = malloc((size_t)(n + 1) * sizeof *c->step_no);
    c->calls = malloc((size_t)(n + 1) * sizeof *c->calls);
    c->w = malloc((size_t)(n + 1) * sizeof *c->w);
    c->e = malloc((size_t)(2 * n + 2) * sizeof *c->e);
    c->dur = malloc((size_t)(n + 1) * sizeof *c->dur);
    c->delays = malloc((size_t)(n + 1) * sizeof *c->delays);
    c->order = malloc((size_t)(n + 1) * sizeof *c->order);
    if (!c->when || !c->steps || !c->step_no || !c->calls || !c->w || !c->e || !c->dur || !c->delays || !c->order ||
        !lf_strmap_init(&c->names, n))
        return lf_fail(LF_ENOMEM, "lf_trace_breakdown: out of memory for %lld events", (long long)n);
    return LF_OK;
}

typedef struct numbered_step {
    lf_span s;
    int64_t no, at; /* its number; its place in the trace, so equal starts keep the trace's order */
} numbered_step;

static int by_start(const void *a, const void *b)
{
    const numbered_step *x = a, *y = b;
    return x->s.lo != y->s.lo ? (x->s.lo > y->s.lo) - (x->s.lo < y->s.lo) : (x->at > y->at) - (x->at < y->at);
}

/* The steps, sorted by start, with their numbers (n log n: a trace's steps written in reverse,
 * 200,000 of them, took 140 s to insertion-sort); launch calls by correlation. */
static lf_status find_steps_and_calls(census *c)
{
    for (int64_t i = 0; i < c->n; i++) {
        const lf_trace_event *ev = &c->t->ev[i];
        if (lf_trace_is_step(ev)) {
            c->steps[c->n_steps] = (lf_span){ev->ts_ns, ev->ts_ns + ev->dur_ns};
            c->step_no[c->n_steps++] = strtoll(ev->name + 13, NULL, 10);
        }
        if ((ev->cat == LF_TC_RUNTIME || ev->cat == LF_TC_DRIVER) && ev->correlation)
            c->calls[c->n_calls++] = (corr){ev->correlation, i};
    }
    numbered_step *ns = malloc((size_t)(c->n_steps + 1) * sizeof *ns);
    if (!ns)
        return lf_fail(LF_ENOMEM, "lf_trace_breakdown: out of memory for %lld steps", (long long)c->n_steps);
    for (int64_t a = 0; a < c->n_steps; a++)
        ns[a] = (numbered_step){c->steps[a], c->step_no[a], a};
    qsort(ns, (size_t)c->n_steps, sizeof *ns, by_start);
    for (int64_t a = 0; a < c->n_steps; a++)
        c->steps[a] = ns[a].s, c->step_no[a] = ns[a].no;
    free(ns);
    qsort(c->calls, (size_t)c->n_calls, sizeof *c->calls, by_id);
    return LF_OK;
}

/* The step event i was launched in (the last to start at or before its launch), 0 for a trace
 * without steps, -1 when it was launched outside every step. */
static int64_t step_of(const census *c, int64_t i)
{
    if (!c->n_steps)
        return 0;
    int64_t a = 0, b = c->n_steps;
    while (a < b) {
        int64_t mid = (a + b) / 2;
        if (c->steps[mid].lo <= c->when[i])
            a = mid + 1;
        else
            b = mid;
    }
    return a == 0 || c->when[i] > c->steps[a - 1].hi ? -1 : a - 1;
}

/* Device work: its step by launch, its GPU, its kind, its name's index; how launches kept up. */
static lf_status place_work(census *c, lf_breakdown *out)
{
    const lf_trace *t = c->t;
    for (int64_t i = 0; i < c->n; i++) {
        const lf_trace_event *ev = &t->ev[i];
        if (!is_work(ev))
            continue;
        const int64_t s = step_of(c, i);
        if (s < 0)
            continue;
        const int64_t k = find_corr(c->calls, c->n_calls, ev->correlation);
        const int graph = k >= 0 && is_graph_launch(&t->ev[k]);
        c->w[c->nw++] = (work){
            s,    ev->device >= 0 ? ev->device : ev->pid, ev->ts_ns, ev->ts_ns + ev->dur_ns, c->when[i], kind_of(ev),
            graph};
        lf_strmap_entry *name = lf_strmap_get(&c->names, ev->name, 0);
        if (!name)
            return oom();
        if (name->val < 0)
            name->val = out->n_kernels++;
        if (ev->cat == LF_TC_KERNEL && k >= 0 && !graph) {
            const lf_trace_event *call = &t->ev[k];
            out->launched++;
            out->short_kernels += ev->dur_ns < call->dur_ns;
            out->slow_calls += (double)call->dur_ns / 1e3 > out->runtime_cutoff_us;
            c->delays[c->n_delays] = (double)(ev->ts_ns - call->ts_ns) / 1e3;
            out->late_kernels += c->delays[c->n_delays] > out->delay_cutoff_us;
            c->n_delays++;
        }
    }
    if (c->n_delays) {
        qsort(c->delays, (size_t)c->n_delays, sizeof *c->delays, by_double);
        out->delay_median_us = quantile(c->delays, c->n_delays, 0.5);
        out->delay_p90_us = quantile(c->delays, c->n_delays, 0.9);
        out->delay_max_us = c->delays[c->n_delays - 1];
    }
    return LF_OK;
}

/* Steps x GPUs: each group of work swept. */
static lf_status sweep_steps(census *c, lf_breakdown *out)
{
    work *w = c->w;
    const int64_t nw = c->nw;
    qsort(w, (size_t)nw, sizeof *w, by_step_dev_lo);
    int64_t groups = 0;
    for (int64_t i = 0; i < nw; i++)
        groups += i == 0 || w[i].step != w[i - 1].step || w[i].dev != w[i - 1].dev;
    if (!(out->steps = calloc((size_t)(groups + 1), sizeof *out->steps)))
        return oom();
    for (int64_t i = 0; i < nw;) {
        int64_t j = i;
        while (j < nw && w[j].step == w[i].step && w[j].dev == w[i].dev)
            j++;
        lf_breakdown_step *o = &out->steps[out->n_steps++];
        o->step = c->n_steps ? c->step_no[w[i].step] : -1;
        o->device = w[i].dev;
        sweep(w + i, j - i, c->e, o);
        i = j;
    }
    return LF_OK;
}

/* Each name's durations, sorted (the events by name, then by duration), and their statistics;
 * the names by total time. */
static lf_status kernel_stats(census *c, lf_breakdown *out)
{
    const lf_trace *t = c->t;
    if (!(out->kernels = calloc((size_t)(out->n_kernels + 1), sizeof *out->kernels)))
        return oom();
    int64_t m = 0;
    for (int64_t i = 0; i < c->n; i++)
        if (is_work(&t->ev[i]) && lf_strmap_find(&c->names, t->ev[i].name, 0))
            c->order[m++] = i;
    for (int64_t i = 0; i < m; i++) {
        const lf_trace_event *ev = &t->ev[c->order[i]];
        lf_kernel_stats *k = &out->kernels[lf_strmap_find(&c->names, ev->name, 0)->val];
        k->name = ev->name;
        k->count++;
    }
    /* a slot per event, grouped by name: prefix sums of the counts */
    int64_t *start = calloc((size_t)(out->n_kernels + 1), sizeof *start);
    if (!start)
        return oom();
    for (int64_t k = 1; k <= out->n_kernels; k++)
        start[k] = start[k - 1] + out->kernels[k - 1].count;
    for (int64_t i = 0; i < m; i++) {
        const lf_trace_event *ev = &t->ev[c->order[i]];
        int64_t k = lf_strmap_find(&c->names, ev->name, 0)->val;
        c->dur[start[k]++] = (double)ev->dur_ns / 1e3;
    }
    for (int64_t k = 0, at = 0; k < out->n_kernels; k++) {
        lf_kernel_stats *ks = &out->kernels[k];
        double *v = c->dur + at;
        qsort(v, (size_t)ks->count, sizeof *v, by_double);
        for (int64_t q = 0; q < ks->count; q++)
            ks->total_us += v[q];
        ks->min_us = v[0], ks->max_us = v[ks->count - 1];
        ks->median_us = quantile(v, ks->count, 0.5), ks->p90_us = quantile(v, ks->count, 0.9);
        at += ks->count;
    }
    free(start);
    qsort(out->kernels, (size_t)out->n_kernels, sizeof *out->kernels, by_total);
    return LF_OK;
}

lf_status lf_trace_breakdown(const lf_trace *t, lf_breakdown *out)
{
    LF_CHECK_PTR(t, "lf_trace_breakdown", "t");
    LF_CHECK_PTR(out, "lf_trace_breakdown", "out");
    memset(out, 0, sizeof *out);
    LF_TRY(lf_trace_one_process(t, "lf_trace_breakdown"));
    out->runtime_cutoff_us = 50, out->delay_cutoff_us = 100;
    census c;
    lf_status st = census_init(&c, t);
    if (st == LF_OK)
        st = find_steps_and_calls(&c);
    if (st == LF_OK)
        st = place_work(&c, out);
    if (st == LF_OK)
        st = sweep_steps(&c, out);
    if (st == LF_OK)
        st = kernel_stats(&c, out);
    if (st == LF_OK) /* graph replays: each launch's kernels, by the op whose External id the launch carries */
        st = graph_replays(t, c.calls, c.n_calls, out);
    if (st == LF_OK)
        st = lf_trace_trust_count(t, &out->trust);
    census_free(&c);
    if (st != LF_OK)
        lf_breakdown_free(out);
    return st;
}

void lf_breakdown_free(lf_breakdown *b)
{
    if (!b)
        return;
    free(b->steps), free(b->kernels), free(b->graphs);
    b->steps = NULL, b->kernels = NULL, b->graphs = NULL;
    b->n_steps = b->n_kernels = b->n_graphs = 0;
}
