/* Which events are rows of the table, the orders it sorts them in, and the Python frames that
 * hold each op (for --group-by-stack). Layer: trace/. */
#define _GNU_SOURCE /* qsort_r */
#include <stdlib.h>
#include <string.h>

#include "trace/table_impl.h"

/* --- which events are rows, and in which order --- */

int lf_tab_is_tabled(const lf_trace_event *e)
{
    switch (e->cat) {
    case LF_TC_CPU_OP:
    case LF_TC_USER_ANNOTATION:
    case LF_TC_RUNTIME:
    case LF_TC_DRIVER:
    case LF_TC_KERNEL:
    case LF_TC_MEMCPY:
    case LF_TC_MEMSET:
    case LF_TC_GPU_ANNOTATION:
        break;
    default:
        return 0; /* memory instants, python frames, profiler overhead, "Trace" spans */
    }
    if (e->dur_ns < 0)
        return 0;
    const char *n = e->name;
    return strcmp(n, "[memory]") && strcmp(n, "[OutOfMemory]") && strncmp(n, "profiler::_record_function_", 27) &&
           strcmp(n, "aten::is_leaf") && strcmp(n, "aten::output_nr") && strcmp(n, "aten::_version");
}

/* c10d's work spans ("nccl:all_reduce", on the thread that queued the collective) are async
 * in PyTorch: they may end on another thread, so they are no part of the op tree (no parent, no
 * children), count no self CPU time, and print "0" as their CPU total %. */
int lf_tab_is_async(const lf_trace_event *e)
{
    static const char *const backends[] = {"nccl:", "gloo:", "mpi:", "ucc:", "xccl:"};
    if (e->cat != LF_TC_USER_ANNOTATION)
        return 0;
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (!strncmp(e->name, backends[i], strlen(backends[i])))
            return 1;
    return 0;
}

/* Rows appear in order of their first event's start; at equal starts, ops and annotations come
 * before runtime calls, device work, then device annotations (the order PyTorch lists them). */
static int order_class(lf_trace_cat c)
{
    switch (c) {
    case LF_TC_RUNTIME:
    case LF_TC_DRIVER:
        return 1;
    case LF_TC_KERNEL:
    case LF_TC_MEMCPY:
    case LF_TC_MEMSET:
        return 2;
    case LF_TC_GPU_ANNOTATION:
        return 3;
    default:
        return 0;
    }
}

/* Orders over event indices; qsort_r carries the trace, so builds on several threads are safe. */
int lf_tab_by_time(const void *pa, const void *pb, void *ctx)
{
    const lf_trace *t = ctx;
    const lf_trace_event *a = &t->ev[*(const int64_t *)pa], *b = &t->ev[*(const int64_t *)pb];
    if (a->ts_ns != b->ts_ns)
        return a->ts_ns < b->ts_ns ? -1 : 1;
    if (a->dur_ns != b->dur_ns)
        return a->dur_ns > b->dur_ns ? -1 : 1; /* the enclosing (longer) event first */
    return *(const int64_t *)pa < *(const int64_t *)pb ? -1 : 1;
}

int lf_tab_by_track_time(const void *pa, const void *pb, void *ctx)
{
    const lf_trace *t = ctx;
    const lf_trace_event *a = &t->ev[*(const int64_t *)pa], *b = &t->ev[*(const int64_t *)pb];
    if (a->pid != b->pid)
        return a->pid < b->pid ? -1 : 1;
    if (a->tid != b->tid)
        return a->tid < b->tid ? -1 : 1;
    return lf_tab_by_time(pa, pb, ctx);
}

int lf_tab_by_time_class(const void *pa, const void *pb, void *ctx)
{
    const lf_trace *t = ctx;
    const lf_trace_event *a = &t->ev[*(const int64_t *)pa], *b = &t->ev[*(const int64_t *)pb];
    if (a->ts_ns != b->ts_ns)
        return a->ts_ns < b->ts_ns ? -1 : 1;
    if (a->dur_ns != b->dur_ns)
        return a->dur_ns > b->dur_ns ? -1 : 1;
    int ca = order_class(a->cat), cb = order_class(b->cat);
    if (ca != cb)
        return ca < cb ? -1 : 1;
    return *(const int64_t *)pa < *(const int64_t *)pb ? -1 : 1;
}

/* A Python frame the stack column shows: PyTorch's with_stack stacks hold source lines
 * ("model.py(42): forward"), never built-ins ("<built-in function linear>"). */
static int is_source_frame(const lf_trace_event *e)
{
    return e->cat == LF_TC_PYTHON && e->dur_ns >= 0 && strncmp(e->name, "<built-in", 9);
}

/* For each host event, its depth innermost enclosing Python frames on its thread: frames[i *
 * depth + k], nf[i] of them. The stack of enclosing events keeps, at each level, the level of the
 * nearest Python frame at or below it (py), so an event finds its frames in depth steps however
 * many ops enclose it (a walk down the whole stack took 98 s for 200,000 nested ops). */
/* The events with no enclosing Python frames that carry a stack of their own: its lines, copied
 * into one text (*text, the caller's to free). */
static lf_status own_stacks(const lf_trace *t, int depth, const char **frames, unsigned char *nf, char **text)
{
    size_t need = 0;
    for (int64_t i = 0; i < t->n; i++)
        need += t->ev[i].stack && !nf[i] ? strlen(t->ev[i].stack) + 1 : 0;
    if (!need)
        return LF_OK;
    char *w = *text = malloc(need);
    if (!w)
        return lf_fail(LF_ENOMEM, "lf_table_build: out of memory for %lld events", (long long)t->n);
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (!e->stack || nf[i])
            continue;
        const size_t len = strlen(e->stack) + 1;
        memcpy(w, e->stack, len);
        int k = 0;
        for (char *line = w, *nl; line && k < depth; line = nl ? nl + 1 : NULL) {
            if ((nl = strchr(line, '\n')))
                *nl = '\0';
            frames[i * depth + k++] = line;
        }
        nf[i] = (unsigned char)k;
        w += len;
    }
    return LF_OK;
}

lf_status lf_tab_python_stacks(const lf_trace *t, int depth, const char **frames, unsigned char *nf, char **text)
{
    const int64_t n = t->n;
    int64_t *idx = malloc((size_t)(n + 1) * sizeof *idx), *stack = malloc((size_t)(n + 1) * sizeof *stack),
            *py = malloc((size_t)(n + 1) * sizeof *py);
    if (!idx || !stack || !py) {
        free(idx), free(stack), free(py);
        return lf_fail(LF_ENOMEM, "lf_table_build: out of memory for %lld events", (long long)n);
    }
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (is_source_frame(e) || (lf_tab_is_tabled(e) && !lf_trace_cat_is_device(e->cat) && !lf_tab_is_async(e)))
            idx[m++] = i;
    }
    qsort_r(idx, (size_t)m, sizeof *idx, lf_tab_by_track_time, (void *)t);
    int64_t top = 0;
    for (int64_t k = 0; k < m; k++) {
        const lf_trace_event *e = &t->ev[idx[k]];
        if (k > 0 && (e->pid != t->ev[idx[k - 1]].pid || e->tid != t->ev[idx[k - 1]].tid))
            top = 0;
        while (top > 0) {
            const lf_trace_event *o = &t->ev[stack[top - 1]];
            if (e->ts_ns >= o->ts_ns && e->ts_ns + e->dur_ns <= o->ts_ns + o->dur_ns)
                break;
            top--;
        }
        if (e->cat != LF_TC_PYTHON) {
            int got = 0;
            int64_t j = top > 0 ? py[top - 1] : -1; /* the nearest Python frame, then the next below */
            while (j >= 0 && got < depth) {
                frames[idx[k] * depth + got++] = t->ev[stack[j]].name;
                j = j > 0 ? py[j - 1] : -1;
            }
            nf[idx[k]] = (unsigned char)got;
        }
        py[top] = e->cat == LF_TC_PYTHON ? top : top > 0 ? py[top - 1] : -1;
        stack[top++] = idx[k];
    }
    free(idx), free(stack), free(py);
    return own_stacks(t, depth, frames, nf, text);
}
