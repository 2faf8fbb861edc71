/* The table each backend fills (as ggml's backends do): the ops layer reaches a device only
 * through it. Layer: backend/. */
#ifndef LF_BACKEND_IMPL_H
#define LF_BACKEND_IMPL_H

#include "core/core.h"
#include "linfuse/backend.h"

typedef struct lf_backend_ops {
    const char *name;
    lf_status (*gemm)(const lf_gemm *g, lf_kernel_info *info);
    lf_status (*pointwise)(const lf_pointwise *p, lf_kernel_info *info);
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
} lf_backend_ops;

extern const lf_backend_ops lf_cpu_backend_ops;
#ifdef LF_HAVE_CUDA
extern const lf_backend_ops lf_cuda_backend_ops;
/* Start the CUDA backend once; 0 (with *why saying why) when there is no usable GPU. */
int lf_cuda_available(const char **why);
#endif

/* The table for dev, or NULL (with the message set) when that device has no backend. */
const lf_backend_ops *lf_backend_for(lf_device dev);

/* What a fused kernel reports to the profiler, the same on every backend: its plan's name
 * (interned by name_key), FLOPs (a step per element) and bytes (each operand once). */
void lf_fused_info(const lf_fused *f, lf_kernel_info *info);

/* Layout and epilogue suffix shared by every backend's kernel names: "tn_bias_gelu_tanh". */
void lf_gemm_name_suffix(const lf_gemm *g, char *buf, size_t cap);

/* Kernel names are built once per distinct kernel and then found by a 64-bit key that says
 * everything the name says (dtype, tile, layout, epilogue...): the profiler's hot path then
 * costs a table lookup, not a snprintf. fmt writes the name into buf on a miss. */
typedef void (*lf_kernel_name_fmt)(char *buf, size_t cap, const void *ctx);
const char *lf_kernel_name(uint64_t key, lf_kernel_name_fmt fmt, const void *ctx);

#endif
