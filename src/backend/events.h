/* A device's own record of its work (CUPTI on CUDA), as the profiler drains it. The profiler
 * asks a device for these; a device never calls up into the profiler. Layer: backend/. */
#ifndef LF_BACKEND_EVENTS_H
#define LF_BACKEND_EVENTS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --- a device's own record of its work (CUPTI on CUDA) ---
 * The profiler asks a device for these; a device never calls up into the profiler. Times are
 * CLOCK_MONOTONIC nanoseconds. */

typedef enum lf_dev_event_kind {
    LF_DEV_KERNEL,
    LF_DEV_MEMCPY,
    LF_DEV_MEMSET,
    LF_DEV_RUNTIME,  /* a runtime API call (cudaLaunchKernel, cudaMemcpyAsync, ...) */
    LF_DEV_DRIVER,   /* a driver API call (cuLaunchKernelEx, ...) */
    LF_DEV_OVERHEAD, /* the tracer's own cost ("Activity Buffer Request") */
} lf_dev_event_kind;

typedef struct lf_dev_event {
    lf_dev_event_kind kind;
    const char *name;      /* valid during the sink call */
    int64_t pid, tid;      /* device work: device index and stream; calls: process and thread */
    int64_t ts_ns, dur_ns; /* CLOCK_MONOTONIC */
    int64_t correlation;   /* the device's id tying a launch call to the work it queued */
    int64_t ext_id;        /* the op that was open when it was launched (push), or 0 */
    double bytes;          /* copies and sets */
    const char *args_json; /* kernels: Kineto's further args as JSON members, or NULL */
    int64_t launch_ts;     /* device work: when its launch call began, or -1 */
    int64_t launch_pid, launch_tid;
} lf_dev_event;

typedef void (*lf_dev_event_sink)(void *sink, const lf_dev_event *e);

typedef struct lf_device_events {
    const char *name; /* "cupti" */
    /* Begin collecting; nonzero when the device's tracer cannot start (the profiler then falls
     * back to the backend's own timing of each launch, and says so). */
    int (*start)(void);
    /* Around every op while collecting, so records name the op that launched them. */
    void (*push)(int64_t ext_id);
    void (*pop)(void);
    /* Wait for the device, flush, and hand every record to add. Returns the records the tracer
     * dropped. */
    int64_t (*drain)(void *sink, lf_dev_event_sink add);
    void (*stop)(void);
    /* Kineto's deviceProperties array as JSON text (owned by the backend), or NULL. */
    const char *(*properties)(void);
} lf_device_events;

#ifdef __cplusplus
}
#endif
#endif
