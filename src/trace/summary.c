/* The one-line reading of a trace: kernels and CPU ops per step, how busy the device was
 * during the steps, and whether the run is overhead-bound (the device mostly waits for the
 * host) or compute-bound. Layer: trace/. */
#include <stdio.h>
#include <string.h>

#include "trace/trace_impl.h"

/* The summary is the step profile's totals (diff.c), read as a verdict. */
lf_status lf_trace_summarize(const lf_trace *t, lf_trace_summary *out)
{
    LF_CHECK_PTR(t, "lf_trace_summarize", "t");
    LF_CHECK_PTR(out, "lf_trace_summarize", "out");
    memset(out, 0, sizeof *out);
    lf_step_profile p;
    LF_TRY(lf_step_profile_build(t, &p));
    out->steps = p.steps;
    out->kernels_per_step = p.kernels_per_step;
    out->cpu_ops_per_step = p.ops_per_step;
    out->step_ns = p.cpu_ns_per_step;
    out->device_ns_per_step = p.device_ns_per_step;
    out->device_busy = p.cpu_ns_per_step > 0 ? p.device_ns_per_step / p.cpu_ns_per_step : 0;
    if (out->device_busy > 1)
        out->device_busy = 1; /* concurrent streams can overlap */
    out->compute_bound = out->device_busy >= 0.5;
    lf_step_profile_free(&p);
    return LF_OK;
}

void lf_trace_summary_line(const lf_trace_summary *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "kernels/step=%g cpu_ops/step=%g device_busy=%.0f%% verdict=%s", s->kernels_per_step,
             s->cpu_ops_per_step, 100.0 * s->device_busy, s->compute_bound ? "compute-bound" : "overhead-bound");
}
