/* CUPTI activity as the CUDA device's event source: kernels, copies and memsets with the GPU's
 * own timestamps, runtime and driver calls that launch work, and External ids tying each
 * record to the linfuse op that caused it (docs/trace_format.md, "Events"; docs/gpu_notes.md,
 * "CUPTI"). The profiler starts and drains it through the backend's table; this file never
 * calls the profiler. Layer: backend/cuda. */
#include <cuda_occupancy.h>
#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_impl.h"

/* libstdc++'s demangler (the CUDA backend links it): kernels built from templates have
 * mangled names; cuBLAS's are plain. */
char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

enum { BUF_BYTES = 4 << 20, MAX_BUFS = 256, POOL_BUFS = 8 };

/* What we ask CUPTI for (docs/gpu_notes.md, "CUPTI"); OVERHEAD brings the blog's "Activity Buffer
 * Request" and CUPTI's other costs, so the trace shows what tracing itself took. */
static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                           CUPTI_ACTIVITY_KIND_RUNTIME,
                                           CUPTI_ACTIVITY_KIND_DRIVER,
                                           CUPTI_ACTIVITY_KIND_MEMCPY,
                                           CUPTI_ACTIVITY_KIND_MEMSET,
                                           CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                           CUPTI_ACTIVITY_KIND_OVERHEAD};

static struct {
    int active;
    int64_t mono_minus_cupti; /* CLOCK_MONOTONIC ns minus CUPTI ns */
    pthread_mutex_t lock;
    uint8_t *done[MAX_BUFS];
    size_t done_size[MAX_BUFS];
    int n_done;
    uint8_t *pool[MAX_BUFS]; /* empty buffers, allocated at start and returned after each drain */
    int n_pool;
    int64_t dropped;
    int sms;
    cudaOccDeviceProp occ;                 /* the device, as the occupancy calculator wants it */
    char props[LF_CUDA_MAX_DEVICES * 512]; /* Kineto's deviceProperties: one object per GPU */
} cs = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* CUPTI waits on this callback (its "Activity Buffer Request" overhead), so it hands out a
 * buffer from the pool; it allocates only when the pool has run dry. */
static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    pthread_mutex_lock(&cs.lock);
    *buf = cs.n_pool ? cs.pool[--cs.n_pool] : NULL;
    pthread_mutex_unlock(&cs.lock);
    if (!*buf)
        *buf = aligned_alloc(8, BUF_BYTES);
    *size = *buf ? BUF_BYTES : 0;
    *max_records = 0;
}

/* A drained buffer goes back to the pool (or is freed when the pool is full). */
static void buffer_return(uint8_t *buf)
{
    pthread_mutex_lock(&cs.lock);
    if (cs.n_pool < MAX_BUFS) {
        cs.pool[cs.n_pool++] = buf;
        buf = NULL;
    }
    pthread_mutex_unlock(&cs.lock);
    free(buf);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    pthread_mutex_lock(&cs.lock);
    if (cs.n_done < MAX_BUFS) {
        cs.done[cs.n_done] = buf;
        cs.done_size[cs.n_done++] = valid;
        buf = NULL;
    }
    pthread_mutex_unlock(&cs.lock);
    if (buf) { /* more full buffers than we hold: their records are lost, and counted */
        CUpti_Activity *r = NULL;
        while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS)
            cs.dropped++;
        buffer_return(buf);
    }
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The pool of empty buffers CUPTI's requests are served from, filled up front. */
static void fill_pool(void)
{
    pthread_mutex_lock(&cs.lock);
    while (cs.n_pool < POOL_BUFS) {
        uint8_t *b = aligned_alloc(8, BUF_BYTES);
        if (!b)
            break;
        cs.pool[cs.n_pool++] = b;
    }
    pthread_mutex_unlock(&cs.lock);
}

/* CUPTI's callbacks, thread ids and activity kinds on, and its clock mapped onto ours: 0, or -1
 * (the message set; the kinds enabled turned off again). */
static int enable_activities(void)
{
    if (LF_CU_CHECK(CUPTI, cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) != LF_OK)
        return -1;
    /* OS thread ids (gettid), as the profiler's host events use: a launch call then nests
     * inside the op that made it (CUPTI's default is pthread_self) */
    if (LF_CU_CHECK(CUPTI, cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)) != LF_OK)
        return -1;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (LF_CU_CHECK(CUPTI, cuptiActivityEnable(kinds[i])) != LF_OK) {
            for (size_t j = 0; j < i; j++)
                cuptiActivityDisable(kinds[j]);
            return -1;
        }
    uint64_t t = 0;
    if (LF_CU_CHECK(CUPTI, cuptiGetTimestamp(&t)) != LF_OK) {
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
            cuptiActivityDisable(kinds[i]);
        return -1;
    }
    cs.mono_minus_cupti = mono_ns() - (int64_t)t;
    return 0;
}

/* Kineto's deviceProperties for every GPU, as Kineto lists them, and GPU 0 as the occupancy
 * calculator wants it (the GPUs of one machine are alike). */
static void describe_devices(void)
{
    size_t used = 0;
    cs.props[0] = '\0';
    for (int k = 0; k < lf_cuda_device_count(); k++) {
        struct cudaDeviceProp p;
        if (LF_CU_CHECK(RUNTIME, cudaGetDeviceProperties(&p, k)) != LF_OK)
            break;
        if (k == 0) {
            cs.sms = p.multiProcessorCount;
            cs.occ = (cudaOccDeviceProp){p.major,
                                         p.minor,
                                         p.maxThreadsPerBlock,
                                         p.maxThreadsPerMultiProcessor,
                                         p.regsPerBlock,
                                         p.regsPerMultiprocessor,
                                         p.warpSize,
                                         p.sharedMemPerBlock,
                                         p.sharedMemPerMultiprocessor,
                                         p.multiProcessorCount,
                                         p.sharedMemPerBlockOptin,
                                         p.reservedSharedMemPerBlock};
        }
        int w = snprintf(cs.props + used, sizeof cs.props - used,
                         "%s{\"id\": %d, \"name\": \"%s\", \"totalGlobalMem\": %zu, \"computeMajor\": %d, "
                         "\"computeMinor\": %d, \"maxThreadsPerBlock\": %d, \"maxThreadsPerMultiprocessor\": %d, "
                         "\"regsPerBlock\": %d, \"warpSize\": %d, \"sharedMemPerBlock\": %zu, \"numSms\": %d, "
                         "\"regsPerMultiprocessor\": %d, \"sharedMemPerBlockOptin\": %zu, "
                         "\"sharedMemPerMultiprocessor\": %zu}",
                         k ? ", " : "[", k, p.name, p.totalGlobalMem, p.major, p.minor, p.maxThreadsPerBlock,
                         p.maxThreadsPerMultiProcessor, p.regsPerBlock, p.warpSize, p.sharedMemPerBlock,
                         p.multiProcessorCount, p.regsPerMultiprocessor, p.sharedMemPerBlockOptin,
                         p.sharedMemPerMultiprocessor);
        if (w < 0 || (size_t)w >= sizeof cs.props - used - 2) {
            cs.props[used] = '\0';
            break;
        }
        used += (size_t)w;
    }
    if (used)
        snprintf(cs.props + used, sizeof cs.props - used, "]");
}

/* Begin collecting: 0, or -1 with the reason in lf_last_error() (the profiler says it). */
static int src_start(void)
{
    const char *why;
    if (!lf_cuda_available(&why)) {
        lf_fail(LF_EDEVICE, "%s", why);
        return -1;
    }
    /* An injection tool (`linfuse profile`, Nsight Systems) owns CUPTI in this process: a second
     * client would take its buffers over and, stopping, turn its recording off. */
    const char *tool = getenv("CUDA_INJECTION64_PATH");
    if (tool && *tool) {
        lf_fail(LF_EDEVICE, "CUPTI belongs to the injection library %s in this process", tool);
        return -1;
    }
    fill_pool();
    if (enable_activities() != 0)
        return -1;
    describe_devices();
    cs.dropped = 0;
    cs.active = 1;
    return 0;
}

int lf_cupti_recording(void)
{
    return cs.active;
}

static void src_push(int64_t id)
{
    cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, (uint64_t)id);
}

static void src_pop(void)
{
    uint64_t id;
    cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
}

/* Runtime and driver calls worth a row: those that launch, copy, set, wait or ask occupancy
 * (start-up brings hundreds of attribute queries; Kineto mutes them too). */
static int interesting(const char *name)
{
    return name && (strstr(name, "Launch") || strstr(name, "Memcpy") || strstr(name, "Memset") ||
                    strstr(name, "Synchronize") || strstr(name, "Occupancy"));
}

/* Kineto's "est. achieved occupancy %": the blocks each SM gets (grid / SMs), capped by what the
 * occupancy calculator says fits, times threads per block over the SM's thread limit. The
 * kernel is described as Kineto describes it (static shared memory, default shared-memory
 * limit), so a GEMM that opted into more shared memory than the default reads 0 in both. */
static int est_occupancy(const CUpti_ActivityKernel10 *k, double blocks_per_sm)
{
    cudaOccFuncAttributes fa = {.maxThreadsPerBlock = INT32_MAX,
                                .numRegs = (int)k->registersPerThread,
                                .sharedSizeBytes = (size_t)k->staticSharedMemory,
                                .partitionedGCConfig = PARTITIONED_GC_OFF,
                                .shmemLimitConfig = FUNC_SHMEM_LIMIT_DEFAULT,
                                .numBlockBarriers = 1};
    cudaOccDeviceState st = {.cacheConfig = CACHE_PREFER_NONE, .carveoutConfig = SHAREDMEM_CARVEOUT_DEFAULT};
    cudaOccResult r;
    int block = (int)(k->blockX * k->blockY * k->blockZ);
    if (!cs.occ.maxThreadsPerMultiprocessor ||
        cudaOccMaxActiveBlocksPerMultiprocessor(&r, &cs.occ, &fa, &st, block, (size_t)k->dynamicSharedMemory) !=
            CUDA_OCC_SUCCESS)
        return -1;
    if (r.activeBlocksPerMultiprocessor < blocks_per_sm)
        blocks_per_sm = r.activeBlocksPerMultiprocessor;
    return (int)(blocks_per_sm * block / cs.occ.maxThreadsPerMultiprocessor * 100);
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
    case CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING:
        return "Runtime Triggered Module Loading";
    case CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING:
        return "Lazy Function Loading";
    case CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL:
        return "Command Buffer Full";
    case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST:
        return "Activity Buffer Request";
    case CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT:
        return "UVM Activity Init";
    default:
        return "Unknown";
    }
}

typedef struct corr_map {
    uint32_t corr;
    int64_t ext, api_ts;
    uint32_t pid, tid;
} corr_map;

static int by_corr(const void *a, const void *b)
{
    uint32_t x = ((const corr_map *)a)->corr, y = ((const corr_map *)b)->corr;
    return (x > y) - (x < y);
}

static corr_map *find(corr_map *m, size_t n, uint32_t corr)
{
    corr_map key = {corr, 0, 0, 0, 0};
    return bsearch(&key, m, n, sizeof *m, by_corr);
}

/* The full buffers CUPTI has handed over so far, taken (n of them). */
static int take_done(uint8_t *bufs[MAX_BUFS], size_t sizes[MAX_BUFS])
{
    pthread_mutex_lock(&cs.lock);
    int n = cs.n_done;
    memcpy(bufs, cs.done, (size_t)n * sizeof *bufs);
    memcpy(sizes, cs.done_size, (size_t)n * sizeof *sizes);
    cs.n_done = 0;
    pthread_mutex_unlock(&cs.lock);
    return n;
}

/* Pass 1: correlation -> External id, launching call's time and thread, one entry per
 * correlation, sorted (*nm of them); NULL when memory ran out (the events then carry neither). */
static corr_map *map_correlations(uint8_t *const *bufs, const size_t *sizes, int n, size_t *nm)
{
    size_t cap = 1024;
    *nm = 0;
    corr_map *m = malloc(cap * sizeof *m);
    for (int b = 0; b < n && m; b++) {
        CUpti_Activity *r = NULL;
        while (cuptiActivityGetNextRecord(bufs[b], sizes[b], &r) == CUPTI_SUCCESS) {
            if (*nm == cap) {
                corr_map *g = realloc(m, 2 * cap * sizeof *m);
                if (!g)
                    break;
                m = g, cap *= 2;
            }
            if (r->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
                const CUpti_ActivityExternalCorrelation *x = (const void *)r;
                m[(*nm)++] = (corr_map){x->correlationId, (int64_t)x->externalId, -1, 0, 0};
            } else if (r->kind == CUPTI_ACTIVITY_KIND_RUNTIME || r->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
                const CUpti_ActivityAPI *a = (const void *)r;
                m[(*nm)++] =
                    (corr_map){a->correlationId, 0, (int64_t)a->start + cs.mono_minus_cupti, a->processId, a->threadId};
            }
        }
    }
    if (!m)
        return NULL;
    qsort(m, *nm, sizeof *m, by_corr); /* merge entries of one correlation: the External id and the call */
    size_t k = 0;
    for (size_t i = 0; i < *nm; i++) {
        if (k && m[k - 1].corr == m[i].corr) {
            if (m[i].ext)
                m[k - 1].ext = m[i].ext;
            if (m[i].api_ts >= 0)
                m[k - 1].api_ts = m[i].api_ts, m[k - 1].pid = m[i].pid, m[k - 1].tid = m[i].tid;
        } else {
            m[k++] = m[i];
        }
    }
    *nm = k;
    return m;
}

/* A kernel record as an event, with Kineto's args (in extra) and its name demangled (*dem: the
 * caller frees it). */
static void kernel_event(const CUpti_ActivityKernel10 *k, lf_dev_event *e, char *extra, size_t cap, char **dem)
{
    int status = -1;
    *dem = k->name ? __cxa_demangle(k->name, NULL, NULL, &status) : NULL;
    e->kind = LF_DEV_KERNEL;
    e->name = *dem && status == 0 ? *dem : k->name ? k->name : "kernel";
    e->pid = k->deviceId, e->tid = k->streamId;
    e->ts_ns = (int64_t)k->start + cs.mono_minus_cupti;
    e->dur_ns = (int64_t)(k->end - k->start);
    e->correlation = k->correlationId;
    double blocks = (double)k->gridX * k->gridY * k->gridZ, threads = (double)k->blockX * k->blockY * k->blockZ;
    double bps = cs.sms ? blocks / cs.sms : 0;
    int n_extra =
        snprintf(extra, cap,
                 "\"context\": %u, \"registers per thread\": %u, \"shared memory\": %d, \"blocks per SM\": %f, "
                 "\"warps per SM\": %f, \"grid\": [%d, %d, %d], \"block\": [%d, %d, %d]",
                 k->contextId, k->registersPerThread, k->staticSharedMemory + k->dynamicSharedMemory, bps,
                 bps * threads / 32, k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ);
    int occ = est_occupancy(k, bps);
    if (occ >= 0 && n_extra > 0 && (size_t)n_extra < cap)
        snprintf(extra + n_extra, cap - (size_t)n_extra, ", \"est. achieved occupancy %%\": %d", occ);
    e->args_json = extra;
}

/* A memcpy or memset record as an event. */
static void copy_event(const CUpti_Activity *r, lf_dev_event *e)
{
    const CUpti_ActivityMemcpy6 *cp = (const void *)r;
    const CUpti_ActivityMemset4 *ms = (const void *)r;
    int is_copy = r->kind == CUPTI_ACTIVITY_KIND_MEMCPY;
    e->kind = is_copy ? LF_DEV_MEMCPY : LF_DEV_MEMSET;
    e->name = is_copy ? "Memcpy" : "Memset (Device)";
    e->pid = is_copy ? cp->deviceId : ms->deviceId, e->tid = is_copy ? cp->streamId : ms->streamId;
    e->ts_ns = (int64_t)(is_copy ? cp->start : ms->start) + cs.mono_minus_cupti;
    e->dur_ns = (int64_t)(is_copy ? cp->end - cp->start : ms->end - ms->start);
    e->correlation = is_copy ? cp->correlationId : ms->correlationId;
    e->bytes = (double)(is_copy ? cp->bytes : ms->bytes);
}

/* A runtime or driver call as an event (name: room for its name without the version suffix,
 * cudaLaunchKernel_v7000 -> cudaLaunchKernel), carrying its External id; 0 for a call no row is
 * worth. */
static int api_event(const CUpti_Activity *r, lf_dev_event *e, char *name, size_t cap, corr_map *m, size_t nm)
{
    const CUpti_ActivityAPI *a = (const void *)r;
    const char *cb = NULL;
    int rt = r->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
    cuptiGetCallbackName(rt ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, a->cbid, &cb);
    if (!interesting(cb))
        return 0;
    e->kind = rt ? LF_DEV_RUNTIME : LF_DEV_DRIVER;
    snprintf(name, cap, "%s", cb);
    char *v = strstr(name, "_v");
    if (v)
        *v = '\0';
    e->name = name;
    e->pid = a->processId, e->tid = a->threadId;
    e->ts_ns = (int64_t)a->start + cs.mono_minus_cupti;
    e->dur_ns = (int64_t)(a->end - a->start);
    e->correlation = a->correlationId;
    corr_map *cc = m ? find(m, nm, a->correlationId) : NULL;
    e->ext_id = cc ? cc->ext : 0;
    return 1;
}

/* CUPTI's own cost as an event on Kineto's "CUPTI Overhead" process; 0 when CUPTI could not time
 * it. Its data is ours to free, says cupti_activity.h. */
static int overhead_event(const CUpti_Activity *r, lf_dev_event *e)
{
    const CUpti_ActivityOverhead3 *o = (const void *)r;
    free(o->overheadData);
    if (!o->start && !o->end)
        return 0;
    e->kind = LF_DEV_OVERHEAD;
    e->name = overhead_name(o->overheadKind);
    e->pid = -1;
    e->tid = o->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? (int64_t)o->objectId.pt.threadId : 0;
    e->ts_ns = (int64_t)o->start + cs.mono_minus_cupti;
    e->dur_ns = (int64_t)(o->end - o->start);
    return 1;
}

/* Pass 2: one record handed to add as an event; device work carries its External id and its
 * launching call's time and thread. */
static void emit_record(const CUpti_Activity *r, corr_map *m, size_t nm, void *sink, lf_dev_event_sink add)
{
    lf_dev_event e = {.launch_ts = -1, .launch_pid = -1, .launch_tid = -1};
    char extra[512], name[128], *dem = NULL;
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        kernel_event((const void *)r, &e, extra, sizeof extra, &dem);
        break;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
    case CUPTI_ACTIVITY_KIND_MEMSET:
        copy_event(r, &e);
        break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
        if (api_event(r, &e, name, sizeof name, m, nm))
            add(sink, &e);
        return;
    case CUPTI_ACTIVITY_KIND_OVERHEAD:
        if (overhead_event(r, &e))
            add(sink, &e);
        return;
    default:
        return;
    }
    corr_map *c = m ? find(m, nm, (uint32_t)e.correlation) : NULL;
    if (c) {
        e.ext_id = c->ext;
        if (c->api_ts >= 0)
            e.launch_ts = c->api_ts, e.launch_pid = c->pid, e.launch_tid = c->tid;
    }
    add(sink, &e);
    free(dem);
}

static int64_t src_drain(void *sink, lf_dev_event_sink add)
{
    /* a failed wait or flush still drains what arrived; the records it kept back are lost and
     * the trace says so through the dropped count */
    (void)lf_cuda_synchronize_all();
    (void)LF_CU_CHECK(CUPTI, cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    uint8_t *bufs[MAX_BUFS];
    size_t sizes[MAX_BUFS], nm = 0;
    const int n = take_done(bufs, sizes);
    corr_map *m = map_correlations(bufs, sizes, n, &nm);
    for (int b = 0; b < n; b++) {
        CUpti_Activity *r = NULL;
        while (cuptiActivityGetNextRecord(bufs[b], sizes[b], &r) == CUPTI_SUCCESS)
            emit_record(r, m, nm, sink, add);
        buffer_return(bufs[b]);
    }
    free(m);
    size_t dropped = 0;
    cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped);
    return cs.dropped + (int64_t)dropped;
}

static void src_stop(void)
{
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        cuptiActivityDisable(kinds[i]);
    cs.active = 0;
}

static const char *src_props(void)
{
    return cs.props[0] ? cs.props : NULL;
}

const lf_device_events lf_cupti_events = {"cupti", src_start, src_push, src_pop, src_drain, src_stop, src_props};
