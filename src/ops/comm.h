/* Inside the collectives: what a communicator is, and how linfuse/dist.h makes one once the
 * ranks have found each other. Layer: ops/. */
#ifndef LF_OPS_COMM_H
#define LF_OPS_COMM_H

#include "ops/dispatch.h"

struct lf_comm {
    const lf_backend_ops *b;
    void *handle; /* the device library's communicator (NCCL's) */
    lf_device dev;
    int unit; /* the GPU it runs on */
    int rank, world;
    char library[48]; /* "nccl 2.28.9" */
};

/* A new id for a group (rank 0 makes it; every rank gets a copy before lf_comm_create). */
lf_status lf_comm_new_id(lf_device dev, unsigned char id[LF_COMM_ID_BYTES]);
/* This thread's unit of dev joins group id as rank of world; blocks until every rank has joined. */
lf_status lf_comm_create(lf_comm **out, lf_device dev, const unsigned char id[LF_COMM_ID_BYTES], int rank, int world);
/* n ranks in this process: out[i] on unit i. */
lf_status lf_comm_create_all(lf_comm **out, lf_device dev, int n);
void lf_comm_destroy(lf_comm *c);

#endif
