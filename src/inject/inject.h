/* The injection library of `linfuse profile` (liblinfuse_inject.so): a session keeps the records
 * the CUPTI collector hands over (capture/capture.h's lfc_rec: device work, calls, NVTX markers,
 * CUDA graph nodes and their copies, Python frames) and turns them into one Kineto-schema lf_trace
 * per process (collect.c, build.c, replay.c). It is plain C over those records and the public trace
 * API, so the CPU tests feed it recorded or made-up events through the same path the GPU's records
 * take. Layer: inject/, above capture/ and trace/ (public API only). */
#ifndef LF_INJECT_H
#define LF_INJECT_H

#include <stdint.h>

#include "capture/capture.h"
#include "linfuse/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a session keeps: --delay/--duration as a time window, --capture-range, --steps,
 * --kernels-only (docs/profile.md). */
typedef struct lfi_opts {
    int64_t lo, hi;            /* keep what starts in [lo, hi] (records' clock); hi < 0: no end */
    const char *capture_range; /* "NAME" or "NAME@DOMAIN": only inside such NVTX ranges; NULL: all */
    int64_t step_lo, step_hi;  /* only inside ProfilerStep#N ranges, step_lo <= N <= step_hi; -1: all */
    int kernels_only;          /* device work and NVTX ranges only: no calls, no memory events */
} lfi_opts;

typedef struct lfi_session lfi_session;

lf_status lfi_create(lfi_session **out, const lfi_opts *o);
void lfi_free(lfi_session *s);
/* Keep one record (thread-safe: CUPTI hands buffers over on its own threads, and its callbacks
 * run on the program's). Calls that neither launch, copy, set, wait, allocate nor free are not
 * kept (lfc_call_wanted). A record that cannot be kept (out of memory) is counted in lfi_lost.
 * An lfc_sink: lfi_add(s, r) is sink(ctx = s, r). */
void lfi_add(void *s, const lfc_rec *r);
int64_t lfi_count(lfi_session *s);
int64_t lfi_lost(lfi_session *s);

/* What the trace's header and the kernels' arguments need from outside the records. */
typedef struct lfi_meta {
    int64_t to_epoch;              /* a record's time + to_epoch = epoch nanoseconds */
    int64_t pid;                   /* the process (names its threads from /proc when it is this one) */
    const char *process_name;      /* the program's name */
    const char *trace_name;        /* the file the trace goes to */
    const char *device_properties; /* Kineto's deviceProperties array as JSON text, or NULL */
    const char *distributed_info;  /* Kineto's distributedInfo object as JSON text, or NULL */
    const int *sms;                /* multiprocessors of device i (n_devices of them), for the
                                    * kernels' "blocks per SM" */
    int n_devices;
    int64_t dropped; /* records the tracer dropped (CUPTI's count) */
    /* The kernel's estimated achieved occupancy (%), Kineto's estimate, or -1; NULL: not given. */
    int (*occupancy)(void *ctx, const lfc_rec *k, double blocks_per_sm);
    /* A malloc'd readable name for a mangled kernel name, or NULL to keep it; NULL: none. */
    char *(*demangle)(const char *name);
    void *ctx;
} lfi_meta;

/* What lfi_build kept, for messages. */
typedef struct lfi_stats {
    int64_t ranges, steps, kernels, calls, events;
    int64_t windows; /* --capture-range/--steps: the stretches of time kept (0: none seen) */
    /* CUDA graphs: the work replayed, and what of it was traced back to its capture */
    int64_t replayed, replayed_unknown;
    int64_t replayed_ns, ranged_ns, framed_ns;
} lfi_stats;

/* The trace of everything kept so far: NVTX ranges as user_annotation on their thread (a range
 * that does not nest with its thread's others on a lane of its own), each call and the work it
 * queued tagged with the innermost range open on its thread when it was made (External id) and
 * tied by ac2g flows, memory events with running totals, CUPTI's overhead; then filtered to what
 * started inside the window (for device work: its launch) and inside the capture ranges and steps.
 * The session stays usable. stats may be NULL. */
lf_status lfi_build(lfi_session *s, const lfi_meta *m, lf_trace **out, lfi_stats *stats);

/* "A:B" (steps A to B, both kept), "A:" (A on), ":B" or "N": 1, with *lo and *hi; 0 otherwise. */
int lfi_parse_steps(const char *s, int64_t *lo, int64_t *hi);

#ifdef __cplusplus
}
#endif
#endif
