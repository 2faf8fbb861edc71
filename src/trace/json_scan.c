/* The trace reader's text scanner (json_scan.h): positions, line and column, pages given back
 * as the parse goes, the pin, white space, strings, numbers and values skipped, the progress
 * callback. json_read.c turns what it walks into a trace. Layer: trace/. */
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "trace/json_scan.h"

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
int lf_scan_reader_fail(reader *r, size_t at, const char *fmt, ...)
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
int lf_scan_fill(reader *r, size_t want)
{
    if (r->err)
        return 0;
    const size_t held = r->pos < r->pin.at ? r->pos : r->pin.at;
    if (want > held + MAX_VALUE)
        return lf_scan_reader_fail(r, held, "%s is longer than %d MB; not a trace",
                                   r->pin.what ? r->pin.what : "a value", MAX_VALUE >> 20);
    give_back(r, held);
    /* no further than the pinned value may reach, so that one a byte too long comes here */
    return lf_json_src_fill(r->src, r->name, &r->n, want, r->pin.at == SIZE_MAX ? SIZE_MAX : held + MAX_VALUE + 1);
}

/* Hold the text from at on (until lf_scan_unpin(r, the pin returned)). */
pin lf_scan_pin_from(reader *r, size_t at, const char *what)
{
    const pin old = r->pin;
    if (at < r->pin.at)
        r->pin = (pin){at, what};
    return old;
}

void lf_scan_unpin(reader *r, pin old)
{
    r->pin = old;
}

static lf_trace_progress_fn progress_fn;
static void *progress_ctx;

void lf_trace_set_progress(lf_trace_progress_fn fn, void *ctx)
{
    progress_fn = fn, progress_ctx = ctx;
}

/* Between events: the progress callback every 4 MB, and the pages parsed given back. */
void lf_scan_between_events(reader *r)
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
lf_status lf_scan_fail_at(const reader *r, size_t at, const char *what)
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
void lf_scan_ws(reader *r)
{
    do
        while (r->pos < r->n && is_ws(r->p[r->pos]))
            r->pos++;
    while (r->pos == r->n && r->src && lf_scan_fill(r, r->pos + 1));
}

int lf_scan_take(reader *r, char c)
{
    lf_scan_ws(r);
    if (lf_scan_have(r, 1) && r->p[r->pos] == c) {
        r->pos++;
        return 1;
    }
    return 0;
}

/* A string's raw bytes between its quotes (escapes left as they are); with s, held until the
 * caller has copied what it needs (before its next read), else let go as it is scanned. */
lf_status lf_scan_raw_string(reader *r, const char **s, size_t *len)
{
    lf_scan_ws(r);
    if (!lf_scan_have(r, 1) || r->p[r->pos] != '"')
        return lf_scan_fail_at(r, r->pos, "not valid JSON: expected a string");
    size_t start = ++r->pos;
    const pin old = s ? lf_scan_pin_from(r, start, "a key") : r->pin;
    while (lf_scan_have(r, 1) && r->p[r->pos] != '"') {
        if ((unsigned char)r->p[r->pos] < 0x20)
            return lf_scan_fail_at(r, r->pos, "not valid JSON: control character in a string");
        r->pos += r->p[r->pos] == '\\' ? 2 : 1;
    }
    lf_scan_unpin(r, old);
    if (r->pos >= r->n)
        return lf_scan_fail_at(r, start - 1 >= r->released ? start - 1 : r->pos, "not valid JSON: unterminated string");
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
size_t lf_scan_json_number_len(const char *s, size_t n)
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
lf_status lf_scan_skip_value(reader *r, int depth)
{
    lf_scan_ws(r);
    if (!lf_scan_have(r, 1))
        return lf_scan_fail_at(r, r->pos, "not valid JSON: the file ends where a value should be");
    if (depth > 64)
        return lf_scan_fail_at(r, r->pos, "nested more than 64 levels deep; not a trace");
    char c = r->p[r->pos];
    if (c == '"')
        return lf_scan_raw_string(r, NULL, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        r->pos++;
        if (lf_scan_take(r, close))
            return LF_OK;
        do {
            if (c == '{') {
                LF_TRY(lf_scan_raw_string(r, NULL, NULL));
                if (!lf_scan_take(r, ':'))
                    return lf_scan_fail_at(r, r->pos, "not valid JSON: expected ':'");
            }
            LF_TRY(lf_scan_skip_value(r, depth + 1));
        } while (lf_scan_take(r, ','));
        if (!lf_scan_take(r, close))
            return lf_scan_fail_at(
                r, r->pos, c == '{' ? "not valid JSON: expected ',' or '}'" : "not valid JSON: expected ',' or ']'");
        return LF_OK;
    }
    size_t start = r->pos; /* a number or a literal: held while it is scanned */
    const pin old = lf_scan_pin_from(r, start, "a number");
    while (lf_scan_have(r, 1) && (isalnum((unsigned char)r->p[r->pos]) || strchr("+-.", r->p[r->pos])))
        r->pos++;
    lf_scan_unpin(r, old);
    size_t k = r->pos - start;
    if (k == 0)
        return lf_scan_fail_at(r, start, "not valid JSON: unexpected character");
    if ((k == 4 && !memcmp(r->p + start, "true", 4)) || (k == 5 && !memcmp(r->p + start, "false", 5)) ||
        (k == 4 && !memcmp(r->p + start, "null", 4)))
        return LF_OK;
    if (lf_scan_json_number_len(r->p + start, k) != k) /* 0x10, Infinity, NaN, 1.e5, +1: not JSON */
        return lf_scan_fail_at(r, start, "not valid JSON: unexpected word");
    return LF_OK;
}

void lf_scan_report_end(const reader *r)
{
    if (progress_fn)
        progress_fn(progress_ctx, r->name, (int64_t)r->n, (int64_t)r->n);
}
