/* Reading a Kineto-schema trace (PyTorch's or linfuse's) into an lf_trace, with jansson.
 * Only what the table, diff and summary need is kept: category, name, track, times, External
 * id, correlation, shapes, FLOPs, memory. Bad files are errors that say where, never crashes.
 * This room turns events into a trace; json_top.c reads the top level around them, json_scan.c
 * walks the text, json_source.c brings it in, json_open.c opens what is read. Layer: trace/. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "trace/json_scan.h"
#include "trace/shape_flops.h"

static lf_trace_cat cat_of(const char *s)
{
    for (int c = 0; c < LF_TC_OTHER; c++)
        if (!strcmp(s, lf_trace_cat_name((lf_trace_cat)c)))
            return (lf_trace_cat)c;
    if (!strcmp(s, "gpu_memcpy") || !strcmp(s, "cuda_memcpy"))
        return LF_TC_MEMCPY;
    return LF_TC_OTHER;
}

/* An integer-valued field (JSON integer, or a real holding an integer); strings give def. */
static int64_t get_int(json_t *o, const char *key, int64_t def)
{
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    if (json_is_real(v) && isfinite(json_real_value(v)) && fabs(json_real_value(v)) < 9e18)
        return (int64_t)json_real_value(v);
    return def;
}

/* Microseconds (a JSON number) to nanoseconds; false for missing, non-finite or absurd values
 * (beyond +-LF_TRACE_MAX_US). */
/* A ts: its microseconds since the epoch, where the trace gives them so (past LF_TRACE_MAX_US, as
 * older Kineto wrote them), read from a base a day before the first of them (r->shift_us). */
static int get_ts(reader *r, json_t *o, int64_t *ns)
{
    json_t *v = json_object_get(o, "ts");
    if (!json_is_number(v))
        return 0;
    double us = json_number_value(v);
    if (!r->shifted && isfinite(us) && fabs(us) > LF_TRACE_MAX_US && fabs(us) < 4e15) { /* 4e15 us: year 2096 */
        r->shift_us = floor(us / 1e6) * 1e6 - 86400e6;
        r->shifted = 1;
    }
    us -= r->shift_us;
    if (!isfinite(us) || fabs(us) > LF_TRACE_MAX_US)
        return 0;
    *ns = llround(us * 1000.0);
    return 1;
}

static int get_us(json_t *o, const char *key, int64_t *ns)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        return 0;
    double us = json_number_value(v);
    if (!isfinite(us) || fabs(us) > LF_TRACE_MAX_US)
        return 0;
    *ns = llround(us * 1000.0);
    return 1;
}

static char *dump_compact(json_t *v)
{
    return v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
}

/* Kineto writes JSON arrays with ", " between items; jansson's compact form has none. Both
 * parse the same; ours are normalized to Kineto's spelling for display. */
static char *spaced(char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s), extra = 0;
    for (size_t i = 0; i < n; i++)
        extra += s[i] == ',';
    char *o = malloc(n + extra + 1);
    if (!o) {
        free(s);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        o[k++] = s[i];
        if (s[i] == ',')
            o[k++] = ' ';
    }
    o[k] = '\0';
    free(s);
    return o;
}

static int cmp_flow(const void *a, const void *b)
{
    int64_t x = ((const flow_start *)a)->id, y = ((const flow_start *)b)->id;
    return (x > y) - (x < y);
}

/* A flow start ("ph": "s") of Kineto's launch-to-kernel flows ("ac2g"; "async" in Kineto before
 * 2022): which host track launched the work of its correlation id, and when. Kineto's
 * forward-to-backward flows ("fwdbwd", whose ids count from 1 as correlation ids do) are not
 * launches and are left out. */
static lf_status add_flow_start(reader *r, json_t *e)
{
    const char *cat = json_string_value(json_object_get(e, "cat"));
    if (cat && !strcmp(cat, "fwdbwd"))
        return LF_OK;
    if (r->n_flows == r->cap_flows) {
        size_t cap = r->cap_flows ? 2 * r->cap_flows : 1024;
        flow_start *f = realloc(r->flows, cap * sizeof *f);
        if (!f)
            return lf_fail(LF_ENOMEM, "%s: out of memory for flows", r->name);
        r->flows = f;
        r->cap_flows = cap;
    }
    int64_t ts = -1;
    if (!get_ts(r, e, &ts) || ts < 0)
        ts = -1;
    r->flows[r->n_flows++] = (flow_start){get_int(e, "id", 0), get_int(e, "pid", -1), get_int(e, "tid", -1), ts};
    return LF_OK;
}

/* Metadata ("ph": "M"): a thread's name, a merged trace's process (rank) names, and the process
 * that linfuse's CPU device runs its kernels in (labelled "CPU kernels"). */
static lf_status add_metadata(reader *r, json_t *e, json_t *args)
{
    const char *what = json_string_value(json_object_get(e, "name"));
    const char *nm = args ? json_string_value(json_object_get(args, "name")) : NULL;
    const char *labels = args ? json_string_value(json_object_get(args, "labels")) : NULL;
    if (what && labels && !strcmp(what, "process_labels") && !strcmp(labels, "CPU kernels"))
        r->t->meta.cpu_device_pid = get_int(e, "pid", -1);
    if (what && nm && !strcmp(what, "thread_name") && get_int(e, "tid", -1) != LF_TRACK_PROCESS)
        return lf_trace_name_thread(r->t, get_int(e, "pid", -1), get_int(e, "tid", -1), nm);
    if (what && nm && !strcmp(what, "process_name") && r->t->meta.merged_ranks) /* "rank R" */
        return lf_trace_name_track(r->t, get_int(e, "pid", -1), LF_TRACK_PROCESS, nm);
    return LF_OK;
}

/* An event's FLOPs: its args' "FLOPs" (or "flops"), else for a CPU op PyTorch's count from its
 * shapes, remembered (the trace keeps those only under with_flops, known at the end). */
static lf_status read_flops(reader *r, json_t *args, lf_trace_event *ev)
{
    json_t *fl = json_object_get(args, "FLOPs");
    if (!fl)
        fl = json_object_get(args, "flops");
    ev->flops = json_is_number(fl) ? json_number_value(fl) : 0;
    if (fl || ev->cat != LF_TC_CPU_OP || (ev->flops = lf_trace_shape_flops(ev->name, args)) <= 0 || r->each)
        return LF_OK; /* (events handed over are not kept: their FLOPs from shapes stay as counted) */
    if (r->n_shape_flops == r->cap_shape_flops) {
        size_t cap = r->cap_shape_flops ? 2 * r->cap_shape_flops : 256;
        int64_t *g = realloc(r->shape_flops, cap * sizeof *g);
        if (!g)
            return lf_fail(LF_ENOMEM, "%s: out of memory", r->name);
        r->shape_flops = g, r->cap_shape_flops = cap;
    }
    r->shape_flops[r->n_shape_flops++] = lf_trace_count(r->t); /* the index this event gets */
    return LF_OK;
}

/* "Python stack": [frames] as one text, a frame a line (NULL when absent, empty or not strings;
 * the caller frees it). */
static char *stack_text(json_t *frames)
{
    size_t n = 0, i;
    json_t *f;
    json_array_foreach(frames, i, f)
    {
        if (!json_is_string(f))
            return NULL;
        n += json_string_length(f) + 1;
    }
    char *s = n ? malloc(n) : NULL, *p = s;
    json_array_foreach(frames, i, f)
    {
        if (!s)
            break;
        const size_t k = json_string_length(f);
        memcpy(p, json_string_value(f), k);
        for (size_t c = 0; c < k; c++) /* a frame holds no line break: one would split it in two */
            p[c] = p[c] == '\n' ? ' ' : p[c];
        p += k;
        *p++ = '\n';
    }
    if (s)
        p[-1] = '\0';
    return s;
}

/* What an event's args say: ids, device, FLOPs, bytes, a [memory] event's sizes, the input
 * shapes, types and strides as text (*dims, *types, *strides) and its Python frames (*stack): the
 * caller frees those. */
static lf_status read_args(reader *r, json_t *args, int is_mem, lf_trace_event *ev, char **dims, char **types,
                           char **strides, char **stack)
{
    ev->ext_id = get_int(args, "External id", 0);
    ev->correlation = get_int(args, "correlation", 0);
    ev->device = get_int(args, "device", -1);
    LF_TRY(read_flops(r, args, ev));
    json_t *by = json_object_get(args, "bytes");
    ev->bytes = json_is_number(by) ? json_number_value(by) : 0;
    if (is_mem) {
        ev->mem_bytes = get_int(args, "Bytes", 0);
        ev->mem_total_allocated = get_int(args, "Total Allocated", 0);
        ev->mem_total_reserved = get_int(args, "Total Reserved", ev->mem_total_allocated);
        ev->mem_device_type = get_int(args, "Device Type", 0);
        if (ev->mem_device_type)
            ev->device = get_int(args, "Device Id", 0);
        ev->mem_addr = get_int(args, "Addr", 0);
    }
    *dims = spaced(dump_compact(json_object_get(args, "Input Dims")));
    *types = spaced(dump_compact(json_object_get(args, "Input type")));
    *strides = spaced(dump_compact(json_object_get(args, "Input Strides")));
    ev->input_dims = *dims, ev->input_types = *types, ev->input_strides = *strides;
    json_t *frames = json_object_get(args, "Python stack");
    ev->stack = *stack = json_is_array(frames) ? stack_text(frames) : NULL;
    return LF_OK;
}

/* One element of traceEvents, already parsed: a complete event ("X") or a [memory] instant
 * becomes a trace event; flow starts and metadata are kept; the rest carries nothing the tools
 * use. */
static lf_status add_event(reader *r, json_t *e, size_t i)
{
    const char *path = r->name;
    const char *ph = json_string_value(json_object_get(e, "ph"));
    if (!ph)
        return lf_fail(LF_EINVAL, "%s: traceEvents[%zu] has no \"ph\" string", path, i);
    json_t *args = json_object_get(e, "args");
    if (args && !json_is_object(args))
        args = NULL;
    if (!strcmp(ph, "s"))
        return add_flow_start(r, e);
    if (!strcmp(ph, "M"))
        return add_metadata(r, e, args);
    const char *name = json_string_value(json_object_get(e, "name"));
    int is_mem = !strcmp(ph, "i") && name && !strcmp(name, "[memory]");
    if (strcmp(ph, "X") && !is_mem)
        return LF_OK; /* instants, flow ends and anything else carry nothing the tools use */
    if (!name)
        return lf_fail(LF_EINVAL, "%s: traceEvents[%zu] has no \"name\" string", path, i);
    lf_trace_event ev = {.name = name, .device = -1, .flow_ts = -1, .flow_pid = -1, .flow_tid = -1, .dur_ns = -1};
    const char *cat = json_string_value(json_object_get(e, "cat"));
    ev.cat = is_mem ? LF_TC_MEMORY : cat ? cat_of(cat) : LF_TC_OTHER;
    r->n_with_cat += cat != NULL;
    ev.pid = get_int(e, "pid", -1);
    ev.tid = get_int(e, "tid", -1);
    if (!get_ts(r, e, &ev.ts_ns) || (!is_mem && !get_us(e, "dur", &ev.dur_ns)))
        return lf_fail(LF_EINVAL, "%s: traceEvents[%zu] (\"%s\") has a missing or absurd \"ts\" or \"dur\"", path, i,
                       name);
    if (!is_mem && ev.dur_ns < 0) {
        ev.dur_ns = 0; /* Kineto clamps negative durations the same way; counted, not hidden */
        lf_trace_meta_of(r->t)->negative_durations++;
    }
    if (ev.cat == LF_TC_GPU_ANNOTATION && ev.dur_ns >= 2) {
        /* Kineto's export pads a device-side annotation by 1 ns on each side of the kernels
         * it covers; PyTorch's own tables use the unpadded span */
        ev.ts_ns += 1;
        ev.dur_ns -= 2;
    }
    char *dims = NULL, *types = NULL, *strides = NULL, *stack = NULL, *rest = NULL;
    lf_status st = args ? read_args(r, args, is_mem, &ev, &dims, &types, &strides, &stack) : LF_OK;
    int oom = 0;
    if (st == LF_OK && args && r->keep_args) {
        /* an event with no category is judged as the CPU op it becomes in a bare array of events
         * (parse_doc, at the end): the writer then makes its shapes and ids */
        lf_trace_event as = ev;
        as.cat = cat || is_mem ? ev.cat : LF_TC_CPU_OP;
        ev.extra_args = rest = lf_json_other_args(args, &as, &oom);
    }
    if (oom)
        st = lf_fail(LF_ENOMEM, "%s: out of memory keeping traceEvents[%zu]'s args", path, i);
    if (st == LF_OK)
        st = r->each ? r->each(r->each_ctx, &ev) : lf_trace_add(r->t, &ev);
    free(dims), free(types), free(strides), free(stack), free(rest);
    return st;
}

/* jansson's source for one event: the text 1 KB at a time, or up to the next '}', what it has
 * taken given back as more comes in (it may not yet have used the last 1 KB it was handed: kept);
 * an event longer than
 * MAX_VALUE bytes, white space included, is refused (jansson would hold it whole). */
static size_t feed_event(void *buf, size_t cap, void *arg)
{
    reader *r = arg;
    if (r->pos - r->ev_start >= MAX_VALUE) {
        lf_scan_reader_fail(r, r->pos, "traceEvents[%zu] is longer than %d MB; not a trace", r->ev_index,
                            MAX_VALUE >> 20);
        return (size_t)-1;
    }
    r->pin = (pin){r->pos > 2 * cap ? r->pos - 2 * cap : 0, "an event"};
    if (!lf_scan_have(r, 1))
        return 0;
    size_t k = r->n - r->pos < cap ? r->n - r->pos : cap;
    if (k > MAX_VALUE - (r->pos - r->ev_start))
        k = MAX_VALUE - (r->pos - r->ev_start);
    /* up to the first '}': the event ends at one, so jansson is not handed the events after it */
    const char *close = memchr(r->p + r->pos, '}', k);
    if (close)
        k = (size_t)(close - (r->p + r->pos)) + 1;
    memcpy(buf, r->p + r->pos, k);
    r->pos += k;
    return k;
}

lf_status lf_json_events_array(reader *r)
{
    if (!lf_scan_take(r, '['))
        return lf_scan_fail_at(r, r->pos, "no \"traceEvents\" array (not a Chrome/Kineto trace)");
    if (lf_scan_take(r, ']'))
        return LF_OK;
    size_t i = 0;
    do {
        lf_scan_ws(r);
        if (!lf_scan_have(r, 1) || r->p[r->pos] != '{') {
            if (lf_scan_have(r, 1) && r->p[r->pos] != ']')
                return lf_fail(LF_EINVAL, "%s: traceEvents[%zu] is not an object", r->name, i);
            return lf_scan_fail_at(r, r->pos, "not valid JSON: the events end early");
        }
        json_error_t err;
        r->ev_start = r->pos, r->ev_index = i;
        json_t *e =
            json_load_callback(feed_event, r, JSON_DISABLE_EOF_CHECK | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
        r->pin = (pin){SIZE_MAX, NULL};
        /* how far jansson read (an int: exact, as an event is shorter than MAX_VALUE) */
        const size_t used = err.position > 0 ? (size_t)err.position : 0;
        if (!e) {
            char msg[200];
            snprintf(msg, sizeof msg, "not valid JSON: %s", err.text);
            return lf_scan_fail_at(r, r->ev_start + (used ? used - 1 : 0), msg);
        }
        LF_ASSERT(used <= r->pos - r->ev_start);
        r->pos = r->ev_start + used;
        lf_status st = add_event(r, e, i++);
        json_decref(e);
        LF_TRY(st);
        if (lf_trace_count(r->t) > r->max_events)
            return lf_fail(LF_EINVAL,
                           "%s: more than %lld events: held in memory (%zu bytes each) they would pass the %lld bytes "
                           "(%.1f GB) a trace may have; raise the limit with --max-bytes or LINFUSE_TRACE_MAX_BYTES",
                           r->name, (long long)r->max_events, sizeof(lf_trace_event),
                           (long long)(r->max_events * (int64_t)sizeof(lf_trace_event)),
                           (double)r->max_events * (double)sizeof(lf_trace_event) / 1e9);
        lf_scan_between_events(r);
    } while (lf_scan_take(r, ','));
    if (!lf_scan_take(r, ']'))
        return lf_scan_fail_at(r, r->pos, "not valid JSON: expected ',' or ']' between events");
    return LF_OK;
}

/* baseTimeNanoseconds: an epoch in integer nanoseconds, read exactly (a double holds 1.7e18 to
 * 256 ns only); a string, a fraction, an exponent, a negative or an overflowing value is refused
 * at its place: read as 0 it put every event of a merge 55 years off, without a word. */
/* Device events learn which host track launched them from the flow starts. */
static void link_flows(reader *r)
{
    if (!r->n_flows)
        return;
    qsort(r->flows, r->n_flows, sizeof *r->flows, cmp_flow);
    for (int64_t i = 0; i < r->t->n; i++) {
        lf_trace_event *ev = &r->t->ev[i];
        if (!lf_trace_cat_is_device(ev->cat) || !ev->correlation)
            continue;
        flow_start key = {ev->correlation, 0, 0, 0};
        flow_start *f = bsearch(&key, r->flows, r->n_flows, sizeof *r->flows, cmp_flow);
        if (f)
            ev->flow_pid = f->pid, ev->flow_tid = f->tid, ev->flow_ts = f->ts;
    }
}

/* The device label: CUDA unless every kernel ran on linfuse's CPU device: in the process labelled
 * so, or (a trace written before that label) named as its kernels are. A compiled plan's
 * generated kernels (lf_poi_...) run there too. */
static const char *device_label(const lf_trace *t)
{
    int cuda = 0, cpu_dev = 0;
    for (int64_t i = 0; i < t->n; i++)
        if (lf_trace_cat_is_device(t->ev[i].cat)) {
            if ((t->meta.cpu_device_pid >= 0 && t->ev[i].pid == t->meta.cpu_device_pid) ||
                !strncmp(t->ev[i].name, "lf_cpu_", 7))
                cpu_dev = 1;
            else
                cuda = 1;
        }
    return cpu_dev && !cuda ? "CPU-dev" : "CUDA";
}

/* A whole trace: an object with traceEvents, or a bare array of events; then what needs every
 * event (FLOPs from shapes only under with_flops, flows, the device label). */
static lf_status parse_doc(reader *r)
{
    lf_trace_meta *m = lf_trace_meta_of(r->t);
    if (lf_scan_have(r, 3) &&
        !memcmp(r->p + r->pos, "\xef\xbb\xbf", 3)) /* a UTF-8 byte order mark, as the opener takes it */
        r->pos += 3;
    lf_scan_ws(r);
    const int bare = lf_scan_have(r, 1) && r->p[r->pos] == '[';
    if (bare)
        LF_TRY(lf_json_events_array(r));
    else
        LF_TRY(lf_json_top_object(r));
    lf_scan_ws(r); /* to the source's end: a gzip trace's CRCs and members checked */
    if (lf_scan_have(r, 1))
        return lf_scan_fail_at(r, r->pos, "not valid JSON: text after the end of the trace");
    /* FLOPs from shapes count only where PyTorch would have counted them */
    if (!m->with_flops)
        for (size_t i = 0; i < r->n_shape_flops; i++)
            r->t->ev[r->shape_flops[i]].flops = 0;
    /* PyTorch's profiler without Kineto (torch.autograd.kineto_available() false, as Debian's
     * torch) exports a bare array of complete events with no category: its ops and
     * record_function ranges, which its own table lists alike. Read them as ops, but for the
     * steps prof.step() marked (ProfilerStep#N): those are ranges, as Kineto's traces say, so
     * summary, breakdown, diff and svg find the steps (they had read a legacy trace as one). */
    if (bare && r->n_with_cat == 0) /* (events handed over are not kept: none here to settle) */
        for (int64_t i = 0; i < r->t->n; i++) {
            lf_trace_event *e = &r->t->ev[i];
            if (e->cat == LF_TC_OTHER && e->dur_ns >= 0)
                e->cat = strncmp(e->name, "ProfilerStep#", 13) ? LF_TC_CPU_OP : LF_TC_USER_ANNOTATION;
        }
    link_flows(r);
    m->device_label = device_label(r->t);
    int64_t shift_ns = llround(r->shift_us * 1000.0); /* the epoch times' base joins the trace's */
    if (r->shifted && __builtin_add_overflow(m->base_ns, shift_ns, &m->base_ns))
        return lf_fail(LF_EINVAL, "%s: baseTimeNanoseconds and times since the epoch together pass 2^63 ns", r->name);
    return LF_OK;
}

lf_status lf_json_parse(lf_trace **out, const char *data, size_t size, const char *name, int releasable, lazy_src *src,
                        const lf_trace_read_opts *opts)
{
    if (size == 0 && !src)
        return lf_fail(LF_EINVAL, "%s: is empty, expected a JSON trace", name);
    reader r = {.p = data,
                .n = size,
                .name = name,
                .releasable = releasable,
                .src = src,
                .pin = {SIZE_MAX, NULL},
                .keep_args = opts && opts->keep_args,
                .each = opts ? opts->each : NULL,
                .each_ctx = opts ? opts->each_ctx : NULL};
    r.max_events = lf_trace_read_limit() / (int64_t)sizeof(lf_trace_event);
    LF_TRY(lf_trace_create(&r.t));
    lf_trace_meta_of(r.t)->trace_name = lf_trace_intern(r.t, name);
    lf_status st = parse_doc(&r);
    if (src && src->err) /* the source's own fault, not the text's it cut short */
        st = lf_fail(src->err, "%s", src->msg);
    else if (r.err) /* the reader's refusal (a value too long), not the parse error that followed */
        st = lf_fail(r.err, "%s", r.msg);
    if (st == LF_OK)
        lf_scan_report_end(&r);
    free(r.flows), free(r.shape_flops);
    if (st != LF_OK) {
        lf_trace_free(r.t);
        return st;
    }
    *out = r.t;
    return LF_OK;
}
