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

#include "trace/shape_flops.h"
#include "trace/trace_impl.h"

#define put lf_sbuf_printf

/* Text into HTML, markup characters escaped. */
static void html_escaped(lf_sbuf *b, const char *s)
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

/* A name from the trace into HTML: control characters and bytes that are not UTF-8 as the text
 * outputs write them (lf_sbuf_term_str), then markup escaped. */
static void html(lf_sbuf *b, const char *name)
{
    lf_sbuf safe = {0};
    lf_sbuf_term_str(&safe, name, 0);
    if (safe.oom)
        b->oom = 1;
    html_escaped(b, safe.p ? safe.p : "");
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

static double elem_size(const char *tn)
{
    return !tn                                            ? 0
           : !strcmp(tn, "float")                         ? 4
           : !strcmp(tn, "double")                        ? 8
           : strstr(tn, "BFloat16") || strstr(tn, "Half") ? 2
                                                          : 0;
}

static double numel(json_t *dims)
{
    double n = 1;
    for (size_t k = 0; k < json_array_size(dims); k++)
        n *= (double)json_integer_value(json_array_get(dims, k));
    return n;
}

/* Bytes a matrix product's operands and result occupy, from the op's recorded sizes and dtypes
 * (for kernels whose traces carry no byte count: PyTorch's), and its FLOPs as PyTorch's with_flops
 * counts them (lf_trace_shape_flops, for traces recorded without it); 0 when the sizes cannot be
 * read. */
static double gemm_shape(const lf_trace_event *op, double *flops)
{
    *flops = 0;
    const size_t first = !strcmp(op->name, "aten::addmm") || !strcmp(op->name, "aten::baddbmm") ? 1 : 0;
    if (strcmp(op->name, "aten::mm") && strcmp(op->name, "aten::bmm") && !first)
        return 0;
    json_t *d = op->input_dims ? json_loads(op->input_dims, 0, NULL) : NULL;
    json_t *ty = op->input_types ? json_loads(op->input_types, 0, NULL) : NULL;
    json_t *a = json_array_get(d, first), *b = json_array_get(d, first + 1);
    const double es = elem_size(json_string_value(json_array_get(ty, first)));
    double bytes = 0;
    if (es && json_array_size(a) >= 2 && json_array_size(b) >= 2) {
        for (size_t i = 0; i < json_array_size(d); i++) /* every tensor operand */
            bytes += numel(json_array_get(d, i)) * elem_size(json_string_value(json_array_get(ty, i)));
        const double k = (double)json_integer_value(json_array_get(a, json_array_size(a) - 1));
        const double cols = (double)json_integer_value(json_array_get(b, json_array_size(b) - 1));
        if (k > 0 && json_array_size(d) <= first + 2) /* the result, unless recorded as an out= operand */
            bytes += numel(a) / k * cols * es;
        json_t *args = json_object();
        if (args && !json_object_set(args, "Input Dims", d) && !json_object_set(args, "Input type", ty))
            *flops = lf_trace_shape_flops(op->name, args);
        json_decref(args);
    }
    json_decref(d), json_decref(ty);
    return bytes;
}

typedef struct kern {
    const char *name;
    int64_t calls;
    double us, flops, bytes;
    int64_t with_flops, with_bytes;
} kern;

static int by_time_desc(const void *a, const void *b)
{
    double x = ((const kern *)a)->us, y = ((const kern *)b)->us;
    return (x < y) - (x > y);
}

/* An External id's slot in an open-addressing table (keys 0: empty; op -1 in a new slot). */
static uint64_t slot(int64_t *keys, int64_t *op, int64_t cap, int64_t id)
{
    uint64_t h = ((uint64_t)id * 0x9e3779b97f4a7c15ull) & (uint64_t)(cap - 1);
    while (keys[h] && keys[h] != id)
        h = (h + 1) & (uint64_t)(cap - 1);
    if (!keys[h])
        keys[h] = id, op[h] = -1;
    return h;
}

/* Each kernel name's calls, time, FLOPs and bytes: the kernel's own, else its op's when the op
 * ran this one kernel (PyTorch's FLOPs are an op's; an op with several kernels cannot be split). */
static kern *kernels_of(const lf_trace *t, int64_t *count)
{
    const int64_t n = t->n;
    kern *k = calloc((size_t)(n + 1), sizeof *k);
    int64_t *op_of_ext = NULL, *kernels_of_ext = NULL, cap = 16;
    while (cap < 2 * n + 16)
        cap *= 2;
    int64_t *keys = calloc((size_t)cap, sizeof *keys);
    op_of_ext = malloc((size_t)cap * sizeof *op_of_ext);
    kernels_of_ext = calloc((size_t)cap, sizeof *kernels_of_ext);
    lf_strmap names = {0};
    if (!k || !keys || !op_of_ext || !kernels_of_ext || !lf_strmap_init(&names, n)) {
        free(k), free(keys), free(op_of_ext), free(kernels_of_ext);
        lf_strmap_free(&names);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (e->ext_id && e->cat == LF_TC_CPU_OP) {
            uint64_t h = slot(keys, op_of_ext, cap, e->ext_id);
            if (op_of_ext[h] < 0)
                op_of_ext[h] = i;
        }
        if (e->ext_id && e->cat == LF_TC_KERNEL)
            kernels_of_ext[slot(keys, op_of_ext, cap, e->ext_id)]++;
    }
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (e->cat != LF_TC_KERNEL || e->dur_ns < 0)
            continue;
        lf_strmap_entry *s = lf_strmap_get(&names, e->name, 0);
        if (!s)
            break;
        if (s->val < 0)
            s->val = m, k[m++].name = e->name;
        kern *r = &k[s->val];
        r->calls++;
        r->us += (double)e->dur_ns / 1e3;
        double fl = e->flops, by = e->bytes;
        if (e->ext_id && (fl <= 0 || by <= 0)) {
            uint64_t h = slot(keys, op_of_ext, cap, e->ext_id);
            if (op_of_ext[h] >= 0 && kernels_of_ext[h] == 1) {
                const lf_trace_event *op = &t->ev[op_of_ext[h]];
                double shape_fl;
                const double shape_by = gemm_shape(op, &shape_fl);
                fl = fl > 0 ? fl : op->flops > 0 ? op->flops : shape_fl;
                by = by > 0 ? by : shape_by;
            }
        }
        if (fl > 0)
            r->flops += fl, r->with_flops++;
        if (by > 0)
            r->bytes += by, r->with_bytes++;
    }
    free(keys), free(op_of_ext), free(kernels_of_ext);
    lf_strmap_free(&names);
    qsort(k, (size_t)m, sizeof *k, by_time_desc);
    *count = m;
    return k;
}

/* A log-log roofline: the device's roofs, a dot per kernel that has both FLOPs and bytes. */
static void roofline(lf_sbuf *b, const kern *k, int64_t n, double peak_tf, double peak_gbps)
{
    const double W = 640, H = 380, L = 60, R = 20, T = 20, B = 45;
    const double x0 = -1, x1 = 4, y0 = -3, y1 = peak_tf > 0 ? ceil(log10(peak_tf * 2)) : 4; /* decades */
#define PX(v) (L + (log10(v) - x0) / (x1 - x0) * (W - L - R))
#define PY(v) (T + (y1 - log10(v)) / (y1 - y0) * (H - T - B))
    put(b,
        "<svg class=\"roofline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
        "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
        W, H);
    for (double d = x0; d <= x1; d++)
        put(b,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
            "text-anchor=\"middle\">%g</text>\n",
            PX(pow(10, d)), T, PX(pow(10, d)), H - B, PX(pow(10, d)), H - B + 15, pow(10, d));
    for (double d = y0; d <= y1; d++)
        put(b,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
            "text-anchor=\"end\">%g</text>\n",
            L, PY(pow(10, d)), W - R, PY(pow(10, d)), L - 4, PY(pow(10, d)) + 4, pow(10, d));
    put(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">FLOP per byte</text>\n", (L + W - R) / 2, H - 8);
    put(b, "<text x=\"14\" y=\"%.1f\" transform=\"rotate(-90 14 %.1f)\" text-anchor=\"middle\">TFLOP/s</text>\n",
        (T + H - B) / 2, (T + H - B) / 2);
    if (peak_tf > 0 && peak_gbps > 0) {
        const double ridge = peak_tf * 1e3 / peak_gbps, lo = pow(10, x0), hi = pow(10, x1);
        put(b,
            "<polyline class=\"roof\" fill=\"none\" stroke=\"#333\" stroke-width=\"2\" points=\"%.1f,%.1f %.1f,%.1f "
            "%.1f,%.1f\"/>\n",
            PX(lo), PY(lo * peak_gbps / 1e3), PX(ridge), PY(peak_tf), PX(hi), PY(peak_tf));
        put(b, "<text x=\"%.1f\" y=\"%.1f\">%g TFLOP/s, %g GB/s</text>\n", PX(ridge) + 6, PY(peak_tf) - 6, peak_tf,
            peak_gbps);
    }
    for (int64_t i = 0; i < n; i++) {
        if (k[i].with_flops != k[i].calls || k[i].with_bytes != k[i].calls || k[i].us <= 0)
            continue;
        double ai = k[i].flops / k[i].bytes, tf = k[i].flops / (k[i].us * 1e6);
        if (ai < pow(10, x0) || ai > pow(10, x1) || tf < pow(10, y0) || tf > pow(10, y1))
            continue;
        put(b, "<circle class=\"kernel\" cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"#d01c8b\" stroke=\"#7a0177\"><title>",
            PX(ai), PY(tf));
        html(b, k[i].name);
        put(b, ": %.1f TFLOP/s at %.1f FLOP/byte</title></circle>\n", tf, ai);
    }
    put(b, "</svg>\n");
#undef PX
#undef PY
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

/* Each kernel's rate and traffic: TFLOP/s on a GPU, against its peaks on a roofline; GFLOP/s on
 * the CPU, whose roofline is drawn only against peaks given (no datasheet names a CPU here). */
static lf_status put_kernels(lf_sbuf *b, const lf_trace *t, device_kind dk, double peak_tf, double peak_gbps)
{
    int64_t nk = 0;
    kern *k = kernels_of(t, &nk);
    if (!k)
        return lf_fail(LF_ENOMEM, "lf_trace_report: out of memory");
    const int cpu = dk == ON_CPU;
    const double per_us = cpu ? 1e3 : 1e6; /* FLOPs per us to GFLOP/s or TFLOP/s */
    if (!cpu || (peak_tf > 0 && peak_gbps > 0)) {
        put(b, "<h2>Kernels against the %s peaks</h2>\n", cpu ? "given" : "device's");
        roofline(b, k, nk, peak_tf, peak_gbps);
    } else {
        put(b, "<h2>Kernels</h2>\n<p>No roofline: a CPU has no datasheet peaks here (--peak-tflops and --peak-gbps "
               "draw one).</p>\n");
        peak_tf = peak_gbps = 0;
    }
    put(b,
        "<table><tr><th class=\"n\">kernel</th><th>calls</th><th>total us</th><th>avg us</th><th>%s</th>%s"
        "<th>GB/s</th>%s<th>FLOP/byte</th></tr>\n",
        cpu ? "GFLOP/s" : "TFLOP/s", peak_tf > 0 ? "<th>of peak</th>" : "", peak_gbps > 0 ? "<th>of peak</th>" : "");
    for (int64_t i = 0; i < nk; i++) {
        put(b, "<tr><td class=\"n\">");
        html(b, k[i].name);
        put(b, "</td><td>%lld</td><td>%.3f</td><td>%.3f</td>", (long long)k[i].calls, k[i].us,
            k[i].us / (double)k[i].calls);
        const int fl = k[i].with_flops == k[i].calls && k[i].us > 0, by = k[i].with_bytes == k[i].calls && k[i].us > 0;
        const double rate = fl ? k[i].flops / (k[i].us * per_us) : 0, gb = by ? k[i].bytes / (k[i].us * 1e3) : 0;
        if (fl)
            put(b, "<td>%.1f</td>", rate);
        else
            put(b, "<td>-</td>");
        if (peak_tf > 0 && fl)
            put(b, "<td>%.0f%%</td>", 100 * rate / peak_tf);
        else if (peak_tf > 0)
            put(b, "<td>-</td>");
        if (by)
            put(b, cpu ? "<td>%.2f</td>" : "<td>%.0f</td>", gb);
        else
            put(b, "<td>-</td>");
        if (peak_gbps > 0 && by)
            put(b, "<td>%.0f%%</td>", 100 * gb / peak_gbps);
        else if (peak_gbps > 0)
            put(b, "<td>-</td>");
        if (by && fl)
            put(b, "<td>%.1f</td>", k[i].flops / k[i].bytes);
        else
            put(b, "<td>-</td>");
        put(b, "</tr>\n");
    }
    put(b, "</table>\n<p>FLOPs and bytes are the kernel's own where the trace has them (linfuse's), else its op's "
           "when the op ran that one kernel (PyTorch counts FLOPs per op under with_flops; without it a matrix "
           "product's FLOPs come from its recorded sizes, 2 x M x N x K, and its bytes are its operands' and "
           "result's sizes).</p>\n");
    free(k);
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

/* The title, the reading in one line, and the device with its peaks (o's, else its datasheet's
 * where the trace names a known GPU: *peak_tf, *peak_gbps). */
static lf_status put_heading(lf_sbuf *b, const lf_trace *t, const lf_report_opts *o, device_kind dk, double *peak_tf,
                             double *peak_gbps)
{
    const lf_trace_meta *m = &t->meta;
    put(b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>linfuse report: ");
    html(b, m->trace_name ? m->trace_name : "trace");
    put(b, "</title><style>%s</style></head><body>\n<h1>", STYLE);
    html(b, m->trace_name ? m->trace_name : "trace");
    put(b, "</h1>\n");
    lf_trace_summary s;
    LF_TRY(lf_trace_summarize(t, &s));
    char line[360], dev[128] = "";
    lf_trace_summary_line(&s, line, sizeof line);
    double kt = 0, kg = 0;
    *peak_tf = o->peak_tflops, *peak_gbps = o->peak_gbps;
    const int known = dk == ON_GPU && known_peaks(m->device_properties, &kt, &kg, dev, sizeof dev);
    if (*peak_tf <= 0 && known)
        *peak_tf = kt;
    if (*peak_gbps <= 0 && known)
        *peak_gbps = kg;
    put(b, "<p><b>");
    html(b, line);
    put(b, "</b><br>%lld steps, %.3f us a step on the host, %.3f us of %s time a step; device: ", (long long)s.steps,
        s.step_ns / 1e3, s.device_ns_per_step / 1e3, dk == ON_CPU ? "CPU kernel" : "device");
    if (dk == ON_CPU)
        put(b, "CPU (linfuse's CPU kernels; no GPU in this trace)");
    else if (dk == ON_NONE)
        put(b, "none (the trace has host events only)");
    else
        html(b, dev[0] ? dev : m->device_label ? m->device_label : "GPU");
    if (*peak_tf > 0)
        put(b, " (peaks %g TFLOP/s, %g GB/s%s)", *peak_tf, *peak_gbps, known && !o->peak_tflops ? ", datasheet" : "");
    put(b, "</p>\n");
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
    html_escaped(b, tt); /* its lines already safe: lf_table_format's */
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
    html(b, other->meta.trace_name ? other->meta.trace_name : "the other trace");
    put(b, " (B)</h2>\n<pre>");
    html_escaped(b, dt); /* its lines already safe: lf_trace_diff's */
    put(b, "</pre>\n");
    free(dt);
    return LF_OK;
}

lf_status lf_trace_report_html(const lf_trace *t, const lf_trace *other, const lf_report_opts *o, char **text)
{
    LF_CHECK_PTR(t, "lf_trace_report", "t");
    LF_CHECK_PTR(text, "lf_trace_report", "text");
    *text = NULL;
    lf_report_opts d = {.step = LF_TRACE_FIRST_STEP};
    if (!o)
        o = &d;
    lf_sbuf b = {0};
    const device_kind dk = device_of(t);
    double peak_tf = 0, peak_gbps = 0;
    lf_status st = put_heading(&b, t, o, dk, &peak_tf, &peak_gbps);
    if (st == LF_OK)
        st = put_timeline(&b, t, o);
    /* the breakdown and each kernel's rate: what a trace with device work has */
    if (st == LF_OK && dk == ON_NONE)
        put(&b, "<h2>Device work</h2>\n<p>None: the trace has host events only (no kernels, copies or "
                "memsets), so there is no breakdown or roofline to draw.</p>\n");
    else if (st == LF_OK && (st = put_breakdown(&b, t, dk)) == LF_OK)
        st = put_kernels(&b, t, dk, peak_tf, peak_gbps);
    if (st == LF_OK)
        st = put_table(&b, t);
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
