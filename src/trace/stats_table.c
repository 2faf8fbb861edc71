/* The report tables of `linfuse trace stats` (stats_table.h): made row by row, printed as nsys
 * prints its reports (a column table: numbers right-aligned with thousands separators, text left,
 * long names cut to 100 characters), as CSV (RFC 4180; numbers as rounded, no separators) or as
 * JSON (an array of objects keyed by the column names, as nsys's json format), and nsys's group
 * summaries. Layer: trace/. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trace/stats_table.h"

void stats_table_init(stats_table *t, const stats_col *cols, int ncols)
{
    memset(t, 0, sizeof *t);
    t->cols = cols, t->ncols = ncols;
}

void stats_table_free(stats_table *t)
{
    for (int64_t i = 0; i < t->n_owned; i++)
        free(t->owned[i]);
    free(t->owned), free(t->cells);
    memset(t, 0, sizeof *t);
}

stats_cell *stats_table_row(stats_table *t)
{
    if (t->oom)
        return NULL;
    if (t->nrows == t->cap) {
        const int64_t cap = t->cap ? 2 * t->cap : 64;
        stats_cell *c = realloc(t->cells, (size_t)(cap * t->ncols) * sizeof *c);
        if (!c) {
            t->oom = 1;
            return NULL;
        }
        t->cells = c, t->cap = cap;
    }
    stats_cell *row = t->cells + t->nrows++ * t->ncols;
    for (int i = 0; i < t->ncols; i++)
        row[i] = (stats_cell){.blank = 1};
    return row;
}

const char *stats_table_str(stats_table *t, const char *s)
{
    if (t->n_owned == t->cap_owned) {
        const int64_t cap = t->cap_owned ? 2 * t->cap_owned : 64;
        char **o = realloc(t->owned, (size_t)cap * sizeof *o);
        if (!o) {
            t->oom = 1;
            return "";
        }
        t->owned = o, t->cap_owned = cap;
    }
    char *c = strdup(s);
    if (!c) {
        t->oom = 1;
        return "";
    }
    t->owned[t->n_owned++] = c;
    return c;
}

/* qsort has no context: the comparison of rows goes through these (one sort at a time). */
static int (*row_cmp)(const stats_cell *, const stats_cell *);

static int by_row(const void *a, const void *b)
{
    return row_cmp(*(const stats_cell *const *)a, *(const stats_cell *const *)b);
}

void stats_table_sort(stats_table *t, int (*cmp)(const stats_cell *a, const stats_cell *b))
{
    if (t->nrows < 2 || t->oom)
        return;
    stats_cell **rows = malloc((size_t)t->nrows * sizeof *rows);
    stats_cell *copy = malloc((size_t)(t->nrows * t->ncols) * sizeof *copy);
    if (!rows || !copy) {
        free(rows), free(copy);
        t->oom = 1;
        return;
    }
    for (int64_t i = 0; i < t->nrows; i++)
        rows[i] = t->cells + i * t->ncols;
    row_cmp = cmp;
    qsort(rows, (size_t)t->nrows, sizeof *rows, by_row);
    for (int64_t i = 0; i < t->nrows; i++)
        memcpy(copy + i * t->ncols, rows[i], (size_t)t->ncols * sizeof *copy);
    free(t->cells);
    t->cells = copy, t->cap = t->nrows;
    free(rows);
}

/* A number as its column prints it: separators every three digits where sep (the text table). */
static void fmt_num(char *out, size_t cap, double v, stats_kind k, int sep) /* cap: 520 or more */
{
    const int decimals = k == SC_DEC1 ? 1 : k == SC_MB || k == SC_DEC3 ? 3 : 0;
    char raw[400]; /* DBL_MAX written out whole has 309 digits */
    snprintf(raw, sizeof raw, "%.*f", decimals, k == SC_MB ? v / 1e6 : v);
    if (!strcmp(raw, "-0") || !strcmp(raw, "-0.0") || !strcmp(raw, "-0.000"))
        memmove(raw, raw + 1, strlen(raw));
    if (!sep) {
        snprintf(out, cap, "%s", raw);
        return;
    }
    const char *p = raw;
    size_t o = 0;
    if (*p == '-')
        out[o++] = *p++;
    const char *dot = strchr(p, '.');
    const size_t whole = dot ? (size_t)(dot - p) : strlen(p);
    for (size_t i = 0; i < whole && o + 2 < cap; i++) {
        out[o++] = p[i];
        if ((whole - i - 1) % 3 == 0 && i + 1 < whole)
            out[o++] = ',';
    }
    snprintf(out + o, cap - o, "%s", dot ? dot : "");
}

enum { NAME_COLUMNS = 100 }; /* nsys cuts a text column's values at 100 characters */

/* The text of a cell in the column table: a name cut to 100 characters ("..." its last three),
 * safe for a terminal. */
static void cell_text(lf_sbuf *tmp, const stats_col *c, const stats_cell *cell)
{
    tmp->n = 0;
    if (cell->blank) {
        lf_sbuf_put(tmp, "", 0);
        return;
    }
    if (c->kind != SC_TEXT) {
        char num[520];
        fmt_num(num, sizeof num, cell->v, c->kind, 1);
        lf_sbuf_put(tmp, num, strlen(num));
        return;
    }
    const int cut = lf_term_width(cell->s, SIZE_MAX) > NAME_COLUMNS;
    lf_sbuf_term_str(tmp, cell->s, cut ? NAME_COLUMNS - 3 : 0); /* "..." after a cut */
}

/* Characters in s (UTF-8): a column's width. */
static size_t width_of(const char *s, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        w += ((unsigned char)s[i] & 0xc0) != 0x80;
    return w;
}

static void pad(lf_sbuf *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        lf_sbuf_put(b, " ", 1);
}

static void put_text(const stats_table *t, lf_sbuf *b)
{
    size_t *w = calloc((size_t)t->ncols, sizeof *w);
    lf_sbuf tmp = {0};
    if (!w) {
        b->oom = 1;
        return;
    }
    for (int c = 0; c < t->ncols; c++)
        w[c] = strlen(t->cols[c].name);
    for (int64_t r = 0; r < t->nrows; r++)
        for (int c = 0; c < t->ncols; c++) {
            cell_text(&tmp, &t->cols[c], &t->cells[r * t->ncols + c]);
            const size_t n = width_of(tmp.p ? tmp.p : "", tmp.n);
            w[c] = n > w[c] ? n : w[c];
        }
    for (int line = 0; line < 2; line++) { /* the headers, then their rules */
        for (int c = 0; c < t->ncols; c++) {
            const size_t n = strlen(t->cols[c].name);
            lf_sbuf_put(b, " ", 1);
            if (t->cols[c].kind != SC_TEXT)
                pad(b, w[c] - n);
            if (line == 0)
                lf_sbuf_put(b, t->cols[c].name, n);
            else
                for (size_t i = 0; i < n; i++)
                    lf_sbuf_put(b, "-", 1);
            if (t->cols[c].kind == SC_TEXT && c + 1 < t->ncols)
                pad(b, w[c] - n);
            lf_sbuf_put(b, c + 1 < t->ncols ? " " : "\n", 1);
        }
    }
    for (int64_t r = 0; r < t->nrows; r++)
        for (int c = 0; c < t->ncols; c++) {
            cell_text(&tmp, &t->cols[c], &t->cells[r * t->ncols + c]);
            const size_t n = width_of(tmp.p ? tmp.p : "", tmp.n);
            lf_sbuf_put(b, " ", 1);
            if (t->cols[c].kind != SC_TEXT)
                pad(b, w[c] - n);
            lf_sbuf_put(b, tmp.p ? tmp.p : "", tmp.n);
            if (t->cols[c].kind == SC_TEXT && c + 1 < t->ncols)
                pad(b, w[c] - n);
            lf_sbuf_put(b, c + 1 < t->ncols ? " " : "\n", 1);
        }
    b->oom |= tmp.oom;
    free(tmp.p), free(w);
}

static void put_value(lf_sbuf *b, const stats_col *c, const stats_cell *cell, int json)
{
    if (cell->blank) {
        if (json)
            lf_sbuf_put(b, "\"\"", 2);
        return;
    }
    if (c->kind == SC_TEXT) {
        if (json)
            lf_sbuf_json_str(b, cell->s);
        else
            lf_sbuf_csv_field(b, cell->s);
        return;
    }
    char num[520];
    fmt_num(num, sizeof num, cell->v, c->kind, 0);
    lf_sbuf_put(b, num, strlen(num));
}

void stats_table_put(const stats_table *t, int format, lf_sbuf *b)
{
    if (format == STATS_TEXT) {
        put_text(t, b);
        return;
    }
    if (format == STATS_CSV) {
        for (int c = 0; c < t->ncols; c++) {
            lf_sbuf_csv_field(b, t->cols[c].name);
            lf_sbuf_put(b, c + 1 < t->ncols ? "," : "\n", 1);
        }
        for (int64_t r = 0; r < t->nrows; r++)
            for (int c = 0; c < t->ncols; c++) {
                put_value(b, &t->cols[c], &t->cells[r * t->ncols + c], 0);
                lf_sbuf_put(b, c + 1 < t->ncols ? "," : "\n", 1);
            }
        return;
    }
    lf_sbuf_put(b, "[", 1);
    for (int64_t r = 0; r < t->nrows; r++) {
        lf_sbuf_printf(b, "%s\n  {", r ? "," : "");
        for (int c = 0; c < t->ncols; c++) {
            lf_sbuf_json_str(b, t->cols[c].name);
            lf_sbuf_put(b, ": ", 2);
            put_value(b, &t->cols[c], &t->cells[r * t->ncols + c], 1);
            if (c + 1 < t->ncols)
                lf_sbuf_put(b, ", ", 2);
        }
        lf_sbuf_put(b, "}", 1);
    }
    lf_sbuf_put(b, t->nrows ? "\n]\n" : "]\n", t->nrows ? 3 : 2);
}

static int by_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void stats_summarize(double *v, int64_t n, stats_sum *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n <= 0)
        return;
    qsort(v, (size_t)n, sizeof *v, by_double);
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += v[i];
    out->total = sum, out->avg = sum / (double)n;
    out->min = v[0], out->max = v[n - 1];
    out->med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    double ss = 0;
    for (int64_t i = 0; i < n && n > 1; i++)
        ss += (v[i] - out->avg) * (v[i] - out->avg);
    out->sd = n > 1 ? sqrt(ss / (double)(n - 1)) : 0;
}

void stats_groups_add(stats_groups *g, int64_t group, double v)
{
    if (g->oom)
        return;
    if (g->n == g->cap) {
        const int64_t cap = g->cap ? 2 * g->cap : 256;
        stats_item *it = realloc(g->items, (size_t)cap * sizeof *it);
        if (!it) {
            g->oom = 1;
            return;
        }
        g->items = it, g->cap = cap;
    }
    g->items[g->n++] = (stats_item){group, v};
}

static int by_group(const void *a, const void *b)
{
    const stats_item *x = a, *y = b;
    return (x->group > y->group) - (x->group < y->group);
}

void stats_groups_done(stats_groups *g)
{
    if (g->n)
        qsort(g->items, (size_t)g->n, sizeof *g->items, by_group);
    g->scratch = malloc((size_t)(g->n + 1) * sizeof *g->scratch);
    g->oom |= !g->scratch;
    g->at = 0;
}

int stats_groups_next(stats_groups *g, int64_t *group, stats_sum *sum)
{
    if (g->oom || g->at >= g->n)
        return 0;
    const int64_t first = g->at, id = g->items[first].group;
    int64_t n = 0;
    for (; g->at < g->n && g->items[g->at].group == id; g->at++)
        g->scratch[n++] = g->items[g->at].v;
    *group = id;
    stats_summarize(g->scratch, n, sum);
    return 1;
}

void stats_groups_free(stats_groups *g)
{
    free(g->items), free(g->scratch);
    memset(g, 0, sizeof *g);
}

json_t *stats_args(const lf_trace_event *e)
{
    if (!e->extra_args)
        return NULL;
    const size_t n = strlen(e->extra_args) + 3;
    char *text = malloc(n);
    if (!text)
        return NULL;
    snprintf(text, n, "{%s}", e->extra_args);
    json_t *a = json_loads(text, 0, NULL);
    free(text);
    return a;
}

int64_t stats_corr_key(const lf_trace *t, const lf_trace_event *e)
{
    if (!t->meta.merged_ranks || !e->correlation)
        return e->correlation;
    return (int64_t)(((uint64_t)e->pid + 1) << 40 ^ (uint64_t)e->correlation);
}

const char *stats_mem_op_name(const lf_trace_event *e)
{
    if (e->cat == LF_TC_MEMSET)
        return "[CUDA memset]";
    static const struct {
        const char *kineto, *nsys;
    } kinds[] = {{"HtoD", "[CUDA memcpy Host-to-Device]"}, {"DtoH", "[CUDA memcpy Device-to-Host]"},
                 {"DtoD", "[CUDA memcpy Device-to-Device]"}, {"HtoH", "[CUDA memcpy Host-to-Host]"},
                 {"PtoP", "[CUDA memcpy Peer-to-Peer]"},     {"HtoA", "[CUDA memcpy Host-to-Array]"},
                 {"AtoH", "[CUDA memcpy Array-to-Host]"},    {"AtoA", "[CUDA memcpy Array-to-Array]"},
                 {"AtoD", "[CUDA memcpy Array-to-Device]"},  {"DtoA", "[CUDA memcpy Device-to-Array]"}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strstr(e->name, kinds[i].kineto))
            return kinds[i].nsys;
    return "[CUDA memcpy Unknown]";
}

void stats_mem_kinds(const lf_trace_event *e, char *src, char *dst, size_t cap)
{
    src[0] = dst[0] = '\0';
    const char *open = strchr(e->name, '('), *close = open ? strchr(open, ')') : NULL;
    if (!open || !close)
        return;
    const char *arrow = strstr(open, " -> ");
    if (arrow && arrow < close) {
        snprintf(src, cap, "%.*s", (int)(arrow - open - 1), open + 1);
        snprintf(dst, cap, "%.*s", (int)(close - arrow - 4), arrow + 4);
    } else {
        snprintf(src, cap, "%.*s", (int)(close - open - 1), open + 1);
    }
}
