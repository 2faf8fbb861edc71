/* nsys stats' CUDA reports over a Kineto trace (docs/traces.md, "nsys's reports"): kernels,
 * copies and sets summed by name, CUDA calls by name, each launch's API, queue and kernel time,
 * and every piece of device work in time order. Device work is Kineto's kernel, gpu_memcpy and
 * gpu_memset events; CUDA calls its cuda_runtime and cuda_driver events; a kernel meets its
 * launch by correlation id, as nsys joins them. Layer: trace/. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "trace/stats_table.h"

static int is_work(const lf_trace_event *e)
{
    return e->cat == LF_TC_KERNEL || e->cat == LF_TC_MEMCPY || e->cat == LF_TC_MEMSET;
}

static int is_call(const lf_trace_event *e)
{
    return e->cat == LF_TC_RUNTIME || e->cat == LF_TC_DRIVER;
}

/* Total time first, then fewer instances, then the name (column 8 or the last). */
static int by_total_then_name(const stats_cell *a, const stats_cell *b, int name_col)
{
    if (a[1].v != b[1].v)
        return a[1].v > b[1].v ? -1 : 1;
    if (a[2].v != b[2].v)
        return a[2].v < b[2].v ? -1 : 1;
    return strcmp(a[name_col].s, b[name_col].s);
}

static int by_total_name8(const stats_cell *a, const stats_cell *b)
{
    return by_total_then_name(a, b, 8);
}

static int by_total_size(const stats_cell *a, const stats_cell *b)
{
    if (a[0].v != b[0].v)
        return a[0].v > b[0].v ? -1 : 1;
    return strcmp(a[7].s, b[7].s);
}

/* A summary report: the events keep() takes, grouped by name_of(), each group's durations (or
 * sizes, with sizes) summed as nsys's summaries are, one row a group. */
static lf_status summary_report(const lf_trace *tr, stats_table *t, int (*keep)(const lf_trace_event *),
                                const char *(*name_of)(stats_table *, const lf_trace_event *), int sizes)
{
    lf_strmap names;
    if (!lf_strmap_init(&names, 64))
        return lf_fail(LF_ENOMEM, "trace stats: out of memory");
    const char **by_group = malloc((size_t)(tr->n + 1) * sizeof *by_group);
    stats_groups g = {0};
    int64_t groups = 0;
    for (int64_t i = 0; i < tr->n && by_group; i++) {
        const lf_trace_event *e = &tr->ev[i];
        if (!keep(e) || e->dur_ns < 0)
            continue;
        const char *name = name_of(t, e);
        lf_strmap_entry *ent = lf_strmap_get(&names, name, 0);
        if (!ent) {
            g.oom = 1;
            break;
        }
        if (ent->val < 0)
            by_group[ent->val = groups++] = name;
        stats_groups_add(&g, ent->val, sizes ? e->bytes : (double)e->dur_ns);
    }
    stats_groups_done(&g);
    double all = 0;
    for (int64_t i = 0; i < g.n; i++)
        all += g.items[i].v;
    int64_t id;
    stats_sum s;
    while (by_group && stats_groups_next(&g, &id, &s)) {
        stats_cell *r = stats_table_row(t);
        if (!r)
            break;
        const double cells[] = {all > 0 ? 100.0 * s.total / all : 0, s.total, (double)s.n, s.avg, s.med, s.min,
                                s.max, s.sd};
        const int off = sizes ? 1 : 0; /* the size report has no share column */
        for (int c = off; c < 8; c++)
            r[c - off] = (stats_cell){.v = cells[c]};
        r[8 - off] = (stats_cell){.s = by_group[id]};
    }
    const int oom = g.oom || !by_group;
    stats_groups_free(&g), lf_strmap_free(&names), free(by_group);
    if (oom || t->oom)
        return lf_fail(LF_ENOMEM, "trace stats: out of memory");
    stats_table_sort(t, sizes ? by_total_size : by_total_name8);
    return LF_OK;
}

static int is_kernel(const lf_trace_event *e)
{
    return e->cat == LF_TC_KERNEL;
}

static int is_mem(const lf_trace_event *e)
{
    return e->cat == LF_TC_MEMCPY || e->cat == LF_TC_MEMSET;
}

static const char *own_name(stats_table *t, const lf_trace_event *e)
{
    (void)t;
    return e->name;
}

static const char *mem_name(stats_table *t, const lf_trace_event *e)
{
    (void)t;
    return stats_mem_op_name(e);
}

/* nsys's API names: a trailing "_v" and four characters (a version, cudaLaunchKernel_v7000) gone. */
static const char *api_name(stats_table *t, const lf_trace_event *e)
{
    const size_t n = strlen(e->name);
    if (n > 6 && e->name[n - 6] == '_' && e->name[n - 5] == 'v') {
        char *cut = strndup(e->name, n - 6);
        const char *kept = cut ? stats_table_str(t, cut) : "";
        free(cut);
        return kept;
    }
    return e->name;
}

static const stats_col SUM_COLS[] = {{"Time (%)", SC_DEC1}, {"Total Time (ns)", SC_INT}, {"Instances", SC_INT},
                                     {"Avg (ns)", SC_DEC1}, {"Med (ns)", SC_DEC1},       {"Min (ns)", SC_INT},
                                     {"Max (ns)", SC_INT},  {"StdDev (ns)", SC_DEC1},    {"Name", SC_TEXT}};

lf_status stats_cuda_gpu_kern_sum(const lf_trace *tr, stats_table *t)
{
    stats_table_init(t, SUM_COLS, 9);
    return summary_report(tr, t, is_kernel, own_name, 0);
}

lf_status stats_cuda_gpu_mem_time_sum(const lf_trace *tr, stats_table *t)
{
    static const stats_col cols[] = {{"Time (%)", SC_DEC1}, {"Total Time (ns)", SC_INT}, {"Count", SC_INT},
                                     {"Avg (ns)", SC_DEC1}, {"Med (ns)", SC_DEC1},       {"Min (ns)", SC_INT},
                                     {"Max (ns)", SC_INT},  {"StdDev (ns)", SC_DEC1},    {"Operation", SC_TEXT}};
    stats_table_init(t, cols, 9);
    return summary_report(tr, t, is_mem, mem_name, 0);
}

lf_status stats_cuda_gpu_mem_size_sum(const lf_trace *tr, stats_table *t)
{
    static const stats_col cols[] = {{"Total (MB)", SC_MB}, {"Count", SC_INT},   {"Avg (MB)", SC_MB},
                                     {"Med (MB)", SC_MB},   {"Min (MB)", SC_MB}, {"Max (MB)", SC_MB},
                                     {"StdDev (MB)", SC_MB}, {"Operation", SC_TEXT}};
    stats_table_init(t, cols, 8);
    return summary_report(tr, t, is_mem, mem_name, 1);
}

lf_status stats_cuda_api_sum(const lf_trace *tr, stats_table *t)
{
    static const stats_col cols[] = {{"Time (%)", SC_DEC1}, {"Total Time (ns)", SC_INT}, {"Num Calls", SC_INT},
                                     {"Avg (ns)", SC_DEC1}, {"Med (ns)", SC_DEC1},       {"Min (ns)", SC_INT},
                                     {"Max (ns)", SC_INT},  {"StdDev (ns)", SC_DEC1},    {"Name", SC_TEXT}};
    stats_table_init(t, cols, 9);
    return summary_report(tr, t, is_call, api_name, 0);
}

/* Each kernel's launch call, by correlation id: an index into tr's events for each event, -1 where
 * none (filled for kernels only). */
static int64_t *launches(const lf_trace *tr)
{
    int64_t *of = malloc((size_t)(tr->n + 1) * sizeof *of);
    lf_imap by_corr = {0};
    if (!of || !lf_imap_init(&by_corr, tr->n + 1)) {
        free(of), free(by_corr.keys), free(by_corr.vals);
        return NULL;
    }
    for (int64_t i = 0; i < tr->n; i++)
        if (is_call(&tr->ev[i]) && tr->ev[i].correlation)
            *lf_imap_slot(&by_corr, stats_corr_key(tr, &tr->ev[i])) = i;
    for (int64_t i = 0; i < tr->n; i++) {
        of[i] = -1;
        if (is_work(&tr->ev[i]) && tr->ev[i].correlation)
            of[i] = *lf_imap_slot(&by_corr, stats_corr_key(tr, &tr->ev[i]));
    }
    free(by_corr.keys), free(by_corr.vals);
    return of;
}

typedef struct exec_row {
    int64_t pid, tid, dev;
    const char *api, *kernel;
    double tot, api_t, queue, k; /* queue < 0: none (the kernel began before its call returned) */
} exec_row;

static int by_exec_group(const void *a, const void *b)
{
    const exec_row *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    const int c = strcmp(x->api, y->api);
    return c ? c : strcmp(x->kernel, y->kernel);
}

static int by_tavg(const stats_cell *a, const stats_cell *b)
{
    return a[5].v != b[5].v ? (a[5].v > b[5].v ? -1 : 1) : strcmp(a[26].s, b[26].s);
}

lf_status stats_cuda_kern_exec_sum(const lf_trace *tr, stats_table *t)
{
    static const stats_col cols[] = {
        {"PID", SC_INT},          {"TID", SC_INT},          {"DevId", SC_INT},        {"Count", SC_INT},
        {"QCount", SC_INT},       {"TAvg (ns)", SC_DEC1},   {"TMed (ns)", SC_DEC1},   {"TMin (ns)", SC_INT},
        {"TMax (ns)", SC_INT},    {"TStdDev (ns)", SC_DEC1}, {"AAvg (ns)", SC_DEC1},   {"AMed (ns)", SC_DEC1},
        {"AMin (ns)", SC_INT},    {"AMax (ns)", SC_INT},    {"AStdDev (ns)", SC_DEC1}, {"QAvg (ns)", SC_DEC1},
        {"QMed (ns)", SC_DEC1},   {"QMin (ns)", SC_INT},    {"QMax (ns)", SC_INT},    {"QStdDev (ns)", SC_DEC1},
        {"KAvg (ns)", SC_DEC1},   {"KMed (ns)", SC_DEC1},   {"KMin (ns)", SC_INT},    {"KMax (ns)", SC_INT},
        {"KStdDev (ns)", SC_DEC1}, {"API Name", SC_TEXT},   {"Kernel Name", SC_TEXT}};
    stats_table_init(t, cols, 27);
    int64_t *call = launches(tr);
    exec_row *rows = malloc((size_t)(tr->n + 1) * sizeof *rows);
    double *v = malloc((size_t)(tr->n + 1) * sizeof *v);
    if (!call || !rows || !v) {
        free(call), free(rows), free(v);
        return lf_fail(LF_ENOMEM, "trace stats: out of memory");
    }
    int64_t n = 0;
    for (int64_t i = 0; i < tr->n; i++) {
        const lf_trace_event *k = &tr->ev[i];
        if (k->cat != LF_TC_KERNEL || call[i] < 0)
            continue;
        const lf_trace_event *a = &tr->ev[call[i]];
        const int64_t a_end = a->ts_ns + a->dur_ns, k_end = k->ts_ns + k->dur_ns;
        rows[n++] = (exec_row){a->pid,
                               a->tid,
                               k->device >= 0 ? k->device : k->pid,
                               api_name(t, a),
                               k->name,
                               (double)((a_end > k_end ? a_end : k_end) - a->ts_ns),
                               (double)a->dur_ns,
                               k->ts_ns >= a_end ? (double)(k->ts_ns - a_end) : -1,
                               (double)k->dur_ns};
    }
    qsort(rows, (size_t)n, sizeof *rows, by_exec_group);
    for (int64_t lo = 0, hi; lo < n && !t->oom; lo = hi) {
        for (hi = lo + 1; hi < n && !by_exec_group(&rows[lo], &rows[hi]); hi++)
            ;
        stats_cell *r = stats_table_row(t);
        if (!r)
            break;
        r[0] = (stats_cell){.v = (double)rows[lo].pid}, r[1] = (stats_cell){.v = (double)rows[lo].tid};
        r[2] = (stats_cell){.v = (double)rows[lo].dev}, r[3] = (stats_cell){.v = (double)(hi - lo)};
        for (int which = 0; which < 4; which++) { /* total, API, queue, kernel */
            int64_t m = 0;
            for (int64_t j = lo; j < hi; j++) {
                const double x = which == 0 ? rows[j].tot : which == 1 ? rows[j].api_t
                                                         : which == 2 ? rows[j].queue
                                                                      : rows[j].k;
                if (which != 2 || x >= 0)
                    v[m++] = x;
            }
            stats_sum s;
            stats_summarize(v, m, &s);
            if (which == 2)
                r[4] = (stats_cell){.v = (double)m};
            const double five[] = {s.avg, s.med, s.min, s.max, s.sd};
            for (int c = 0; c < 5 && m > 0; c++)
                r[5 + 5 * which + c] = (stats_cell){.v = five[c]};
        }
        r[25] = (stats_cell){.s = rows[lo].api}, r[26] = (stats_cell){.s = rows[lo].kernel};
    }
    free(call), free(rows), free(v);
    if (t->oom)
        return lf_fail(LF_ENOMEM, "trace stats: out of memory");
    stats_table_sort(t, by_tavg);
    return LF_OK;
}

/* The GPUs' names by index, from the trace's deviceProperties; "" where it names none. */
static const char *gpu_name(json_t *props, int64_t dev)
{
    size_t i;
    json_t *d;
    json_array_foreach(props, i, d)
    {
        if (json_integer_value(json_object_get(d, "id")) == dev && json_is_string(json_object_get(d, "name")))
            return json_string_value(json_object_get(d, "name"));
    }
    return "";
}

static int by_start(const stats_cell *a, const stats_cell *b)
{
    return (a[0].v > b[0].v) - (a[0].v < b[0].v);
}

static void put_ints(stats_cell *r, json_t *arr)
{
    for (int i = 0; i < 3 && json_is_array(arr); i++)
        if (json_is_integer(json_array_get(arr, (size_t)i)))
            r[i] = (stats_cell){.v = (double)json_integer_value(json_array_get(arr, (size_t)i))};
}

lf_status stats_cuda_gpu_trace(const lf_trace *tr, stats_table *t)
{
    static const stats_col cols[] = {
        {"Start (ns)", SC_INT},   {"Duration (ns)", SC_INT}, {"CorrId", SC_INT},          {"GrdX", SC_INT},
        {"GrdY", SC_INT},         {"GrdZ", SC_INT},          {"BlkX", SC_INT},            {"BlkY", SC_INT},
        {"BlkZ", SC_INT},         {"Reg/Trd", SC_INT},       {"StcSMem (MB)", SC_MB},     {"DymSMem (MB)", SC_MB},
        {"Bytes (MB)", SC_MB},    {"Throughput (MB/s)", SC_DEC1}, {"SrcMemKd", SC_TEXT}, {"DstMemKd", SC_TEXT},
        {"Device", SC_TEXT},      {"Ctx", SC_INT},           {"GreenCtx", SC_INT},        {"Strm", SC_INT},
        {"Name", SC_TEXT}};
    stats_table_init(t, cols, 21);
    json_t *props = tr->meta.device_properties ? json_loads(tr->meta.device_properties, 0, NULL) : NULL;
    char buf[512], src[64], dst[64];
    for (int64_t i = 0; i < tr->n && !t->oom; i++) {
        const lf_trace_event *e = &tr->ev[i];
        if (!is_work(e) || e->dur_ns < 0)
            continue;
        stats_cell *r = stats_table_row(t);
        if (!r)
            break;
        r[0] = (stats_cell){.v = (double)e->ts_ns}, r[1] = (stats_cell){.v = (double)e->dur_ns};
        if (e->correlation)
            r[2] = (stats_cell){.v = (double)e->correlation};
        json_t *args = stats_args(e);
        if (e->cat == LF_TC_KERNEL) {
            put_ints(r + 3, json_object_get(args, "grid"));
            put_ints(r + 6, json_object_get(args, "block"));
            json_t *regs = json_object_get(args, "registers per thread");
            if (json_is_integer(regs))
                r[9] = (stats_cell){.v = (double)json_integer_value(regs)};
            /* Kineto keeps static and dynamic shared memory as one number: neither column has it */
        } else {
            r[12] = (stats_cell){.v = e->bytes};
            const double per_second = e->dur_ns > 0 ? (double)(int64_t)(1e9 / (double)e->dur_ns) : 0;
            r[13] = (stats_cell){.v = e->bytes * per_second / 1e6};
            stats_mem_kinds(e, src, dst, sizeof src);
            if (src[0])
                r[14] = (stats_cell){.s = stats_table_str(t, src)};
            if (dst[0])
                r[15] = (stats_cell){.s = stats_table_str(t, dst)};
        }
        const int64_t dev = e->device >= 0 ? e->device : e->pid;
        const char *gpu = props ? gpu_name(props, dev) : "";
        snprintf(buf, sizeof buf, "%s%s(%lld)", gpu, gpu[0] ? " " : "", (long long)dev);
        r[16] = (stats_cell){.s = stats_table_str(t, buf)};
        json_t *ctx = json_object_get(args, "context"), *strm = json_object_get(args, "stream");
        if (json_is_integer(ctx))
            r[17] = (stats_cell){.v = (double)json_integer_value(ctx)};
        r[19] = (stats_cell){.v = json_is_integer(strm) ? (double)json_integer_value(strm) : (double)e->tid};
        r[20] = (stats_cell){.s = e->cat == LF_TC_KERNEL ? e->name : stats_mem_op_name(e)};
        json_decref(args);
    }
    json_decref(props);
    stats_table_sort(t, by_start);
    return t->oom ? lf_fail(LF_ENOMEM, "trace stats: out of memory") : LF_OK;
}
