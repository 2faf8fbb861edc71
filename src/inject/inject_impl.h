/* What the collector's two files share: a session's records copied out for a build, and the
 * NVTX ranges made from its markers. Layer: inject/. */
#ifndef LF_INJECT_IMPL_H
#define LF_INJECT_IMPL_H

#include "inject/inject.h"

/* Every record kept so far, copied (names stay the session's); caller frees *out. */
lf_status lfi_snapshot(lfi_session *s, lfc_rec **out, int64_t *n);
const lfi_opts *lfi_session_opts(const lfi_session *s);

/* An NVTX range: a start marker and its end (ranges.c pairs them). */
typedef struct lfi_range {
    const char *name, *domain;
    uint32_t pid, tid;
    int64_t start, end;
    int64_t ext;    /* its External id once kept, 0 when left out */
    int lane;       /* 0: its thread's track; k > 0: a lane of its own beside it (it does not nest) */
    int64_t parent; /* the range it nests in on its lane, or -1 */
} lfi_range;

enum { LFI_MAX_LANES = 8 };

/* The ranges of n markers (sorted by time here): a start opens one, an end with its id closes it
 * (an end whose id is unknown closes the latest range its thread opened in that domain, as a pop
 * does); ranges never closed end at last. Then laid out per thread: sorted by (pid, tid, lane,
 * start), each on the first lane where it nests, with its parent there. */
lf_status lfi_ranges(lfc_rec *marks, int64_t n, int64_t last, lfi_range **out, int64_t *n_out);

/* The innermost range holding time t on thread (pid, tid), of the kept ones (ext != 0) only when
 * kept (else any: a graph captured outside the window is attributed all the same), or -1. */
int64_t lfi_range_at(const lfi_range *r, int64_t n, uint32_t pid, uint32_t tid, int64_t t, int kept);

/* --- what device work belongs to (replay.c) --- */

typedef struct lfi_attr lfi_attr;

/* Over a build's records (all: every kind; its graph nodes, copies and Python frames are read)
 * and its ranges (laid out, kept ones with their ext): NULL when out of memory. */
lfi_attr *lfi_attr_create(const lfc_rec *all, int64_t n, const lfi_range *ranges, int64_t n_ranges);
void lfi_attr_free(lfi_attr *a);

/* What one kernel, copy or set belongs to. */
typedef struct lfi_work_info {
    int64_t ext;             /* the External id of its innermost range (instance), 0 when none */
    const char *range;       /* a replayed one: its innermost capture-time range, NULL when none */
    const char *stack;       /* the Python frames of its launch or of its node's capture, or NULL */
    const lfc_rec *captured; /* a replayed one: the record of its node's making, NULL when unknown */
    int replayed_unknown;    /* replayed, but its node leads to no record */
} lfi_work_info;

/* Device work d, launched by call (NULL when unknown), into out; noted for its GPU spans. */
void lfi_attr_work(lfi_attr *a, const lfc_rec *d, const lfc_rec *call, lfi_work_info *out);
/* The Python frames of call corr (--python-stack), or NULL. */
const char *lfi_attr_stack(const lfi_attr *a, uint32_t corr);

/* A range instance's span over its work on one stream: a gpu_user_annotation. */
typedef struct lfi_gpu_span {
    const char *name;
    uint32_t device, stream;
    int64_t start, end; /* the records' clock */
    int64_t ext;        /* the instance's External id: the range's own, or its replay's */
    uint32_t replay;    /* the replaying call's correlation id, 0 for work launched directly */
} lfi_gpu_span;

/* Every span of the work seen, to emit; LF_ENOMEM when memory ran out on the way. */
lf_status lfi_attr_spans(lfi_attr *a, void (*emit)(void *ctx, const lfi_gpu_span *s), void *ctx);

/* Replayed work, as attributed. */
typedef struct lfi_attr_stats {
    int64_t replayed, unknown;                 /* replayed kernels, copies, sets; with no record */
    int64_t replayed_ns, ranged_ns, framed_ns; /* their time; under a capture-time range; with frames */
} lfi_attr_stats;

lfi_attr_stats lfi_attr_get_stats(const lfi_attr *a);

/* Closed stretches of time, sorted and apart. */
typedef struct lfi_span {
    int64_t lo, hi;
} lfi_span;

typedef struct lfi_spans {
    lfi_span *v;
    int64_t n;
} lfi_spans;

/* The union of the ranges keep(r) says yes to; 0 out of memory. */
int lfi_spans_of(const lfi_range *r, int64_t n, int (*keep)(const lfi_range *r, const void *ctx), const void *ctx,
                 lfi_spans *out);
/* a ∩ b into a; 0 out of memory. */
int lfi_spans_meet(lfi_spans *a, const lfi_spans *b);
int lfi_spans_has(const lfi_spans *s, int64_t t);

#endif
