/* One step of a trace drawn as an SVG timeline, for people without Perfetto: a lane per host
 * thread with ops nested by depth, a lane per device stream with kernels, arrows from each op
 * to the kernel it launched, a time axis. Layer: trace/. */
#define _GNU_SOURCE /* qsort_r */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"

enum { WIDTH = 1400, LEFT = 210, RIGHT = 20, ROW = 22, TOP = 56, LANE_GAP = 14 };

typedef struct lane {
    int64_t pid, tid;
    int device;
    int depth; /* rows used */
    double y;  /* top */
} lane;

typedef struct item {
    int64_t i; /* event index */
    int lane, row;
} item;

static int by_start(const void *a, const void *b, void *ctx)
{
    const lf_trace *t = ctx;
    const lf_trace_event *x = &t->ev[((const item *)a)->i], *y = &t->ev[((const item *)b)->i];
    if (x->ts_ns != y->ts_ns)
        return x->ts_ns < y->ts_ns ? -1 : 1;
    return x->dur_ns > y->dur_ns ? -1 : x->dur_ns < y->dur_ns;
}

static int step_by_start(const void *a, const void *b, void *ctx)
{
    const lf_trace *t = ctx;
    int64_t x = t->ev[*(const int64_t *)a].ts_ns, y = t->ev[*(const int64_t *)b].ts_ns;
    return (x > y) - (x < y);
}

/* XML text: control characters and bytes that are not UTF-8 written as the text outputs write
 * them (lf_sbuf_term_str: "\x1b", U+FFFD; an XML parser rejects both raw), markup characters
 * escaped, at most max_chars characters with an ellipsis in place of the rest; cut between
 * characters, never inside one. */
static void xml_text(FILE *f, const char *raw, int max_chars)
{
    lf_sbuf safe = {0};
    lf_sbuf_term_str(&safe, raw, 0);
    const char *s = safe.p ? safe.p : "";
    size_t total = 0;
    lf_utf8_prefix(s, (size_t)-1, &total);
    for (int n = 0; *s && n < max_chars; n++) {
        if (n == max_chars - 1 && (int)total > max_chars) {
            fputs("\xe2\x80\xa6", f); /* an ellipsis */
            break;
        }
        const int k = lf_utf8_char(s);
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fwrite(s, 1, (size_t)(k > 0 ? k : 1), f);
        }
        s += k > 1 ? k : 1;
    }
    free(safe.p);
}

static const char *fill_for(const lf_trace_event *e)
{
    static const char *const op_colors[] = {"#9ecae1", "#a1d99b", "#fdd0a2", "#bcbddc", "#c7e9c0", "#fcbba1"};
    switch (e->cat) {
    case LF_TC_KERNEL:
        return "#e6550d";
    case LF_TC_MEMCPY:
    case LF_TC_MEMSET:
        return "#756bb1";
    case LF_TC_USER_ANNOTATION:
        return "#d9d9d9";
    case LF_TC_RUNTIME:
    case LF_TC_DRIVER:
        return "#6baed6";
    default: {
        unsigned h = 2166136261u;
        for (const char *s = e->name; *s; s++)
            h = (h ^ (unsigned char)*s) * 16777619u;
        return op_colors[h % 6];
    }
    }
}

/* A tick step of 1, 2 or 5 times a power of ten giving about 8 ticks over span ns. */
static double tick_step(double span)
{
    double raw = span / 8, p = pow(10, floor(log10(raw)));
    return raw / p < 2 ? p : raw / p < 5 ? 2 * p : 5 * p;
}

static void put_time(FILE *f, double ns)
{
    if (ns >= 1e6)
        fprintf(f, "%.3g ms", ns / 1e6);
    else
        fprintf(f, "%.3g us", ns / 1e3);
}

int64_t lf_trace_step_number(const lf_trace_event *e)
{
    if (e->cat != LF_TC_USER_ANNOTATION || strncmp(e->name, "ProfilerStep#", 13))
        return -1;
    char *end;
    const long long n = strtoll(e->name + 13, &end, 10);
    return end != e->name + 13 && !*end && n >= 0 ? n : -1;
}

lf_status lf_trace_step_missing(const lf_trace *t, int step, const char *fn)
{
    int64_t lo = INT64_MAX, hi = -1;
    for (int64_t i = 0; i < t->n; i++) {
        const int64_t n = lf_trace_step_number(&t->ev[i]);
        if (n >= 0)
            lo = n < lo ? n : lo, hi = n > hi ? n : hi;
    }
    if (hi < 0)
        return lf_fail(LF_EINVAL,
                       "%s: step %d: the trace has no ProfilerStep#N ranges (without a step, the whole "
                       "trace is drawn)",
                       fn, step);
    return lf_fail(LF_EINVAL, "%s: the trace has no ProfilerStep#%d; its steps are ProfilerStep#%lld to #%lld%s", fn,
                   step, (long long)lo, (long long)hi, step >= lo && step <= hi ? " (not every number between)" : "");
}

int lf_trace_svg_draw(const lf_trace *t, int step, FILE *f, const char *path, int standalone)
{
    /* the window: the step's range, the first at its number (a merged trace has one per rank) */
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    const char *title = "whole trace";
    int64_t *steps = malloc((size_t)(t->n + 1) * sizeof *steps), ns = 0, pick = -1;
    if (!steps)
        return -1;
    for (int64_t i = 0; i < t->n; i++)
        if (lf_trace_step_number(&t->ev[i]) >= 0)
            steps[ns++] = i;
    qsort_r(steps, (size_t)ns, sizeof *steps, step_by_start, (void *)t);
    for (int64_t k = 0; k < ns && pick < 0; k++)
        if (step < 0 || lf_trace_step_number(&t->ev[steps[k]]) == step)
            pick = steps[k];
    if (pick < 0 && step >= 0) {
        free(steps);
        return -2;
    }
    if (pick >= 0) {
        const lf_trace_event *s = &t->ev[pick];
        lo = s->ts_ns, hi = s->ts_ns + s->dur_ns, title = s->name;
        /* device work launched in the step often runs after the host has moved on: widen the
         * window so the step's kernels are drawn whole */
        int64_t *when = lf_trace_launch_times(t);
        int64_t end = hi;
        for (int64_t i = 0; when && i < t->n; i++)
            if (lf_trace_cat_is_device(t->ev[i].cat) && t->ev[i].cat != LF_TC_GPU_ANNOTATION && when[i] >= lo &&
                when[i] <= hi && t->ev[i].ts_ns + t->ev[i].dur_ns > end)
                end = t->ev[i].ts_ns + t->ev[i].dur_ns;
        free(when);
        hi = end;
    } else {
        for (int64_t i = 0; i < t->n; i++)
            if (t->ev[i].dur_ns >= 0 && t->ev[i].cat != LF_TC_OTHER) {
                lo = t->ev[i].ts_ns < lo ? t->ev[i].ts_ns : lo;
                hi = t->ev[i].ts_ns + t->ev[i].dur_ns > hi ? t->ev[i].ts_ns + t->ev[i].dur_ns : hi;
            }
    }
    free(steps);
    if (lo > hi) /* nothing to draw: an empty window at 0 (found by the fuzzer) */
        lo = hi = 0;
    if (hi <= lo)
        hi = lo + 1;
    /* the items in the window, grouped into lanes, nested into rows */
    item *it = malloc((size_t)(t->n + 1) * sizeof *it);
    lane *ln = calloc(64, sizeof *ln);
    int64_t ni = 0;
    int nl = 0;
    if (!it || !ln) {
        free(it), free(ln);
        return -1;
    }
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (e->dur_ns < 0 || e->cat == LF_TC_OTHER || e->cat == LF_TC_MEMORY || e->cat == LF_TC_OVERHEAD ||
            e->cat == LF_TC_GPU_ANNOTATION || e->ts_ns + e->dur_ns < lo || e->ts_ns > hi)
            continue;
        int dev = lf_trace_cat_is_device(e->cat), l;
        for (l = 0; l < nl; l++)
            if (ln[l].pid == e->pid && ln[l].tid == e->tid && ln[l].device == dev)
                break;
        if (l == nl) {
            if (nl == 64)
                continue; /* more lanes than a page can show */
            ln[nl++] = (lane){e->pid, e->tid, dev, 1, 0};
        }
        it[ni++] = (item){i, l, 0};
    }
    qsort_r(it, (size_t)ni, sizeof *it, by_start, (void *)t);
    for (int l = 0; l < nl; l++) { /* rows: depth in each lane's nesting */
        int64_t stack_end[64];
        int depth = 0;
        for (int64_t k = 0; k < ni; k++) {
            if (it[k].lane != l)
                continue;
            const lf_trace_event *e = &t->ev[it[k].i];
            while (depth > 0 && e->ts_ns >= stack_end[depth - 1])
                depth--;
            it[k].row = ln[l].device ? 0 : depth;
            if (!ln[l].device && depth < 63)
                stack_end[depth++] = e->ts_ns + e->dur_ns;
            if (it[k].row + 1 > ln[l].depth)
                ln[l].depth = it[k].row + 1;
        }
    }
    /* host lanes first, then device lanes */
    double y = TOP;
    for (int pass = 0; pass < 2; pass++)
        for (int l = 0; l < nl; l++)
            if (ln[l].device == pass) {
                ln[l].y = y;
                y += ln[l].depth * ROW + LANE_GAP;
            }
    const double height = y + 40, span = (double)(hi - lo), plot = WIDTH - LEFT - RIGHT;
#define X(ns_) (LEFT + ((double)(ns_) - (double)lo) / span * plot)
    if (standalone)
        fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" viewBox=\"0 0 %d %.0f\" "
            "font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"11\">\n",
            WIDTH, height, WIDTH, height);
    fprintf(f, "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" "
               "markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#444\"/>"
               "</marker></defs>\n");
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">");
    xml_text(f, title, 80);
    fprintf(f, " \xe2\x80\x94 ");
    put_time(f, span);
    fprintf(f, "</text>\n<text x=\"10\" y=\"38\" fill=\"#555\">");
    xml_text(f, t->meta.trace_name ? t->meta.trace_name : path, 160);
    fprintf(f, "</text>\n");
    /* time axis with grid lines */
    double st = tick_step(span);
    for (double tk = 0; tk <= span + 1e-9; tk += st) {
        double x = X(lo + tk);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#eee\"/>\n", x, TOP - 4, x, y);
        fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#555\">", x, y + 16);
        put_time(f, tk);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%.0f\" x2=\"%d\" y2=\"%.0f\" stroke=\"#555\"/>\n", LEFT, y + 2, WIDTH - RIGHT,
            y + 2);
    /* lane labels */
    for (int l = 0; l < nl; l++) {
        fprintf(f, "<text class=\"lane\" x=\"10\" y=\"%.0f\" font-weight=\"bold\">", ln[l].y + 15);
        const char *nm = NULL;
        for (int64_t k = 0; k < t->n_tracks && !nm; k++)
            if (t->tracks[k].pid == ln[l].pid && t->tracks[k].tid == ln[l].tid)
                nm = t->tracks[k].name;
        char fallback[64];
        snprintf(fallback, sizeof fallback, "%s %lld/%lld", ln[l].device ? "device" : "thread", (long long)ln[l].pid,
                 (long long)ln[l].tid);
        xml_text(f, nm ? nm : fallback, 30);
        fprintf(f, "</text>\n");
    }
    /* slices */
    for (int64_t k = 0; k < ni; k++) {
        const lf_trace_event *e = &t->ev[it[k].i];
        int64_t a = e->ts_ns < lo ? lo : e->ts_ns, b = e->ts_ns + e->dur_ns > hi ? hi : e->ts_ns + e->dur_ns;
        double x0 = X(a), w = X(b) - x0, ry = ln[it[k].lane].y + it[k].row * ROW;
        if (w < 1)
            w = 1;
        fprintf(f, "<g class=\"%s\"><title>", lf_trace_cat_name(e->cat));
        xml_text(f, e->name, 400);
        fprintf(f, " (");
        put_time(f, (double)e->dur_ns);
        fprintf(f,
                ")</title><rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" stroke=\"#333\" "
                "stroke-width=\"0.5\"/>",
                x0, ry, w, ROW - 3, fill_for(e));
        int chars = (int)((w - 4) / 6.2);
        if (chars >= 3) {
            fprintf(f, "<text x=\"%.2f\" y=\"%.1f\">", x0 + 2, ry + 13);
            xml_text(f, e->name, chars);
            fprintf(f, "</text>");
        }
        fprintf(f, "</g>\n");
    }
    /* flow arrows: from the launching lane to the device slice */
    for (int64_t k = 0; k < ni; k++) {
        const lf_trace_event *e = &t->ev[it[k].i];
        if (!lf_trace_cat_is_device(e->cat) || e->flow_pid < 0)
            continue;
        int hl = -1;
        for (int l = 0; l < nl && hl < 0; l++)
            if (!ln[l].device && ln[l].pid == e->flow_pid && ln[l].tid == e->flow_tid)
                hl = l;
        if (hl < 0)
            continue;
        double x = X(e->ts_ns), y0 = ln[hl].y + ln[hl].depth * ROW - 3, y1 = ln[it[k].lane].y;
        fprintf(f,
                "<line class=\"flow\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#444\" "
                "stroke-width=\"1\" marker-end=\"url(#arrow)\"/>\n",
                x, y0, x, y1 - 1);
    }
    fprintf(f, "</svg>\n");
#undef X
    free(it), free(ln);
    return ferror(f) ? -1 : 0;
}

typedef struct svg_ctx {
    const lf_trace *t;
    int step;
    const char *path;
    int rc;
} svg_ctx;

static int svg_cb(FILE *f, void *ctx)
{
    svg_ctx *c = ctx;
    c->rc = lf_trace_svg_draw(c->t, c->step, f, c->path, 1);
    return c->rc;
}

lf_status lf_trace_svg(const lf_trace *t, int step, const char *path)
{
    LF_CHECK_PTR(t, "lf_trace_svg", "t");
    LF_CHECK_PTR(path, "lf_trace_svg", "path");
    svg_ctx c = {t, step, path, 0};
    lf_status s = lf_write_file_atomic(path, svg_cb, &c);
    if (s != LF_OK && c.rc == -2)
        return lf_trace_step_missing(t, step, "lf_trace_svg");
    return s;
}
