/* `linfuse trace serve FILE`: hand one trace to ui.perfetto.dev without uploading it. The
 * Perfetto UI opens a trace from a URL (https://ui.perfetto.dev/#!/?url=...) when the server
 * answers with CORS headers that let the UI's origin read it, as Perfetto's own open_trace_in_ui
 * script does; this is that server, bound to 127.0.0.1 only. It holds the one file it was given
 * (read at start), answers GET and HEAD for its one name and nothing else: no part of a request
 * reaches the file system. Hand-written: a few lines of HTTP/1.1 over a socket, where an HTTP
 * library would be the biggest dependency of the tool. Layer: cli/. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "cli/cli.h"

static const char ORIGIN[] = "https://ui.perfetto.dev";
enum { MAX_REQUEST = 8192, READ_TIMEOUT_S = 10 };

/* The whole of buf to fd, or 0. */
static int send_all(int fd, const char *buf, size_t n)
{
    while (n) {
        ssize_t k = send(fd, buf, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return 0;
        buf += k, n -= (size_t)k;
    }
    return 1;
}

static int reply(int fd, int code, const char *why, const char *extra, const char *body)
{
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nAccess-Control-Allow-Origin: %s\r\nContent-Type: text/plain\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n%s\r\n",
                     code, why, ORIGIN, strlen(body), extra ? extra : "");
    return n > 0 && (size_t)n < sizeof head && send_all(fd, head, (size_t)n) && send_all(fd, body, strlen(body));
}

/* The request's head (up to the blank line), NUL-terminated; its length, 0 when the client
 * closed or stalled, -1 when it is longer than MAX_REQUEST. */
static ssize_t read_head(int fd, char *buf)
{
    size_t n = 0;
    while (n < MAX_REQUEST) {
        ssize_t k = recv(fd, buf + n, MAX_REQUEST - n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return 0;
        n += (size_t)k;
        buf[n] = '\0';
        if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
            return (ssize_t)n;
    }
    return -1;
}

/* One connection: 1 when it was a complete GET of the trace. */
static int serve_one(int fd, const char *name, const char *data, size_t size, int gz)
{
    char req[MAX_REQUEST + 1], method[16], path[MAX_REQUEST], version[16];
    ssize_t n = read_head(fd, req);
    if (n == 0)
        return 0;
    if (n < 0)
        return reply(fd, 431, "Request Header Fields Too Large", NULL, "request too large\n"), 0;
    if (sscanf(req, "%15s %8191s %15s", method, path, version) != 3 || strncmp(version, "HTTP/1.", 7))
        return reply(fd, 400, "Bad Request", NULL, "not an HTTP/1 request\n"), 0;
    if (!strcmp(method, "OPTIONS")) /* a CORS preflight */
        return reply(fd, 204, "No Content",
                     "Access-Control-Allow-Methods: GET, HEAD, OPTIONS\r\nAccess-Control-Allow-Headers: *\r\n", ""),
               0;
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return reply(fd, 405, "Method Not Allowed", "Allow: GET, HEAD, OPTIONS\r\n", "only GET\n"), 0;
    char *q = strchr(path, '?'); /* a query string changes nothing */
    if (q)
        *q = '\0';
    if (path[0] != '/' || strcmp(path + 1, name))
        return reply(fd, 404, "Not Found", NULL, "this server has one trace; its link was printed at start\n"), 0;
    char head[512];
    int h = snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: %s\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
                     ORIGIN, gz ? "application/gzip" : "application/json", size);
    if (h <= 0 || (size_t)h >= sizeof head || !send_all(fd, head, (size_t)h))
        return 0;
    if (!strcmp(method, "HEAD"))
        return 0;
    return send_all(fd, data, size);
}

/* The name the trace is served under: the file's own, with anything but [A-Za-z0-9._-] made '_'
 * so the link needs no escaping. */
static void served_name(const char *path, char *out, size_t cap)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t k = 0;
    for (; *base && k + 1 < cap; base++) {
        char c = *base;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("._-", c);
        out[k++] = ok ? c : '_';
    }
    out[k] = '\0';
    if (!k || !strcmp(out, ".") || !strcmp(out, ".."))
        snprintf(out, cap, "trace.json");
}

/* Standard input whole (a trace piped from another machine: ssh host cat t.json | ...), at most
 * max_bytes; NULL with a message when it cannot be had. */
static char *read_stdin_whole(const char *cmd, int64_t max_bytes, size_t *size)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            if ((int64_t)n > max_bytes) {
                fprintf(stderr, "%s: standard input: more than the %lld bytes a trace may have (--max-bytes)\n", cmd,
                        (long long)max_bytes);
                free(buf);
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                break;
            buf = nb, cap *= 2;
        }
        ssize_t k = read(STDIN_FILENO, buf + n, cap - n);
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
    }
    free(buf);
    fprintf(stderr, "%s: standard input: out of memory\n", cmd);
    return NULL;
}

/* The file whole, at most max_bytes; NULL with a message (and *rc) when it cannot be had. */
static char *read_file_whole(const char *cmd, const char *file, int64_t max_bytes, size_t *size, int *rc)
{
    *rc = LF_EXIT_USAGE;
    FILE *f = fopen(file, "rb");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fprintf(stderr, "%s: %s: %s\n", cmd, file, !f ? strerror(errno) : "not a regular file");
        if (f)
            fclose(f);
        return NULL;
    }
    if (sb.st_size > max_bytes) {
        fprintf(stderr, "%s: %s: %lld bytes is over the %lld a trace may have (--max-bytes)\n", cmd, file,
                (long long)sb.st_size, (long long)max_bytes);
        fclose(f);
        return NULL;
    }
    char *data = malloc((size_t)sb.st_size + 1);
    *size = data ? fread(data, 1, (size_t)sb.st_size, f) : 0;
    fclose(f);
    if (!data || *size != (size_t)sb.st_size) {
        fprintf(stderr, "%s: %s: could not read it whole\n", cmd, file);
        free(data);
        *rc = LF_EXIT_FAIL;
        return NULL;
    }
    return data;
}

int lf_cli_trace_serve(const char *file, int port, int once, int64_t max_bytes)
{
    const char *cmd = "linfuse trace serve";
    const int from_stdin = !strcmp(file, "-");
    size_t size = 0;
    int rc = LF_EXIT_USAGE;
    char *data = from_stdin ? read_stdin_whole(cmd, max_bytes, &size) : read_file_whole(cmd, file, max_bytes, &size, &rc);
    if (!data)
        return rc;
    if (from_stdin && !size) {
        fprintf(stderr, "%s: standard input: is empty, expected a trace\n", cmd);
        free(data);
        return LF_EXIT_USAGE;
    }
    const int gz = size >= 2 && (unsigned char)data[0] == 0x1f && (unsigned char)data[1] == 0x8b;
    size_t i = gz ? 0 : (size >= 3 && !memcmp(data, "\xef\xbb\xbf", 3) ? 3 : 0);
    while (!gz && i < size && strchr(" \t\r\n", data[i]) && data[i])
        i++;
    if (!gz && (i == size || (data[i] != '{' && data[i] != '['))) {
        fprintf(stderr, "%s: %s: neither a JSON trace nor a gzip one\n", cmd, file);
        free(data);
        return LF_EXIT_USAGE;
    }
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* this machine only */
    socklen_t al = sizeof a;
    if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 16) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &al) != 0) {
        fprintf(stderr, "%s: cannot listen on 127.0.0.1:%d: %s\n", cmd, port, strerror(errno));
        if (s >= 0)
            close(s);
        free(data);
        return LF_EXIT_FAIL;
    }
    char name[256], url[400];
    if (from_stdin) /* named for what it is, so Perfetto reads it right */
        snprintf(name, sizeof name, "%s", size >= 2 && (unsigned char)data[0] == 0x1f && (unsigned char)data[1] == 0x8b
                                              ? "stdin.json.gz"
                                              : "stdin.json");
    else
        served_name(file, name, sizeof name);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/%s", ntohs(a.sin_port), name);
    printf("serving %s (%zu bytes) at %s\nopen it in Perfetto: %s/#!/?url=%s\n%s", from_stdin ? "standard input" : file,
           size, url, ORIGIN, url,
           once ? "(this exits once the trace has been sent)\n" : "(Ctrl-C stops it)\n");
    fflush(stdout);
    signal(SIGPIPE, SIG_IGN);
    rc = LF_EXIT_OK;
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            fprintf(stderr, "%s: accept: %s\n", cmd, strerror(errno));
            rc = LF_EXIT_FAIL;
            break;
        }
        struct timeval tv = {READ_TIMEOUT_S, 0}; /* a client that stalls is dropped, not waited for */
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        int sent = serve_one(c, name, data, size, gz);
        close(c);
        if (sent) {
            printf("sent %s\n", name);
            fflush(stdout);
            if (once)
                break;
        }
    }
    close(s);
    free(data);
    return rc;
}
