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

/* One drawing: the window [lo, hi] in ns, its title, the events in it as items in lanes. */
typedef struct drawing {
    const lf_trace *t;
    FILE *f;
    int64_t lo, hi;
    const char *title;
    item *it; /* the window's events, by start */
    int64_t ni;
    lane *ln; /* host lanes, then device lanes, at most 64 */
    int nl;
    double bottom; /* below the last lane */
    double span, plot;
} drawing;

/* The page's x for time ns. */
static double x_of(const drawing *d, double ns)
{
    return LEFT + (ns - (double)d->lo) / d->span * d->plot;
}

/* The end of the step [lo, hi] widened so that the device work launched in it, which often runs
 * after the host has moved on, is drawn whole. */
static int64_t step_end(const lf_trace *t, int64_t lo, int64_t hi)
{
    int64_t *when = lf_trace_launch_times(t);
    int64_t end = hi;
    for (int64_t i = 0; when && i < t->n; i++)
        if (lf_trace_cat_is_device(t->ev[i].cat) && t->ev[i].cat != LF_TC_GPU_ANNOTATION && when[i] >= lo &&
            when[i] <= hi && t->ev[i].ts_ns + t->ev[i].dur_ns > end)
            end = t->ev[i].ts_ns + t->ev[i].dur_ns;
    free(when);
    return end;
}

/* The window: step's range, the first at its number (a merged trace has one per rank), or the
 * first step with step < 0, or the whole trace when it has none; 0, -1 out of memory, -2 no
 * such step. */
static int pick_window(drawing *d, int step)
{
    const lf_trace *t = d->t;
    d->lo = INT64_MAX, d->hi = INT64_MIN, d->title = "whole trace";
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
    free(steps);
    if (pick < 0 && step >= 0)
        return -2;
    if (pick >= 0) {
        const lf_trace_event *s = &t->ev[pick];
        d->lo = s->ts_ns, d->hi = s->ts_ns + s->dur_ns, d->title = s->name;
        d->hi = step_end(t, d->lo, d->hi);
    } else {
        for (int64_t i = 0; i < t->n; i++)
            if (t->ev[i].dur_ns >= 0 && t->ev[i].cat != LF_TC_OTHER) {
                d->lo = t->ev[i].ts_ns < d->lo ? t->ev[i].ts_ns : d->lo;
                d->hi = t->ev[i].ts_ns + t->ev[i].dur_ns > d->hi ? t->ev[i].ts_ns + t->ev[i].dur_ns : d->hi;
            }
    }
    if (d->lo > d->hi) /* nothing to draw: an empty window at 0 (found by the fuzzer) */
        d->lo = d->hi = 0;
    if (d->hi <= d->lo)
        d->hi = d->lo + 1;
    return 0;
}

/* The items in the window, grouped into lanes (a host thread's, or a device stream's), by start. */
static void collect_items(drawing *d)
{
    const lf_trace *t = d->t;
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (e->dur_ns < 0 || e->cat == LF_TC_OTHER || e->cat == LF_TC_MEMORY || e->cat == LF_TC_OVERHEAD ||
            e->cat == LF_TC_GPU_ANNOTATION || e->ts_ns + e->dur_ns < d->lo || e->ts_ns > d->hi)
            continue;
        int dev = lf_trace_cat_is_device(e->cat), l;
        for (l = 0; l < d->nl; l++)
            if (d->ln[l].pid == e->pid && d->ln[l].tid == e->tid && d->ln[l].device == dev)
                break;
        if (l == d->nl) {
            if (d->nl == 64)
                continue; /* more lanes than a page can show */
            d->ln[d->nl++] = (lane){e->pid, e->tid, dev, 1, 0};
        }
        d->it[d->ni++] = (item){i, l, 0};
    }
    qsort_r(d->it, (size_t)d->ni, sizeof *d->it, by_start, (void *)t);
}

/* Each item's row: its depth in its host lane's nesting (device lanes have one row); then the
 * lanes placed down the page, host lanes first. */
static void place_rows(drawing *d)
{
    for (int l = 0; l < d->nl; l++) {
        int64_t stack_end[64];
        int depth = 0;
        for (int64_t k = 0; k < d->ni; k++) {
            if (d->it[k].lane != l)
                continue;
            const lf_trace_event *e = &d->t->ev[d->it[k].i];
            while (depth > 0 && e->ts_ns >= stack_end[depth - 1])
                depth--;
            d->it[k].row = d->ln[l].device ? 0 : depth;
            if (!d->ln[l].device && depth < 63)
                stack_end[depth++] = e->ts_ns + e->dur_ns;
            if (d->it[k].row + 1 > d->ln[l].depth)
                d->ln[l].depth = d->it[k].row + 1;
        }
    }
    double y = TOP;
    for (int pass = 0; pass < 2; pass++)
        for (int l = 0; l < d->nl; l++)
            if (d->ln[l].device == pass) {
                d->ln[l].y = y;
                y += d->ln[l].depth * ROW + LANE_GAP;
            }
    d->bottom = y;
    d->span = (double)(d->hi - d->lo);
    d->plot = WIDTH - LEFT - RIGHT;
}

/* The SVG's start, the title and the trace's name. */
static void put_header(const drawing *d, const char *path, int standalone)
{
    FILE *f = d->f;
    const double height = d->bottom + 40;
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
    xml_text(f, d->title, 80);
    fprintf(f, " \xe2\x80\x94 ");
    put_time(f, d->span);
    fprintf(f, "</text>\n<text x=\"10\" y=\"38\" fill=\"#555\">");
    xml_text(f, d->t->meta.trace_name ? d->t->meta.trace_name : path, 160);
    fprintf(f, "</text>\n");
}

/* The time axis with grid lines, and each lane's name. */
static void put_axis_and_lanes(const drawing *d)
{
    FILE *f = d->f;
    const lf_trace *t = d->t;
    const double y = d->bottom, st = tick_step(d->span);
    for (double tk = 0; tk <= d->span + 1e-9; tk += st) {
        double x = x_of(d, (double)d->lo + tk);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#eee\"/>\n", x, TOP - 4, x, y);
        fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#555\">", x, y + 16);
        put_time(f, tk);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%.0f\" x2=\"%d\" y2=\"%.0f\" stroke=\"#555\"/>\n", LEFT, y + 2, WIDTH - RIGHT,
            y + 2);
    for (int l = 0; l < d->nl; l++) {
        const lane *ln = &d->ln[l];
        fprintf(f, "<text class=\"lane\" x=\"10\" y=\"%.0f\" font-weight=\"bold\">", ln->y + 15);
        const char *nm = NULL;
        for (int64_t k = 0; k < t->n_tracks && !nm; k++)
            if (t->tracks[k].pid == ln->pid && t->tracks[k].tid == ln->tid)
                nm = t->tracks[k].name;
        char fallback[64];
        snprintf(fallback, sizeof fallback, "%s %lld/%lld", ln->device ? "device" : "thread", (long long)ln->pid,
                 (long long)ln->tid);
        xml_text(f, nm ? nm : fallback, 30);
        fprintf(f, "</text>\n");
    }
}

/* Every item as a box with its name (whole in its tooltip). */
static void put_slices(const drawing *d)
{
    FILE *f = d->f;
    for (int64_t k = 0; k < d->ni; k++) {
        const lf_trace_event *e = &d->t->ev[d->it[k].i];
        int64_t a = e->ts_ns < d->lo ? d->lo : e->ts_ns;
        int64_t b = e->ts_ns + e->dur_ns > d->hi ? d->hi : e->ts_ns + e->dur_ns;
        double x0 = x_of(d, (double)a), w = x_of(d, (double)b) - x0, ry = d->ln[d->it[k].lane].y + d->it[k].row * ROW;
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
}

/* Flow arrows: from the launch on its host lane (at the launch's time where the trace has it,
 * kept inside the window) down to each device slice; the slant is the launch's wait. */
static void put_flows(const drawing *d)
{
    for (int64_t k = 0; k < d->ni; k++) {
        const lf_trace_event *e = &d->t->ev[d->it[k].i];
        if (!lf_trace_cat_is_device(e->cat) || e->flow_pid < 0)
            continue;
        int hl = -1;
        for (int l = 0; l < d->nl && hl < 0; l++)
            if (!d->ln[l].device && d->ln[l].pid == e->flow_pid && d->ln[l].tid == e->flow_tid)
                hl = l;
        if (hl < 0)
            continue;
        const int64_t from = e->flow_ts >= 0 && e->flow_ts <= e->ts_ns ? e->flow_ts : e->ts_ns;
        const double x0 = x_of(d, (double)(from > d->lo ? from : d->lo)), x = x_of(d, (double)e->ts_ns);
        const double y0 = d->ln[hl].y + d->ln[hl].depth * ROW - 3, y1 = d->ln[d->it[k].lane].y;
        fprintf(d->f,
                "<line class=\"flow\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#444\" "
                "stroke-width=\"1\" marker-end=\"url(#arrow)\"/>\n",
                x0, y0, x, y1 - 1);
    }
}

int lf_trace_svg_draw(const lf_trace *t, int step, FILE *f, const char *path, int standalone)
{
    drawing d = {.t = t, .f = f};
    const int picked = pick_window(&d, step);
    if (picked < 0)
        return picked;
    d.it = malloc((size_t)(t->n + 1) * sizeof *d.it);
    d.ln = calloc(64, sizeof *d.ln);
    if (!d.it || !d.ln) {
        free(d.it), free(d.ln);
        return -1;
    }
    collect_items(&d);
    place_rows(&d);
    put_header(&d, path, standalone);
    put_axis_and_lanes(&d);
    put_slices(&d);
    put_flows(&d);
    fprintf(f, "</svg>\n");
    free(d.it), free(d.ln);
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
