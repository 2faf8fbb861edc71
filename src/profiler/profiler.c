/* The profiler: a session, its schedule, the dispatcher/allocator hooks that record into
 * per-thread buffers, and the conversion of a recorded window into an lf_trace.
 * Hot path (op begin/end, kernel end): a thread-local lookup, two clock reads, stores into a
 * preallocated chunk; no lock, no formatting. Layer: profiler/. */
#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "profiler/prof_impl.h"
#include "profiler/prof_source.h"

enum { ST_NONE, ST_WARMUP, ST_RECORD, ST_RECORD_AND_SAVE };

/* linfuse's CPU kernels get a process track of their own, like a GPU's, so a CPU trace has
 * the same shape as a GPU trace: ops on the thread's lane, kernels on the device lane. */
enum { LF_CPU_DEVICE_PID = 1 << 24, LF_CPU_STREAM = 1 };

struct lf_profiler {
    lf_prof_opts o;
    uint64_t gen;
    pthread_mutex_t mu; /* guards the buffer list (taken once per thread per session) */
    lf_tbuf *bufs;
    int64_t step;
    int state;
    int stopped;
    int step_range_open;
    lf_rec *step_rec; /* the open ProfilerStep#N range */
    int source_on;    /* the device source (CUPTI) is collecting for this session */
    int64_t window_start;
    int64_t mono0, real0; /* the same instant on both clocks */
    int64_t tick0;        /* and on the event stamps' clock */
    _Atomic int64_t lost;
    lf_trace *trace; /* the last completed window */
};

static _Atomic(lf_profiler *) active;
static const lf_prof_source *device_source; /* registered by a backend at load (CUPTI) */

void lf_prof_register_source(const lf_prof_source *s)
{
    device_source = s;
}
static _Atomic uint64_t generation;
static _Atomic int64_t next_ext_id = 1 << 20;
static _Thread_local lf_tbuf *tls_buf;
static _Thread_local uint64_t tls_gen;

int64_t lf_prof_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Events are stamped with the CPU's time-stamp counter where it is invariant (a few ns to read,
 * against ~25 ns for clock_gettime in a VM: two stamps per op are most of an event's cost), and
 * mapped to CLOCK_MONOTONIC when a window becomes a trace, through two anchors taken on both
 * clocks (as CUPTI maps GPU stamps to the CPU clock, and as Kineto does with its TSC clock).
 * Without an invariant TSC the stamps are CLOCK_MONOTONIC nanoseconds themselves. */
static int use_tsc; /* set once, before any stamp is taken by the first session */

static void tsc_init(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000007u && __get_cpuid(0x80000007u, &a, &b, &c, &d))
        use_tsc = (d >> 8) & 1; /* invariant TSC: constant rate, runs in every power state */
#endif
}

static inline int64_t ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_expect(use_tsc, 1))
        return (int64_t)__rdtsc();
#endif
    return lf_prof_now_ns();
}

/* --- per-thread buffers --- */

/* A chunk whose pages are touched now, so recording into it never takes a page fault. */
static lf_rec_chunk *chunk_new(void)
{
    lf_rec_chunk *c = malloc(sizeof *c);
    if (c) {
        memset(c, 0, sizeof *c);
        atomic_init(&c->n, 0);
    }
    return c;
}

static lf_tbuf *thread_buf(lf_profiler *p)
{
    if (__builtin_expect(tls_gen == p->gen && tls_buf, 1))
        return tls_buf;
    lf_tbuf *b = calloc(1, sizeof *b);
    lf_rec_chunk *c = b ? chunk_new() : NULL;
    if (!c) {
        free(b);
        atomic_fetch_add(&p->lost, 1);
        return NULL;
    }
    b->head = b->tail = c;
    b->tid = (int64_t)syscall(SYS_gettid);
    pthread_mutex_lock(&p->mu);
    b->next = p->bufs;
    p->bufs = b;
    pthread_mutex_unlock(&p->mu);
    tls_buf = b;
    tls_gen = p->gen;
    return b;
}

/* The next free record of b, or NULL (counted as lost) when memory ran out. Not visible to
 * readers until publish(). */
static lf_rec *rec_new(lf_tbuf *b)
{
    int64_t n = atomic_load_explicit(&b->tail->n, memory_order_relaxed);
    if (__builtin_expect(n == LF_REC_CHUNK, 0)) { /* grow: once per 8192 events */
        lf_rec_chunk *c = chunk_new();
        if (!c) {
            b->lost++;
            return NULL;
        }
        b->tail->next = c;
        b->tail = c;
        n = 0;
    }
    return &b->tail->rec[n];
}

/* Only the owning thread writes n, so a release store (a plain move on x86) publishes. */
static void publish(lf_tbuf *b)
{
    int64_t n = atomic_load_explicit(&b->tail->n, memory_order_relaxed);
    atomic_store_explicit(&b->tail->n, n + 1, memory_order_release);
}

/* External ids come from per-thread blocks of 2^20, so taking one is not an atomic add. */
static int64_t next_id(lf_tbuf *b)
{
    if (__builtin_expect((b->next_ext & 0xfffff) == 0, 0))
        b->next_ext = atomic_fetch_add_explicit(&next_ext_id, 1 << 20, memory_order_relaxed);
    return b->next_ext++;
}

static void *arena_alloc(lf_tbuf *b, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > LF_ARENA_CHUNK)
        return NULL;
    if (!b->arena || LF_ARENA_CHUNK - b->arena->used < n) {
        lf_arena *a = malloc(sizeof *a);
        if (!a)
            return NULL;
        memset(a->data, 0, sizeof a->data); /* fault the pages in now, not while recording */
        a->used = 0;
        a->next = b->arena;
        b->arena = a;
    }
    void *r = b->arena->data + b->arena->used;
    b->arena->used += n;
    return r;
}

static const char *arena_str(lf_tbuf *b, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = arena_alloc(b, n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* A device-timed kernel holds a backend handle until resolved; records dropped unread spend
 * theirs here. */
static void spend_timing(lf_rec *r)
{
    if (r->kind == REC_KERNEL && r->u.k.timing) {
        int64_t a, b;
        r->u.k.resolve(r->u.k.timing, &a, &b);
        r->u.k.timing = NULL;
    }
}

static void free_bufs(lf_tbuf *b)
{
    while (b) {
        lf_tbuf *next = b->next;
        for (lf_rec_chunk *c = b->head, *cn; c; c = cn) {
            cn = c->next;
            for (int64_t i = 0; i < atomic_load(&c->n); i++)
                spend_timing(&c->rec[i]);
            free(c);
        }
        for (lf_arena *a = b->arena, *an; a; a = an) {
            an = a->next;
            free(a);
        }
        free(b);
        b = next;
    }
}

/* --- recording: the hooks --- */

static lf_rec *open_rec(lf_profiler *p, int kind, const char *name, int op)
{
    lf_tbuf *b = thread_buf(p);
    if (!b)
        return NULL;
    if (b->depth >= LF_MAX_DEPTH) { /* deeper than we track: counted, and kept balanced */
        b->lost++;
        b->depth++;
        return NULL;
    }
    lf_rec *r = rec_new(b);
    if (!r) {
        b->open[b->depth++] = NULL;
        return NULL;
    }
    r->kind = (uint8_t)kind; /* every field an op or range uses, set once (no memset) */
    r->n_args = 0;
    r->device = 0;
    r->op = op;
    r->name = name;
    r->ext_id = next_id(b);
    r->flops = 0;
    r->u.args = NULL;
    r->t1 = -1;
    r->t0 = ticks();
    b->open[b->depth++] = r;
    publish(b);
    return r;
}

static void close_rec(lf_profiler *p)
{
    lf_tbuf *b = thread_buf(p);
    if (!b || b->depth == 0)
        return;
    b->depth--;
    if (b->depth < LF_MAX_DEPTH && b->open[b->depth])
        b->open[b->depth]->t1 = ticks();
}

static void on_op_begin(void *user, lf_op_id op, int n_args, const lf_op_arg *args)
{
    lf_profiler *p = user;
    lf_rec *r = open_rec(p, REC_OP, lf_op_name(op), (int)op);
    if (p->source_on) /* device records will carry this op's id */
        device_source->push(r ? r->ext_id : 0);
    if (!r || !p->o.record_shapes)
        return;
    int n = n_args < LF_MAX_ARGS ? n_args : LF_MAX_ARGS;
    lf_rec_arg *a = arena_alloc(tls_buf, (size_t)n * sizeof *a);
    if (!a) {
        tls_buf->lost++;
        return;
    }
    for (int i = 0; i < n; i++) {
        const lf_tensor *t = args[i].t;
        a[i].kind = args[i].is_scalar ? 2 : t ? 1 : 0;
        a[i].ndim = t ? (int8_t)t->ndim : 0;
        a[i].dtype = t ? (int8_t)t->dtype : 0;
        for (int d = 0; t && d < t->ndim; d++)
            a[i].shape[d] = t->shape[d], a[i].stride[d] = t->stride[d];
    }
    r->u.args = a;
    r->n_args = (uint8_t)n;
}

static void on_op_end(void *user, lf_op_id op, lf_status s)
{
    (void)op, (void)s;
    lf_profiler *p = user;
    if (p->source_on)
        device_source->pop();
    close_rec(p);
}

static void on_kernel_begin(void *user, lf_device dev)
{
    (void)dev;
    lf_tbuf *b = thread_buf(user);
    if (b)
        b->kernel_t0 = ticks();
}

static void on_kernel_end(void *user, lf_device dev, const lf_kernel_info *info)
{
    lf_profiler *p = user;
    int64_t t1 = ticks();
    lf_tbuf *b = thread_buf(p);
    if (!b || !info)
        return;
    lf_rec *r = rec_new(b);
    const char *name = info->name; /* interned by the backend: kept by pointer */
    if (!r || !name) {
        b->lost++;
        return;
    }
    memset(r, 0, sizeof *r);
    r->kind = REC_KERNEL;
    r->name = name;
    r->t0 = b->kernel_t0;
    r->t1 = t1;
    r->u.k.corr = next_id(b); /* flow ids share the id space: unique either way */
    r->flops = info->flops;
    r->u.k.bytes = info->bytes;
    r->u.k.timing = info->timing;
    r->u.k.resolve = info->resolve;
    r->stream = (uint8_t)info->stream;
    r->device = (uint8_t)(dev == LF_DEVICE_CPU ? LF_DEVICE_CPU : LF_DEVICE_CUDA);
    lf_rec *owner = b->depth > 0 && b->depth <= LF_MAX_DEPTH ? b->open[b->depth - 1] : NULL;
    if (owner) {
        r->ext_id = owner->ext_id;
        if (p->o.with_flops)
            owner->flops += info->flops;
    }
    publish(b);
}

static void on_alloc(void *user, lf_device dev, const void *addr, int64_t bytes, int64_t total, int64_t reserved)
{
    lf_profiler *p = user;
    lf_tbuf *b = thread_buf(p);
    lf_rec *r = b ? rec_new(b) : NULL;
    if (!r) {
        if (b)
            b->lost++;
        return;
    }
    memset(r, 0, sizeof *r);
    r->kind = REC_MEM;
    r->device = (uint8_t)dev;
    r->name = "[memory]";
    r->t0 = r->t1 = ticks();
    r->u.m.bytes = bytes;
    r->u.m.total = total;
    r->u.m.reserved = reserved;
    r->u.m.addr = (int64_t)(intptr_t)addr;
    publish(b);
}

/* A note from the dispatcher (a fallback and its reason) is a user range in the trace. */
static void on_note_begin(void *user, const char *text)
{
    (void)user;
    (void)lf_prof_range_push(text);
}

static void on_note_end(void *user)
{
    (void)user;
    (void)lf_prof_range_pop();
}

static lf_op_observer observer; /* filled at start, points at the session */

static void set_recording(lf_profiler *p, int on)
{
    if (on) {
        observer = (lf_op_observer){on_op_begin, on_op_end, on_kernel_begin, on_kernel_end, p, on_note_begin, on_note_end};
        lf_ops_set_observer(&observer);
        if (p->o.profile_memory)
            lf_tensor_set_alloc_observer(on_alloc, p);
    } else {
        lf_ops_set_observer(NULL);
        lf_tensor_set_alloc_observer(NULL, NULL);
    }
}

lf_status lf_prof_range_push(const char *name)
{
    lf_profiler *p = atomic_load_explicit(&active, memory_order_acquire);
    if (__builtin_expect(!p || p->state == ST_NONE, 1))
        return LF_OK;
    LF_CHECK_PTR(name, "lf_prof_range_push", "name");
    lf_tbuf *b = thread_buf(p);
    const char *copy = b ? arena_str(b, name) : NULL;
    if (!copy) {
        if (b)
            b->lost++;
        return LF_OK;
    }
    open_rec(p, REC_RANGE, copy, -1);
    return LF_OK;
}

lf_status lf_prof_range_pop(void)
{
    lf_profiler *p = atomic_load_explicit(&active, memory_order_acquire);
    if (__builtin_expect(!p || p->state == ST_NONE, 1))
        return LF_OK;
    lf_tbuf *b = thread_buf(p);
    if (b && b->depth > 0 && b->depth <= LF_MAX_DEPTH && b->open[b->depth - 1] &&
        b->open[b->depth - 1]->kind != REC_RANGE)
        return lf_fail(LF_EINVAL, "lf_prof_range_pop: the innermost open event is op %s, not a range",
                       b->open[b->depth - 1]->name);
    close_rec(p);
    return LF_OK;
}

/* --- the window -> an lf_trace --- */

static void put_dims(char *buf, size_t cap, const lf_rec *r, int what)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < r->n_args && n < cap; i++) {
        const lf_rec_arg *a = &r->u.args[i];
        if (i)
            n += (size_t)snprintf(buf + n, cap - n, ", ");
        if (what == 2) {
            const char *ty = a->kind == 1 ? lf_dtype_torch_name((lf_dtype)a->dtype) : a->kind == 2 ? "Scalar" : "";
            n += (size_t)snprintf(buf + n, cap - n, "\"%s\"", ty);
            continue;
        }
        n += (size_t)snprintf(buf + n, cap - n, "[");
        for (int d = 0; a->kind == 1 && d < a->ndim && n < cap; d++)
            n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld",
                                  (long long)(what == 0 ? a->shape[d] : a->stride[d]));
        if (n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "]");
    }
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* Stamps to CLOCK_MONOTONIC ns: a line through (tick0, mono0) and a second anchor taken now,
 * at least 5 ms later so the rate is exact to a few parts per million. */
typedef struct clock_map {
    int64_t tick0, mono0;
    double ns_per_tick;
} clock_map;

static clock_map map_clock(const lf_profiler *p)
{
    clock_map m = {p->tick0, p->mono0, 1.0};
    if (!use_tsc)
        return m;
    int64_t t1 = ticks(), m1 = lf_prof_now_ns();
    while (m1 - p->mono0 < 5000000) {
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
        t1 = ticks(), m1 = lf_prof_now_ns();
    }
    m.ns_per_tick = (double)(m1 - p->mono0) / (double)(t1 - p->tick0);
    return m;
}

static int64_t to_ns(const clock_map *m, int64_t tick)
{
    return m->mono0 + (int64_t)((double)(tick - m->tick0) * m->ns_per_tick);
}

/* Device-source events inside the window go into the trace, on its time base. */
/* A host range, for placing the device source's API records inside their ranges. */
typedef struct host_span {
    int64_t tid, ts, end;
} host_span;

static int span_cmp(const void *a, const void *b)
{
    const host_span *x = a, *y = b;
    return x->tid != y->tid ? (x->tid < y->tid ? -1 : 1) : x->ts != y->ts ? (x->ts < y->ts ? -1 : 1) : 0;
}

typedef struct source_sink {
    lf_trace *t;
    int64_t lo, hi, to_base;
    lf_status st;
    int stream;
    const host_span *spans; /* the window's ops and ranges, by (tid, start) */
    int64_t n_spans;
} source_sink;

/* CUPTI stamps API calls on its own clock reading; mapped onto ours, a call that returns just
 * before its range closes can end a few hundred ns after it (seen with a 4 us cudaGraphLaunch
 * ending a compiled region), which would make it a sibling of its own range in the table. A
 * call that starts inside a range and overhangs it by less than this is ended with the range. */
enum { API_SKEW_NS = 2000 };

static void fit_in_range(const source_sink *k, lf_trace_event *c)
{
    int64_t lo = 0, hi = k->n_spans; /* first span of this tid starting after c */
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        const host_span *s = &k->spans[mid];
        if (s->tid < c->tid || (s->tid == c->tid && s->ts <= c->ts_ns))
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int64_t i = lo - 1, steps = 0; i >= 0 && k->spans[i].tid == c->tid && steps < 64; i--, steps++) {
        const host_span *s = &k->spans[i]; /* the latest-starting range holding c's start: innermost */
        if (s->end < c->ts_ns)
            continue;
        int64_t over = c->ts_ns + c->dur_ns - s->end;
        if (over > 0 && over < API_SKEW_NS)
            c->dur_ns = s->end - c->ts_ns;
        return;
    }
}

static void sink_add(void *user, const lf_trace_event *e)
{
    source_sink *k = user;
    int64_t when = e->flow_ts >= 0 ? e->flow_ts : e->ts_ns; /* device work: by its launch */
    if (k->st != LF_OK || when < k->lo || when > k->hi)
        return;
    lf_trace_event c = *e;
    c.ts_ns += k->to_base;
    if (c.flow_ts >= 0)
        c.flow_ts += k->to_base;
    if ((c.cat == LF_TC_RUNTIME || c.cat == LF_TC_DRIVER) && c.dur_ns > 0 && k->n_spans)
        fit_in_range(k, &c);
    if (c.cat == LF_TC_KERNEL)
        k->stream = (int)c.tid;
    k->st = lf_trace_add(k->t, &c);
}

static lf_status build_trace(lf_profiler *p, int64_t t_begin, int64_t t_end, lf_trace **out)
{
    lf_trace *t;
    LF_TRY(lf_trace_create(&t));
    const clock_map cm = map_clock(p);
    lf_trace_meta *m = lf_trace_meta_of(t);
    /* Kineto's base: epoch ns floored to a 7,889,238 s boundary; ts are offsets from it */
    const int64_t span = INT64_C(7889238) * 1000000000;
    const int64_t real_begin = p->real0 + (to_ns(&cm, t_begin) - p->mono0);
    m->base_ns = real_begin / span * span;
    const int64_t to_base = p->real0 - p->mono0 - m->base_ns; /* mono ns -> ns since base */
    m->record_shapes = p->o.record_shapes;
    m->profile_memory = p->o.profile_memory;
    m->with_flops = p->o.with_flops;
    m->device_label = "CPU-dev";
    m->cpu_device_pid = -1;
    int64_t dropped = atomic_load(&p->lost);
    const int64_t pid = (int64_t)getpid();
    int cuda_stream = -1;
    lf_status st = LF_OK;
    for (lf_tbuf *b = p->bufs; b && st == LF_OK; b = b->next) {
        dropped += b->lost;
        int named = 0;
        for (lf_rec_chunk *c = b->head; c && st == LF_OK; c = c->next) {
            int64_t n = atomic_load_explicit(&c->n, memory_order_acquire);
            for (int64_t i = 0; i < n && st == LF_OK; i++) {
                const lf_rec *r = &c->rec[i];
                if (r->t0 < t_begin || r->t0 > t_end ||
                    (r->kind == REC_KERNEL && r->device != LF_DEVICE_CPU && p->source_on)) {
                    spend_timing((lf_rec *)r); /* the device source reports these kernels itself */
                    continue;
                }
                int64_t t1 = r->t1 < 0 || r->t1 > t_end ? t_end : r->t1; /* still open: ends with the window */
                const int64_t ns0 = to_ns(&cm, r->t0);                   /* stamps to CLOCK_MONOTONIC ns */
                lf_trace_event e = {.name = r->name,
                                    .pid = pid,
                                    .tid = b->tid,
                                    .ts_ns = ns0 + to_base,
                                    .dur_ns = to_ns(&cm, t1) - ns0,
                                    .device = -1,
                                    .flow_ts = -1,
                                    .flow_pid = -1,
                                    .flow_tid = -1};
                char dims[512], types[256], strides[512];
                switch (r->kind) {
                case REC_OP:
                case REC_RANGE:
                    e.cat = r->kind == REC_OP ? LF_TC_CPU_OP : LF_TC_USER_ANNOTATION;
                    e.ext_id = r->ext_id;
                    e.flops = r->flops;
                    if (r->n_args && r->u.args) {
                        put_dims(dims, sizeof dims, r, 0);
                        put_dims(strides, sizeof strides, r, 1);
                        put_dims(types, sizeof types, r, 2);
                        e.input_dims = dims, e.input_strides = strides, e.input_types = types;
                    }
                    break;
                case REC_KERNEL:
                    e.cat = LF_TC_KERNEL;
                    if (r->u.k.timing) { /* timed on the device: its clock, placed on ours */
                        int64_t a = 0, z = 0;
                        int ok = r->u.k.resolve(r->u.k.timing, &a, &z) == 0;
                        ((lf_rec *)r)->u.k.timing = NULL;
                        e.flow_ts = ns0 + to_base;
                        if (ok) {
                            e.ts_ns = a + to_base;
                            e.dur_ns = z - a;
                        }
                    }
                    e.ext_id = r->ext_id;
                    e.correlation = r->u.k.corr;
                    e.flops = r->flops;
                    e.bytes = r->u.k.bytes;
                    e.device = 0;
                    e.flow_pid = pid, e.flow_tid = b->tid;
                    if (r->device == LF_DEVICE_CPU) {
                        e.pid = LF_CPU_DEVICE_PID;
                        e.tid = LF_CPU_STREAM;
                        m->cpu_device_pid = LF_CPU_DEVICE_PID;
                    } else { /* GPU kernels: pid = device index, tid = stream, as Kineto */
                        e.pid = 0;
                        e.tid = r->stream;
                        m->device_label = "CUDA";
                        cuda_stream = r->stream;
                    }
                    break;
                default:
                    e.cat = LF_TC_MEMORY;
                    e.dur_ns = -1;
                    e.mem_bytes = r->u.m.bytes;
                    e.mem_total_allocated = r->u.m.total;
                    e.mem_total_reserved = r->u.m.reserved;
                    e.mem_device_type = r->device == LF_DEVICE_CPU ? 0 : 1;
                    e.mem_addr = r->u.m.addr;
                    break;
                }
                st = lf_trace_add(t, &e);
                if (st == LF_OK && !named) {
                    char nm[64];
                    snprintf(nm, sizeof nm, "thread %lld (linfuse)", (long long)b->tid);
                    st = lf_trace_name_thread(t, pid, b->tid, nm);
                    named = 1;
                }
            }
        }
    }
    if (st == LF_OK && p->source_on) {
        source_sink k = {t, to_ns(&cm, t_begin), to_ns(&cm, t_end), to_base, LF_OK, -1, NULL, 0};
        const int64_t n = lf_trace_count(t);
        host_span *spans = malloc((size_t)(n > 0 ? n : 1) * sizeof *spans);
        for (int64_t i = 0; spans && i < n; i++) {
            const lf_trace_event *e = lf_trace_get(t, i);
            if ((e->cat == LF_TC_CPU_OP || e->cat == LF_TC_USER_ANNOTATION) && e->dur_ns >= 0)
                spans[k.n_spans++] = (host_span){e->tid, e->ts_ns, e->ts_ns + e->dur_ns};
        }
        if (spans)
            qsort(spans, (size_t)k.n_spans, sizeof *spans, span_cmp);
        k.spans = spans;
        dropped += device_source->drain(&k, sink_add);
        free(spans);
        st = k.st;
        m->device_label = "CUDA";
        m->device_properties = device_source->device_properties ? device_source->device_properties() : NULL;
        cuda_stream = k.stream;
    }
    if (st == LF_OK && m->cpu_device_pid >= 0)
        st = lf_trace_name_thread(t, LF_CPU_DEVICE_PID, LF_CPU_STREAM, "cpu stream 1 ");
    if (st == LF_OK && cuda_stream >= 0) {
        char nm[32];
        snprintf(nm, sizeof nm, "stream %d ", cuda_stream);
        st = lf_trace_name_thread(t, 0, cuda_stream, nm);
    }
    m->dropped_events = dropped;
    if (st != LF_OK) {
        lf_trace_free(t);
        return st;
    }
    *out = t;
    return LF_OK;
}

/* --- the session and its schedule --- */

static int sched_state(const lf_prof_opts *o, int64_t step)
{
    if (!o->use_schedule)
        return ST_RECORD;
    const lf_prof_schedule *s = &o->schedule;
    if (step < s->skip_first)
        return ST_NONE;
    step -= s->skip_first;
    int64_t c = (int64_t)s->wait + s->warmup + s->active;
    if (s->repeat > 0 && step / c >= s->repeat)
        return ST_NONE;
    int64_t m = step % c;
    if (m < s->wait)
        return ST_NONE;
    if (m < s->wait + s->warmup)
        return ST_WARMUP;
    return m < c - 1 ? ST_RECORD : ST_RECORD_AND_SAVE;
}

static void begin_step_range(lf_profiler *p)
{
    if (!p->o.use_schedule || p->state == ST_NONE)
        return;
    char name[48];
    snprintf(name, sizeof name, "ProfilerStep#%lld", (long long)p->step);
    lf_tbuf *b = thread_buf(p);
    const char *copy = b ? arena_str(b, name) : NULL;
    p->step_rec = copy ? open_rec(p, REC_RANGE, copy, -1) : NULL;
    p->step_range_open = 1;
}

/* Close the step's range wherever it sits on this thread's stack (a user range still open
 * above it stays open), so a step() called inside a range cannot close the wrong one. */
static void end_step_range(lf_profiler *p)
{
    if (!p->step_range_open)
        return;
    p->step_range_open = 0;
    lf_tbuf *b = thread_buf(p);
    if (!b || !p->step_rec)
        return;
    int top = b->depth < LF_MAX_DEPTH ? b->depth : LF_MAX_DEPTH;
    for (int i = top - 1; i >= 0; i--)
        if (b->open[i] == p->step_rec) {
            p->step_rec->t1 = ticks();
            memmove(&b->open[i], &b->open[i + 1], (size_t)(top - 1 - i) * sizeof b->open[0]);
            b->depth--;
            break;
        }
    p->step_rec = NULL;
}

/* Save [window_start, now] as the trace, and start over with empty buffers. */
static lf_status save_window(lf_profiler *p)
{
    lf_trace *t;
    LF_TRY(build_trace(p, p->window_start, ticks(), &t));
    lf_trace_free(p->trace);
    p->trace = t;
    pthread_mutex_lock(&p->mu);
    free_bufs(p->bufs);
    p->bufs = NULL;
    p->gen = atomic_fetch_add(&generation, 1) + 1; /* every thread registers a fresh buffer */
    pthread_mutex_unlock(&p->mu);
    return LF_OK;
}

static void enter_state(lf_profiler *p, int prev, int cur)
{
    int rec_prev = prev == ST_RECORD || prev == ST_RECORD_AND_SAVE;
    int rec_cur = cur == ST_RECORD || cur == ST_RECORD_AND_SAVE;
    p->state = cur;
    set_recording(p, cur != ST_NONE);
    if (rec_cur && (!rec_prev || prev == ST_RECORD_AND_SAVE))
        p->window_start = ticks(); /* warm-up events before this are dropped */
}

lf_status lf_prof_start(lf_profiler **out, const lf_prof_opts *o)
{
    LF_CHECK_PTR(out, "lf_prof_start", "out");
    *out = NULL;
    LF_CHECK_PTR(o, "lf_prof_start", "opts");
    if (o->use_schedule) {
        const lf_prof_schedule *s = &o->schedule;
        if (s->wait < 0 || s->warmup < 0 || s->active < 1 || s->repeat < 0 || s->skip_first < 0)
            return lf_fail(LF_EINVAL,
                           "lf_prof_start: schedule wait=%d warmup=%d active=%d repeat=%d skip_first=%d: "
                           "expected active >= 1 and the others >= 0",
                           s->wait, s->warmup, s->active, s->repeat, s->skip_first);
    }
    lf_profiler *p = calloc(1, sizeof *p);
    if (!p)
        return lf_fail(LF_ENOMEM, "lf_prof_start: out of memory");
    lf_profiler *none = NULL;
    if (!atomic_compare_exchange_strong(&active, &none, p)) {
        free(p);
        return lf_fail(LF_EINVAL, "lf_prof_start: another profiler is running; stop it first");
    }
    p->o = *o;
    if (!p->o.activities)
        p->o.activities = LF_PROF_CPU | LF_PROF_DEVICE;
    pthread_mutex_init(&p->mu, NULL);
    p->gen = atomic_fetch_add(&generation, 1) + 1;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tsc_init);
    struct timespec rt;
    p->tick0 = ticks();
    p->mono0 = lf_prof_now_ns();
    clock_gettime(CLOCK_REALTIME, &rt);
    p->real0 = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec;
    if ((p->o.activities & LF_PROF_DEVICE) && lf_device_available(LF_DEVICE_CUDA) && device_source) {
        p->source_on = device_source->start() == 0;
        if (!p->source_on)
            fprintf(stderr,
                    "linfuse profiler: %s could not start; GPU kernels are timed with CUDA events around "
                    "each launch instead\n",
                    device_source->name);
    }
    enter_state(p, ST_NONE, sched_state(&p->o, 0));
    begin_step_range(p);
    *out = p;
    return LF_OK;
}

lf_status lf_prof_step(lf_profiler *p)
{
    LF_CHECK_PTR(p, "lf_prof_step", "p");
    if (p->stopped)
        return lf_fail(LF_EINVAL, "lf_prof_step: the profiler was stopped");
    end_step_range(p);
    int prev = p->state;
    p->step++;
    int cur = sched_state(&p->o, p->step);
    lf_status st = LF_OK;
    if (prev == ST_RECORD_AND_SAVE) {
        set_recording(p, 0);
        st = save_window(p);
        if (st == LF_OK && p->o.on_trace_ready)
            p->o.on_trace_ready(p, p->o.user);
    }
    enter_state(p, prev, cur);
    begin_step_range(p);
    return st;
}

lf_status lf_prof_stop(lf_profiler *p)
{
    LF_CHECK_PTR(p, "lf_prof_stop", "p");
    if (p->stopped)
        return LF_OK;
    end_step_range(p);
    set_recording(p, 0);
    lf_status st = LF_OK;
    if (p->state == ST_RECORD || p->state == ST_RECORD_AND_SAVE) {
        st = save_window(p);
        if (st == LF_OK && p->o.on_trace_ready && p->o.use_schedule)
            p->o.on_trace_ready(p, p->o.user);
    }
    if (p->source_on) {
        device_source->stop();
        p->source_on = 0;
    }
    p->state = ST_NONE;
    p->stopped = 1;
    lf_profiler *self = p;
    atomic_compare_exchange_strong(&active, &self, NULL);
    return st;
}

void lf_prof_free(lf_profiler *p)
{
    if (!p)
        return;
    lf_prof_stop(p);
    free_bufs(p->bufs);
    lf_trace_free(p->trace);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int64_t lf_prof_dropped(const lf_profiler *p)
{
    return p && p->trace ? lf_trace_meta_get(p->trace)->dropped_events : 0;
}

lf_status lf_prof_trace(lf_profiler *p, const lf_trace **out)
{
    LF_CHECK_PTR(p, "lf_prof_trace", "p");
    LF_CHECK_PTR(out, "lf_prof_trace", "out");
    if (!p->trace)
        return lf_fail(LF_EINVAL, "lf_prof_trace: no window was recorded (stop the profiler after its active steps)");
    *out = p->trace;
    return LF_OK;
}

lf_status lf_prof_export(lf_profiler *p, const char *path)
{
    const lf_trace *t;
    LF_TRY(lf_prof_trace(p, &t));
    return lf_trace_write_json(t, path);
}

lf_status lf_prof_table(lf_profiler *p, const lf_table_opts *o, char **text)
{
    const lf_trace *t;
    LF_TRY(lf_prof_trace(p, &t));
    lf_table tab;
    LF_TRY(lf_table_build(t, o ? o->sort_by : LF_SORT_NONE, &tab));
    lf_status st = lf_table_format(&tab, o, text);
    lf_table_free(&tab);
    return st;
}
