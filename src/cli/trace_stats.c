/* `linfuse trace stats`: nsys stats' reports by their names over a trace (lf_trace_stats), to
 * standard output or, with -o PREFIX, each report to PREFIX_<report>.<txt|csv|json> as nsys
 * names its files; and `linfuse trace export FILE --sqlite OUT.db` (lf_trace_export_sqlite).
 * Layer: cli/. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/trace_args.h"
#include "linfuse/io.h"

/* nsys stats' default reports, less osrt_sum (a Kineto trace records no OS runtime calls) */
static const char DEFAULT_REPORTS[] = "nvtx_sum,cuda_api_sum,cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,"
                                      "cuda_gpu_mem_size_sum";

int lf_tcmd_stats(int argc, char **argv)
{
    const char *file = NULL, *v, *cmd = "linfuse trace stats", *out = NULL, *reports = DEFAULT_REPORTS;
    lf_stats_format format = LF_STATS_TEXT;
    enum { REPORT, FORMAT, OUT };
    const lf_cli_opt opts[] = {{"report", 1, REPORT, 'r'}, {"format", 1, FORMAT, 0}, {"output", 1, OUT, 'o'},
                               MAX_BYTES_OPT};
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, 4);
    int nf = 0, rc;
    for (int id; (id = lf_tcmd_next_arg(&a, "stats", &v)) != LF_CLI_END;) {
        if (id == REPORT) {
            reports = v;
        } else if (id == FORMAT) {
            if (!strcmp(v, "table") || !strcmp(v, "text") || !strcmp(v, "column"))
                format = LF_STATS_TEXT;
            else if (!strcmp(v, "csv"))
                format = LF_STATS_CSV;
            else if (!strcmp(v, "json"))
                format = LF_STATS_JSON;
            else {
                fprintf(stderr, "%s: --format %s: takes table, csv or json\n", cmd, v);
                return LF_EXIT_USAGE;
            }
        } else if (id == OUT) {
            out = strcmp(v, "-") ? v : NULL; /* -o -: standard output, as the other verbs take it */
        } else if ((rc = lf_tcmd_common_arg(id, v, cmd, &file, &nf, 1)) >= 0) {
            return rc;
        }
    }
    if (!file) {
        fprintf(stderr, "%s: which trace? (%s FILE.json --report cuda_gpu_kern_sum)\n", cmd, cmd);
        return LF_EXIT_USAGE;
    }
    /* the names first, all of them, before the trace is read */
    char list[1024];
    if (snprintf(list, sizeof list, "%s", reports) >= (int)sizeof list) {
        fprintf(stderr, "%s: --report: too long a list\n", cmd);
        return LF_EXIT_USAGE;
    }
    const char *names[64]; /* (grids, NVTX domains and collectives' sizes are in the args: read them) */
    int n = 0, needs_args = 0;
    const char *const *known = lf_trace_stats_reports();
    for (char *save = NULL, *w = strtok_r(list, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        int ok = 0;
        for (int i = 0; known[i]; i++)
            ok |= !strcmp(known[i], w);
        if (!ok || n == 64) {
            fprintf(stderr, "%s: --report %s: no such report (reports: ", cmd, w);
            for (int i = 0; known[i]; i++)
                fprintf(stderr, "%s%s", i ? ", " : "", known[i]);
            fprintf(stderr, ")\n");
            return LF_EXIT_USAGE;
        }
        names[n++] = w;
        needs_args |= !strcmp(w, "cuda_gpu_trace") || !strncmp(w, "nvtx", 4) || !strcmp(w, "comm_sum");
    }
    if (!n) {
        fprintf(stderr, "%s: --report: which? (%s)\n", cmd, DEFAULT_REPORTS);
        return LF_EXIT_USAGE;
    }
    if (!out && n > 1 && format != LF_STATS_TEXT) {
        fprintf(stderr, "%s: %d reports as %s: give -o PREFIX (one file a report, PREFIX_<report>.%s), or one "
                        "--report\n",
                cmd, n, format == LF_STATS_CSV ? "CSV" : "JSON", format == LF_STATS_CSV ? "csv" : "json");
        return LF_EXIT_USAGE;
    }
    lf_trace *t = needs_args ? lf_tcmd_load_all(file) : lf_tcmd_load(file);
    if (!t)
        return LF_EXIT_USAGE;
    rc = LF_EXIT_OK;
    for (int i = 0; i < n && rc == LF_EXIT_OK; i++) {
        char *text = NULL;
        if (lf_trace_stats(t, names[i], format, &text) != LF_OK) {
            lf_tcmd_error(cmd);
            rc = LF_EXIT_FAIL;
            break;
        }
        if (out) {
            char path[4096];
            const char *ext = format == LF_STATS_CSV ? "csv" : format == LF_STATS_JSON ? "json" : "txt";
            snprintf(path, sizeof path, "%s_%s.%s", out, names[i], ext);
            if (!lf_tcmd_output_apart(cmd, path, &file, 1)) {
                rc = LF_EXIT_USAGE;
            } else if (!lf_cli_write_text(path, text)) {
                lf_tcmd_error(cmd);
                rc = LF_EXIT_FAIL;
            } else {
                fprintf(stderr, "wrote %s\n", path);
            }
        } else {
            printf("%s%s", i ? "\n" : "", text);
        }
        free(text);
    }
    if (rc == LF_EXIT_OK && format != LF_STATS_TEXT) { /* what could not be trusted: not in the CSV or JSON */
        lf_trace_trust tr;
        char line[640];
        if (lf_trace_trust_count(t, &tr) == LF_OK) {
            lf_trace_trust_line(&tr, line, sizeof line);
            if (line[0])
                fprintf(stderr, "%s: %s\n", cmd, line);
        }
    }
    lf_trace_free(t);
    return rc;
}

/* The export's temporary file, removed when a signal ends the export (the signal then ends the
 * tool as it would have). */
static char export_tmp[PATH_MAX + 32];

static void remove_tmp(int sig)
{
    unlink(export_tmp);
    signal(sig, SIG_DFL);
    raise(sig);
}

int lf_tcmd_export(int argc, char **argv)
{
    const char *file = NULL, *v, *cmd = "linfuse trace export", *db = NULL;
    enum { SQLITE };
    const lf_cli_opt opts[] = {{"sqlite", 1, SQLITE, 0}, MAX_BYTES_OPT};
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, 2);
    int nf = 0, rc;
    for (int id; (id = lf_tcmd_next_arg(&a, "export", &v)) != LF_CLI_END;) {
        if (id == SQLITE)
            db = v;
        else if ((rc = lf_tcmd_common_arg(id, v, cmd, &file, &nf, 1)) >= 0)
            return rc;
    }
    if (!file || !db) {
        fprintf(stderr, "%s: usage: linfuse trace export FILE.json --sqlite OUT.db\n", cmd);
        return LF_EXIT_USAGE;
    }
    if (!lf_tcmd_output_apart(cmd, db, &file, 1))
        return LF_EXIT_USAGE;
    char real[PATH_MAX];
    lf_trace_export_tmp_name(export_tmp, sizeof export_tmp, realpath(db, real) ? real : db);
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa = {0}, old;
        sa.sa_handler = remove_tmp;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN) /* an ignored one stays so */
            sigaction(sigs[i], &sa, NULL);
    }
    int64_t events = 0;
    if (lf_trace_export_sqlite(file, db, &events) != LF_OK) {
        lf_tcmd_error(cmd);
        return LF_EXIT_FAIL;
    }
    fprintf(stderr, "wrote %s: %lld events\n", db, (long long)events);
    return LF_EXIT_OK;
}
