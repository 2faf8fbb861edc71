/* Loading a device's backend at run time. The CUDA backend is a shared object of its own
 * (liblinfuse_cuda.so) that links cuBLASLt, CUPTI and NVRTC; the core library links none of
 * them, so a program that only computes on the CPU never loads CUDA's ~600 MB of libraries,
 * and one build serves machines with and without a GPU (ggml loads its backends the same way).
 * The module is looked for, in order: at $LINFUSE_CUDA_MODULE, then beside the core library
 * (the build tree and an installed prefix both keep them together), then by the dynamic
 * linker's own search. Layer: backend/. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend_impl.h"
#include "tensor/tensor_impl.h"
#include "linfuse/settings.h"

typedef struct module_spec {
    const char *file;   /* the shared object's name */
    lf_setting env;     /* a variable that names it by path instead */
    const char *driver; /* a library the device's driver provides, checked before loading */
} module_spec;

static const module_spec specs[LF_DEVICE_COUNT] = {
    [LF_DEVICE_CUDA] = {"liblinfuse_cuda.so", LF_SET_CUDA_MODULE, "libcuda.so.1"},
};

static char why_buf[LF_DEVICE_COUNT][1024];

/* What a module may use of the core (backend_impl.h, lf_backend_host). */
static const lf_backend_host host = {.failv = lf_failv,
                                     .last_error = lf_last_error,
                                     .act_name = lf_act_name,
                                     .dtype_name = lf_dtype_name,
                                     .dtype_size = lf_dtype_size,
                                     .fnv1a = lf_fnv1a,
                                     .set_allocator = lf_tensor_set_allocator,
                                     .kernel_name = lf_kernel_name,
                                     .kernel_gemm_suffix = lf_kernel_gemm_suffix,
                                     .kernel_pw_op_name = lf_kernel_pw_op_name,
                                     .gemm_report = lf_gemm_report,
                                     .pointwise_report = lf_pointwise_report,
                                     .quant_report = lf_quant_report,
                                     .fused_report = lf_fused_report,
                                     .setting_get = lf_setting_get,
                                     .setting_int_or = lf_setting_int_or,
                                     .setting_choice_or = lf_setting_choice_or,
                                     .gated_schedule_forced = lf_gated_schedule_forced,
                                     .gemm_autotune_enabled = lf_gemm_autotune_enabled,
                                     .gemm_autotune_verbose = lf_gemm_autotune_verbose};

/* The directory of the file that holds this function (liblinfuse.so), with a trailing '/', or
 * "" when it cannot be told. */
static void own_dir(char *dir, size_t cap)
{
    Dl_info di;
    dir[0] = '\0';
    if (!dladdr((void *)own_dir, &di) || !di.dli_fname)
        return;
    const char *slash = strrchr(di.dli_fname, '/');
    if (slash && (size_t)(slash - di.dli_fname + 1) < cap) {
        memcpy(dir, di.dli_fname, (size_t)(slash - di.dli_fname + 1));
        dir[slash - di.dli_fname + 1] = '\0';
    }
}

const lf_backend_ops *lf_backend_module_load(lf_device dev, const char **why)
{
    const module_spec *m = (unsigned)dev < LF_DEVICE_COUNT ? &specs[dev] : NULL;
    char *w = why_buf[(unsigned)dev < LF_DEVICE_COUNT ? dev : 0];
    *why = w;
    if (!m || !m->file) {
        snprintf(w, sizeof why_buf[0], "linfuse has no backend for this device");
        return NULL;
    }
    /* 1. which file */
    char path[4096];
    const char *given = lf_setting_get(m->env);
    if (given) {
        snprintf(path, sizeof path, "%s", given);
        if (access(path, R_OK) != 0) {
            snprintf(w, sizeof why_buf[0], "%s=%.900s: no such readable file", lf_setting_describe(m->env)->name,
                     given);
            return NULL;
        }
    } else {
        char dir[4000];
        own_dir(dir, sizeof dir);
        snprintf(path, sizeof path, "%s%s", dir, m->file);
        if (!dir[0] || access(path, R_OK) != 0)
            snprintf(path, sizeof path, "%s", m->file); /* the dynamic linker's search */
    }
    /* 2. a driver to talk to: without one, loading the toolkit's libraries is wasted */
    void *drv = dlopen(m->driver, RTLD_LAZY | RTLD_LOCAL);
    if (!drv) {
        snprintf(w, sizeof why_buf[0], "no %s driver on this machine (%s cannot be loaded)", lf_device_name(dev),
                 m->driver);
        return NULL;
    }
    dlclose(drv);
    /* 3. the module and its libraries */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        if (strchr(path, '/') || (e && !strstr(e, m->file)))
            snprintf(w, sizeof why_buf[0], "the %s module did not load: %s", lf_device_name(dev), e ? e : "?");
        else
            snprintf(w, sizeof why_buf[0],
                     "this build has no %s module (%s is not beside the linfuse library; was it built where nvcc "
                     "was missing, or with LINFUSE_CUDA=OFF?)",
                     lf_device_name(dev), m->file);
        return NULL;
    }
    lf_backend_module_init_fn init = (lf_backend_module_init_fn)(uintptr_t)dlsym(h, LF_BACKEND_MODULE_ENTRY);
    const lf_backend_ops *ops = init ? init(LF_BACKEND_ABI, &host) : NULL;
    if (!ops) {
        snprintf(w, sizeof why_buf[0], "%.300s is not a linfuse %s module of this version (ABI %d)", path,
                 lf_device_name(dev), LF_BACKEND_ABI);
        dlclose(h);
        return NULL;
    }
    return ops; /* kept loaded for the life of the process */
}
