/* Inside an lf_trace: the event array, a string arena, names of tracks. Layer: trace/. */
#ifndef LF_TRACE_IMPL_H
#define LF_TRACE_IMPL_H

#include "core/core.h"
#include "linfuse/trace.h"

typedef struct lf_arena_chunk {
    struct lf_arena_chunk *next;
    size_t used, cap;
    char data[];
} lf_arena_chunk;

typedef struct lf_track_name {
    int64_t pid, tid; /* tid LF_TRACK_PROCESS: the name of process pid */
    const char *name;
} lf_track_name;
#define LF_TRACK_PROCESS INT64_MIN
/* The largest time (or duration) a trace holds, in microseconds: 1e13, about 115 days (Kineto's
 * times count from a base at most 3 months back). The reader refuses what lies beyond, and a merge
 * that would write beyond it refuses too; the bound keeps every ts + dur far inside int64 ns. */
#define LF_TRACE_MAX_US 1e13
#define LF_TRACE_MAX_NS ((int64_t)10000000000000000)

/* A merged trace's lanes (ranks.c): a rank's GPU streams and other device tracks become threads
 * LF_TRACE_LANE_TID0 + k of its process. Such a tid is no stream: the writer leaves "stream" to
 * the event's extra_args, where the merge put the original. */
#define LF_TRACE_LANE_TID0 ((int64_t)1000000000)

/* Whether the writer (json_write.c) writes arg key of e from e's fields: such an arg read from a
 * file is not kept in extra_args too (it would be written twice). */
int lf_trace_writer_makes(const lf_trace_event *e, const char *key);
/* Whether e's extra_args begin with a "stream" of their own (lf_json_other_args and a merge put
 * one first; the writer then writes none from the track). */
int lf_trace_args_lead_with_stream(const lf_trace_event *e);
/* v as the shortest JSON real that reads back as v ("0.1", "2.0", "1e+19") into buf (32 bytes
 * or more). */
void lf_json_real(char *buf, size_t cap, double v);
/* Name track (pid, tid), or process pid with tid LF_TRACK_PROCESS. */
lf_status lf_trace_name_track(lf_trace *t, int64_t pid, int64_t tid, const char *name);

struct lf_trace {
    lf_trace_event *ev;
    int64_t n, cap;
    lf_arena_chunk *arena;
    lf_track_name *tracks;
    int64_t n_tracks, cap_tracks;
    lf_trace_meta meta;
    int merging;          /* made by lf_trace_merge_begin: inputs are added to it */
    int64_t merge_latest; /* the latest clock base of the inputs added (base_ns is the earliest) */
};

/* Each event's time on the host's clock of events: a device event's launch time (its runtime
 * call by correlation, else the op by External id, else its own start), any other event's own
 * start. Device work runs after the host moved on, so steps count device work by launch.
 * Caller frees; NULL when out of memory. */
int64_t *lf_trace_launch_times(const lf_trace *t);

/* The ProfilerStep#N ranges of a trace, sorted by start, and their total time. */
typedef struct lf_span {
    int64_t lo, hi;
} lf_span;
lf_status lf_trace_step_spans(const lf_trace *t, lf_span **spans, int64_t *n, int64_t *total_ns);
/* Whether time ts falls in one of the sorted spans (binary search). */
int lf_span_contains(const lf_span *s, int64_t n, int64_t ts);

/* A string-keyed hash map (strmap.c): (key, kind) -> val. Keys are borrowed. */
typedef struct lf_strmap_entry {
    const char *key;
    int64_t kind;
    int64_t val; /* -1 in a new entry */
} lf_strmap_entry;
typedef struct lf_strmap {
    lf_strmap_entry *s;
    int64_t cap, n;
} lf_strmap;
int lf_strmap_init(lf_strmap *m, int64_t expected); /* 0 when out of memory */
void lf_strmap_free(lf_strmap *m);
/* The entry for (key, kind), added (val -1) when missing; NULL when out of memory. */
lf_strmap_entry *lf_strmap_get(lf_strmap *m, const char *key, int64_t kind);
/* The entry for (key, kind), or NULL. */
const lf_strmap_entry *lf_strmap_find(const lf_strmap *m, const char *key, int64_t kind);

/* An integer-keyed hash map (strmap.c): key (never 0) -> val, fixed at room for n keys. */
typedef struct lf_imap {
    int64_t *keys, *vals;
    int64_t cap;
} lf_imap;
int lf_imap_init(lf_imap *m, int64_t n); /* 0 when out of memory (free keys and vals still) */
/* The value of key, added as -1 when missing (at most n keys in all). */
int64_t *lf_imap_slot(lf_imap *m, int64_t key);

/* Draw ProfilerStep#step (LF_TRACE_FIRST_STEP: the first) as SVG to f (svg.c): 0, -1 on a write
 * error, -2 when there is no such step; standalone adds the XML declaration a file needs (an SVG
 * inside HTML has none). */
int lf_trace_svg_draw(const lf_trace *t, int step, FILE *f, const char *path, int standalone);
/* Whether e marks a step: a ProfilerStep#... range (user_annotation, as prof.step() records it
 * and as a legacy trace's step reads, json_read.c); and N of a ProfilerStep#N range, or -1 for any
 * other event (trace.c). */
int lf_trace_is_step(const lf_trace_event *e);
int64_t lf_trace_step_number(const lf_trace_event *e);
/* LF_OK where t is one process's trace; for a merged one (lf_trace_merge) LF_EINVAL saying that
 * fn reads one process's steps: the ranks' steps taken as one would sum or average what no rank
 * ran (trace.c). The step profile and the breakdown ask it; the tools go rank by rank. */
lf_status lf_trace_one_process(const lf_trace *t, const char *fn);
/* The failure for a step t does not have, naming the steps it has (fn begins the message). */
lf_status lf_trace_step_missing(const lf_trace *t, int step, const char *fn);

/* A table as CSV or JSON (table_export.c). */
lf_status lf_table_format_data(const lf_table *tab, const lf_table_opts *o, char **text);

/* A duration as PyTorch's _format_time prints it: seconds, milliseconds or microseconds by
 * magnitude, three decimals ("2.314ms", "23.104us"). Returns buf. */
const char *lf_fmt_time(char *buf, size_t cap, double ns);

#endif
