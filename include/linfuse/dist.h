/* linfuse across GPUs: communicators over NCCL, made one of two ways, both real.
 *   One process per GPU, started by torchrun (or mpirun, Slurm: anything that sets torchrun's
 *   variables RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT): lf_comm_init_env selects
 *   GPU LOCAL_RANK for the calling thread, rank 0 makes NCCL's id and hands it to the others over
 *   TCP at MASTER_ADDR:MASTER_PORT, and every rank joins. This is how it runs across machines.
 *   One process, n GPUs, one thread each: lf_comm_init_local makes all n at once; thread i
 *   selects cuda:i (lf_device_select) and uses comms[i].
 * The collectives themselves are ops (lf_all_reduce in linfuse/ops.h), traced as PyTorch's are.
 * Layer: dist/ sits on ops/. */
#ifndef LINFUSE_DIST_H
#define LINFUSE_DIST_H

#include <stddef.h>

#include "linfuse/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* torchrun's variables. master_port is where linfuse's ranks meet: MASTER_PORT, or the port after
 * it under torchrun (TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent holds MASTER_PORT for its
 * own store), or LINFUSE_DIST_PORT when set. */
typedef struct lf_dist_env {
    int rank, world_size, local_rank;
    char master_addr[256];
    int master_port;
} lf_dist_env;

/* Read them from the environment; LF_EINVAL naming the variable that is missing or wrong.
 * present (may be NULL) is set to whether RANK is set at all, so a program can tell "not under
 * torchrun" from "under torchrun, set wrong". */
LF_API lf_status lf_dist_env_read(lf_dist_env *env, int *present);

typedef struct lf_dist_opts {
    lf_device device; /* LF_DEVICE_CUDA (the only device with collectives) */
    /* How long rank 0 waits for the others, and they for it (ms); 0: $LINFUSE_DIST_TIMEOUT
     * seconds, else 300 s (torchrun's own default is 900 s) */
    int timeout_ms;
} lf_dist_opts;

/* This process's rank from torchrun's variables (see above). Blocks until every rank has joined,
 * or fails with what went wrong (a rank that never came, a different WORLD_SIZE, ...). */
LF_API lf_status lf_comm_init_env(lf_comm **out, const lf_dist_opts *o);
/* n ranks in this process: comms[i] on cuda:i. */
LF_API lf_status lf_comm_init_local(lf_comm **comms, int n, lf_device dev);
LF_API void lf_comm_free(lf_comm *c); /* NULL is fine */

LF_API int lf_comm_rank(const lf_comm *c);
LF_API int lf_comm_size(const lf_comm *c);
LF_API int lf_comm_device_index(const lf_comm *c); /* the GPU it runs on */
/* The library that moves the bytes: "nccl 2.28.9". */
LF_API const char *lf_comm_library(const lf_comm *c);
/* This rank as Kineto's distributedInfo (backend, rank, world_size, pg_count, pg_config,
 * nccl_version), JSON text for lf_prof_opts.distributed_info. */
LF_API lf_status lf_comm_describe(const lf_comm *c, char *buf, size_t cap);

/* The rendezvous alone: rank 0, listening on the addresses addr resolves to (port), hands the n
 * bytes of blob to every other rank (which reach it at addr:port). Only a hello carrying the run's
 * id (TORCHELASTIC_RUN_ID, else addr:port) and an unclaimed rank from 1 to world - 1 is taken;
 * anything else that connects is dropped and logged, each connection with a few seconds to speak.
 * The id says who belongs to the run; it is no secret. Returns when all have the blob, or after
 * timeout_ms with an error. lf_comm_init_env uses it; it is public so other programs (and the
 * tests) can too. */
LF_API lf_status lf_dist_rendezvous(const char *addr, int port, int rank, int world, void *blob, size_t n,
                                    int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
