/* The most ranks a rendezvous or a communicator takes (the rendezvous and the communicators of
 * distributed/ share it). Layer: distributed/ sits on ops/. */
#ifndef LF_MAX_RANKS_H
#define LF_MAX_RANKS_H

#include "linfuse/dist.h"
#include "ops/comm.h"

enum { LF_DIST_MAX_RANKS = 1024 };

#endif
