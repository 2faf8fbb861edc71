/* `trace stats --report comm_sum` (linfuse's own report; nsys has none like it): each collective
 * across the ranks of a merged trace (or in one rank's trace), the NCCL kernels of one process
 * group and collective matched across ranks in order, with how far apart the ranks started it
 * (skew), the time it took once the last rank arrived, and its algorithm and bus bandwidth from its
 * size, by NCCL's own formulas (nccl-tests' PERFORMANCE.md: bus bandwidth = algorithm bandwidth x
 * 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for the rest).
 * The collective's name, size, type and group come from its kernel's args (PyTorch's traces carry
 * them: "Collective name", "In msg nelems", "dtype", "Process Group Name"). Layer: trace/. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "trace/stats_table.h"

typedef struct coll {
    int64_t rank, lo, hi, nth;
    const char *name, *kind, *group; /* kernel name; collective; process group */
    double bytes;
    int64_t size; /* the group's size */
} coll;

static int dtype_bytes(const char *t)
{
    static const struct {
        const char *name;
        int bytes;
    } k[] = {{"BFloat16", 2},     {"Half", 2},           {"Float8", 1},        {"Float", 4},  {"Double", 8},
             {"ComplexHalf", 4},  {"ComplexFloat", 8},   {"ComplexDouble", 16}, {"Long", 8},   {"Int", 4},
             {"Short", 2},        {"Byte", 1},           {"Char", 1},          {"Bool", 1}};
    for (size_t i = 0; t && i < sizeof k / sizeof k[0]; i++)
        if (!strncmp(t, k[i].name, strlen(k[i].name)))
            return k[i].bytes;
    return 0;
}

/* NCCL's bus bandwidth factor for n ranks. */
static double bus_factor(const char *kind, int64_t n)
{
    if (n < 2)
        return 1;
    const double f = (double)(n - 1) / (double)n;
    if (strstr(kind, "allreduce") || strstr(kind, "all_reduce"))
        return 2 * f;
    if (strstr(kind, "gather") && strstr(kind, "all"))
        return f;
    if (strstr(kind, "reduce_scatter") || strstr(kind, "reducescatter") || strstr(kind, "alltoall") ||
        strstr(kind, "all_to_all"))
        return f;
    return 1;
}

static int by_group_rank_lo(const void *a, const void *b)
{
    const coll *x = a, *y = b;
    int c = strcmp(x->group, y->group);
    if (!c)
        c = strcmp(x->kind, y->kind);
    if (c)
        return c;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static int by_group_nth(const void *a, const void *b)
{
    const coll *x = a, *y = b;
    int c = strcmp(x->group, y->group);
    if (!c)
        c = strcmp(x->kind, y->kind);
    if (c)
        return c;
    return (x->nth > y->nth) - (x->nth < y->nth);
}

static int by_start(const stats_cell *a, const stats_cell *b)
{
    return (a[0].v > b[0].v) - (a[0].v < b[0].v);
}

lf_status stats_comm_sum(const lf_trace *tr, stats_table *t)
{
    static const stats_col cols[] = {
        {"Start (ns)", SC_INT},        {"Collective", SC_TEXT},     {"Process Group", SC_TEXT},
        {"Ranks", SC_INT},             {"Group Size", SC_INT},      {"Size (MB)", SC_MB},
        {"Start Skew (ns)", SC_INT},   {"Time (ns)", SC_INT},       {"Max Dur (ns)", SC_INT},
        {"AlgBW (GB/s)", SC_DEC3},     {"BusBW (GB/s)", SC_DEC3},   {"Name", SC_TEXT}};
    stats_table_init(t, cols, 12);
    coll *c = malloc((size_t)(tr->n + 1) * sizeof *c);
    if (!c)
        return lf_fail(LF_ENOMEM, "trace stats: out of memory");
    int64_t n = 0;
    for (int64_t i = 0; i < tr->n && !t->oom; i++) {
        const lf_trace_event *e = &tr->ev[i];
        if (e->cat != LF_TC_KERNEL || strncmp(e->name, "nccl", 4) || e->dur_ns < 0)
            continue;
        json_t *a = stats_args(e);
        const char *kind = json_string_value(json_object_get(a, "Collective name"));
        const char *group = json_string_value(json_object_get(a, "Process Group Name"));
        const int gather = kind && strstr(kind, "gather") != NULL;
        json_t *elems = json_object_get(a, gather ? "Out msg nelems" : "In msg nelems");
        const int item = dtype_bytes(json_string_value(json_object_get(a, "dtype"))); /* 0: a type not known */
        c[n] = (coll){.rank = tr->meta.merged_ranks ? e->pid : tr->meta.rank,
                      .lo = e->ts_ns,
                      .hi = e->ts_ns + e->dur_ns,
                      .name = e->name,
                      .kind = stats_table_str(t, kind ? kind : e->name),
                      .group = stats_table_str(t, group ? group : ""),
                      .bytes = json_is_integer(elems) && item ? (double)json_integer_value(elems) * item : -1,
                      .size = json_is_integer(json_object_get(a, "Group size"))
                                  ? json_integer_value(json_object_get(a, "Group size"))
                                  : (tr->meta.merged_ranks ? tr->meta.merged_ranks : tr->meta.world_size)};
        n++;
        json_decref(a);
    }
    /* the i-th collective of a group and kind on each rank is one collective */
    qsort(c, (size_t)n, sizeof *c, by_group_rank_lo);
    for (int64_t i = 0, k = 0; i < n; i++) {
        const int same = i && !strcmp(c[i].group, c[i - 1].group) && !strcmp(c[i].kind, c[i - 1].kind) &&
                         c[i].rank == c[i - 1].rank;
        k = same ? k + 1 : 0;
        c[i].nth = k;
    }
    qsort(c, (size_t)n, sizeof *c, by_group_nth);
    for (int64_t lo = 0, hi; lo < n && !t->oom; lo = hi) {
        int64_t first = c[lo].lo, last = c[lo].lo, end = c[lo].hi, longest = 0;
        for (hi = lo; hi < n && !by_group_nth(&c[lo], &c[hi]); hi++) {
            first = c[hi].lo < first ? c[hi].lo : first;
            last = c[hi].lo > last ? c[hi].lo : last;
            end = c[hi].hi > end ? c[hi].hi : end;
            longest = c[hi].hi - c[hi].lo > longest ? c[hi].hi - c[hi].lo : longest;
        }
        stats_cell *r = stats_table_row(t);
        if (!r)
            break;
        const int64_t ranks = hi - lo, size = c[lo].size > 0 ? c[lo].size : ranks;
        const double time = (double)(end - last);
        r[0] = (stats_cell){.v = (double)first}, r[1] = (stats_cell){.s = c[lo].kind};
        r[2] = (stats_cell){.s = c[lo].group}, r[3] = (stats_cell){.v = (double)ranks};
        r[4] = (stats_cell){.v = (double)size};
        if (c[lo].bytes >= 0)
            r[5] = (stats_cell){.v = c[lo].bytes};
        if (ranks > 1)
            r[6] = (stats_cell){.v = (double)(last - first)};
        r[7] = (stats_cell){.v = time}, r[8] = (stats_cell){.v = (double)longest};
        if (c[lo].bytes >= 0 && time > 0) {
            const double alg = c[lo].bytes / time; /* bytes per ns: GB/s */
            r[9] = (stats_cell){.v = alg}, r[10] = (stats_cell){.v = alg * bus_factor(c[lo].kind, size)};
        }
        r[11] = (stats_cell){.s = c[lo].name};
    }
    free(c);
    if (t->oom)
        return lf_fail(LF_ENOMEM, "trace stats: out of memory");
    stats_table_sort(t, by_start);
    return LF_OK;
}
