/* A recorded window becomes an lf_trace: the threads' records (ops, ranges, CPU kernels, memory
 * events, kernels timed with device events) mapped from stamps to the trace's time base, then
 * the device's own events (CUPTI) drained into it, launch calls fitted inside the op that made
 * them. Kineto's layout throughout (docs/trace_format.md). Layer: profiler/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profiler/prof_impl.h"

/* linfuse's CPU kernels get a process track of their own, like a GPU's, so a CPU trace has
 * the same shape as a GPU trace: ops on the thread's lane, kernels on a device lane ("cpu stream
 * N", one per thread). */
enum { LF_CPU_DEVICE_PID = 1 << 24 };

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

/* A collective's description as Kineto writes it, on record_param_comms and on the kernel it
 * launched, from the op's arguments (the tensor, the rank, the group size). One group: every
 * rank of the communicator, described as c10d's default group is. 0 when r is not one. */
static int collective_args(char *buf, size_t cap, const lf_rec *r)
{
    if (r->op != LF_OP_RECORD_PARAM_COMMS || r->n_args < 3 || !r->u.args || r->u.args[0].kind != 1)
        return 0;
    const lf_rec_arg *t = &r->u.args[0];
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++)
        numel *= t->shape[d];
    const int64_t rank = r->u.args[1].shape[0], world = r->u.args[2].shape[0];
    const char *dt = lf_dtype_torch_name((lf_dtype)t->dtype);
    if (!strncmp(dt, "c10::", 5))
        dt += 5; /* "BFloat16", as c10d names it */
    char ranks[256];
    size_t n = (size_t)snprintf(ranks, sizeof ranks, "[");
    for (int64_t i = 0; i < world && n < sizeof ranks - 8; i++)
        n += (size_t)snprintf(ranks + n, sizeof ranks - n, i ? ", %lld" : "%lld", (long long)i);
    snprintf(ranks + n, sizeof ranks - n, "]");
    int w = snprintf(buf, cap,
                     "\"Collective name\": \"allreduce\", \"In msg nelems\": %lld, \"Out msg nelems\": %lld, "
                     "\"Group size\": %lld, \"dtype\": \"%s\", \"In split size\": \"[]\", \"Out split size\": \"[]\", "
                     "\"Process Group Name\": \"0\", \"Process Group Description\": \"default_pg\", "
                     "\"Process Group Ranks\": \"%s\", \"Rank\": %lld, \"Global rank start\": 0, "
                     "\"Global rank stride\": 1",
                     (long long)numel, (long long)numel, (long long)world, dt, ranks, (long long)rank);
    return w > 0 && (size_t)w < cap;
}

/* The collective descriptions of a window, by the record_param_comms op's External id, for the
 * kernels the device source reports under it. */
typedef struct coll_note {
    int64_t ext_id;
    char *args;
} coll_note;

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
    const host_span *spans; /* the window's ops and ranges, by (tid, start) */
    int64_t n_spans;
    const coll_note *colls; /* the window's collectives, in the order recorded */
    int n_colls;
    lf_replay_stash *replays; /* kernels of graph launches whose steps are known, kept back */
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

/* The trace category of a device event. */
static lf_trace_cat dev_cat(lf_dev_event_kind k)
{
    switch (k) {
    case LF_DEV_KERNEL:
        return LF_TC_KERNEL;
    case LF_DEV_MEMCPY:
        return LF_TC_MEMCPY;
    case LF_DEV_MEMSET:
        return LF_TC_MEMSET;
    case LF_DEV_RUNTIME:
        return LF_TC_RUNTIME;
    case LF_DEV_DRIVER:
        return LF_TC_DRIVER;
    default:
        return LF_TC_OVERHEAD;
    }
}

/* A device event inside the window goes into the trace, on its time base. */
static void sink_add(void *user, const lf_dev_event *d)
{
    source_sink *k = user;
    int64_t when = d->launch_ts >= 0 ? d->launch_ts : d->ts_ns; /* device work: by its launch */
    if (k->st != LF_OK || when < k->lo || when > k->hi)
        return;
    lf_trace_event c = {.cat = dev_cat(d->kind),
                        .name = d->name,
                        .pid = d->pid,
                        .tid = d->tid,
                        .ts_ns = d->ts_ns + k->to_base,
                        .dur_ns = d->dur_ns,
                        .ext_id = d->ext_id,
                        .correlation = d->correlation,
                        .device = lf_trace_cat_is_device(dev_cat(d->kind)) ? d->pid : -1,
                        .bytes = d->bytes,
                        .extra_args = d->args_json,
                        .flow_ts = d->launch_ts >= 0 ? d->launch_ts + k->to_base : -1,
                        .flow_pid = d->launch_pid,
                        .flow_tid = d->launch_tid};
    if ((c.cat == LF_TC_RUNTIME || c.cat == LF_TC_DRIVER) && c.dur_ns > 0 && k->n_spans)
        fit_in_range(k, &c);
    char *joined = NULL;
    for (int i = 0; c.cat == LF_TC_KERNEL && c.ext_id && i < k->n_colls; i++)
        if (k->colls[i].ext_id == c.ext_id) { /* a collective's kernel carries its description, as Kineto's */
            size_t len = (c.extra_args ? strlen(c.extra_args) + 2 : 0) + strlen(k->colls[i].args) + 1;
            if ((joined = malloc(len)))
                snprintf(joined, len, "%s%s%s", c.extra_args ? c.extra_args : "", c.extra_args ? ", " : "",
                         k->colls[i].args);
            c.extra_args = joined ? joined : c.extra_args;
            break;
        }
    if (!lf_prof_replay_take(k->replays, &c))
        k->st = lf_trace_add(k->t, &c);
    free(joined);
}

/* Name every GPU lane (device, stream) that holds work "stream N ", as Kineto does: with several
 * GPUs and a collective's own stream there are several. */
static lf_status name_streams(lf_trace *t)
{
    int64_t named[64][2];
    int n = 0;
    lf_status st = LF_OK;
    for (int64_t i = 0, count = lf_trace_count(t); i < count && st == LF_OK; i++) {
        const lf_trace_event *e = lf_trace_get(t, i);
        if (e->pid == LF_CPU_DEVICE_PID || (e->cat != LF_TC_KERNEL && e->cat != LF_TC_MEMCPY && e->cat != LF_TC_MEMSET))
            continue;
        int seen = 0;
        for (int j = 0; j < n && !seen; j++)
            seen = named[j][0] == e->pid && named[j][1] == e->tid;
        if (seen || n == 64)
            continue;
        named[n][0] = e->pid, named[n][1] = e->tid, n++;
        char nm[32];
        snprintf(nm, sizeof nm, "stream %lld ", (long long)e->tid);
        st = lf_trace_name_thread(t, e->pid, e->tid, nm);
    }
    return st;
}

/* The CPU-kernel lane of thread tid: 1 + its rank among the window's threads by id, so the
 * first thread (the main one, whose id is the process's) keeps lane 1. */
static int64_t cpu_lane(const lf_tbuf *bufs, int64_t tid)
{
    int64_t lane = 1;
    for (const lf_tbuf *b = bufs; b; b = b->next)
        lane += b->tid < tid;
    return lane;
}

/* A window being built into a trace: the profiler, the trace, the clock mapping (stamps to
 * CLOCK_MONOTONIC ns, then to ns since the trace's base), and the collectives seen. */
typedef struct building {
    lf_profiler *p;
    lf_trace *t;
    lf_trace_meta *m;
    lf_clock_map cm;
    int64_t t_begin, t_end; /* the window, in stamps */
    int64_t to_base;        /* CLOCK_MONOTONIC ns -> ns since the trace's base */
    int64_t pid;
    coll_note *colls;
    int n_colls;
    const lf_rec **launches; /* graph launches with their steps (REC_STEPS) */
    int64_t n_launches, cap_launches;
} building;

/* An op's or range's args as text, alive until its event is added. */
typedef struct arg_text {
    char dims[512], types[256], strides[512], coll[768];
} arg_text;

/* The trace's base and flags: Kineto's base is epoch ns floored to a 7,889,238 s boundary, and
 * every ts is an offset from it. */
static lf_status set_meta(building *w)
{
    lf_profiler *p = w->p;
    lf_trace_meta *m = w->m;
    const int64_t span = INT64_C(7889238) * 1000000000;
    const int64_t real_begin = p->real0 + (lf_prof_to_ns(&w->cm, w->t_begin) - p->mono0);
    m->base_ns = real_begin / span * span;
    w->to_base = p->real0 - p->mono0 - m->base_ns; /* mono ns -> ns since base */
    m->record_shapes = p->o.record_shapes;
    m->profile_memory = p->o.profile_memory;
    m->with_flops = p->o.with_flops;
    m->device_label = "CPU-dev";
    m->cpu_device_pid = -1;
    if (p->dist_info && lf_trace_set_distributed_info(w->t, p->dist_info) != LF_OK)
        return LF_EINVAL;
    return LF_OK;
}

/* Remember a collective's description under its op's External id, for the kernels the device
 * source reports under it (dropped, not fatal, when memory runs out). */
static void note_collective(building *w, int64_t ext_id, const char *args)
{
    coll_note *nc = realloc(w->colls, (size_t)(w->n_colls + 1) * sizeof *nc);
    char *copy = strdup(args);
    if (nc && copy) {
        w->colls = nc;
        w->colls[w->n_colls++] = (coll_note){ext_id, copy};
    } else {
        free(copy);
        if (nc)
            w->colls = nc;
    }
}

/* An op or range: its External id, FLOPs, a collective's args, and its inputs' shapes, strides and
 * types (an op's only under record_shapes, except record_param_comms's). */
static void host_event(building *w, const lf_rec *r, lf_trace_event *e, arg_text *a)
{
    e->cat = r->kind == REC_OP ? LF_TC_CPU_OP : LF_TC_USER_ANNOTATION;
    e->ext_id = r->ext_id;
    e->flops = r->flops;
    if (r->kind == REC_OP && collective_args(a->coll, sizeof a->coll, r)) {
        e->extra_args = a->coll;
        note_collective(w, r->ext_id, a->coll);
    }
    if (r->n_args && r->u.args && (w->p->o.record_shapes || r->kind != REC_OP || r->op != LF_OP_RECORD_PARAM_COMMS)) {
        put_dims(a->dims, sizeof a->dims, r, 0);
        put_dims(a->strides, sizeof a->strides, r, 1);
        put_dims(a->types, sizeof a->types, r, 2);
        e->input_dims = a->dims, e->input_strides = a->strides, e->input_types = a->types;
    }
}

/* A kernel linfuse timed itself: a CPU kernel on thread tid's lane of the CPU device, a GPU one
 * (timed with events, its clock placed on ours) on its device and stream, as Kineto's. ns0: its
 * launch, in CLOCK_MONOTONIC ns. */
static void kernel_event(building *w, const lf_rec *r, int64_t tid, int64_t lane, int64_t ns0, lf_trace_event *e)
{
    e->cat = LF_TC_KERNEL;
    if (r->u.k.timing) {
        int64_t a = 0, z = 0;
        int ok = r->u.k.resolve(r->u.k.timing, &a, &z) == 0;
        ((lf_rec *)r)->u.k.timing = NULL;
        e->flow_ts = ns0 + w->to_base;
        if (ok) {
            e->ts_ns = a + w->to_base;
            e->dur_ns = z - a;
        }
    }
    e->ext_id = r->ext_id;
    e->correlation = r->u.k.corr;
    e->flops = r->flops;
    e->bytes = r->u.k.bytes;
    e->device = r->unit;
    e->flow_pid = w->pid, e->flow_tid = tid;
    if (r->device == LF_DEVICE_CPU) {
        e->pid = LF_CPU_DEVICE_PID;
        e->tid = lane;
        w->m->cpu_device_pid = LF_CPU_DEVICE_PID;
    } else { /* GPU kernels: pid = device index, tid = stream, as Kineto */
        e->pid = r->unit;
        e->tid = r->stream;
        w->m->device_label = "CUDA";
    }
}

/* An allocation or free: a [memory] instant with the running totals. */
static void memory_event(const lf_rec *r, lf_trace_event *e)
{
    e->cat = LF_TC_MEMORY;
    e->dur_ns = -1;
    e->mem_bytes = r->u.m.bytes;
    e->mem_total_allocated = r->u.m.total;
    e->mem_total_reserved = r->u.m.reserved;
    e->mem_device_type = r->device == LF_DEVICE_CPU ? 0 : 1;
    e->device = r->device == LF_DEVICE_CPU ? -1 : r->unit; /* the GPU's ordinal */
    e->mem_addr = r->u.m.addr;
}

/* Record r of thread tid as a trace event (one still open ends with the window). */
static lf_status add_record(building *w, const lf_rec *r, int64_t tid, int64_t lane)
{
    int64_t t1 = r->t1 < 0 || r->t1 > w->t_end ? w->t_end : r->t1;
    const int64_t ns0 = lf_prof_to_ns(&w->cm, r->t0);
    lf_trace_event e = {.name = r->name,
                        .pid = w->pid,
                        .tid = tid,
                        .ts_ns = ns0 + w->to_base,
                        .dur_ns = lf_prof_to_ns(&w->cm, t1) - ns0,
                        .device = -1,
                        .flow_ts = -1,
                        .flow_pid = -1,
                        .flow_tid = -1};
    arg_text a;
    if (r->kind == REC_OP || r->kind == REC_RANGE)
        host_event(w, r, &e, &a);
    else if (r->kind == REC_KERNEL)
        kernel_event(w, r, tid, lane, ns0, &e);
    else
        memory_event(r, &e);
    return lf_trace_add(w->t, &e);
}

static lf_status note_launch(building *w, const lf_rec *r)
{
    if (w->n_launches == w->cap_launches) {
        const int64_t cap = w->cap_launches ? 2 * w->cap_launches : 64;
        const lf_rec **v = realloc(w->launches, (size_t)cap * sizeof *v);
        if (!v)
            return lf_fail(LF_ENOMEM, "profiler: out of memory");
        w->launches = v, w->cap_launches = cap;
    }
    w->launches[w->n_launches++] = r;
    return LF_OK;
}

/* Thread buffer b's records inside the window, its thread named once it has one, and its CPU
 * kernels' lane named when it has any (one lane per thread: kernels of two threads overlap in
 * time and must not share one). Kernels the device source reports itself are left to it. */
static lf_status add_thread(building *w, const lf_tbuf *b, int64_t lane)
{
    lf_status st = LF_OK;
    int named = 0, lane_used = 0;
    for (lf_rec_chunk *c = b->head; c && st == LF_OK; c = c->next) {
        int64_t n = atomic_load_explicit(&c->n, memory_order_acquire);
        for (int64_t i = 0; i < n && st == LF_OK; i++) {
            const lf_rec *r = &c->rec[i];
            if (r->t0 < w->t_begin || r->t0 > w->t_end ||
                (r->kind == REC_KERNEL && r->device != LF_DEVICE_CPU && w->p->source)) {
                lf_prof_spend_timing((lf_rec *)r); /* the device source reports these kernels itself */
                continue;
            }
            lane_used |= r->kind == REC_KERNEL && r->device == LF_DEVICE_CPU;
            if (r->kind == REC_STEPS) { /* no event of its own: its launch's kernels go under its ops */
                st = note_launch(w, r);
                continue;
            }
            st = add_record(w, r, b->tid, lane);
            if (st == LF_OK && !named) {
                char nm[64];
                snprintf(nm, sizeof nm, "thread %lld (linfuse)", (long long)b->tid);
                st = lf_trace_name_thread(w->t, w->pid, b->tid, nm);
                named = 1;
            }
        }
    }
    if (st == LF_OK && lane_used) {
        char nm[32];
        snprintf(nm, sizeof nm, "cpu stream %lld ", (long long)lane);
        st = lf_trace_name_thread(w->t, LF_CPU_DEVICE_PID, lane, nm);
    }
    return st;
}

/* The device source's events of the window (its API calls fitted inside the host ranges that
 * hold them), the device's properties; *dropped: what the source lost. */
static lf_status add_device_events(building *w, int64_t *dropped)
{
    lf_profiler *p = w->p;
    source_sink k = {.t = w->t,
                     .lo = lf_prof_to_ns(&w->cm, w->t_begin),
                     .hi = lf_prof_to_ns(&w->cm, w->t_end),
                     .to_base = w->to_base,
                     .st = LF_OK,
                     .colls = w->colls,
                     .n_colls = w->n_colls};
    const int64_t n = lf_trace_count(w->t);
    host_span *spans = malloc((size_t)(n > 0 ? n : 1) * sizeof *spans);
    for (int64_t i = 0; spans && i < n; i++) {
        const lf_trace_event *e = lf_trace_get(w->t, i);
        if ((e->cat == LF_TC_CPU_OP || e->cat == LF_TC_USER_ANNOTATION) && e->dur_ns >= 0)
            spans[k.n_spans++] = (host_span){e->tid, e->ts_ns, e->ts_ns + e->dur_ns};
    }
    if (spans)
        qsort(spans, (size_t)k.n_spans, sizeof *spans, span_cmp);
    k.spans = spans;
    k.replays = lf_prof_replay_stash(w->launches, w->n_launches);
    *dropped += p->source->drain(&k, sink_add);
    free(spans);
    lf_status st = lf_prof_replay_finish(k.replays, w->t);
    if (k.st == LF_OK)
        k.st = st;
    w->m->device_label = "CUDA";
    w->m->device_properties = p->source->properties ? p->source->properties() : NULL;
    return k.st;
}

lf_status lf_prof_build_trace(lf_profiler *p, lf_tbuf *bufs, int64_t t_begin, int64_t t_end, lf_trace **out)
{
    building w = {.p = p, .t_begin = t_begin, .t_end = t_end, .pid = (int64_t)getpid()};
    LF_TRY(lf_trace_create(&w.t));
    w.cm = lf_prof_clock_map(p->tick0, p->mono0);
    w.m = lf_trace_meta_of(w.t);
    if (set_meta(&w) != LF_OK) {
        lf_trace_free(w.t);
        return LF_EINVAL;
    }
    int64_t dropped = atomic_load(&p->lost);
    lf_status st = LF_OK;
    for (lf_tbuf *b = bufs; b && st == LF_OK; b = b->next) {
        dropped += b->lost;
        st = add_thread(&w, b, cpu_lane(bufs, b->tid));
    }
    if (st == LF_OK && p->source)
        st = add_device_events(&w, &dropped);
    for (int i = 0; i < w.n_colls; i++)
        free(w.colls[i].args);
    free(w.colls), free(w.launches);
    if (st == LF_OK)
        st = name_streams(w.t);
    w.m->dropped_events = dropped;
    if (st != LF_OK) {
        lf_trace_free(w.t);
        return st;
    }
    *out = w.t;
    return LF_OK;
}
