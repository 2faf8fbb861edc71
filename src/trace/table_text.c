/* The table as PyTorch prints it (docs/trace_format.md, "The table"): its columns, widths, units,
 * name cutting and footers, from an lf_table that table.c built; table_export.c writes the same
 * as CSV or JSON. Layer: trace/. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"

/* --- text --- */

/* PyTorch's _format_time, on microseconds as a double. */
static const char *fmt_us(char *buf, size_t cap, double us)
{
    if (us >= 1e6)
        snprintf(buf, cap, "%.3fs", us / 1e6);
    else if (us >= 1e3)
        snprintf(buf, cap, "%.3fms", us / 1e3);
    else
        snprintf(buf, cap, "%.3fus", us);
    return buf;
}

const char *lf_fmt_time(char *buf, size_t cap, double ns)
{
    return fmt_us(buf, cap, ns / 1000.0);
}

/* A name as PyTorch's table prints it: cut to MAX_NAME - 3 characters plus "..." when it has
 * more (characters, never bytes: a cut never splits one), and safe for a terminal (control
 * characters escaped, bytes that are not UTF-8 as U+FFFD: lf_term_cut). */
enum { MAX_NAME = 55 };

/* s right-aligned in width characters, then two spaces, as PyTorch's row format does. */
static void put_cell(lf_sbuf *b, const char *s, int width)
{
    size_t chars = 0;
    lf_utf8_prefix(s, (size_t)-1, &chars);
    lf_sbuf_printf(b, "%*s%s  ", width > (int)chars ? width - (int)chars : 0, "", s);
}

enum { MAX_SHAPES = 80, MAX_SRC = 75 }; /* PyTorch's max_shapes_column_width, max_src_column_width */

static void put_cell_aligned(lf_sbuf *b, const char *s, int width, int left)
{
    if (!left) {
        put_cell(b, s, width);
        return;
    }
    size_t chars = 0;
    lf_utf8_prefix(s, (size_t)-1, &chars);
    lf_sbuf_printf(b, "%s%*s  ", s, width > (int)chars ? width - (int)chars : 0, "");
}

/* PyTorch's trim_path: a frame longer than the column keeps its end, "..." in front; the frame
 * made safe for a terminal first. */
static void trim_path(char *dst, size_t cap, const char *raw, int width)
{
    lf_sbuf safe = {0};
    lf_sbuf_term_str(&safe, raw, 0);
    const char *path = safe.p ? safe.p : "";
    size_t chars = 0;
    lf_utf8_prefix(path, (size_t)-1, &chars);
    if ((int)chars <= width) {
        snprintf(dst, cap, "%s", path);
        free(safe.p);
        return;
    }
    const char *s = path;
    for (size_t c = 0; c < chars - (size_t)width; c++) /* drop the first chars - width characters */
        s += lf_utf8_char(s) > 0 ? lf_utf8_char(s) : 1;
    for (int c = 0; c < 3 && *s; c++) /* then three more, for the "..." */
        s += lf_utf8_char(s) > 0 ? lf_utf8_char(s) : 1;
    snprintf(dst, cap, "...%s", s);
    free(safe.p);
}

/* Memory, 1024-based: "1.50 MB", "12 B". */
static void fmt_mem(char *buf, size_t cap, int64_t b)
{
    double a = b < 0 ? -(double)b : (double)b;
    if (a >= 1073741824.0)
        snprintf(buf, cap, "%.2f GB", (double)b / 1073741824.0);
    else if (a >= 1048576.0)
        snprintf(buf, cap, "%.2f MB", (double)b / 1048576.0);
    else if (a >= 1024.0)
        snprintf(buf, cap, "%.2f KB", (double)b / 1024.0);
    else
        snprintf(buf, cap, "%lld B", (long long)b);
}

/* PyTorch's _format_time_share: time * 100 / total, "NaN" for a zero total. */
static void fmt_pct(char *buf, size_t cap, double part, double total)
{
    if (total == 0)
        snprintf(buf, cap, "NaN");
    else
        snprintf(buf, cap, "%.2f%%", part * 100.0 / total);
}

/* The text table's columns: headers, widths, which is left-aligned; the headers that name the
 * device ("Self CUDA") are made here. */
typedef struct columns {
    const char *heads[24];
    int w[24], left[24];
    int n, fixed;        /* columns; those up to "# of Calls" */
    int shapes_w, src_w; /* Input Shapes' and Source Location's widths */
    char h_self[32], h_selfp[32], h_total[32], h_avg[32], h_mem[32], h_smem[32], h_flops[32];
} columns;

/* The name column: the widest name + 4, at most MAX_NAME. */
static int name_width(const lf_table *tab)
{
    int name_w = 0;
    for (int64_t i = 0; i < tab->n_rows; i++) {
        const size_t l = lf_term_width(tab->rows[i].name, SIZE_MAX);
        name_w = l > (size_t)name_w ? (l > MAX_NAME ? MAX_NAME : (int)l) : name_w;
    }
    name_w += 4;
    return name_w > MAX_NAME ? MAX_NAME : name_w;
}

/* Input Shapes: its width from the longest, at most 80. */
static int shapes_width(const lf_table *tab)
{
    int shapes_w = 0;
    for (int64_t i = 0; i < tab->n_rows; i++) {
        const size_t l = lf_term_width(tab->rows[i].input_shapes ? tab->rows[i].input_shapes : "[]", SIZE_MAX);
        shapes_w = l + 4 > (size_t)shapes_w ? (l > MAX_SHAPES ? MAX_SHAPES : (int)l + 4) : shapes_w;
    }
    return shapes_w > MAX_SHAPES ? MAX_SHAPES : shapes_w;
}

/* Source Location: from the longest frame, 19 to 75. */
static int source_width(const lf_table *tab)
{
    int src_w = 0;
    for (int64_t i = 0; i < tab->n_rows; i++)
        for (int f = 0; f < tab->rows[i].n_stack; f++) {
            const size_t l = lf_term_width(tab->rows[i].stack[f], SIZE_MAX);
            src_w = l + 4 > (size_t)src_w ? (l > MAX_SRC ? MAX_SRC : (int)l + 4) : src_w;
        }
    return src_w > MAX_SRC ? MAX_SRC : src_w < 19 ? 19 : src_w;
}

/* The columns tab shows, as PyTorch's: name, CPU times, device times, memory, calls; then Input
 * Shapes, Total <unit>; and Source Location, left-aligned, last (PyTorch puts its header before
 * the FLOPs but its values after them; here both go last). */
static void plan_columns(const lf_table *tab, columns *k)
{
    const char *dl = tab->device_label;
    snprintf(k->h_self, sizeof k->h_self, "Self %s", dl);
    snprintf(k->h_selfp, sizeof k->h_selfp, "Self %s %%", dl);
    snprintf(k->h_total, sizeof k->h_total, "%s total", dl);
    snprintf(k->h_avg, sizeof k->h_avg, "%s time avg", dl);
    snprintf(k->h_mem, sizeof k->h_mem, "%s Mem", dl);
    snprintf(k->h_smem, sizeof k->h_smem, "Self %s Mem", dl);
    static const char *const fixed[6] = {"Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"};
    k->n = 0;
    for (int c = 0; c < 6; c++)
        k->heads[k->n++] = fixed[c];
    if (tab->has_device) {
        k->heads[k->n++] = k->h_self, k->heads[k->n++] = k->h_selfp;
        k->heads[k->n++] = k->h_total, k->heads[k->n++] = k->h_avg;
    }
    if (tab->has_cpu_mem)
        k->heads[k->n++] = "CPU Mem", k->heads[k->n++] = "Self CPU Mem";
    if (tab->has_device_mem)
        k->heads[k->n++] = k->h_mem, k->heads[k->n++] = k->h_smem;
    k->heads[k->n++] = "# of Calls";
    k->fixed = k->n;
    int shapes_col = -1, src_col = -1;
    if (tab->has_input_shapes) {
        k->shapes_w = shapes_width(tab);
        shapes_col = k->n;
        k->heads[k->n++] = "Input Shapes";
    }
    if (tab->has_flops) {
        snprintf(k->h_flops, sizeof k->h_flops, "Total %s", tab->flops_unit);
        k->heads[k->n++] = k->h_flops;
    }
    if (tab->stack_depth) {
        k->src_w = source_width(tab);
        src_col = k->n;
        k->heads[k->n++] = "Source Location";
    }
    /* PyTorch's widths: the name column, then 12 for every other (a longer header such as "CUDA
     * time avg" just sticks out). A device label longer than "CUDA" widens its columns instead,
     * so a linfuse CPU table stays aligned. */
    const int name_w = name_width(tab);
    for (int c = 0; c < k->n; c++) {
        k->w[c] = c ? 12 : name_w;
        k->left[c] = 0;
        if (c >= 6 && c < k->fixed && strlen(dl) > 4 && (int)strlen(k->heads[c]) > k->w[c])
            k->w[c] = (int)strlen(k->heads[c]);
        if (c == shapes_col)
            k->w[c] = k->shapes_w;
        if (c == src_col)
            k->w[c] = k->src_w, k->left[c] = 1;
    }
}

/* A line of dashes under every column. */
static void put_separator(lf_sbuf *b, const columns *k)
{
    for (int c = 0; c < k->n; c++)
        for (int i = 0; i < k->w[c] + 2; i++)
            lf_sbuf_printf(b, "%c", i < k->w[c] ? '-' : ' ');
    lf_sbuf_printf(b, "\n");
}

/* The cells of row r that every table has: its CPU and device times, memory and calls (in buf,
 * pointed to from cell from index 1 on); how many there are. */
static int put_time_cells(const lf_table *tab, const lf_table_row *r, char buf[14][32], const char **cell)
{
    fmt_pct(buf[0], 32, r->self_cpu_us, tab->self_cpu_total_us);
    fmt_us(buf[1], 32, r->self_cpu_us);
    if (r->is_async) /* PyTorch prints the integer 0 for an async event's share */
        snprintf(buf[2], 32, "0");
    else
        fmt_pct(buf[2], 32, r->cpu_total_us, tab->self_cpu_total_us);
    fmt_us(buf[3], 32, r->cpu_total_us);
    fmt_us(buf[4], 32, r->count ? r->cpu_total_us / (double)r->count : 0);
    fmt_us(buf[5], 32, r->self_device_us);
    fmt_pct(buf[6], 32, r->self_device_us, tab->self_device_total_us);
    fmt_us(buf[7], 32, r->device_total_us);
    fmt_us(buf[8], 32, r->count ? r->device_total_us / (double)r->count : 0);
    fmt_mem(buf[9], 32, r->cpu_mem);
    fmt_mem(buf[10], 32, r->self_cpu_mem);
    fmt_mem(buf[11], 32, r->device_mem);
    fmt_mem(buf[12], 32, r->self_device_mem);
    snprintf(buf[13], 32, "%lld", (long long)r->count);
    int nc = 1;
    for (int c = 0; c < 5; c++)
        cell[nc++] = buf[c];
    for (int c = 5; tab->has_device && c < 9; c++)
        cell[nc++] = buf[c];
    if (tab->has_cpu_mem)
        cell[nc++] = buf[9], cell[nc++] = buf[10];
    if (tab->has_device_mem)
        cell[nc++] = buf[11], cell[nc++] = buf[12];
    cell[nc++] = buf[13];
    return nc;
}

/* Row r: its cells, and with a stack its outer frames on lines of their own, then an empty line,
 * as PyTorch's. */
static void put_row(lf_sbuf *b, const lf_table *tab, const columns *k, const lf_table_row *r)
{
    char name[4 * MAX_NAME + 8], cells[14][32], shapes[4 * MAX_SHAPES + 1], flops[64], src[4 * MAX_SRC + 8];
    const char *cell[24];
    lf_term_cut(name, sizeof name, r->name, MAX_NAME - 3);
    cell[0] = name;
    int nc = put_time_cells(tab, r, cells, cell);
    if (tab->has_input_shapes) { /* Python's str(shapes)[:width] */
        lf_term_cut(shapes, sizeof shapes, r->input_shapes ? r->input_shapes : "[]", 0);
        shapes[lf_utf8_prefix(shapes, (size_t)k->shapes_w, NULL)] = '\0';
        cell[nc++] = shapes;
    }
    if (tab->has_flops) {
        if (r->flops <= 0)
            snprintf(flops, sizeof flops, "--");
        else
            snprintf(flops, sizeof flops, "%8.3f", r->flops * tab->flops_scale);
        cell[nc++] = flops;
    }
    if (tab->stack_depth) {
        trim_path(src, sizeof src, r->n_stack ? r->stack[0] : "", k->src_w);
        cell[nc++] = src;
    }
    for (int c = 0; c < nc; c++)
        put_cell_aligned(b, cell[c], k->w[c], k->left[c]);
    lf_sbuf_printf(b, "\n");
    if (!tab->stack_depth)
        return;
    for (int f = 1; f <= (r->n_stack > 1 ? r->n_stack : 1); f++) {
        trim_path(src, sizeof src, f < r->n_stack ? r->stack[f] : "", k->src_w);
        for (int c = 0; c < k->n; c++)
            put_cell_aligned(b, c == k->n - 1 ? src : "", k->w[c], k->left[c]);
        lf_sbuf_printf(b, "\n");
    }
}

/* Under the table: the totals, its warnings, what could not be trusted (the events the profiler
 * dropped among them: the numbers above miss those). */
static void put_footers(lf_sbuf *b, const lf_table *tab)
{
    char tot[32];
    fmt_us(tot, sizeof tot, tab->self_cpu_total_us);
    lf_sbuf_printf(b, "Self CPU time total: %s\n", tot);
    if (tab->has_device) {
        fmt_us(tot, sizeof tot, tab->self_device_total_us);
        lf_sbuf_printf(b, "Self %s time total: %s\n", tab->device_label, tot);
    }
    if (tab->warning[0])
        lf_sbuf_printf(b, "%s", tab->warning);
    lf_trace_trust trust_counts = tab->trust; /* a table built by hand may carry its drops alone */
    if (!trust_counts.dropped)
        trust_counts.dropped = tab->dropped_events;
    char trust[640];
    lf_trace_trust_line(&trust_counts, trust, sizeof trust);
    if (trust[0])
        lf_sbuf_printf(b, "%s\n", trust);
}

lf_status lf_table_format(const lf_table *tab, const lf_table_opts *o, char **text)
{
    LF_CHECK_PTR(tab, "lf_table_format", "tab");
    LF_CHECK_PTR(text, "lf_table_format", "text");
    *text = NULL;
    if (o && o->style != LF_TABLE_TEXT)
        return lf_table_format_data(tab, o, text);
    int64_t limit = o && o->row_limit > 0 ? o->row_limit : tab->n_rows;
    if (limit > tab->n_rows)
        limit = tab->n_rows;
    columns k;
    plan_columns(tab, &k);
    lf_sbuf b = {0};
    put_separator(&b, &k);
    for (int c = 0; c < k.n; c++)
        put_cell_aligned(&b, k.heads[c], k.w[c], k.left[c]);
    lf_sbuf_printf(&b, "\n");
    put_separator(&b, &k);
    for (int64_t i = 0; i < limit; i++)
        put_row(&b, tab, &k, &tab->rows[i]);
    put_separator(&b, &k);
    put_footers(&b, tab);
    if (b.oom) {
        free(b.p);
        return lf_fail(LF_ENOMEM, "lf_table_format: out of memory");
    }
    *text = b.p;
    return LF_OK;
}
