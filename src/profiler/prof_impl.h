/* Inside the profiler: per-thread record buffers and the session they belong to.
 * Layer: profiler/. */
#ifndef LF_PROF_IMPL_H
#define LF_PROF_IMPL_H

#include <stdatomic.h>

#include "core/core.h"
#include "linfuse/ops.h"
#include "linfuse/profiler.h"

enum { REC_OP, REC_RANGE, REC_KERNEL, REC_MEM };
enum { LF_REC_CHUNK = 8192, LF_ARENA_CHUNK = 1 << 20, LF_MAX_DEPTH = 64, LF_MAX_ARGS = 6 };

/* One recorded event (80 bytes: recording streams these through memory, so they are kept small).
 * Strings point at static op names, interned kernel names, or into the thread's arena. */
typedef struct lf_rec {
    uint8_t kind;
    uint8_t n_args;
    uint8_t device;
    uint8_t stream;
    int32_t op;
    int64_t t0, t1; /* ns on lf_prof_now_ns; t1 = -1 while open */
    int64_t ext_id; /* this op's or range's id; for kernels, the launching op's */
    const char *name;
    double flops; /* kernels; ops add their kernels' FLOPs (with_flops) */
    union {
        const struct lf_rec_arg *args; /* ops with record_shapes: n_args entries in the arena */
        struct {
            int64_t corr; /* flow id */
            double bytes;
            void *timing; /* the backend's device-timing handle, or NULL */
            int (*resolve)(void *timing, int64_t *begin_ns, int64_t *end_ns);
        } k;
        struct {
            int64_t bytes, total, reserved, addr;
        } m;
    } u;
} lf_rec;

_Static_assert(sizeof(lf_rec) <= 80, "records stay small: recording streams them through memory");

/* One op argument as recorded: enough for Input Dims / Input type / Input Strides. */
typedef struct lf_rec_arg {
    int8_t kind; /* 0 absent, 1 tensor, 2 scalar */
    int8_t ndim;
    int8_t dtype;
    int64_t shape[4], stride[4];
} lf_rec_arg;

typedef struct lf_rec_chunk {
    struct lf_rec_chunk *next;
    _Atomic int64_t n; /* published count: a reader sees only complete records */
    lf_rec rec[LF_REC_CHUNK];
} lf_rec_chunk;

typedef struct lf_arena {
    struct lf_arena *next;
    size_t used;
    char data[LF_ARENA_CHUNK];
} lf_arena;

/* A thread's buffer, registered with the session on that thread's first event. Only its
 * thread writes it (no lock); the session reads it after recording stops. */
typedef struct lf_tbuf {
    struct lf_tbuf *next;
    int64_t tid;
    lf_rec_chunk *head, *tail;
    lf_arena *arena;
    lf_rec *open[LF_MAX_DEPTH]; /* ops and ranges begun and not yet ended */
    int depth;
    int64_t kernel_t0;
    int64_t next_ext; /* ids for this thread's events, from a block taken from the session */
    int64_t lost;
} lf_tbuf;

#endif
