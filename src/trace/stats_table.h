/* The tables of `linfuse trace stats` (stats.c, stats_cuda.c, stats_nvtx.c): nsys stats' reports,
 * by its names, columns and units, over a Kineto trace. A report fills a stats_table of typed
 * cells; stats_table.c prints it as nsys prints it (a column table with thousands separators),
 * as CSV or as JSON, and summarizes groups of durations as nsys's scripts do. Private to
 * src/trace. Layer: trace/. */
#ifndef LF_TRACE_STATS_TABLE_H
#define LF_TRACE_STATS_TABLE_H

#include "trace/trace_impl.h"

/* How a column's cells print: a whole number, a number to one decimal (nsys rounds averages,
 * medians, deviations and shares so), one to three decimals, megabytes (10^6 bytes) to three
 * decimals, or text. */
typedef enum { SC_INT, SC_DEC1, SC_DEC3, SC_MB, SC_TEXT } stats_kind;

typedef struct stats_col {
    const char *name; /* the header, units and all: "Total Time (ns)" */
    stats_kind kind;
} stats_col;

typedef struct stats_cell {
    double v;
    const char *s; /* SC_TEXT: borrowed from the trace, a literal, or stats_table_str's */
    int blank;     /* no value (a grid for a copy): empty in every format */
} stats_cell;

typedef struct stats_table {
    const stats_col *cols;
    int ncols;
    stats_cell *cells; /* nrows x ncols */
    int64_t nrows, cap;
    char **owned; /* strings the table made */
    int64_t n_owned, cap_owned;
    int oom;
} stats_table;

void stats_table_init(stats_table *t, const stats_col *cols, int ncols);
void stats_table_free(stats_table *t);
/* A new row (its cells blank), or NULL when out of memory (t->oom set). */
stats_cell *stats_table_row(stats_table *t);
/* A copy of s the table owns until it is freed ("" when out of memory, t->oom set). */
const char *stats_table_str(stats_table *t, const char *s);
/* Sort the rows: cmp over two rows' first cells. */
void stats_table_sort(stats_table *t, int (*cmp)(const stats_cell *a, const stats_cell *b));

enum { STATS_TEXT, STATS_CSV, STATS_JSON };
/* The table in a format, appended to b. */
void stats_table_put(const stats_table *t, int format, lf_sbuf *b);

/* A group's durations (or sizes) as nsys's summaries give them: their sum, count, mean, median
 * (the mean of the middle two for an even count), least, most and sample standard deviation
 * (n - 1; 0 for one). v is sorted in place. */
typedef struct stats_sum {
    double total, avg, med, min, max, sd;
    int64_t n;
} stats_sum;
void stats_summarize(double *v, int64_t n, stats_sum *out);

/* Values grouped by a key: stats_groups_add each (group, value), then stats_groups_done sorts them
 * so each group's values lie together; stats_groups_next walks the groups. */
typedef struct stats_item {
    int64_t group;
    double v;
} stats_item;
typedef struct stats_groups {
    stats_item *items;
    int64_t n, cap, at;
    double *scratch;
    int oom;
} stats_groups;
void stats_groups_add(stats_groups *g, int64_t group, double v);
void stats_groups_done(stats_groups *g);
/* The next group's id and summary; 0 when there are no more. */
int stats_groups_next(stats_groups *g, int64_t *group, stats_sum *sum);
void stats_groups_free(stats_groups *g);

/* The reports, each over a trace into t (columns set by the report). */
lf_status stats_cuda_gpu_kern_sum(const lf_trace *tr, stats_table *t);
lf_status stats_cuda_gpu_mem_time_sum(const lf_trace *tr, stats_table *t);
lf_status stats_cuda_gpu_mem_size_sum(const lf_trace *tr, stats_table *t);
lf_status stats_cuda_api_sum(const lf_trace *tr, stats_table *t);
lf_status stats_cuda_kern_exec_sum(const lf_trace *tr, stats_table *t);
lf_status stats_cuda_gpu_trace(const lf_trace *tr, stats_table *t);
lf_status stats_nvtx_sum(const lf_trace *tr, stats_table *t);
lf_status stats_nvtx_gpu_proj_sum(const lf_trace *tr, stats_table *t);
lf_status stats_comm_sum(const lf_trace *tr, stats_table *t);

/* The key that joins device work to its launching call: the correlation id, within the rank in a
 * merged trace (each rank counts its own from 1; there the rank is every event's pid). */
int64_t stats_corr_key(const lf_trace *t, const lf_trace_event *e);

/* An event's args that no field holds (its extra_args) as a JSON object, or NULL: the caller
 * json_decref()s it. */
struct json_t;
struct json_t *stats_args(const lf_trace_event *e);

/* nsys's name of a copy or a set from Kineto's ("Memcpy HtoD (Pageable -> Device)" ->
 * "[CUDA memcpy Host-to-Device]", "Memset (Device)" -> "[CUDA memset]"), and the memory kinds
 * Kineto's name gives (src "Pageable", dst "Device"; a set's kind in src). */
const char *stats_mem_op_name(const lf_trace_event *e);
void stats_mem_kinds(const lf_trace_event *e, char *src, char *dst, size_t cap);

#endif
