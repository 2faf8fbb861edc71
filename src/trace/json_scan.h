/* The trace reader's state and its text scanner (json_scan.c), shared by the parse of events and
 * of the top level (json_read.c). Private to src/trace. Layer: trace/. */
#ifndef LF_TRACE_JSON_SCAN_H
#define LF_TRACE_JSON_SCAN_H

#include "trace/json_read.h"
#include "trace/trace_impl.h"

typedef struct flow_start {
    int64_t id, pid, tid, ts; /* ts: when the launch was made (ns), -1 when the flow has none */
} flow_start;

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
    lf_status (*each)(void *ctx, const lf_trace_event *e); /* events handed over, not kept (lf_trace_read_opts) */
    void *each_ctx;
    /* Times since the epoch (older Kineto wrote ts so, with no baseTimeNanoseconds): read from a
     * base a day before the first such ts, which the trace's base takes at the end */
    double shift_us;
    int shifted;
    char msg[300]; /* instead of what the parse says after it */
} reader;

enum { REPORT_EVERY = 4 << 20, RELEASE_EVERY = 32 << 20, MAX_VALUE = 64 << 20 };

/* The reader's own refusal, kept to be reported in place of the parse's error that follows. */
int lf_scan_reader_fail(reader *r, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* More text, up to want: the pages before the pin and the parse position given back first; 0 at
 * the text's end, or when what is pinned would pass MAX_VALUE bytes. */
int lf_scan_fill(reader *r, size_t want);
/* Hold the text from at on (until lf_scan_unpin(r, the pin returned)). */
pin lf_scan_pin_from(reader *r, size_t at, const char *what);
void lf_scan_unpin(reader *r, pin old);
/* Whether k bytes from the parse position are there (inflating more of a gzip trace if need be). */
static inline int lf_scan_have(reader *r, size_t k)
{
    return r->pos + k <= r->n || (r->src && lf_scan_fill(r, r->pos + k) && r->pos + k <= r->n);
}
/* Between events: the progress callback every 4 MB, and the pages parsed given back. */
void lf_scan_between_events(reader *r);
/* The progress callback once more at the end (done == total). */
void lf_scan_report_end(const reader *r);
/* An error at byte offset `at`, with the line and column a text editor shows. */
lf_status lf_scan_fail_at(const reader *r, size_t at, const char *what);
/* White space skipped as fast as memory goes; what it passes is given back as more comes in. */
void lf_scan_ws(reader *r);
/* Past white space, whether the next character is c: taken if it is. */
int lf_scan_take(reader *r, char c);
/* A string's raw bytes between its quotes (escapes left as they are); with s, held until the
 * caller has copied what it needs (before its next read), else let go as it is scanned. */
lf_status lf_scan_raw_string(reader *r, const char **s, size_t *len);
/* How many of the n bytes at s form a JSON number (RFC 8259's grammar), 0 when they do not
 * start one. */
size_t lf_scan_json_number_len(const char *s, size_t n);
/* Skip any JSON value, checking its grammar; depth bounded. */
lf_status lf_scan_skip_value(reader *r, int depth);

/* The traceEvents array, its events into the trace (json_read.c); a trace object around it, its
 * header fields read (json_top.c). */
lf_status lf_json_events_array(reader *r);
lf_status lf_json_top_object(reader *r);

#endif
