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
        /* a reply with no body (HEAD, an error) has no body pointer to offset */
        const char *p = in_head ? c->head + c->head_at : c->body ? c->body + c->body_at : NULL;
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

/* The one trace being served, and the listening socket and its clients. */
typedef struct server {
    const char *cmd;
    const char *data; /* the trace's bytes, as read */
    size_t size;
    int gz;
    char name[256]; /* the one name it answers to */
    int s;          /* the listening socket */
    client *cl;     /* MAX_CLIENTS slots */
    int once;
} server;

/* The trace, read whole (file or "-": standard input) and checked to be JSON or gzip by its
 * first bytes: *data (the caller frees it), or NULL with the exit status in *rc. */
static char *load_trace(const char *cmd, const char *file, int64_t max_bytes, size_t *size, int *gz, int *rc)
{
    const int from_stdin = !strcmp(file, "-");
    *rc = LF_EXIT_USAGE;
    char *data = from_stdin ? lf_cli_read_stdin(cmd, "a trace (--max-bytes)", max_bytes, size)
                            : read_file_whole(cmd, file, max_bytes, size, rc);
    if (!data)
        return NULL;
    if (from_stdin && !*size) {
        fprintf(stderr, "%s: standard input: is empty, expected a trace\n", cmd);
        free(data);
        *rc = LF_EXIT_USAGE;
        return NULL;
    }
    const size_t n = *size;
    *gz = n >= 2 && (unsigned char)data[0] == 0x1f && (unsigned char)data[1] == 0x8b;
    size_t at = *gz ? 0 : (n >= 3 && !memcmp(data, "\xef\xbb\xbf", 3) ? 3 : 0);
    while (!*gz && at < n && strchr(" \t\r\n", data[at]) && data[at])
        at++;
    if (!*gz && (at == n || (data[at] != '{' && data[at] != '['))) {
        fprintf(stderr, "%s: %s: neither a JSON trace nor a gzip one\n", cmd, file);
        free(data);
        *rc = LF_EXIT_USAGE;
        return NULL;
    }
    return data;
}

/* Listen on 127.0.0.1:port (0: any free port; *bound: the one it got), every client slot free;
 * 0 with the reason said when it cannot. */
static int listen_local(server *sv, int port, int *bound)
{
    int one = 1;
    sv->s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* this machine only */
    socklen_t al = sizeof a;
    sv->cl = calloc(MAX_CLIENTS, sizeof *sv->cl);
    if (!sv->cl || sv->s < 0 || setsockopt(sv->s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(sv->s, (struct sockaddr *)&a, sizeof a) != 0 || listen(sv->s, 64) != 0 ||
        getsockname(sv->s, (struct sockaddr *)&a, &al) != 0) {
        fprintf(stderr, "%s: cannot listen on 127.0.0.1:%d: %s\n", sv->cmd, port,
                !sv->cl ? "out of memory" : strerror(errno));
        return 0;
    }
    for (int i = 0; i < MAX_CLIENTS; i++)
        sv->cl[i].fd = -1;
    *bound = ntohs(a.sin_port);
    return 1;
}

/* Each client poll() woke: its request taken, or its reply given on; 1 when --once's trace has
 * gone whole (the server is done). */
static int serve_ready(server *sv, const struct pollfd *pf, int64_t now)
{
    for (int i = 0; i < MAX_CLIENTS; i++) {
        client *c = &sv->cl[i];
        if (c->fd < 0 || pf[i + 1].fd != c->fd || !pf[i + 1].revents)
            continue;
        int all = 0;
        if (!c->sending && !take_request(c, sv->name, sv->data, sv->size, sv->gz, now)) {
            drop(c);
        } else if (c->sending && !give_reply(c, now, &all)) {
            const int sent = all && c->is_trace;
            if (sent) {
                printf("sent %s\n", sv->name);
                fflush(stdout);
            }
            drop(c);
            if (sent && sv->once)
                return 1;
        }
    }
    return 0;
}

/* Every connection waiting, each in a slot (the one waiting longest on its request gives way
 * when none is free); 0, or the exit status when accept fails for good. */
static int accept_waiting(server *sv, int64_t now)
{
    for (;;) {
        int c = accept4(sv->s, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EMFILE && errno != ENFILE) {
                fprintf(stderr, "%s: accept: %s\n", sv->cmd, strerror(errno));
                return LF_EXIT_FAIL;
            }
            return 0;
        }
        const int slot = pick_slot(sv->cl);
        if (sv->cl[slot].fd >= 0)
            drop(&sv->cl[slot]);
        sv->cl[slot] = (client){.fd = c, .since = now, .deadline = now + HEAD_MS};
    }
}

/* Serve until stopped (or with once, until the trace has been sent); the exit status. */
static int serve_loop(server *sv)
{
    for (;;) {
        struct pollfd pf[MAX_CLIENTS + 1];
        int64_t now = now_ms(), wake = now + 60000;
        pf[0] = (struct pollfd){sv->s, POLLIN, 0};
        for (int i = 0; i < MAX_CLIENTS; i++) {
            const client *c = &sv->cl[i];
            pf[i + 1] = (struct pollfd){c->fd, (short)(c->sending ? POLLOUT : POLLIN), 0};
            if (c->fd >= 0 && c->deadline < wake)
                wake = c->deadline;
        }
        int r = poll(pf, MAX_CLIENTS + 1, wake > now ? (int)(wake - now) : 0);
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "%s: poll: %s\n", sv->cmd, strerror(errno));
            return LF_EXIT_FAIL;
        }
        now = now_ms();
        const int done = r > 0 && serve_ready(sv, pf, now);
        for (int i = 0; i < MAX_CLIENTS; i++) /* a client past its deadline is dropped, not waited for */
            if (sv->cl[i].fd >= 0 && now >= sv->cl[i].deadline)
                drop(&sv->cl[i]);
        if (done)
            return LF_EXIT_OK;
        if (r > 0 && (pf[0].revents & POLLIN)) {
            const int rc = accept_waiting(sv, now);
            if (rc)
                return rc;
        }
    }
}

int lf_cli_trace_serve(const char *file, int port, int once, int64_t max_bytes)
{
    server sv = {.cmd = "linfuse trace serve", .s = -1, .once = once};
    const int from_stdin = !strcmp(file, "-");
    int rc = LF_EXIT_USAGE, bound = 0;
    char *data = load_trace(sv.cmd, file, max_bytes, &sv.size, &sv.gz, &rc);
    if (!data)
        return rc;
    sv.data = data;
    if (!listen_local(&sv, port, &bound)) {
        rc = LF_EXIT_FAIL;
    } else {
        char url[400];
        if (from_stdin) /* named for what it is, so Perfetto reads it right */
            snprintf(sv.name, sizeof sv.name, "%s", sv.gz ? "stdin.json.gz" : "stdin.json");
        else
            served_name(file, sv.name, sizeof sv.name);
        snprintf(url, sizeof url, "http://127.0.0.1:%d/%s", bound, sv.name);
        printf("serving %s (%zu bytes) at %s\nopen it in Perfetto: %s/#!/?url=%s\n%s",
               from_stdin ? "standard input" : file, sv.size, url, ORIGIN, url,
               once ? "(this exits once the trace has been sent)\n" : "(Ctrl-C stops it)\n");
        fflush(stdout);
        signal(SIGPIPE, SIG_IGN);
        rc = serve_loop(&sv);
        for (int i = 0; i < MAX_CLIENTS; i++)
            if (sv.cl[i].fd >= 0)
                drop(&sv.cl[i]);
    }
    free(sv.cl);
    if (sv.s >= 0)
        close(sv.s);
    free(data);
    return rc;
}
