/* Text helpers shared by the layers that print: a growing buffer and whole-or-nothing file
 * writes. Layer: base. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

/* Room for `more` bytes and a NUL after b->n (the capacity doubled from 4 KiB); 0, with b->oom
 * set, when memory runs out. The one place a buffer grows. */
static int sbuf_reserve(lf_sbuf *b, size_t more)
{
    if (b->oom)
        return 0;
    if (b->p && b->cap - b->n >= more + 1)
        return 1;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->n < more + 1)
        cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) {
        b->oom = 1;
        return 0;
    }
    b->p = q, b->cap = cap;
    return 1;
}

void lf_sbuf_put(lf_sbuf *b, const char *s, size_t n)
{
    if (n == 0 || !sbuf_reserve(b, n))
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

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
        if (!sbuf_reserve(b, (size_t)k))
            return;
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

/* The next character of s as a terminal is shown it: its bytes into out (not terminated), their
 * count in *out_n and its printed width in *width; returns the bytes of s it took (0 at the end). */
static size_t term_char(const char *s, char out[4], size_t *out_n, size_t *width)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char c = (unsigned char)s[0];
    const int k = lf_utf8_char(s);
    unsigned code = c; /* a control character's code point, or 0 when it is none */
    if (!c)
        return 0;
    if (k == 0) { /* not UTF-8: U+FFFD, one byte taken */
        memcpy(out, "\xef\xbf\xbd", 3);
        *out_n = 3, *width = 1;
        return 1;
    }
    if (k == 2 && c == 0xc2 && (unsigned char)s[1] < 0xa0)
        code = (unsigned char)s[1]; /* C1: U+0080-U+009F */
    else if (k > 1 || (c >= 0x20 && c != 0x7f))
        code = 0;
    if (!code) {
        memcpy(out, s, (size_t)k);
        *out_n = (size_t)k, *width = 1;
        return (size_t)k;
    }
    out[0] = '\\';
    if (code == '\t' || code == '\n' || code == '\r') {
        out[1] = code == '\t' ? 't' : code == '\n' ? 'n' : 'r';
        *out_n = *width = 2;
    } else {
        out[1] = 'x', out[2] = hex[code >> 4], out[3] = hex[code & 15];
        *out_n = *width = 4;
    }
    return (size_t)k;
}

size_t lf_term_width(const char *s, size_t n)
{
    size_t used = 0, w = 0, on, cw;
    char out[4];
    for (size_t k; s && used < n && (k = term_char(s + used, out, &on, &cw)) && k <= n - used; used += k)
        w += cw;
    return w;
}

/* s as printed (cut at keep as lf_sbuf_term_str says) into dst, at most cap - 1 bytes, not
 * terminated; returns the bytes written. */
static size_t term_write(char *dst, size_t cap, const char *s, size_t keep)
{
    const int cut = keep > 0 && lf_term_width(s, SIZE_MAX) > keep;
    const size_t room = cap - 1 - (cut ? 3 : 0);
    size_t o = 0, w = 0, on, cw;
    char out[4];
    for (size_t k; s && (k = term_char(s, out, &on, &cw)); s += k) {
        if ((cut && w + cw > keep) || o + on > room)
            break;
        memcpy(dst + o, out, on);
        o += on, w += cw;
    }
    if (cut) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    return o;
}

void lf_sbuf_term_str(lf_sbuf *b, const char *s, size_t keep)
{
    const size_t need = 4 * (s ? strlen(s) : 0) + 4; /* an escape is at most four bytes a byte */
    if (!sbuf_reserve(b, need))
        return;
    b->n += term_write(b->p + b->n, need + 1, s, keep);
    b->p[b->n] = '\0';
}

char *lf_term_cut(char *buf, size_t cap, const char *s, size_t keep)
{
    LF_PRECOND(buf, "lf_term_cut", "argument 'buf' is NULL");
    LF_PRECOND(cap >= 4, "lf_term_cut", "argument 'cap' is under 4 bytes");
    buf[term_write(buf, cap, s, keep)] = '\0';
    return buf;
}

static int by_str(const void *a, const void *b)
{
    return strcmp(**(const char *const *const *)a, **(const char *const *const *)b);
}

/* The printed width of the start a and b share, in whole characters. */
static size_t shared_width(const char *a, const char *b)
{
    size_t n = 0;
    while (a[n] && a[n] == b[n])
        n++;
    return lf_term_width(a, n);
}

int lf_term_keeps(const char *const *names, int64_t n, size_t keep, size_t *keeps)
{
    const char *const **order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!order)
        return 0;
    for (int64_t i = 0; i < n; i++)
        order[i] = &names[i], keeps[i] = keep;
    if (keep == 0) /* nothing is cut */
        n = 0;
    qsort(order, (size_t)n, sizeof *order, by_str);
    for (int64_t i = 0; i + 1 < n; i++) { /* sorted, a name shares its longest start with a neighbour */
        const size_t w = shared_width(*order[i], *order[i + 1]) + 16;
        size_t *ka = &keeps[order[i] - names], *kb = &keeps[order[i + 1] - names];
        *ka = w > *ka ? w : *ka;
        *kb = w > *kb ? w : *kb;
    }
    free(order);
    return 1;
}

void lf_sbuf_json_str(lf_sbuf *b, const char *s)
{
    lf_sbuf_json_strn(b, s, s ? strlen(s) : 0);
}

void lf_sbuf_json_strn(lf_sbuf *b, const char *s, size_t n)
{
    lf_sbuf_put(b, "\"", 1);
    size_t run = 0; /* s[run, i): bytes copied as they are, in one piece */
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        int k = c >= 0x80 ? lf_utf8_char(s + i) : 1;
        k = i + (size_t)k > n ? 0 : k; /* a character cut by n is not one */
        if (k > 1 || (c >= 0x20 && c < 0x80 && c != '"' && c != '\\')) {
            i += (size_t)k;
            continue;
        }
        lf_sbuf_put(b, s + run, i - run);
        if (c == '"' || c == '\\')
            lf_sbuf_printf(b, "\\%c", c);
        else if (k == 0)
            lf_sbuf_printf(b, "\\ufffd");
        else
            lf_sbuf_printf(b, "\\u%04x", c);
        run = ++i;
    }
    lf_sbuf_put(b, s + run, n - run);
    lf_sbuf_put(b, "\"", 1);
}

void lf_sbuf_csv_field(lf_sbuf *b, const char *s)
{
    if (!s || !s[strcspn(s, ",\"\r\n")]) {
        lf_sbuf_printf(b, "%s", s ? s : "");
        return;
    }
    lf_sbuf_printf(b, "\"");
    for (; *s; s++)
        lf_sbuf_printf(b, *s == '"' ? "\"\"" : "%c", *s);
    lf_sbuf_printf(b, "\"");
}

/* The mode a new file gets: 0666 less the umask, read from /proc where it can be (umask() itself
 * can only be read by setting it, which races with other threads creating files). */
static mode_t new_file_mode(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[128];
    unsigned um = 0;
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        found = sscanf(line, "Umask: %o", &um) == 1;
    if (f)
        fclose(f);
    if (!found) {
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&lock);
        mode_t m = umask(022);
        umask(m);
        pthread_mutex_unlock(&lock);
        um = m;
    }
    return (mode_t)(0666 & ~um);
}

/* Where job i writes: a temporary beside its target, or straight into a special file. */
typedef struct job_state {
    char *target; /* the path after symlinks (malloc'ed) */
    char *tmp;    /* the temporary (malloc'ed), NULL when written straight */
    int direct;   /* "-" or a special file: written in place, nothing renamed */
} job_state;

/* The file a path names once symbolic links are followed, for a path that may not exist yet
 * (a dangling link, or a chain of them, names the file it would create). */
static char *resolve(const char *path)
{
    char *r = realpath(path, NULL);
    if (r)
        return r;
    char *cur = strdup(path);
    for (int hops = 0; cur && hops < 40; hops++) { /* 40: the kernel's own limit (ELOOP) */
        struct stat lsb;
        char link[4096];
        ssize_t n;
        if (lstat(cur, &lsb) != 0 || !S_ISLNK(lsb.st_mode) || (n = readlink(cur, link, sizeof link - 1)) <= 0)
            return cur;
        link[n] = '\0';
        const char *slash = strrchr(cur, '/');
        char *next;
        if (link[0] == '/' || !slash) {
            next = strdup(link);
        } else { /* relative to the link's directory */
            size_t d = (size_t)(slash - cur) + 1;
            next = malloc(d + (size_t)n + 1);
            if (next) {
                memcpy(next, cur, d);
                memcpy(next + d, link, (size_t)n + 1);
            }
        }
        free(cur);
        cur = next;
    }
    return cur;
}

/* Write job into its temporary (or straight on), flushed; 0 with *err set on failure. */
static int write_one(const lf_file_job *job, job_state *js, mode_t new_mode, int *err)
{
    FILE *f = NULL;
    int fd = -1;
    if (js->direct) {
        f = !strcmp(js->target, "-") ? stdout : fopen(js->target, "w");
    } else {
        struct stat sb;
        mode_t mode = stat(js->target, &sb) == 0 ? sb.st_mode & 07777 : new_mode; /* replaced: its mode */
        size_t n = strlen(js->target);
        js->tmp = malloc(n + 16);
        if (!js->tmp) {
            *err = ENOMEM;
            return 0;
        }
        snprintf(js->tmp, n + 16, "%s.tmp.XXXXXX", js->target);
        fd = mkstemp(js->tmp);
        if (fd < 0 || fchmod(fd, mode) != 0 || !(f = fdopen(fd, "w"))) {
            *err = errno;
            if (fd >= 0) {
                close(fd);
                unlink(js->tmp);
            }
            free(js->tmp);
            js->tmp = NULL;
            return 0;
        }
    }
    if (!f) {
        *err = errno;
        return 0;
    }
    errno = 0;
    int ok = job->write(f, job->ctx) == 0 && !ferror(f) && fflush(f) == 0;
    if (ok && !js->direct)
        ok = fsync(fileno(f)) == 0;
    *err = errno;
    if (f != stdout)
        ok &= fclose(f) == 0;
    if (!ok && !*err)
        *err = errno ? errno : EIO;
    return ok;
}

lf_status lf_write_files_atomic(const lf_file_job *jobs, int n)
{
    LF_CHECK_PTR(jobs, "lf_write_files_atomic", "jobs");
    job_state js[LF_FILE_JOBS_MAX] = {{0}};
    if (n < 1 || n > LF_FILE_JOBS_MAX)
        return lf_fail(LF_EINVAL, "lf_write_files_atomic: %d files, expected 1 to %d", n, LF_FILE_JOBS_MAX);
    for (int k = 0; k < n; k++) {
        LF_CHECK_PTR(jobs[k].path, "lf_write_files_atomic", "path");
        LF_CHECK_PTR(jobs[k].write, "lf_write_files_atomic", "write");
    }
    const mode_t new_mode = new_file_mode();
    lf_status st = LF_OK;
    int i = 0;
    for (; i < n && st == LF_OK; i++) { /* where each goes */
        struct stat sb;
        js[i].target = strcmp(jobs[i].path, "-") ? resolve(jobs[i].path) : strdup("-");
        if (!js[i].target)
            st = lf_fail(LF_ENOMEM, "cannot write %s: out of memory", jobs[i].path);
        else if (!strcmp(js[i].target, "-"))
            js[i].direct = 1;
        else if (stat(js[i].target, &sb) == 0 && S_ISDIR(sb.st_mode))
            st = lf_fail(LF_EIO, "cannot write %s: it is a directory", jobs[i].path);
        else if (stat(js[i].target, &sb) == 0 && !S_ISREG(sb.st_mode))
            js[i].direct = 1; /* a device or a FIFO is written, never replaced */
        else if (stat(js[i].target, &sb) == 0 && access(js[i].target, W_OK) != 0)
            /* the rename would replace a file its owner made read-only (only the directory's
             * permission matters to rename): refused, as the shell's > and cp refuse */
            st = lf_fail(LF_EIO, "cannot write %s: %s", jobs[i].path, strerror(errno));
    }
    int err = 0;
    for (i = 0; i < n && st == LF_OK; i++) /* every temporary complete before anything is replaced */
        if (!js[i].direct && !write_one(&jobs[i], &js[i], new_mode, &err))
            st = lf_fail(LF_EIO, "cannot write %s: %s", jobs[i].path, strerror(err ? err : EIO));
    for (i = 0; i < n && st == LF_OK; i++)
        if (js[i].direct && !write_one(&jobs[i], &js[i], new_mode, &err))
            st = lf_fail(LF_EIO, "cannot write %s: %s", jobs[i].path, strerror(err ? err : EIO));
    for (i = 0; i < n && st == LF_OK; i++)
        if (js[i].tmp && rename(js[i].tmp, js[i].target) != 0) {
            st = lf_fail(LF_EIO, "cannot write %s: %s", jobs[i].path, strerror(errno));
        } else if (js[i].tmp) {
            free(js[i].tmp);
            js[i].tmp = NULL;
        }
    for (i = 0; i < n; i++) { /* temporaries not renamed are removed: the old files stay */
        if (js[i].tmp) {
            unlink(js[i].tmp);
            free(js[i].tmp);
        }
        free(js[i].target);
    }
    return st;
}

lf_status lf_write_file_atomic(const char *path, lf_file_write_fn write, void *ctx)
{
    LF_CHECK_PTR(path, "lf_write_file_atomic", "path");
    lf_file_job job = {path, write, ctx};
    return lf_write_files_atomic(&job, 1);
}

uint64_t lf_fnv1a(const void *p, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}
