/* What the collector's two files share: a session's records copied out for a build, and the
 * NVTX ranges made from its markers. Layer: inject/. */
#ifndef LF_INJECT_IMPL_H
#define LF_INJECT_IMPL_H

#include "inject/inject.h"

/* Every record kept so far, copied (names stay the session's); caller frees *out. */
lf_status lfi_snapshot(lfi_session *s, lfi_rec **out, int64_t *n);
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
lf_status lfi_ranges(lfi_rec *marks, int64_t n, int64_t last, lfi_range **out, int64_t *n_out);

/* The innermost kept range (ext != 0) holding time t on thread (pid, tid), or -1. */
int64_t lfi_range_at(const lfi_range *r, int64_t n, uint32_t pid, uint32_t tid, int64_t t);

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
