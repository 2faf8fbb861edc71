/* PyTorch's key_averages().table() built from any lf_trace (docs/trace_format.md, "The table"):
 * events nest per host thread (self = own time minus direct children), kernels count toward
 * the op whose External id they carry, rows group by name and device/annotation kind (and by
 * shapes or Python frames when asked), with PyTorch's memory and FLOPs columns; table_text.c
 * prints it as PyTorch does. Layer: trace/. */
#define _GNU_SOURCE /* qsort_r */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/table_impl.h"

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

/* What building a table works with: per event (n + 1 each, indexed by the event) its time, its
 * direct children's times, its own device work and its children's device totals, its parent,
 * its memory; the rows as they are made and the groups that find them. */
typedef struct builder {
    const lf_trace *t;
    int64_t n;
    int frames_n, by_shape; /* group by the innermost frames_n Python frames, by input shapes */
    int64_t *idx, m;        /* m events in an order: host events by thread and time, then rows' events by time */
    double *us;             /* each event's time, PyTorch's way */
    double *child_cpu;      /* its direct children's times */
    double *kern;           /* an op's own device work */
    double *child_dev;      /* its children's device totals */
    double *own_total;      /* its device total: kern + child_dev */
    int64_t *parent, *stack;
    int64_t *mem_total, *mem_self; /* [2i]: host, [2i+1]: device */
    lf_table_row *rows, *tmp;
    int64_t n_rows;
    lf_strmap groups;
    lf_imap owners;                    /* External id -> the op (or annotation) that owns it */
    const char **frames, **row_frames; /* per event, then per row: frames_n each */
    unsigned char *nframes;            /* per event: its frames */
    char *stack_text;                  /* events' own stacks, split into frames (the table's at the end) */
    char **keys, *scratch;             /* grouping keys made of several strings */
    int64_t n_keys;
    size_t scratch_cap;
    int mem_sat;                             /* a memory sum stopped at the int64 range */
    int64_t negative, neg_parent, neg_child; /* host events shorter than their children; the first */
} builder;

static lf_status out_of_memory(const builder *b)
{
    return lf_fail(LF_ENOMEM, "lf_table_build: out of memory for %lld events", (long long)b->n);
}

static lf_status builder_init(builder *b, const lf_trace *t, const lf_table_opts *opts)
{
    const int64_t n = t->n;
    *b = (builder){.t = t,
                   .n = n,
                   .frames_n = opts->group_by_stack,
                   .by_shape = opts->group_by_input_shape != 0,
                   .neg_parent = -1,
                   .neg_child = -1};
    b->idx = malloc((size_t)(n + 1) * sizeof *b->idx);
    b->us = calloc((size_t)(n + 1), sizeof *b->us);
    b->child_cpu = calloc((size_t)(n + 1), sizeof *b->child_cpu);
    b->kern = calloc((size_t)(n + 1), sizeof *b->kern);
    b->child_dev = calloc((size_t)(n + 1), sizeof *b->child_dev);
    b->own_total = calloc((size_t)(n + 1), sizeof *b->own_total);
    b->parent = malloc((size_t)(n + 1) * sizeof *b->parent);
    b->stack = malloc((size_t)(n + 1) * sizeof *b->stack);
    b->mem_total = calloc((size_t)(2 * n + 2), sizeof *b->mem_total);
    b->mem_self = calloc((size_t)(2 * n + 2), sizeof *b->mem_self);
    b->rows = calloc((size_t)(n + 1), sizeof *b->rows);
    b->tmp = malloc((size_t)(n + 1) * sizeof *b->tmp);
    if (!b->idx || !b->us || !b->child_cpu || !b->kern || !b->child_dev || !b->own_total || !b->parent || !b->stack ||
        !b->mem_total || !b->mem_self || !b->rows || !b->tmp || !lf_strmap_init(&b->groups, n) ||
        !lf_imap_init(&b->owners, n))
        return out_of_memory(b);
    if (b->frames_n) {
        b->frames = malloc((size_t)(n + 1) * (size_t)b->frames_n * sizeof *b->frames);
        b->row_frames = malloc((size_t)(n + 1) * (size_t)b->frames_n * sizeof *b->row_frames);
        b->nframes = calloc((size_t)(n + 1), 1);
        if (!b->frames || !b->row_frames || !b->nframes)
            return out_of_memory(b);
    }
    if ((b->by_shape || b->frames_n) && !(b->keys = malloc((size_t)(n + 1) * sizeof *b->keys)))
        return out_of_memory(b);
    return LF_OK;
}

static void builder_free(builder *b)
{
    for (int64_t k = 0; k < b->n_keys; k++)
        free(b->keys[k]);
    free(b->stack_text);
    free(b->keys), free(b->scratch), free(b->frames), free(b->row_frames), free(b->nframes);
    free(b->idx), free(b->us), free(b->child_cpu), free(b->kern), free(b->child_dev), free(b->own_total);
    free(b->parent), free(b->stack), free(b->rows), free(b->tmp), free(b->mem_total), free(b->mem_self);
    lf_strmap_free(&b->groups), free(b->owners.keys), free(b->owners.vals);
}

/* 0. PyTorch keeps each event's start and end as microseconds since the trace's start, in
 * doubles, and takes its time as their difference; the earliest event stands for the start.
 * The digits a table prints depend on that arithmetic (8.5265 us printed as 8.526), so it is
 * done the same way here. The reader bounds ts and dur, so nothing here overflows. */
static void time_events(builder *b)
{
    const lf_trace *t = b->t;
    int64_t t0 = 0;
    for (int64_t i = 0; i < b->n; i++)
        if (i == 0 || t->ev[i].ts_ns < t0)
            t0 = t->ev[i].ts_ns;
    for (int64_t i = 0; i < b->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (e->dur_ns >= 0)
            b->us[i] = (double)(e->ts_ns - t0 + e->dur_ns) / 1000.0 - (double)(e->ts_ns - t0) / 1000.0;
    }
}

/* Whether host event k of the thread-sorted list is on another thread than the one before it. */
static int new_thread(const builder *b, int64_t k)
{
    if (k == 0)
        return 0;
    const lf_trace_event *e = &b->t->ev[b->idx[k]], *prev = &b->t->ev[b->idx[k - 1]];
    return e->pid != prev->pid || e->tid != prev->tid;
}

/* 1. host events nest per thread: parents, and each one's direct children's time */
static void nest_host_events(builder *b)
{
    const lf_trace *t = b->t;
    b->m = 0;
    for (int64_t i = 0; i < b->n; i++)
        if (lf_tab_is_tabled(&t->ev[i]) && !lf_trace_cat_is_device(t->ev[i].cat) && !lf_tab_is_async(&t->ev[i]))
            b->idx[b->m++] = i;
    qsort_r(b->idx, (size_t)b->m, sizeof *b->idx, lf_tab_by_track_time, (void *)t);
    int64_t depth = 0;
    for (int64_t k = 0; k < b->m; k++) {
        const int64_t i = b->idx[k];
        const lf_trace_event *e = &t->ev[i];
        if (new_thread(b, k))
            depth = 0;
        while (depth > 0) {
            const lf_trace_event *top = &t->ev[b->stack[depth - 1]];
            if (e->ts_ns >= top->ts_ns && e->ts_ns + e->dur_ns <= top->ts_ns + top->dur_ns)
                break;
            depth--;
        }
        b->parent[i] = depth ? b->stack[depth - 1] : -1;
        if (depth) {
            int64_t p = b->stack[depth - 1];
            b->child_cpu[p] += b->us[i];
            if (b->child_cpu[p] > b->us[p] && b->negative++ == 0) /* children overlapping one another */
                b->neg_parent = p, b->neg_child = i;
        }
        b->stack[depth++] = i;
    }
}

/* The innermost host event on e's thread that encloses it, or -1: the last one to start at or
 * before it (a binary search over the thread-sorted list), then up its ancestors to the first
 * that still encloses it. */
static int64_t enclosing_host_event(const builder *b, const lf_trace_event *e)
{
    const lf_trace *t = b->t;
    int64_t lo = 0, hi = b->m;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        const lf_trace_event *h = &t->ev[b->idx[mid]];
        int before =
            h->pid < e->pid || (h->pid == e->pid && (h->tid < e->tid || (h->tid == e->tid && h->ts_ns <= e->ts_ns)));
        if (before)
            lo = mid + 1;
        else
            hi = mid;
    }
    int64_t inner = -1;
    if (lo > 0 && t->ev[b->idx[lo - 1]].pid == e->pid && t->ev[b->idx[lo - 1]].tid == e->tid) {
        inner = b->idx[lo - 1];
        while (inner >= 0 && e->ts_ns > t->ev[inner].ts_ns + t->ev[inner].dur_ns)
            inner = b->parent[inner];
    }
    return inner;
}

/* 1b. [memory] events count for every host event enclosing them on their thread */
static void count_memory(builder *b, lf_table *out)
{
    for (int64_t i = 0; i < b->n; i++) {
        const lf_trace_event *e = &b->t->ev[i];
        if (e->cat != LF_TC_MEMORY)
            continue;
        if (e->mem_device_type)
            out->has_device_mem = 1;
        else
            out->has_cpu_mem = 1;
        const int64_t inner = enclosing_host_event(b, e);
        const int kind = e->mem_device_type ? 1 : 0;
        if (inner >= 0) {
            b->mem_self[2 * inner + kind] = add_sat(b->mem_self[2 * inner + kind], e->mem_bytes, &b->mem_sat);
            for (int64_t a = inner; a >= 0; a = b->parent[a])
                b->mem_total[2 * a + kind] = add_sat(b->mem_total[2 * a + kind], e->mem_bytes, &b->mem_sat);
        }
    }
}

/* 2. device time to the op that launched it (its External id); ops win over annotations. Work
 * whose External id no host event owns (a CUDA graph's kernel tied to the range its node was
 * captured under, which only its device-side annotation carries) goes to the op of the call that
 * launched it, by correlation, as PyTorch links a kernel to its op. */
static lf_status charge_device_work(builder *b)
{
    const lf_trace *t = b->t;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t k = 0; k < b->m; k++) {
            const lf_trace_event *e = &t->ev[b->idx[k]];
            if (e->ext_id && (pass == 0 ? e->cat == LF_TC_CPU_OP : e->cat == LF_TC_USER_ANNOTATION)) {
                int64_t *o = lf_imap_slot(&b->owners, e->ext_id);
                if (*o < 0)
                    *o = b->idx[k];
            }
        }
    lf_imap calls = {0}; /* correlation -> the External id of the call that launched it */
    if (!lf_imap_init(&calls, b->n)) {
        free(calls.keys), free(calls.vals);
        return out_of_memory(b);
    }
    for (int64_t i = 0; i < b->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if ((e->cat == LF_TC_RUNTIME || e->cat == LF_TC_DRIVER) && e->correlation && e->ext_id)
            *lf_imap_slot(&calls, e->correlation) = e->ext_id;
    }
    for (int64_t i = 0; i < b->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (!lf_tab_is_tabled(e) || !lf_trace_cat_is_device(e->cat) || e->cat == LF_TC_GPU_ANNOTATION)
            continue;
        int64_t o = e->ext_id ? *lf_imap_slot(&b->owners, e->ext_id) : -1;
        if (o < 0 && e->correlation) {
            const int64_t via = *lf_imap_slot(&calls, e->correlation);
            o = via > 0 ? *lf_imap_slot(&b->owners, via) : -1;
        }
        if (o >= 0)
            b->kern[o] += b->us[i];
    }
    free(calls.keys), free(calls.vals);
    return LF_OK;
}

/* Host event x closes: its device total is final, and counts toward its parent's. */
static void close_event(builder *b, int64_t x)
{
    b->own_total[x] = b->kern[x] + b->child_dev[x];
    if (b->parent[x] >= 0)
        b->child_dev[b->parent[x]] += b->own_total[x];
}

/* 2b. an op's device total is its own work plus its children's totals, two sums as PyTorch's;
 * walking the thread's events in order again, an event is final when it closes, and closes
 * after its children, which close in their start order: the order PyTorch adds them in */
static void total_device_work(builder *b)
{
    int64_t depth = 0;
    for (int64_t k = 0; k < b->m; k++) {
        const int64_t i = b->idx[k];
        if (new_thread(b, k))
            while (depth > 0)
                close_event(b, b->stack[--depth]);
        while (depth > 0 && b->stack[depth - 1] != b->parent[i])
            close_event(b, b->stack[--depth]);
        b->stack[depth++] = i;
    }
    while (depth > 0)
        close_event(b, b->stack[--depth]);
}

/* Event i's group key when rows group by shapes or frames: name, shapes and its nf frames, split
 * by a byte no name holds (in b's scratch, valid until the next call); NULL when out of memory. */
static const char *group_key(builder *b, int64_t i, const char *name, const char *shapes, int nf)
{
    size_t need = strlen(name) + strlen(shapes) + 3;
    for (int f = 0; f < nf; f++)
        need += strlen(b->frames[i * b->frames_n + f]) + 1;
    if (need > b->scratch_cap) {
        char *g = realloc(b->scratch, need * 2);
        if (!g)
            return NULL;
        b->scratch = g, b->scratch_cap = need * 2;
    }
    char *w = b->scratch;
    w += sprintf(w, "%s\x1f%s", name, b->by_shape ? shapes : "");
    for (int f = 0; f < nf; f++)
        w += sprintf(w, "\x1f%s", b->frames[i * b->frames_n + f]);
    return b->scratch;
}

/* The row event i (named name, of kind kind) adds to, made when it is the first of its group;
 * -1 when out of memory (the message set). */
static int64_t row_of(builder *b, int64_t i, const char *name, const char *shapes, int64_t kind)
{
    const lf_trace_event *e = &b->t->ev[i];
    const int dev = lf_trace_cat_is_device(e->cat), nf = b->frames_n ? b->nframes[i] : 0;
    const char *key = name;
    if (b->by_shape || b->frames_n) {
        if (!(key = group_key(b, i, name, shapes, nf))) {
            lf_fail(LF_ENOMEM, "lf_table_build: out of memory");
            return -1;
        }
        if (!lf_strmap_find(&b->groups, key, kind)) { /* a new group: its key must outlive the map */
            if (!(b->keys[b->n_keys] = strdup(key))) {
                lf_fail(LF_ENOMEM, "lf_table_build: out of memory");
                return -1;
            }
            key = b->keys[b->n_keys++];
        }
    }
    lf_strmap_entry *s = lf_strmap_get(&b->groups, key, kind);
    if (!s) {
        out_of_memory(b);
        return -1;
    }
    if (s->val < 0) {
        s->val = b->n_rows;
        lf_table_row *nr = &b->rows[b->n_rows];
        *nr = (lf_table_row){.name = name,
                             .is_device = dev,
                             .is_annotation = e->cat == LF_TC_USER_ANNOTATION || e->cat == LF_TC_GPU_ANNOTATION,
                             .is_async = lf_tab_is_async(e)};
        if (b->by_shape)
            nr->input_shapes = shapes;
        if (b->frames_n) {
            const char **rf = b->row_frames + b->n_rows * b->frames_n;
            for (int f = 0; f < nf; f++)
                rf[f] = b->frames[i * b->frames_n + f];
            nr->stack = rf, nr->n_stack = nf;
        }
        b->n_rows++;
    }
    return s->val;
}

/* Event i's times, FLOPs and memory added to row r. */
static void add_to_row(builder *b, lf_table_row *r, int64_t i, lf_table *out)
{
    const lf_trace_event *e = &b->t->ev[i];
    r->count++;
    r->flops += e->flops;
    if (lf_trace_cat_is_device(e->cat)) {
        r->self_device_us += b->us[i];
        r->device_total_us += b->us[i];
        out->has_device = 1;
    } else if (lf_tab_is_async(e)) {
        r->cpu_total_us += b->us[i];
    } else {
        r->self_cpu_us += b->us[i] - b->child_cpu[i];
        r->cpu_total_us += b->us[i];
        r->self_device_us += b->own_total[i] - b->child_dev[i];
        r->device_total_us += b->own_total[i];
        r->cpu_mem = add_sat(r->cpu_mem, b->mem_total[2 * i], &b->mem_sat);
        r->self_cpu_mem = add_sat(r->self_cpu_mem, b->mem_self[2 * i], &b->mem_sat);
        r->device_mem = add_sat(r->device_mem, b->mem_total[2 * i + 1], &b->mem_sat);
        r->self_device_mem = add_sat(r->self_device_mem, b->mem_self[2 * i + 1], &b->mem_sat);
    }
}

/* 3. rows in first-seen order, one per name (and kind), or per name and input shapes and stack
 * when grouped so */
static lf_status make_rows(builder *b, lf_table *out)
{
    const lf_trace *t = b->t;
    if (b->frames_n)
        LF_TRY(lf_tab_python_stacks(t, b->frames_n, b->frames, b->nframes, &b->stack_text));
    b->m = 0;
    for (int64_t i = 0; i < b->n; i++)
        if (lf_tab_is_tabled(&t->ev[i]))
            b->idx[b->m++] = i;
    qsort_r(b->idx, (size_t)b->m, sizeof *b->idx, lf_tab_by_time_class, (void *)t);
    for (int64_t k = 0; k < b->m; k++) {
        const int64_t i = b->idx[k];
        const lf_trace_event *e = &t->ev[i];
        const int dev = lf_trace_cat_is_device(e->cat);
        const int ann = e->cat == LF_TC_USER_ANNOTATION || e->cat == LF_TC_GPU_ANNOTATION;
        const char *name = strncmp(e->name, "ProfilerStep#", 13) ? e->name : "ProfilerStep*";
        const char *shapes = e->input_dims && !dev ? e->input_dims : "[]";
        const int64_t r = row_of(b, i, name, shapes, dev * 2 + ann + 4 * lf_tab_is_async(e));
        if (r < 0)
            return LF_ENOMEM;
        add_to_row(b, &b->rows[r], i, out);
    }
    return LF_OK;
}

/* PyTorch's columns (its _build_table's rules; the trace's flags stand for the profiler's), and
 * the footers, which add up every row in the table's order. */
static void choose_columns(const builder *b, lf_table *out)
{
    const lf_table_row *rows = b->rows;
    const lf_trace_meta *meta = &b->t->meta;
    if (meta->profile_memory) {
        out->has_cpu_mem = 1;
        out->has_device_mem = 0;
        for (int64_t k = 0; k < b->n_rows; k++)
            out->has_device_mem |= rows[k].self_device_mem > 0;
    }
    double smallest = 0;
    for (int64_t k = 0; k < b->n_rows; k++)
        if (rows[k].flops > 0 && (smallest == 0 || rows[k].flops < smallest))
            smallest = rows[k].flops;
    if (meta->with_flops && smallest > 0) {
        out->has_flops = 1;
        scale_flops(smallest, &out->flops_scale, &out->flops_unit);
    }
    out->has_input_shapes = b->by_shape;
    out->stack_depth = b->frames_n;
    for (int64_t k = 0; k < b->n_rows; k++) {
        out->self_cpu_total_us += rows[k].self_cpu_us;
        if (rows[k].is_device && !rows[k].is_annotation)
            out->self_device_total_us += rows[k].self_device_us;
    }
}

/* What the table cannot show exactly, said under it. */
static void add_warnings(const builder *b, lf_table *out)
{
    if (b->negative) { /* the names cut and made safe for a terminal, as the table's are */
        char outer[4 * 32 + 8], inner[4 * 32 + 8];
        snprintf(out->warning, sizeof out->warning,
                 "warning: %lld host event%s last%s less than the events inside them (events on one thread "
                 "that overlap without nesting), so their self CPU time is negative; first: \"%s\" holding "
                 "\"%s\"\n",
                 (long long)b->negative, b->negative == 1 ? "" : "s", b->negative == 1 ? "s" : "",
                 lf_term_cut(outer, sizeof outer, b->t->ev[b->neg_parent].name, 32),
                 lf_term_cut(inner, sizeof inner, b->t->ev[b->neg_child].name, 32));
    }
    /* a double holds every nanosecond up to 2^53 ns (104 days); past that, times are rounded */
    int rounded = out->self_cpu_total_us > 9.007e12 || out->self_device_total_us > 9.007e12;
    for (int64_t k = 0; k < b->n_rows && !rounded; k++)
        rounded = b->rows[k].cpu_total_us > 9.007e12 || b->rows[k].device_total_us > 9.007e12;
    if (rounded)
        snprintf(out->warning + strlen(out->warning), sizeof out->warning - strlen(out->warning),
                 "warning: some totals pass 104 days and are not exact to the nanosecond (they add up in doubles, "
                 "as PyTorch's do)\n");
    if (b->mem_sat)
        snprintf(out->warning + strlen(out->warning), sizeof out->warning - strlen(out->warning),
                 "warning: a memory total passed the 64-bit range; it is shown at the range's end, not exact\n");
}

lf_status lf_table_build_opts(const lf_trace *t, const lf_table_opts *opts, lf_table *out)
{
    LF_CHECK_PTR(t, "lf_table_build", "t");
    LF_CHECK_PTR(opts, "lf_table_build", "opts");
    LF_CHECK_PTR(out, "lf_table_build", "out");
    memset(out, 0, sizeof *out);
    if ((unsigned)opts->sort_by >= LF_SORT_KEYS)
        return lf_fail(LF_EINVAL, "lf_table_build: sort key %d is unknown", (int)opts->sort_by);
    if (opts->group_by_stack < 0 || opts->group_by_stack > 64)
        return lf_fail(LF_EINVAL, "lf_table_build: group_by_stack %d is not 0 to 64", opts->group_by_stack);
    builder b;
    lf_status st = builder_init(&b, t, opts);
    if (st == LF_OK) {
        time_events(&b);
        nest_host_events(&b);
        count_memory(&b, out);
        st = charge_device_work(&b);
    }
    if (st == LF_OK) {
        total_device_work(&b);
        st = make_rows(&b, out);
    }
    if (st == LF_OK)
        st = lf_trace_trust_count(t, &out->trust);
    if (st == LF_OK) {
        if (opts->sort_by != LF_SORT_NONE)
            sort_rows(b.rows, b.tmp, b.n_rows, opts->sort_by);
        choose_columns(&b, out);
        add_warnings(&b, out);
        out->rows = b.rows;
        out->n_rows = b.n_rows;
        out->device_label = t->meta.device_label ? t->meta.device_label : "CUDA";
        out->dropped_events = t->meta.dropped_events;
        out->stack_data = b.row_frames;
        out->stack_text = b.stack_text;
        b.row_frames = NULL, b.stack_text = NULL;
        b.rows = NULL;
    }
    builder_free(&b);
    return st;
}

void lf_table_free(lf_table *tab)
{
    if (tab) {
        free(tab->rows);
        free(tab->stack_data), free(tab->stack_text);
        tab->stack_data = NULL, tab->stack_text = NULL;
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
