/* How ranks find each other: rank 0 listens on MASTER_ADDR:MASTER_PORT (torchrun's variables;
 * on that address only, so a loopback MASTER_ADDR stays on this machine), every other rank
 * connects and says who it is, and once all have come rank 0 hands each the same bytes (NCCL's
 * unique id). Every wait has a deadline: a rank that never comes, a rank 0 that never listens, a
 * rank that counts a different world, are errors that say so, not hangs.
 *
 * Rank 0 serves every connection at once (one poll() loop), each with HELLO_MS to say its hello,
 * and takes only a hello that carries this run's id with a rank that is in the world and not yet
 * claimed: a client that says nothing, a stranger, a rank from another run or an impostor that
 * claims a rank already taken is dropped and logged on stderr, and the real ranks still meet. The
 * run's id is torchrun's TORCHELASTIC_RUN_ID (its --rdzv-id, a fresh uuid under --standalone;
 * set it by hand to launch without torchrun), else MASTER_ADDR:port, which every rank of one run
 * is given alike. It is a check of who belongs, not a secret against whoever can read the
 * launcher's environment.
 *
 * Hand-written because it is a few dozen lines of sockets with no library in the field's reach
 * that does only this (torch's TCPStore is C++ inside PyTorch; MPI is a launcher of its own).
 * Layer: distributed/. */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "distributed/max_ranks.h"

/* "LFR2": the hello carries the run's id (version 1, "LFRV", did not) */
enum { MAGIC = 0x4c465232, MSG_CAP = 200, MAX_ID = 1024, HELLO_MS = 3000, MAX_PENDING = 64, MAX_LISTEN = 8 };

typedef struct hello {
    uint32_t magic, rank, world, blob_bytes, id_bytes; /* then id_bytes of the run's id */
} hello;

typedef struct reply {
    uint32_t magic, status; /* 0: the blob follows; 1: msg says why the group (or this rank) was refused */
    char msg[MSG_CAP];
} reply;

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Wait until fd is ready for events or the deadline passes: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, left > 1000 ? 1000 : (int)left);
        if (r > 0)
            return 1;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

/* Exactly n bytes, or 0 (timed out, closed or failed) */
static int io_all(int fd, void *buf, size_t n, int writing, int64_t deadline)
{
    char *p = buf;
    while (n) {
        if (wait_fd(fd, writing ? POLLOUT : POLLIN, deadline) != 1)
            return 0;
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return 0;
        p += k, n -= (size_t)k;
    }
    return 1;
}

static double secs(int timeout_ms)
{
    return (double)timeout_ms / 1000.0;
}

/* The run's id (see the top of this file) into out; 0 when it is too long. */
static int run_id(const char *addr, int port, char *out, size_t cap)
{
    const char *v = getenv("TORCHELASTIC_RUN_ID");
    int n = v && *v ? snprintf(out, cap, "%s", v) : snprintf(out, cap, "%s:%d", addr, port);
    return n >= 0 && (size_t)n < cap;
}

/* A peer's address as text, for the log. */
static void peer_name(const struct sockaddr_storage *sa, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
    }
    snprintf(out, cap, "%s:%d", host, port);
}

/* A connection rank 0 has accepted and not yet placed: its hello as it arrives. */
typedef struct pending {
    int fd; /* -1: a free slot */
    int64_t deadline;
    size_t got; /* bytes of hello, then of the id */
    hello h;
    char id[MAX_ID];
    char from[INET6_ADDRSTRLEN + 8];
} pending;

/* Listen on every address MASTER_ADDR names (on this machine): the number of sockets in fds. */
static lf_status listen_on(const char *addr, int port, int *fds, int *n_fds)
{
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV},
                    *res = NULL;
    int gai = getaddrinfo(addr, portstr, &hints, &res);
    if (gai != 0)
        return lf_fail(LF_EIO, "rendezvous: rank 0 cannot resolve MASTER_ADDR %s: %s", addr, gai_strerror(gai));
    int err = 0;
    *n_fds = 0;
    for (struct addrinfo *ai = res; ai && *n_fds < MAX_LISTEN; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol), one = 1;
        if (fd < 0) {
            err = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (ai->ai_family == AF_INET6) /* this address only: "::" alone would take IPv4 too */
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, MAX_PENDING) != 0) {
            err = errno;
            close(fd);
            continue;
        }
        fds[(*n_fds)++] = fd;
    }
    freeaddrinfo(res);
    if (*n_fds == 0)
        return lf_fail(LF_EIO,
                       "rendezvous: rank 0 cannot listen on MASTER_ADDR %s port %d: %s (MASTER_PORT; "
                       "MASTER_ADDR must name rank 0's own machine)",
                       addr, port, err ? strerror(err) : "no address");
    return LF_OK;
}

/* Say to a refused connection why, without waiting on it, and close it; logged on stderr. */
static void refuse(pending *p, const char *why)
{
    fprintf(stderr, "linfuse: rendezvous: rank 0 dropped a connection from %s: %s\n", p->from, why);
    reply rp = {MAGIC, 1, {0}};
    snprintf(rp.msg, sizeof rp.msg, "%s", why);
    if (p->got >= sizeof p->h && p->h.magic == MAGIC)
        (void)!send(p->fd, &rp, sizeof rp, MSG_NOSIGNAL | MSG_DONTWAIT);
    close(p->fd);
    p->fd = -1;
}

/* Read what a pending connection has sent: 1 once its hello and id are whole, 0 while more is to
 * come, -1 when it closed, failed or is not a hello. */
static int read_hello(pending *p)
{
    for (;;) {
        const size_t want = p->got < sizeof p->h ? sizeof p->h : sizeof p->h + p->h.id_bytes;
        if (p->got == want && p->got >= sizeof p->h)
            return p->h.magic == MAGIC && p->h.id_bytes <= MAX_ID ? 1 : -1;
        if (p->got == sizeof p->h && (p->h.magic != MAGIC || p->h.id_bytes > MAX_ID))
            return -1;
        char *dst = p->got < sizeof p->h ? (char *)&p->h + p->got : p->id + (p->got - sizeof p->h);
        ssize_t k = recv(p->fd, dst, want - p->got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        if (k == 0)
            return -1;
        p->got += (size_t)k;
    }
}

/* Rank 0's side of a meeting: its sockets, the connections not yet placed, the ranks placed. */
typedef struct meeting {
    const char *addr;
    int port, world;
    size_t n; /* the blob's bytes, as each rank must expect */
    int timeout_ms;
    int64_t deadline;
    char id[MAX_ID]; /* the run's id */
    int lfd[MAX_LISTEN], n_lfd;
    pending *pend; /* MAX_PENDING slots */
    int peers[LF_DIST_MAX_RANKS], n_peers;
    int refused;
    char why[MSG_CAP];               /* why the group fails: told to every rank */
    char last_refusal[MSG_CAP + 64]; /* the last connection refused, and why */
} meeting;

/* Why the group fails, in words cut to fit the reply every rank gets. */
static void fail_group(meeting *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_group(meeting *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->why, sizeof m->why, fmt, ap);
    va_end(ap);
}

/* A whole hello from p: admitted as its rank, refused (a wrong run id, rank or duplicate: the
 * meeting goes on), or taken as the group's failure (a wrong world or build: m->why). */
static void place_hello(meeting *m, pending *p)
{
    char bad[MSG_CAP] = "";
    const hello h = p->h;
    if (h.id_bytes != strlen(m->id) || memcmp(p->id, m->id, h.id_bytes))
        snprintf(bad, sizeof bad, "its run id is not this run's (TORCHELASTIC_RUN_ID, else MASTER_ADDR:port)");
    else if (h.world != (uint32_t)m->world)
        fail_group(m, "rank %u counts a world of %u ranks, rank 0 counts %d (WORLD_SIZE)", h.rank, h.world, m->world);
    else if (h.blob_bytes != m->n)
        fail_group(m, "rank %u expects %u bytes, rank 0 hands %zu (different builds)", h.rank, h.blob_bytes, m->n);
    else if (h.rank == 0 || h.rank >= (uint32_t)m->world)
        snprintf(bad, sizeof bad, "it says it is rank %u, not one of ranks 1 to %d (RANK)", h.rank, m->world - 1);
    else if (m->peers[h.rank] >= 0)
        snprintf(bad, sizeof bad, "a second rank %u in a world of %d (RANK)", h.rank, m->world);
    if (bad[0]) {
        snprintf(m->last_refusal, sizeof m->last_refusal, "%s from %s", bad, p->from);
        m->refused++;
        refuse(p, bad);
    } else {
        m->peers[m->why[0] ? 0 : h.rank] = p->fd; /* a fatal hello: told why with the rest (slot 0 is rank 0's own) */
        p->fd = -1;
        m->n_peers += !m->why[0];
    }
}

/* The pending connections poll() woke: what each has sent of its hello read, and placed once
 * whole. */
static void take_hellos(meeting *m, const struct pollfd *pf)
{
    for (int i = 0; i < MAX_PENDING && !m->why[0]; i++) {
        pending *p = &m->pend[i];
        if (p->fd < 0 || pf[m->n_lfd + i].fd != p->fd || !pf[m->n_lfd + i].revents)
            continue;
        const int got = read_hello(p);
        if (got < 0)
            refuse(p, p->got >= sizeof p->h ? "not a linfuse rendezvous hello (another program, or another "
                                              "version of linfuse)"
                                            : "closed before its hello");
        else if (got > 0)
            place_hello(m, p);
    }
}

/* Connections that said no hello in time are refused. */
static void expire_pending(meeting *m, int64_t t)
{
    for (int i = 0; i < MAX_PENDING; i++)
        if (m->pend[i].fd >= 0 && t >= m->pend[i].deadline) {
            m->refused++;
            snprintf(m->last_refusal, sizeof m->last_refusal, "a connection from %s said no hello within %.1f s",
                     m->pend[i].from, secs(HELLO_MS));
            refuse(&m->pend[i], "no hello within the deadline");
        }
}

/* Every connection waiting on listener fd, each in a slot: the oldest pending makes room. */
static void accept_pending(meeting *m, int fd, int64_t t)
{
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int c = accept4(fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0)
            return;
        int slot = 0;
        for (int i = 0; i < MAX_PENDING; i++) {
            if (m->pend[i].fd < 0) {
                slot = i;
                break;
            }
            if (m->pend[i].deadline < m->pend[slot].deadline)
                slot = i;
        }
        if (m->pend[slot].fd >= 0)
            refuse(&m->pend[slot], "too many connections waiting; the oldest makes room");
        m->pend[slot] = (pending){.fd = c, .deadline = t + HELLO_MS < m->deadline ? t + HELLO_MS : m->deadline};
        peer_name(&sa, m->pend[slot].from, sizeof m->pend[slot].from);
    }
}

/* Wait until world - 1 ranks are placed, the deadline passes, or the group fails (m->why). */
static void gather_ranks(meeting *m)
{
    while (m->n_peers < m->world - 1 && !m->why[0]) {
        struct pollfd pf[MAX_LISTEN + MAX_PENDING];
        const int64_t now = now_ms();
        int64_t wake = m->deadline;
        for (int i = 0; i < m->n_lfd; i++)
            pf[i] = (struct pollfd){m->lfd[i], POLLIN, 0};
        for (int i = 0; i < MAX_PENDING; i++) {
            pf[m->n_lfd + i] = (struct pollfd){m->pend[i].fd, POLLIN, 0};
            if (m->pend[i].fd >= 0 && m->pend[i].deadline < wake)
                wake = m->pend[i].deadline;
        }
        if (now >= m->deadline) {
            fail_group(m, "rank 0 waited %.1f s on %s:%d for %d of the %d ranks; %d never came%s%s",
                       secs(m->timeout_ms), m->addr, m->port, m->world - 1, m->world, m->world - 1 - m->n_peers,
                       m->refused ? "; refused: " : "", m->last_refusal);
            return;
        }
        int r = poll(pf, (nfds_t)(m->n_lfd + MAX_PENDING), (int)(wake - now < 1000 ? wake - now : 1000));
        if (r < 0 && errno != EINTR) {
            fail_group(m, "rank 0: poll: %s", strerror(errno));
            return;
        }
        const int64_t t = now_ms();
        if (r > 0)
            take_hellos(m, pf);
        expire_pending(m, t);
        for (int l = 0; l < m->n_lfd && r > 0 && !m->why[0]; l++)
            if (pf[l].revents & POLLIN)
                accept_pending(m, m->lfd[l], t);
    }
}

/* Every rank placed hears the outcome, then (on success) gets the blob; their sockets close. */
static void answer_ranks(meeting *m, const void *blob)
{
    reply rp = {MAGIC, m->why[0] ? 1u : 0u, {0}};
    snprintf(rp.msg, sizeof rp.msg, "%s", m->why);
    const int64_t send_deadline = now_ms() + m->timeout_ms;
    for (int i = 0; i < m->world; i++) {
        if (m->peers[i] < 0)
            continue;
        if (io_all(m->peers[i], &rp, sizeof rp, 1, send_deadline) && !m->why[0])
            io_all(m->peers[i], (void *)blob, m->n, 1, send_deadline);
        close(m->peers[i]);
    }
}

/* rank 0: gather world - 1 ranks carrying this run's id, then hand each the blob (or the reason
 * the group failed) */
static lf_status serve(const char *addr, int port, int world, const void *blob, size_t n, int timeout_ms)
{
    meeting m = {.addr = addr, .port = port, .world = world, .n = n, .timeout_ms = timeout_ms};
    if (!run_id(addr, port, m.id, sizeof m.id))
        return lf_fail(LF_EINVAL, "rendezvous: the run's id (TORCHELASTIC_RUN_ID) is longer than %d bytes", MAX_ID - 1);
    LF_TRY(listen_on(addr, port, m.lfd, &m.n_lfd));
    m.pend = calloc(MAX_PENDING, sizeof *m.pend);
    if (!m.pend) {
        for (int i = 0; i < m.n_lfd; i++)
            close(m.lfd[i]);
        return lf_fail(LF_ENOMEM, "rendezvous: out of memory");
    }
    for (int i = 0; i < MAX_PENDING; i++)
        m.pend[i].fd = -1;
    for (int i = 0; i < world; i++)
        m.peers[i] = -1;
    m.deadline = now_ms() + timeout_ms;
    gather_ranks(&m);
    for (int i = 0; i < MAX_PENDING; i++)
        if (m.pend[i].fd >= 0)
            close(m.pend[i].fd);
    free(m.pend);
    for (int i = 0; i < m.n_lfd; i++)
        close(m.lfd[i]);
    answer_ranks(&m, blob);
    return m.why[0] ? lf_fail(LF_EIO, "rendezvous: %s", m.why) : LF_OK;
}

/* rank r > 0: reach rank 0 (retrying while it is not yet listening), say who we are, wait */
static lf_status join(const char *addr, int port, int rank, int world, void *blob, size_t n, int timeout_ms)
{
    char id[MAX_ID];
    if (!run_id(addr, port, id, sizeof id))
        return lf_fail(LF_EINVAL, "rendezvous: the run's id (TORCHELASTIC_RUN_ID) is longer than %d bytes", MAX_ID - 1);
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(addr, portstr, &hints, &res);
    if (gai != 0)
        return lf_fail(LF_EIO, "rendezvous: rank %d cannot resolve MASTER_ADDR %s: %s", rank, addr, gai_strerror(gai));
    const int64_t deadline = now_ms() + timeout_ms;
    int fd = -1, last_err = 0;
    while (fd < 0 && now_ms() < deadline) {
        for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
            int s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
            if (s < 0)
                continue;
            if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
                fd = s;
            } else {
                last_err = errno;
                close(s);
            }
        }
        if (fd < 0)
            usleep(100 * 1000); /* rank 0 may not be listening yet */
    }
    freeaddrinfo(res);
    if (fd < 0)
        return lf_fail(LF_EIO, "rendezvous: rank %d could not reach rank 0 at %s:%d within %.1f s (%s)", rank, addr,
                       port, secs(timeout_ms), last_err ? strerror(last_err) : "timed out");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    hello h = {MAGIC, (uint32_t)rank, (uint32_t)world, (uint32_t)n, (uint32_t)strlen(id)};
    reply rp;
    lf_status s = LF_OK;
    if (!io_all(fd, &h, sizeof h, 1, deadline) || !io_all(fd, id, h.id_bytes, 1, deadline))
        s = lf_fail(LF_EIO, "rendezvous: rank %d lost rank 0 at %s:%d while saying hello", rank, addr, port);
    else if (!io_all(fd, &rp, sizeof rp, 0, deadline) || rp.magic != MAGIC)
        s = lf_fail(LF_EIO, "rendezvous: rank %d waited %.1f s for rank 0 to gather the %d ranks at %s:%d; it did not",
                    rank, secs(timeout_ms), world, addr, port);
    else if (rp.status != 0)
        s = lf_fail(LF_EIO, "rendezvous: rank 0 refused rank %d: %.*s", rank, MSG_CAP, rp.msg);
    else if (!io_all(fd, blob, n, 0, deadline))
        s = lf_fail(LF_EIO, "rendezvous: rank %d lost rank 0 while receiving the group's id", rank);
    close(fd);
    return s;
}

lf_status lf_dist_rendezvous(const char *addr, int port, int rank, int world, void *blob, size_t n, int timeout_ms)
{
    LF_CHECK_PTR(addr, "lf_dist_rendezvous", "addr");
    LF_CHECK_PTR(blob, "lf_dist_rendezvous", "blob");
    if (world < 1 || world > LF_DIST_MAX_RANKS || rank < 0 || rank >= world)
        return lf_fail(LF_EINVAL, "lf_dist_rendezvous: rank %d of a world of %d (expected 0 <= rank < world <= %d)",
                       rank, world, LF_DIST_MAX_RANKS);
    if (port < 1 || port > 65535)
        return lf_fail(LF_EINVAL, "lf_dist_rendezvous: port %d is not a TCP port (MASTER_PORT)", port);
    if (timeout_ms < 1)
        return lf_fail(LF_EINVAL, "lf_dist_rendezvous: timeout %d ms", timeout_ms);
    if (world == 1)
        return LF_OK;
    return rank == 0 ? serve(addr, port, world, blob, n, timeout_ms)
                     : join(addr, port, rank, world, blob, n, timeout_ms);
}
