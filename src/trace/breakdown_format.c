/* `trace breakdown`'s output (breakdown.c computes it): each step's split per GPU, the kernels'
 * durations, the launches, the CUDA graph replays and what could not be trusted, as text or as one
 * JSON object. Layer: trace/. */
#include <stdio.h>
#include <stdlib.h>

#include "trace/trace_impl.h"

#define put lf_sbuf_printf

/* The breakdown as one JSON object (names whole). */
static void format_json(const lf_breakdown *b, int64_t rank, lf_sbuf *o)
{
    put(o, "{");
    if (rank >= 0)
        put(o, "\"rank\": %lld, ", (long long)rank);
    put(o, "\"steps\": [");
    for (int64_t i = 0; i < b->n_steps; i++) {
        const lf_breakdown_step *s = &b->steps[i];
        put(o,
            "%s\n  {\"step\": %lld, \"device\": %lld, \"window_us\": %.3f, \"compute_us\": %.3f, \"comm_us\": "
            "%.3f, "
            "\"memory_us\": %.3f, \"idle_us\": %.3f, \"idle_host_us\": %.3f, \"idle_other_us\": %.3f, "
            "\"comm_total_us\": %.3f, \"comm_hidden_us\": %.3f, \"kernels\": %lld, \"graph_kernels\": %lld}",
            i ? "," : "", (long long)s->step, (long long)s->device, s->window_us, s->compute_us, s->comm_us,
            s->memory_us, s->idle_us, s->idle_host_us, s->idle_other_us, s->comm_total_us, s->comm_hidden_us,
            (long long)s->kernels, (long long)s->graph_kernels);
    }
    put(o, "],\n \"kernels\": [");
    for (int64_t i = 0; i < b->n_kernels; i++) {
        const lf_kernel_stats *k = &b->kernels[i];
        put(o, "%s\n  {\"name\": ", i ? "," : "");
        lf_sbuf_json_str(o, k->name);
        put(o,
            ", \"count\": %lld, \"total_us\": %.3f, \"min_us\": %.3f, \"median_us\": %.3f, \"p90_us\": %.3f, "
            "\"max_us\": %.3f}",
            (long long)k->count, k->total_us, k->min_us, k->median_us, k->p90_us, k->max_us);
    }
    put(o,
        "],\n \"launches\": {\"kernels\": %lld, \"shorter_than_launch\": %lld, \"delay_median_us\": %.3f, "
        "\"delay_p90_us\": %.3f, \"delay_max_us\": %.3f, \"runtime_cutoff_us\": %g, \"calls_over_cutoff\": %lld, "
        "\"delay_cutoff_us\": %g, \"delays_over_cutoff\": %lld},\n \"graphs\": [",
        (long long)b->launched, (long long)b->short_kernels, b->delay_median_us, b->delay_p90_us, b->delay_max_us,
        b->runtime_cutoff_us, (long long)b->slow_calls, b->delay_cutoff_us, (long long)b->late_kernels);
    for (int64_t i = 0; i < b->n_graphs; i++) {
        const lf_graph_stats *g = &b->graphs[i];
        put(o, "%s\n  {\"op\": ", i ? "," : "");
        lf_sbuf_json_str(o, g->op);
        put(o, ", \"launches\": %lld, \"kernels\": %lld, \"device_us\": %.3f}", (long long)g->launches,
            (long long)g->kernels, g->device_us);
    }
    char trust[640];
    lf_trace_trust_json(&b->trust, trust, sizeof trust);
    put(o, "],\n \"trust\": %s}", trust);
}

/* The text's table of steps x GPUs. */
static void put_steps_text(const lf_breakdown *b, int64_t rank, lf_sbuf *o)
{
    const char *who = rank >= 0 ? "rank " : "";
    char r[32] = "";
    if (rank >= 0)
        snprintf(r, sizeof r, "%lld: ", (long long)rank);
    put(o, "%s%sdevice time per step (us): the window from the step's first device work to its last\n", who, r);
    int comm = 0;
    for (int64_t i = 0; i < b->n_steps; i++)
        comm |= b->steps[i].comm_total_us > 0;
    put(o, "%8s %6s %12s %12s %12s %12s %12s %12s %12s %8s %8s", "step", "gpu", "window", "compute", "comm", "memory",
        "idle", "idle:host", "idle:other", "kernels", "graph");
    put(o, comm ? " %12s\n" : "\n", "comm:hidden");
    for (int64_t i = 0; i < b->n_steps; i++) {
        const lf_breakdown_step *s = &b->steps[i];
        char step[24];
        snprintf(step, sizeof step, s->step >= 0 ? "#%lld" : "all", (long long)s->step);
        put(o, "%8s %6lld %12.3f %12.3f %12.3f %12.3f %12.3f %12.3f %12.3f %8lld %8lld", step, (long long)s->device,
            s->window_us, s->compute_us, s->comm_us, s->memory_us, s->idle_us, s->idle_host_us, s->idle_other_us,
            (long long)s->kernels, (long long)s->graph_kernels);
        put(o, comm ? " %12.3f\n" : "\n", s->comm_hidden_us);
    }
    if (comm)
        put(o, "comm: NCCL kernels' time no compute on the GPU hides (exposed); comm:hidden: their time under "
               "compute\n");
    if (!b->n_steps)
        put(o, "  (no device work)\n");
}

/* The text's launch line. */
static void put_launches_text(const lf_breakdown *b, lf_sbuf *o)
{
    if (b->launched)
        put(o,
            "\nlaunches: %lld kernels launched one by one; %lld shorter than their launch call; launch to start "
            "median %.3fus, p90 %.3fus, max %.3fus; %lld launch calls over %gus, %lld kernels started over %gus "
            "after their launch\n",
            (long long)b->launched, (long long)b->short_kernels, b->delay_median_us, b->delay_p90_us, b->delay_max_us,
            (long long)b->slow_calls, b->runtime_cutoff_us, (long long)b->late_kernels, b->delay_cutoff_us);
    else /* linfuse's CPU kernels, or a trace of a graph alone: nothing to say about launches */
        put(o, "\nlaunches: no kernel here has a launch call of its own (CPU kernels run where they are called; "
               "a graph's kernels are listed under its replays)\n");
}

/* The breakdown as text: names cut as PyTorch's table cuts them, wider where two would look
 * alike, safe for a terminal (names, keep: room for the longer list of kernels and graphs). */
static void format_text(const lf_breakdown *b, int64_t rank, lf_sbuf *o, const char **names, size_t *keep)
{
    put_steps_text(b, rank, o);
    for (int64_t i = 0; names && i < b->n_kernels; i++)
        names[i] = b->kernels[i].name;
    if (!names || !keep || !lf_term_keeps(names, b->n_kernels, LF_TERM_NAME_KEEP, keep))
        o->oom = 1;
    put(o, "\nkernels by total time (us):\n%12s %8s %10s %10s %10s %10s  %s\n", "total", "count", "min", "median",
        "p90", "max", "name");
    for (int64_t i = 0; i < b->n_kernels && !o->oom; i++) {
        const lf_kernel_stats *k = &b->kernels[i];
        put(o, "%12.3f %8lld %10.3f %10.3f %10.3f %10.3f  ", k->total_us, (long long)k->count, k->min_us, k->median_us,
            k->p90_us, k->max_us);
        lf_sbuf_term_str(o, k->name, keep[i]);
        put(o, "\n");
    }
    put_launches_text(b, o);
    for (int64_t i = 0; names && i < b->n_graphs; i++)
        names[i] = b->graphs[i].op;
    if (b->n_graphs && !o->oom && !lf_term_keeps(names, b->n_graphs, LF_TERM_NAME_KEEP, keep))
        o->oom = 1;
    if (!b->n_graphs || o->oom)
        return;
    put(o, "\nCUDA graph replays, by the op that launched them:\n%10s %16s %18s  %s\n", "launches", "kernels/launch",
        "device us/launch", "op");
    for (int64_t i = 0; i < b->n_graphs; i++) {
        const lf_graph_stats *g = &b->graphs[i];
        put(o, "%10lld %16.1f %18.3f  ", (long long)g->launches, (double)g->kernels / (double)g->launches,
            g->device_us / (double)g->launches);
        lf_sbuf_term_str(o, g->op, keep[i]);
        put(o, "\n");
    }
}

#undef put

lf_status lf_breakdown_format(const lf_breakdown *b, int64_t rank, int json, char **text)
{
    LF_CHECK_PTR(b, "lf_breakdown_format", "b");
    LF_CHECK_PTR(text, "lf_breakdown_format", "text");
    *text = NULL;
    lf_sbuf o = {0};
    if (json) {
        format_json(b, rank, &o);
    } else {
        const int64_t nn = b->n_kernels > b->n_graphs ? b->n_kernels : b->n_graphs;
        const char **names = malloc((size_t)(nn + 1) * sizeof *names);
        size_t *keep = malloc((size_t)(nn + 1) * sizeof *keep);
        format_text(b, rank, &o, names, keep);
        free(names), free(keep);
        char trust[640];
        lf_trace_trust_line(&b->trust, trust, sizeof trust);
        if (trust[0])
            lf_sbuf_printf(&o, "\n%s\n", trust);
    }
    if (o.oom) {
        free(o.p);
        return lf_fail(LF_ENOMEM, "lf_breakdown_format: out of memory");
    }
    *text = o.p;
    return LF_OK;
}
