/* Text helpers shared by the layers that print: a growing buffer and whole-or-nothing file
 * writes. Layer: base. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"

void lf_sbuf_printf(lf_sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? 2 * b->cap : 4096;
        while (cap < b->n + (size_t)k + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

int lf_utf8_char(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    unsigned c = s[0];
    if (c < 0x80)
        return c ? 1 : 0;
    int n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!n)
        return 0; /* a continuation byte, an overlong lead (c0, c1) or past U+10FFFF (f5..ff) */
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0; /* ends early (a NUL stops here too) */
    /* the second byte's range rules out overlong forms, surrogates and code points past U+10FFFF */
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
        (c == 0xf4 && s[1] > 0x8f))
        return 0;
    return n;
}

size_t lf_utf8_prefix(const char *s, size_t max_chars, size_t *chars)
{
    size_t bytes = 0, n = 0;
    while (s[bytes] && n < max_chars) {
        int k = lf_utf8_char(s + bytes);
        bytes += k ? (size_t)k : 1; /* an invalid byte counts as one character, as its U+FFFD would */
        n++;
    }
    if (chars)
        *chars = n;
    return bytes;
}

lf_status lf_write_file_atomic(const char *path, int (*write)(FILE *f, void *ctx), void *ctx)
{
    LF_CHECK_PTR(path, "lf_write_file_atomic", "path");
    size_t n = strlen(path);
    char *tmp = malloc(n + 16);
    if (!tmp)
        return lf_fail(LF_ENOMEM, "cannot write %s: out of memory", path);
    snprintf(tmp, n + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        lf_status s = lf_fail(LF_EIO, "cannot write %s: %s", path, strerror(errno));
        free(tmp);
        return s;
    }
    FILE *f = fdopen(fd, "w");
    int ok = f && write(f, ctx) == 0 && !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    if (f)
        ok &= fclose(f) == 0;
    else
        close(fd);
    if (ok && rename(tmp, path) == 0) {
        free(tmp);
        return LF_OK;
    }
    err = errno ? errno : err;
    unlink(tmp);
    free(tmp);
    return lf_fail(LF_EIO, "cannot write %s: %s", path, err ? strerror(err) : "write failed");
}
