/* Reading a Kineto-schema trace (PyTorch's or linfuse's) into an lf_trace, with jansson.
 * Only what the table, diff and summary need is kept: category, name, track, times, External
 * id, correlation, shapes, FLOPs, memory. Bad files are errors that say where, never crashes.
 * This room parses; json_source.c brings the text in, json_open.c opens what is read. Layer: trace/. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <jansson.h>

#include "trace/json_read.h"
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

typedef struct flow_start {
    int64_t id, pid, tid;
} flow_start;

static int cmp_flow(const void *a, const void *b)
{
    int64_t x = ((const flow_start *)a)->id, y = ((const flow_start *)b)->id;
    return (x > y) - (x < y);
}

/* The reader streams: a small scanner walks the top level and the traceEvents array, and
 * jansson parses one event object at a time, fed from the text 1 KB at a time (json_load_callback;
 * JSON_DISABLE_EOF_CHECK tells it to stop at the object's end and say how far it read). A 200 MB
 * trace then never becomes one 2 GB tree: memory is the lf_trace, one event, and the last 32 MB
 * or less of the text. The pages read are given back as the text comes in (give_back, from fill),
 * inside an event or a run of white space too, except from the pin on: the start of what the
 * parse still points into (a key, a number, a top-level value kept as text), which may hold at
 * most MAX_VALUE bytes, as may one event, so a gzip bomb of white space or of one huge value
 * costs megabytes, not its inflated size. */
typedef struct pin {
    size_t at;        /* the first byte still needed, SIZE_MAX: none */
    const char *what; /* what is held there, for the error when it grows past MAX_VALUE */
} pin;

typedef struct reader {
    const char *p;
    size_t n, pos;
    const char *name;
    lf_trace *t;
    flow_start *flows;
    size_t n_flows, cap_flows;
    int64_t *shape_flops; /* events whose FLOPs came from their shapes: kept only under with_flops */
    size_t n_shape_flops, cap_shape_flops;
    int releasable;            /* p is a mapping of its own: what was read may be given back */
    size_t released;           /* bytes of p given back to the kernel so far (whole pages) */
    int64_t rel_line, rel_col; /* the line and column at p + released, for errors past it */
    size_t next_report;        /* the position at which the progress callback is next called */
    struct lazy_src *src;      /* text that arrives as the parse reads on (fill): a file's or a gzip trace's */
    pin pin;                   /* nothing before pin.at is given back */
    size_t ev_start, ev_index; /* the event jansson is being fed: where it starts, its index */
    int64_t max_events;        /* the read limit over an event's size in memory */
    lf_status err;             /* the reader's own refusal (a value too long, too many events), reported */
    int64_t n_with_cat;        /* events that name their category (Kineto's traces: all of them) */
    int keep_args;             /* the args no field holds kept as extra_args (lf_trace_read_opts) */
    char msg[300];             /* instead of what the parse says after it */
} reader;

enum { REPORT_EVERY = 4 << 20, RELEASE_EVERY = 32 << 20, MAX_VALUE = 64 << 20 };

/* The line and column a text editor shows at byte offset at (counted from the last page given
 * back: its bytes may be gone; an offset before it gets that page's). */
static void line_col(const reader *r, size_t at, int64_t *line, int64_t *col)
{
    *line = r->released ? r->rel_line : 1, *col = r->released ? r->rel_col : 1;
    const char *p = r->p + r->released, *end = r->p + (at < r->n ? at : r->n), *last = NULL, *nl;
    for (; p < end && (nl = memchr(p, '\n', (size_t)(end - p))); p = nl + 1)
        ++*line, last = nl;
    if (end > r->p + r->released)
        *col = last ? end - last : *col + (end - (r->p + r->released));
}

/* Give back to the kernel the whole pages before upto once RELEASE_EVERY bytes have gathered
 * (MADV_DONTNEED: a file's pages are dropped, an inflated trace's freed), their lines and columns
 * counted first so that an error further on still says where it is. Without this a trace costs
 * its JSON's size on top of what it holds. */
static void give_back(reader *r, size_t upto)
{
    if (!r->releasable || upto < r->released + RELEASE_EVERY)
        return;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    upto = upto / page * page;
    int64_t line, col;
    line_col(r, upto, &line, &col);
    if (madvise((void *)(uintptr_t)(r->p + r->released), upto - r->released, MADV_DONTNEED) == 0)
        r->released = upto, r->rel_line = line, r->rel_col = col;
}

/* The reader's own refusal, kept to be reported in place of the parse's error that follows. */
static int reader_fail(reader *r, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int reader_fail(reader *r, size_t at, const char *fmt, ...)
{
    if (r->err)
        return 0;
    int64_t line, col;
    line_col(r, at, &line, &col);
    int k = snprintf(r->msg, sizeof r->msg, "%s:%lld:%lld: ", r->name, (long long)line, (long long)col);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg + k, sizeof r->msg - (size_t)k, fmt, ap);
    va_end(ap);
    r->err = LF_EINVAL;
    return 0;
}

/* More text, up to want: the pages before the pin and the parse position given back first; 0 at
 * the text's end, or when what is pinned would pass MAX_VALUE bytes. */
static int fill(reader *r, size_t want)
{
    if (r->err)
        return 0;
    const size_t held = r->pos < r->pin.at ? r->pos : r->pin.at;
    if (want > held + MAX_VALUE)
        return reader_fail(r, held, "%s is longer than %d MB; not a trace", r->pin.what ? r->pin.what : "a value",
                           MAX_VALUE >> 20);
    give_back(r, held);
    /* no further than the pinned value may reach, so that one a byte too long comes here */
    return lf_json_src_fill(r->src, r->name, &r->n, want, r->pin.at == SIZE_MAX ? SIZE_MAX : held + MAX_VALUE + 1);
}

/* Hold the text from at on (until unpin(r, the pin returned)). */
static pin pin_from(reader *r, size_t at, const char *what)
{
    const pin old = r->pin;
    if (at < r->pin.at)
        r->pin = (pin){at, what};
    return old;
}

static void unpin(reader *r, pin old)
{
    r->pin = old;
}

/* Whether k bytes from the parse position are there (inflating more of a gzip trace if need be). */
static inline int have(reader *r, size_t k)
{
    return r->pos + k <= r->n || (r->src && fill(r, r->pos + k) && r->pos + k <= r->n);
}

static lf_trace_progress_fn progress_fn;
static void *progress_ctx;

void lf_trace_set_progress(lf_trace_progress_fn fn, void *ctx)
{
    progress_fn = fn, progress_ctx = ctx;
}

/* Between events: the progress callback every 4 MB, and the pages parsed given back. */
static void between_events(reader *r)
{
    if (progress_fn && r->pos >= r->next_report) {
        /* a gzip trace's inflated size is not known before its end: extrapolated from the share of
         * the compressed bytes read; a pipe's is not known either */
        double total = (double)r->n;
        if (r->src && r->src->fd >= 0 && !r->src->stream)
            total = (double)r->src->cap; /* a file: its size */
        else if (r->src && !r->src->done && r->src->in_at > 0)
            total = (double)r->n * (double)r->src->in_n / (double)r->src->in_at;
        progress_fn(progress_ctx, r->name, (int64_t)r->pos, (int64_t)(total > (double)r->pos ? total : (double)r->pos));
        r->next_report = r->pos + REPORT_EVERY;
    }
    if (r->pin.at == SIZE_MAX)
        give_back(r, r->pos);
}

/* An error at byte offset `at`, with the line and column a text editor shows. */
static lf_status fail_at(const reader *r, size_t at, const char *what)
{
    int64_t line, col;
    line_col(r, at, &line, &col);
    return lf_fail(LF_EINVAL, "%s:%lld:%lld: %s", r->name, (long long)line, (long long)col, what);
}

static inline int is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* White space skipped as fast as memory goes; what it passes is given back as more comes in. */
static void ws(reader *r)
{
    do
        while (r->pos < r->n && is_ws(r->p[r->pos]))
            r->pos++;
    while (r->pos == r->n && r->src && fill(r, r->pos + 1));
}

static int take(reader *r, char c)
{
    ws(r);
    if (have(r, 1) && r->p[r->pos] == c) {
        r->pos++;
        return 1;
    }
    return 0;
}

/* A string's raw bytes between its quotes (escapes left as they are); with s, held until the
 * caller has copied what it needs (before its next read), else let go as it is scanned. */
static lf_status raw_string(reader *r, const char **s, size_t *len)
{
    ws(r);
    if (!have(r, 1) || r->p[r->pos] != '"')
        return fail_at(r, r->pos, "not valid JSON: expected a string");
    size_t start = ++r->pos;
    const pin old = s ? pin_from(r, start, "a key") : r->pin;
    while (have(r, 1) && r->p[r->pos] != '"') {
        if ((unsigned char)r->p[r->pos] < 0x20)
            return fail_at(r, r->pos, "not valid JSON: control character in a string");
        r->pos += r->p[r->pos] == '\\' ? 2 : 1;
    }
    unpin(r, old);
    if (r->pos >= r->n)
        return fail_at(r, start - 1 >= r->released ? start - 1 : r->pos, "not valid JSON: unterminated string");
    if (s)
        *s = r->p + start;
    if (len)
        *len = r->pos - start;
    r->pos++;
    return LF_OK;
}

/* How many of the n bytes at s form a JSON number (RFC 8259's grammar: -?(0|[1-9][0-9]*)
 * (.[0-9]+)?([eE][+-]?[0-9]+)?), 0 when they do not start one. strtod would take hex, infinity
 * and nan as well. */
static size_t json_number_len(const char *s, size_t n)
{
    size_t i = 0;
#define DIGIT(j) ((j) < n && s[j] >= '0' && s[j] <= '9')
    if (i < n && s[i] == '-')
        i++;
    if (!DIGIT(i))
        return 0;
    if (s[i] == '0')
        i++;
    else
        while (DIGIT(i))
            i++;
    if (i < n && s[i] == '.') {
        if (!DIGIT(i + 1))
            return 0;
        i++;
        while (DIGIT(i))
            i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < n && (s[j] == '+' || s[j] == '-'))
            j++;
        if (!DIGIT(j))
            return 0;
        while (DIGIT(j))
            j++;
        i = j;
    }
#undef DIGIT
    return i;
}

/* Skip any JSON value, checking its grammar; depth bounded. */
static lf_status skip_value(reader *r, int depth)
{
    ws(r);
    if (!have(r, 1))
        return fail_at(r, r->pos, "not valid JSON: the file ends where a value should be");
    if (depth > 64)
        return fail_at(r, r->pos, "nested more than 64 levels deep; not a trace");
    char c = r->p[r->pos];
    if (c == '"')
        return raw_string(r, NULL, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        r->pos++;
        if (take(r, close))
            return LF_OK;
        do {
            if (c == '{') {
                LF_TRY(raw_string(r, NULL, NULL));
                if (!take(r, ':'))
                    return fail_at(r, r->pos, "not valid JSON: expected ':'");
            }
            LF_TRY(skip_value(r, depth + 1));
        } while (take(r, ','));
        if (!take(r, close))
            return fail_at(r, r->pos,
                           c == '{' ? "not valid JSON: expected ',' or '}'" : "not valid JSON: expected ',' or ']'");
        return LF_OK;
    }
    size_t start = r->pos; /* a number or a literal: held while it is scanned */
    const pin old = pin_from(r, start, "a number");
    while (have(r, 1) && (isalnum((unsigned char)r->p[r->pos]) || strchr("+-.", r->p[r->pos])))
        r->pos++;
    unpin(r, old);
    size_t k = r->pos - start;
    if (k == 0)
        return fail_at(r, start, "not valid JSON: unexpected character");
    if ((k == 4 && !memcmp(r->p + start, "true", 4)) || (k == 5 && !memcmp(r->p + start, "false", 5)) ||
        (k == 4 && !memcmp(r->p + start, "null", 4)))
        return LF_OK;
    if (json_number_len(r->p + start, k) != k) /* 0x10, Infinity, NaN, 1.e5, +1: not JSON */
        return fail_at(r, start, "not valid JSON: unexpected word");
    return LF_OK;
}

/* A flow start ("ph": "s"): which host track launched the work of its correlation id. */
static lf_status add_flow_start(reader *r, json_t *e)
{
    if (r->n_flows == r->cap_flows) {
        size_t cap = r->cap_flows ? 2 * r->cap_flows : 1024;
        flow_start *f = realloc(r->flows, cap * sizeof *f);
        if (!f)
            return lf_fail(LF_ENOMEM, "%s: out of memory for flows", r->name);
        r->flows = f;
        r->cap_flows = cap;
    }
    r->flows[r->n_flows++] = (flow_start){get_int(e, "id", 0), get_int(e, "pid", -1), get_int(e, "tid", -1)};
    return LF_OK;
}

/* Metadata ("ph": "M"): a thread's name, and a merged trace's process (rank) names. */
static lf_status add_metadata(reader *r, json_t *e, json_t *args)
{
    const char *what = json_string_value(json_object_get(e, "name"));
    const char *nm = args ? json_string_value(json_object_get(args, "name")) : NULL;
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
    if (fl || ev->cat != LF_TC_CPU_OP || (ev->flops = lf_trace_shape_flops(ev->name, args)) <= 0)
        return LF_OK;
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

/* What an event's args say: ids, device, FLOPs, bytes, a [memory] event's sizes, and the input
 * shapes, types and strides as text (*dims, *types, *strides: the caller frees them). */
static lf_status read_args(reader *r, json_t *args, int is_mem, lf_trace_event *ev, char **dims, char **types,
                           char **strides)
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
    if (!get_us(e, "ts", &ev.ts_ns) || (!is_mem && !get_us(e, "dur", &ev.dur_ns)))
        return lf_fail(LF_EINVAL, "%s: traceEvents[%zu] (\"%s\") has a missing or absurd \"ts\" or \"dur\"", path, i,
                       name);
    if (!is_mem && ev.dur_ns < 0)
        ev.dur_ns = 0; /* Kineto clamps negative durations the same way */
    if (ev.cat == LF_TC_GPU_ANNOTATION && ev.dur_ns >= 2) {
        /* Kineto's export pads a device-side annotation by 1 ns on each side of the kernels
         * it covers; PyTorch's own tables use the unpadded span */
        ev.ts_ns += 1;
        ev.dur_ns -= 2;
    }
    char *dims = NULL, *types = NULL, *strides = NULL, *rest = NULL;
    lf_status st = args ? read_args(r, args, is_mem, &ev, &dims, &types, &strides) : LF_OK;
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
        st = lf_trace_add(r->t, &ev);
    free(dims), free(types), free(strides), free(rest);
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
        reader_fail(r, r->pos, "traceEvents[%zu] is longer than %d MB; not a trace", r->ev_index, MAX_VALUE >> 20);
        return (size_t)-1;
    }
    r->pin = (pin){r->pos > 2 * cap ? r->pos - 2 * cap : 0, "an event"};
    if (!have(r, 1))
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

static lf_status events_array(reader *r)
{
    if (!take(r, '['))
        return fail_at(r, r->pos, "no \"traceEvents\" array (not a Chrome/Kineto trace)");
    if (take(r, ']'))
        return LF_OK;
    size_t i = 0;
    do {
        ws(r);
        if (!have(r, 1) || r->p[r->pos] != '{') {
            if (have(r, 1) && r->p[r->pos] != ']')
                return lf_fail(LF_EINVAL, "%s: traceEvents[%zu] is not an object", r->name, i);
            return fail_at(r, r->pos, "not valid JSON: the events end early");
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
            return fail_at(r, r->ev_start + (used ? used - 1 : 0), msg);
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
        between_events(r);
    } while (take(r, ','));
    if (!take(r, ']'))
        return fail_at(r, r->pos, "not valid JSON: expected ',' or ']' between events");
    return LF_OK;
}

/* A top-level integer field (baseTimeNanoseconds, flags); other types are skipped. */
static lf_status top_int(reader *r, int64_t *out)
{
    ws(r);
    size_t start = r->pos;
    const pin old = pin_from(r, start, "a top-level value");
    lf_status st = skip_value(r, 1);
    unpin(r, old);
    LF_TRY(st);
    char num[64];
    size_t k = r->pos - start;
    if (k && k < sizeof num && json_number_len(r->p + start, k) == k) {
        memcpy(num, r->p + start, k);
        num[k] = '\0';
        double v = strtod(num, NULL);
        if (isfinite(v) && fabs(v) < 9e18)
            *out = (int64_t)v;
    }
    return LF_OK;
}

/* A top-level object or array kept as JSON text in the trace (deviceProperties,
 * distributedInfo), checked by jansson; *out stays NULL when it is not valid. */
static lf_status top_raw(reader *r, const char **out, json_t **parsed)
{
    ws(r);
    size_t start = r->pos;
    const pin old = pin_from(r, start, "a top-level value");
    lf_status st = skip_value(r, 1);
    unpin(r, old);
    LF_TRY(st);
    json_error_t err;
    json_t *v = json_loadb(r->p + start, r->pos - start, JSON_DECODE_ANY, &err);
    if (!v || (!json_is_object(v) && !json_is_array(v))) {
        json_decref(v);
        return LF_OK;
    }
    char *text = json_dumps(v, JSON_ENCODE_ANY);
    if (text) {
        *out = lf_trace_intern(r->t, text);
        free(text);
    }
    if (parsed)
        *parsed = v;
    else
        json_decref(v);
    return LF_OK;
}

/* One top-level field of a trace object, its key k (len bytes) read: the events, the profiler's
 * flags and linfuse's, the device's properties and the run's ranks; any other skipped. *seen:
 * traceEvents was read (a second is refused). A table of cases, read best as one. */
static lf_status top_field(reader *r, const char *k, size_t len, int *seen)
{
    lf_trace_meta *m = lf_trace_meta_of(r->t);
    int64_t v = 0;
#define KEY(s) (len == sizeof(s) - 1 && !memcmp(k, s, len))
    if (KEY("traceEvents")) {
        if (*seen)
            return fail_at(r, r->pos, "two \"traceEvents\" arrays");
        LF_TRY(events_array(r));
        *seen = 1;
    } else if (KEY("baseTimeNanoseconds")) {
        LF_TRY(top_int(r, &m->base_ns));
    } else if (KEY("record_shapes")) {
        LF_TRY(top_int(r, &v));
        m->record_shapes = v != 0;
    } else if (KEY("profile_memory")) {
        LF_TRY(top_int(r, &v));
        m->profile_memory = v != 0;
    } else if (KEY("with_flops")) {
        LF_TRY(top_int(r, &v));
        m->with_flops = v != 0;
    } else if (KEY("linfuse_dropped_events")) {
        LF_TRY(top_int(r, &m->dropped_events));
    } else if (KEY("linfuse_merged_ranks")) {
        LF_TRY(top_int(r, &v));
        m->merged_ranks = v > 0 && v <= 4096 ? v : 0;
    } else if (KEY("deviceProperties")) {
        LF_TRY(top_raw(r, &m->device_properties, NULL));
    } else if (KEY("distributedInfo")) {
        json_t *di = NULL;
        LF_TRY(top_raw(r, &m->distributed_info, &di));
        json_t *rk = json_object_get(di, "rank"), *ws_ = json_object_get(di, "world_size");
        if (json_is_integer(rk) && json_integer_value(rk) >= 0)
            m->rank = json_integer_value(rk);
        if (json_is_integer(ws_) && json_integer_value(ws_) > 0)
            m->world_size = json_integer_value(ws_);
        json_decref(di);
    } else {
        LF_TRY(skip_value(r, 1));
    }
#undef KEY
    return LF_OK;
}

/* A trace object: its fields, one of which must be traceEvents. */
static lf_status top_object(reader *r)
{
    if (!take(r, '{'))
        return fail_at(r, r->pos, "not valid JSON: a trace is an object or an array");
    int seen = 0;
    if (!take(r, '}'))
        do {
            const char *at;
            char k[32]; /* the key, copied: its text may be given back past here */
            size_t len;
            LF_TRY(raw_string(r, &at, &len));
            memcpy(k, at, len < sizeof k ? len : sizeof k);
            if (!take(r, ':'))
                return fail_at(r, r->pos, "not valid JSON: expected ':'");
            LF_TRY(top_field(r, k, len, &seen));
        } while (take(r, ','));
    if (!take(r, '}'))
        return fail_at(r, r->pos, "not valid JSON: expected ',' or '}'");
    if (!seen)
        return lf_fail(LF_EINVAL, "%s: no \"traceEvents\" array (not a Chrome/Kineto trace)", r->name);
    return LF_OK;
}

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
        flow_start key = {ev->correlation, 0, 0};
        flow_start *f = bsearch(&key, r->flows, r->n_flows, sizeof *r->flows, cmp_flow);
        if (f)
            ev->flow_pid = f->pid, ev->flow_tid = f->tid;
    }
}

/* The device label: CUDA unless every kernel ran on linfuse's CPU device. */
static const char *device_label(const lf_trace *t)
{
    int cuda = 0, cpu_dev = 0;
    for (int64_t i = 0; i < t->n; i++)
        if (lf_trace_cat_is_device(t->ev[i].cat)) {
            if (!strncmp(t->ev[i].name, "lf_cpu_", 7))
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
    if (have(r, 3) && !memcmp(r->p + r->pos, "\xef\xbb\xbf", 3)) /* a UTF-8 byte order mark, as the opener takes it */
        r->pos += 3;
    ws(r);
    const int bare = have(r, 1) && r->p[r->pos] == '[';
    if (bare)
        LF_TRY(events_array(r));
    else
        LF_TRY(top_object(r));
    ws(r); /* to the source's end: a gzip trace's CRCs and members checked */
    if (have(r, 1))
        return fail_at(r, r->pos, "not valid JSON: text after the end of the trace");
    /* FLOPs from shapes count only where PyTorch would have counted them */
    if (!m->with_flops)
        for (size_t i = 0; i < r->n_shape_flops; i++)
            r->t->ev[r->shape_flops[i]].flops = 0;
    /* PyTorch's profiler without Kineto (torch.autograd.kineto_available() false, as Debian's
     * torch) exports a bare array of complete events with no category: its ops and
     * record_function ranges, which its own table lists alike. Read them as ops. */
    if (bare && r->n_with_cat == 0)
        for (int64_t i = 0; i < r->t->n; i++)
            if (r->t->ev[i].cat == LF_TC_OTHER && r->t->ev[i].dur_ns >= 0)
                r->t->ev[i].cat = LF_TC_CPU_OP;
    link_flows(r);
    m->device_label = device_label(r->t);
    return LF_OK;
}

lf_status lf_json_parse(lf_trace **out, const char *data, size_t size, const char *name, int releasable, lazy_src *src,
                        int keep_args)
{
    if (size == 0 && !src)
        return lf_fail(LF_EINVAL, "%s: is empty, expected a JSON trace", name);
    reader r = {.p = data,
                .n = size,
                .name = name,
                .releasable = releasable,
                .src = src,
                .pin = {SIZE_MAX, NULL},
                .keep_args = keep_args};
    r.max_events = lf_trace_read_limit() / (int64_t)sizeof(lf_trace_event);
    LF_TRY(lf_trace_create(&r.t));
    lf_trace_meta_of(r.t)->trace_name = lf_trace_intern(r.t, name);
    lf_status st = parse_doc(&r);
    if (src && src->err) /* the source's own fault, not the text's it cut short */
        st = lf_fail(src->err, "%s", src->msg);
    else if (r.err) /* the reader's refusal (a value too long), not the parse error that followed */
        st = lf_fail(r.err, "%s", r.msg);
    if (st == LF_OK && progress_fn)
        progress_fn(progress_ctx, name, (int64_t)r.n, (int64_t)r.n);
    free(r.flows), free(r.shape_flops);
    if (st != LF_OK) {
        lf_trace_free(r.t);
        return st;
    }
    *out = r.t;
    return LF_OK;
}
