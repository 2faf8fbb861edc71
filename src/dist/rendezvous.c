/* How ranks find each other: rank 0 listens on MASTER_ADDR:MASTER_PORT (torchrun's variables),
 * every other rank connects and says who it is, and once all have come rank 0 hands each the
 * same bytes (NCCL's unique id). Every wait has a deadline: a rank that never comes, a rank 0
 * that never listens, a rank that counts a different world, are errors that say so, not hangs.
 * Hand-written because it is two dozen lines of sockets with no library in the field's reach
 * that does only this (torch's TCPStore is C++ inside PyTorch; MPI is a launcher of its own).
 * Layer: dist/. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist_impl.h"

enum { MAGIC = 0x4c465256 /* "LFRV" */, MSG_CAP = 200 };

typedef struct hello {
    uint32_t magic, rank, world, blob_bytes;
} hello;

typedef struct reply {
    uint32_t magic, status; /* 0: the blob follows; 1: msg says why the group failed */
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

/* rank 0: accept world - 1 ranks, then hand each the blob (or the reason the group failed) */
static lf_status serve(int port, int world, const void *blob, size_t n, int timeout_ms)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0), v6 = 1;
    if (fd < 0) { /* no IPv6 here: IPv4 only */
        fd = socket(AF_INET, SOCK_STREAM, 0);
        v6 = 0;
    }
    if (fd < 0)
        return lf_fail(LF_EIO, "rendezvous: rank 0: socket: %s", strerror(errno));
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (v6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero); /* IPv4 peers too */
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = in6addr_any};
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = INADDR_ANY};
    if ((v6 ? bind(fd, (struct sockaddr *)&a6, sizeof a6) : bind(fd, (struct sockaddr *)&a4, sizeof a4)) != 0 ||
        listen(fd, world) != 0) {
        lf_status s = lf_fail(LF_EIO, "rendezvous: rank 0 cannot listen on port %d: %s (MASTER_PORT)", port,
                              strerror(errno));
        close(fd);
        return s;
    }
    int peers[LF_DIST_MAX_RANKS];
    int n_peers = 0, seen[LF_DIST_MAX_RANKS] = {0};
    char why[MSG_CAP] = "";
    const int64_t deadline = now_ms() + timeout_ms;
    while (n_peers < world - 1 && !why[0]) {
        int r = wait_fd(fd, POLLIN, deadline);
        if (r != 1) {
            snprintf(why, sizeof why, "rank 0 waited %.1f s on port %d for %d of the %d ranks; %d never came",
                     secs(timeout_ms), port, world - 1, world, world - 1 - n_peers);
            break;
        }
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            continue;
        hello h;
        if (!io_all(c, &h, sizeof h, 0, deadline) || h.magic != MAGIC) {
            close(c); /* not one of ours (a port scanner, a stale client) */
            continue;
        }
        peers[n_peers++] = c;
        if (h.world != (uint32_t)world)
            snprintf(why, sizeof why, "rank %u counts a world of %u ranks, rank 0 counts %d (WORLD_SIZE)", h.rank,
                     h.world, world);
        else if (h.rank == 0 || h.rank >= (uint32_t)world || seen[h.rank])
            snprintf(why, sizeof why, "a second rank %u in a world of %d (RANK)", h.rank, world);
        else if (h.blob_bytes != n)
            snprintf(why, sizeof why, "rank %u expects %u bytes, rank 0 hands %zu (different builds)", h.rank,
                     h.blob_bytes, n);
        else
            seen[h.rank] = 1;
    }
    reply rp = {MAGIC, why[0] ? 1u : 0u, {0}};
    snprintf(rp.msg, sizeof rp.msg, "%s", why);
    const int64_t send_deadline = now_ms() + timeout_ms;
    for (int i = 0; i < n_peers; i++) {
        if (io_all(peers[i], &rp, sizeof rp, 1, send_deadline) && !why[0])
            io_all(peers[i], (void *)blob, n, 1, send_deadline);
        close(peers[i]);
    }
    close(fd);
    return why[0] ? lf_fail(LF_EIO, "rendezvous: %s", why) : LF_OK;
}

/* rank r > 0: reach rank 0 (retrying while it is not yet listening), say who we are, wait */
static lf_status join(const char *addr, int port, int rank, int world, void *blob, size_t n, int timeout_ms)
{
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
    hello h = {MAGIC, (uint32_t)rank, (uint32_t)world, (uint32_t)n};
    reply rp;
    lf_status s = LF_OK;
    if (!io_all(fd, &h, sizeof h, 1, deadline))
        s = lf_fail(LF_EIO, "rendezvous: rank %d lost rank 0 at %s:%d while saying hello", rank, addr, port);
    else if (!io_all(fd, &rp, sizeof rp, 0, deadline) || rp.magic != MAGIC)
        s = lf_fail(LF_EIO, "rendezvous: rank %d waited %.1f s for rank 0 to gather the %d ranks at %s:%d; it did not",
                    rank, secs(timeout_ms), world, addr, port);
    else if (rp.status != 0)
        s = lf_fail(LF_EIO, "rendezvous: rank 0 refused the group: %.*s", MSG_CAP, rp.msg);
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
    return rank == 0 ? serve(port, world, blob, n, timeout_ms) : join(addr, port, rank, world, blob, n, timeout_ms);
}
