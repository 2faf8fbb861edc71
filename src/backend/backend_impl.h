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
} lf_backend_ops;

extern const lf_backend_ops lf_cpu_backend_ops;

/* The table for dev, or NULL (with the message set) when that device has no backend. */
const lf_backend_ops *lf_backend_for(lf_device dev);

/* Layout and epilogue suffix shared by every backend's kernel names: "tn_bias_gelu_tanh". */
void lf_gemm_name_suffix(const lf_gemm *g, char *buf, size_t cap);

#endif
