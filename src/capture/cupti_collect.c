/* The one CUPTI collector: activity buffers handed out from a pool and queued when full (the
 * completion callback only queues: it may run on the program's own thread), their records turned
 * into lfc_rec (cupti_records.c) and handed to the user's sink when it drains; and the callbacks
 * that see CUDA graph nodes made, copied and updated, and the calls that make them (graph_nodes.c
 * turns what they read into records). Kinds and calls as Kineto records them (docs/gpu_notes.md,
 * "CUPTI"). `linfuse profile`'s injection library and the in-process profiler's CUDA event source
 * are its two users; one process has one (CUPTI takes one client). Layer: capture/. */
#include <cupti.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capture/cupti_records.h"

enum { BUF_BYTES = 4 << 20, POOL_BUFS = 256 };

typedef struct full_buf {
    uint8_t *buf;
    size_t valid;
    struct full_buf *next;
} full_buf;

static struct {
    lfc_opts o;
    int api_fine;               /* calls chosen one by one (else the whole kinds) */
    pthread_mutex_t lock;       /* the pool and the queue */
    pthread_mutex_t drain_lock; /* one drain at a time */
    uint8_t *pool[POOL_BUFS];
    int n_pool;
    full_buf *head, **tail;
    int ready[2]; /* a pipe: a byte per buffer queued */
    atomic_llong dropped;
    atomic_llong handed, returned; /* buffers given to CUPTI, and given back to us */
    int flushed;                   /* the last flush had CUPTI hand back what it held */
    CUpti_SubscriberHandle sub;
    int subscribed;
} cs = {.lock = PTHREAD_MUTEX_INITIALIZER, .drain_lock = PTHREAD_MUTEX_INITIALIZER, .ready = {-1, -1}};

/* What we ask CUPTI for: device work always; NVTX markers throughout a session (kept apart:
 * graph captures are attributed to the ranges open while they ran, even outside the window);
 * calls and memory unless --kernels-only; External ids for the in-process profiler. */
static const CUpti_ActivityKind device_kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                  CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_OVERHEAD};

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
    if (cs.n_pool < POOL_BUFS) {
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
        ssize_t w = write(cs.ready[1], "b", 1); /* full pipe: the reader is awake already */
        (void)w;
    }
}

void lfc_drain(void)
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
        lfc_rec o;
        while (cuptiActivityGetNextRecord(f->buf, f->valid, &r) == CUPTI_SUCCESS)
            if (lfc_convert(r, &o, name, sizeof name) && cs.o.sink)
                cs.o.sink(cs.o.ctx, &o);
        buffer_return(f->buf);
        free(f);
    }
    pthread_mutex_unlock(&cs.drain_lock);
}

void lfc_flush(void)
{
    cs.flushed = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == CUPTI_SUCCESS;
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS && dropped)
        atomic_fetch_add(&cs.dropped, (long long)dropped);
    lfc_drain();
}

int64_t lfc_dropped(void)
{
    return atomic_load(&cs.dropped);
}

/* After lfc_flush, which has CUPTI hand back every buffer it holds: buffers we gave CUPTI that
 * never came back (0 when the flush failed: nothing can be told then). CUPTI keeps one set of
 * buffer callbacks per process, so they went to another client that registered its own since
 * (torch.profiler's Kineto, Nsight), with their records. */
int64_t lfc_buffers_taken(void)
{
    return cs.flushed ? atomic_load(&cs.handed) - atomic_load(&cs.returned) : 0;
}

int64_t lfc_now(void)
{
    uint64_t t = 0;
    cuptiGetTimestamp(&t);
    return (int64_t)t;
}

int lfc_ready_fd(void)
{
    return cs.ready[0];
}

void lfc_push_external(uint64_t id)
{
    cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
}

void lfc_pop_external(void)
{
    uint64_t id;
    cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
}

/* The calls worth a row, one callback id at a time: 0 when CUPTI cannot choose them so. */
static int enable_calls(int on)
{
    for (int driver = 0; driver < 2; driver++) {
        const uint32_t n = driver ? CUPTI_DRIVER_TRACE_CBID_SIZE : CUPTI_RUNTIME_TRACE_CBID_SIZE;
        for (uint32_t cbid = 1; cbid < n; cbid++) {
            const char *name = lfc_api_name(driver, cbid);
            if (!name || !lfc_call_wanted(name))
                continue;
            CUptiResult r = driver ? cuptiActivityEnableDriverApi(cbid, (uint8_t)on)
                                   : cuptiActivityEnableRuntimeApi(cbid, (uint8_t)on);
            if (r != CUPTI_SUCCESS && r != CUPTI_ERROR_INVALID_PARAMETER)
                return 0;
        }
    }
    return 1;
}

static void set_kind(CUpti_ActivityKind k, int on)
{
    on ? cuptiActivityEnable(k) : cuptiActivityDisable(k);
}

void lfc_enable(int on)
{
    lfc_nodes_recording(on);
    for (size_t i = 0; i < sizeof device_kinds / sizeof device_kinds[0]; i++)
        set_kind(device_kinds[i], on);
    if (cs.o.external_ids)
        set_kind(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, on);
    if (cs.o.kernels_only)
        return;
    set_kind(CUPTI_ACTIVITY_KIND_MEMORY2, on);
    if (cs.api_fine && !enable_calls(on))
        cs.api_fine = 0; /* then the whole kinds, their calls filtered when kept */
    if (!cs.api_fine) {
        set_kind(CUPTI_ACTIVITY_KIND_RUNTIME, on);
        set_kind(CUPTI_ACTIVITY_KIND_DRIVER, on);
    }
}

static void CUPTIAPI on_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data)
{
    (void)user;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API) {
        const CUpti_CallbackData *cd = data;
        const char *name = lfc_api_name(domain == CUPTI_CB_DOMAIN_DRIVER_API, cbid);
        if (cd->callbackSite == CUPTI_API_ENTER)
            lfc_call_enter(name, cd->correlationId,
                           !name                          ? 0
                           : strstr(name, "BeginCapture") ? 1
                           : strstr(name, "EndCapture")   ? -1
                                                          : 0);
        else /* cudaError_t and CUresult alike: 0 is success */
            lfc_call_exit(!cd->functionReturnValue || *(const int *)cd->functionReturnValue == 0);
        return;
    }
    if (domain != CUPTI_CB_DOMAIN_RESOURCE)
        return;
    const CUpti_GraphData *g = ((const CUpti_ResourceData *)data)->resourceDescriptor;
    uint64_t node = 0, from = 0;
    uint32_t graph = 0;
    if (!g || !g->node || cuptiGetGraphNodeId(g->node, &node) != CUPTI_SUCCESS)
        return;
    if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
        if (g->graph)
            cuptiGetGraphId(g->graph, &graph);
        lfc_node_made(node, graph, lfc_now());
    } else if ((cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED || cbid == CUPTI_CBID_RESOURCE_GRAPH_NODE_UPDATED) &&
               g->originalNode && cuptiGetGraphNodeId(g->originalNode, &from) == CUPTI_SUCCESS) {
        lfc_node_copied(node, from, lfc_now());
    }
}

/* The callbacks: the resource events of graph nodes, and the calls lfc_call_watched names. */
static int subscribe(char *why, size_t cap)
{
    if (cuptiSubscribe(&cs.sub, (CUpti_CallbackFunc)on_callback, NULL) != CUPTI_SUCCESS) {
        snprintf(why, cap, "CUPTI: another client subscribed to its callbacks first");
        return -1;
    }
    cs.subscribed = 1;
    static const CUpti_CallbackId resource[] = {CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED,
                                                CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED,
                                                CUPTI_CBID_RESOURCE_GRAPH_NODE_UPDATED};
    for (size_t i = 0; i < sizeof resource / sizeof resource[0] && !cs.o.no_graphs; i++)
        cuptiEnableCallback(1, cs.sub, CUPTI_CB_DOMAIN_RESOURCE, resource[i]);
    for (int driver = 0; driver < 2; driver++) {
        const uint32_t n = driver ? CUPTI_DRIVER_TRACE_CBID_SIZE : CUPTI_RUNTIME_TRACE_CBID_SIZE;
        for (uint32_t cbid = 1; cbid < n; cbid++) {
            const char *name = lfc_api_name(driver, cbid);
            if (name && lfc_call_watched(name))
                cuptiEnableCallback(1, cs.sub, driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, cbid);
        }
    }
    return 0;
}

int lfc_start(const lfc_opts *o, char *why, size_t cap)
{
    cs.o = *o;
    cs.api_fine = cs.o.calls_by_name;
    cs.tail = &cs.head;
    atomic_store(&cs.dropped, 0);
    if (cs.ready[0] < 0 && pipe(cs.ready) == 0) {
        fcntl(cs.ready[0], F_SETFD, FD_CLOEXEC), fcntl(cs.ready[1], F_SETFD, FD_CLOEXEC);
        fcntl(cs.ready[0], F_SETFL, O_NONBLOCK), fcntl(cs.ready[1], F_SETFL, O_NONBLOCK);
    }
    pthread_mutex_lock(&cs.lock);
    while (cs.n_pool < 8) { /* buffers ready before the first is asked for */
        uint8_t *b = aligned_alloc(8, BUF_BYTES);
        if (!b)
            break;
        cs.pool[cs.n_pool++] = b;
    }
    pthread_mutex_unlock(&cs.lock);
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r == CUPTI_SUCCESS) /* OS thread ids, as /proc, the CLI's messages and graph_nodes.c name threads */
        r = cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    if (r != CUPTI_SUCCESS) {
        const char *msg = NULL;
        cuptiGetResultString(r, &msg);
        snprintf(why, cap, "CUPTI: %s", msg ? msg : "error");
        return -1;
    }
    lfc_nodes_to(o->sink, o->ctx, o->python_stack);
    if ((!o->no_graphs || o->python_stack) && subscribe(why, cap) != 0) {
        lfc_nodes_to(NULL, NULL, 0);
        return -1;
    }
    if (o->nvtx) /* throughout the session */
        set_kind(CUPTI_ACTIVITY_KIND_MARKER, 1);
    return 0;
}

void lfc_stop(void)
{
    lfc_enable(0);
    set_kind(CUPTI_ACTIVITY_KIND_MARKER, 0);
    lfc_nodes_to(NULL, NULL, 0);
    if (cs.subscribed)
        cuptiUnsubscribe(cs.sub);
    cs.subscribed = 0;
}
