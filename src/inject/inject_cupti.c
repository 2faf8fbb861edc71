/* CUPTI in a profiled process: activity buffers handed out from a pool and queued when full (the
 * completion callback only queues: it may run on the program's own thread), their records turned
 * into lfi_rec on the helper thread, and the GPUs' properties asked of the driver once it is up.
 * Kinds and calls as Kineto records them (docs/gpu_notes.md, "CUPTI"). Layer: inject/. */
#include <cuda.h>
#include <cuda_occupancy.h>
#include <cupti.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inject/inject_run.h"

/* libstdc++'s demangler (the library links the C++ runtime): template kernels have mangled names. */
char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

enum { BUF_BYTES = 4 << 20, MAX_DEVICES = 64 };
/* callback ids of either kind of call: room for the larger count */
enum {
    API_NAMES = (int)CUPTI_DRIVER_TRACE_CBID_SIZE > (int)CUPTI_RUNTIME_TRACE_CBID_SIZE
                    ? (int)CUPTI_DRIVER_TRACE_CBID_SIZE
                    : (int)CUPTI_RUNTIME_TRACE_CBID_SIZE
};

typedef struct full_buf {
    uint8_t *buf;
    size_t valid;
    struct full_buf *next;
} full_buf;

static struct {
    lfi_session *s;
    int kernels_only, api_fine; /* api_fine: calls chosen one by one (else the whole kinds) */
    pthread_mutex_t lock;       /* the pool and the queue */
    pthread_mutex_t drain_lock; /* one drain at a time */
    uint8_t *pool[256];
    int n_pool;
    full_buf *head, **tail;
    int ready[2]; /* a pipe: a byte per buffer queued */
    atomic_llong dropped;
    atomic_llong handed, returned; /* buffers given to CUPTI, and given back to us */
    int flushed;                   /* the last flush had CUPTI hand back what it held */
    const char *api_names[2][API_NAMES];
    /* the GPUs, once the driver is up */
    atomic_int devices_known;
    int n_devices;
    int sms[MAX_DEVICES];
    cudaOccDeviceProp occ[MAX_DEVICES];
    char props[MAX_DEVICES * 512];
} cs = {.lock = PTHREAD_MUTEX_INITIALIZER, .drain_lock = PTHREAD_MUTEX_INITIALIZER, .ready = {-1, -1}};

/* What we ask CUPTI for. Calls are asked for one by one where CUPTI can (only those worth a row:
 * the rest, hundreds per step in a framework, would cost time and be thrown away). */
static const CUpti_ActivityKind device_kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                  CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MARKER,
                                                  CUPTI_ACTIVITY_KIND_OVERHEAD};
static const CUpti_ActivityKind host_kinds[] = {CUPTI_ACTIVITY_KIND_MEMORY2};

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    pthread_mutex_lock(&cs.lock);
    *buf = cs.n_pool ? cs.pool[--cs.n_pool] : NULL;
    pthread_mutex_unlock(&cs.lock);
    if (!*buf)
        *buf = aligned_alloc(8, BUF_BYTES);
    if (*buf)
        atomic_fetch_add(&cs.handed, 1);
    *size = *buf ? BUF_BYTES : 0; /* none: CUPTI drops the records and counts them */
    *max_records = 0;
}

static void buffer_return(uint8_t *buf)
{
    pthread_mutex_lock(&cs.lock);
    if (cs.n_pool < (int)(sizeof cs.pool / sizeof cs.pool[0])) {
        cs.pool[cs.n_pool++] = buf;
        buf = NULL;
    }
    pthread_mutex_unlock(&cs.lock);
    free(buf);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
    (void)size;
    if (buf)
        atomic_fetch_add(&cs.returned, 1);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
        atomic_fetch_add(&cs.dropped, (long long)dropped);
    full_buf *f = buf ? malloc(sizeof *f) : NULL;
    if (!f) {
        if (buf) { /* the records are lost, and counted */
            CUpti_Activity *r = NULL;
            while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS)
                atomic_fetch_add(&cs.dropped, 1);
            buffer_return(buf);
        }
        return;
    }
    *f = (full_buf){buf, valid, NULL};
    pthread_mutex_lock(&cs.lock);
    *cs.tail = f;
    cs.tail = &f->next;
    pthread_mutex_unlock(&cs.lock);
    if (cs.ready[1] >= 0) {
        ssize_t w = write(cs.ready[1], "b", 1); /* full pipe: the helper is awake already */
        (void)w;
    }
}

/* "cudaLaunchKernel_v7000" -> "cudaLaunchKernel", kept per callback id. */
static const char *api_name(int driver, uint32_t cbid)
{
    const size_t cap = sizeof cs.api_names[0] / sizeof cs.api_names[0][0];
    if (cbid >= cap)
        return NULL;
    const char *n = cs.api_names[driver][cbid];
    if (n)
        return n;
    const char *raw = NULL;
    if (cuptiGetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &raw) !=
            CUPTI_SUCCESS ||
        !raw)
        return NULL;
    char *copy = strdup(raw);
    char *v = copy ? strstr(copy, "_v") : NULL;
    if (v && v != copy && v[2] >= '0' && v[2] <= '9')
        *v = '\0';
    cs.api_names[driver][cbid] = copy; /* a race writes the same text twice; one copy leaks */
    return copy;
}

static const char *copy_kind(uint8_t k)
{
    static const char *const names[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                        "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
    return k < sizeof names / sizeof names[0] ? names[k] : "Unknown";
}

static const char *memory_kind(unsigned k)
{
    static const char *const names[] = {"Unknown", "Pageable", "Pinned",        "Device",
                                        "Array",   "Managed",  "Device Static", "Managed Static"};
    return k < sizeof names / sizeof names[0] ? names[k] : "Unknown";
}

static const char *overhead_name(CUpti_ActivityOverheadKind k)
{
    switch (k) {
    case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER:
        return "Driver Compiler";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH:
        return "Buffer Flush";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION:
        return "Instrumentation";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE:
        return "Resource";
    case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST:
        return "Activity Buffer Request";
    default:
        return "Unknown";
    }
}

static void from_kernel(const CUpti_ActivityKernel10 *k, lfi_rec *o)
{
    *o = (lfi_rec){.kind = LFI_KERNEL,
                   .name = k->name ? k->name : "kernel",
                   .start = (int64_t)k->start,
                   .end = (int64_t)k->end,
                   .corr = k->correlationId,
                   .device = k->deviceId,
                   .context = k->contextId,
                   .stream = k->streamId,
                   .grid = {k->gridX, k->gridY, k->gridZ},
                   .block = {k->blockX, k->blockY, k->blockZ},
                   .regs = k->registersPerThread,
                   .static_smem = k->staticSharedMemory,
                   .dyn_smem = k->dynamicSharedMemory,
                   .graph_id = k->graphId,
                   .graph_node_id = k->graphNodeId};
}

/* One CUPTI record as an lfi_rec (name may point into buf); 0 for the kinds not kept. Over 80
 * lines: one case per CUPTI record kind, each its struct's fields copied over, read best whole
 * (and unchanged since the H200 runs of bench/RESULTS.md). */
static int convert(const CUpti_Activity *r, lfi_rec *o, char *buf, size_t cap)
{
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL:
        from_kernel((const void *)r, o);
        return 1;
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *c = (const void *)r;
        snprintf(buf, cap, "Memcpy %s (%s -> %s)", copy_kind(c->copyKind), memory_kind(c->srcKind),
                 memory_kind(c->dstKind));
        *o = (lfi_rec){.kind = LFI_MEMCPY,
                       .name = buf,
                       .start = (int64_t)c->start,
                       .end = (int64_t)c->end,
                       .corr = c->correlationId,
                       .device = c->deviceId,
                       .context = c->contextId,
                       .stream = c->streamId,
                       .bytes = c->bytes,
                       .graph_id = c->graphId,
                       .graph_node_id = c->graphNodeId};
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const void *)r;
        snprintf(buf, cap, "Memset (%s)", memory_kind(m->memoryKind));
        *o = (lfi_rec){.kind = LFI_MEMSET,
                       .name = buf,
                       .start = (int64_t)m->start,
                       .end = (int64_t)m->end,
                       .corr = m->correlationId,
                       .device = m->deviceId,
                       .context = m->contextId,
                       .stream = m->streamId,
                       .bytes = m->bytes,
                       .graph_id = m->graphId,
                       .graph_node_id = m->graphNodeId};
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
        const CUpti_ActivityAPI *a = (const void *)r;
        const int driver = r->kind == CUPTI_ACTIVITY_KIND_DRIVER;
        *o = (lfi_rec){.kind = driver ? LFI_DRIVER : LFI_RUNTIME,
                       .name = api_name(driver, a->cbid),
                       .start = (int64_t)a->start,
                       .end = (int64_t)a->end,
                       .corr = a->correlationId,
                       .pid = a->processId,
                       .tid = a->threadId,
                       .cbid = (int32_t)a->cbid};
        return o->name != NULL;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
        const CUpti_ActivityMarker2 *m = (const void *)r;
        const int mark = m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START ? LFI_MARK_START
                         : m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END ? LFI_MARK_END
                                                                     : LFI_MARK_INSTANT;
        const int thread = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD;
        *o = (lfi_rec){.kind = LFI_MARKER,
                       .name = m->name,
                       .domain = m->domain,
                       .start = (int64_t)m->timestamp,
                       .end = (int64_t)m->timestamp,
                       .corr = m->id,
                       .pid = thread ? m->objectId.pt.processId : 0,
                       .tid = thread ? m->objectId.pt.threadId : 0,
                       .mark = (int8_t)mark};
        return m->timestamp != 0;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: {
        const CUpti_ActivityMemory4 *m = (const void *)r;
        const int op = m->memoryOperationType;
        *o = (lfi_rec){.kind = LFI_MEMORY,
                       .start = (int64_t)m->timestamp,
                       .end = (int64_t)m->timestamp,
                       .corr = m->correlationId,
                       .pid = m->processId,
                       .device = m->deviceId,
                       .bytes = m->bytes,
                       .addr = m->address,
                       .alloc = (int8_t)(op == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION ? 1 : -1)};
        return op == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION ||
               op == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
    }
    case CUPTI_ACTIVITY_KIND_OVERHEAD: {
        CUpti_ActivityOverhead3 *v = (void *)r;
        free(v->overheadData); /* ours to free, says cupti_activity.h */
        v->overheadData = NULL;
        const int thread = v->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD;
        *o = (lfi_rec){.kind = LFI_OVERHEAD,
                       .name = overhead_name(v->overheadKind),
                       .start = (int64_t)v->start,
                       .end = (int64_t)v->end,
                       .tid = thread ? v->objectId.pt.threadId : 0};
        return v->start || v->end;
    }
    default:
        return 0;
    }
}

void lfi_cupti_drain(void)
{
    pthread_mutex_lock(&cs.drain_lock);
    for (;;) {
        pthread_mutex_lock(&cs.lock);
        full_buf *f = cs.head;
        if (f && !(cs.head = f->next))
            cs.tail = &cs.head;
        pthread_mutex_unlock(&cs.lock);
        if (!f)
            break;
        CUpti_Activity *r = NULL;
        char name[96];
        lfi_rec o;
        while (cuptiActivityGetNextRecord(f->buf, f->valid, &r) == CUPTI_SUCCESS)
            if (convert(r, &o, name, sizeof name))
                lfi_add(cs.s, &o);
        buffer_return(f->buf);
        free(f);
    }
    pthread_mutex_unlock(&cs.drain_lock);
}

void lfi_cupti_flush(void)
{
    cs.flushed = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == CUPTI_SUCCESS;
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS && dropped)
        atomic_fetch_add(&cs.dropped, (long long)dropped);
    lfi_cupti_drain();
}

int64_t lfi_cupti_dropped(void)
{
    return atomic_load(&cs.dropped);
}

/* After lfi_cupti_flush, which has CUPTI hand back every buffer it holds: buffers we gave CUPTI
 * that never came back (0 when the flush failed: nothing can be told then). CUPTI keeps one set of buffer callbacks per
 * process, so they went to another client that registered its own since (torch.profiler's Kineto, Nsight), with their
 * records. */
int64_t lfi_cupti_buffers_taken(void)
{
    return cs.flushed ? atomic_load(&cs.handed) - atomic_load(&cs.returned) : 0;
}

int64_t lfi_cupti_now(void)
{
    uint64_t t = 0;
    cuptiGetTimestamp(&t);
    return (int64_t)t;
}

int lfi_cupti_ready_fd(void)
{
    return cs.ready[0];
}

/* The calls worth a row, one callback id at a time: 0 when CUPTI cannot choose them so. */
static int enable_calls(int on)
{
    for (int driver = 0; driver < 2; driver++) {
        const uint32_t n = driver ? CUPTI_DRIVER_TRACE_CBID_SIZE : CUPTI_RUNTIME_TRACE_CBID_SIZE;
        for (uint32_t cbid = 1; cbid < n; cbid++) {
            const char *name = api_name(driver, cbid);
            if (!name || !lfi_call_wanted(name))
                continue;
            CUptiResult r = driver ? cuptiActivityEnableDriverApi(cbid, (uint8_t)on)
                                   : cuptiActivityEnableRuntimeApi(cbid, (uint8_t)on);
            if (r != CUPTI_SUCCESS && r != CUPTI_ERROR_INVALID_PARAMETER)
                return 0;
        }
    }
    return 1;
}

void lfi_cupti_enable(int on)
{
    for (size_t i = 0; i < sizeof device_kinds / sizeof device_kinds[0]; i++)
        on ? cuptiActivityEnable(device_kinds[i]) : cuptiActivityDisable(device_kinds[i]);
    if (cs.kernels_only)
        return;
    for (size_t i = 0; i < sizeof host_kinds / sizeof host_kinds[0]; i++)
        on ? cuptiActivityEnable(host_kinds[i]) : cuptiActivityDisable(host_kinds[i]);
    if (cs.api_fine && !enable_calls(on))
        cs.api_fine = 0; /* then the whole kinds, their calls filtered when kept */
    if (!cs.api_fine) {
        on ? cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) : cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);
        on ? cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) : cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
    }
}

int lfi_cupti_start(lfi_session *s, int kernels_only, char *why, size_t cap)
{
    cs.s = s;
    cs.kernels_only = kernels_only;
    cs.api_fine = 1;
    cs.tail = &cs.head;
    if (pipe(cs.ready) == 0) {
        fcntl(cs.ready[0], F_SETFD, FD_CLOEXEC), fcntl(cs.ready[1], F_SETFD, FD_CLOEXEC);
        fcntl(cs.ready[0], F_SETFL, O_NONBLOCK), fcntl(cs.ready[1], F_SETFL, O_NONBLOCK);
    } else {
        cs.ready[0] = cs.ready[1] = -1;
    }
    for (int i = 0; i < 8; i++) { /* buffers ready before the first is asked for */
        uint8_t *b = aligned_alloc(8, BUF_BYTES);
        if (b)
            cs.pool[cs.n_pool++] = b;
    }
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r == CUPTI_SUCCESS) /* OS thread ids, as /proc and the CLI's messages name threads */
        r = cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    if (r != CUPTI_SUCCESS) {
        const char *msg = NULL;
        cuptiGetResultString(r, &msg);
        snprintf(why, cap, "CUPTI: %s", msg ? msg : "error");
        return -1;
    }
    return 0;
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
    if (cuDeviceGet(&d, k) != CUDA_SUCCESS || cuDeviceGetName(name, sizeof name, d) != CUDA_SUCCESS ||
        cuDeviceTotalMem(&mem, d) != CUDA_SUCCESS)
        return 0;
    for (int i = 0; i < 12; i++)
        if (cuDeviceGetAttribute(&a[i], which[i], d) != CUDA_SUCCESS)
            return 0;
    for (char *p = name; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = ' ';
    cs.sms[k] = a[7];
    cs.occ[k] = (cudaOccDeviceProp){.computeMajor = a[0],
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

int lfi_cupti_devices(void)
{
    if (atomic_load(&cs.devices_known))
        return 1;
    int n = 0;
    CUresult r = cuDeviceGetCount(&n);
    if (r == CUDA_ERROR_NOT_INITIALIZED)
        return 0; /* cuInit has not returned yet */
    size_t used = 0;
    n = r == CUDA_SUCCESS ? (n < MAX_DEVICES ? n : MAX_DEVICES) : 0;
    int k = 0;
    for (; k < n; k++) {
        int w = describe(k, cs.props + used, sizeof cs.props - used - 2);
        if (!w)
            break;
        used += (size_t)w;
    }
    if (used)
        snprintf(cs.props + used, sizeof cs.props - used, "]");
    cs.n_devices = k;
    atomic_store(&cs.devices_known, 1);
    return 1;
}

const char *lfi_cupti_properties(void)
{
    return atomic_load(&cs.devices_known) && cs.props[0] ? cs.props : NULL;
}

const int *lfi_cupti_sms(int *n)
{
    *n = atomic_load(&cs.devices_known) ? cs.n_devices : 0;
    return cs.sms;
}

/* Kineto's "est. achieved occupancy %": blocks per SM capped by what the calculator says fits,
 * times threads per block over the SM's thread limit (the kernel described as Kineto describes
 * it: static shared memory, the default limit). */
int lfi_cupti_occupancy(void *ctx, const lfi_rec *k, double blocks_per_sm)
{
    (void)ctx;
    if ((int)k->device >= cs.n_devices || !cs.occ[k->device].maxThreadsPerMultiprocessor)
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
    if (cudaOccMaxActiveBlocksPerMultiprocessor(&res, &cs.occ[k->device], &fa, &st, block, (size_t)k->dyn_smem) !=
        CUDA_OCC_SUCCESS)
        return -1;
    if (res.activeBlocksPerMultiprocessor < blocks_per_sm)
        blocks_per_sm = res.activeBlocksPerMultiprocessor;
    return (int)(blocks_per_sm * block / cs.occ[k->device].maxThreadsPerMultiprocessor * 100);
}

char *lfi_cupti_demangle(const char *name)
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
