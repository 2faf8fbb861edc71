/* Where a trace's text comes from, for the parser (json_read.c): a file read, or a gzip trace
 * inflated, as the parse asks for more (json_source.c). Private to src/trace. Layer: trace/. */
#ifndef LF_TRACE_JSON_SOURCE_H
#define LF_TRACE_JSON_SOURCE_H

#include <zlib.h>

#include "trace/trace_impl.h"

/* Text that arrives as the parse asks for it: a trace file or standard input read with read(2),
 * or a gzip trace inflated, into one anonymous mapping reserved up front at the most it can hold
 * (the file's size; for a pipe the read limit; for gzip the read limit, or deflate's 1032 to 1 of
 * the file if less), so that it never moves (the parse holds pointers into it) and only what has
 * arrived takes memory; the pages parsed are given back as more comes in (json_read.c's
 * give_back). Peak memory is then the trace, not its text. A file is read rather than mapped: a
 * mapped file that another program truncates while it is parsed kills the reader with SIGBUS;
 * read, it is an error that says so. */
typedef struct lazy_src {
    int fd;     /* the file being read, or -1: gzip data in memory */
    int stream; /* fd is a pipe (standard input): read until it ends, refused past cap - 1 bytes */
    z_stream z;
    const unsigned char *in;
    size_t in_n, in_at;
    char *buf;
    size_t cap; /* the reservation: a file's size; the read limit + 1 bytes (gzip: or 1032 x the file's) */
    int64_t limit;
    int done, checked;
    lf_status err; /* the source's first error, reported instead of what the parse says */
    char msg[400];
} lazy_src;

/* Bring in text from src until *n (the bytes there so far) reaches want, 4 MB at least at a time
 * but never past most, or the source ends; 0 once it has ended or failed (the failure kept in
 * src->err and msg). */
int lf_json_src_fill(lazy_src *src, const char *name, size_t *n, size_t want, size_t most);

/* A gzip file's magic, and whether the first byte past a byte order mark and white space can
 * start a JSON trace (NULL) or what is wrong (*at: that byte). */
int lf_json_is_gzip(const char *p, size_t n);
const char *lf_json_start(const char *p, size_t n, size_t *at);

#endif
