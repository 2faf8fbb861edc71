/* Where a trace's text comes from (json_source.h): a file read as the parse goes, a gzip trace
 * inflated as the parse goes; the read limit. The entry points that open a file, standard input
 * or a caller's buffer are json_open.c's. Layer: trace/. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "linfuse/settings.h"
#include "trace/json_source.h"

int lf_json_is_gzip(const char *p, size_t n)
{
    return n >= 2 && (unsigned char)p[0] == 0x1f && (unsigned char)p[1] == 0x8b;
}

/* Whether the first byte past a byte order mark and white space can start a JSON trace. */
const char *lf_json_start(const char *p, size_t n, size_t *at)
{
    size_t i = n >= 3 && !memcmp(p, "\xef\xbb\xbf", 3) ? 3 : 0; /* a UTF-8 byte order mark */
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
        i++;
    *at = i;
    return i < n && p[i] != '{' && p[i] != '[' ? "does not start like a JSON trace" : NULL;
}

/* The gzip source's first error (the text's parse then fails too; this is what is reported). */
static int src_fail(lazy_src *g, lf_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int src_fail(lazy_src *g, lf_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->msg, sizeof g->msg, fmt, ap);
    va_end(ap);
    g->err = st;
    return 0;
}

/* Read from g's file until *n reaches target: up to its size as fstat gave it; a pipe until it
 * ends, each byte counted against the limit as it comes (the reservation is the limit + 1). */
static void fill_file(lazy_src *g, const char *name, size_t *n, size_t target)
{
    while (*n < target && !g->done && !g->err) {
        const size_t room = g->cap - *n, step = target - *n;
        if (room == 0 && g->stream) {
            src_fail(g, LF_EINVAL,
                     "%s: more than the %lld bytes (%.1f GB) a trace may have; raise the limit with --max-bytes or "
                     "LINFUSE_TRACE_MAX_BYTES",
                     name, (long long)(g->cap - 1), (double)(g->cap - 1) / 1e9);
            break;
        }
        if (room == 0) {
            g->done = 1;
            break;
        }
        ssize_t k = read(g->fd, g->buf + *n, room < step ? room : step < (1u << 30) ? step : 1u << 30);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            src_fail(g, LF_EIO, "%s: read failed after %zu bytes: %s", name, *n, strerror(errno));
        else if (k == 0 && g->stream)
            g->done = 1;
        else if (k == 0)
            src_fail(g, LF_EIO,
                     "%s: the file ended at byte %zu of the %zu it had when opened (was it being rewritten?)", name, *n,
                     g->cap);
        else
            *n += (size_t)k;
    }
}

/* Once, at 4 KB of inflated text or its end: refuse what does not start like JSON (a bomb of
 * zeros stops at once). */
static void check_inflated_start(lazy_src *g, const char *name, size_t n)
{
    if (g->checked || g->err || (n < 4096 && !g->done))
        return;
    size_t at;
    const char *bad = n ? lf_json_start(g->buf, n, &at) : "inflates to nothing";
    if (bad && n)
        src_fail(g, LF_EINVAL, "%s: inflated, %s (byte %zu is 0x%02x, expected '{' or '[')", name, bad, at,
                 (unsigned char)g->buf[at]);
    else if (bad)
        src_fail(g, LF_EINVAL, "%s: %s, expected a JSON trace", name, bad);
    g->checked = 1;
}

/* One inflate call's outcome: the data's end (or the next member of a multi-member file), or
 * what is wrong with it. */
static void inflate_result(lazy_src *g, const char *name, int zr)
{
    if (zr == Z_STREAM_END) {
        if (g->in_at == g->in_n)
            g->done = 1;
        else if (g->in_n - g->in_at < 2 || g->in[g->in_at] != 0x1f || g->in[g->in_at + 1] != 0x8b)
            src_fail(g, LF_EINVAL, "%s: %zu bytes after the end of the gzip data", name, g->in_n - g->in_at);
        else
            inflateReset(&g->z); /* another member: gzip concatenates them */
    } else if (zr == Z_BUF_ERROR && g->in_at == g->in_n) {
        src_fail(g, LF_EINVAL, "%s: the gzip data ends early (truncated after %zu bytes)", name, g->in_n);
    } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
        src_fail(g, LF_EINVAL, "%s: not valid gzip data: %s", name,
                 g->z.msg            ? g->z.msg
                 : zr == Z_MEM_ERROR ? "out of memory"
                                     : "corrupt");
    }
}

/* Inflate g's gzip data until *n reaches target: every member, the CRCs checked by zlib, the text
 * bounded by the reservation (the read limit, or deflate's 1032 to 1). */
static void fill_gzip(lazy_src *g, const char *name, size_t *n, size_t target)
{
    while (*n < target && !g->done && !g->err) {
        if (*n == g->cap && g->cap <= (size_t)g->limit) {
            src_fail(g, LF_EINVAL, "%s: not valid gzip data: it inflates past deflate's 1032 to 1", name);
            break;
        }
        if (*n == g->cap) {
            src_fail(g, LF_EINVAL,
                     "%s: inflates to more than the %lld bytes (%.1f GB) a trace may have; raise the limit with "
                     "--max-bytes or LINFUSE_TRACE_MAX_BYTES",
                     name, (long long)g->limit, (double)g->limit / 1e9);
            break;
        }
        /* zlib counts in uInt: feed and take at most 1 GiB a call */
        const size_t in_left = g->in_n - g->in_at, room = g->cap - *n, step = target - *n;
        g->z.next_in = (Bytef *)(uintptr_t)(g->in + g->in_at);
        g->z.avail_in = (uInt)(in_left < (1u << 30) ? in_left : 1u << 30);
        g->z.next_out = (Bytef *)(g->buf + *n);
        g->z.avail_out = (uInt)(room < step ? room : step < (1u << 30) ? step : 1u << 30);
        const uInt gave = g->z.avail_in, space = g->z.avail_out;
        const int zr = inflate(&g->z, Z_NO_FLUSH);
        g->in_at += gave - g->z.avail_in;
        *n += space - g->z.avail_out;
        inflate_result(g, name, zr);
        check_inflated_start(g, name, *n);
    }
}

/* Bring in text: from a file (read(2) up to its size as fstat gave it), or inflated from a gzip
 * trace (tensorboard_trace_handler(use_gzip=True) writes .pt.trace.json.gz), until want bytes of
 * text are there, 4 MB at least each time (up to most), or the data ends. 0 once the data has
 * ended or failed (the failure kept in g). */
int lf_json_src_fill(lazy_src *g, const char *name, size_t *n, size_t want, size_t most)
{
    if (g->done || g->err)
        return 0;
    size_t target = want > *n + (4u << 20) ? want : *n + (4u << 20);
    target = target > most && most >= want ? most : target;
    if (g->fd >= 0)
        fill_file(g, name, n, target);
    else
        fill_gzip(g, name, n, target);
    return !g->err;
}

static _Atomic int64_t read_limit; /* 0: the default, or $LINFUSE_TRACE_MAX_BYTES */

void lf_trace_set_read_limit(int64_t bytes)
{
    atomic_store(&read_limit, bytes > 0 ? bytes : 0);
}

int64_t lf_trace_read_limit(void)
{
    int64_t v = atomic_load(&read_limit);
    if (v > 0)
        return v;
    return lf_setting_int_or(LF_SET_TRACE_MAX_BYTES, LF_TRACE_DEFAULT_MAX_BYTES);
}
