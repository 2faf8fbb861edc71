/* The key_averages() table for programs: every column, full names, plain numbers (times in
 * microseconds, memory in bytes, FLOPs as counted), as CSV or JSON. Layer: trace/. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "trace/trace_impl.h"

static const char *kind_of(const lf_table_row *r)
{
    return r->is_async        ? "async"
           : r->is_device     ? (r->is_annotation ? "device_annotation" : "device")
           : r->is_annotation ? "annotation"
                              : "op";
}

/* A share of a total in percent, as the text table computes it; 0 for a zero total. */
static double pct(double part, double total)
{
    return total == 0 ? 0 : part * 100.0 / total;
}

/* The columns, in the text table's order; CSV's header and JSON's keys. */
static const char *const cols[] = {
    "name",          "kind",          "self_cpu_pct",       "self_cpu_us",      "cpu_total_pct",
    "cpu_total_us",  "cpu_avg_us",    "self_device_us",     "self_device_pct",  "device_total_us",
    "device_avg_us", "cpu_mem_bytes", "self_cpu_mem_bytes", "device_mem_bytes", "self_device_mem_bytes",
    "calls",         "flops"};
enum { N_COLS = sizeof cols / sizeof cols[0] };

static void row_numbers(const lf_table *tab, const lf_table_row *r, double v[N_COLS])
{
    const double n = r->count ? (double)r->count : 1;
    v[2] = pct(r->self_cpu_us, tab->self_cpu_total_us);
    v[3] = r->self_cpu_us;
    v[4] = r->is_async ? 0 : pct(r->cpu_total_us, tab->self_cpu_total_us);
    v[5] = r->cpu_total_us;
    v[6] = r->cpu_total_us / n;
    v[7] = r->self_device_us;
    v[8] = pct(r->self_device_us, tab->self_device_total_us);
    v[9] = r->device_total_us;
    v[10] = r->device_total_us / n;
    v[11] = (double)r->cpu_mem, v[12] = (double)r->self_cpu_mem;
    v[13] = (double)r->device_mem, v[14] = (double)r->self_device_mem;
    v[15] = (double)r->count;
    v[16] = r->flops;
}

/* Times with the nanosecond the trace holds, shares to 1e-4 %, counts and bytes whole. */
static void put_num(lf_sbuf *b, int col, double v)
{
    if (col == 2 || col == 4 || col == 8)
        lf_sbuf_printf(b, "%.4f", v);
    else if (col >= 11)
        lf_sbuf_printf(b, "%.0f", v);
    else
        lf_sbuf_printf(b, "%.3f", v);
}

/* CSV's header line: the columns, then the shapes and the stack where the table has them. */
static void put_csv_header(lf_sbuf *b, const lf_table *tab)
{
    for (int c = 0; c < N_COLS; c++)
        lf_sbuf_printf(b, "%s%s", c ? "," : "", cols[c]);
    if (tab->has_input_shapes)
        lf_sbuf_printf(b, ",input_shapes");
    if (tab->stack_depth)
        lf_sbuf_printf(b, ",stack");
    lf_sbuf_printf(b, "\n");
}

/* Row r as a CSV line: its stack's frames innermost first, joined by " <- ". */
static void put_csv_row(lf_sbuf *b, const lf_table *tab, const lf_table_row *r, const double v[N_COLS])
{
    lf_sbuf_csv_field(b, r->name);
    lf_sbuf_printf(b, ",%s", kind_of(r));
    for (int c = 2; c < N_COLS; c++) {
        lf_sbuf_printf(b, ",");
        put_num(b, c, v[c]);
    }
    if (tab->has_input_shapes) {
        lf_sbuf_printf(b, ",");
        lf_sbuf_csv_field(b, r->input_shapes ? r->input_shapes : "[]");
    }
    if (tab->stack_depth) {
        lf_sbuf s = {0};
        for (int f = 0; f < r->n_stack; f++)
            lf_sbuf_printf(&s, "%s%s", f ? " <- " : "", r->stack[f]);
        lf_sbuf_printf(b, ",");
        lf_sbuf_csv_field(b, s.p ? s.p : "");
        b->oom |= s.oom;
        free(s.p);
    }
    lf_sbuf_printf(b, "\n");
}

/* JSON's start: the table's totals and warnings, then its rows' array opened. */
static void put_json_header(lf_sbuf *b, const lf_table *tab)
{
    lf_sbuf_printf(b, "{\"device\": ");
    lf_sbuf_json_str(b, tab->device_label);
    lf_sbuf_printf(b, ", \"self_cpu_total_us\": %.3f, \"self_device_total_us\": %.3f, \"dropped_events\": %lld",
                   tab->self_cpu_total_us, tab->self_device_total_us, (long long)tab->dropped_events);
    lf_sbuf_printf(b, ", \"warnings\": ");
    lf_sbuf_json_str(b, tab->warning);
    char trust[640];
    lf_trace_trust_json(&tab->trust, trust, sizeof trust);
    lf_sbuf_printf(b, ", \"trust\": %s", trust);
    lf_sbuf_printf(b, ", \"rows\": [");
}

/* Row r as a JSON object (the i-th: a comma before all but the first); the shapes as JSON, not a
 * string, when they are JSON. */
static void put_json_row(lf_sbuf *b, const lf_table *tab, const lf_table_row *r, const double v[N_COLS], int64_t i)
{
    lf_sbuf_printf(b, "%s\n  {\"name\": ", i ? "," : "");
    lf_sbuf_json_str(b, r->name);
    lf_sbuf_printf(b, ", \"kind\": \"%s\"", kind_of(r));
    for (int c = 2; c < N_COLS; c++) {
        lf_sbuf_printf(b, ", \"%s\": ", cols[c]);
        put_num(b, c, v[c]);
    }
    if (tab->has_input_shapes) {
        const char *sh = r->input_shapes ? r->input_shapes : "[]";
        json_t *parsed = json_loads(sh, JSON_DECODE_ANY, NULL);
        lf_sbuf_printf(b, ", \"input_shapes\": ");
        if (parsed)
            lf_sbuf_printf(b, "%s", sh);
        else
            lf_sbuf_json_str(b, sh);
        json_decref(parsed);
    }
    if (tab->stack_depth) {
        lf_sbuf_printf(b, ", \"stack\": [");
        for (int f = 0; f < r->n_stack; f++) {
            lf_sbuf_printf(b, "%s", f ? ", " : "");
            lf_sbuf_json_str(b, r->stack[f]);
        }
        lf_sbuf_printf(b, "]");
    }
    lf_sbuf_printf(b, "}");
}

lf_status lf_table_format_data(const lf_table *tab, const lf_table_opts *o, char **text)
{
    int64_t limit = o->row_limit > 0 && o->row_limit < tab->n_rows ? o->row_limit : tab->n_rows;
    lf_sbuf b = {0};
    const int csv = o->style == LF_TABLE_CSV;
    if (csv)
        put_csv_header(&b, tab);
    else
        put_json_header(&b, tab);
    for (int64_t i = 0; i < limit; i++) {
        double v[N_COLS];
        row_numbers(tab, &tab->rows[i], v);
        if (csv)
            put_csv_row(&b, tab, &tab->rows[i], v);
        else
            put_json_row(&b, tab, &tab->rows[i], v, i);
    }
    if (!csv)
        lf_sbuf_printf(&b, "%s]}\n", limit ? "\n" : "");
    if (b.oom) {
        free(b.p);
        return lf_fail(LF_ENOMEM, "lf_table_format: out of memory");
    }
    *text = b.p ? b.p : calloc(1, 1);
    return *text ? LF_OK : lf_fail(LF_ENOMEM, "lf_table_format: out of memory");
}
