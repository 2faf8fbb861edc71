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
    double *us = calloc((size_t)(n + 1), sizeof *us);               /* each event's time, PyTorch's way */
    double *child_cpu = calloc((size_t)(n + 1), sizeof *child_cpu); /* its direct children's times */
    double *kern = calloc((size_t)(n + 1), sizeof *kern);           /* an op's own device work */
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
        if (lf_tab_is_tabled(&t->ev[i]) && !lf_trace_cat_is_device(t->ev[i].cat) && !lf_tab_is_async(&t->ev[i]))
            idx[m++] = i;
    qsort_r(idx, (size_t)m, sizeof *idx, lf_tab_by_track_time, (void *)t);
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
        if (!lf_tab_is_tabled(e) || !lf_trace_cat_is_device(e->cat) || e->cat == LF_TC_GPU_ANNOTATION || !e->ext_id)
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
#define CLOSE(x)                                    \
    do {                                            \
        int64_t x_ = (x);                           \
        own_total[x_] = kern[x_] + child_dev[x_];   \
        if (parent[x_] >= 0)                        \
            child_dev[parent[x_]] += own_total[x_]; \
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
        if ((st = lf_tab_python_stacks(t, frames_n, frames, nframes)) != LF_OK) {
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
        if (lf_tab_is_tabled(&t->ev[i]))
            idx[m++] = i;
    qsort_r(idx, (size_t)m, sizeof *idx, lf_tab_by_time_class, (void *)t);
    int64_t n_rows = 0;
    for (int64_t k = 0; k < m; k++) {
        const int64_t i = idx[k];
        const lf_trace_event *e = &t->ev[i];
        int dev = lf_trace_cat_is_device(e->cat);
        int ann = e->cat == LF_TC_USER_ANNOTATION || e->cat == LF_TC_GPU_ANNOTATION, async = lf_tab_is_async(e);
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
    if (negative) { /* the names cut and made safe for a terminal, as the table's are */
        char outer[4 * 32 + 8], inner[4 * 32 + 8];
        snprintf(out->warning, sizeof out->warning,
                 "warning: %lld host event%s last%s less than the events inside them (events on one thread "
                 "that overlap without nesting), so their self CPU time is negative; first: \"%s\" holding "
                 "\"%s\"\n",
                 (long long)negative, negative == 1 ? "" : "s", negative == 1 ? "s" : "",
                 lf_term_cut(outer, sizeof outer, t->ev[neg_parent].name, 32),
                 lf_term_cut(inner, sizeof inner, t->ev[neg_child].name, 32));
    }
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
