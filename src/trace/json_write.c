/* Writing a trace as Kineto-schema Chrome trace JSON (docs/trace_format.md).
 * Hand-written rather than built with jansson: a trace can hold millions of events, and a
 * streaming writer needs no tree of them in memory. Written to a temporary file that is
 * renamed over the target only when complete; a name ending in .gz is written gzip-compressed
 * (zlib), as tensorboard_trace_handler(use_gzip=True) writes. Layer: trace/. */
#define _GNU_SOURCE /* fopencookie: a stdio stream that deflates into another */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <zlib.h>

#include "trace/trace_impl.h"

/* A JSON string: quotes and backslashes escaped, control characters dropped (old Perfetto
 * builds reject \u escapes, and Kineto drops newlines the same way), and every byte that is not
 * part of a well-formed UTF-8 character written as U+FFFD, so any name makes valid JSON. */
static void put_strn(FILE *f, const char *s, size_t len)
{
    const char *end = s ? s + len : NULL;
    fputc('"', f);
    while (s && s < end && *s) {
        unsigned char c = (unsigned char)*s;
        int n = lf_utf8_char(s);
        if (c == '"' || c == '\\')
            fputc('\\', f), fputc(c, f);
        else if (n > 1)
            fwrite(s, 1, (size_t)n, f);
        else if (n == 0)
            fputs("\xef\xbf\xbd", f);
        else if (c >= 0x20)
            fputc(c, f);
        s += n > 1 ? n : 1;
    }
    fputc('"', f);
}

static void put_str(FILE *f, const char *s)
{
    put_strn(f, s, s ? strlen(s) : 0);
}

/* Microseconds with three decimals, as Kineto prints them: "1234.005". */
/* ns as microseconds with three decimals; a negative time too (a trace may start before its
 * base: clamping it to 0 changed the table of a trace written back). */
static void put_us(FILE *f, int64_t ns)
{
    const uint64_t m = ns < 0 ? 0 - (uint64_t)ns : (uint64_t)ns;
    fprintf(f, "%s%" PRIu64 ".%03" PRIu64, ns < 0 ? "-" : "", m / 1000, m % 1000);
}

void lf_json_real(char *buf, size_t cap, double v)
{
    for (int p = 1; p <= 17; p++) { /* the fewest digits that read back as v */
        snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    if (!strpbrk(buf, ".eEni")) /* still a real when read back: "2.0", not "2" */
        snprintf(buf + strlen(buf), cap - strlen(buf), ".0");
}

/* A count (FLOPs, bytes): an integer as one while it is one JSON readers take as an integer,
 * else its shortest exact real ("%.0f" of 1e19 gave 20 digits the reader then refused). */
static void put_num(FILE *f, double v)
{
    char b[40];
    if (v > -9.2e18 && v < 9.2e18 && v == (double)(int64_t)v) /* in range before the cast */
        snprintf(b, sizeof b, "%.0f", v);
    else
        lf_json_real(b, sizeof b, v);
    fputs(b, f);
}

static int is_device_x(const lf_trace_event *e)
{
    return lf_trace_cat_is_device(e->cat) && e->cat != LF_TC_GPU_ANNOTATION;
}

int lf_trace_args_lead_with_stream(const lf_trace_event *e)
{
    return e->extra_args && (!strncmp(e->extra_args, "\"stream\":", 9));
}

int lf_trace_writer_makes(const lf_trace_event *e, const char *key)
{
    if (e->cat == LF_TC_MEMORY)
        return !strcmp(key, "Total Reserved") || !strcmp(key, "Total Allocated") || !strcmp(key, "Bytes") ||
               !strcmp(key, "Addr") || !strcmp(key, "Device Type") || !strcmp(key, "Device Id") ||
               !strcmp(key, "Ev Idx");
    if (!strcmp(key, "External id"))
        return e->ext_id != 0;
    if (!strcmp(key, "Python stack"))
        return e->stack != NULL;
    if (e->cat == LF_TC_CPU_OP || e->cat == LF_TC_USER_ANNOTATION)
        return !strcmp(key, "Record function id") || !strcmp(key, "Ev Idx") ||
               (!strcmp(key, "Input Dims") && e->input_dims) ||
               (!strcmp(key, "Input type") && e->input_dims && e->input_types) ||
               (!strcmp(key, "Input Strides") && e->input_dims && e->input_strides) ||
               (!strcmp(key, "flops") && e->flops > 0);
    if (is_device_x(e)) /* "stream": the track's tid, unless extra_args lead with a stream */
        return !strcmp(key, "device") || (!strcmp(key, "stream") && e->tid < LF_TRACE_LANE_TID0) ||
               (!strcmp(key, "correlation") && e->correlation) || (!strcmp(key, "FLOPs") && e->flops > 0) ||
               (!strcmp(key, "bytes") && e->bytes > 0);
    if (e->cat == LF_TC_RUNTIME || e->cat == LF_TC_DRIVER)
        return !strcmp(key, "correlation") && e->correlation;
    return 0;
}

static void put_x(FILE *f, const lf_trace_event *e, int64_t idx)
{
    fputs("{\"ph\": \"X\", \"cat\": ", f);
    put_str(f, lf_trace_cat_name(e->cat));
    fputs(", \"name\": ", f);
    put_str(f, e->name);
    fprintf(f, ", \"pid\": %" PRId64 ", \"tid\": %" PRId64 ", \"ts\": ", e->pid, e->tid);
    /* a device-side annotation padded by 1 ns on each side, as Kineto writes it (the reader takes
     * the padding off again, so a trace read back gives the same table) */
    const int pad = e->cat == LF_TC_GPU_ANNOTATION && e->ts_ns >= 1;
    put_us(f, e->ts_ns - pad);
    fputs(", \"dur\": ", f);
    put_us(f, e->dur_ns + 2 * pad);
    fputs(", \"args\": {", f);
    int n = 0;
#define SEP() (n++ ? fputs(", ", f) : 0)
    if (e->ext_id) {
        SEP();
        fprintf(f, "\"External id\": %" PRId64, e->ext_id);
    }
    if (e->cat == LF_TC_CPU_OP || e->cat == LF_TC_USER_ANNOTATION) {
        SEP();
        fprintf(f, "\"Record function id\": 0, \"Ev Idx\": %" PRId64, idx);
        if (e->input_dims) {
            fprintf(f, ", \"Input Dims\": %s", e->input_dims);
            if (e->input_types)
                fprintf(f, ", \"Input type\": %s", e->input_types);
            if (e->input_strides)
                fprintf(f, ", \"Input Strides\": %s", e->input_strides);
        }
        if (e->flops > 0) {
            fputs(", \"flops\": ", f);
            put_num(f, e->flops);
        }
    }
    if (is_device_x(e)) {
        SEP();
        fprintf(f, "\"device\": %" PRId64, e->device);
        /* the stream is the track, unless the kept args carry one (an input's own, or the one a
         * merge moved there when the track became a lane) */
        if (e->tid < LF_TRACE_LANE_TID0 && !lf_trace_args_lead_with_stream(e))
            fprintf(f, ", \"stream\": %" PRId64, e->tid);
        if (e->correlation)
            fprintf(f, ", \"correlation\": %" PRId64, e->correlation);
        if (e->flops > 0) {
            fputs(", \"FLOPs\": ", f);
            put_num(f, e->flops);
        }
        if (e->bytes > 0) {
            fputs(", \"bytes\": ", f);
            put_num(f, e->bytes);
        }
    } else if ((e->cat == LF_TC_RUNTIME || e->cat == LF_TC_DRIVER) && e->correlation) {
        SEP();
        fprintf(f, "\"correlation\": %" PRId64, e->correlation);
    }
    if (e->stack) { /* one string a frame */
        SEP();
        fputs("\"Python stack\": [", f);
        for (const char *p = e->stack, *nl; *p; p = nl + (*nl != '\0')) {
            nl = strchr(p, '\n');
            if (!nl)
                nl = p + strlen(p);
            put_strn(f, p, (size_t)(nl - p));
            if (*nl)
                fputs(", ", f);
        }
        fputs("]", f);
    }
    if (e->extra_args && *e->extra_args) {
        SEP();
        fputs(e->extra_args, f);
    }
#undef SEP
    fputs("}}", f);
}

static void put_flow(FILE *f, char ph, int64_t id, int64_t pid, int64_t tid, int64_t ts)
{
    fprintf(f, ",\n{\"ph\": \"%c\", \"id\": %" PRId64 ", \"pid\": %" PRId64 ", \"tid\": %" PRId64 ", \"ts\": ", ph, id,
            pid, tid);
    put_us(f, ts);
    fputs(ph == 'f' ? ", \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"}"
                    : ", \"cat\": \"ac2g\", \"name\": \"ac2g\"}",
          f);
}

static void put_memory(FILE *f, const lf_trace_event *e, int64_t idx)
{
    fprintf(f,
            "{\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"s\": \"t\", \"name\": \"[memory]\", \"pid\": %" PRId64
            ", \"tid\": %" PRId64 ", \"ts\": ",
            e->pid, e->tid);
    put_us(f, e->ts_ns);
    fprintf(f,
            ", \"args\": {\"Total Reserved\": %" PRId64 ", \"Total Allocated\": %" PRId64 ", \"Bytes\": %" PRId64
            ", \"Addr\": %" PRId64 ", \"Device Type\": %" PRId64 ", \"Device Id\": %d, \"Ev Idx\": %" PRId64,
            e->mem_total_reserved, e->mem_total_allocated, e->mem_bytes, e->mem_addr, e->mem_device_type,
            e->mem_device_type ? (int)(e->device > 0 ? e->device : 0) : -1, idx);
    if (e->extra_args && *e->extra_args) /* what else it carried (keep_args) */
        fprintf(f, ", %s", e->extra_args);
    fputs("}}", f);
}

static void put_meta(FILE *f, const char *what, int64_t pid, int64_t tid, const char *key, const char *sval,
                     int64_t ival)
{
    fprintf(f,
            ",\n{\"name\": \"%s\", \"ph\": \"M\", \"ts\": 0.000, \"pid\": %" PRId64 ", \"tid\": %" PRId64
            ", \"args\": {\"%s\": ",
            what, pid, tid, key);
    if (sval)
        put_str(f, sval);
    else
        fprintf(f, "%" PRId64, ival);
    fputs("}}", f);
}

/* The trace's top-level fields before its events: the schema, the device, the profiler's flags. */
static void put_header(FILE *f, const lf_trace_meta *m)
{
    fprintf(f, "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": %s,\n",
            m->device_properties ? m->device_properties : "[]");
    if (m->distributed_info)
        fprintf(f, "  \"distributedInfo\": %s,\n", m->distributed_info);
    if (m->merged_ranks)
        fprintf(f, "  \"linfuse_merged_ranks\": %" PRId64 ",\n", m->merged_ranks);
    if (m->record_shapes)
        fputs("  \"record_shapes\": 1,\n", f);
    if (m->profile_memory)
        fputs("  \"profile_memory\": 1,\n", f);
    if (m->with_flops)
        fputs("  \"with_flops\": 1,\n", f);
    fprintf(f, "  \"linfuse_dropped_events\": %" PRId64 ",\n", m->dropped_events);
    fprintf(f, "  \"trace_id\": \"%016" PRIx64 "\",\n", (uint64_t)m->base_ns ^ UINT64_C(0x9e3779b97f4a7c15));
    fprintf(f, "  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": %" PRId64 ",\n", m->base_ns);
}

/* Every event, each device event's flow after it; the last end, in ns. */
static int64_t put_events(FILE *f, const lf_trace *t)
{
    int64_t end_ns = 0;
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (i)
            fputs(",\n", f);
        if (e->cat == LF_TC_MEMORY)
            put_memory(f, e, i);
        else
            put_x(f, e, i);
        int64_t end = e->ts_ns + (e->dur_ns > 0 ? e->dur_ns : 0);
        end_ns = end > end_ns ? end : end_ns;
        /* flows: the launch side binds to the topmost open slice on the host track (the op),
         * the device side, with bp "e", to the kernel itself */
        if (lf_trace_cat_is_device(e->cat) && e->correlation && e->flow_pid >= 0) {
            put_flow(f, 's', e->correlation, e->flow_pid, e->flow_tid, e->flow_ts >= 0 ? e->flow_ts : e->ts_ns);
            put_flow(f, 'f', e->correlation, e->pid, e->tid, e->ts_ns);
        }
    }
    return end_ns;
}

/* The M events: processes (the host's, the CPU kernels', CUPTI's overhead), then named tracks. */
static void put_tracks(FILE *f, const lf_trace *t)
{
    const lf_trace_meta *m = &t->meta;
    int64_t host_pid = -1;
    int overhead = 0;
    for (int64_t i = 0; i < t->n; i++) {
        overhead |= t->ev[i].cat == LF_TC_OVERHEAD;
        if (host_pid < 0 && !lf_trace_cat_is_device(t->ev[i].cat) && t->ev[i].cat != LF_TC_OVERHEAD)
            host_pid = t->ev[i].pid;
    }
    if (!t->n)
        fputs("{\"name\": \"Trace\", \"ph\": \"M\", \"ts\": 0.000, \"pid\": 0, \"tid\": 0, \"args\": {}}", f);
    int named_host = 0;
    for (int64_t i = 0; i < t->n_tracks; i++)
        named_host |= t->tracks[i].tid == LF_TRACK_PROCESS && t->tracks[i].pid == host_pid;
    if (host_pid >= 0 && !named_host) {
        put_meta(f, "process_name", host_pid, 0, "name", m->process_name, 0);
        put_meta(f, "process_labels", host_pid, 0, "labels", "CPU", 0);
        put_meta(f, "process_sort_index", host_pid, 0, "sort_index", NULL, host_pid);
    }
    if (m->cpu_device_pid >= 0) {
        put_meta(f, "process_name", m->cpu_device_pid, 0, "name", m->process_name, 0);
        put_meta(f, "process_labels", m->cpu_device_pid, 0, "labels", "CPU kernels", 0);
        put_meta(f, "process_sort_index", m->cpu_device_pid, 0, "sort_index", NULL, 5000000);
    }
    if (overhead) /* CUPTI's own costs, on Kineto's pid -1 */
        put_meta(f, "process_name", -1, 0, "name", "CUPTI Overhead", 0);
    for (int64_t i = 0; i < t->n_tracks; i++) {
        if (t->tracks[i].tid == LF_TRACK_PROCESS) {
            put_meta(f, "process_name", t->tracks[i].pid, 0, "name", t->tracks[i].name, 0);
            put_meta(f, "process_sort_index", t->tracks[i].pid, 0, "sort_index", NULL, t->tracks[i].pid);
            continue;
        }
        put_meta(f, "thread_name", t->tracks[i].pid, t->tracks[i].tid, "name", t->tracks[i].name, 0);
        put_meta(f, "thread_sort_index", t->tracks[i].pid, t->tracks[i].tid, "sort_index", NULL, t->tracks[i].tid);
    }
}

/* The whole trace as Kineto writes it; 1 when every write went through. */
static int write_all(const lf_trace *t, FILE *f, const char *path)
{
    put_header(f, &t->meta);
    fputs("  \"traceEvents\": [\n", f);
    const int64_t end_ns = put_events(f, t);
    put_tracks(f, t);
    fputs(",\n{\"name\": \"Record Window End\", \"ph\": \"i\", \"s\": \"g\", \"pid\": \"\", \"tid\": \"\", \"ts\": ",
          f);
    put_us(f, end_ns);
    fputs("}\n  ],\n  \"traceName\": ", f);
    put_str(f, t->meta.trace_name ? t->meta.trace_name : path);
    fputs("\n}\n", f);
    return !ferror(f);
}

/* --- gzip: the writer's stream deflated into the temporary file --- */

typedef struct gz_sink {
    FILE *to;
    z_stream z;
    int failed;
} gz_sink;

/* One deflate call over what is queued, its output written on; 1 when the stream ended. */
static int gz_step(gz_sink *g, int flush)
{
    unsigned char out[1 << 15];
    g->z.next_out = out;
    g->z.avail_out = sizeof out;
    int r = deflate(&g->z, flush);
    size_t k = sizeof out - g->z.avail_out;
    if (r == Z_STREAM_ERROR || (k && fwrite(out, 1, k, g->to) != k))
        g->failed = 1;
    return r == Z_STREAM_END;
}

static ssize_t gz_write(void *cookie, const char *buf, size_t n)
{
    gz_sink *g = cookie;
    for (size_t done = 0; done < n && !g->failed;) {
        size_t part = n - done < UINT_MAX ? n - done : UINT_MAX;
        g->z.next_in = (Bytef *)(uintptr_t)(buf + done);
        g->z.avail_in = (uInt)part;
        while (g->z.avail_in && !g->failed)
            gz_step(g, Z_NO_FLUSH);
        done += part;
    }
    return g->failed ? -1 : (ssize_t)n;
}

static int gz_close(void *cookie)
{
    gz_sink *g = cookie;
    while (!g->failed && !gz_step(g, Z_FINISH))
        ;
    deflateEnd(&g->z);
    return g->failed ? -1 : 0;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

int lf_trace_json_write_cb(FILE *f, void *ctx)
{
    const lf_trace_json_job *w = ctx;
    if (!ends_with(w->path, ".gz"))
        return write_all(w->t, f, w->path) ? 0 : -1;
    gz_sink g = {.to = f};
    if (deflateInit2(&g.z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) /* 16: a gzip wrapper */
        return -1;
    FILE *zf = fopencookie(&g, "w", (cookie_io_functions_t){.write = gz_write, .close = gz_close});
    if (!zf) {
        deflateEnd(&g.z);
        return -1;
    }
    setvbuf(zf, NULL, _IOFBF, 1 << 16);
    int ok = write_all(w->t, zf, w->path);
    ok &= fclose(zf) == 0; /* finishes the gzip stream */
    return ok ? 0 : -1;
}

lf_status lf_trace_write_json(const lf_trace *t, const char *path)
{
    LF_CHECK_PTR(t, "lf_trace_write_json", "t");
    LF_CHECK_PTR(path, "lf_trace_write_json", "path");
    lf_trace_json_job w = {t, path};
    return lf_write_file_atomic(path, lf_trace_json_write_cb, &w);
}
