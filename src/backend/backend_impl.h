/* Inside the backend layer: the table each device fills (as ggml's backends do), the internal
 * work descriptions (pointwise kernels, fused chains, graphs), the device's own event source
 * the profiler drains, and the one place kernels are named and their FLOPs and bytes counted.
 * The ops layer reaches a device only through this table; the profiler asks it for events.
 * Layer: backend/. */
#ifndef LF_BACKEND_IMPL_H
#define LF_BACKEND_IMPL_H

#include "backend/events.h"
#include "backend/names.h"
#include "backend/work.h"
#include "core/core.h"
#include "linfuse/backend.h"
#include "linfuse/settings.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- routing work to its device (backend.c) --- */

lf_status lf_backend_pointwise(lf_device dev, const lf_pointwise *p, lf_kernel_info *info);
lf_status lf_backend_quantize_fp8(lf_device dev, const lf_quant *q, lf_kernel_info *info);

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
    /* Which kernel runs the valid paired-gate GEMM g (lf_gated_choose): every field of c set. */
    void (*gated_choose)(const lf_gemm *g, lf_gated_choice *c);
    /* The stream this thread's work on its unit goes to: the caller's (own 0), or the backend's
     * own again (own 1); and which it is now. NULL where the device has no streams. */
    lf_status (*set_stream)(void *stream, int own);
    void *(*get_stream)(void);
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
    const lf_device_events *events;    /* NULL: the profiler times launches itself */
} lf_backend_ops;

extern const lf_backend_ops lf_cpu_backend_ops;

/* The table for dev when dev is available, else NULL with the message set. */
const lf_backend_ops *lf_backend_for(lf_device dev);

/* dev's event source when dev is available and has one, else NULL. */
const lf_device_events *lf_backend_events(lf_device dev);

/* --- device modules (module.c) ---
 * A device other than the CPU lives in a shared object loaded at run time (as ggml's backend
 * registry loads its backends), so a program that only uses the CPU never loads CUDA's
 * libraries. The module exports LF_BACKEND_MODULE_ENTRY, which takes the ABI number and the
 * host's table and returns the device's. The module links no linfuse library: whatever it needs
 * of the core comes through lf_backend_host, so the core exports nothing but its public API and
 * a program that links linfuse statically loads the module as one that links it shared does.
 * The ABI number changes with either table (4: FP8 quantization; 5: the host table). */
enum { LF_BACKEND_ABI = 5 };
#define LF_BACKEND_MODULE_ENTRY "lf_backend_module_init"

typedef struct lf_allocator lf_allocator;
typedef struct lf_backend_host {
    /* errors: lf_fail's message for the calling thread, and reading it back */
    lf_status (*failv)(lf_status s, const char *fmt, va_list ap);
    const char *(*last_error)(void);
    /* names of things */
    const char *(*act_name)(lf_act act);
    const char *(*dtype_name)(lf_dtype dt);
    size_t (*dtype_size)(lf_dtype dt);
    uint64_t (*fnv1a)(const void *p, size_t n, uint64_t h);
    /* the device's memory, handed to the tensor layer */
    void (*set_allocator)(lf_device dev, const lf_allocator *a);
    /* kernel names and reports (backend/names.h) */
    const char *(*kernel_name)(lf_kernel_namer namer, const lf_kernel_key *key);
    void (*kernel_gemm_suffix)(const lf_kernel_key *key, char *buf, size_t cap);
    const char *(*kernel_pw_op_name)(int op);
    void (*gemm_report)(const lf_gemm *g, lf_kernel_namer namer, int family, int tile_m, int tile_n,
                        lf_kernel_info *info);
    void (*pointwise_report)(const lf_pointwise *p, lf_kernel_namer namer, int family, lf_kernel_info *info);
    void (*quant_report)(const lf_quant *q, lf_kernel_namer namer, int family, lf_kernel_info *info);
    void (*fused_report)(const lf_fused *f, lf_kernel_info *info);
    /* settings (linfuse/settings.h) and what the program set (linfuse/cuda.h) */
    const char *(*setting_get)(lf_setting s);
    int64_t (*setting_int_or)(lf_setting s, int64_t def);
    int (*setting_choice_or)(lf_setting s, int def);
    lf_gated_schedule (*gated_schedule_forced)(void);
    int (*gemm_autotune_enabled)(void);
    int (*gemm_autotune_verbose)(void);
} lf_backend_host;

typedef const lf_backend_ops *(*lf_backend_module_init_fn)(int abi, const lf_backend_host *host);

/* Load dev's module (once) and return its table, or NULL with *why saying why. */
const lf_backend_ops *lf_backend_module_load(lf_device dev, const char **why);

#ifdef __cplusplus
}
#endif
#endif
