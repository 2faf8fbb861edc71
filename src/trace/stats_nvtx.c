/* nsys stats' NVTX reports over a Kineto trace: the host ranges (Kineto's user_annotation events:
 * NVTX ranges in linfuse profile's traces, record_function ranges and steps in PyTorch's) summed
 * by name, and each range projected onto the GPU: the span from the first to the last device work
 * launched inside it, on its thread (the launching call inside the range, found by correlation),
 * as nsys projects them. Kineto keeps no range style: every range is said to be PushPop (docs).
 * Layer: trace/. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "trace/stats_table.h"

/* A range's name as nsys gives it: "domain:message", ":message" in the default domain. */
static const char *range_name(stats_table *t, const lf_trace_event *e)
{
    json_t *args = e->extra_args && strstr(e->extra_args, "\"domain\"") ? stats_args(e) : NULL;
    const char *domain = json_string_value(json_object_get(args, "domain"));
    const size_t n = strlen(e->name) + (domain ? strlen(domain) : 0) + 2;
    char *s = malloc(n);
    const char *kept = "";
    if (s) {
        snprintf(s, n, "%s:%s", domain ? domain : "", e->name);
        kept = stats_table_str(t, s);
        free(s);
    }
    json_decref(args);
    return kept;
}

static int is_range(const lf_trace_event *e)
{
    return e->cat == LF_TC_USER_ANNOTATION && e->dur_ns >= 0;
}

static int by_total(const stats_cell *a, const stats_cell *b)
{
    if (a[1].v != b[1].v)
        return a[1].v > b[1].v ? -1 : 1;
    return strcmp(a[9].s, b[9].s);
}

/* Groups of names, as indices: a name's group, added when new (-1 when out of memory). */
static int64_t group_of(lf_strmap *m, const char **names, int64_t *n, const char *name)
{
    lf_strmap_entry *ent = lf_strmap_get(m, name, 0);
    if (!ent)
        return -1;
    if (ent->val < 0)
        names[ent->val = (*n)++] = ent->key;
    return ent->val;
}

lf_status stats_nvtx_sum(const lf_trace *tr, stats_table *t)
{
    static const stats_col cols[] = {{"Time (%)", SC_DEC1}, {"Total Time (ns)", SC_INT}, {"Instances", SC_INT},
                                     {"Avg (ns)", SC_DEC1}, {"Med (ns)", SC_DEC1},       {"Min (ns)", SC_INT},
                                     {"Max (ns)", SC_INT},  {"StdDev (ns)", SC_DEC1},    {"Style", SC_TEXT},
                                     {"Range", SC_TEXT}};
    stats_table_init(t, cols, 10);
    lf_strmap m;
    const char **names = malloc((size_t)(tr->n + 1) * sizeof *names);
    if (!names || !lf_strmap_init(&m, 64)) {
        free(names);
        return lf_fail(LF_ENOMEM, "trace stats: out of memory");
    }
    stats_groups g = {0};
    int64_t n = 0;
    for (int64_t i = 0; i < tr->n && !g.oom; i++)
        if (is_range(&tr->ev[i])) {
            const int64_t k = group_of(&m, names, &n, range_name(t, &tr->ev[i]));
            if (k < 0)
                g.oom = 1;
            stats_groups_add(&g, k, (double)tr->ev[i].dur_ns);
        }
    stats_groups_done(&g);
    double all = 0;
    for (int64_t i = 0; i < g.n; i++)
        all += g.items[i].v;
    int64_t id;
    stats_sum s;
    while (stats_groups_next(&g, &id, &s)) {
        stats_cell *r = stats_table_row(t);
        if (!r)
            break;
        const double v[] = {all > 0 ? 100.0 * s.total / all : 0, s.total, (double)s.n, s.avg, s.med, s.min, s.max,
                            s.sd};
        for (int c = 0; c < 8; c++)
            r[c] = (stats_cell){.v = v[c]};
        r[8] = (stats_cell){.s = "PushPop"}, r[9] = (stats_cell){.s = names[id]};
    }
    const int oom = g.oom || t->oom;
    stats_groups_free(&g), lf_strmap_free(&m), free(names);
    if (oom)
        return lf_fail(LF_ENOMEM, "trace stats: out of memory");
    stats_table_sort(t, by_total);
    return LF_OK;
}

/* --- ranges projected onto the GPU --- */

typedef struct call_work {
    int64_t pid, tid, lo, hi; /* the launching call */
    int64_t first, last;      /* its device work's earliest start and latest end */
} call_work;

typedef struct range_inst {
    int64_t pid, tid, lo, hi, group, parent;
    int64_t ops, first, last, depth, children;
} range_inst;

static int by_thread_lo(const void *a, const void *b)
{
    const call_work *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static int by_thread_lo_long_first(const void *a, const void *b)
{
    const range_inst *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return (x->hi < y->hi) - (x->hi > y->hi);
}

/* The calls that launched device work, each with its work's span (one per correlation id). */
static call_work *calls_with_work(const lf_trace *tr, int64_t *n_out)
{
    lf_imap at = {0};
    call_work *c = malloc((size_t)(tr->n + 1) * sizeof *c);
    if (!c || !lf_imap_init(&at, tr->n + 1)) {
        free(c), free(at.keys), free(at.vals);
        return NULL;
    }
    int64_t n = 0;
    for (int64_t i = 0; i < tr->n; i++) {
        const lf_trace_event *e = &tr->ev[i];
        if ((e->cat == LF_TC_RUNTIME || e->cat == LF_TC_DRIVER) && e->correlation)
            *lf_imap_slot(&at, stats_corr_key(tr, e)) = -(i + 2); /* a call not yet with work */
    }
    for (int64_t i = 0; i < tr->n; i++) {
        const lf_trace_event *e = &tr->ev[i];
        if ((e->cat != LF_TC_KERNEL && e->cat != LF_TC_MEMCPY && e->cat != LF_TC_MEMSET) || !e->correlation ||
            e->dur_ns < 0)
            continue;
        int64_t *slot = lf_imap_slot(&at, stats_corr_key(tr, e));
        if (*slot == -1)
            continue; /* no launching call in the trace */
        if (*slot < -1) {
            const lf_trace_event *a = &tr->ev[-*slot - 2];
            c[n] = (call_work){a->pid, a->tid, a->ts_ns, a->ts_ns + a->dur_ns, e->ts_ns, e->ts_ns + e->dur_ns};
            *slot = n++;
        } else {
            call_work *w = &c[*slot];
            w->first = e->ts_ns < w->first ? e->ts_ns : w->first;
            w->last = e->ts_ns + e->dur_ns > w->last ? e->ts_ns + e->dur_ns : w->last;
        }
    }
    free(at.keys), free(at.vals);
    qsort(c, (size_t)n, sizeof *c, by_thread_lo);
    *n_out = n;
    return c;
}

/* Each range's GPU work: the calls on its thread inside it (binary search by start), and its
 * nesting: depth below the outermost range on the thread, its parent the tightest range around it. */
static void project(range_inst *r, int64_t nr, const call_work *c, int64_t nc, int64_t *stack)
{
    for (int64_t i = 0; i < nr; i++) {
        int64_t a = 0, b = nc;
        while (a < b) { /* the first call on r's thread at or after its start */
            const int64_t mid = (a + b) / 2;
            const call_work *x = &c[mid];
            if (x->pid < r[i].pid || (x->pid == r[i].pid && (x->tid < r[i].tid || (x->tid == r[i].tid &&
                                                                                   x->lo < r[i].lo))))
                a = mid + 1;
            else
                b = mid;
        }
        r[i].first = INT64_MAX, r[i].last = INT64_MIN;
        for (int64_t j = a; j < nc && c[j].pid == r[i].pid && c[j].tid == r[i].tid && c[j].lo <= r[i].hi; j++)
            if (c[j].hi <= r[i].hi) {
                r[i].ops++;
                r[i].first = c[j].first < r[i].first ? c[j].first : r[i].first;
                r[i].last = c[j].last > r[i].last ? c[j].last : r[i].last;
            }
    }
    int64_t depth = 0;
    for (int64_t i = 0; i < nr; i++) {
        if (i && (r[i].pid != r[i - 1].pid || r[i].tid != r[i - 1].tid))
            depth = 0;
        while (depth && r[stack[depth - 1]].hi < r[i].hi)
            depth--; /* ranges that end before this one does do not hold it */
        r[i].depth = depth;
        r[i].parent = depth ? stack[depth - 1] : -1;
        stack[depth++] = i;
    }
    for (int64_t i = 0; i < nr; i++)
        if (r[i].parent >= 0 && r[i].ops)
            r[r[i].parent].children++;
}

static int by_proj_total(const stats_cell *a, const stats_cell *b)
{
    if (a[2].v != b[2].v)
        return a[2].v > b[2].v ? -1 : 1;
    return strcmp(a[0].s, b[0].s);
}

lf_status stats_nvtx_gpu_proj_sum(const lf_trace *tr, stats_table *t)
{
    static const stats_col cols[] = {
        {"Range", SC_TEXT},            {"Style", SC_TEXT},           {"Total Proj Time (ns)", SC_INT},
        {"Total Range Time (ns)", SC_INT}, {"Range Instances", SC_INT}, {"Proj Avg (ns)", SC_DEC1},
        {"Proj Med (ns)", SC_DEC1},    {"Proj Min (ns)", SC_INT},    {"Proj Max (ns)", SC_INT},
        {"Proj StdDev (ns)", SC_DEC1}, {"Total GPU Ops", SC_INT},    {"Avg GPU Ops", SC_DEC1},
        {"Avg Range Lvl", SC_DEC1},    {"Avg Num Child", SC_DEC1}};
    stats_table_init(t, cols, 14);
    int64_t nc = 0, nr = 0, ng = 0;
    call_work *c = calls_with_work(tr, &nc);
    range_inst *r = malloc((size_t)(tr->n + 1) * sizeof *r);
    int64_t *stack = malloc((size_t)(tr->n + 1) * sizeof *stack);
    const char **names = malloc((size_t)(tr->n + 1) * sizeof *names);
    lf_strmap m = {0};
    lf_status st = LF_OK;
    if (!c || !r || !stack || !names || !lf_strmap_init(&m, 64))
        st = lf_fail(LF_ENOMEM, "trace stats: out of memory");
    for (int64_t i = 0; st == LF_OK && i < tr->n; i++) {
        const lf_trace_event *e = &tr->ev[i];
        if (!is_range(e))
            continue;
        const int64_t k = group_of(&m, names, &ng, range_name(t, e));
        if (k < 0)
            st = lf_fail(LF_ENOMEM, "trace stats: out of memory");
        r[nr++] = (range_inst){.pid = e->pid, .tid = e->tid, .lo = e->ts_ns, .hi = e->ts_ns + e->dur_ns, .group = k};
    }
    if (st == LF_OK) {
        qsort(r, (size_t)nr, sizeof *r, by_thread_lo_long_first);
        project(r, nr, c, nc, stack);
    }
    stats_groups g = {0}; /* each range with work: its projection, by its name */
    double *sums = st == LF_OK ? calloc((size_t)(4 * ng + 1), sizeof *sums) : NULL; /* range time, ops, lvl, kids */
    if (st == LF_OK && !sums)
        st = lf_fail(LF_ENOMEM, "trace stats: out of memory");
    for (int64_t i = 0; st == LF_OK && i < nr; i++)
        if (r[i].ops) {
            stats_groups_add(&g, r[i].group, (double)(r[i].last - r[i].first));
            double *x = sums + 4 * r[i].group;
            x[0] += (double)(r[i].hi - r[i].lo), x[1] += (double)r[i].ops;
            x[2] += (double)r[i].depth, x[3] += (double)r[i].children;
        }
    stats_groups_done(&g);
    int64_t id;
    stats_sum s;
    while (st == LF_OK && stats_groups_next(&g, &id, &s)) {
        stats_cell *row = stats_table_row(t);
        if (!row)
            break;
        const double *x = sums + 4 * id, n = (double)s.n;
        const double v[] = {s.total, x[0], n, s.avg, s.med, s.min, s.max, s.sd, x[1], x[1] / n, x[2] / n, x[3] / n};
        row[0] = (stats_cell){.s = names[id]}, row[1] = (stats_cell){.s = "PushPop"};
        for (int k = 0; k < 12; k++)
            row[2 + k] = (stats_cell){.v = v[k]};
    }
    if (st == LF_OK && (g.oom || t->oom))
        st = lf_fail(LF_ENOMEM, "trace stats: out of memory");
    stats_groups_free(&g), lf_strmap_free(&m);
    free(c), free(r), free(stack), free(names), free(sums);
    if (st == LF_OK)
        stats_table_sort(t, by_proj_total);
    return st;
}
