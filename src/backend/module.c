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
    const lf_backend_ops *ops = init ? init(LF_BACKEND_ABI) : NULL;
    if (!ops) {
        snprintf(w, sizeof why_buf[0], "%.300s is not a linfuse %s module of this version (ABI %d)", path,
                 lf_device_name(dev), LF_BACKEND_ABI);
        dlclose(h);
        return NULL;
    }
    return ops; /* kept loaded for the life of the process */
}
