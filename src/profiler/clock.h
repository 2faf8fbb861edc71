/* The profiler's clock: events are stamped with the CPU's time-stamp counter where it is
 * invariant, else with CLOCK_MONOTONIC ns, and a window's stamps are mapped to CLOCK_MONOTONIC
 * ns when it becomes a trace. Layer: profiler/. */
#ifndef LF_PROF_CLOCK_H
#define LF_PROF_CLOCK_H

#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "linfuse/profiler.h"

/* Which clock stamps use; set once by lf_prof_clock_init, before the first session's stamp. */
extern int lf_prof_use_tsc;
void lf_prof_clock_init(void);

/* A stamp: the TSC's count, or CLOCK_MONOTONIC ns. */
static inline int64_t lf_prof_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_expect(lf_prof_use_tsc, 1))
        return (int64_t)__rdtsc();
#endif
    return lf_prof_now_ns();
}

/* Stamps to CLOCK_MONOTONIC ns: a line through a first anchor (tick0, mono0), taken on both
 * clocks at the same instant, and a second one taken now. */
typedef struct lf_clock_map {
    int64_t tick0, mono0;
    double ns_per_tick;
} lf_clock_map;
lf_clock_map lf_prof_clock_map(int64_t tick0, int64_t mono0);
static inline int64_t lf_prof_to_ns(const lf_clock_map *m, int64_t tick)
{
    return m->mono0 + (int64_t)((double)(tick - m->tick0) * m->ns_per_tick);
}

#endif
