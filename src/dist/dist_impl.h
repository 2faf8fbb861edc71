/* Inside dist/: what its files share. Layer: dist/ sits on ops/. */
#ifndef LF_DIST_IMPL_H
#define LF_DIST_IMPL_H

#include "linfuse/dist.h"
#include "ops/comm.h"

enum { LF_DIST_MAX_RANKS = 1024 };

#endif
