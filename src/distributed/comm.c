/* Communicators: from torchrun's variables (one process per GPU, the ranks meeting over TCP) or
 * all in one process (one thread per GPU), and what a rank says about itself in a trace.
 * Layer: distributed/. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/max_ranks.h"
#include "linfuse/settings.h"

/* A non-negative integer variable; 0 with the message set when it is missing or not one. */
static int env_int(const char *name, int lo, int hi, int *out)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        lf_fail(LF_EINVAL, "torchrun's variable %s is not set", name);
        return 0;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi) {
        lf_fail(LF_EINVAL, "%s=%s: expected an integer from %d to %d", name, v, lo, hi);
        return 0;
    }
    *out = (int)x;
    return 1;
}

lf_status lf_dist_env_read(lf_dist_env *e, int *present)
{
    LF_CHECK_PTR(e, "lf_dist_env_read", "env");
    memset(e, 0, sizeof *e);
    const char *rank = getenv("RANK");
    if (present)
        *present = rank && *rank;
    if (!env_int("WORLD_SIZE", 1, LF_DIST_MAX_RANKS, &e->world_size) ||
        !env_int("RANK", 0, LF_DIST_MAX_RANKS, &e->rank) ||
        !env_int("LOCAL_RANK", 0, LF_MAX_DEVICE_INDEX - 1, &e->local_rank) ||
        !env_int("MASTER_PORT", 1, 65535, &e->master_port))
        return LF_EINVAL;
    if (e->rank >= e->world_size)
        return lf_fail(LF_EINVAL, "RANK=%d is not below WORLD_SIZE=%d", e->rank, e->world_size);
    /* torchrun's agent itself listens on MASTER_PORT (its TCPStore, which PyTorch's workers join
     * as clients): linfuse's ranks then meet on the next port. LINFUSE_DIST_PORT overrides both. */
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (agent && !strcmp(agent, "True") && e->master_port < 65535)
        e->master_port++;
    int64_t port = e->master_port;
    LF_TRY(lf_setting_int(LF_SET_DIST_PORT, &port)); /* a bad value is an error naming it */
    e->master_port = (int)port;
    const char *addr = getenv("MASTER_ADDR");
    if (!addr || !*addr)
        return lf_fail(LF_EINVAL, "torchrun's variable MASTER_ADDR is not set");
    if (snprintf(e->master_addr, sizeof e->master_addr, "%s", addr) >= (int)sizeof e->master_addr)
        return lf_fail(LF_EINVAL, "MASTER_ADDR is longer than %zu characters", sizeof e->master_addr - 1);
    return LF_OK;
}

static int timeout_of(const lf_dist_opts *o)
{
    if (o && o->timeout_ms > 0)
        return o->timeout_ms;
    return (int)(lf_setting_number_or(LF_SET_DIST_TIMEOUT, 300) * 1000);
}

lf_status lf_comm_init_env(lf_comm **out, const lf_dist_opts *o)
{
    LF_CHECK_PTR(out, "lf_comm_init_env", "out");
    *out = NULL;
    const lf_device dev = o ? o->device : LF_DEVICE_CUDA;
    lf_dist_env e;
    LF_TRY(lf_dist_env_read(&e, NULL));
    LF_TRY(lf_device_select(dev, e.local_rank)); /* before anything touches a GPU */
    unsigned char id[LF_COMM_ID_BYTES] = {0};
    if (e.rank == 0 && e.world_size > 1)
        LF_TRY(lf_comm_new_id(dev, id));
    LF_TRY(lf_dist_rendezvous(e.master_addr, e.master_port, e.rank, e.world_size, id, sizeof id, timeout_of(o)));
    return lf_comm_create(out, dev, id, e.rank, e.world_size);
}

lf_status lf_comm_init_local(lf_comm **comms, int n, lf_device dev)
{
    LF_CHECK_PTR(comms, "lf_comm_init_local", "comms");
    for (int i = 0; i < n && i < LF_MAX_DEVICE_INDEX; i++)
        comms[i] = NULL;
    int have = lf_device_count(dev);
    if (n < 1 || n > have)
        return lf_fail(LF_EDEVICE, "lf_comm_init_local: %d ranks asked, this machine has %d %s unit%s", n, have,
                       lf_device_name(dev), have == 1 ? "" : "s");
    return lf_comm_create_all(comms, dev, n);
}

void lf_comm_free(lf_comm *c)
{
    lf_comm_destroy(c);
}

int lf_comm_rank(const lf_comm *c)
{
    LF_PRECOND(c, "lf_comm_rank", "argument 'c' is NULL");
    return c->rank;
}

int lf_comm_size(const lf_comm *c)
{
    LF_PRECOND(c, "lf_comm_size", "argument 'c' is NULL");
    return c->world;
}

int lf_comm_device_index(const lf_comm *c)
{
    LF_PRECOND(c, "lf_comm_device_index", "argument 'c' is NULL");
    return c->unit;
}

const char *lf_comm_library(const lf_comm *c)
{
    LF_PRECOND(c, "lf_comm_library", "argument 'c' is NULL");
    return c->library;
}

lf_status lf_comm_describe(const lf_comm *c, char *buf, size_t cap)
{
    LF_CHECK_PTR(c, "lf_comm_describe", "c");
    LF_CHECK_PTR(buf, "lf_comm_describe", "buf");
    char ranks[1024];
    size_t n = (size_t)snprintf(ranks, sizeof ranks, "[");
    for (int i = 0; i < c->world && n < sizeof ranks - 16; i++)
        n += (size_t)snprintf(ranks + n, sizeof ranks - n, i ? ", %d" : "%d", i);
    snprintf(ranks + n, sizeof ranks - n, "]");
    const char *version = strncmp(c->library, "nccl ", 5) ? "" : c->library + 5;
    int w = snprintf(buf, cap,
                     "{\"backend\": \"nccl\", \"rank\": %d, \"world_size\": %d, \"pg_count\": 1, \"pg_config\": "
                     "[{\"pg_name\": \"0\", \"pg_desc\": \"default_pg\", \"backend_config\": \"cuda:nccl\", "
                     "\"pg_size\": %d, \"ranks\": %s}], \"nccl_version\": \"%s\"}",
                     c->rank, c->world, c->world, ranks, version);
    if (w < 0 || (size_t)w >= cap)
        return lf_fail(LF_EINVAL, "lf_comm_describe: %zu bytes are too few (%d needed)", cap, w + 1);
    return LF_OK;
}
