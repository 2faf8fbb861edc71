/* Reading a trace: the public entry points (linfuse/trace.h). A file is checked (a regular file,
 * JSON or gzip by its first bytes, within the read limit) and read as the parse goes; standard
 * input is counted byte by byte as it comes; a caller's buffer is parsed in place. The text comes
 * in through json_source.c and is parsed by json_read.c. Layer: trace/. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trace/json_read.h"

/* Read a gzip trace: its text inflated into a reservation of the read limit's size as the
 * parse goes (fill). */
static lf_status read_gzip(lf_trace **out, const char *data, size_t size, const char *name,
                           const lf_trace_read_opts *o)
{
    lazy_src g = {.fd = -1, .in = (const unsigned char *)data, .in_n = size, .limit = lf_trace_read_limit()};
    /* deflate never gives more than 1032 bytes a byte: the text fits in that, or the limit + 1 */
    const size_t most = size > (SIZE_MAX - 65536) / 1032 ? SIZE_MAX : size * 1032 + 65536;
    g.cap = (uint64_t)g.limit + 1 < most ? (size_t)g.limit + 1 : most;
    /* reserved, not committed: pages take memory only as the text is written into them */
    g.buf = mmap(NULL, g.cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (g.buf == MAP_FAILED)
        return lf_fail(LF_ENOMEM, "%s: could not reserve %zu bytes for the inflated trace: %s", name, g.cap,
                       strerror(errno));
    if (inflateInit2(&g.z, 15 + 16) != Z_OK) { /* 16: the gzip wrapper, its CRC checked */
        munmap(g.buf, g.cap);
        return lf_fail(LF_ENOMEM, "%s: zlib could not start", name);
    }
    lf_status st = lf_json_parse(out, g.buf, 0, name, 1, &g, o);
    inflateEnd(&g.z);
    munmap(g.buf, g.cap);
    return st;
}

lf_status lf_trace_read_json_buffer(lf_trace **out, const char *data, size_t size, const char *name)
{
    LF_CHECK_PTR(out, "lf_trace_read_json_buffer", "out");
    *out = NULL;
    LF_CHECK_PTR(data, "lf_trace_read_json_buffer", "data");
    if (!name)
        name = "(buffer)";
    return lf_json_is_gzip(data, size) ? read_gzip(out, data, size, name, NULL)
                                       : lf_json_parse(out, data, size, name, 0, NULL, NULL);
}

/* Up to cap bytes from fd into buf, fewer only where it ends; -1 when a read fails. */
static ssize_t read_upto(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n < cap) {
        ssize_t k = read(fd, buf + n, cap - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        n += (size_t)k;
    }
    return (ssize_t)n;
}

static lf_status stdin_over(int64_t limit)
{
    return lf_fail(LF_EINVAL,
                   "standard input: more than the %lld bytes (%.1f GB) a trace may have; raise the limit with "
                   "--max-bytes or LINFUSE_TRACE_MAX_BYTES",
                   (long long)limit, (double)limit / 1e9);
}

/* Standard input (a pipe has no size to check first): its first bytes tell gzip from JSON; JSON
 * is read as the parse goes into a reservation of the limit + 1 bytes, its parsed pages given
 * back as a file's are; gzip is read whole (the compressed bytes), then inflated as parsed. Every
 * byte counts against the limit as it comes. */
static lf_status read_stdin(lf_trace **out, const lf_trace_read_opts *o)
{
    const int64_t limit = lf_trace_read_limit();
    char head[4096];
    const size_t want = (uint64_t)limit < sizeof head ? (size_t)limit + 1 : sizeof head;
    const ssize_t got = read_upto(STDIN_FILENO, head, want);
    if (got < 0)
        return lf_fail(LF_EIO, "standard input: %s", strerror(errno));
    if (got == 0)
        return lf_fail(LF_EINVAL, "standard input: is empty, expected a JSON trace");
    size_t nh = (size_t)got, at = 0;
    if ((int64_t)nh > limit)
        return stdin_over(limit);
    if (lf_json_is_gzip(head, nh)) { /* the compressed bytes whole, at most the limit */
        size_t cap = 1 << 20, n = nh;
        char *z = malloc(cap);
        lf_status st = LF_OK;
        if (z)
            memcpy(z, head, nh);
        for (int ended = nh < want; z && !ended && st == LF_OK;) {
            if (n == cap) {
                char *nz = realloc(z, cap * 2);
                if (!nz) {
                    free(z);
                    z = NULL;
                    break;
                }
                z = nz, cap *= 2;
            }
            const size_t left = (size_t)limit + 1 - n, ask = cap - n < left ? cap - n : left;
            const ssize_t k = read_upto(STDIN_FILENO, z + n, ask);
            if (k < 0) {
                st = lf_fail(LF_EIO, "standard input: read failed after %zu bytes: %s", n, strerror(errno));
                break;
            }
            n += (size_t)k;
            ended = (size_t)k < ask;
            if ((int64_t)n > limit)
                st = stdin_over(limit);
        }
        if (!z)
            return lf_fail(LF_ENOMEM, "standard input: out of memory for %zu bytes", cap * 2);
        if (st == LF_OK)
            st = read_gzip(out, z, n, "standard input", o);
        free(z);
        return st;
    }
    const char *bad = lf_json_start(head, nh, &at);
    if (bad)
        return lf_fail(LF_EINVAL, "standard input: %s (byte %zu is 0x%02x, expected '{' or '[')", bad, at,
                       (unsigned char)head[at]);
    /* reserved, not committed; past 1 TiB the limit is this machine's anyway */
    const size_t most = (size_t)1 << 40;
    lazy_src src = {.fd = STDIN_FILENO, .stream = 1, .cap = (uint64_t)limit + 1 < most ? (size_t)limit + 1 : most};
    src.buf = mmap(NULL, src.cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (src.buf == MAP_FAILED)
        return lf_fail(LF_ENOMEM, "standard input: could not reserve %zu bytes: %s", src.cap, strerror(errno));
    memcpy(src.buf, head, nh);
    src.done = nh < want; /* it ended within its first bytes */
    lf_status st = lf_json_parse(out, src.buf, nh, "standard input", 1, &src, o);
    munmap(src.buf, src.cap);
    return st;
}

/* What a path that is not a regular file is, for the message. */
static const char *not_regular(mode_t m)
{
    return S_ISDIR(m)    ? "is a directory, expected a trace file"
           : S_ISFIFO(m) ? "is a named pipe (FIFO), expected a trace file (give '-' to read a pipe from standard input)"
           : S_ISSOCK(m) ? "is a socket, expected a trace file"
           : S_ISCHR(m)  ? "is a character device, expected a trace file"
           : S_ISBLK(m)  ? "is a block device, expected a trace file"
                         : "is not a regular file";
}

lf_status lf_trace_read_json(lf_trace **out, const char *path)
{
    return lf_trace_read_json_opts(out, path, NULL);
}

lf_status lf_trace_read_json_opts(lf_trace **out, const char *path, const lf_trace_read_opts *opts)
{
    LF_CHECK_PTR(out, "lf_trace_read_json", "out");
    *out = NULL;
    LF_CHECK_PTR(path, "lf_trace_read_json", "path");
    if (!strcmp(path, "-"))
        return read_stdin(out, opts);
    /* O_NONBLOCK: a named pipe with no writer would block open() for ever; what is not a regular
     * file is refused before any read (regular files ignore the flag, cleared anyway) */
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return lf_fail(LF_EIO, "%s: %s", path, strerror(errno));
    struct stat sb = {0};
    const char *bad = fstat(fd, &sb) != 0                                         ? strerror(errno)
                      : !S_ISREG(sb.st_mode)                                      ? not_regular(sb.st_mode)
                      : sb.st_size == 0                                           ? "is empty, expected a JSON trace"
                      : fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 ? strerror(errno)
                                                                                  : NULL;
    if (bad) {
        lf_status s = lf_fail(sb.st_size == 0 && S_ISREG(sb.st_mode) ? LF_EINVAL : LF_EIO, "%s: %s", path, bad);
        close(fd);
        return s;
    }
    /* the start first: a file that is neither JSON nor gzip is refused before it is read (a 22 GB
     * file of zeros is refused at once), then its size against the limit */
    char head[4096];
    ssize_t got = pread(fd, head, sizeof head, 0);
    size_t nh = got > 0 ? (size_t)got : 0, i = 0;
    const char *not_json = lf_json_is_gzip(head, nh) ? NULL : nh ? lf_json_start(head, nh, &i) : "could not be read";
    if (not_json) {
        lf_status s = nh ? lf_fail(LF_EINVAL, "%s: %s (byte %zu is 0x%02x, expected '{' or '[')", path, not_json, i,
                                   (unsigned char)head[i])
                         : lf_fail(LF_EIO, "%s: %s", path, got < 0 ? strerror(errno) : "ended before its first byte");
        close(fd);
        return s;
    }
    const int64_t limit = lf_trace_read_limit();
    if ((int64_t)sb.st_size > limit) {
        close(fd);
        return lf_fail(LF_EINVAL,
                       "%s: %lld bytes (%.1f GB) is over the %lld bytes (%.1f GB) a trace may have; raise the limit "
                       "with --max-bytes or LINFUSE_TRACE_MAX_BYTES",
                       path, (long long)sb.st_size, (double)sb.st_size / 1e9, (long long)limit, (double)limit / 1e9);
    }
    const size_t size = (size_t)sb.st_size;
    lf_status st;
    if (lf_json_is_gzip(head, nh)) { /* compressed: read whole (a tenth of the text or less), inflated as parsed */
        char *z = malloc(size);
        size_t n = 0;
        while (z && n < size) {
            ssize_t k = pread(fd, z + n, size - n, (off_t)n);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                break;
            n += (size_t)k;
        }
        st = !z          ? lf_fail(LF_ENOMEM, "%s: out of memory for %zu bytes", path, size)
             : n != size ? lf_fail(LF_EIO, "%s: read %zu of %zu bytes", path, n, size)
                         : read_gzip(out, z, size, path, opts);
        free(z);
        close(fd);
        return st;
    }
    /* JSON: read as the parse goes into a reservation of the file's size, the pages parsed given
     * back (lazy_src), so a large trace costs little more than what it holds */
    lazy_src src = {.fd = fd, .cap = size};
    src.buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (src.buf == MAP_FAILED) {
        close(fd);
        return lf_fail(LF_ENOMEM, "%s: could not reserve %zu bytes: %s", path, size, strerror(errno));
    }
    st = lf_json_parse(out, src.buf, 0, path, 1, &src, opts);
    munmap(src.buf, size);
    close(fd);
    return st;
}
