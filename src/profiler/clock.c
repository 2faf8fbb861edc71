/* The profiler's clock. Events are stamped with the CPU's time-stamp counter where it is
 * invariant (a few ns to read, against ~25 ns for clock_gettime in a VM: two stamps per op are
 * most of an event's cost), and mapped to CLOCK_MONOTONIC when a window becomes a trace,
 * through two anchors taken on both clocks (as CUPTI maps GPU stamps to the CPU clock, and as
 * Kineto does with its TSC clock). Without an invariant TSC the stamps are CLOCK_MONOTONIC
 * nanoseconds themselves. Layer: profiler/. */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <time.h>

#include <pthread.h>

#include "profiler/clock.h"

int lf_prof_use_tsc;

int64_t lf_prof_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void tsc_init(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000007u && __get_cpuid(0x80000007u, &a, &b, &c, &d))
        lf_prof_use_tsc = (d >> 8) & 1; /* invariant TSC: constant rate, runs in every power state */
#endif
}

void lf_prof_clock_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tsc_init);
}

/* The second anchor is taken at least 5 ms after the session's first, so the rate is exact to a
 * few parts per million. */
lf_clock_map lf_prof_clock_map(int64_t tick0, int64_t mono0)
{
    lf_clock_map m = {tick0, mono0, 1.0};
    if (!lf_prof_use_tsc)
        return m;
    int64_t t1 = lf_prof_ticks(), m1 = lf_prof_now_ns();
    while (m1 - mono0 < 5000000) {
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
        t1 = lf_prof_ticks(), m1 = lf_prof_now_ns();
    }
    m.ns_per_tick = (double)(m1 - mono0) / (double)(t1 - tick0);
    return m;
}
