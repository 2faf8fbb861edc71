/* What every `linfuse trace` verb shares: the verbs' usage lines, their common flags and file
 * words, reading a trace (a progress line on a terminal for a large one), error messages safe
 * for a terminal. Layer: cli/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/trace_args.h"
#include "linfuse/io.h"

/* One line of usage per verb: `linfuse trace` prints them all, `linfuse trace VERB --help` its own. */
static const struct verb_help {
    const char *verb, *args, *what;
} verbs[] = {
    {"table",
     "FILE.json [--sort-by KEY] [--row-limit N] [--group-by-input-shape] [--group-by-stack N] [--format text|csv|json]",
     "key_averages().table() of the trace"},
    {"diff", "A.json B.json [--json]", "what changed per step from A (the baseline) to B"},
    {"expect", "FILE.json [--kernels-per-step N] [--kernel REGEX]... [--no-kernel REGEX]... [--json]",
     "exit 0 if the trace matches the guess, 1 if not"},
    {"svg", "FILE.json [--step N] -o OUT.svg",
     "one step drawn as a timeline: ProfilerStep#N (the trace's first step by default)"},
    {"summary", "FILE.json [--json]",
     "kernels per step, device busy, communication, verdict (one line per rank of a merged trace)"},
    {"breakdown", "FILE.json [--json]",
     "per step and GPU: compute, communication, memory, idle (waiting on the host or other); kernel durations; "
     "launches; CUDA graph replays"},
    {"merge", "RANK0.json RANK1.json ... -o MERGED.json",
     "the ranks' traces as one Perfetto file, one process per rank"},
    {"report", "FILE.json [OTHER.json] -o REPORT.html [--step N] [--peak-tflops X --peak-gbps Y]",
     "one self-contained HTML file: ProfilerStep#N's timeline, breakdown, roofline, table (and what changed from "
     "FILE to OTHER, as trace diff FILE OTHER)"},
    {"stats", "FILE.json [--report NAME[,NAME...]] [--format table|csv|json] [-o PREFIX]",
     "nsys stats' reports by its names and columns: cuda_gpu_kern_sum, cuda_gpu_mem_time_sum, "
     "cuda_gpu_mem_size_sum, cuda_api_sum, cuda_kern_exec_sum, cuda_gpu_trace, nvtx_sum, nvtx_gpu_proj_sum; and "
     "comm_sum, each collective across a merged trace's ranks (skew, bus bandwidth) (nsys's defaults without "
     "--report; -o PREFIX writes PREFIX_<report>.<ext>)"},
    {"export", "FILE.json --sqlite OUT.db",
     "the trace as a SQLite database, inserted as it is read (bounded memory): kernels, memops, calls, ops, "
     "memory, steps, ranks, devices, threads, strings, meta; views flows and *_named (docs/traces.md)"},
    {"serve", "FILE.json|- [--port N] [--once]",
     "serve the trace (- : standard input, e.g. piped from another machine) on 127.0.0.1 (port 9001) to "
     "ui.perfetto.dev and print the link that opens it; nothing is uploaded"},
};

void lf_tcmd_usage(FILE *f)
{
    fputs("usage: linfuse trace <verb> ...\n", f);
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(f, "  %-9s %s\n            %s\n", verbs[i].verb, verbs[i].args, verbs[i].what);
    fputs("KEY: self_cpu_time_total, cpu_time_total, self_cuda_time_total, cuda_time_total (default),\n"
          "     cpu_time, cuda_time, count (device_* spellings too)\n"
          "Every verb takes --max-bytes N: the largest trace it reads (4 GiB, or $LINFUSE_TRACE_MAX_BYTES).\n"
          "Exit status: 0 done, 1 the work failed (expect: the trace differs from the guess), 2 bad command line\n"
          "or unreadable trace.\n",
          f);
}

static void verb_usage(FILE *f, const char *verb)
{
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(verbs[i].verb, verb))
            fprintf(f, "usage: linfuse trace %s %s\n%s\n", verb, verbs[i].args, verbs[i].what);
    if (!strcmp(verb, "stats"))
        fputs("--report: nsys's report names, comma-separated (default: nvtx_sum, cuda_api_sum, cuda_gpu_kern_sum,\n"
              "     cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum: nsys stats' own, without osrt_sum)\n"
              "--format table (nsys's column table, what could not be trusted under it), csv (a header of nsys's\n"
              "     column names, then the rows) or json (an array of objects keyed by the column names)\n"
              "-o PREFIX: each report to PREFIX_<report>.<txt|csv|json>, as nsys names its files (several reports\n"
              "     as CSV or JSON need it)\n",
              f);
    if (!strcmp(verb, "table"))
        fputs("KEY: self_cpu_time_total, cpu_time_total, self_cuda_time_total, cuda_time_total (default),\n"
              "     cpu_time, cuda_time, count (device_* spellings too); --row-limit -1 shows every row\n"
              "--group-by-input-shape: a row per op and input shapes, as key_averages(group_by_input_shape=True)\n"
              "--group-by-stack N: a row per op and its N innermost Python frames (the trace's python_function\n"
              "     events, as with_stack=True records them), with a Source Location column\n"
              "--format csv|json: every column, full names, times in us, memory in bytes, FLOPs as counted\n",
              f);
}

const char *lf_tcmd_closest(const char *word)
{
    const char *names[sizeof verbs / sizeof verbs[0]];
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        names[i] = verbs[i].verb;
    return lf_cli_closest(word, names, (int)(sizeof names / sizeof names[0]));
}

int lf_tcmd_next_arg(lf_cli_args *a, const char *verb, const char **v)
{
    int id = lf_cli_next(a, v);
    if (id == LF_CLI_HELP)
        verb_usage(stdout, verb);
    return id;
}

/* A line on the terminal while a large trace is read (over 50 MB of JSON), redrawn at each whole
 * percent and erased at the end; nothing when standard error is not a terminal (a pipe, a log). */
static void show_progress(void *ctx, const char *name, int64_t done, int64_t total)
{
    int *last = ctx;
    if (total < 50 * 1000 * 1000)
        return;
    const int pct = (int)(done * 100 / total);
    if (done == total)
        fprintf(stderr, "\r\033[K"); /* the line erased: what follows starts clean */
    else if (pct != *last)
        fprintf(stderr, "\rreading %s: %3d%% (%.0f of %.0f MB)", name, pct, (double)done / 1e6, (double)total / 1e6);
    *last = done == total ? -1 : pct;
}

void lf_tcmd_error(const char *cmd)
{
    char m[4096]; /* a message escaped whole: lf_term_cut needs at most 4 bytes a byte */
    fprintf(stderr, "%s: %s\n", cmd, lf_term_cut(m, sizeof m, lf_last_error(), 0));
}

static lf_trace *load(const char *path, int keep_args)
{
    static int last = -1;
    lf_trace_set_progress(isatty(STDERR_FILENO) ? show_progress : NULL, &last);
    lf_trace *t = NULL;
    const lf_trace_read_opts o = {.keep_args = keep_args};
    lf_status st = lf_trace_read_json_opts(&t, path, &o);
    if (last >= 0) { /* stopped part way: the line erased before the error */
        fprintf(stderr, "\r\033[K");
        last = -1;
    }
    lf_trace_set_progress(NULL, NULL);
    if (st != LF_OK) {
        lf_tcmd_error("linfuse trace");
        return NULL;
    }
    return t;
}

lf_trace *lf_tcmd_load(const char *path)
{
    return load(path, 0);
}

lf_trace *lf_tcmd_load_all(const char *path)
{
    return load(path, 1);
}

/* An extra word is named here; a bad flag's message is already printed. */
int lf_tcmd_output_apart(const char *cmd, const char *out, const char *const *files, int nf)
{
    for (int i = 0; i < nf; i++)
        if (lf_cli_same_file(out, files[i])) {
            char a[512];
            lf_term_cut(a, sizeof a, out, 0);
            fprintf(stderr, "%s: -o %s is the input %s: the output would replace it (write it elsewhere)\n", cmd, a,
                    i == 0 && nf == 1 ? "trace" : "file");
            return 0;
        }
    return 1;
}

int lf_tcmd_common_arg(int id, const char *v, const char *cmd, const char **files, int *nf, int max)
{
    if (id == MAX_BYTES) {
        int64_t n;
        if (!lf_cli_int(cmd, "--max-bytes", v, 1, INT64_MAX, &n))
            return LF_EXIT_USAGE;
        lf_trace_set_read_limit(n);
        return -1;
    }
    if (id == LF_CLI_WORD && *nf < max) {
        files[(*nf)++] = v;
        return -1;
    }
    if (id == LF_CLI_HELP)
        return LF_EXIT_OK;
    if (id == LF_CLI_WORD)
        fprintf(stderr, "%s: unexpected argument '%s'\n", cmd, v);
    return LF_EXIT_USAGE;
}
