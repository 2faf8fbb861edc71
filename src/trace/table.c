/* PyTorch's key_averages().table() built from any lf_trace (docs/trace_format.md, "The table"):
 * events nest per host thread (self = own time minus direct children), kernels count toward
 * the op whose External id they carry, rows group by name and device/annotation kind, and the
 * text has PyTorch's columns, widths, units and footers. Layer: trace/. */
#define _GNU_SOURCE /* qsort_r */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"

/* External ids -> event index, integer keyed. */
typedef struct imap {
    int64_t *keys, *vals;
    int64_t cap;
} imap;

static int imap_init(imap *m, int64_t n)
{
    m->cap = 16;
    while (m->cap < 2 * n + 16)
        m->cap *= 2;
    m->keys = calloc((size_t)m->cap, sizeof *m->keys);
    m->vals = malloc((size_t)m->cap * sizeof *m->vals);
    return m->keys && m->vals;
}

static int64_t *imap_slot(imap *m, int64_t key)
{
    uint64_t i = ((uint64_t)key * 0x9e3779b97f4a7c15ull) & (uint64_t)(m->cap - 1);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & (uint64_t)(m->cap - 1);
    if (!m->keys[i]) {
        m->keys[i] = key;
        m->vals[i] = -1;
    }
    return &m->vals[i];
}

/* --- which events are rows, and in which order --- */

static int is_tabled(const lf_trace_event *e)
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
static int is_async(const lf_trace_event *e)
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
static int by_time(const void *pa, const void *pb, void *ctx)
{
    const lf_trace *t = ctx;
    const lf_trace_event *a = &t->ev[*(const int64_t *)pa], *b = &t->ev[*(const int64_t *)pb];
    if (a->ts_ns != b->ts_ns)
        return a->ts_ns < b->ts_ns ? -1 : 1;
    if (a->dur_ns != b->dur_ns)
        return a->dur_ns > b->dur_ns ? -1 : 1; /* the enclosing (longer) event first */
    return *(const int64_t *)pa < *(const int64_t *)pb ? -1 : 1;
}

static int by_track_time(const void *pa, const void *pb, void *ctx)
{
    const lf_trace *t = ctx;
    const lf_trace_event *a = &t->ev[*(const int64_t *)pa], *b = &t->ev[*(const int64_t *)pb];
    if (a->pid != b->pid)
        return a->pid < b->pid ? -1 : 1;
    if (a->tid != b->tid)
        return a->tid < b->tid ? -1 : 1;
    return by_time(pa, pb, ctx);
}

static int by_time_class(const void *pa, const void *pb, void *ctx)
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

static double row_value(const lf_table_row *r, lf_sort_key key)
{
    switch (key) {
    case LF_SORT_SELF_CPU_TIME_TOTAL:
        return r->self_cpu_us;
    case LF_SORT_CPU_TIME_TOTAL:
        return r->cpu_total_us;
    case LF_SORT_SELF_DEVICE_TIME_TOTAL:
        return r->self_device_us;
    case LF_SORT_DEVICE_TIME_TOTAL:
        return r->device_total_us;
    case LF_SORT_CPU_TIME:
        return r->cpu_total_us / (double)r->count;
    case LF_SORT_DEVICE_TIME:
        return r->device_total_us / (double)r->count;
    case LF_SORT_COUNT:
        return (double)r->count;
    default:
        return 0;
    }
}

/* Stable merge sort, descending by the chosen key (PyTorch sorts with reverse=True, stable). */
static void sort_rows(lf_table_row *r, lf_table_row *tmp, int64_t n, lf_sort_key key)
{
    if (n < 2)
        return;
    int64_t h = n / 2;
    sort_rows(r, tmp, h, key);
    sort_rows(r + h, tmp, n - h, key);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = row_value(&r[j], key) > row_value(&r[i], key) ? r[j++] : r[i++];
    while (i < h)
        tmp[k++] = r[i++];
    while (j < n)
        tmp[k++] = r[j++];
    memcpy(r, tmp, (size_t)n * sizeof *r);
}

/* a + b for byte counts, stopping at the int64 range (*sat set) instead of overflowing. */
static int64_t add_sat(int64_t a, int64_t b, int *sat)
{
    int64_t r;
    if (!__builtin_add_overflow(a, b, &r))
        return r;
    *sat = 1;
    return b > 0 ? INT64_MAX : INT64_MIN;
}

/* A Python frame the stack column shows: PyTorch's with_stack stacks hold source lines
 * ("model.py(42): forward"), never built-ins ("<built-in function linear>"). */
static int is_source_frame(const lf_trace_event *e)
{
    return e->cat == LF_TC_PYTHON && e->dur_ns >= 0 && strncmp(e->name, "<built-in", 9);
}

/* For each host event, its depth innermost enclosing Python frames on its thread: frames[i *
 * depth + k], nf[i] of them. */
static lf_status python_stacks(const lf_trace *t, int depth, const char **frames, unsigned char *nf)
{
    const int64_t n = t->n;
    int64_t *idx = malloc((size_t)(n + 1) * sizeof *idx), *stack = malloc((size_t)(n + 1) * sizeof *stack);
    if (!idx || !stack) {
        free(idx), free(stack);
        return lf_fail(LF_ENOMEM, "lf_table_build: out of memory for %lld events", (long long)n);
    }
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (is_source_frame(e) || (is_tabled(e) && !lf_trace_cat_is_device(e->cat) && !is_async(e)))
            idx[m++] = i;
    }
    qsort_r(idx, (size_t)m, sizeof *idx, by_track_time, (void *)t);
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
            for (int64_t j = top - 1; j >= 0 && got < depth; j--)
                if (t->ev[stack[j]].cat == LF_TC_PYTHON)
                    frames[idx[k] * depth + got++] = t->ev[stack[j]].name;
            nf[idx[k]] = (unsigned char)got;
        }
        stack[top++] = idx[k];
    }
    free(idx), free(stack);
    return LF_OK;
}

/* PyTorch's auto_scale_flops: the unit of the smallest count, "FLOPs" to "PFLOPs". */
static void scale_flops(double smallest, double *scale, const char **unit)
{
    static const char *const units[] = {"FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs"};
    double l = log10(smallest) / 3;
    l = l > 5 ? 5 : l;
    l = l < 0 ? 0 : l;
    *scale = pow(10, floor(l) * -3.0);
    *unit = units[(int)l];
}

lf_status lf_table_build(const lf_trace *t, lf_sort_key sort_by, lf_table *out)
{
    lf_table_opts o = {.sort_by = sort_by};
    return lf_table_build_opts(t, &o, out);
}

lf_status lf_table_build_opts(const lf_trace *t, const lf_table_opts *opts, lf_table *out)
{
    LF_CHECK_PTR(t, "lf_table_build", "t");
    LF_CHECK_PTR(opts, "lf_table_build", "opts");
    LF_CHECK_PTR(out, "lf_table_build", "out");
    memset(out, 0, sizeof *out);
    const lf_sort_key sort_by = opts->sort_by;
    if ((unsigned)sort_by >= LF_SORT_KEYS)
        return lf_fail(LF_EINVAL, "lf_table_build: sort key %d is unknown", (int)sort_by);
    if (opts->group_by_stack < 0 || opts->group_by_stack > 64)
        return lf_fail(LF_EINVAL, "lf_table_build: group_by_stack %d is not 0 to 64", opts->group_by_stack);
    const int frames_n = opts->group_by_stack, by_shape = opts->group_by_input_shape != 0;
    const int64_t n = t->n;
    int64_t *idx = malloc((size_t)(n + 1) * sizeof *idx);
    double *us = calloc((size_t)(n + 1), sizeof *us);          /* each event's time, PyTorch's way */
    double *child_cpu = calloc((size_t)(n + 1), sizeof *child_cpu); /* its direct children's times */
    double *kern = calloc((size_t)(n + 1), sizeof *kern);       /* an op's own device work */
    double *child_dev = calloc((size_t)(n + 1), sizeof *child_dev); /* its children's device totals */
    int64_t *parent = malloc((size_t)(n + 1) * sizeof *parent);
    int64_t *stack = malloc((size_t)(n + 1) * sizeof *stack);
    int64_t *mem_total = calloc((size_t)(2 * n + 2), sizeof *mem_total); /* [2i]: host, [2i+1]: device */
    int64_t *mem_self = calloc((size_t)(2 * n + 2), sizeof *mem_self);
    lf_table_row *rows = calloc((size_t)(n + 1), sizeof *rows), *tmp = malloc((size_t)(n + 1) * sizeof *tmp);
    lf_strmap groups = {0};
    imap owners = {0};
    const char **frames = NULL, **row_frames = NULL; /* per event, then per row: depth each */
    unsigned char *nframes = NULL;
    char **keys = NULL, *scratch = NULL; /* grouping keys made of several strings */
    int64_t n_keys = 0;
    size_t scratch_cap = 0;
    lf_status st = LF_OK;
    int mem_sat = 0;
    int64_t negative = 0, neg_parent = -1, neg_child = -1;
    if (!idx || !us || !child_cpu || !kern || !child_dev || !parent || !stack || !mem_total || !mem_self || !rows ||
        !tmp || !lf_strmap_init(&groups, n) || !imap_init(&owners, n)) {
        st = lf_fail(LF_ENOMEM, "lf_table_build: out of memory for %lld events", (long long)n);
        goto done;
    }
    /* 0. PyTorch keeps each event's start and end as microseconds since the trace's start, in
     * doubles, and takes its time as their difference; the earliest event stands for the start.
     * The digits a table prints depend on that arithmetic (8.5265 us printed as 8.526), so it
     * is done the same way here. The reader bounds ts and dur, so nothing here overflows. */
    int64_t t0 = 0;
    for (int64_t i = 0; i < n; i++)
        if (i == 0 || t->ev[i].ts_ns < t0)
            t0 = t->ev[i].ts_ns;
    for (int64_t i = 0; i < n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (e->dur_ns >= 0)
            us[i] = (double)(e->ts_ns - t0 + e->dur_ns) / 1000.0 - (double)(e->ts_ns - t0) / 1000.0;
    }
    /* 1. host events nest per thread: parents, and each one's direct children's time */
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (is_tabled(&t->ev[i]) && !lf_trace_cat_is_device(t->ev[i].cat) && !is_async(&t->ev[i]))
            idx[m++] = i;
    qsort_r(idx, (size_t)m, sizeof *idx, by_track_time, (void *)t);
    int64_t depth = 0;
    for (int64_t k = 0; k < m; k++) {
        const lf_trace_event *e = &t->ev[idx[k]];
        if (k > 0 && (e->pid != t->ev[idx[k - 1]].pid || e->tid != t->ev[idx[k - 1]].tid))
            depth = 0;
        while (depth > 0) {
            const lf_trace_event *top = &t->ev[stack[depth - 1]];
            if (e->ts_ns >= top->ts_ns && e->ts_ns + e->dur_ns <= top->ts_ns + top->dur_ns)
                break;
            depth--;
        }
        parent[idx[k]] = depth ? stack[depth - 1] : -1;
        if (depth) {
            int64_t p = stack[depth - 1];
            child_cpu[p] += us[idx[k]];
            if (child_cpu[p] > us[p] && negative++ == 0) /* children overlapping one another */
                neg_parent = p, neg_child = idx[k];
        }
        stack[depth++] = idx[k];
    }
    /* 1b. [memory] events count for every host event enclosing them on their thread */
    for (int64_t i = 0; i < n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (e->cat != LF_TC_MEMORY)
            continue;
        if (e->mem_device_type)
            out->has_device_mem = 1;
        else
            out->has_cpu_mem = 1;
        /* the last host event on its thread to start at or before it (binary search over the
         * track-sorted list), then up its ancestors to the first one that still encloses it */
        int64_t lo = 0, hi = m;
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            const lf_trace_event *h = &t->ev[idx[mid]];
            int before = h->pid < e->pid ||
                         (h->pid == e->pid && (h->tid < e->tid || (h->tid == e->tid && h->ts_ns <= e->ts_ns)));
            if (before)
                lo = mid + 1;
            else
                hi = mid;
        }
        int64_t inner = -1;
        if (lo > 0 && t->ev[idx[lo - 1]].pid == e->pid && t->ev[idx[lo - 1]].tid == e->tid) {
            inner = idx[lo - 1];
            while (inner >= 0 && e->ts_ns > t->ev[inner].ts_ns + t->ev[inner].dur_ns)
                inner = parent[inner];
        }
        const int kind = e->mem_device_type ? 1 : 0;
        if (inner >= 0) {
            mem_self[2 * inner + kind] = add_sat(mem_self[2 * inner + kind], e->mem_bytes, &mem_sat);
            for (int64_t a = inner; a >= 0; a = parent[a])
                mem_total[2 * a + kind] = add_sat(mem_total[2 * a + kind], e->mem_bytes, &mem_sat);
        }
    }
    /* 2. device time to the op that launched it (its External id); ops win over annotations */
    for (int pass = 0; pass < 2; pass++)
        for (int64_t k = 0; k < m; k++) {
            const lf_trace_event *e = &t->ev[idx[k]];
            if (e->ext_id && (pass == 0 ? e->cat == LF_TC_CPU_OP : e->cat == LF_TC_USER_ANNOTATION)) {
                int64_t *o = imap_slot(&owners, e->ext_id);
                if (*o < 0)
                    *o = idx[k];
            }
        }
    for (int64_t i = 0; i < n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (!is_tabled(e) || !lf_trace_cat_is_device(e->cat) || e->cat == LF_TC_GPU_ANNOTATION || !e->ext_id)
            continue;
        int64_t o = *imap_slot(&owners, e->ext_id);
        if (o >= 0)
            kern[o] += us[i];
    }
    /* an op's device total is its own work plus its children's totals, two sums as PyTorch's;
     * walking the thread's events in order again, an event is final when it closes, and closes
     * after its children, which close in their start order: the order PyTorch adds them in */
    double *own_total = calloc((size_t)(n + 1), sizeof *own_total);
    if (!own_total) {
        st = lf_fail(LF_ENOMEM, "lf_table_build: out of memory for %lld events", (long long)n);
        goto done;
    }
#define CLOSE(x)                                                     \
    do {                                                             \
        int64_t x_ = (x);                                            \
        own_total[x_] = kern[x_] + child_dev[x_];                    \
        if (parent[x_] >= 0)                                         \
            child_dev[parent[x_]] += own_total[x_];                  \
    } while (0)
    depth = 0;
    for (int64_t k = 0; k < m; k++) {
        const lf_trace_event *e = &t->ev[idx[k]];
        if (k > 0 && (e->pid != t->ev[idx[k - 1]].pid || e->tid != t->ev[idx[k - 1]].tid))
            while (depth > 0)
                CLOSE(stack[--depth]);
        while (depth > 0 && stack[depth - 1] != parent[idx[k]])
            CLOSE(stack[--depth]);
        stack[depth++] = idx[k];
    }
    while (depth > 0)
        CLOSE(stack[--depth]);
#undef CLOSE
    /* 3. rows in first-seen order, one per name (and kind), or per name and input shapes and
     * stack when grouped so */
    if (frames_n) {
        frames = malloc((size_t)(n + 1) * (size_t)frames_n * sizeof *frames);
        row_frames = malloc((size_t)(n + 1) * (size_t)frames_n * sizeof *row_frames);
        nframes = calloc((size_t)(n + 1), 1);
        if (!frames || !row_frames || !nframes) {
            st = lf_fail(LF_ENOMEM, "lf_table_build: out of memory for %lld events", (long long)n);
            free(own_total);
            goto done;
        }
        if ((st = python_stacks(t, frames_n, frames, nframes)) != LF_OK) {
            free(own_total);
            goto done;
        }
    }
    if (by_shape || frames_n)
        keys = malloc((size_t)(n + 1) * sizeof *keys);
    if ((by_shape || frames_n) && !keys) {
        st = lf_fail(LF_ENOMEM, "lf_table_build: out of memory for %lld events", (long long)n);
        free(own_total);
        goto done;
    }
    m = 0;
    for (int64_t i = 0; i < n; i++)
        if (is_tabled(&t->ev[i]))
            idx[m++] = i;
    qsort_r(idx, (size_t)m, sizeof *idx, by_time_class, (void *)t);
    int64_t n_rows = 0;
    for (int64_t k = 0; k < m; k++) {
        const int64_t i = idx[k];
        const lf_trace_event *e = &t->ev[i];
        int dev = lf_trace_cat_is_device(e->cat);
        int ann = e->cat == LF_TC_USER_ANNOTATION || e->cat == LF_TC_GPU_ANNOTATION, async = is_async(e);
        const char *name = strncmp(e->name, "ProfilerStep#", 13) ? e->name : "ProfilerStep*";
        const char *shapes = e->input_dims && !dev ? e->input_dims : "[]";
        const int nf = frames_n && !dev ? nframes[i] : 0;
        const char *key = name;
        if (by_shape || frames_n) { /* name, shapes and frames, split by a byte no name holds */
            size_t need = strlen(name) + strlen(shapes) + 3;
            for (int f = 0; f < nf; f++)
                need += strlen(frames[i * frames_n + f]) + 1;
            if (need > scratch_cap) {
                char *g = realloc(scratch, need * 2);
                if (!g) {
                    st = lf_fail(LF_ENOMEM, "lf_table_build: out of memory");
                    free(own_total);
                    goto done;
                }
                scratch = g, scratch_cap = need * 2;
            }
            char *w = scratch;
            w += sprintf(w, "%s\x1f%s", name, by_shape ? shapes : "");
            for (int f = 0; f < nf; f++)
                w += sprintf(w, "\x1f%s", frames[i * frames_n + f]);
            key = scratch;
        }
        const int64_t kind = dev * 2 + ann + 4 * async;
        const lf_strmap_entry *found = key == name ? NULL : lf_strmap_find(&groups, key, kind);
        if (key != name && !found) { /* a new group: its key must outlive the map */
            if (!(keys[n_keys] = strdup(key))) {
                st = lf_fail(LF_ENOMEM, "lf_table_build: out of memory");
                free(own_total);
                goto done;
            }
            key = keys[n_keys++];
        }
        lf_strmap_entry *s = lf_strmap_get(&groups, key, kind);
        if (!s) {
            st = lf_fail(LF_ENOMEM, "lf_table_build: out of memory for %lld events", (long long)n);
            free(own_total);
            goto done;
        }
        if (s->val < 0) {
            s->val = n_rows;
            lf_table_row *nr = &rows[n_rows];
            *nr = (lf_table_row){.name = name, .is_device = dev, .is_annotation = ann, .is_async = async};
            if (by_shape)
                nr->input_shapes = shapes;
            if (frames_n) {
                const char **rf = row_frames + n_rows * frames_n;
                for (int f = 0; f < nf; f++)
                    rf[f] = frames[i * frames_n + f];
                nr->stack = rf, nr->n_stack = nf;
            }
            n_rows++;
        }
        lf_table_row *r = &rows[s->val];
        r->count++;
        r->flops += e->flops;
        if (dev) {
            r->self_device_us += us[i];
            r->device_total_us += us[i];
            out->has_device = 1;
        } else if (async) {
            r->cpu_total_us += us[i];
        } else {
            r->self_cpu_us += us[i] - child_cpu[i];
            r->cpu_total_us += us[i];
            r->self_device_us += own_total[i] - child_dev[i];
            r->device_total_us += own_total[i];
            r->cpu_mem = add_sat(r->cpu_mem, mem_total[2 * i], &mem_sat);
            r->self_cpu_mem = add_sat(r->self_cpu_mem, mem_self[2 * i], &mem_sat);
            r->device_mem = add_sat(r->device_mem, mem_total[2 * i + 1], &mem_sat);
            r->self_device_mem = add_sat(r->self_device_mem, mem_self[2 * i + 1], &mem_sat);
        }
    }
    free(own_total);
    if (sort_by != LF_SORT_NONE)
        sort_rows(rows, tmp, n_rows, sort_by);
    /* PyTorch's columns (its _build_table's rules; the trace's flags stand for the profiler's) */
    const lf_trace_meta *meta = &t->meta;
    if (meta->profile_memory) {
        out->has_cpu_mem = 1;
        out->has_device_mem = 0;
        for (int64_t k = 0; k < n_rows; k++)
            out->has_device_mem |= rows[k].self_device_mem > 0;
    }
    double smallest = 0;
    for (int64_t k = 0; k < n_rows; k++)
        if (rows[k].flops > 0 && (smallest == 0 || rows[k].flops < smallest))
            smallest = rows[k].flops;
    if (meta->with_flops && smallest > 0) {
        out->has_flops = 1;
        scale_flops(smallest, &out->flops_scale, &out->flops_unit);
    }
    out->has_input_shapes = by_shape;
    out->stack_depth = frames_n;
    /* the footers add up every row, in the table's order */
    for (int64_t k = 0; k < n_rows; k++) {
        out->self_cpu_total_us += rows[k].self_cpu_us;
        if (rows[k].is_device && !rows[k].is_annotation)
            out->self_device_total_us += rows[k].self_device_us;
    }
    if (negative)
        snprintf(out->warning, sizeof out->warning,
                 "warning: %lld host event%s last%s less than the events inside them (events on one thread "
                 "that overlap without nesting), so their self CPU time is negative; first: \"%.120s\" holding "
                 "\"%.120s\"\n",
                 (long long)negative, negative == 1 ? "" : "s", negative == 1 ? "s" : "", t->ev[neg_parent].name,
                 t->ev[neg_child].name);
    /* a double holds every nanosecond up to 2^53 ns (104 days); past that, times are rounded */
    int rounded = out->self_cpu_total_us > 9.007e12 || out->self_device_total_us > 9.007e12;
    for (int64_t k = 0; k < n_rows && !rounded; k++)
        rounded = rows[k].cpu_total_us > 9.007e12 || rows[k].device_total_us > 9.007e12;
    if (rounded)
        snprintf(out->warning + strlen(out->warning), sizeof out->warning - strlen(out->warning),
                 "warning: some totals pass 104 days and are not exact to the nanosecond (they add up in doubles, "
                 "as PyTorch's do)\n");
    if (mem_sat)
        snprintf(out->warning + strlen(out->warning), sizeof out->warning - strlen(out->warning),
                 "warning: a memory total passed the 64-bit range; it is shown at the range's end, not exact\n");
    out->rows = rows;
    out->n_rows = n_rows;
    out->device_label = t->meta.device_label ? t->meta.device_label : "CUDA";
    out->dropped_events = t->meta.dropped_events;
    out->stack_data = row_frames;
    row_frames = NULL;
    rows = NULL;
done:
    for (int64_t k = 0; k < n_keys; k++)
        free(keys[k]);
    free(keys), free(scratch), free(frames), free(row_frames), free(nframes);
    free(idx), free(us), free(child_cpu), free(kern), free(child_dev), free(parent), free(stack), free(rows), free(tmp);
    free(mem_total), free(mem_self);
    lf_strmap_free(&groups), free(owners.keys), free(owners.vals);
    return st;
}

void lf_table_free(lf_table *tab)
{
    if (tab) {
        free(tab->rows);
        free(tab->stack_data);
        tab->stack_data = NULL;
        tab->rows = NULL;
        tab->n_rows = 0;
    }
}

lf_status lf_sort_key_parse(const char *s, lf_sort_key *out)
{
    static const struct {
        const char *s;
        lf_sort_key k;
    } keys[] = {
        {"self_cpu_time_total", LF_SORT_SELF_CPU_TIME_TOTAL},
        {"cpu_time_total", LF_SORT_CPU_TIME_TOTAL},
        {"self_cuda_time_total", LF_SORT_SELF_DEVICE_TIME_TOTAL},
        {"self_device_time_total", LF_SORT_SELF_DEVICE_TIME_TOTAL},
        {"cuda_time_total", LF_SORT_DEVICE_TIME_TOTAL},
        {"device_time_total", LF_SORT_DEVICE_TIME_TOTAL},
        {"cpu_time", LF_SORT_CPU_TIME},
        {"cuda_time", LF_SORT_DEVICE_TIME},
        {"device_time", LF_SORT_DEVICE_TIME},
        {"count", LF_SORT_COUNT},
        {"none", LF_SORT_NONE},
    };
    LF_CHECK_PTR(s, "lf_sort_key_parse", "s");
    LF_CHECK_PTR(out, "lf_sort_key_parse", "out");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(s, keys[i].s)) {
            *out = keys[i].k;
            return LF_OK;
        }
    return lf_fail(LF_EINVAL,
                   "unknown sort key '%s' (expected self_cpu_time_total, cpu_time_total, self_cuda_time_total, "
                   "cuda_time_total, cpu_time, cuda_time or count)",
                   s);
}

/* --- text --- */

/* PyTorch's _format_time, on microseconds as a double. */
static const char *fmt_us(char *buf, size_t cap, double us)
{
    if (us >= 1e6)
        snprintf(buf, cap, "%.3fs", us / 1e6);
    else if (us >= 1e3)
        snprintf(buf, cap, "%.3fms", us / 1e3);
    else
        snprintf(buf, cap, "%.3fus", us);
    return buf;
}

const char *lf_fmt_time(char *buf, size_t cap, double ns)
{
    return fmt_us(buf, cap, ns / 1000.0);
}

/* A name as PyTorch's table prints it: cut to MAX_NAME - 3 characters plus "..." when it has
 * that many or more (characters, never bytes: a cut never splits one), each byte that is not
 * UTF-8 written as U+FFFD. Returns its length in characters. */
enum { MAX_NAME = 55 };
static int fmt_name(char *dst, size_t cap, const char *name)
{
    size_t chars = 0, o = 0;
    lf_utf8_prefix(name, (size_t)-1, &chars);
    const size_t keep = chars >= MAX_NAME - 3 ? MAX_NAME - 3 : chars;
    const char *s = name;
    for (size_t c = 0; c < keep && o + 4 < cap; c++) {
        int k = lf_utf8_char(s);
        if (k > 0) {
            memcpy(dst + o, s, (size_t)k);
            o += (size_t)k, s += k;
        } else {
            memcpy(dst + o, "\xef\xbf\xbd", 3);
            o += 3, s++;
        }
    }
    if (keep < chars && o + 4 <= cap) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
    return (int)(keep < chars ? keep + 3 : keep);
}

/* s right-aligned in width characters, then two spaces, as PyTorch's row format does. */
static void put_cell(lf_sbuf *b, const char *s, int width)
{
    size_t chars = 0;
    lf_utf8_prefix(s, (size_t)-1, &chars);
    lf_sbuf_printf(b, "%*s%s  ", width > (int)chars ? width - (int)chars : 0, "", s);
}

enum { MAX_SHAPES = 80, MAX_SRC = 75 }; /* PyTorch's max_shapes_column_width, max_src_column_width */

static void put_cell_aligned(lf_sbuf *b, const char *s, int width, int left)
{
    if (!left) {
        put_cell(b, s, width);
        return;
    }
    size_t chars = 0;
    lf_utf8_prefix(s, (size_t)-1, &chars);
    lf_sbuf_printf(b, "%s%*s  ", s, width > (int)chars ? width - (int)chars : 0, "");
}

/* PyTorch's trim_path: a frame longer than the column keeps its end, "..." in front. */
static void trim_path(char *dst, size_t cap, const char *path, int width)
{
    size_t chars = 0;
    lf_utf8_prefix(path, (size_t)-1, &chars);
    if ((int)chars <= width) {
        snprintf(dst, cap, "%s", path);
        return;
    }
    const char *s = path;
    for (size_t c = 0; c < chars - (size_t)width; c++) /* drop the first chars - width characters */
        s += lf_utf8_char(s) > 0 ? lf_utf8_char(s) : 1;
    for (int c = 0; c < 3 && *s; c++) /* then three more, for the "..." */
        s += lf_utf8_char(s) > 0 ? lf_utf8_char(s) : 1;
    snprintf(dst, cap, "...%s", s);
}

/* Memory, 1024-based: "1.50 MB", "12 B". */
static void fmt_mem(char *buf, size_t cap, int64_t b)
{
    double a = b < 0 ? -(double)b : (double)b;
    if (a >= 1073741824.0)
        snprintf(buf, cap, "%.2f GB", (double)b / 1073741824.0);
    else if (a >= 1048576.0)
        snprintf(buf, cap, "%.2f MB", (double)b / 1048576.0);
    else if (a >= 1024.0)
        snprintf(buf, cap, "%.2f KB", (double)b / 1024.0);
    else
        snprintf(buf, cap, "%lld B", (long long)b);
}

/* PyTorch's _format_time_share: time * 100 / total, "NaN" for a zero total. */
static void fmt_pct(char *buf, size_t cap, double part, double total)
{
    if (total == 0)
        snprintf(buf, cap, "NaN");
    else
        snprintf(buf, cap, "%.2f%%", part * 100.0 / total);
}

lf_status lf_table_format(const lf_table *tab, const lf_table_opts *o, char **text)
{
    LF_CHECK_PTR(tab, "lf_table_format", "tab");
    LF_CHECK_PTR(text, "lf_table_format", "text");
    *text = NULL;
    if (o && o->style != LF_TABLE_TEXT)
        return lf_table_format_data(tab, o, text);
    int64_t limit = o && o->row_limit > 0 ? o->row_limit : tab->n_rows;
    if (limit > tab->n_rows)
        limit = tab->n_rows;
    int name_w = 0;
    for (int64_t i = 0; i < tab->n_rows; i++) {
        size_t l = 0;
        lf_utf8_prefix(tab->rows[i].name, (size_t)-1, &l);
        name_w = (int)l > name_w ? (int)l : name_w;
    }
    name_w += 4;
    if (name_w > MAX_NAME)
        name_w = MAX_NAME;
    const char *dl = tab->device_label;
    char h_self[32], h_selfp[32], h_total[32], h_avg[32];
    snprintf(h_self, sizeof h_self, "Self %s", dl);
    snprintf(h_selfp, sizeof h_selfp, "Self %s %%", dl);
    snprintf(h_total, sizeof h_total, "%s total", dl);
    snprintf(h_avg, sizeof h_avg, "%s time avg", dl);
    const char *heads[24];
    int ncol = 0;
    const char *fixed[6] = {"Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"};
    for (int c = 0; c < 6; c++)
        heads[ncol++] = fixed[c];
    if (tab->has_device) {
        heads[ncol++] = h_self, heads[ncol++] = h_selfp, heads[ncol++] = h_total, heads[ncol++] = h_avg;
    }
    char h_mem[32], h_smem[32];
    snprintf(h_mem, sizeof h_mem, "%s Mem", dl);
    snprintf(h_smem, sizeof h_smem, "Self %s Mem", dl);
    if (tab->has_cpu_mem)
        heads[ncol++] = "CPU Mem", heads[ncol++] = "Self CPU Mem";
    if (tab->has_device_mem)
        heads[ncol++] = h_mem, heads[ncol++] = h_smem;
    heads[ncol++] = "# of Calls";
    const int fixed_cols = ncol;
    /* then, as PyTorch: Input Shapes (its width from the longest, at most 80), Total <unit>;
     * and Source Location, left-aligned, last (PyTorch puts its header before the FLOPs but its
     * values after them; here both go last) */
    char h_flops[32];
    int shapes_w = 0, src_w = 0, shapes_col = -1, src_col = -1;
    if (tab->has_input_shapes) {
        for (int64_t i = 0; i < tab->n_rows; i++) {
            size_t l = 0;
            lf_utf8_prefix(tab->rows[i].input_shapes ? tab->rows[i].input_shapes : "[]", (size_t)-1, &l);
            shapes_w = (int)l + 4 > shapes_w ? (int)l + 4 : shapes_w;
        }
        shapes_w = shapes_w > MAX_SHAPES ? MAX_SHAPES : shapes_w;
        shapes_col = ncol;
        heads[ncol++] = "Input Shapes";
    }
    if (tab->has_flops) {
        snprintf(h_flops, sizeof h_flops, "Total %s", tab->flops_unit);
        heads[ncol++] = h_flops;
    }
    if (tab->stack_depth) {
        for (int64_t i = 0; i < tab->n_rows; i++)
            for (int f = 0; f < tab->rows[i].n_stack; f++) {
                size_t l = 0;
                lf_utf8_prefix(tab->rows[i].stack[f], (size_t)-1, &l);
                src_w = (int)l + 4 > src_w ? (int)l + 4 : src_w;
            }
        src_w = src_w > MAX_SRC ? MAX_SRC : src_w < 19 ? 19 : src_w;
        src_col = ncol;
        heads[ncol++] = "Source Location";
    }
    /* PyTorch's widths: the name column, then 12 for every other (a longer header such as
     * "CUDA time avg" just sticks out). A device label longer than "CUDA" widens its columns
     * instead, so a linfuse CPU table stays aligned. */
    int w[24], left[24] = {0};
    for (int c = 0; c < ncol; c++) {
        w[c] = c ? 12 : name_w;
        if (c >= 6 && c < fixed_cols && strlen(dl) > 4 && (int)strlen(heads[c]) > w[c])
            w[c] = (int)strlen(heads[c]);
        if (c == shapes_col)
            w[c] = shapes_w;
        if (c == src_col)
            w[c] = src_w, left[c] = 1;
    }
    lf_sbuf b = {0};
#define SEP_LINE()                                              \
    do {                                                        \
        for (int c = 0; c < ncol; c++)                          \
            for (int k = 0; k < w[c] + 2; k++)                  \
                lf_sbuf_printf(&b, "%c", k < w[c] ? '-' : ' '); \
        lf_sbuf_printf(&b, "\n");                               \
    } while (0)
    SEP_LINE();
    for (int c = 0; c < ncol; c++)
        put_cell_aligned(&b, heads[c], w[c], left[c]);
    lf_sbuf_printf(&b, "\n");
    SEP_LINE();
    for (int64_t i = 0; i < limit; i++) {
        const lf_table_row *r = &tab->rows[i];
        char name[256], cells[10][32];
        fmt_name(name, sizeof name, r->name);
        fmt_pct(cells[0], 32, r->self_cpu_us, tab->self_cpu_total_us);
        fmt_us(cells[1], 32, r->self_cpu_us);
        if (r->is_async) /* PyTorch prints the integer 0 for an async event's share */
            snprintf(cells[2], 32, "0");
        else
            fmt_pct(cells[2], 32, r->cpu_total_us, tab->self_cpu_total_us);
        fmt_us(cells[3], 32, r->cpu_total_us);
        fmt_us(cells[4], 32, r->count ? r->cpu_total_us / (double)r->count : 0);
        fmt_us(cells[5], 32, r->self_device_us);
        fmt_pct(cells[6], 32, r->self_device_us, tab->self_device_total_us);
        fmt_us(cells[7], 32, r->device_total_us);
        fmt_us(cells[8], 32, r->count ? r->device_total_us / (double)r->count : 0);
        char mem[4][32], count[32];
        fmt_mem(mem[0], 32, r->cpu_mem);
        fmt_mem(mem[1], 32, r->self_cpu_mem);
        fmt_mem(mem[2], 32, r->device_mem);
        fmt_mem(mem[3], 32, r->self_device_mem);
        snprintf(count, sizeof count, "%lld", (long long)r->count);
        const char *cell[24];
        int nc = 0;
        cell[nc++] = name;
        for (int c = 0; c < 5; c++)
            cell[nc++] = cells[c];
        for (int c = 5; tab->has_device && c < 9; c++)
            cell[nc++] = cells[c];
        if (tab->has_cpu_mem)
            cell[nc++] = mem[0], cell[nc++] = mem[1];
        if (tab->has_device_mem)
            cell[nc++] = mem[2], cell[nc++] = mem[3];
        cell[nc++] = count;
        char shapes[4 * MAX_SHAPES + 1], flops[64], src[4 * MAX_SRC + 8];
        if (tab->has_input_shapes) { /* Python's str(shapes)[:width] */
            const char *sh = r->input_shapes ? r->input_shapes : "[]";
            size_t bytes = lf_utf8_prefix(sh, (size_t)shapes_w, NULL);
            memcpy(shapes, sh, bytes);
            shapes[bytes] = '\0';
            cell[nc++] = shapes;
        }
        if (tab->has_flops) {
            if (r->flops <= 0)
                snprintf(flops, sizeof flops, "--");
            else
                snprintf(flops, sizeof flops, "%8.3f", r->flops * tab->flops_scale);
            cell[nc++] = flops;
        }
        if (tab->stack_depth) {
            trim_path(src, sizeof src, r->n_stack ? r->stack[0] : "", src_w);
            cell[nc++] = src;
        }
        for (int c = 0; c < nc; c++)
            put_cell_aligned(&b, cell[c], w[c], left[c]);
        lf_sbuf_printf(&b, "\n");
        if (tab->stack_depth) { /* the outer frames on lines of their own, then an empty line, as PyTorch */
            for (int f = 1; f <= (r->n_stack > 1 ? r->n_stack : 1); f++) {
                trim_path(src, sizeof src, f < r->n_stack ? r->stack[f] : "", src_w);
                for (int c = 0; c < ncol; c++)
                    put_cell_aligned(&b, c == ncol - 1 ? src : "", w[c], left[c]);
                lf_sbuf_printf(&b, "\n");
            }
        }
    }
    SEP_LINE();
#undef SEP_LINE
    char tot[32];
    fmt_us(tot, sizeof tot, tab->self_cpu_total_us);
    lf_sbuf_printf(&b, "Self CPU time total: %s\n", tot);
    if (tab->has_device) {
        fmt_us(tot, sizeof tot, tab->self_device_total_us);
        lf_sbuf_printf(&b, "Self %s time total: %s\n", dl, tot);
    }
    if (tab->warning[0])
        lf_sbuf_printf(&b, "%s", tab->warning);
    if (tab->dropped_events > 0)
        lf_sbuf_printf(&b, "Events the profiler dropped: %lld (the numbers above miss them)\n",
                       (long long)tab->dropped_events);
    if (b.oom) {
        free(b.p);
        return lf_fail(LF_ENOMEM, "lf_table_format: out of memory");
    }
    *text = b.p;
    return LF_OK;
}
