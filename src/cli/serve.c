/* `linfuse trace serve FILE`: hand one trace to ui.perfetto.dev without uploading it. The
 * Perfetto UI opens a trace from a URL (https://ui.perfetto.dev/#!/?url=...) when the server
 * answers with CORS headers that let the UI's origin read it, as Perfetto's own open_trace_in_ui
 * script does; this is that server, bound to 127.0.0.1 only. It holds the one file it was given
 * (read at start), answers GET and HEAD for its one name and nothing else: no part of a request
 * reaches the file system. Clients are served side by side (one poll() loop, at most MAX_CLIENTS
 * at once): each must send its request within HEAD_MS of connecting and keep taking the reply,
 * so an idle or slow client holds only its own slot, never another's, and when every slot is
 * taken the one that has waited longest on its request makes room. Hand-written: a few lines of
 * HTTP/1.1 over a socket, where an HTTP library would be the biggest dependency of the tool.
 * Layer: cli/. */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

static const char ORIGIN[] = "https://ui.perfetto.dev";
/* a request's head: at most MAX_REQUEST bytes, all of it within HEAD_MS of the connection; a
 * reply: dropped when the client takes none of it for SEND_IDLE_MS */
enum { MAX_REQUEST = 8192, MAX_CLIENTS = 32, HEAD_MS = 3000, SEND_IDLE_MS = 10000 };

typedef struct client {
    int fd;           /* -1: a free slot */
    int64_t since;    /* when it connected (ms): who has waited longest */
    int64_t deadline; /* reading: the whole head by then; sending: the next byte by then */
    size_t got;       /* bytes of the request read */
    char req[MAX_REQUEST + 1];
    int sending; /* the reply is ready: head[head_at..head_n), then body[body_at..body_n) */
    char head[1024];
    size_t head_n, head_at;
    const char *body;
    size_t body_n, body_at;
    int is_trace; /* the reply is the trace's GET: said once it has all gone */
} client;

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A reply with a short text body (the body must outlive the send: a string literal). */
static void reply(client *c, int code, const char *why, const char *extra, const char *body)
{
    int n = snprintf(c->head, sizeof c->head,
                     "HTTP/1.1 %d %s\r\nAccess-Control-Allow-Origin: %s\r\nContent-Type: text/plain\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n%s\r\n",
                     code, why, ORIGIN, strlen(body), extra ? extra : "");
    c->head_n = n > 0 && (size_t)n < sizeof c->head ? (size_t)n : 0;
    c->body = body, c->body_n = strlen(body);
}

/* The reply to a whole request head (c->req, NUL-terminated): what is to be sent, in c. */
static void answer(client *c, const char *name, const char *data, size_t size, int gz)
{
    char method[16], path[MAX_REQUEST], version[16];
    c->sending = 1, c->head_at = c->body_at = 0, c->body = NULL, c->body_n = 0;
    if (sscanf(c->req, "%15s %8191s %15s", method, path, version) != 3 || strncmp(version, "HTTP/1.", 7))
        return reply(c, 400, "Bad Request", NULL, "not an HTTP/1 request\n");
    if (!strcmp(method, "OPTIONS")) /* a CORS preflight */
        return reply(c, 204, "No Content",
                     "Access-Control-Allow-Methods: GET, HEAD, OPTIONS\r\nAccess-Control-Allow-Headers: *\r\n", "");
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return reply(c, 405, "Method Not Allowed", "Allow: GET, HEAD, OPTIONS\r\n", "only GET\n");
    char *q = strchr(path, '?'); /* a query string changes nothing */
    if (q)
        *q = '\0';
    if (path[0] != '/' || strcmp(path + 1, name))
        return reply(c, 404, "Not Found", NULL, "this server has one trace; its link was printed at start\n");
    int h = snprintf(c->head, sizeof c->head,
                     "HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: %s\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
                     ORIGIN, gz ? "application/gzip" : "application/json", size);
    c->head_n = h > 0 && (size_t)h < sizeof c->head ? (size_t)h : 0;
    if (!strcmp(method, "GET"))
        c->body = data, c->body_n = size, c->is_trace = 1;
}

/* Read what the client has sent: 1 to keep it, 0 when it closed or failed. */
static int take_request(client *c, const char *name, const char *data, size_t size, int gz, int64_t now)
{
    for (;;) {
        ssize_t k = recv(c->fd, c->req + c->got, MAX_REQUEST - c->got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK;
        if (k == 0)
            return 0;
        c->got += (size_t)k;
        c->req[c->got] = '\0';
        if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n"))
            answer(c, name, data, size, gz);
        else if (c->got == MAX_REQUEST)
            c->sending = 1, reply(c, 431, "Request Header Fields Too Large", NULL, "request too large\n");
        else
            continue;
        c->deadline = now + SEND_IDLE_MS;
        return 1;
    }
}

/* Send what the client will take now: 1 while there is more, 0 when it is done or failed (*all:
 * the whole reply went). */
static int give_reply(client *c, int64_t now, int *all)
{
    *all = 0;
    for (;;) {
        const int in_head = c->head_at < c->head_n;
        const char *p = in_head ? c->head + c->head_at : c->body + c->body_at;
        size_t left = in_head ? c->head_n - c->head_at : c->body_n - c->body_at;
        if (!left) {
            *all = c->head_n > 0;
            return 0;
        }
        ssize_t k = send(c->fd, p, left < (1u << 30) ? left : 1u << 30, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK;
        if (k == 0)
            return 0;
        *(in_head ? &c->head_at : &c->body_at) += (size_t)k;
        c->deadline = now + SEND_IDLE_MS;
    }
}

static void drop(client *c)
{
    close(c->fd);
    c->fd = -1;
}

/* The slot for a new connection: a free one, else the client that has waited longest on its
 * request, else the reply that has gone longest without progress (dropped by the caller). */
static int pick_slot(const client *cl)
{
    int best = -1;
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (cl[i].fd < 0)
            return i;
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (!cl[i].sending && (best < 0 || cl[i].since < cl[best].since))
            best = i;
    if (best >= 0)
        return best;
    best = 0;
    for (int i = 1; i < MAX_CLIENTS; i++)
        if (cl[i].deadline < cl[best].deadline)
            best = i;
    return best;
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
 * max_bytes, counted as the bytes come; NULL with a message when it cannot be had. */
static char *read_stdin_whole(const char *cmd, int64_t max_bytes, size_t *size)
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
            fprintf(stderr, "%s: standard input: more than the %lld bytes a trace may have (--max-bytes)\n", cmd,
                    (long long)max_bytes);
            free(buf);
            return NULL;
        }
    }
    free(buf);
    fprintf(stderr, "%s: standard input: out of memory\n", cmd);
    return NULL;
}

/* The file whole, at most max_bytes; NULL with a message (and *rc) when it cannot be had. Opened
 * without blocking: a named pipe is refused, not waited on. */
static char *read_file_whole(const char *cmd, const char *file, int64_t max_bytes, size_t *size, int *rc)
{
    *rc = LF_EXIT_USAGE;
    const int fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat sb = {0};
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fprintf(stderr, "%s: %s: %s\n", cmd, file,
                fd < 0                 ? strerror(errno)
                : S_ISFIFO(sb.st_mode) ? "is a named pipe (FIFO), not a regular file (give '-' to serve a pipe)"
                : S_ISDIR(sb.st_mode)  ? "is a directory, expected a trace file"
                                       : "not a regular file");
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (sb.st_size > max_bytes) {
        fprintf(stderr, "%s: %s: %lld bytes is over the %lld a trace may have (--max-bytes)\n", cmd, file,
                (long long)sb.st_size, (long long)max_bytes);
        close(fd);
        return NULL;
    }
    char *data = malloc((size_t)sb.st_size + 1);
    size_t n = 0;
    while (data && n < (size_t)sb.st_size) {
        ssize_t k = pread(fd, data + n, (size_t)sb.st_size - n, (off_t)n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    if (!data || n != (size_t)sb.st_size) {
        fprintf(stderr, "%s: %s: could not read it whole\n", cmd, file);
        free(data);
        *rc = LF_EXIT_FAIL;
        return NULL;
    }
    *size = n;
    return data;
}

int lf_cli_trace_serve(const char *file, int port, int once, int64_t max_bytes)
{
    const char *cmd = "linfuse trace serve";
    const int from_stdin = !strcmp(file, "-");
    size_t size = 0;
    int rc = LF_EXIT_USAGE;
    char *data =
        from_stdin ? read_stdin_whole(cmd, max_bytes, &size) : read_file_whole(cmd, file, max_bytes, &size, &rc);
    if (!data)
        return rc;
    if (from_stdin && !size) {
        fprintf(stderr, "%s: standard input: is empty, expected a trace\n", cmd);
        free(data);
        return LF_EXIT_USAGE;
    }
    const int gz = size >= 2 && (unsigned char)data[0] == 0x1f && (unsigned char)data[1] == 0x8b;
    size_t at = gz ? 0 : (size >= 3 && !memcmp(data, "\xef\xbb\xbf", 3) ? 3 : 0);
    while (!gz && at < size && strchr(" \t\r\n", data[at]) && data[at])
        at++;
    if (!gz && (at == size || (data[at] != '{' && data[at] != '['))) {
        fprintf(stderr, "%s: %s: neither a JSON trace nor a gzip one\n", cmd, file);
        free(data);
        return LF_EXIT_USAGE;
    }
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* this machine only */
    socklen_t al = sizeof a;
    client *cl = calloc(MAX_CLIENTS, sizeof *cl);
    if (!cl || s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 64) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &al) != 0) {
        fprintf(stderr, "%s: cannot listen on 127.0.0.1:%d: %s\n", cmd, port, !cl ? "out of memory" : strerror(errno));
        if (s >= 0)
            close(s);
        free(cl);
        free(data);
        return LF_EXIT_FAIL;
    }
    for (int i = 0; i < MAX_CLIENTS; i++)
        cl[i].fd = -1;
    char name[256], url[400];
    if (from_stdin) /* named for what it is, so Perfetto reads it right */
        snprintf(name, sizeof name, "%s", gz ? "stdin.json.gz" : "stdin.json");
    else
        served_name(file, name, sizeof name);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/%s", ntohs(a.sin_port), name);
    printf("serving %s (%zu bytes) at %s\nopen it in Perfetto: %s/#!/?url=%s\n%s", from_stdin ? "standard input" : file,
           size, url, ORIGIN, url, once ? "(this exits once the trace has been sent)\n" : "(Ctrl-C stops it)\n");
    fflush(stdout);
    signal(SIGPIPE, SIG_IGN);
    rc = LF_EXIT_OK;
    for (int done = 0; !done;) {
        struct pollfd pf[MAX_CLIENTS + 1];
        int64_t now = now_ms(), wake = now + 60000;
        pf[0] = (struct pollfd){s, POLLIN, 0};
        for (int i = 0; i < MAX_CLIENTS; i++) {
            pf[i + 1] = (struct pollfd){cl[i].fd, (short)(cl[i].sending ? POLLOUT : POLLIN), 0};
            if (cl[i].fd >= 0 && cl[i].deadline < wake)
                wake = cl[i].deadline;
        }
        int r = poll(pf, MAX_CLIENTS + 1, wake > now ? (int)(wake - now) : 0);
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "%s: poll: %s\n", cmd, strerror(errno));
            rc = LF_EXIT_FAIL;
            break;
        }
        now = now_ms();
        for (int i = 0; r > 0 && i < MAX_CLIENTS && !done; i++) {
            client *c = &cl[i];
            if (c->fd < 0 || pf[i + 1].fd != c->fd || !pf[i + 1].revents)
                continue;
            int all = 0;
            if (!c->sending && !take_request(c, name, data, size, gz, now))
                drop(c);
            else if (c->sending && !give_reply(c, now, &all)) {
                if (all && c->is_trace) {
                    printf("sent %s\n", name);
                    fflush(stdout);
                    done = once;
                }
                drop(c);
            }
        }
        for (int i = 0; i < MAX_CLIENTS; i++) /* a client past its deadline is dropped, not waited for */
            if (cl[i].fd >= 0 && now >= cl[i].deadline)
                drop(&cl[i]);
        while (!done && r > 0 && (pf[0].revents & POLLIN)) { /* every connection waiting, each in a slot */
            int c = accept4(s, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (c < 0) {
                if (errno == EINTR || errno == ECONNABORTED)
                    continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EMFILE && errno != ENFILE) {
                    fprintf(stderr, "%s: accept: %s\n", cmd, strerror(errno));
                    rc = LF_EXIT_FAIL;
                    done = 1;
                }
                break;
            }
            const int slot = pick_slot(cl);
            if (cl[slot].fd >= 0)
                drop(&cl[slot]);
            cl[slot] = (client){.fd = c, .since = now, .deadline = now + HEAD_MS};
        }
    }
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (cl[i].fd >= 0)
            drop(&cl[i]);
    free(cl);
    close(s);
    free(data);
    return rc;
}
