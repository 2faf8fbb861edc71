/* Inside the profiler: the session, the per-thread record buffers it owns, the clock events
 * are stamped on, and what each of its files offers the others:
 *   clock.c    stamps (TSC or CLOCK_MONOTONIC) and their mapping to CLOCK_MONOTONIC ns (clock.h)
 *   buffers.c  per-thread record chunks and arenas, registered with the session
 *   record.c   the dispatcher's and allocator's hooks, ranges: the hot path
 *   window.c   a recorded window (and the device's own events) -> an lf_trace
 *   profiler.c the session and its schedule
 * Layer: profiler/. */
#ifndef LF_PROF_IMPL_H
#define LF_PROF_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend/backend_impl.h"
#include "core/core.h"
#include "linfuse/ops.h"
#include "linfuse/profiler.h"
#include "profiler/clock.h"

/* --- records --- */

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
    int64_t t0, t1; /* stamps (clock.c); t1 = -1 while open */
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

/* --- the session --- */

enum { ST_NONE, ST_WARMUP, ST_RECORD, ST_RECORD_AND_SAVE };

struct lf_profiler {
    lf_prof_opts o;
    uint64_t gen;
    pthread_mutex_t mu; /* guards the buffer list (taken once per thread per session) */
    lf_tbuf *bufs;
    int64_t step;
    int state;
    int stopped;
    int step_range_open;
    lf_rec *step_rec; /* the open ProfilerStep#N range */
    /* the device whose own events (CUPTI) this session collects, and its source; NULL when none */
    const lf_device_events *source;
    int64_t window_start;
    int64_t mono0, real0; /* the same instant on both clocks */
    int64_t tick0;        /* and on the event stamps' clock */
    _Atomic int64_t lost;
    lf_trace *trace; /* the last completed window */
};

/* The session recording now (one per process), or NULL. */
extern _Atomic(lf_profiler *) lf_prof_active;

/* --- buffers.c --- */

extern _Thread_local lf_tbuf *lf_prof_tls_buf;
extern _Thread_local uint64_t lf_prof_tls_gen;

/* This thread's buffer in p's current generation, registered on first use; NULL (counted as
 * lost) when memory ran out. */
lf_tbuf *lf_prof_thread_buf_slow(lf_profiler *p);
static inline lf_tbuf *lf_prof_thread_buf(lf_profiler *p)
{
    if (__builtin_expect(lf_prof_tls_gen == p->gen && lf_prof_tls_buf, 1))
        return lf_prof_tls_buf;
    return lf_prof_thread_buf_slow(p);
}

/* Append a chunk to b (once per LF_REC_CHUNK records); 0 when memory ran out. */
int lf_prof_grow(lf_tbuf *b);

/* The next free record of b, or NULL (counted as lost) when memory ran out. Not visible to
 * readers until lf_prof_publish. */
static inline lf_rec *lf_prof_rec_new(lf_tbuf *b)
{
    int64_t n = atomic_load_explicit(&b->tail->n, memory_order_relaxed);
    if (__builtin_expect(n == LF_REC_CHUNK, 0)) {
        if (!lf_prof_grow(b)) {
            b->lost++;
            return NULL;
        }
        n = 0;
    }
    return &b->tail->rec[n];
}

/* Only the owning thread writes n, so a release store (a plain move on x86) publishes. */
static inline void lf_prof_publish(lf_tbuf *b)
{
    int64_t n = atomic_load_explicit(&b->tail->n, memory_order_relaxed);
    atomic_store_explicit(&b->tail->n, n + 1, memory_order_release);
}

/* External ids come from per-thread blocks of 2^20, so taking one is not an atomic add. */
int64_t lf_prof_id_block(void);
static inline int64_t lf_prof_next_id(lf_tbuf *b)
{
    if (__builtin_expect((b->next_ext & 0xfffff) == 0, 0))
        b->next_ext = lf_prof_id_block();
    return b->next_ext++;
}

/* n bytes (16-aligned) or a copy of s in b's arena, NULL when memory ran out. */
void *lf_prof_arena_alloc(lf_tbuf *b, size_t n);
const char *lf_prof_arena_str(lf_tbuf *b, const char *s);

/* A device-timed kernel holds a backend handle until resolved; records dropped unread spend
 * theirs here. */
void lf_prof_spend_timing(lf_rec *r);
/* Free a list of buffers, spending every handle still held. */
void lf_prof_free_bufs(lf_tbuf *b);
/* Start a new generation: every thread registers a fresh buffer on its next event. */
uint64_t lf_prof_new_generation(void);

/* --- record.c --- */

/* Open an op or range record on this thread (its end stamped by lf_prof_close_rec). */
lf_rec *lf_prof_open_rec(lf_profiler *p, int kind, const char *name, int op);
void lf_prof_close_rec(lf_profiler *p);
/* Install (on) or remove p's hooks in the dispatcher and the allocator. */
void lf_prof_set_recording(lf_profiler *p, int on);

/* --- window.c --- */

/* [t_begin, t_end] (stamps) of p's buffers, and the device source's events, as a new trace. */
lf_status lf_prof_build_trace(lf_profiler *p, int64_t t_begin, int64_t t_end, lf_trace **out);

#endif
