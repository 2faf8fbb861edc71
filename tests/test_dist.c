/* How ranks meet (lf_dist_rendezvous), with real processes on 127.0.0.1: rank 0 hands its bytes
 * to the others; a rank that never comes, a rank that counts another world, a rank 0 that
 * never listens are each an error within the deadline that says which, never a hang; strangers
 * (a client that says nothing, an impostor claiming rank 1, a rank of another run) are dropped
 * while the real ranks meet, and rank 0 listens on MASTER_ADDR only; torchrun's variables read
 * and checked. The collective itself needs GPUs (tests/gpu/test_tp.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "linfuse/dist.h"
#include "testutil.h"

/* A port nobody listens on now (the kernel picks it). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len)) {
        if (fd >= 0)
            close(fd);
        return 29500 + (int)(getpid() % 1000);
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* Run rank `rank` of `world` in a child: exit 0 when it got rank 0's bytes, 1 when the
 * rendezvous failed and its message held `needle`, 2 otherwise. */
static pid_t child(int port, int rank, int world, int timeout_ms, const char *needle)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    unsigned char blob[128] = {0};
    lf_status s = lf_dist_rendezvous("127.0.0.1", port, rank, world, blob, sizeof blob, timeout_ms);
    if (s == LF_OK) {
        int ok = 1;
        for (int i = 0; i < 128; i++)
            ok &= blob[i] == (unsigned char)(i * 7 + 3);
        _exit(ok ? 0 : 2);
    }
    _exit(needle && strstr(lf_last_error(), needle) ? 1 : 2);
}

static int wait_exit(pid_t pid)
{
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void test_meet(void)
{
    for (int world = 2; world <= 4; world++) {
        int port = free_port();
        unsigned char blob[128];
        for (int i = 0; i < 128; i++)
            blob[i] = (unsigned char)(i * 7 + 3);
        pid_t kids[4];
        for (int r = 1; r < world; r++) /* the others may start first: they retry until rank 0 listens */
            kids[r] = child(port, r, world, 5000, NULL);
        OK(lf_dist_rendezvous("127.0.0.1", port, 0, world, blob, sizeof blob, 5000));
        for (int r = 1; r < world; r++)
            CHECK(wait_exit(kids[r]) == 0, "world %d: rank %d got rank 0's bytes", world, r);
    }
}

static void test_failures(void)
{
    unsigned char blob[128] = {0};
    /* a rank that never comes: rank 0 says so after its deadline */
    int port = free_port();
    double t0 = now_s();
    FAILS(LF_EIO, "1 never came", lf_dist_rendezvous("127.0.0.1", port, 0, 2, blob, sizeof blob, 700));
    CHECK(now_s() - t0 < 5, "the deadline held (%.1f s)", now_s() - t0);
    /* a rank 0 that never listens: the other says it could not reach it */
    port = free_port();
    t0 = now_s();
    FAILS(LF_EIO, "could not reach rank 0 at 127.0.0.1",
          lf_dist_rendezvous("127.0.0.1", port, 1, 2, blob, sizeof blob, 700));
    CHECK(now_s() - t0 < 5, "the deadline held (%.1f s)", now_s() - t0);
    /* a rank that counts another world: both sides fail and say why */
    port = free_port();
    pid_t k = child(port, 1, 3, 5000, "counts a world of 3");
    FAILS(LF_EIO, "rank 1 counts a world of 3 ranks, rank 0 counts 2",
          lf_dist_rendezvous("127.0.0.1", port, 0, 2, blob, sizeof blob, 5000));
    CHECK(wait_exit(k) == 1, "rank 1 was told rank 0 refused the group, and why");
    /* two ranks 1: the second is refused and told; rank 2 never comes, and rank 0 says both */
    port = free_port();
    pid_t a = child(port, 1, 3, 5000, "a second rank 1"), b = child(port, 1, 3, 5000, "a second rank 1");
    FAILS(LF_EIO, "a second rank 1", lf_dist_rendezvous("127.0.0.1", port, 0, 3, blob, sizeof blob, 1500));
    CHECK(wait_exit(a) == 1 && wait_exit(b) == 1, "both ranks 1 were told");
    /* bad arguments */
    FAILS(LF_EINVAL, "rank 2 of a world of 2", lf_dist_rendezvous("127.0.0.1", 1234, 2, 2, blob, sizeof blob, 100));
    FAILS(LF_EINVAL, "not a TCP port", lf_dist_rendezvous("127.0.0.1", 70000, 0, 2, blob, sizeof blob, 100));
    FAILS(LF_EIO, "cannot resolve MASTER_ADDR",
          lf_dist_rendezvous("no-such-host.invalid", 1234, 1, 2, blob, sizeof blob, 300));
    OK(lf_dist_rendezvous("127.0.0.1", 1234, 0, 1, blob, sizeof blob, 100)); /* a world of one meets nobody */
}

static void test_env(void)
{
    lf_dist_env e;
    int present = 1;
    unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("LOCAL_RANK"), unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");
    FAILS(LF_EINVAL, "WORLD_SIZE is not set", lf_dist_env_read(&e, &present));
    CHECK(!present, "not under torchrun");
    setenv("WORLD_SIZE", "2", 1), setenv("RANK", "1", 1), setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1), setenv("MASTER_PORT", "29511", 1);
    OK(lf_dist_env_read(&e, &present));
    CHECK(present && e.rank == 1 && e.world_size == 2 && e.local_rank == 1 && e.master_port == 29511 &&
              !strcmp(e.master_addr, "127.0.0.1"),
          "torchrun's variables read");
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1); /* torchrun's agent listens on MASTER_PORT */
    OK(lf_dist_env_read(&e, NULL));
    CHECK(e.master_port == 29512, "under torchrun's agent, the next port: %d", e.master_port);
    setenv("LINFUSE_DIST_PORT", "31000", 1);
    OK(lf_dist_env_read(&e, NULL));
    CHECK(e.master_port == 31000, "LINFUSE_DIST_PORT wins: %d", e.master_port);
    unsetenv("LINFUSE_DIST_PORT"), unsetenv("TORCHELASTIC_USE_AGENT_STORE");
    setenv("RANK", "2", 1);
    FAILS(LF_EINVAL, "RANK=2 is not below WORLD_SIZE=2", lf_dist_env_read(&e, NULL));
    setenv("RANK", "x1", 1);
    FAILS(LF_EINVAL, "RANK=x1: expected an integer", lf_dist_env_read(&e, NULL));
    setenv("RANK", "0", 1), setenv("MASTER_PORT", "0", 1);
    FAILS(LF_EINVAL, "MASTER_PORT=0", lf_dist_env_read(&e, NULL));
    unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("LOCAL_RANK"), unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");
}

/* A stranger on rank 0's port, in a child: connects (retrying until rank 0 listens), sends the n
 * bytes of msg, then waits up to hold_ms for an answer. Exits 3 when it was handed rank 0's
 * bytes (the wire: a reply of magic, status 0, 200 bytes, then the blob), else 0. */
static pid_t stranger(const char *addr, int port, const void *msg, size_t n, int hold_ms)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, addr, &a.sin_addr);
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 600; tries++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            close(fd);
            fd = -1;
            usleep(5000);
        }
    }
    if (fd < 0)
        _exit(0);
    if (n && send(fd, msg, n, MSG_NOSIGNAL) != (ssize_t)n)
        _exit(0);
    struct timeval tv = {hold_ms / 1000, (hold_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    unsigned char got[208 + 128];
    size_t k = 0;
    for (ssize_t r; k < sizeof got && (r = recv(fd, got + k, sizeof got - k, 0)) > 0;)
        k += (size_t)r;
    const uint32_t status = k >= 8 ? (uint32_t)(got[4] | got[5] << 8 | got[6] << 16 | (uint32_t)got[7] << 24) : 1;
    _exit(k == sizeof got && status == 0 ? 3 : 0);
}

/* Rank 1 in a child that waits `delay_ms` first (so the strangers are there before it), with
 * TORCHELASTIC_RUN_ID set to run_id when not NULL. */
static pid_t late_rank(int port, int delay_ms, const char *run_id, const char *needle)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    usleep((useconds_t)delay_ms * 1000);
    if (run_id)
        setenv("TORCHELASTIC_RUN_ID", run_id, 1);
    unsigned char blob[128] = {0};
    lf_status s = lf_dist_rendezvous("127.0.0.1", port, 1, 2, blob, sizeof blob, 3000);
    if (s == LF_OK) {
        int ok = 1;
        for (int i = 0; i < 128; i++)
            ok &= blob[i] == (unsigned char)(i * 7 + 3);
        _exit(ok ? 0 : 2);
    }
    _exit(needle && strstr(lf_last_error(), needle) ? 1 : 2);
}

/* Strangers at rank 0's door: the real ranks still meet, at once, and no stranger gets the bytes.
 * Before rank 0 served connections side by side and checked the run's id, a client that said
 * nothing held rank 0 until its deadline ("1 never came"), and one that claimed rank 1 first was
 * handed the bytes while the real rank 1 was refused. */
static void test_strangers(void)
{
    unsigned char blob[128];
    for (int i = 0; i < 128; i++)
        blob[i] = (unsigned char)(i * 7 + 3);
    unsetenv("TORCHELASTIC_RUN_ID");
    /* a client that connects and says nothing (held for 4 s), then the real rank 1 */
    int port = free_port();
    pid_t quiet = stranger("127.0.0.1", port, NULL, 0, 4000), r1 = late_rank(port, 300, NULL, NULL);
    double t0 = now_s();
    OK(lf_dist_rendezvous("127.0.0.1", port, 0, 2, blob, sizeof blob, 5000));
    CHECK(now_s() - t0 < 2.0, "rank 0 met rank 1 in %.1f s beside a silent client (it has 3 s to say hello)",
          now_s() - t0);
    CHECK(wait_exit(r1) == 0, "rank 1 got the bytes beside a silent client");
    kill(quiet, SIGKILL), wait_exit(quiet);
    /* impostors that claim rank 1 before the real one: in version 1's hello (no run id), and in
     * this version's with another run's id */
    port = free_port();
    const uint32_t v1[4] = {0x4c465256, 1, 2, 128};
    struct {
        uint32_t magic, rank, world, blob_bytes, id_bytes;
        char id[12];
    } v2 = {0x4c465232, 1, 2, 128, 12, "another-run!"};
    pid_t old = stranger("127.0.0.1", port, v1, sizeof v1, 3000),
          other = stranger("127.0.0.1", port, &v2, sizeof v2, 3000);
    r1 = late_rank(port, 300, NULL, NULL);
    t0 = now_s();
    OK(lf_dist_rendezvous("127.0.0.1", port, 0, 2, blob, sizeof blob, 5000));
    CHECK(now_s() - t0 < 2.0, "rank 0 met rank 1 in %.1f s beside two impostors", now_s() - t0);
    CHECK(wait_exit(r1) == 0, "the real rank 1 got the bytes");
    CHECK(wait_exit(old) == 0, "the impostor without a run id got nothing");
    CHECK(wait_exit(other) == 0, "the impostor with another run's id got nothing");
    /* a rank 1 of another run (TORCHELASTIC_RUN_ID differs) is refused and told; this run's meets */
    port = free_port();
    setenv("TORCHELASTIC_RUN_ID", "run-a", 1);
    pid_t stray = late_rank(port, 0, "run-b", "its run id is not this run's");
    r1 = late_rank(port, 500, "run-a", NULL);
    OK(lf_dist_rendezvous("127.0.0.1", port, 0, 2, blob, sizeof blob, 5000));
    CHECK(wait_exit(stray) == 1, "the rank of another run was refused, and told why");
    CHECK(wait_exit(r1) == 0, "this run's rank 1 got the bytes");
    unsetenv("TORCHELASTIC_RUN_ID");
    /* rank 0 listens on MASTER_ADDR only: 127.0.0.1 is not reached at 127.0.0.2 (all of 127/8 is
     * this machine's loopback; listening on every interface took it) */
    port = free_port();
    pid_t r0 = fork();
    if (r0 == 0)
        _exit(lf_dist_rendezvous("127.0.0.1", port, 0, 2, blob, sizeof blob, 3000) == LF_OK ? 0 : 2);
    usleep(300 * 1000);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    const int reached = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    const int err = errno;
    close(fd);
    CHECK(!reached, "rank 0 at 127.0.0.1 is not reached at 127.0.0.2 (%s)", reached ? "reached" : strerror(err));
    r1 = late_rank(port, 0, NULL, NULL);
    CHECK(wait_exit(r1) == 0 && wait_exit(r0) == 0, "and the ranks still meet at 127.0.0.1");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_meet();
    test_failures();
    test_strangers();
    test_env();
    return lf_test_finish("test_dist");
}
