/* `linfuse trace svg|report|serve`: a trace to look at, as a timeline, as a page, or in Perfetto.
 * Layer: cli/. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/trace_args.h"
#include "cli/trace_views.h"

int lf_tcmd_svg(int argc, char **argv)
{
    const char *file = NULL, *out = NULL, *v, *cmd = "linfuse trace svg";
    int nf = 0, rc;
    int64_t step = LF_TRACE_FIRST_STEP;
    enum { OUT, STEP };
    const lf_cli_opt opts[] = {{"output", 1, OUT, 'o'}, {"step", 1, STEP, 0}, MAX_BYTES_OPT};
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, 3);
    for (int id; (id = lf_tcmd_next_arg(&a, "svg", &v)) != LF_CLI_END;) {
        if (id == OUT) {
            out = v;
        } else if (id == STEP) {
            if (!lf_cli_int(cmd, "--step", v, 0, INT_MAX, &step))
                return LF_EXIT_USAGE;
        } else if ((rc = lf_tcmd_common_arg(id, v, cmd, &file, &nf, 1)) >= 0) {
            return rc;
        }
    }
    if (!file || !out) {
        fprintf(stderr, "linfuse trace svg: usage: linfuse trace svg FILE.json [--step N] -o OUT.svg\n");
        return LF_EXIT_USAGE;
    }
    if (!lf_tcmd_output_apart(cmd, out, &file, 1))
        return LF_EXIT_USAGE;
    lf_trace *t = lf_tcmd_load(file);
    if (!t)
        return LF_EXIT_USAGE;
    lf_status s = lf_trace_svg(t, (int)step, out);
    lf_trace_free(t);
    if (s != LF_OK) {
        lf_tcmd_error(cmd);
        return s == LF_EINVAL ? LF_EXIT_USAGE : LF_EXIT_FAIL;
    }
    fprintf(lf_cli_note_stream(out), "wrote %s\n", out);
    return LF_EXIT_OK;
}

int lf_tcmd_report(int argc, char **argv)
{
    const char *files[2] = {NULL, NULL}, *out = NULL, *v, *cmd = "linfuse trace report";
    int nf = 0, rc;
    int64_t step = LF_TRACE_FIRST_STEP;
    lf_report_opts o = {.step = LF_TRACE_FIRST_STEP};
    enum { OUT, STEP, PEAK_TF, PEAK_GB };
    const lf_cli_opt opts[] = {{"output", 1, OUT, 'o'},
                               {"step", 1, STEP, 0},
                               {"peak-tflops", 1, PEAK_TF, 0},
                               {"peak-gbps", 1, PEAK_GB, 0},
                               MAX_BYTES_OPT};
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, 5);
    for (int id; (id = lf_tcmd_next_arg(&a, "report", &v)) != LF_CLI_END;) {
        if (id == OUT) {
            out = v;
        } else if (id == STEP) {
            if (!lf_cli_int(cmd, "--step", v, 0, INT_MAX, &step))
                return LF_EXIT_USAGE;
        } else if (id == PEAK_TF || id == PEAK_GB) {
            char *end;
            double x = strtod(v, &end);
            if (*end || !*v || !isfinite(x) || x <= 0 || x > 1e7) {
                fprintf(stderr, "%s: %s needs a positive number, got '%s'\n", cmd,
                        id == PEAK_TF ? "--peak-tflops" : "--peak-gbps", v);
                return LF_EXIT_USAGE;
            }
            *(id == PEAK_TF ? &o.peak_tflops : &o.peak_gbps) = x;
        } else if ((rc = lf_tcmd_common_arg(id, v, cmd, files, &nf, 2)) >= 0) {
            return rc;
        }
    }
    if (!nf || !out) {
        fprintf(stderr, "%s: usage: linfuse trace report FILE.json [OTHER.json] -o REPORT.html\n", cmd);
        return LF_EXIT_USAGE;
    }
    if (!lf_tcmd_output_apart(cmd, out, files, nf))
        return LF_EXIT_USAGE;
    o.step = (int)step;
    lf_trace *t = lf_tcmd_load(files[0]), *other = t && nf == 2 ? lf_tcmd_load(files[1]) : NULL;
    if (!t || (nf == 2 && !other)) {
        lf_trace_free(t);
        return LF_EXIT_USAGE;
    }
    lf_status s = lf_trace_report(t, other, &o, out);
    lf_trace_free(t), lf_trace_free(other);
    if (s != LF_OK) {
        lf_tcmd_error(cmd);
        return s == LF_EINVAL ? LF_EXIT_USAGE : LF_EXIT_FAIL;
    }
    fprintf(lf_cli_note_stream(out), "wrote %s\n", out);
    return LF_EXIT_OK;
}

int lf_tcmd_serve(int argc, char **argv)
{
    const char *file = NULL, *v, *cmd = "linfuse trace serve";
    int nf = 0, rc, once = 0;
    int64_t port = 9001;
    enum { PORT, ONCE };
    const lf_cli_opt opts[] = {{"port", 1, PORT, 0}, {"once", 0, ONCE, 0}, MAX_BYTES_OPT};
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, 3);
    for (int id; (id = lf_tcmd_next_arg(&a, "serve", &v)) != LF_CLI_END;) {
        if (id == PORT) {
            if (!lf_cli_int(cmd, "--port", v, 0, 65535, &port))
                return LF_EXIT_USAGE;
        } else if (id == ONCE) {
            once = 1;
        } else if ((rc = lf_tcmd_common_arg(id, v, cmd, &file, &nf, 1)) >= 0) {
            return rc;
        }
    }
    if (!file) {
        fprintf(stderr, "%s: which trace? (linfuse trace serve FILE.json)\n", cmd);
        return LF_EXIT_USAGE;
    }
    return lf_cli_trace_serve(file, (int)port, once, lf_trace_read_limit());
}
