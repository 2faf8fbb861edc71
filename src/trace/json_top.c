/* The top level of a Kineto trace object (json_read.c reads its events): the header fields the
 * tools use (baseTimeNanoseconds exactly, the flags, linfuse's counts, deviceProperties,
 * distributedInfo), every other field passed over, and where traceEvents begins. Layer: trace/. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "trace/json_scan.h"

/* A top-level value passed over, its text kept in reach (pinned) while it is; *start: where it began. */
static lf_status top_value(reader *r, size_t *start)
{
    lf_scan_ws(r);
    *start = r->pos;
    const pin old = lf_scan_pin_from(r, *start, "a top-level value");
    lf_status st = lf_scan_skip_value(r, 1);
    lf_scan_unpin(r, old);
    return st;
}

static lf_status top_base(reader *r, int64_t *out)
{
    size_t start;
    LF_TRY(top_value(r, &start));
    const char *p = r->p + start;
    const size_t k = r->pos - start;
    size_t digits = 0;
    while (digits < k && p[digits] >= '0' && p[digits] <= '9')
        digits++;
    char num[24];
    if (digits == k && k && k < sizeof num) {
        memcpy(num, p, k);
        num[k] = '\0';
        errno = 0;
        const long long v = strtoll(num, NULL, 10);
        if (!errno) {
            *out = v;
            return LF_OK;
        }
    }
    return lf_scan_fail_at(r, start,
                           "baseTimeNanoseconds is not an integer number of nanoseconds from 0 to 2^63 - 1 (Kineto "
                           "writes one, as 1733616000000000000)");
}

/* A top-level integer field (flags, counts); other types are skipped. */
static lf_status top_int(reader *r, int64_t *out)
{
    size_t start;
    LF_TRY(top_value(r, &start));
    char num[64];
    size_t k = r->pos - start;
    if (k && k < sizeof num && lf_scan_json_number_len(r->p + start, k) == k) {
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
    size_t start;
    LF_TRY(top_value(r, &start));
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
            return lf_scan_fail_at(r, r->pos, "two \"traceEvents\" arrays");
        LF_TRY(lf_json_events_array(r));
        *seen = 1;
    } else if (KEY("baseTimeNanoseconds")) {
        LF_TRY(top_base(r, &m->base_ns));
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
        LF_TRY(lf_scan_skip_value(r, 1));
    }
#undef KEY
    return LF_OK;
}

/* A trace object: its fields, one of which must be traceEvents. */
lf_status lf_json_top_object(reader *r)
{
    if (!lf_scan_take(r, '{'))
        return lf_scan_fail_at(r, r->pos, "not valid JSON: a trace is an object or an array");
    int seen = 0;
    if (!lf_scan_take(r, '}'))
        do {
            const char *at;
            char k[32]; /* the key, copied: its text may be given back past here */
            size_t len;
            LF_TRY(lf_scan_raw_string(r, &at, &len));
            memcpy(k, at, len < sizeof k ? len : sizeof k);
            if (!lf_scan_take(r, ':'))
                return lf_scan_fail_at(r, r->pos, "not valid JSON: expected ':'");
            LF_TRY(top_field(r, k, len, &seen));
        } while (lf_scan_take(r, ','));
    if (!lf_scan_take(r, '}'))
        return lf_scan_fail_at(r, r->pos, "not valid JSON: expected ',' or '}'");
    if (!seen)
        return lf_fail(LF_EINVAL, "%s: no \"traceEvents\" array (not a Chrome/Kineto trace)", r->name);
    return LF_OK;
}
