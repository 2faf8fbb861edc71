/* One HTML file to look at rather than read: a step's timeline, the summary and breakdown, each
 * kernel's achieved TFLOP/s and GB/s against the device's peaks (a roofline), PyTorch's table, and
 * what changed from another trace. Self-contained: styles and drawings inline, no script, nothing
 * loaded from the network, so it opens anywhere and can be attached to a bug report.
 * Layer: trace/. */
#define _GNU_SOURCE /* open_memstream */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/report_parts.h"
#include "trace/trace_impl.h"

#define put lf_sbuf_printf

void lf_html_escaped(lf_sbuf *b, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&':
            put(b, "&amp;");
            break;
        case '<':
            put(b, "&lt;");
            break;
        case '>':
            put(b, "&gt;");
            break;
        case '"':
            put(b, "&quot;");
            break;
        default:
            put(b, "%c", *s);
        }
    }
}

void lf_html_name(lf_sbuf *b, const char *name)
{
    lf_sbuf safe = {0};
    lf_sbuf_term_str(&safe, name, 0);
    if (safe.oom)
        b->oom = 1;
    lf_html_escaped(b, safe.p ? safe.p : "");
    free(safe.p);
}

/* Datasheet peaks (dense bf16 tensor TFLOP/s, memory GB/s) of the GPUs this project runs on,
 * found by the name deviceProperties gives; docs/gpu_notes.md lists them. */
static int known_peaks(const char *props, double *tflops, double *gbps, char *name, size_t cap)
{
    json_t *p = props ? json_loads(props, 0, NULL) : NULL;
    const char *n = json_string_value(json_object_get(json_array_get(p, 0), "name"));
    snprintf(name, cap, "%s", n ? n : "");
    int found = 1;
    if (n && strstr(n, "H200"))
        *tflops = 989, *gbps = 4800;
    else if (n && strstr(n, "H100") && strstr(n, "PCIe"))
        *tflops = 756, *gbps = 2000;
    else if (n && strstr(n, "H100"))
        *tflops = 989, *gbps = 3350;
    else if (n && strstr(n, "A100"))
        *tflops = 312, *gbps = strstr(n, "80GB") ? 2039 : 1555;
    else
        found = 0;
    json_decref(p);
    return found;
}

static const char STYLE[] =
    "body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
    "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
    "td.n,th.n{text-align:left;max-width:560px;overflow-wrap:anywhere}pre{font-size:11px;background:#f6f6f6;"
    "padding:8px;overflow-x:auto}.timeline{overflow-x:auto;border:1px solid #ccc}";

/* Where the trace's device work ran: a GPU, linfuse's CPU kernels, or nowhere (a trace of host
 * events only, such as PyTorch's without CUDA activities). */
typedef enum { ON_GPU, ON_CPU, ON_NONE } device_kind;

static device_kind device_of(const lf_trace *t)
{
    if (t->meta.device_label && !strcmp(t->meta.device_label, "CPU-dev"))
        return ON_CPU;
    for (int64_t i = 0; i < t->n; i++)
        if (lf_trace_cat_is_device(t->ev[i].cat) && t->ev[i].cat != LF_TC_GPU_ANNOTATION)
            return ON_GPU;
    return ON_NONE;
}

/* The breakdown as a table: per step and GPU on a GPU; per step on the CPU, where kernels run
 * inside the op that calls them (no launches, collectives or graphs to count). */
static lf_status put_breakdown(lf_sbuf *b, const lf_trace *t, device_kind dk)
{
    lf_breakdown bd;
    LF_TRY(lf_trace_breakdown(t, &bd));
    if (dk == ON_CPU)
        put(b, "<h2>Where the CPU kernels' time went, step by step (us)</h2>\n<table><tr><th>step</th>"
               "<th>window</th><th>in kernels</th><th>between kernels</th><th>kernels</th></tr>\n");
    else
        put(b, "<h2>Where the device time went, step by step (us)</h2>\n<table><tr><th>step</th><th>GPU</th>"
               "<th>window</th><th>compute</th><th>communication</th><th>memory</th><th>idle</th>"
               "<th>idle: waiting on the host</th><th>idle: other</th><th>kernels</th><th>in CUDA graphs</th></tr>\n");
    for (int64_t i = 0; i < bd.n_steps; i++) {
        const lf_breakdown_step *r = &bd.steps[i];
        char step[32] = "all";
        if (r->step >= 0)
            snprintf(step, sizeof step, "#%lld", (long long)r->step);
        if (dk == ON_CPU)
            put(b, "<tr><td>%s</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%lld</td></tr>\n", step, r->window_us,
                r->compute_us + r->memory_us, r->idle_us, (long long)r->kernels);
        else
            put(b,
                "<tr><td>%s</td><td>%lld</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td>"
                "<td>%.3f</td><td>%.3f</td><td>%lld</td><td>%lld</td></tr>\n",
                step, (long long)r->device, r->window_us, r->compute_us, r->comm_us, r->memory_us, r->idle_us,
                r->idle_host_us, r->idle_other_us, (long long)r->kernels, (long long)r->graph_kernels);
    }
    if (dk == ON_CPU)
        put(b, "</table>\n<p>The window runs from the step's first kernel to its last; linfuse's CPU kernels run "
               "inside the op that calls them, so there are no launches to time.</p>\n");
    else
        put(b,
            "</table>\n<p>Launches: %lld kernels launched one by one, %lld of them shorter than their launch call; "
            "launch to start: median %.3f us, p90 %.3f us, max %.3f us.</p>\n",
            (long long)bd.launched, (long long)bd.short_kernels, bd.delay_median_us, bd.delay_p90_us, bd.delay_max_us);
    lf_breakdown_free(&bd);
    return LF_OK;
}

/* The step drawn: o's, or the trace's first (by start) for LF_TRACE_FIRST_STEP; -1 when the
 * trace has no steps. */
static int64_t step_drawn(const lf_trace *t, int step)
{
    int64_t first = -1, at = INT64_MAX;
    for (int64_t i = 0; i < t->n && step < 0; i++)
        if (lf_trace_step_number(&t->ev[i]) >= 0 && t->ev[i].ts_ns < at)
            first = lf_trace_step_number(&t->ev[i]), at = t->ev[i].ts_ns;
    return step < 0 ? first : step;
}

/* The page's top: its title, the trace's name. */
static void put_title(lf_sbuf *b, const lf_trace *t)
{
    const char *name = t->meta.trace_name ? t->meta.trace_name : "trace";
    put(b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>linfuse report: ");
    lf_html_name(b, name);
    put(b, "</title><style>%s</style></head><body>\n<h1>", STYLE);
    lf_html_name(b, name);
    put(b, "</h1>\n");
}

/* One process's reading in one line, and the device with its peaks (o's, else its datasheet's
 * where the trace names a known GPU: *peak_tf, *peak_gbps). */
static lf_status put_reading(lf_sbuf *b, const lf_trace *t, const lf_report_opts *o, device_kind dk, double *peak_tf,
                             double *peak_gbps)
{
    const lf_trace_meta *m = &t->meta;
    lf_trace_summary s;
    LF_TRY(lf_trace_summarize(t, &s));
    char line[700], dev[128] = "";
    lf_trace_summary_line(&s, line, sizeof line);
    double kt = 0, kg = 0;
    *peak_tf = o->peak_tflops, *peak_gbps = o->peak_gbps;
    const int known = dk == ON_GPU && known_peaks(m->device_properties, &kt, &kg, dev, sizeof dev);
    if (*peak_tf <= 0 && known)
        *peak_tf = kt;
    if (*peak_gbps <= 0 && known)
        *peak_gbps = kg;
    put(b, "<p><b>");
    lf_html_name(b, line);
    put(b, "</b><br>%lld steps, %.3f us a step on the host, %.3f us of %s time a step; device: ", (long long)s.steps,
        s.step_ns / 1e3, s.device_ns_per_step / 1e3, dk == ON_CPU ? "CPU kernel" : "device");
    if (dk == ON_CPU)
        put(b, "CPU (linfuse's CPU kernels; no GPU in this trace)");
    else if (dk == ON_NONE)
        put(b, "none (the trace has host events only)");
    else
        lf_html_name(b, dev[0] ? dev : m->device_label ? m->device_label : "GPU");
    if (*peak_tf > 0)
        put(b, " (peaks %g TFLOP/s, %g GB/s%s)", *peak_tf, *peak_gbps, known && !o->peak_tflops ? ", datasheet" : "");
    put(b, "</p>\n");
    lf_trace_trust tr;
    LF_TRY(lf_trace_trust_count(t, &tr));
    lf_trace_trust_line(&tr, line, sizeof line);
    if (line[0]) {
        put(b, "<p class=\"warn\">");
        lf_html_name(b, line);
        put(b, "</p>\n");
    }
    return LF_OK;
}

/* The timeline of one step (o->step's, else the first), drawn inline. */
static lf_status put_timeline(lf_sbuf *b, const lf_trace *t, const lf_report_opts *o)
{
    const int64_t shown = step_drawn(t, o->step);
    if (shown >= 0)
        put(b, "<h2>One step on the timeline: ProfilerStep#%lld</h2>\n<div class=\"timeline\">\n", (long long)shown);
    else
        put(b, "<h2>The timeline (the trace has no steps)</h2>\n<div class=\"timeline\">\n");
    char *svg = NULL;
    size_t svg_n = 0;
    FILE *mf = open_memstream(&svg, &svg_n);
    int drawn = mf ? lf_trace_svg_draw(t, o->step, mf, t->meta.trace_name ? t->meta.trace_name : "trace", 0) : -1;
    if (mf)
        fclose(mf);
    if (drawn == -2) {
        free(svg);
        return lf_trace_step_missing(t, o->step, "lf_trace_report");
    }
    put(b, "%s</div>\n", drawn == 0 && svg ? svg : "(could not draw)");
    free(svg);
    return LF_OK;
}

/* PyTorch's table, its 30 rows of most device time. */
static lf_status put_table(lf_sbuf *b, const lf_trace *t)
{
    lf_table tab;
    lf_table_opts to = {.sort_by = LF_SORT_DEVICE_TIME_TOTAL, .row_limit = 30};
    char *tt = NULL;
    LF_TRY(lf_table_build_opts(t, &to, &tab));
    lf_status st = lf_table_format(&tab, &to, &tt);
    lf_table_free(&tab);
    LF_TRY(st);
    put(b, "<h2>key_averages().table()</h2>\n<pre>");
    lf_html_escaped(b, tt); /* its lines already safe: lf_table_format's */
    put(b, "</pre>\n");
    free(tt);
    return LF_OK;
}

/* What changed from this trace (A, the baseline) to the other (B): lf_trace_diff(t, other). */
static lf_status put_diff(lf_sbuf *b, const lf_trace *t, const lf_trace *other)
{
    lf_step_profile pa, pb;
    char *dt = NULL;
    LF_TRY(lf_step_profile_build(t, &pa));
    lf_status st = lf_step_profile_build(other, &pb);
    if (st == LF_OK) {
        st = lf_trace_diff(&pa, &pb, 0, &dt);
        lf_step_profile_free(&pb);
    }
    lf_step_profile_free(&pa);
    LF_TRY(st);
    put(b, "<h2>What changed from this trace (A) to ");
    lf_html_name(b, other->meta.trace_name ? other->meta.trace_name : "the other trace");
    put(b, " (B)</h2>\n<pre>");
    lf_html_escaped(b, dt); /* its lines already safe: lf_trace_diff's */
    put(b, "</pre>\n");
    free(dt);
    return LF_OK;
}

/* What the report says of one process's trace: its reading, a step's timeline, the breakdown and
 * each kernel's rate (where it has device work), PyTorch's table. */
static lf_status put_process(lf_sbuf *b, const lf_trace *t, const lf_report_opts *o)
{
    const device_kind dk = device_of(t);
    double peak_tf = 0, peak_gbps = 0;
    LF_TRY(put_reading(b, t, o, dk, &peak_tf, &peak_gbps));
    LF_TRY(put_timeline(b, t, o));
    if (dk == ON_NONE)
        put(b, "<h2>Device work</h2>\n<p>None: the trace has host events only (no kernels, copies or "
               "memsets), so there is no breakdown or roofline to draw.</p>\n");
    else {
        LF_TRY(put_breakdown(b, t, dk));
        LF_TRY(lf_report_kernels(b, t, dk == ON_CPU, peak_tf, peak_gbps));
    }
    return put_table(b, t);
}

/* A merged trace's ranks, each a section of its own: a rank's steps are its own, and ranks'
 * numbers averaged would say what no rank ran. */
static lf_status put_ranks(lf_sbuf *b, const lf_trace *t, const lf_report_opts *o)
{
    const int64_t n = lf_trace_ranks(t, NULL, 0);
    int64_t *ranks = n > 0 ? malloc((size_t)n * sizeof *ranks) : NULL;
    if (!ranks)
        return lf_fail(LF_ENOMEM, "lf_trace_report: out of memory");
    lf_trace_ranks(t, ranks, n);
    put(b, "<p>A merged trace of %lld ranks: each rank's steps, work and table in a section of its own.</p>\n",
        (long long)n);
    lf_status st = LF_OK;
    for (int64_t k = 0; k < n && st == LF_OK; k++) {
        lf_trace *one = NULL;
        put(b, "<h1 id=\"rank%lld\">Rank %lld</h1>\n", (long long)ranks[k], (long long)ranks[k]);
        st = lf_trace_of_rank(t, ranks[k], &one);
        if (st == LF_OK)
            st = put_process(b, one, o);
        lf_trace_free(one);
    }
    free(ranks);
    return st;
}

lf_status lf_trace_report_html(const lf_trace *t, const lf_trace *other, const lf_report_opts *o, char **text)
{
    LF_CHECK_PTR(t, "lf_trace_report", "t");
    LF_CHECK_PTR(text, "lf_trace_report", "text");
    *text = NULL;
    lf_report_opts d = {.step = LF_TRACE_FIRST_STEP};
    if (!o)
        o = &d;
    for (int i = 0; other && i < 2; i++) /* as lf_trace_diff's step profiles refuse it, before any work */
        if ((i ? other : t)->meta.merged_ranks)
            return lf_fail(LF_EINVAL,
                           "lf_trace_report: %s is a merged trace of %lld ranks; what changed between two traces "
                           "is said of one process's steps: compare the ranks' own traces",
                           i ? "the other trace (B)" : "the trace (A)", (long long)(i ? other : t)->meta.merged_ranks);
    lf_sbuf b = {0};
    put_title(&b, t);
    lf_status st = t->meta.merged_ranks ? put_ranks(&b, t, o) : put_process(&b, t, o);
    if (st == LF_OK && other)
        st = put_diff(&b, t, other);
    put(&b,
        "<p style=\"color:#888\">Written by linfuse %s. Nothing in this file is loaded from anywhere.</p>\n"
        "</body></html>\n",
        lf_version());
    if (st == LF_OK && b.oom)
        st = lf_fail(LF_ENOMEM, "lf_trace_report: out of memory");
    if (st != LF_OK) {
        free(b.p);
        return st;
    }
    *text = b.p;
    return LF_OK;
}

static int put_text(FILE *f, void *ctx)
{
    return fputs(ctx, f) < 0 ? -1 : 0;
}

lf_status lf_trace_report(const lf_trace *t, const lf_trace *other, const lf_report_opts *o, const char *path)
{
    LF_CHECK_PTR(path, "lf_trace_report", "path");
    char *text = NULL;
    LF_TRY(lf_trace_report_html(t, other, o, &text));
    lf_status s = lf_write_file_atomic(path, put_text, text);
    free(text);
    return s;
}
