/* What the CUDA module has of the core library: the host table it was handed when loaded
 * (backend/module.c), behind the same names the core uses, so the module's files read like the
 * core's and the module links no linfuse library (the core exports its public API only). Every
 * name here is hidden inside the module. Layer: backend/cuda. */
#include <stdarg.h>

#include "backend/cuda/cuda_impl.h"
#include "tensor/tensor_impl.h"

static const lf_backend_host *host;

void lf_cuda_host_set(const lf_backend_host *h)
{
    host = h;
}

lf_status lf_fail(lf_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s = host->failv(s, fmt, ap);
    va_end(ap);
    return s;
}

const char *lf_last_error(void)
{
    return host->last_error();
}

const char *lf_act_name(lf_act act)
{
    return host->act_name(act);
}

const char *lf_dtype_name(lf_dtype dt)
{
    return host->dtype_name(dt);
}

size_t lf_dtype_size(lf_dtype dt)
{
    return host->dtype_size(dt);
}

uint64_t lf_fnv1a(const void *p, size_t n, uint64_t h)
{
    return host->fnv1a(p, n, h);
}

void lf_tensor_set_allocator(lf_device dev, const lf_allocator *a)
{
    host->set_allocator(dev, a);
}

const char *lf_kernel_name(lf_kernel_namer namer, const lf_kernel_key *key)
{
    return host->kernel_name(namer, key);
}

void lf_kernel_gemm_suffix(const lf_kernel_key *key, char *buf, size_t cap)
{
    host->kernel_gemm_suffix(key, buf, cap);
}

const char *lf_kernel_pw_op_name(int op)
{
    return host->kernel_pw_op_name(op);
}

void lf_gemm_report(const lf_gemm *g, lf_kernel_namer namer, int family, int tile_m, int tile_n, lf_kernel_info *info)
{
    host->gemm_report(g, namer, family, tile_m, tile_n, info);
}

void lf_pointwise_report(const lf_pointwise *p, lf_kernel_namer namer, int family, lf_kernel_info *info)
{
    host->pointwise_report(p, namer, family, info);
}

void lf_quant_report(const lf_quant *q, lf_kernel_namer namer, int family, lf_kernel_info *info)
{
    host->quant_report(q, namer, family, info);
}

void lf_fused_report(const lf_fused *f, lf_kernel_info *info)
{
    host->fused_report(f, info);
}

const char *lf_setting_get(lf_setting s)
{
    return host->setting_get(s);
}

int64_t lf_setting_int_or(lf_setting s, int64_t def)
{
    return host->setting_int_or(s, def);
}

int lf_setting_choice_or(lf_setting s, int def)
{
    return host->setting_choice_or(s, def);
}

lf_gated_schedule lf_gated_schedule_forced(void)
{
    return host->gated_schedule_forced();
}

int lf_gemm_autotune_enabled(void)
{
    return host->gemm_autotune_enabled();
}

int lf_gemm_autotune_verbose(void)
{
    return host->gemm_autotune_verbose();
}
