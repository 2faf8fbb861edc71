/* The GPUs as the collector's records need them described: Kineto's deviceProperties for the
 * trace's header, each device's multiprocessors (a kernel's "blocks per SM"), the occupancy
 * calculator's view of it ("est. achieved occupancy %"), and kernel names demangled. Asked of the
 * driver once it is up, through the driver the process loaded (the collector's users link none:
 * the CUDA module's runtime and the profiled program load it themselves). Layer: capture/. */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#include <cuda.h>
#include <cuda_occupancy.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture/capture.h"

/* libstdc++'s demangler (the collector's users link the C++ runtime): template kernels have
 * mangled names. */
char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

enum { MAX_DEVICES = 64 };

static struct {
    atomic_int known;
    int n_devices;
    int sms[MAX_DEVICES];
    cudaOccDeviceProp occ[MAX_DEVICES];
    char props[MAX_DEVICES * 512];
} gpus;

/* The driver's entry points this file asks, from the driver already in the process. */
static struct {
    CUresult (*get_count)(int *);
    CUresult (*get)(CUdevice *, int);
    CUresult (*get_name)(char *, int, CUdevice);
    CUresult (*total_mem)(size_t *, CUdevice);
    CUresult (*get_attribute)(int *, CUdevice_attribute, CUdevice);
    int found;
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void find_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return;
    *(void **)&drv.get_count = dlsym(h, "cuDeviceGetCount");
    *(void **)&drv.get = dlsym(h, "cuDeviceGet");
    *(void **)&drv.get_name = dlsym(h, "cuDeviceGetName");
    *(void **)&drv.total_mem = dlsym(h, "cuDeviceTotalMem_v2");
    *(void **)&drv.get_attribute = dlsym(h, "cuDeviceGetAttribute");
    drv.found = drv.get_count && drv.get && drv.get_name && drv.total_mem && drv.get_attribute;
    dlclose(h); /* loaded by the process: it stays */
}

/* One GPU's properties from the driver: Kineto's deviceProperties object, and the occupancy
 * calculator's description. */
static int describe(int k, char *out, size_t cap)
{
    CUdevice d;
    char name[256];
    size_t mem = 0;
    int a[12];
    static const CUdevice_attribute which[12] = {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                                 CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                                 CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                                 CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                                                 CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
                                                 CU_DEVICE_ATTRIBUTE_WARP_SIZE,
                                                 CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
                                                 CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                                 CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
                                                 CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                                 CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                                                 CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK};
    if (drv.get(&d, k) != CUDA_SUCCESS || drv.get_name(name, sizeof name, d) != CUDA_SUCCESS ||
        drv.total_mem(&mem, d) != CUDA_SUCCESS)
        return 0;
    for (int i = 0; i < 12; i++)
        if (drv.get_attribute(&a[i], which[i], d) != CUDA_SUCCESS)
            return 0;
    for (char *p = name; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = ' ';
    gpus.sms[k] = a[7];
    gpus.occ[k] = (cudaOccDeviceProp){.computeMajor = a[0],
                                      .computeMinor = a[1],
                                      .maxThreadsPerBlock = a[2],
                                      .maxThreadsPerMultiprocessor = a[3],
                                      .regsPerBlock = a[4],
                                      .regsPerMultiprocessor = a[8],
                                      .warpSize = a[5],
                                      .sharedMemPerBlock = (size_t)a[6],
                                      .sharedMemPerMultiprocessor = (size_t)a[10],
                                      .numSms = a[7],
                                      .sharedMemPerBlockOptin = (size_t)a[9],
                                      .reservedSharedMemPerBlock = (size_t)a[11]};
    int w = snprintf(out, cap,
                     "%s{\"id\": %d, \"name\": \"%s\", \"totalGlobalMem\": %zu, \"computeMajor\": %d, "
                     "\"computeMinor\": %d, \"maxThreadsPerBlock\": %d, \"maxThreadsPerMultiprocessor\": %d, "
                     "\"regsPerBlock\": %d, \"warpSize\": %d, \"sharedMemPerBlock\": %d, \"numSms\": %d, "
                     "\"regsPerMultiprocessor\": %d, \"sharedMemPerBlockOptin\": %d, "
                     "\"sharedMemPerMultiprocessor\": %d}",
                     k ? ", " : "[", k, name, mem, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]);
    return w > 0 && (size_t)w < cap ? w : 0;
}

int lfc_devices(void)
{
    if (atomic_load(&gpus.known))
        return 1;
    pthread_once(&drv_once, find_driver);
    if (!drv.found)
        return 0; /* the driver is not loaded yet */
    int n = 0;
    CUresult r = drv.get_count(&n);
    if (r == CUDA_ERROR_NOT_INITIALIZED)
        return 0; /* cuInit has not returned yet */
    size_t used = 0;
    n = r == CUDA_SUCCESS ? (n < MAX_DEVICES ? n : MAX_DEVICES) : 0;
    int k = 0;
    for (; k < n; k++) {
        int w = describe(k, gpus.props + used, sizeof gpus.props - used - 2);
        if (!w)
            break;
        used += (size_t)w;
    }
    if (used)
        snprintf(gpus.props + used, sizeof gpus.props - used, "]");
    gpus.n_devices = k;
    atomic_store(&gpus.known, 1);
    return 1;
}

const char *lfc_properties(void)
{
    return atomic_load(&gpus.known) && gpus.props[0] ? gpus.props : NULL;
}

const int *lfc_sms(int *n)
{
    *n = atomic_load(&gpus.known) ? gpus.n_devices : 0;
    return gpus.sms;
}

/* Kineto's "est. achieved occupancy %": blocks per SM capped by what the calculator says fits,
 * times threads per block over the SM's thread limit (the kernel described as Kineto describes
 * it: static shared memory, the default limit). */
int lfc_occupancy(void *ctx, const lfc_rec *k, double blocks_per_sm)
{
    (void)ctx;
    if ((int)k->device >= gpus.n_devices || !gpus.occ[k->device].maxThreadsPerMultiprocessor)
        return -1;
    cudaOccFuncAttributes fa = {.maxThreadsPerBlock = INT32_MAX,
                                .numRegs = k->regs,
                                .sharedSizeBytes = (size_t)k->static_smem,
                                .partitionedGCConfig = PARTITIONED_GC_OFF,
                                .shmemLimitConfig = FUNC_SHMEM_LIMIT_DEFAULT,
                                .numBlockBarriers = 1};
    cudaOccDeviceState st = {.cacheConfig = CACHE_PREFER_NONE, .carveoutConfig = SHAREDMEM_CARVEOUT_DEFAULT};
    cudaOccResult res;
    const int block = k->block[0] * k->block[1] * k->block[2];
    if (cudaOccMaxActiveBlocksPerMultiprocessor(&res, &gpus.occ[k->device], &fa, &st, block, (size_t)k->dyn_smem) !=
        CUDA_OCC_SUCCESS)
        return -1;
    if (res.activeBlocksPerMultiprocessor < blocks_per_sm)
        blocks_per_sm = res.activeBlocksPerMultiprocessor;
    return (int)(blocks_per_sm * block / gpus.occ[k->device].maxThreadsPerMultiprocessor * 100);
}

char *lfc_demangle(const char *name)
{
    if (!name || name[0] != '_' || name[1] != 'Z')
        return NULL;
    int status = -1;
    char *d = __cxa_demangle(name, NULL, NULL, &status);
    if (status != 0) {
        free(d);
        return NULL;
    }
    return d;
}
