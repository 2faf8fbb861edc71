/* libFuzzer target for the trace reader (plain and gzip) and everything built on a trace it
 * accepts: the table (grouped by shapes and stacks, as text, CSV and JSON), the per-step
 * profile, the summary, the breakdown, the HTML report and the SVG writer must neither crash nor hang on any input.
 * Every fourth input is read keeping every arg (keep_args, as `trace merge` reads), written back and read again: what
 * linfuse writes it must read (a key written twice, an arg's text made invalid, a number out of range, stops the
 * fuzzer). Built with clang by tests/fuzz_test.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linfuse/trace.h"
#include "trace/json_read.h"

/* t written to a file and read back keeping every arg: it must read. */
static void round_trip(const lf_trace *t)
{
    char path[] = "/tmp/lf_fuzz_json_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return;
    close(fd);
    lf_trace *back = NULL;
    const lf_trace_read_opts keep = {.keep_args = 1};
    if (lf_trace_write_json(t, path) == LF_OK && lf_trace_read_json_opts(&back, path, &keep) != LF_OK) {
        fprintf(stderr, "a trace linfuse wrote does not read back: %s\n", lf_last_error());
        unlink(path);
        abort();
    }
    lf_trace_free(back);
    unlink(path);
}

/* Events handed over as they are read (trace export's way): their strings read whole before the
 * next event. */
static lf_status touch(void *ctx, const lf_trace_event *e)
{
    size_t *n = ctx;
    *n += strlen(e->name) + (e->extra_args ? strlen(e->extra_args) : 0) + (e->stack ? strlen(e->stack) : 0);
    return LF_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lf_trace *t = NULL;
    const int keep = size % 4 == 1;
    if (size % 4 == 3) {
        size_t n = 0;
        lf_trace_read_opts each = {.keep_args = 1, .each = touch, .each_ctx = &n};
        if (lf_json_parse(&t, (const char *)data, size, "fuzz", 0, NULL, &each) == LF_OK)
            lf_trace_free(t);
        return 0;
    }
    const lf_trace_read_opts keep_all = {.keep_args = 1};
    if ((keep ? lf_json_parse(&t, (const char *)data, size, "fuzz", 0, NULL, &keep_all)
              : lf_trace_read_json_buffer(&t, (const char *)data, size, "fuzz")) != LF_OK)
        return 0;
    if (keep)
        round_trip(t);
    /* the table in every grouping and style: the size picks one, so each run stays cheap */
    lf_table tab;
    lf_table_opts o = {.sort_by = LF_SORT_DEVICE_TIME_TOTAL,
                       .row_limit = 25,
                       .group_by_input_shape = size % 2,
                       .group_by_stack = (int)(size / 2 % 3),
                       .style = (lf_table_style)(size / 6 % 3)};
    if (lf_table_build_opts(t, &o, &tab) == LF_OK) {
        char *text = NULL;
        if (lf_table_format(&tab, &o, &text) == LF_OK)
            free(text);
        lf_table_free(&tab);
    }
    lf_step_profile p;
    if (lf_step_profile_build(t, &p) == LF_OK) {
        char *text = NULL;
        if (lf_trace_diff(&p, &p, 0, &text) == LF_OK)
            free(text);
        lf_step_profile_free(&p);
    }
    lf_trace_summary s;
    lf_trace_summarize(t, &s);
    lf_breakdown bd;
    if (lf_trace_breakdown(t, &bd) == LF_OK) {
        char *text = NULL;
        if (lf_breakdown_format(&bd, -1, (int)(size % 2), &text) == LF_OK)
            free(text);
        lf_breakdown_free(&bd);
    }
    lf_report_opts ro = {.step = (int)(size % 2)};
    char *html = NULL;
    if (lf_trace_report_html(t, size % 3 == 0 ? t : NULL, &ro, &html) == LF_OK)
        free(html);
    char path[] = "/tmp/lf_fuzz_svg_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        close(fd);
        lf_trace_svg(t, 0, path);
        unlink(path);
    }
    lf_trace_free(t);
    return 0;
}
