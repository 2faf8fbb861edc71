/* libFuzzer target for the trace reader (plain and gzip) and everything built on a trace it
 * accepts: the table (grouped by shapes and stacks, as text, CSV and JSON), the per-step
 * profile, the summary, the breakdown, the HTML report and the SVG writer must neither crash nor hang on any input. Built with
 * clang by tests/fuzz_test.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "linfuse/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lf_trace *t = NULL;
    if (lf_trace_read_json_buffer(&t, (const char *)data, size, "fuzz") != LF_OK)
        return 0;
    /* the table in every grouping and style: the size picks one, so each run stays cheap */
    lf_table tab;
    lf_table_opts o = {.sort_by = LF_SORT_DEVICE_TIME_TOTAL, .row_limit = 25, .group_by_input_shape = size % 2,
                       .group_by_stack = (int)(size / 2 % 3), .style = (lf_table_style)(size / 6 % 3)};
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
