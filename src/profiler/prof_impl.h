/* Inside the profiler: the session, the per-thread record buffers it owns, the clock events
 * are stamped on, and what each of its files offers the others:
 *   clock.c    stamps (TSC or CLOCK_MONOTONIC) and their mapping to CLOCK_MONOTONIC ns (clock.h)
 *   buffers.c  threads' slots (who is inside a hook), per-thread record chunks and arenas
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

enum { REC_OP, REC_RANGE, REC_KERNEL, REC_MEM, REC_STEPS };
enum { LF_REC_CHUNK = 8192, LF_ARENA_CHUNK = 1 << 20, LF_MAX_DEPTH = 64, LF_MAX_ARGS = 6 };

/* One recorded event (80 bytes: recording streams these through memory, so they are kept small).
 * Strings point at static op names, interned kernel names, or into the thread's arena. */
typedef struct lf_rec {
    uint8_t kind;
    uint8_t n_args;
    uint8_t device;
    uint8_t stream;
    uint8_t unit; /* kernels and memory: which GPU (its ordinal); 0 on the CPU */
    uint8_t pad_;
    int16_t op;
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
        struct { /* REC_STEPS: what a graph launch (the op of ext_id) replays, in the arena */
            const lf_replay_step *steps;
            int64_t n;
        } s;
    } u;
} lf_rec;

_Static_assert(sizeof(lf_rec) <= 80, "records stay small: recording streams them through memory");

/* One op argument as recorded: enough for Input Dims / Input type / Input Strides (a scalar's
 * value, truncated to an integer, in shape[0]). */
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

/* A thread's records for one window (one generation of the session): registered with the
 * session on that thread's first event of the generation. Only its thread writes it, inside a
 * hook (no lock); the session reads it once no thread can be writing it (lf_prof_quiesce). */
typedef struct lf_tbuf {
    struct lf_tbuf *next;
    int64_t tid;
    lf_rec_chunk *head, *tail;
    lf_arena *arena;
    int64_t lost;
} lf_tbuf;

/* --- the session --- */

enum { ST_NONE, ST_WARMUP, ST_RECORD, ST_RECORD_AND_SAVE };

struct lf_profiler {
    lf_prof_opts o;
    uint64_t serial;      /* this session among all sessions of the process */
    _Atomic uint64_t gen; /* the buffers' generation: changes when a window is saved */
    _Atomic int state;    /* ST_*, read by every hook */
    pthread_mutex_t mu;   /* guards the buffer list (taken once per thread per generation) */
    lf_tbuf *bufs;        /* the current generation's buffers */
    int64_t step;
    int stopped;
    int in_callback; /* on_trace_ready is running: step and stop refuse */
    /* the device whose own events (CUPTI) this session collects, and its source; NULL when none */
    const lf_device_events *source;
    int64_t window_start;
    int64_t mono0, real0; /* the same instant on both clocks */
    int64_t tick0;        /* and on the event stamps' clock */
    _Atomic int64_t lost;
    lf_trace *trace; /* the last completed window */
    char *dist_info; /* distributedInfo for every window's trace (a copy), or NULL */
};

/* The session recording now (one per process), or NULL. */
extern _Atomic(lf_profiler *) lf_prof_active;

/* --- threads (buffers.c) ---
 * A thread inside a hook holds the session: its slot's count is odd from lf_prof_enter to
 * lf_prof_leave. A session that swaps its buffers or ends waits, slot by slot, until every count
 * that was odd has moved on (lf_prof_quiesce), so no buffer or session is freed under a writer,
 * and the hot path takes no lock. Slots live in a process-wide list and are reused when their
 * thread exits. */
typedef struct lf_prof_slot {
    struct lf_prof_slot *next;
    _Atomic uint64_t seq; /* odd while its thread is inside a hook */
    atomic_int taken;     /* a live thread owns it */
} lf_prof_slot;

/* What a thread has open (ops, ranges, the step's range): its stack lives with the thread, not
 * in a buffer, so it survives a window's swap; a record pointer is good only while gen is the
 * thread's current generation (older buffers belong to a saved window). */
/* OPEN_REPLAY: an op a compiled plan's step stands for (not dispatched): a range in the trace
 * that owns its kernels as an op does */
enum { OPEN_OP, OPEN_RANGE, OPEN_STEP, OPEN_REPLAY };
typedef struct lf_open {
    lf_rec *rec;    /* NULL: not recorded (the schedule was not recording, or memory ran out) */
    uint64_t gen;   /* the generation rec lives in */
    int64_t ext_id; /* the op's id, for the kernels it launches (0 when not recorded) */
    uint8_t kind;   /* OPEN_* */
    uint8_t pushed; /* an External id was pushed to the device source for it */
} lf_open;

typedef struct lf_tls {
    lf_prof_slot *slot;
    uint64_t session; /* the serial of the session this thread's stack and buffer belong to */
    uint64_t gen;     /* the generation of buf */
    lf_tbuf *buf;
    int64_t next_ext; /* ids for this thread's events, from a block */
    int64_t kernel_t0;
    int depth;
    lf_open open[LF_MAX_DEPTH];
} lf_tls;
extern _Thread_local lf_tls lf_prof_tls;

/* Enter a hook: the session recording now, with the calling thread counted inside until
 * lf_prof_leave (call it only when this returned a session), or NULL (nothing to do). A new
 * session clears the thread's stack. */
lf_profiler *lf_prof_enter(void);
void lf_prof_leave(void);
/* Wait until every thread that was inside a hook when this was called has left it. */
void lf_prof_quiesce(void);

/* This thread's buffer in p's current generation, registered on first use; NULL (counted as
 * lost) when memory ran out. Inside a hook only. */
lf_tbuf *lf_prof_thread_buf_slow(lf_profiler *p, uint64_t gen);
static inline lf_tbuf *lf_prof_thread_buf(lf_profiler *p)
{
    uint64_t g = atomic_load(&p->gen);
    if (__builtin_expect(lf_prof_tls.gen == g && lf_prof_tls.buf, 1))
        return lf_prof_tls.buf;
    return lf_prof_thread_buf_slow(p, g);
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
static inline int64_t lf_prof_next_id(void)
{
    if (__builtin_expect((lf_prof_tls.next_ext & 0xfffff) == 0, 0))
        lf_prof_tls.next_ext = lf_prof_id_block();
    return lf_prof_tls.next_ext++;
}

/* n bytes (16-aligned) or a copy of s in b's arena, NULL when memory ran out. */
void *lf_prof_arena_alloc(lf_tbuf *b, size_t n);
const char *lf_prof_arena_str(lf_tbuf *b, const char *s);

/* A device-timed kernel holds a backend handle until resolved; records dropped unread spend
 * theirs here. */
void lf_prof_spend_timing(lf_rec *r);
/* Free a list of buffers, spending every handle still held. */
void lf_prof_free_bufs(lf_tbuf *b);
/* A new generation number (never 0, never reused). */
uint64_t lf_prof_new_generation(void);

/* --- record.c --- */

/* Push an entry on this thread's stack (inside a hook): a record of kind REC_OP or REC_RANGE
 * named name opened now when the session records and name is not NULL, else an entry that
 * records nothing. The name is kept by pointer (a static op name), or with copy_name copied into
 * the arena of the very buffer the record goes into (a buffer of another generation may be freed
 * by a window's save at any time). NULL when deeper than the stack (counted as lost). */
lf_open *lf_prof_push(lf_profiler *p, uint8_t kind, const char *name, int op, int copy_name);
/* Install (on) or remove the profiler's hooks in the dispatcher and the allocator. */
void lf_prof_set_hooks(const lf_profiler *p, int on);
/* Whether the schedule records events now (warm-up included). */
static inline int lf_prof_recording(const lf_profiler *p)
{
    return atomic_load_explicit(&p->state, memory_order_relaxed) != ST_NONE;
}

/* --- replay_ops.c: a compiled plan's replayed kernels under the ops that made them --- */

/* A graph launch's steps (REC_STEPS), and its kernels as the device source reports them. */
typedef struct lf_replay_stash lf_replay_stash;
/* For the n launches of a window (NULL when none, or out of memory: then nothing is stashed). */
lf_replay_stash *lf_prof_replay_stash(const lf_rec *const *launches, int64_t n);
/* Whether e (device work of such a launch: its External id is the launch's op) was kept back,
 * copied, to be added with its steps' ops; 0 to add it as it is. */
int lf_prof_replay_take(lf_replay_stash *s, const lf_trace_event *e);
/* The kernels kept back into t, each launch's under its steps' ops: a gpu_user_annotation per op
 * call over its kernels (when the launch ran one kernel a step; else as they are); then free. */
lf_status lf_prof_replay_finish(lf_replay_stash *s, lf_trace *t);

/* --- window.c --- */

/* [t_begin, t_end] (stamps) of the buffers in bufs, and the device source's events, as a new
 * trace. No thread may be writing bufs. */
lf_status lf_prof_build_trace(lf_profiler *p, lf_tbuf *bufs, int64_t t_begin, int64_t t_end, lf_trace **out);

#endif
