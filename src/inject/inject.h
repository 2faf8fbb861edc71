/* The injection library of `linfuse profile` (liblinfuse_inject.so): what it records, in its own
 * small records filled from CUPTI's (inject_cupti.c), and the collector that keeps them and turns
 * them into one Kineto-schema lf_trace per process (collect.c). The collector is plain C over
 * these records and the public trace API, so the CPU tests feed it recorded or made-up events
 * through the same path the GPU's records take. Layer: inject/, above trace/ (public API only). */
#ifndef LF_INJECT_H
#define LF_INJECT_H

#include <stdint.h>

#include "linfuse/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lfi_kind {
    LFI_KERNEL,   /* a kernel on a device's stream */
    LFI_MEMCPY,   /* a copy; name "Memcpy HtoD (Pageable -> Device)", as Kineto names them */
    LFI_MEMSET,   /* a set; name "Memset (Device)" */
    LFI_RUNTIME,  /* a CUDA runtime call (cudaLaunchKernel) */
    LFI_DRIVER,   /* a driver call (cuLaunchKernelEx) */
    LFI_MARKER,   /* an NVTX marker: a range's start or end, or an instant */
    LFI_MEMORY,   /* a device allocation or release (cudaMalloc, cudaFree) */
    LFI_OVERHEAD, /* CUPTI's own cost ("Activity Buffer Request") */
    LFI_KINDS
} lfi_kind;

enum { LFI_MARK_START = 1, LFI_MARK_END = 2, LFI_MARK_INSTANT = 3 };

/* One record. Times are nanoseconds on the records' clock (CUPTI's); lfi_meta.to_epoch maps them
 * to the epoch. Strings are copied by lfi_add. */
typedef struct lfi_rec {
    lfi_kind kind;
    const char *name;   /* kernel (mangled is fine), call, copy kind, NVTX message (NULL at an end) */
    const char *domain; /* markers: the NVTX domain, NULL for the default one */
    int64_t start, end; /* markers and memory: start only */
    uint32_t corr;      /* the correlation id tying a call to the work it queued; markers: the id
                         * pairing a range's start and end */
    uint32_t pid, tid;  /* calls, markers: the process and OS thread */
    uint32_t device, context, stream;
    int32_t grid[3], block[3];     /* kernels */
    int32_t regs;                  /* kernels: registers per thread */
    int32_t static_smem, dyn_smem; /* kernels: shared memory bytes per block */
    uint32_t graph_id;             /* kernels, copies: the CUDA graph it ran in, 0 when none */
    uint64_t graph_node_id;
    uint64_t bytes; /* copies, sets, memory */
    uint64_t addr;  /* memory */
    int32_t cbid;   /* calls: CUPTI's callback id */
    int8_t mark;    /* markers: LFI_MARK_* */
    int8_t alloc;   /* memory: 1 allocation, -1 release */
} lfi_rec;

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
/* Keep one record (thread-safe: CUPTI hands buffers over on its own threads). Calls that neither
 * launch, copy, set, wait, allocate nor free are not kept (lfi_call_wanted). A record that cannot
 * be kept (out of memory) is counted in lfi_lost. */
void lfi_add(lfi_session *s, const lfi_rec *r);
int64_t lfi_count(lfi_session *s);
int64_t lfi_lost(lfi_session *s);
/* Whether a call of this name is worth a row, as Kineto's choice: launches (kernels, graphs),
 * copies, sets, synchronizations, stream waits, occupancy queries, allocations and frees. */
int lfi_call_wanted(const char *name);

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
    int (*occupancy)(void *ctx, const lfi_rec *k, double blocks_per_sm);
    /* A malloc'd readable name for a mangled kernel name, or NULL to keep it; NULL: none. */
    char *(*demangle)(const char *name);
    void *ctx;
} lfi_meta;

/* What lfi_build kept, for messages. */
typedef struct lfi_stats {
    int64_t ranges, steps, kernels, calls, events;
    int64_t windows; /* --capture-range/--steps: the stretches of time kept (0: none seen) */
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
