/* Inside an lf_trace: the event array, a string arena, names of tracks. Layer: trace/. */
#ifndef LF_TRACE_IMPL_H
#define LF_TRACE_IMPL_H

#include "core/core.h"
#include "linfuse/trace.h"

typedef struct lf_arena_chunk {
    struct lf_arena_chunk *next;
    size_t used, cap;
    char data[];
} lf_arena_chunk;

typedef struct lf_track_name {
    int64_t pid, tid;
    const char *name;
} lf_track_name;

struct lf_trace {
    lf_trace_event *ev;
    int64_t n, cap;
    lf_arena_chunk *arena;
    lf_track_name *tracks;
    int64_t n_tracks, cap_tracks;
    lf_trace_meta meta;
};

#endif
