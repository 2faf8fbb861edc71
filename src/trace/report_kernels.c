/* Each kernel's rate in an HTML report (lf_trace_report): its calls, time, FLOPs and bytes (the
 * kernel's own, else its op's), TFLOP/s and GB/s against the device's peaks, and a roofline.
 * Layer: trace/. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/report_parts.h"
#include "trace/shape_flops.h"
#include "trace/trace_impl.h"

#define put lf_sbuf_printf

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
        lf_html_name(b, k[i].name);
        put(b, ": %.1f TFLOP/s at %.1f FLOP/byte</title></circle>\n", tf, ai);
    }
    put(b, "</svg>\n");
#undef PX
#undef PY
}

/* Each kernel's rate and traffic: TFLOP/s on a GPU, against its peaks on a roofline; GFLOP/s on
 * the CPU, whose roofline is drawn only against peaks given (no datasheet names a CPU here). */
lf_status lf_report_kernels(lf_sbuf *b, const lf_trace *t, int cpu, double peak_tf, double peak_gbps)
{
    int64_t nk = 0;
    kern *k = kernels_of(t, &nk);
    if (!k)
        return lf_fail(LF_ENOMEM, "lf_trace_report: out of memory");
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
        lf_html_name(b, k[i].name);
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
