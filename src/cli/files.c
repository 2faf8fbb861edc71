/* Where the tool writes: output directories made and proved writable before a run, outputs
 * checked against the inputs they could destroy, and text files written whole or not at all.
 * Layer: cli/. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "linfuse/io.h"

/* The process is the tool's, so the disposition is its to choose; the library's writers leave
 * signals alone (a program embedding linfuse decides for itself) and report EFBIG like ENOSPC. */
void lf_cli_ignore_sigxfsz(void)
{
    signal(SIGXFSZ, SIG_IGN);
}

/* Prove dir takes a file: make one and remove it. */
static int probe_dir(const char *dir, char *err, int cap)
{
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.linfuse-write-test-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0) {
        snprintf(err, (size_t)cap, "cannot write in %.*s: %s", cap / 2, dir, strerror(errno));
        return 0;
    }
    close(fd);
    unlink(probe);
    return 1;
}

/* mkdir -p, noting the first directory made, then prove the directory takes a file. */
int lf_cli_prepare_dir(const char *dir, char *made, int made_cap, char *err, int cap)
{
    char path[4096];
    lf_cli_ignore_sigxfsz(); /* a run that then writes past `ulimit -f` fails with EFBIG, cleaned up */
    made[0] = '\0';
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path || (int)strlen(dir) >= made_cap) {
        snprintf(err, (size_t)cap, "path too long");
        return 0;
    }
    for (char *p = path + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = '\0';
            if (mkdir(path, 0777) == 0) {
                if (!made[0])
                    snprintf(made, (size_t)made_cap, "%s", path);
            } else if (errno != EEXIST) {
                snprintf(err, (size_t)cap, "cannot create %.*s: %s", cap / 2, path, strerror(errno));
                lf_cli_unmake_dir(dir, made);
                return 0;
            }
            *p = c;
            if (!c)
                break;
        }
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, (size_t)cap, "%.*s is not a directory", cap / 2, dir);
        lf_cli_unmake_dir(dir, made);
        return 0;
    }
    if (!probe_dir(dir, err, cap)) {
        lf_cli_unmake_dir(dir, made);
        return 0;
    }
    return 1;
}

FILE *lf_cli_note_stream(const char *out)
{
    return out && !strcmp(out, "-") ? stderr : stdout;
}

int lf_cli_check_output(const char *path, char *err, int cap)
{
    lf_cli_ignore_sigxfsz();
    struct stat sb;
    if (!strcmp(path, "-"))
        return 1;
    if (!*path) {
        snprintf(err, (size_t)cap, "the output path is empty");
        return 0;
    }
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(err, (size_t)cap, "%.*s is a directory", cap / 2, path);
        return 0;
    }
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return 1; /* a device or a FIFO: written in place, its directory untouched */
    /* the directory the file will be renamed into: its link's target's, when it is a link */
    char target[PATH_MAX], dir[PATH_MAX];
    if (stat(path, &sb) != 0 || !realpath(path, target))
        snprintf(target, sizeof target, "%s", path);
    snprintf(dir, sizeof dir, "%s", target);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    if (stat(dir, &sb) != 0) {
        snprintf(err, (size_t)cap, "%.*s: no such directory %.*s", cap / 3, path, cap / 3, dir);
        return 0;
    }
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(err, (size_t)cap, "%.*s: %.*s is not a directory", cap / 3, path, cap / 3, dir);
        return 0;
    }
    return probe_dir(dir, err, cap);
}

int lf_cli_same_file(const char *a, const char *b)
{
    struct stat x, y; /* stat follows links: a link to a file, or a second hard link, is that file */
    return a && b && stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

void lf_cli_file_word(char *dst, size_t cap, const char *s)
{
    size_t n = 0;
    for (; s && *s && n + 1 < cap; s++) {
        const unsigned char c = (unsigned char)*s;
        const int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                         c == '-' || c == '_';
        dst[n++] = keep ? (char)c : '_';
    }
    if (cap)
        dst[n] = '\0';
}

void lf_cli_unmake_dir(const char *dir, const char *made)
{
    size_t stop = strlen(made);
    char path[4096];
    if (!stop || snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return;
    while (strlen(path) >= stop && rmdir(path) == 0) { /* rmdir leaves a directory with anything in it */
        char *slash = strrchr(path, '/');
        if (!slash || slash == path)
            break;
        *slash = '\0';
    }
}

int lf_cli_put_text(FILE *f, void *ctx)
{
    return fputs(ctx, f) < 0 ? -1 : 0;
}

int lf_cli_write_text(const char *path, const char *text)
{
    lf_cli_ignore_sigxfsz();
    return lf_write_file_atomic(path, lf_cli_put_text, (void *)text) == LF_OK;
}

char *lf_cli_read_stdin(const char *cmd, const char *what, int64_t max_bytes, size_t *size)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                break;
            buf = nb, cap *= 2;
        }
        const size_t left = (size_t)max_bytes + 1 - n; /* one past the limit: to know it is passed */
        ssize_t k = read(STDIN_FILENO, buf + n, cap - n < left ? cap - n : left);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            fprintf(stderr, "%s: standard input: %s\n", cmd, strerror(errno));
            free(buf);
            return NULL;
        }
        if (k == 0) {
            *size = n;
            return buf;
        }
        n += (size_t)k;
        if ((int64_t)n > max_bytes) {
            fprintf(stderr, "%s: standard input: more than the %lld bytes %s may have\n", cmd, (long long)max_bytes,
                    what);
            free(buf);
            return NULL;
        }
    }
    free(buf);
    fprintf(stderr, "%s: standard input: out of memory\n", cmd);
    return NULL;
}

/* Why a write to fd failed when errno is gone (the stream's error flag outlives it): the one
 * cause the file itself shows, a size at the process's limit (ulimit -f); else 0. */
static int write_failure(int fd)
{
    struct stat sb;
    struct rlimit rl;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && getrlimit(RLIMIT_FSIZE, &rl) == 0 &&
        rl.rlim_cur != RLIM_INFINITY && (rlim_t)sb.st_size >= rl.rlim_cur)
        return EFBIG;
    return 0;
}

int lf_cli_close_stdout(int rc)
{
    const int failed_before = ferror(stdout), fd = fileno(stdout);
    const int earlier = failed_before ? write_failure(fd) : 0;
    errno = 0;
    const int close_failed = fclose(stdout) != 0;
    const int why = close_failed && errno ? errno : earlier;
    if (!failed_before && !close_failed)
        return rc;
    if (why)
        fprintf(stderr, "linfuse: standard output: %s: what was printed is cut short or lost\n", strerror(why));
    else
        fprintf(stderr, "linfuse: standard output: a write failed (a full disk or device?): what was printed is cut "
                        "short or lost\n");
    return rc == LF_EXIT_OK ? LF_EXIT_FAIL : rc;
}
