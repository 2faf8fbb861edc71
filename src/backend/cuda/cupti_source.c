/* CUPTI activity as the CUDA device's event source: kernels, copies and memsets with the GPU's
 * own timestamps, runtime and driver calls worth a row, and External ids tying each record to the
 * linfuse op that caused it (docs/trace_format.md, "Events"; docs/gpu_notes.md, "CUPTI"). The
 * records come from the one CUPTI collector (src/capture/), which `linfuse profile`'s injection
 * library uses too, so both name things as Kineto does; this file turns them into the profiler's
 * lf_dev_event. The profiler starts and drains it through the backend's table; this file never
 * calls the profiler. Layer: backend/cuda. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_impl.h"
#include "capture/capture.h"

enum { ARENA_BYTES = 1 << 20 };

typedef struct arena {
    struct arena *next;
    size_t used;
    char data[ARENA_BYTES];
} arena;

/* The records of one drain, kept until it ends: they are joined by correlation before any goes
 * out (a kernel carries its call's External id and time). Names are copied: the collector's point
 * into buffers it reuses. */
static struct {
    int active;
    int64_t mono_minus_cupti; /* CLOCK_MONOTONIC ns minus CUPTI ns */
    pthread_mutex_t lock;     /* the records: the collector's callbacks run on the program's threads */
    lfc_rec *recs;
    int64_t n, cap;
    arena *names;
    int oom;
} src = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *keep_str(const char *s)
{
    if (!s)
        return NULL;
    const size_t n = strlen(s) + 1;
    if (n > ARENA_BYTES)
        return "(name too long)";
    if (!src.names || ARENA_BYTES - src.names->used < n) {
        arena *a = malloc(sizeof *a);
        if (!a)
            return NULL;
        a->next = src.names, a->used = 0;
        src.names = a;
    }
    char *d = src.names->data + src.names->used;
    memcpy(d, s, n);
    src.names->used += n;
    return d;
}

static void keep(void *ctx, const lfc_rec *r)
{
    (void)ctx;
    if (r->kind == LFC_MARKER || r->kind == LFC_MEMORY || r->kind == LFC_NODE || r->kind == LFC_NODE_COPY ||
        r->kind == LFC_STACK)
        return; /* the in-process profiler records its own ranges and memory */
    pthread_mutex_lock(&src.lock);
    if (src.n == src.cap) {
        const int64_t cap = src.cap ? 2 * src.cap : 4096;
        lfc_rec *v = realloc(src.recs, (size_t)cap * sizeof *v);
        if (!v) {
            src.oom++;
            pthread_mutex_unlock(&src.lock);
            return;
        }
        src.recs = v, src.cap = cap;
    }
    lfc_rec *d = &src.recs[src.n++];
    *d = *r;
    d->name = keep_str(r->name);
    d->domain = d->stack = NULL;
    pthread_mutex_unlock(&src.lock);
}

static void forget(void)
{
    src.n = 0;
    while (src.names) {
        arena *next = src.names->next;
        free(src.names);
        src.names = next;
    }
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
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
    char msg[256];
    /* no graph nodes: linfuse's own plans say their steps themselves (profiler/replay_ops.c), and
     * subscribing to callbacks would refuse a process where another CUPTI client subscribed */
    const lfc_opts o = {.sink = keep, .external_ids = 1, .calls_by_name = 1, .no_graphs = 1};
    if (lfc_start(&o, msg, sizeof msg) != 0) {
        lf_fail(LF_EDEVICE, "%s", msg);
        return -1;
    }
    lfc_enable(1);
    src.mono_minus_cupti = mono_ns() - lfc_now();
    lfc_devices();
    src.oom = 0;
    src.active = 1;
    return 0;
}

int lf_cupti_recording(void)
{
    return src.active;
}

static void src_push(int64_t id)
{
    lfc_push_external((uint64_t)id);
}

static void src_pop(void)
{
    lfc_pop_external();
}

/* A call's External id and its time and thread, by correlation. */
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
    return m ? bsearch(&key, m, n, sizeof *m, by_corr) : NULL;
}

/* Pass 1: correlation -> External id, launching call's time and thread, one entry per
 * correlation, sorted (*nm of them); NULL when memory ran out (the events then carry neither). */
static corr_map *map_correlations(size_t *nm)
{
    *nm = 0;
    corr_map *m = malloc((size_t)(src.n ? src.n : 1) * sizeof *m);
    for (int64_t i = 0; i < src.n && m; i++) {
        const lfc_rec *r = &src.recs[i];
        if (r->kind == LFC_EXTERNAL)
            m[(*nm)++] = (corr_map){r->corr, (int64_t)r->addr, -1, 0, 0};
        else if (r->kind == LFC_RUNTIME || r->kind == LFC_DRIVER)
            m[(*nm)++] = (corr_map){r->corr, 0, r->start + src.mono_minus_cupti, r->pid, r->tid};
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

/* Kineto's kernel arguments (docs/trace_format.md, "Events") into extra. */
static void kernel_args(const lfc_rec *k, char *extra, size_t cap)
{
    int n_sms = 0;
    const int *sms = lfc_sms(&n_sms);
    const int nsm = (int)k->device < n_sms ? sms[k->device] : 0;
    const double blocks = (double)k->grid[0] * k->grid[1] * k->grid[2];
    const double threads = (double)k->block[0] * k->block[1] * k->block[2];
    const double bps = nsm ? blocks / nsm : 0;
    int n = snprintf(extra, cap,
                     "\"context\": %u, \"registers per thread\": %d, \"shared memory\": %d, \"blocks per SM\": %f, "
                     "\"warps per SM\": %f, \"grid\": [%d, %d, %d], \"block\": [%d, %d, %d]",
                     k->context, k->regs, k->static_smem + k->dyn_smem, bps, bps * threads / 32, k->grid[0], k->grid[1],
                     k->grid[2], k->block[0], k->block[1], k->block[2]);
    const int occ = nsm ? lfc_occupancy(NULL, k, bps) : -1;
    if (occ >= 0 && n > 0 && (size_t)n < cap)
        n += snprintf(extra + n, cap - (size_t)n, ", \"est. achieved occupancy %%\": %d", occ);
    if (k->graph_id && n > 0 && (size_t)n < cap)
        snprintf(extra + n, cap - (size_t)n, ", \"graph id\": %u, \"graph node id\": %llu", k->graph_id,
                 (unsigned long long)k->graph_node_id);
}

/* Pass 2: one record handed to add as an event; device work carries its External id and its
 * launching call's time and thread. */
static void emit_record(const lfc_rec *r, corr_map *m, size_t nm, void *sink, lf_dev_event_sink add)
{
    lf_dev_event e = {.launch_ts = -1, .launch_pid = -1, .launch_tid = -1};
    char extra[600];
    char *dem = NULL;
    const int work = r->kind == LFC_KERNEL || r->kind == LFC_MEMCPY || r->kind == LFC_MEMSET;
    const int call = r->kind == LFC_RUNTIME || r->kind == LFC_DRIVER;
    if ((!work && !call && r->kind != LFC_OVERHEAD) || !r->name)
        return;
    e.name = r->name;
    e.ts_ns = r->start + src.mono_minus_cupti;
    e.dur_ns = r->end - r->start;
    e.correlation = r->corr;
    if (r->kind == LFC_OVERHEAD) { /* Kineto's "CUPTI Overhead" process */
        e.kind = LF_DEV_OVERHEAD, e.pid = -1, e.tid = r->tid;
        add(sink, &e);
        return;
    }
    corr_map *c = find(m, nm, r->corr);
    e.ext_id = c ? c->ext : 0;
    if (call) {
        e.kind = r->kind == LFC_RUNTIME ? LF_DEV_RUNTIME : LF_DEV_DRIVER;
        e.pid = r->pid, e.tid = r->tid;
        add(sink, &e);
        return;
    }
    e.kind = r->kind == LFC_KERNEL ? LF_DEV_KERNEL : r->kind == LFC_MEMCPY ? LF_DEV_MEMCPY : LF_DEV_MEMSET;
    e.pid = r->device, e.tid = r->stream;
    e.bytes = (double)r->bytes;
    if (r->kind == LFC_KERNEL) {
        dem = lfc_demangle(r->name);
        e.name = dem ? dem : r->name;
        kernel_args(r, extra, sizeof extra);
        e.args_json = extra;
    }
    if (c && c->api_ts >= 0)
        e.launch_ts = c->api_ts, e.launch_pid = c->pid, e.launch_tid = c->tid;
    add(sink, &e);
    free(dem);
}

static int64_t src_drain(void *sink, lf_dev_event_sink add)
{
    /* a failed wait or flush still drains what arrived; the records it kept back are lost and
     * the trace says so through the dropped count */
    (void)lf_cuda_synchronize_all();
    lfc_flush();
    pthread_mutex_lock(&src.lock);
    size_t nm = 0;
    corr_map *m = map_correlations(&nm);
    for (int64_t i = 0; i < src.n; i++)
        emit_record(&src.recs[i], m, nm, sink, add);
    free(m);
    const int64_t lost = src.oom;
    forget();
    pthread_mutex_unlock(&src.lock);
    return lfc_dropped() + lost;
}

static void src_stop(void)
{
    lfc_stop();
    pthread_mutex_lock(&src.lock);
    forget();
    free(src.recs);
    src.recs = NULL, src.cap = 0;
    pthread_mutex_unlock(&src.lock);
    src.active = 0;
}

static const char *src_props(void)
{
    return lfc_properties();
}

const lf_device_events lf_cupti_events = {"cupti", src_start, src_push, src_pop, src_drain, src_stop, src_props};
