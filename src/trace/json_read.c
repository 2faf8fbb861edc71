/* Reading a Kineto-schema trace (PyTorch's or linfuse's) into an lf_trace, with jansson.
 * Only what the table, diff and summary need is kept: category, name, track, times, External
 * id, correlation, shapes, FLOPs, memory. Bad files are errors that say where, never crashes.
 * Layer: trace/. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trace/trace_impl.h"

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
 * (beyond +-1e13 us, about 115 days: Kineto's times count from a base at most 3 months back,
 * and this bound keeps every ts + dur far inside int64 nanoseconds). */
static int get_us(json_t *o, const char *key, int64_t *ns)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        return 0;
    double us = json_number_value(v);
    if (!isfinite(us) || fabs(us) > 1e13)
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

typedef struct flow_start {
    int64_t id, pid, tid;
} flow_start;

static int cmp_flow(const void *a, const void *b)
{
    int64_t x = ((const flow_start *)a)->id, y = ((const flow_start *)b)->id;
    return (x > y) - (x < y);
}

static lf_status read_events(lf_trace *t, json_t *events, const char *path)
{
    size_t n = json_array_size(events);
    flow_start *flows = malloc((n + 1) * sizeof *flows);
    if (!flows)
        return lf_fail(LF_ENOMEM, "%s: out of memory for %zu events", path, n);
    size_t n_flows = 0;
    lf_status st = LF_OK;
    for (size_t i = 0; i < n && st == LF_OK; i++) {
        json_t *e = json_array_get(events, i);
        if (!json_is_object(e)) {
            st = lf_fail(LF_EINVAL, "%s: traceEvents[%zu] is not an object", path, i);
            break;
        }
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!ph) {
            st = lf_fail(LF_EINVAL, "%s: traceEvents[%zu] has no \"ph\" string", path, i);
            break;
        }
        json_t *args = json_object_get(e, "args");
        if (args && !json_is_object(args))
            args = NULL;
        if (!strcmp(ph, "s")) {
            flows[n_flows++] = (flow_start){get_int(e, "id", 0), get_int(e, "pid", -1), get_int(e, "tid", -1)};
            continue;
        }
        if (!strcmp(ph, "M")) {
            const char *what = json_string_value(json_object_get(e, "name"));
            const char *nm = args ? json_string_value(json_object_get(args, "name")) : NULL;
            if (what && nm && !strcmp(what, "thread_name"))
                st = lf_trace_name_thread(t, get_int(e, "pid", -1), get_int(e, "tid", -1), nm);
            continue;
        }
        const char *name = json_string_value(json_object_get(e, "name"));
        int is_mem = !strcmp(ph, "i") && name && !strcmp(name, "[memory]");
        if (strcmp(ph, "X") && !is_mem)
            continue; /* instants, flow ends and anything else carry nothing the tools use */
        if (!name) {
            st = lf_fail(LF_EINVAL, "%s: traceEvents[%zu] has no \"name\" string", path, i);
            break;
        }
        lf_trace_event ev = {.name = name, .device = -1, .flow_pid = -1, .flow_tid = -1, .dur_ns = -1};
        const char *cat = json_string_value(json_object_get(e, "cat"));
        ev.cat = is_mem ? LF_TC_MEMORY : cat ? cat_of(cat) : LF_TC_OTHER;
        ev.pid = get_int(e, "pid", -1);
        ev.tid = get_int(e, "tid", -1);
        if (!get_us(e, "ts", &ev.ts_ns) || (!is_mem && !get_us(e, "dur", &ev.dur_ns))) {
            st = lf_fail(LF_EINVAL, "%s: traceEvents[%zu] (\"%s\") has a missing or absurd \"ts\" or \"dur\"", path, i,
                         name);
            break;
        }
        if (!is_mem && ev.dur_ns < 0)
            ev.dur_ns = 0; /* Kineto clamps negative durations the same way */
        if (ev.cat == LF_TC_GPU_ANNOTATION && ev.dur_ns >= 2) {
            /* Kineto's export pads a device-side annotation by 1 ns on each side of the kernels
             * it covers; PyTorch's own tables use the unpadded span */
            ev.ts_ns += 1;
            ev.dur_ns -= 2;
        }
        char *dims = NULL, *types = NULL, *strides = NULL;
        if (args) {
            ev.ext_id = get_int(args, "External id", 0);
            ev.correlation = get_int(args, "correlation", 0);
            ev.device = get_int(args, "device", -1);
            json_t *fl = json_object_get(args, "FLOPs");
            if (!fl)
                fl = json_object_get(args, "flops");
            ev.flops = json_is_number(fl) ? json_number_value(fl) : 0;
            json_t *by = json_object_get(args, "bytes");
            ev.bytes = json_is_number(by) ? json_number_value(by) : 0;
            if (is_mem) {
                ev.mem_bytes = get_int(args, "Bytes", 0);
                ev.mem_total_allocated = get_int(args, "Total Allocated", 0);
                ev.mem_device_type = get_int(args, "Device Type", 0);
                ev.mem_addr = get_int(args, "Addr", 0);
            }
            dims = spaced(dump_compact(json_object_get(args, "Input Dims")));
            types = spaced(dump_compact(json_object_get(args, "Input type")));
            strides = spaced(dump_compact(json_object_get(args, "Input Strides")));
            ev.input_dims = dims, ev.input_types = types, ev.input_strides = strides;
        }
        st = lf_trace_add(t, &ev);
        free(dims), free(types), free(strides);
    }
    /* device events learn which host track launched them from the flow starts */
    if (st == LF_OK && n_flows) {
        qsort(flows, n_flows, sizeof *flows, cmp_flow);
        for (int64_t i = 0; i < t->n; i++) {
            lf_trace_event *ev = &t->ev[i];
            if (!lf_trace_cat_is_device(ev->cat) || !ev->correlation)
                continue;
            flow_start key = {ev->correlation, 0, 0};
            flow_start *f = bsearch(&key, flows, n_flows, sizeof *flows, cmp_flow);
            if (f)
                ev->flow_pid = f->pid, ev->flow_tid = f->tid;
        }
    }
    free(flows);
    return st;
}

/* Build a trace from a parsed document; root is released here. */
static lf_status from_root(json_t *root, const char *path, lf_trace **out)
{
    json_t *events = json_is_array(root) ? root : json_object_get(root, "traceEvents");
    lf_status st = LF_OK;
    lf_trace *t = NULL;
    if (!json_is_array(events))
        st = lf_fail(LF_EINVAL, "%s: no \"traceEvents\" array (not a Chrome/Kineto trace)", path);
    if (st == LF_OK)
        st = lf_trace_create(&t);
    if (st == LF_OK) {
        lf_trace_meta *m = lf_trace_meta_of(t);
        m->base_ns = json_is_object(root) ? get_int(root, "baseTimeNanoseconds", 0) : 0;
        m->record_shapes = json_is_object(root) && get_int(root, "record_shapes", 0);
        m->profile_memory = json_is_object(root) && get_int(root, "profile_memory", 0);
        m->with_flops = json_is_object(root) && get_int(root, "with_flops", 0);
        m->dropped_events = json_is_object(root) ? get_int(root, "linfuse_dropped_events", 0) : 0;
        st = read_events(t, events, path);
    }
    if (st == LF_OK) {
        /* the device label: CUDA unless every kernel ran on linfuse's CPU device */
        int cuda = 0, cpu_dev = 0;
        for (int64_t i = 0; i < t->n; i++)
            if (lf_trace_cat_is_device(t->ev[i].cat)) {
                if (!strncmp(t->ev[i].name, "lf_cpu_", 7))
                    cpu_dev = 1;
                else
                    cuda = 1;
            }
        lf_trace_meta_of(t)->device_label = cpu_dev && !cuda ? "CPU-dev" : "CUDA";
    }
    json_decref(root);
    if (st != LF_OK) {
        lf_trace_free(t);
        return st;
    }
    *out = t;
    return LF_OK;
}

/* Documents nested deeper than this are refused: a trace is three levels deep, and deep
 * nesting is how hostile JSON makes recursive parsers run out of stack. */
enum { MAX_NESTING = 64 };

static int too_deep(const char *data, size_t n)
{
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = data[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > MAX_NESTING)
                return 1;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return 0;
}

lf_status lf_trace_read_json_buffer(lf_trace **out, const char *data, size_t size, const char *name)
{
    LF_CHECK_PTR(out, "lf_trace_read_json_buffer", "out");
    *out = NULL;
    LF_CHECK_PTR(data, "lf_trace_read_json_buffer", "data");
    if (!name)
        name = "(buffer)";
    if (size == 0)
        return lf_fail(LF_EINVAL, "%s: is empty, expected a JSON trace", name);
    if (too_deep(data, size))
        return lf_fail(LF_EINVAL, "%s: nested more than %d levels deep; not a trace", name, MAX_NESTING);
    json_error_t err;
    json_t *root = json_loadb(data, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    if (!root)
        return lf_fail(LF_EINVAL, "%s:%d:%d: not valid JSON: %s", name, err.line, err.column, err.text);
    return from_root(root, name, out);
}

lf_status lf_trace_read_json(lf_trace **out, const char *path)
{
    LF_CHECK_PTR(out, "lf_trace_read_json", "out");
    *out = NULL;
    LF_CHECK_PTR(path, "lf_trace_read_json", "path");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return lf_fail(LF_EIO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return lf_fail(LF_EIO, "%s: is a directory, expected a trace file", path);
    if (!S_ISREG(sb.st_mode))
        return lf_fail(LF_EIO, "%s: is not a regular file", path);
    if (sb.st_size == 0)
        return lf_fail(LF_EINVAL, "%s: is empty, expected a JSON trace", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return lf_fail(LF_EIO, "%s: %s", path, strerror(errno));
    char *data = malloc((size_t)sb.st_size);
    size_t got = data ? fread(data, 1, (size_t)sb.st_size, f) : 0;
    int rerr = ferror(f);
    fclose(f);
    if (!data)
        return lf_fail(LF_ENOMEM, "%s: out of memory for %lld bytes", path, (long long)sb.st_size);
    if (rerr || got != (size_t)sb.st_size) {
        free(data);
        return lf_fail(LF_EIO, "%s: read %zu of %lld bytes", path, got, (long long)sb.st_size);
    }
    lf_status st = lf_trace_read_json_buffer(out, data, got, path);
    free(data);
    return st;
}
