/* One process's records become one Kineto-schema trace (docs/trace_format.md): NVTX ranges as
 * user_annotation, calls as cuda_runtime/cuda_driver, kernels, copies and sets on their device's
 * streams with ac2g flows from the call that queued them, [memory] events, CUPTI's overhead; each
 * call and its work carry the External id of the innermost range open on its thread, so PyTorch's
 * table counts a range's kernels under it. What lies outside --delay/--duration, --capture-range
 * and --steps is left out. Layer: inject/. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inject/inject_impl.h"

/* Kineto's base time: epoch ns floored to a 7,889,238 s boundary. */
static const int64_t BASE_SPAN = INT64_C(7889238) * 1000000000;

/* One build's working state. */
typedef struct build {
    const lfi_meta *m;
    const lfi_opts *o;
    lf_trace *t;
    int64_t to_base; /* records' clock -> ns since the trace's base */
    lfi_range *ranges;
    int64_t n_ranges;
    lfi_spans keep; /* the stretches of time kept */
    lfc_rec *calls; /* sorted by correlation, for the work they queued */
    int64_t n_calls;
    lfi_attr *attr; /* what each piece of device work belongs to (replay.c) */
    lf_status st;
    lfi_stats stats;
    /* the host tracks and device streams used, to name them */
    int64_t (*tracks)[3]; /* pid, tid, lane (-1: a stream of device pid) */
    int64_t n_tracks, cap_tracks;
} build;

int lfi_parse_steps(const char *s, int64_t *lo, int64_t *hi)
{
    if (!s || !*s)
        return 0;
    const char *colon = strchr(s, ':');
    char *end;
    *lo = 0, *hi = INT64_MAX;
    if (colon != s) {
        *lo = strtoll(s, &end, 10);
        if (end != (colon ? colon : s + strlen(s)) || *lo < 0 || s[0] == '-' || s[0] == '+' || s[0] == ' ')
            return 0;
    }
    if (!colon) {
        *hi = *lo;
        return 1;
    }
    if (colon[1]) {
        *hi = strtoll(colon + 1, &end, 10);
        if (*end || *hi < 0 || colon[1] == '-' || colon[1] == '+' || colon[1] == ' ')
            return 0;
    }
    return colon != s || colon[1] ? *lo <= *hi : 0;
}

/* The N of a range named "ProfilerStep#N", or -1. */
static int64_t step_number(const char *name)
{
    static const char prefix[] = "ProfilerStep#";
    if (strncmp(name, prefix, sizeof prefix - 1) || !name[sizeof prefix - 1])
        return -1;
    int64_t n = 0;
    for (const char *p = name + sizeof prefix - 1; *p; p++) {
        if (*p < '0' || *p > '9' || n > INT64_MAX / 10 - 10)
            return -1;
        n = n * 10 + (*p - '0');
    }
    return n;
}

/* --capture-range: "NAME" any domain, "NAME@DOMAIN" that one (the name whole first: a name may
 * hold an '@'). */
static int is_capture(const lfi_range *r, const void *ctx)
{
    const char *want = ctx, *at = strrchr(want, '@');
    if (!strcmp(r->name, want))
        return 1;
    return at && !strncmp(r->name, want, (size_t)(at - want)) && !r->name[at - want] && r->domain &&
           !strcmp(r->domain, at + 1);
}

static int is_kept_step(const lfi_range *r, const void *ctx)
{
    const lfi_opts *o = ctx;
    int64_t n = step_number(r->name);
    return n >= 0 && n >= o->step_lo && n <= o->step_hi;
}

/* The stretches kept: the window, met with the capture ranges and the steps asked for. */
static int make_window(build *b)
{
    b->keep.n = 1;
    if (!(b->keep.v = malloc(sizeof *b->keep.v)))
        return 0;
    b->keep.v[0] = (lfi_span){b->o->lo, b->o->hi < 0 ? INT64_MAX : b->o->hi};
    lfi_spans c;
    if (b->o->capture_range) {
        if (!lfi_spans_of(b->ranges, b->n_ranges, is_capture, b->o->capture_range, &c))
            return 0;
        int ok = lfi_spans_meet(&b->keep, &c);
        free(c.v);
        if (!ok)
            return 0;
    }
    if (b->o->step_lo >= 0) {
        if (!lfi_spans_of(b->ranges, b->n_ranges, is_kept_step, b->o, &c))
            return 0;
        int ok = lfi_spans_meet(&b->keep, &c);
        free(c.v);
        if (!ok)
            return 0;
    }
    b->stats.windows = b->keep.n;
    return 1;
}

static void note_track(build *b, int64_t pid, int64_t tid, int64_t lane)
{
    for (int64_t i = b->n_tracks - 1; i >= 0 && i >= b->n_tracks - 8; i--) /* the usual case: just seen */
        if (b->tracks[i][0] == pid && b->tracks[i][1] == tid && b->tracks[i][2] == lane)
            return;
    for (int64_t i = 0; i < b->n_tracks; i++)
        if (b->tracks[i][0] == pid && b->tracks[i][1] == tid && b->tracks[i][2] == lane)
            return;
    if (b->n_tracks == b->cap_tracks) {
        int64_t cap = b->cap_tracks ? 2 * b->cap_tracks : 64;
        void *g = realloc(b->tracks, (size_t)cap * sizeof *b->tracks);
        if (!g) {
            b->st = LF_ENOMEM;
            return;
        }
        b->tracks = g, b->cap_tracks = cap;
    }
    b->tracks[b->n_tracks][0] = pid, b->tracks[b->n_tracks][1] = tid, b->tracks[b->n_tracks++][2] = lane;
}

static void add(build *b, const lf_trace_event *e)
{
    if (b->st == LF_OK)
        b->st = lf_trace_add(b->t, e);
    b->stats.events += b->st == LF_OK;
}

/* A spilled range's lane: a track id beside its thread's (tids are below 2^22 on Linux). */
static int64_t lane_tid(uint32_t tid, int lane)
{
    return lane ? (INT64_C(1) << 30) | ((int64_t)tid << 3) | lane : tid;
}

/* JSON text of s (quotes, backslashes and control characters escaped) into buf. */
static void json_str(char *buf, size_t cap, const char *s)
{
    size_t n = 0;
    buf[n++] = '"';
    for (; *s && n + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            buf[n++] = '\\', buf[n++] = (char)c;
        else if (c < 0x20)
            n += (size_t)snprintf(buf + n, cap - n, "\\u%04x", c);
        else
            buf[n++] = (char)c;
    }
    buf[n++] = '"';
    buf[n] = '\0';
}

/* The NVTX ranges that start inside the window, each with its External id. */
static void emit_ranges(build *b)
{
    int64_t ext = 0;
    for (int64_t i = 0; i < b->n_ranges; i++) {
        lfi_range *r = &b->ranges[i];
        r->ext = lfi_spans_has(&b->keep, r->start) ? ++ext : 0;
    }
    for (int64_t i = 0; i < b->n_ranges && b->st == LF_OK; i++) {
        const lfi_range *r = &b->ranges[i];
        if (!r->ext)
            continue;
        char dom[300], extra[320];
        if (r->domain) {
            json_str(dom, sizeof dom, r->domain);
            snprintf(extra, sizeof extra, "\"domain\": %s", dom);
        }
        lf_trace_event e = {.cat = LF_TC_USER_ANNOTATION,
                            .name = r->name,
                            .pid = r->pid,
                            .tid = lane_tid(r->tid, r->lane),
                            .ts_ns = r->start + b->to_base,
                            .dur_ns = r->end - r->start,
                            .ext_id = r->ext,
                            .device = -1,
                            .extra_args = r->domain ? extra : NULL,
                            .flow_ts = -1,
                            .flow_pid = -1,
                            .flow_tid = -1};
        add(b, &e);
        note_track(b, r->pid, r->tid, r->lane);
        b->stats.ranges++;
        b->stats.steps += step_number(r->name) >= 0;
    }
}

static int by_start_rec(const void *a, const void *b)
{
    const lfc_rec *x = a, *y = b;
    return x->start != y->start ? (x->start < y->start ? -1 : 1) : 0;
}

static int by_corr(const void *a, const void *b)
{
    const lfc_rec *x = a, *y = b;
    if (x->corr != y->corr)
        return x->corr < y->corr ? -1 : 1;
    return (x->kind == LFC_DRIVER) - (y->kind == LFC_DRIVER); /* a runtime call first */
}

static const lfc_rec *call_of(const build *b, uint32_t corr)
{
    if (!corr)
        return NULL;
    lfc_rec key = {.corr = corr, .kind = LFC_RUNTIME};
    int64_t lo = 0, hi = b->n_calls;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (by_corr(&b->calls[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < b->n_calls && b->calls[lo].corr == corr ? &b->calls[lo] : NULL;
}

/* The External id of what a call made at t on a thread belongs to: its innermost kept range. */
static int64_t ext_at(const build *b, uint32_t pid, uint32_t tid, int64_t t)
{
    int64_t i = lfi_range_at(b->ranges, b->n_ranges, pid, tid, t, 1);
    return i >= 0 ? b->ranges[i].ext : 0;
}

static void emit_calls(build *b)
{
    for (int64_t i = 0; i < b->n_calls && b->st == LF_OK; i++) {
        const lfc_rec *c = &b->calls[i];
        if (!lfi_spans_has(&b->keep, c->start))
            continue;
        char extra[32];
        snprintf(extra, sizeof extra, "\"cbid\": %d", c->cbid);
        lf_trace_event e = {.cat = c->kind == LFC_RUNTIME ? LF_TC_RUNTIME : LF_TC_DRIVER,
                            .name = c->name,
                            .pid = c->pid,
                            .tid = c->tid,
                            .ts_ns = c->start + b->to_base,
                            .dur_ns = c->end - c->start,
                            .ext_id = ext_at(b, c->pid, c->tid, c->start),
                            .correlation = c->corr,
                            .device = -1,
                            .extra_args = extra,
                            .stack = lfi_attr_stack(b->attr, c->corr),
                            .flow_ts = -1,
                            .flow_pid = -1,
                            .flow_tid = -1};
        add(b, &e);
        note_track(b, c->pid, c->tid, 0);
        b->stats.calls++;
    }
}

/* A replayed piece of work's capture, as arguments after Kineto's: the call that made its node,
 * the thread that captured it, and the innermost range open there; or that no record of its node
 * was found. */
static void capture_args(const lfi_work_info *w, char *buf, size_t cap)
{
    if (w->replayed_unknown) {
        snprintf(buf, cap,
                 ", \"captured\": \"unknown: no record of the node's making (a graph made before "
                 "recording began)\"");
        return;
    }
    if (!w->captured)
        return;
    char call[160], range[600] = "";
    json_str(call, sizeof call, w->captured->name ? w->captured->name : "(no call: a node made another way)");
    int n = snprintf(buf, cap, ", \"captured by\": %s, \"capture thread\": %u", call, w->captured->tid);
    if (w->range && n > 0 && (size_t)n < cap) {
        json_str(range, sizeof range, w->range);
        snprintf(buf + n, cap - (size_t)n, ", \"captured in\": %s", range);
    }
}

/* Kineto's kernel arguments (docs/trace_format.md, "Events"). */
static void kernel_args(const build *b, const lfc_rec *k, char *buf, size_t cap)
{
    const int sms = (int)k->device < b->m->n_devices && b->m->sms ? b->m->sms[k->device] : 0;
    const double blocks = (double)k->grid[0] * k->grid[1] * k->grid[2];
    const double threads = (double)k->block[0] * k->block[1] * k->block[2];
    const double bps = sms ? blocks / sms : 0;
    int n = snprintf(buf, cap,
                     "\"context\": %u, \"registers per thread\": %d, \"shared memory\": %d, \"blocks per SM\": %f, "
                     "\"warps per SM\": %f, \"grid\": [%d, %d, %d], \"block\": [%d, %d, %d]",
                     k->context, k->regs, k->static_smem + k->dyn_smem, bps, bps * threads / 32, k->grid[0], k->grid[1],
                     k->grid[2], k->block[0], k->block[1], k->block[2]);
    int occ = b->m->occupancy && sms ? b->m->occupancy(b->m->ctx, k, bps) : -1;
    if (occ >= 0 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", \"est. achieved occupancy %%\": %d", occ);
    if (k->graph_id && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ", \"graph id\": %u, \"graph node id\": %" PRIu64, k->graph_id,
                 k->graph_node_id);
}

/* A kernel, copy or set whose launch (else its start) lies in the window: on its device's stream,
 * tied to the call that queued it, and to the range (or the replay of a capture-time range) it
 * belongs to. */
static void emit_work(build *b, const lfc_rec *d, const char *name)
{
    const lfc_rec *c = call_of(b, d->corr);
    if (!lfi_spans_has(&b->keep, c ? c->start : d->start))
        return;
    lfi_work_info w;
    lfi_attr_work(b->attr, d, c, &w);
    char extra[1400] = "";
    if (d->kind == LFC_KERNEL)
        kernel_args(b, d, extra, sizeof extra);
    else if (d->end > d->start)
        snprintf(extra, sizeof extra, "\"context\": %u, \"memory bandwidth (GB/s)\": %f", d->context,
                 (double)d->bytes / (double)(d->end - d->start));
    else
        snprintf(extra, sizeof extra, "\"context\": %u, \"memory bandwidth (GB/s)\": \"N/A\"", d->context);
    const size_t used = strlen(extra);
    capture_args(&w, extra + used, sizeof extra - used);
    lf_trace_event e = {.cat = d->kind == LFC_KERNEL   ? LF_TC_KERNEL
                               : d->kind == LFC_MEMCPY ? LF_TC_MEMCPY
                                                       : LF_TC_MEMSET,
                        .name = name,
                        .pid = d->device,
                        .tid = d->stream,
                        .ts_ns = d->start + b->to_base,
                        .dur_ns = d->end - d->start,
                        .ext_id = w.ext,
                        .correlation = d->corr,
                        .device = d->device,
                        .bytes = d->kind == LFC_KERNEL ? 0 : (double)d->bytes,
                        .extra_args = extra,
                        .stack = w.stack,
                        .flow_ts = c ? c->start + b->to_base : -1,
                        .flow_pid = c ? (int64_t)c->pid : -1,
                        .flow_tid = c ? (int64_t)c->tid : -1};
    add(b, &e);
    note_track(b, d->device, d->stream, -1);
    b->stats.kernels += d->kind == LFC_KERNEL;
}

/* A range's span on the GPU (gpu_user_annotation), as Kineto writes a record_function's. */
static void emit_span(void *ctx, const lfi_gpu_span *s)
{
    build *b = ctx;
    lf_trace_event e = {.cat = LF_TC_GPU_ANNOTATION,
                        .name = s->name,
                        .pid = s->device,
                        .tid = s->stream,
                        .ts_ns = s->start + b->to_base,
                        .dur_ns = s->end - s->start,
                        .ext_id = s->ext,
                        .device = s->device,
                        .flow_ts = -1,
                        .flow_pid = -1,
                        .flow_tid = -1};
    add(b, &e);
}

/* Allocations and releases in time order, with the device's running total. */
static void emit_memory(build *b, lfc_rec *mem, int64_t n)
{
    int64_t total[64] = {0};
    qsort(mem, (size_t)n, sizeof *mem, by_start_rec);
    for (int64_t i = 0; i < n && b->st == LF_OK; i++) {
        const lfc_rec *r = &mem[i];
        const int dev = r->device < 64 ? (int)r->device : 63;
        const int64_t bytes = r->alloc < 0 ? -(int64_t)r->bytes : (int64_t)r->bytes;
        total[dev] += bytes;
        const lfc_rec *c = call_of(b, r->corr);
        if (!lfi_spans_has(&b->keep, r->start))
            continue;
        lf_trace_event e = {.cat = LF_TC_MEMORY,
                            .name = "[memory]",
                            .pid = c ? (int64_t)c->pid : b->m->pid,
                            .tid = c ? (int64_t)c->tid : b->m->pid,
                            .ts_ns = r->start + b->to_base,
                            .dur_ns = -1,
                            .device = r->device,
                            .mem_bytes = bytes,
                            .mem_total_allocated = total[dev],
                            .mem_total_reserved = total[dev],
                            .mem_device_type = 1,
                            .mem_addr = (int64_t)r->addr,
                            .flow_ts = -1,
                            .flow_pid = -1,
                            .flow_tid = -1};
        add(b, &e);
    }
}

static void emit_overhead(build *b, const lfc_rec *o)
{
    if (!lfi_spans_has(&b->keep, o->start))
        return;
    lf_trace_event e = {.cat = LF_TC_OVERHEAD,
                        .name = o->name ? o->name : "Unknown",
                        .pid = -1, /* Kineto's "CUPTI Overhead" process */
                        .tid = o->tid,
                        .ts_ns = o->start + b->to_base,
                        .dur_ns = o->end - o->start,
                        .device = -1,
                        .flow_ts = -1,
                        .flow_pid = -1,
                        .flow_tid = -1};
    add(b, &e);
}

/* Kernel names made readable once each (names are the session's interned copies: one pointer per
 * distinct name). */
typedef struct name_map {
    const char **keys;
    char **vals;
    size_t cap;
} name_map;

static const char *readable(const build *b, name_map *nm, const char *name)
{
    if (!b->m->demangle || !name || !nm->keys)
        return name;
    size_t i = ((uintptr_t)name >> 4) * 0x9e3779b97f4a7c15ull % nm->cap;
    while (nm->keys[i] && nm->keys[i] != name)
        i = (i + 1) % nm->cap;
    if (!nm->keys[i]) {
        nm->keys[i] = name;
        nm->vals[i] = b->m->demangle(name);
    }
    return nm->vals[i] ? nm->vals[i] : name;
}

/* "thread 12 (python3)", its NVTX lanes, and "stream 7 " per device stream, as Kineto names them. */
static void name_tracks(build *b)
{
    for (int64_t i = 0; i < b->n_tracks && b->st == LF_OK; i++) {
        const int64_t pid = b->tracks[i][0], tid = b->tracks[i][1], lane = b->tracks[i][2];
        char name[128], comm[64] = "";
        if (lane < 0) {
            snprintf(name, sizeof name, "stream %lld ", (long long)tid);
            b->st = lf_trace_name_thread(b->t, pid, tid, name);
            continue;
        }
        if (pid == (int64_t)getpid()) { /* the thread's name while it lives */
            char path[64];
            snprintf(path, sizeof path, "/proc/self/task/%lld/comm", (long long)tid);
            FILE *f = fopen(path, "r");
            if (f) {
                if (fgets(comm, sizeof comm, f))
                    comm[strcspn(comm, "\n")] = '\0';
                fclose(f);
            }
        }
        if (lane)
            snprintf(name, sizeof name, "thread %lld NVTX ranges %lld", (long long)tid, (long long)lane);
        else if (comm[0])
            snprintf(name, sizeof name, "thread %lld (%s)", (long long)tid, comm);
        else
            snprintf(name, sizeof name, "thread %lld", (long long)tid);
        b->st = lf_trace_name_thread(b->t, pid, lane_tid((uint32_t)tid, (int)lane), name);
    }
}

static int by_kind_start(const void *a, const void *b)
{
    const lfc_rec *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    return by_start_rec(a, b);
}

/* The header: Kineto's base time, the GPUs, the rank. */
static lf_status start_trace(build *b, const lfc_rec *all, int64_t n)
{
    int64_t first = n ? all[0].start : 0;
    for (int64_t i = 0; i < n; i++)
        first = all[i].start < first ? all[i].start : first;
    const int64_t base = (first + b->m->to_epoch) / BASE_SPAN * BASE_SPAN;
    b->to_base = b->m->to_epoch - base;
    lf_status st = lf_trace_create(&b->t);
    if (st != LF_OK)
        return st;
    lf_trace_meta *tm = lf_trace_meta_of(b->t);
    tm->base_ns = base;
    tm->device_label = "CUDA";
    tm->process_name = b->m->process_name ? lf_trace_intern(b->t, b->m->process_name) : "program";
    tm->trace_name = b->m->trace_name ? lf_trace_intern(b->t, b->m->trace_name) : NULL;
    tm->device_properties = b->m->device_properties ? lf_trace_intern(b->t, b->m->device_properties) : NULL;
    tm->cpu_device_pid = -1;
    if (b->m->distributed_info)
        st = lf_trace_set_distributed_info(b->t, b->m->distributed_info);
    return st;
}

/* Each kind of record in turn, in the order the trace lists them; all is sorted by (kind, start). */
static void emit_all(build *b, lfc_rec *all, int64_t n)
{
    int64_t seg[LFC_KINDS + 1] = {0};
    for (int64_t i = 0, k = 0; k <= LFC_KINDS; k++) {
        while (i < n && (int)all[i].kind < k)
            i++;
        seg[k] = i;
    }
    emit_ranges(b);
    b->calls = all + seg[LFC_RUNTIME];
    b->n_calls = seg[LFC_DRIVER + 1] - seg[LFC_RUNTIME];
    qsort(b->calls, (size_t)b->n_calls, sizeof *b->calls, by_corr);
    if (!(b->attr = lfi_attr_create(all, n, b->ranges, b->n_ranges))) {
        b->st = LF_ENOMEM;
        return;
    }
    emit_calls(b);
    emit_memory(b, all + seg[LFC_MEMORY], seg[LFC_MEMORY + 1] - seg[LFC_MEMORY]);
    name_map nm = {0};
    nm.cap = 2 * (size_t)(seg[LFC_KERNEL + 1] - seg[LFC_KERNEL]) + 16;
    nm.keys = calloc(nm.cap, sizeof *nm.keys);
    nm.vals = calloc(nm.cap, sizeof *nm.vals);
    if (!nm.vals) {
        free(nm.keys);
        nm.keys = NULL;
    }
    for (int64_t i = seg[LFC_KERNEL]; i < seg[LFC_MEMSET + 1] && b->st == LF_OK; i++)
        emit_work(b, &all[i], all[i].kind == LFC_KERNEL ? readable(b, &nm, all[i].name) : all[i].name);
    if (b->st == LF_OK)
        b->st = lfi_attr_spans(b->attr, emit_span, b);
    const lfi_attr_stats as = lfi_attr_get_stats(b->attr);
    b->stats.replayed = as.replayed, b->stats.replayed_unknown = as.unknown;
    b->stats.replayed_ns = as.replayed_ns, b->stats.ranged_ns = as.ranged_ns, b->stats.framed_ns = as.framed_ns;
    for (size_t i = 0; nm.keys && i < nm.cap; i++)
        free(nm.vals[i]);
    free(nm.keys), free(nm.vals);
    for (int64_t i = seg[LFC_OVERHEAD]; i < seg[LFC_OVERHEAD + 1] && b->st == LF_OK; i++)
        emit_overhead(b, &all[i]);
    name_tracks(b);
}

lf_status lfi_build(lfi_session *s, const lfi_meta *m, lf_trace **out, lfi_stats *stats)
{
    if (!s || !m || !out)
        return LF_EINVAL;
    *out = NULL;
    lfc_rec *all = NULL;
    int64_t n = 0;
    build b = {.m = m, .o = lfi_session_opts(s)};
    lf_status st = lfi_snapshot(s, &all, &n);
    if (st != LF_OK)
        return st;
    qsort(all, (size_t)n, sizeof *all, by_kind_start);
    int64_t last = 0, first_mark = n, marks = 0;
    for (int64_t i = 0; i < n; i++) {
        last = all[i].end > last ? all[i].end : all[i].start > last ? all[i].start : last;
        if (all[i].kind == LFC_MARKER && !marks++)
            first_mark = i;
    }
    st = lfi_ranges(all + first_mark, marks, last, &b.ranges, &b.n_ranges);
    if (st == LF_OK && !make_window(&b))
        st = LF_ENOMEM;
    if (st == LF_OK)
        st = start_trace(&b, all, n);
    if (st == LF_OK) {
        emit_all(&b, all, n);
        st = b.st;
        lf_trace_meta_of(b.t)->dropped_events = m->dropped + lfi_lost(s);
    }
    free(all);
    lfi_attr_free(b.attr);
    free(b.ranges);
    free(b.keep.v);
    free(b.tracks);
    if (st != LF_OK) {
        lf_trace_free(b.t);
        return st;
    }
    if (stats)
        *stats = b.stats;
    *out = b.t;
    return LF_OK;
}
