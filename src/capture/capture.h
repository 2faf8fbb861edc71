/* What the CUDA device did, as one collector of CUPTI's records describes it to both of its users:
 * `linfuse profile`'s injection library (src/inject/) and the in-process profiler's CUDA event
 * source (src/backend/cuda/cupti_source.c). Records are small plain structs with Kineto's names
 * (a copy is "Memcpy HtoD (Pageable -> Device)"), so everything past the collector is plain C that
 * the CPU tests drive with recorded or made-up records. Beside the activity it records what was
 * open when each CUDA graph node was made: the thread and time (so the NVTX ranges open then), the
 * call that made it, and the innermost Python frames where the process runs Python; and how nodes
 * were copied into executable graphs, so a replayed kernel's node id leads back to its capture
 * (graph_map.h). The collector itself is cupti_collect.c, the one file that knows CUPTI.
 * Layer: capture/, below inject/ and the CUDA event source; above nothing of linfuse's. */
#ifndef LF_CAPTURE_H
#define LF_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lfc_kind {
    LFC_KERNEL,    /* a kernel on a device's stream */
    LFC_MEMCPY,    /* a copy; name "Memcpy HtoD (Pageable -> Device)", as Kineto names them */
    LFC_MEMSET,    /* a set; name "Memset (Device)" */
    LFC_RUNTIME,   /* a CUDA runtime call (cudaLaunchKernel) */
    LFC_DRIVER,    /* a driver call (cuLaunchKernelEx) */
    LFC_MARKER,    /* an NVTX marker: a range's start or end, or an instant */
    LFC_MEMORY,    /* a device allocation or release (cudaMalloc, cudaFree) */
    LFC_OVERHEAD,  /* CUPTI's own cost ("Activity Buffer Request") */
    LFC_NODE,      /* a CUDA graph node made (stream capture or a cudaGraphAdd*Node call) */
    LFC_NODE_COPY, /* a node copied into another graph (instantiation, a clone) or updated from one */
    LFC_STACK,     /* the Python frames of a call (--python-stack), by its correlation id */
    LFC_EXTERNAL,  /* an External id pushed around a call (the in-process profiler's op ids) */
    LFC_KINDS
} lfc_kind;

enum { LFC_MARK_START = 1, LFC_MARK_END = 2, LFC_MARK_INSTANT = 3 };

/* One record. Times are nanoseconds on the records' clock (CUPTI's). Strings are the producer's
 * until a consumer keeps them (lfi_add interns them). */
typedef struct lfc_rec {
    lfc_kind kind;
    const char *name;   /* kernel (mangled is fine), call, copy kind, NVTX message (NULL at an end);
                         * nodes: the call that made them ("cudaLaunchKernel"), NULL when unknown */
    const char *domain; /* markers: the NVTX domain, NULL for the default one */
    const char *stack;  /* nodes, stacks: Python frames, innermost first, one a line
                         * ("model.py(42): forward"); NULL when none were read */
    int64_t start, end; /* markers, memory, nodes, copies: start only */
    uint32_t corr;      /* the correlation id tying a call to the work it queued; markers: the id
                         * pairing a range's start and end; nodes: the call that made them */
    uint32_t pid, tid;  /* calls, markers, nodes, stacks: the process and OS thread */
    uint32_t device, context, stream;
    int32_t grid[3], block[3];     /* kernels */
    int32_t regs;                  /* kernels: registers per thread */
    int32_t static_smem, dyn_smem; /* kernels: shared memory bytes per block */
    uint32_t graph_id;             /* kernels, copies: the CUDA graph it ran in, 0 when none; nodes:
                                    * the graph the node was made in */
    uint64_t graph_node_id;        /* kernels, copies: the node it ran as; nodes, copies: the node */
    uint64_t from_node_id;         /* node copies: the node it was copied or updated from */
    uint64_t bytes;                /* copies, sets, memory */
    uint64_t addr;                 /* memory; externals: the External id */
    int32_t cbid;                  /* calls: CUPTI's callback id */
    int8_t mark;                   /* markers: LFC_MARK_* */
    int8_t alloc;                  /* memory: 1 allocation, -1 release */
} lfc_rec;

/* Where the collector's records go, as they are read out of CUPTI's buffers (one thread at a
 * time) or made in its callbacks (any thread, at once). */
typedef void (*lfc_sink)(void *ctx, const lfc_rec *r);

/* --- the collector (cupti_collect.c): CUPTI for one user in the process --- */

typedef struct lfc_opts {
    lfc_sink sink;
    void *ctx;
    int nvtx;          /* NVTX ranges (CUPTI's markers), recorded throughout */
    int kernels_only;  /* device work, NVTX ranges and graph nodes only: no calls, no memory */
    int python_stack;  /* the Python frames of every launch (LFC_STACK), not only of captures */
    int external_ids;  /* External ids pushed around calls (LFC_EXTERNAL): the in-process profiler */
    int calls_by_name; /* calls worth a row only, chosen by name (lfc_call_wanted); else every call */
    int no_graphs;     /* no graph node callbacks: replayed work stays tied to its launch only */
} lfc_opts;

/* Take CUPTI: buffers, graph node callbacks. 0, or -1 with the reason in why. */
int lfc_start(const lfc_opts *o, char *why, size_t cap);
/* Activity on or off (graph nodes and NVTX markers are recorded throughout: a graph captured
 * before recording starts is still known when it replays during it). */
void lfc_enable(int on);
/* The records of every buffer CUPTI has filled, to the sink (one caller at a time). */
void lfc_drain(void);
/* Everything still in CUPTI's buffers, the unfinished ones too, to the sink. */
void lfc_flush(void);
/* Give CUPTI back: activity and callbacks off (the sink is not called again). */
void lfc_stop(void);
/* Records CUPTI dropped (no buffer to put them in, or a device buffer full). */
int64_t lfc_dropped(void);
/* Buffers another CUPTI client in the process took (after lfc_flush): their records are lost. */
int64_t lfc_buffers_taken(void);
/* Now on the records' clock. */
int64_t lfc_now(void);
/* A file descriptor that becomes readable when CUPTI has handed a buffer over, or -1. */
int lfc_ready_fd(void);
/* Around a call: the External id its records carry (LFC_EXTERNAL), with opts.external_ids. */
void lfc_push_external(uint64_t id);
void lfc_pop_external(void);
/* Ask the driver for the GPUs' properties, once it has started: 1 when known (or there is no GPU
 * to ask about), 0 to ask again later. */
int lfc_devices(void);
/* Kineto's deviceProperties array (NULL when not known) and multiprocessors per device. */
const char *lfc_properties(void);
const int *lfc_sms(int *n);
/* Kineto's "est. achieved occupancy %" of kernel k, or -1. */
int lfc_occupancy(void *ctx, const lfc_rec *k, double blocks_per_sm);
/* A malloc'd readable name for a mangled kernel name, or NULL to keep it. */
char *lfc_demangle(const char *name);

/* Whether a call of this name is worth a row, as Kineto's choice: launches (kernels, graphs),
 * copies, sets, synchronizations, stream waits, occupancy queries, allocations and frees. */
int lfc_call_wanted(const char *name);
/* Whether it queues device work (a launch, a copy, a set): its Python frames name the line. */
int lfc_call_launches(const char *name);
/* Whether the collector watches it for graph nodes: what launches, the cudaGraphAdd*Node family,
 * and what begins or ends a stream capture. */
int lfc_call_watched(const char *name);

/* --- what the callbacks record, in plain C (graph_nodes.c): cupti_collect.c calls these with
 * what it reads from CUPTI's callback data, and the CPU tests call them with recorded
 * sequences --- */

/* A thread enters or leaves a call (name, its correlation id) that may make graph nodes; a node
 * records the thread's outermost open call. capture: 1 for a call that begins a stream capture, -1
 * for one that ends it, else 0: a capture counts as open from the successful return (ok) of its
 * beginning to the return of its end, and while any is open, launches read their Python frames. */
void lfc_call_enter(const char *name, uint32_t corr, int capture);
void lfc_call_exit(int ok);
/* A node was made (node and graph ids as CUPTI numbers them) on this thread, now: its record,
 * with the call and Python frames of the thread's open call, to the sink. */
void lfc_node_made(uint64_t node, uint32_t graph, int64_t now);
/* Node `node` was copied (instantiation, a clone) or updated from `from`, now. */
void lfc_node_copied(uint64_t node, uint64_t from, int64_t now);
/* Where the callbacks' records go, and whether every launch reads its Python frames; set by
 * lfc_start, and by the tests. */
void lfc_nodes_to(lfc_sink sink, void *ctx, int python_stack);
/* Whether the collector records activity now (lfc_enable): every launch's frames are read only
 * then (a capture's always: its replays may come later). */
void lfc_nodes_recording(int on);
/* Stream captures open now, as the callbacks saw them begin and end (what makes launches read
 * their frames). */
int lfc_captures_open(void);
/* This thread's OS id and process id, as CUPTI's records give them. */
uint32_t lfc_tid(void);
uint32_t lfc_pid(void);

/* --- Python's frames (python_frames.c) --- */

/* The innermost `depth` Python frames of this thread, one a line, "file(line): function",
 * innermost first, into buf; the number of frames, 0 where the process runs no Python or the
 * thread has none. Read through CPython's own C API, found in the process, only while the thread
 * holds the GIL: it takes it when it has let it go (a call into C that released it, as PyTorch's
 * ops do), never from a thread Python does not know. */
int lfc_python_frames(char *buf, size_t cap, int depth);

#ifdef __cplusplus
}
#endif
#endif
