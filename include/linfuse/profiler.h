/* linfuse profiler: sees every op and kernel the dispatcher runs (through its observer hook),
 * record_function-style ranges and memory events, on one monotonic clock, into per-thread
 * buffers; writes Kineto-schema traces and PyTorch-shaped tables (trace.h).
 *   lf_prof_start -> [lf_prof_step per iteration] -> lf_prof_stop -> lf_prof_export / _table
 * The schedule follows torch.profiler.schedule(wait, warmup, active, repeat, skip_first):
 * steps 0.. are counted from start; with wait=1, warmup=1, active=3 the trace holds
 * ProfilerStep#2..#4. Off, it costs the dispatcher one predictable branch per op.
 * Layer: profiler/ is cross-cutting; it listens to ops/ and tensor/ and builds trace/ data. */
#ifndef LINFUSE_PROFILER_H
#define LINFUSE_PROFILER_H

#include "linfuse/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { LF_PROF_CPU = 1, LF_PROF_DEVICE = 2 }; /* activities */

typedef struct lf_prof_schedule {
    int wait, warmup, active, repeat, skip_first; /* as torch.profiler.schedule; repeat 0 = forever */
} lf_prof_schedule;

typedef struct lf_profiler lf_profiler;

typedef struct lf_prof_opts {
    unsigned activities; /* LF_PROF_CPU | LF_PROF_DEVICE; 0 means both; other bits refused */
    int use_schedule;    /* 0: record from start to stop, no ProfilerStep ranges */
    lf_prof_schedule schedule;
    int record_shapes;  /* Input Dims / Input type / Input Strides on each op */
    int profile_memory; /* [memory] events and the memory columns */
    int with_flops;     /* FLOPs of the kernels an op launched, on the op */
    /* Called when a scheduled window completes (after its last active step); the trace is
     * then available through lf_prof_trace until the next window completes. Nothing is recorded
     * while the window is built and this runs (as in torch.profiler); the next window begins
     * when it returns. May be NULL. */
    void (*on_trace_ready)(lf_profiler *p, void *user);
    void *user;
    /* A rank's identity, written into every trace as Kineto's distributedInfo (lf_comm_describe
     * in linfuse/dist.h gives it): JSON text, copied at start. NULL for a trace of no group. */
    const char *distributed_info;
} lf_prof_opts;

/* One profiler runs at a time in a process (it owns the dispatcher's observer). */
LF_API lf_status lf_prof_start(lf_profiler **out, const lf_prof_opts *o);
/* End the current step and begin the next (advances the schedule). */
LF_API lf_status lf_prof_step(lf_profiler *p);
/* Stop recording; a window in progress is kept as the trace. */
LF_API lf_status lf_prof_stop(lf_profiler *p);
LF_API void lf_prof_free(lf_profiler *p);

/* The last completed window as a trace (owned by the profiler; valid until the next window
 * completes or lf_prof_free). LF_EINVAL when no window was recorded. */
LF_API lf_status lf_prof_trace(lf_profiler *p, const lf_trace **out);
/* Write that trace as Chrome trace JSON (atomically). */
LF_API lf_status lf_prof_export(lf_profiler *p, const char *path);
/* Its key_averages() table; caller frees *text. */
LF_API lf_status lf_prof_table(lf_profiler *p, const lf_table_opts *o, char **text);

/* Events the profiler could not keep (out of memory, or ranges nested deeper than 64). */
LF_API int64_t lf_prof_dropped(const lf_profiler *p);

/* record_function: a named range on this thread ("user_annotation"). Cheap and a no-op while
 * no profiler records. name is copied. */
LF_API lf_status lf_prof_range_push(const char *name);
LF_API lf_status lf_prof_range_pop(void);

/* A range that ends at the end of the enclosing block (GCC/Clang cleanup attribute). */
static inline void lf_prof_scope_end_(int *unused)
{
    (void)unused, (void)lf_prof_range_pop();
}
#define LF_PROF_CAT2_(a, b) a##b
#define LF_PROF_CAT_(a, b)  LF_PROF_CAT2_(a, b)
#define LF_PROF_SCOPE(name)                                                                           \
    __attribute__((cleanup(lf_prof_scope_end_), unused)) int LF_PROF_CAT_(lf_prof_scope_, __LINE__) = \
        (lf_prof_range_push(name), 0)

/* Nanoseconds on the profiler's clock (CLOCK_MONOTONIC): every event uses it. */
LF_API int64_t lf_prof_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif
