/* Inside the backend layer: the table each device fills (as ggml's backends do), the internal
 * work descriptions (pointwise kernels, fused chains, graphs), the device's own event source
 * the profiler drains, and the one place kernels are named and their FLOPs and bytes counted.
 * The ops layer reaches a device only through this table; the profiler asks it for events.
 * Layer: backend/. */
#ifndef LF_BACKEND_IMPL_H
#define LF_BACKEND_IMPL_H

#include "core/core.h"
#include "linfuse/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- pointwise --- */

typedef enum lf_pw_op {
    LF_PW_COPY, /* out = in0 (converting dtype) */
    LF_PW_ADD,  /* out = in0 + in1 */
    LF_PW_MUL,  /* out = in0 * in1 */
    LF_PW_ACT,  /* out = act(in0) */
    /* out = act(in0) * in1, the activation rounded to out's dtype before the product, so the
     * result equals the two-pass act-then-mul bit for bit (Liger's GeGLU kernel does the same) */
    LF_PW_ACT_MUL,
    LF_PW_COUNT
} lf_pw_op;

/* How many inputs op reads: 2 for add, mul and act_mul, else 1. */
static inline int lf_pw_arity(lf_pw_op op)
{
    return op == LF_PW_ADD || op == LF_PW_MUL || op == LF_PW_ACT_MUL ? 2 : 1;
}

typedef struct lf_strided {
    void *data;
    lf_dtype dtype;
    int64_t stride[LF_MAX_DIMS]; /* 0 in a dim broadcasts that dim */
} lf_strided;

/* out[idx] = op(in0[idx], in1[idx]) for every index of shape. Inputs are read through their
 * strides (a broadcast input has stride 0), math is in float. */
typedef struct lf_pointwise {
    lf_pw_op op;
    lf_act act; /* for LF_PW_ACT and LF_PW_ACT_MUL */
    int ndim;
    int64_t shape[LF_MAX_DIMS];
    lf_strided out;
    lf_strided in[2];
} lf_pointwise;

lf_status lf_backend_pointwise(lf_device dev, const lf_pointwise *p, lf_kernel_info *info);

/* --- FP8 quantization, one scale per row ---
 * q[i, j] = e4m3(in[i, j] * (1 / scale[i])) with scale[i] = max_j |in[i, j]| / 448 (1 for a row
 * of zeros, at least 2^-126 otherwise): the row-wise recipe of torch._scaled_mm, for weights (per
 * output channel, once) and activations (per token, every forward). The reciprocal and the
 * product are rounded to nearest, then the code (nearest even), so every device writes the same
 * bytes. */
typedef struct lf_quant {
    int64_t rows, cols;
    lf_strided in; /* bf16, f16 or f32; strides {row, column} */
    uint8_t *q;    /* rows x cols e4m3, contiguous */
    float *scale;  /* laid out as mode says (lf_scale_mode), padding entries 1 */
    lf_scale_mode mode;
    int64_t pad_rows; /* LF_SCALE_ROWS: q and scale have this many rows (>= rows; 0: rows), the extra
                       * ones zero codes with scale 1 (tokens padded for a GEMM that takes groups of 4) */
} lf_quant;

lf_status lf_backend_quantize_fp8(lf_device dev, const lf_quant *q, lf_kernel_info *info);

/* How many rows q writes (pad_rows, or rows) and how many scales. */
static inline int64_t lf_quant_rows(const lf_quant *q)
{
    return q->pad_rows > q->rows ? q->pad_rows : q->rows;
}
static inline int64_t lf_quant_scales(const lf_quant *q)
{
    return lf_scale_count(q->mode, q->mode == LF_SCALE_ROWS ? lf_quant_rows(q) : q->rows, q->cols);
}

/* --- fused pointwise (compile mode) --- */

/* A chain of pointwise ops fused into one pass over `shape`: the inputs are read through their
 * strides, a short program runs in float (no rounding between its steps, as Inductor's fused
 * kernels do), the last step's value is stored to out. Registers 0..n_in-1 hold the inputs;
 * step i writes register n_in + i from src[0] (and src[1] for add and mul). */
enum { LF_FUSED_MAX_IN = 4, LF_FUSED_MAX_OPS = 8 };
typedef struct lf_fused_op {
    lf_pw_op op; /* LF_PW_ADD, LF_PW_MUL, LF_PW_ACT (LF_PW_COPY passes a value through) */
    lf_act act;
    int src[2];
} lf_fused_op;

typedef struct lf_fused {
    char name[64]; /* what it fused, numbered within its plan: "lf_poi_fused_gelu_mul_0" */
    int ndim;
    int64_t shape[LF_MAX_DIMS];
    int n_in;
    lf_strided in[LF_FUSED_MAX_IN];
    int n_ops;
    lf_fused_op ops[LF_FUSED_MAX_OPS];
    lf_strided out;
    void *prepared;          /* the backend's compiled form (CUDA: a kernel built with NVRTC), or NULL */
    const char *kernel_name; /* name, interned by lf_backend_fused_prepare for the profiler's hot path */
} lf_fused;

/* Build f's kernel for dev once, before it runs: on CUDA the program's shape and strides are
 * written into CUDA C, compiled with NVRTC and cached in cache_dir (NULL: the default,
 * $XDG_CACHE_HOME/linfuse or ~/.cache/linfuse) under a hash of the source; verbose prints the
 * file, as Inductor prints its kernels' paths. On the CPU there is nothing to build. Only the
 * data pointers of f may change between prepare and run. */
lf_status lf_backend_fused_prepare(lf_device dev, lf_fused *f, const char *cache_dir, int verbose);
lf_status lf_backend_fused(lf_device dev, const lf_fused *f, lf_kernel_info *info);
void lf_backend_fused_release(lf_device dev, lf_fused *f);

/* --- CUDA graphs (compile mode's replay) --- */

/* Record every launch dev's backend makes between begin and end into a graph instead of running
 * it; *graph is then launched with lf_backend_graph_launch, as one call. LF_EUNSUPPORTED on a
 * device without graphs (the CPU). */
lf_status lf_backend_graph_begin(lf_device dev);
lf_status lf_backend_graph_end(lf_device dev, void **graph);
lf_status lf_backend_graph_launch(lf_device dev, void *graph);
void lf_backend_graph_free(lf_device dev, void *graph);

/* --- a device's own record of its work (CUPTI on CUDA) ---
 * The profiler asks a device for these; a device never calls up into the profiler. Times are
 * CLOCK_MONOTONIC nanoseconds. */

typedef enum lf_dev_event_kind {
    LF_DEV_KERNEL,
    LF_DEV_MEMCPY,
    LF_DEV_MEMSET,
    LF_DEV_RUNTIME,  /* a runtime API call (cudaLaunchKernel, cudaMemcpyAsync, ...) */
    LF_DEV_DRIVER,   /* a driver API call (cuLaunchKernelEx, ...) */
    LF_DEV_OVERHEAD, /* the tracer's own cost ("Activity Buffer Request") */
} lf_dev_event_kind;

typedef struct lf_dev_event {
    lf_dev_event_kind kind;
    const char *name;          /* valid during the sink call */
    int64_t pid, tid;          /* device work: device index and stream; calls: process and thread */
    int64_t ts_ns, dur_ns;     /* CLOCK_MONOTONIC */
    int64_t correlation;       /* the device's id tying a launch call to the work it queued */
    int64_t ext_id;            /* the op that was open when it was launched (push), or 0 */
    double bytes;              /* copies and sets */
    const char *args_json;     /* kernels: Kineto's further args as JSON members, or NULL */
    int64_t launch_ts;         /* device work: when its launch call began, or -1 */
    int64_t launch_pid, launch_tid;
} lf_dev_event;

typedef void (*lf_dev_event_sink)(void *sink, const lf_dev_event *e);

typedef struct lf_device_events {
    const char *name; /* "cupti" */
    /* Begin collecting; nonzero when the device's tracer cannot start (the profiler then falls
     * back to the backend's own timing of each launch, and says so). */
    int (*start)(void);
    /* Around every op while collecting, so records name the op that launched them. */
    void (*push)(int64_t ext_id);
    void (*pop)(void);
    /* Wait for the device, flush, and hand every record to add. Returns the records the tracer
     * dropped. */
    int64_t (*drain)(void *sink, lf_dev_event_sink add);
    void (*stop)(void);
    /* Kineto's deviceProperties array as JSON text (owned by the backend), or NULL. */
    const char *(*properties)(void);
} lf_device_events;

/* --- collectives: the units of one device kind (GPUs) summing together ---
 * A communicator joins `world` ranks, one per unit; the device's library (NCCL on CUDA) moves
 * the bytes. Made from an id that one rank creates and every other rank is handed (over TCP by
 * linfuse/dist.h), or for all units of one process at once. */
enum { LF_COMM_ID_BYTES = 128 }; /* ncclUniqueId */
typedef struct lf_collective {
    void *comm; /* the backend's communicator */
    void *data; /* summed in place: count contiguous elements on the calling thread's unit */
    lf_dtype dtype;
    int64_t count;
    /* 0: the unit's stream waits for the result (ops after it see the sum); 1: it runs on the
     * communicator's own stream beside later work until comm_wait */
    int async;
} lf_collective;

/* --- the table a device fills --- */

typedef struct lf_backend_ops {
    const char *name;
    /* Start the device once (a later call returns the first answer): 1 when it is usable, else 0
     * with *why saying why (a static string owned by the backend). NULL: always available. */
    int (*available)(const char **why);
    lf_status (*synchronize)(void); /* NULL: work finishes before its launch returns */
    /* Several units (GPUs): how many, make unit index this thread's (starting it), and which is
     * this thread's. NULL: one unit, 0. */
    int (*unit_count)(void);
    lf_status (*select)(int index);
    int (*current)(void);
    /* Bytes the device can still give, and its size (lf_device_memory). NULL: it does not say. */
    lf_status (*memory)(int64_t *available, int64_t *total);
    lf_status (*gemm)(const lf_gemm *g, lf_kernel_info *info);
    lf_status (*pointwise)(const lf_pointwise *p, lf_kernel_info *info);
    /* Row-wise FP8 quantization (lf_quant); NULL where the device has none. */
    lf_status (*quantize_fp8)(const lf_quant *q, lf_kernel_info *info);
    /* Whether gemm can run g as described (1), else 0 with why filled. NULL: every valid GEMM. */
    int (*gemm_supports)(const lf_gemm *g, char *why, size_t cap);
    /* Fused pointwise chains (compile mode); prepare/release may be NULL (nothing to build). */
    lf_status (*fused_prepare)(lf_fused *f, const char *cache_dir, int verbose);
    lf_status (*fused)(const lf_fused *f, lf_kernel_info *info);
    void (*fused_release)(lf_fused *f);
    /* CUDA graphs; NULL where the device has none. */
    lf_status (*graph_begin)(void);
    lf_status (*graph_end)(void **graph);
    lf_status (*graph_launch)(void *graph);
    void (*graph_free)(void *graph);
    /* Collectives; NULL where the device has none. comm_init makes this thread's unit rank
     * `rank`; comm_init_all makes comms[i] for unit i, all in one process. */
    lf_status (*comm_unique_id)(unsigned char id[LF_COMM_ID_BYTES]);
    lf_status (*comm_init)(void **comm, const unsigned char id[LF_COMM_ID_BYTES], int rank, int world);
    lf_status (*comm_init_all)(void **comms, int n);
    lf_status (*all_reduce)(const lf_collective *c, lf_kernel_info *info);
    lf_status (*comm_wait)(void *comm); /* the unit's stream waits for every async collective */
    void (*comm_free)(void *comm);
    const char *(*comm_library)(void); /* "nccl 2.28.9", once a communicator was made */
    const lf_device_events *events; /* NULL: the profiler times launches itself */
} lf_backend_ops;

extern const lf_backend_ops lf_cpu_backend_ops;

/* The table for dev when dev is available, else NULL with the message set. */
const lf_backend_ops *lf_backend_for(lf_device dev);

/* dev's event source when dev is available and has one, else NULL. */
const lf_device_events *lf_backend_events(lf_device dev);

/* --- device modules (module.c) ---
 * A device other than the CPU lives in a shared object loaded at run time (as ggml's backend
 * registry loads its backends), so a program that only uses the CPU never loads CUDA's
 * libraries. The module exports LF_BACKEND_MODULE_ENTRY. */
enum { LF_BACKEND_ABI = 4 }; /* 2: the memory slot; 3: units and collectives; 4: FP8 quantization */
#define LF_BACKEND_MODULE_ENTRY "lf_backend_module_init"
typedef const lf_backend_ops *(*lf_backend_module_init_fn)(int abi);

/* Load dev's module (once) and return its table, or NULL with *why saying why. */
const lf_backend_ops *lf_backend_module_load(lf_device dev, const char **why);

/* --- kernel names and reports: one helper per kind, used by every backend --- */

/* The kernel families; each names its kernels one way (report.c has the formats). */
typedef enum lf_kernel_family {
    LF_KF_NAMED,               /* a name given whole (fused kernels) */
    LF_KF_CPU_GEMM,            /* lf_cpu_gemm_<dtype>_<mr>x<nr>_<layout and epilogue> */
    LF_KF_CPU_POINTWISE,       /* lf_cpu_<op>_<dtype>[_strided] */
    LF_KF_CUBLASLT_GEMM,       /* lf_cublaslt_gemm_<dtype>_<layout and epilogue> */
    LF_KF_CUDA_POINTWISE,      /* lf_cuda_<op>_<dtype>[_strided] */
    LF_KF_CUDA_GATED,          /* lf::gated::gated_gemm_<dtype>_<act>_<tile>: the Hopper kernel's own name */
    LF_KF_CUDA_GATED_PINGPONG, /* lf::gated::gated_gemm_<dtype>_<act>_<tile>_pingpong: its ping-pong schedule */
    LF_KF_CUDA_GATED_OFFLOAD,  /* lf::gated::gated_gemm_<dtype>_<act>_<tile>_offload: its offload schedule */
    LF_KF_CUDA_GEMV,           /* lf::gemv::gated_gemv_<dtype>_<act>: the few-token gated kernel */
    LF_KF_CPU_QUANT,           /* lf_cpu_quantize_fp8_<dtype>_rowwise */
    LF_KF_CUDA_QUANT,          /* lf_cuda_quantize_fp8_<dtype>_rowwise */
    LF_KF_COUNT
} lf_kernel_family;

/* Report a GEMM as kernel family fam with a tile of tile_m x tile_n (0 x 0: none in the name):
 * the interned name, FLOPs 2*M*N*K (N counting gates and partners: the epilogue's work is not
 * counted, as PyTorch counts addmm), bytes of A, B, C, bias and D once each. */
void lf_gemm_report(const lf_gemm *g, lf_kernel_family fam, int tile_m, int tile_n, lf_kernel_info *info);

/* Report a pointwise kernel: one FLOP per element per step (none for a copy), bytes of each
 * operand once. */
void lf_pointwise_report(const lf_pointwise *p, lf_kernel_family fam, lf_kernel_info *info);

/* Report a row-wise FP8 quantization: a FLOP per element (the division), bytes of the input,
 * the codes and the scales once. */
void lf_quant_report(const lf_quant *q, lf_kernel_family fam, lf_kernel_info *info);

/* Report a fused kernel: its plan's name (interned at prepare), a FLOP per element per step,
 * bytes of each operand once. */
void lf_fused_report(const lf_fused *f, lf_kernel_info *info);

/* A name kept for the life of the process, found again by its text (fused kernels intern their
 * plan's name once, at prepare, so the hot path copies a pointer). */
const char *lf_kernel_name_intern(const char *name);

/* --- the CPU backend's knobs (tests and benches compare instruction sets) --- */

typedef enum lf_cpu_isa { LF_CPU_ISA_SCALAR, LF_CPU_ISA_AVX2, LF_CPU_ISA_AVX512, LF_CPU_ISA_COUNT } lf_cpu_isa;

/* The best instruction set this CPU runs, and the one in use (the best, unless forced). */
lf_cpu_isa lf_cpu_isa_detect(void);
lf_cpu_isa lf_cpu_isa_active(void);
/* Force an instruction set; LF_EUNSUPPORTED when the CPU lacks it. */
lf_status lf_cpu_isa_force(lf_cpu_isa isa);
const char *lf_cpu_isa_name(lf_cpu_isa isa);

/* --- the CUDA backend's knob: the Hopper gated GEMM's schedule (tests run both, benches time
 * one against the other) --- */

typedef enum lf_gated_schedule {
    LF_GATED_AUTO,
    LF_GATED_COOPERATIVE,
    LF_GATED_PINGPONG,
    LF_GATED_OFFLOAD /* the cooperative tile, its activation on the producer warpgroup's spare warps */
} lf_gated_schedule;

/* Force a schedule (LF_GATED_AUTO: the backend chooses by shape, its default). Until forced, the
 * environment decides, read once: LINFUSE_GATED_SCHEDULE=cooperative|pingpong|offload|auto;
 * anything else is auto. An e4m3 h always takes the cooperative kernel.
 * A gate_group that is not a multiple of 128 always takes ping-pong (the cooperative kernel's
 * half tile is 128 columns). */
void lf_gated_schedule_force(lf_gated_schedule s);
lf_gated_schedule lf_gated_schedule_forced(void);

#ifdef __cplusplus
}
#endif
#endif
