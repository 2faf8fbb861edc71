/* Loading a device's backend at run time. The CUDA backend is a shared object of its own
 * (liblinfuse_cuda.so) that links cuBLASLt, CUPTI and NVRTC; the core library links none of
 * them, so a program that only computes on the CPU never loads CUDA's ~600 MB of libraries,
 * and one build serves machines with and without a GPU (ggml loads its backends the same way).
 * The module is looked for, in order: at $LINFUSE_CUDA_MODULE, then beside the core library
 * (the build tree, an installed prefix and a wheel all keep them together), then by the dynamic
 * linker's own search. The CUDA libraries it needs (cuBLASLt, CUPTI, NVRTC) are found through its
 * RUNPATH (the toolkit of the build; in a wheel, the nvidia-* packages beside linfuse) or the
 * linker's path; where those miss one, it is looked for where PyTorch users have CUDA (below).
 * Layer: backend/. */
#define _GNU_SOURCE /* dladdr, dl_iterate_phdr */
#include <dlfcn.h>
#include <link.h>
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

/* --- CUDA's libraries where PyTorch users have them ---
 * A module whose CUDA library the linker did not find (a wheel installed beside torch in another
 * site-packages, a toolkit outside the linker's path) gets it loaded from the first of: the nvidia-*
 * Python packages of each site-packages that holds linfuse or a library this process has loaded
 * (torch, jax, cupy bring theirs), $CUDA_HOME and $CUDA_PATH, /usr/local/cuda. A library loaded
 * so is the one the module's own load then takes (the linker matches loaded libraries by soname). */

typedef struct lib_dirs {
    char roots[8][1024]; /* site-packages folders, with their '/' */
    int n;
} lib_dirs;

static void add_root(lib_dirs *d, const char *path)
{
    static const char *const marks[] = {"/site-packages/", "/dist-packages/"};
    for (size_t m = 0; m < sizeof marks / sizeof marks[0]; m++) {
        const char *at = strstr(path, marks[m]);
        if (!at)
            continue;
        const size_t len = (size_t)(at - path) + strlen(marks[m]);
        if (len >= sizeof d->roots[0])
            return;
        for (int i = 0; i < d->n; i++)
            if (strlen(d->roots[i]) == len && !strncmp(d->roots[i], path, len))
                return;
        if (d->n < (int)(sizeof d->roots / sizeof d->roots[0])) {
            memcpy(d->roots[d->n], path, len);
            d->roots[d->n++][len] = '\0';
        }
        return;
    }
}

static int each_loaded(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    if (info->dlpi_name && info->dlpi_name[0] == '/')
        add_root(data, info->dlpi_name);
    return 0;
}

/* name (libcublasLt.so.13) loaded from the first place that has it; 1 when loaded. The places
 * looked in are said in looked. */
static int load_cuda_library(const char *name, char *looked, size_t cap)
{
    lib_dirs d = {.n = 0};
    char own[4000];
    own_dir(own, sizeof own); /* .../site-packages/linfuse/lib/ in a wheel */
    add_root(&d, own);
    dl_iterate_phdr(each_loaded, &d);
    const char *major = strrchr(name, '.'); /* ".13": CUDA 13's packages share nvidia/cu13/lib */
    char cu[32];
    snprintf(cu, sizeof cu, "nvidia/cu%s/lib/", major && major[1] >= '0' && major[1] <= '9' ? major + 1 : "");
    const char *const per_package[] = {cu, "nvidia/cublas/lib/", "nvidia/cuda_cupti/lib/", "nvidia/cuda_nvrtc/lib/",
                                       "nvidia/cuda_runtime/lib/"};
    const char *const toolkit[] = {"lib64/", "lib/", "extras/CUPTI/lib64/", "targets/x86_64-linux/lib/",
                                   "targets/sbsa-linux/lib/"};
    const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
    char path[4200];
    size_t used = 0;
    looked[0] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        const int n = pass == 0 ? d.n : (int)(sizeof homes / sizeof homes[0]);
        for (int i = 0; i < n; i++) {
            if (pass == 1 && (!homes[i] || !homes[i][0]))
                continue;
            const char *base = pass == 0 ? d.roots[i] : homes[i];
            if (used + 1 < cap)
                used += (size_t)snprintf(looked + used, cap - used, "%s%s%s", used ? ", " : "", base,
                                         pass == 0 ? "nvidia/" : "");
            const size_t k =
                pass == 0 ? sizeof per_package / sizeof per_package[0] : sizeof toolkit / sizeof toolkit[0];
            for (size_t j = 0; j < k; j++) {
                snprintf(path, sizeof path, "%s%s%s%s", base, pass == 1 && base[strlen(base) - 1] != '/' ? "/" : "",
                         pass == 0 ? per_package[j] : toolkit[j], name);
                if (access(path, R_OK) == 0 && dlopen(path, RTLD_NOW | RTLD_LOCAL))
                    return 1;
            }
        }
    }
    return 0;
}

/* The library a failed dlopen could not find ("libcublasLt.so.13: cannot open shared object
 * file: ..."), into name; 0 when the error is another one. */
static int missing_library(const char *err, char *name, size_t cap)
{
    const char *colon = err ? strstr(err, ": cannot open shared object file") : NULL;
    if (!colon)
        return 0;
    const char *start = colon;
    while (start > err && start[-1] != ' ' && start[-1] != '/')
        start--;
    const size_t len = (size_t)(colon - start);
    if (strncmp(start, "lib", 3) != 0 || len >= cap)
        return 0;
    memcpy(name, start, len);
    name[len] = '\0';
    return 1;
}

/* dlopen of the module, loading its missing CUDA libraries from where they are (above) */
static void *open_module(const char *path, char *w, size_t cap)
{
    for (int tries = 0; tries < 8; tries++) {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
        const char *e = dlerror();
        char name[256], looked[700];
        if (!missing_library(e, name, sizeof name) || strstr(e, "liblinfuse")) {
            snprintf(w, cap, "%s", e ? e : "?");
            return NULL;
        }
        if (!load_cuda_library(name, looked, sizeof looked)) {
            snprintf(w, cap,
                     "%s was not found: not through the module's RUNPATH or the linker's path, nor in %s (pip "
                     "install torch or the nvidia-* package that holds it, or install the CUDA toolkit)",
                     name, looked[0] ? looked : "/usr/local/cuda");
            return NULL;
        }
    }
    snprintf(w, cap, "its CUDA libraries did not load");
    return NULL;
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
    char err[900];
    void *h = open_module(path, err, sizeof err);
    if (!h) {
        if (strchr(path, '/') || !strstr(err, m->file))
            snprintf(w, sizeof why_buf[0], "the %s module did not load: %s", lf_device_name(dev), err);
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
