/* The table's rooms share these: which events are rows and their orders (table_rows.c), used
 * by table.c to build the table. Private to src/trace. Layer: trace/. */
#ifndef LF_TRACE_TABLE_IMPL_H
#define LF_TRACE_TABLE_IMPL_H

#include "trace/trace_impl.h"

/* Whether an event is a row of PyTorch's table (memory instants, Python frames, profiler
 * bookkeeping and a few tiny ops are not). */
int lf_tab_is_tabled(const lf_trace_event *e);
/* c10d's work spans ("nccl:all_reduce"): async, no part of the op tree. */
int lf_tab_is_async(const lf_trace_event *e);
/* Orders over event indices for qsort_r (ctx: the trace): start (the longer first at equal
 * starts), then by thread first, or by kind at equal times (PyTorch's listing order). */
int lf_tab_by_time(const void *pa, const void *pb, void *ctx);
int lf_tab_by_track_time(const void *pa, const void *pb, void *ctx);
int lf_tab_by_time_class(const void *pa, const void *pb, void *ctx);
/* For each host event, its depth innermost enclosing Python frames on its thread: frames[i *
 * depth + k], nf[i] of them; an event that has none of those and carries its own stack (a
 * replayed kernel's capture, a launch's frames) gets that stack's lines, copied into one text
 * (*text: NULL when there were none; the caller frees it). */
lf_status lf_tab_python_stacks(const lf_trace *t, int depth, const char **frames, unsigned char *nf, char **text);

#endif
