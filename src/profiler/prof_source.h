/* A device activity source: a backend that reports its device's work itself (CUPTI on CUDA)
 * registers one, and the profiler drives it: start with the session, an External id pushed and
 * popped around every op so device records name the op that launched them, and at the end of a
 * window every record handed over as trace events. Layer: profiler/ (the interface). */
#ifndef LF_PROF_SOURCE_H
#define LF_PROF_SOURCE_H

#include "linfuse/trace.h"

typedef void (*lf_prof_sink)(void *sink, const lf_trace_event *e);

typedef struct lf_prof_source {
    const char *name;
    /* Begin collecting; nonzero when the device's tracer cannot start (the run then falls back
     * to the backend's own timing, and says so). */
    int (*start)(void);
    void (*push)(int64_t ext_id);
    void (*pop)(void);
    /* Flush, then hand over every record as trace events with times on CLOCK_MONOTONIC ns
     * (the caller adds its base). Returns the records the tracer dropped. */
    int64_t (*drain)(void *sink, lf_prof_sink add);
    void (*stop)(void);
    /* Kineto's deviceProperties array, as JSON text (owned by the source), or NULL. */
    const char *(*device_properties)(void);
} lf_prof_source;

void lf_prof_register_source(const lf_prof_source *s);

#endif
