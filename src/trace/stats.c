/* `linfuse trace stats`: nsys stats' reports, by its names, over any Kineto trace (stats_cuda.c,
 * stats_nvtx.c), as nsys prints them, as CSV or as JSON; what could not be trusted said after a
 * text report. Layer: trace/. */
#include <stdlib.h>
#include <string.h>

#include "trace/stats_table.h"

static const struct {
    const char *name, *title;
    lf_status (*fill)(const lf_trace *, stats_table *);
} reports[] = {
    {"cuda_api_sum", "CUDA API Summary", stats_cuda_api_sum},
    {"cuda_gpu_kern_sum", "CUDA GPU Kernel Summary", stats_cuda_gpu_kern_sum},
    {"cuda_gpu_mem_time_sum", "CUDA GPU MemOps Summary (by Time)", stats_cuda_gpu_mem_time_sum},
    {"cuda_gpu_mem_size_sum", "CUDA GPU MemOps Summary (by Size)", stats_cuda_gpu_mem_size_sum},
    {"cuda_kern_exec_sum", "CUDA Kernel Launch & Exec Time Summary", stats_cuda_kern_exec_sum},
    {"cuda_gpu_trace", "CUDA GPU Trace", stats_cuda_gpu_trace},
    {"nvtx_sum", "NVTX Range Summary", stats_nvtx_sum},
    {"nvtx_gpu_proj_sum", "NVTX GPU Projection Summary", stats_nvtx_gpu_proj_sum},
    {"comm_sum", "Collectives across ranks: skew and bandwidth (linfuse's)", stats_comm_sum},
};
enum { N_REPORTS = sizeof reports / sizeof reports[0] };

const char *const *lf_trace_stats_reports(void)
{
    static const char *names[N_REPORTS + 1];
    for (int i = 0; i < N_REPORTS; i++)
        names[i] = reports[i].name;
    return names;
}

lf_status lf_trace_stats(const lf_trace *t, const char *report, lf_stats_format format, char **text)
{
    LF_CHECK_PTR(t, "lf_trace_stats", "t");
    LF_CHECK_PTR(report, "lf_trace_stats", "report");
    LF_CHECK_PTR(text, "lf_trace_stats", "text");
    *text = NULL;
    int k = 0;
    while (k < N_REPORTS && strcmp(reports[k].name, report))
        k++;
    if (k == N_REPORTS) {
        lf_sbuf known = {0};
        for (int i = 0; i < N_REPORTS; i++)
            lf_sbuf_printf(&known, "%s%s", i ? ", " : "", reports[i].name);
        lf_status st = lf_fail(LF_EINVAL, "trace stats: no report '%s' (reports: %s)", report,
                               known.p ? known.p : "?");
        free(known.p);
        return st;
    }
    if (format != LF_STATS_TEXT && format != LF_STATS_CSV && format != LF_STATS_JSON)
        return lf_fail(LF_EINVAL, "trace stats: format %d is none of text, csv, json", (int)format);
    stats_table tab;
    stats_table_init(&tab, NULL, 0);
    lf_status st = reports[k].fill(t, &tab);
    lf_sbuf b = {0};
    if (st == LF_OK) {
        if (format == LF_STATS_TEXT)
            lf_sbuf_printf(&b, " ** %s (%s):\n\n", reports[k].title, report);
        if (format == LF_STATS_TEXT && !tab.nrows)
            lf_sbuf_printf(&b, "SKIPPED: the trace has no %s for this report.\n",
                           report[0] == 'n'   ? "NVTX ranges (user_annotation events)"
                           : report[0] == 'c' && report[1] == 'o' ? "NCCL kernels (nccl*)"
                                                                 : "CUDA data of this kind");
        else
            stats_table_put(&tab, format == LF_STATS_TEXT ? STATS_TEXT : format == LF_STATS_CSV ? STATS_CSV
                                                                                               : STATS_JSON,
                            &b);
        lf_trace_trust tr;
        st = lf_trace_trust_count(t, &tr);
        char line[640];
        lf_trace_trust_line(&tr, line, sizeof line);
        if (st == LF_OK && format == LF_STATS_TEXT && line[0])
            lf_sbuf_printf(&b, "\n%s\n", line);
    }
    stats_table_free(&tab);
    if (st == LF_OK && b.oom)
        st = lf_fail(LF_ENOMEM, "trace stats: out of memory");
    if (st != LF_OK) {
        free(b.p);
        return st;
    }
    *text = b.p ? b.p : strdup("");
    return *text ? LF_OK : lf_fail(LF_ENOMEM, "trace stats: out of memory");
}
