/* The args of a trace event that no lf_trace_event field holds, kept as JSON text (extra_args)
 * for a trace written back (lf_trace_read_opts' keep_args, `trace merge`): each value written as
 * it was read, strings in UTF-8 as they came, numbers in their shortest exact form. Hand-written
 * over jansson's json_dumps because that one writes every real with 17 digits (0.1 as
 * 0.10000000000000001, five times the text) and, asked for ASCII, every other character as
 * \uXXXX (three times): a merged trace grew past what the reader takes. Layer: trace/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "trace/json_read.h"
#include "trace/trace_impl.h"

/* v as compact JSON (jansson bounds the nesting it parses, so the recursion is bounded too). */
static void put_value(lf_sbuf *t, json_t *v)
{
    char num[40];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *m;
        int first = 1;
        lf_sbuf_put(t, "{", 1);
        json_object_foreach(v, k, m)
        {
            if (!first)
                lf_sbuf_put(t, ",", 1);
            first = 0;
            lf_sbuf_json_str(t, k);
            lf_sbuf_put(t, ":", 1);
            put_value(t, m);
        }
        lf_sbuf_put(t, "}", 1);
        break;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *m;
        lf_sbuf_put(t, "[", 1);
        json_array_foreach(v, i, m)
        {
            if (i)
                lf_sbuf_put(t, ",", 1);
            put_value(t, m);
        }
        lf_sbuf_put(t, "]", 1);
        break;
    }
    case JSON_STRING:
        lf_sbuf_json_strn(t, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        lf_sbuf_put(t, num, strlen(num));
        break;
    case JSON_REAL:
        lf_json_real(num, sizeof num, json_real_value(v));
        lf_sbuf_put(t, num, strlen(num));
        break;
    case JSON_TRUE:
        lf_sbuf_put(t, "true", 4);
        break;
    case JSON_FALSE:
        lf_sbuf_put(t, "false", 5);
        break;
    default:
        lf_sbuf_put(t, "null", 4);
        break;
    }
}

char *lf_json_other_args(json_t *args, const lf_trace_event *ev, int *oom)
{
    lf_sbuf t = {0};
    /* a "stream" the writer would not make from the track as it is (one that is not the track's
     * tid, a CPU op's, a runtime call's), first: the writer makes none when the kept args lead
     * with one */
    json_t *stream = json_object_get(args, "stream");
    if (stream && lf_trace_writer_makes(ev, "stream") && json_is_integer(stream) &&
        json_integer_value(stream) == ev->tid)
        stream = NULL;
    if (stream) {
        lf_sbuf_put(&t, "\"stream\":", 9);
        put_value(&t, stream);
    }
    const char *k;
    json_t *v;
    json_object_foreach(args, k, v)
    {
        if (!strcmp(k, "stream") || lf_trace_writer_makes(ev, k))
            continue;
        if (t.n)
            lf_sbuf_put(&t, ",", 1);
        lf_sbuf_json_str(&t, k);
        lf_sbuf_put(&t, ":", 1);
        put_value(&t, v);
    }
    *oom = t.oom;
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    return t.p; /* NULL when there were none */
}
