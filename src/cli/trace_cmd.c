/* `linfuse trace <verb>`: read any Kineto-schema trace (PyTorch's or linfuse's) and answer
 * questions about it: table, diff, expect, summary, breakdown, merge here; svg, report and serve
 * in trace_views.c. Works on CPU-only machines.
 * Exit status: 0 done (expect: the trace matched), 1 expect found differences, 2 bad command
 * line or unreadable trace. Layer: cli/. */
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "core/core.h"
#include "cli/cli.h"
#include "cli/trace_cmd.h"

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
    {"serve", "FILE.json|- [--port N] [--once]",
     "serve the trace (- : standard input, e.g. piped from another machine) on 127.0.0.1 (port 9001) to "
     "ui.perfetto.dev and print the link that opens it; nothing is uploaded"},
};

static void usage(FILE *f)
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
    if (!strcmp(verb, "table"))
        fputs("KEY: self_cpu_time_total, cpu_time_total, self_cuda_time_total, cuda_time_total (default),\n"
              "     cpu_time, cuda_time, count (device_* spellings too); --row-limit -1 shows every row\n"
              "--group-by-input-shape: a row per op and input shapes, as key_averages(group_by_input_shape=True)\n"
              "--group-by-stack N: a row per op and its N innermost Python frames (the trace's python_function\n"
              "     events, as with_stack=True records them), with a Source Location column\n"
              "--format csv|json: every column, full names, times in us, memory in bytes, FLOPs as counted\n",
              f);
}

/* The verb's flags (args.h); LF_CLI_HELP prints the verb's usage, LF_CLI_BAD has
 * printed its message. */
int lf_tcmd_next_arg(lf_cli_args *a, const char *verb, const char **v)
{
    int id = lf_cli_next(a, v);
    if (id == LF_CLI_HELP)
        verb_usage(stdout, verb);
    else if (id == LF_CLI_BAD)
        verb_usage(stderr, verb);
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
    lf_sbuf m = {0};
    lf_sbuf_term_str(&m, lf_last_error(), 0);
    fprintf(stderr, "%s: %s\n", cmd, m.p ? m.p : "out of memory");
    free(m.p);
}

lf_trace *lf_tcmd_load(const char *path)
{
    static int last = -1;
    lf_trace_set_progress(isatty(STDERR_FILENO) ? show_progress : NULL, &last);
    lf_trace *t = NULL;
    lf_status st = lf_trace_read_json(&t, path);
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

/* What every verb does with the arguments that are not its own flags: a word fills the next of
 * its max file slots, --help (already printed) ends it with 0, anything else is a usage error
 * (an extra word named here; a bad flag's message already printed). Returns -1 to go on, else
 * the exit status. */

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

static int verb_table(int argc, char **argv)
{
    const char *file = NULL, *v, *cmd = "linfuse trace table";
    int nf = 0, rc;
    lf_table_opts o = {.sort_by = LF_SORT_DEVICE_TIME_TOTAL, .row_limit = 100};
    enum { SORT, LIMIT, BY_SHAPE, BY_STACK, FORMAT };
    const lf_cli_opt opts[] = {{"sort-by", 1, SORT, 0},
                               {"row-limit", 1, LIMIT, 0},
                               {"group-by-input-shape", 0, BY_SHAPE, 0},
                               {"group-by-stack", 1, BY_STACK, 0},
                               {"format", 1, FORMAT, 0},
                               MAX_BYTES_OPT};
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, 6);
    for (int id; (id = lf_tcmd_next_arg(&a, "table", &v)) != LF_CLI_END;) {
        int64_t n;
        if (id == SORT) {
            if (lf_sort_key_parse(v, &o.sort_by) != LF_OK) {
                fprintf(stderr, "%s: --sort-by: %s\n", cmd, lf_last_error());
                return LF_EXIT_USAGE;
            }
        } else if (id == LIMIT) {
            if (!strcmp(v, "-1"))
                n = -1;
            else if (!lf_cli_int(cmd, "--row-limit", v, 1, 1000000, &n))
                return LF_EXIT_USAGE;
            o.row_limit = (int)n;
        } else if (id == BY_SHAPE) {
            o.group_by_input_shape = 1;
        } else if (id == BY_STACK) {
            if (!lf_cli_int(cmd, "--group-by-stack", v, 1, 64, &n))
                return LF_EXIT_USAGE;
            o.group_by_stack = (int)n;
        } else if (id == FORMAT) {
            if (!strcmp(v, "text") || !strcmp(v, "csv") || !strcmp(v, "json")) {
                o.style = v[0] == 't' ? LF_TABLE_TEXT : v[0] == 'c' ? LF_TABLE_CSV : LF_TABLE_JSON;
            } else {
                fprintf(stderr, "%s: --format must be text, csv or json, not '%s'\n", cmd, v);
                return LF_EXIT_USAGE;
            }
        } else if ((rc = lf_tcmd_common_arg(id, v, cmd, &file, &nf, 1)) >= 0) {
            return rc;
        }
    }
    if (!file) {
        fprintf(stderr, "linfuse trace table: which trace? (linfuse trace table FILE.json)\n");
        return LF_EXIT_USAGE;
    }
    lf_trace *t = lf_tcmd_load(file);
    if (!t)
        return LF_EXIT_USAGE;
    lf_table tab;
    char *text = NULL;
    lf_status s = lf_table_build_opts(t, &o, &tab);
    if (s == LF_OK) {
        s = lf_table_format(&tab, &o, &text);
        lf_table_free(&tab);
    }
    if (s == LF_OK)
        fputs(text, stdout);
    else
        lf_tcmd_error(cmd);
    free(text);
    lf_trace_free(t);
    return s == LF_OK ? LF_EXIT_OK : LF_EXIT_FAIL;
}

static int verb_diff(int argc, char **argv)
{
    const char *files[2] = {NULL, NULL}, *v, *cmd = "linfuse trace diff";
    int nf = 0, json = 0;
    enum { JSON };
    const lf_cli_opt opts[] = {{"json", 0, JSON, 0}, MAX_BYTES_OPT};
    lf_cli_args ar;
    lf_cli_args_init(&ar, cmd, argc, argv, opts, 2);
    for (int id; (id = lf_tcmd_next_arg(&ar, "diff", &v)) != LF_CLI_END;) {
        int rc;
        if (id == JSON)
            json = 1;
        else if ((rc = lf_tcmd_common_arg(id, v, cmd, files, &nf, 2)) >= 0)
            return rc;
    }
    if (nf != 2) {
        fprintf(stderr, "linfuse trace diff: needs two traces (linfuse trace diff A.json B.json)\n");
        return LF_EXIT_USAGE;
    }
    lf_trace *a = lf_tcmd_load(files[0]), *b = a ? lf_tcmd_load(files[1]) : NULL;
    if (!a || !b) {
        lf_trace_free(a);
        return LF_EXIT_USAGE;
    }
    lf_step_profile pa, pb;
    char *text = NULL;
    lf_status s = lf_step_profile_build(a, &pa);
    if (s == LF_OK) {
        s = lf_step_profile_build(b, &pb);
        if (s == LF_OK) {
            s = lf_trace_diff(&pa, &pb, json, &text);
            lf_step_profile_free(&pb);
        }
        lf_step_profile_free(&pa);
    }
    if (s == LF_OK) {
        if (!json)
            printf("A: %s\nB: %s\n\n", files[0], files[1]);
        fputs(text, stdout);
    } else {
        lf_tcmd_error(cmd);
    }
    free(text);
    lf_trace_free(a), lf_trace_free(b);
    return s == LF_OK ? LF_EXIT_OK : LF_EXIT_FAIL;
}

enum { MAX_PATTERNS = 32 };

/* A name in a difference: whole for JSON (keep 0, escaped by the JSON writer), else cut at keep
 * and safe for a terminal. */
static void put_name(lf_sbuf *m, const char *name, size_t keep)
{
    if (keep)
        lf_sbuf_term_str(m, name, keep);
    else
        lf_sbuf_printf(m, "%s", name);
}

/* One difference from the guess (m, freed here): a line of out, or a string of the JSON's
 * "differences" list in diffs. */
static void put_difference(lf_sbuf *out, lf_sbuf *diffs, int json, int *bad, lf_sbuf *m)
{
    if (m->oom)
        out->oom = 1;
    if (json) {
        lf_sbuf_printf(diffs, "%s", *bad ? ", " : "");
        lf_sbuf_json_str(diffs, m->p ? m->p : "");
    } else {
        lf_sbuf_printf(out, "%s\n", m->p ? m->p : "");
    }
    (*bad)++;
    free(m->p);
}

static int verb_expect(int argc, char **argv)
{
    const char *file = NULL, *v, *cmd = "linfuse trace expect";
    int nf = 0, rc, json = 0;
    double want_kernels = -1;
    const char *pat[MAX_PATTERNS];
    int neg[MAX_PATTERNS], np = 0;
    enum { KPS, KERNEL, NO_KERNEL, JSON };
    const lf_cli_opt opts[] = {{"kernels-per-step", 1, KPS, 0},
                               {"kernel", 1, KERNEL, 0},
                               {"no-kernel", 1, NO_KERNEL, 0},
                               {"json", 0, JSON, 0},
                               MAX_BYTES_OPT};
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, 5);
    for (int id; (id = lf_tcmd_next_arg(&a, "expect", &v)) != LF_CLI_END;) {
        if (id == KPS) {
            char *end;
            want_kernels = strtod(v, &end);
            if (*end || !*v || !isfinite(want_kernels) || want_kernels < 0 || want_kernels > 1e9) {
                fprintf(stderr, "%s: --kernels-per-step needs a number from 0 to 1e9, got '%s'\n", cmd, v);
                return LF_EXIT_USAGE;
            }
        } else if (id == KERNEL || id == NO_KERNEL) {
            if (np == MAX_PATTERNS) {
                fprintf(stderr, "%s: at most %d --kernel/--no-kernel patterns\n", cmd, MAX_PATTERNS);
                return LF_EXIT_USAGE;
            }
            neg[np] = id == NO_KERNEL;
            pat[np++] = v;
        } else if (id == JSON) {
            json = 1;
        } else if ((rc = lf_tcmd_common_arg(id, v, cmd, &file, &nf, 1)) >= 0) {
            return rc;
        }
    }
    if (!file || (want_kernels < 0 && np == 0)) {
        fprintf(stderr, "linfuse trace expect: needs FILE.json and a guess (--kernels-per-step N, --kernel RE, "
                        "--no-kernel RE)\n");
        return LF_EXIT_USAGE;
    }
    regex_t re[MAX_PATTERNS];
    for (int k = 0; k < np; k++) {
        int err = regcomp(&re[k], pat[k], REG_EXTENDED | REG_NOSUB);
        if (err) {
            char msg[128];
            regerror(err, &re[k], msg, sizeof msg);
            fprintf(stderr, "linfuse trace expect: bad regular expression '%s': %s\n", pat[k], msg);
            for (int j = 0; j < k; j++)
                regfree(&re[j]);
            return LF_EXIT_USAGE;
        }
    }
    lf_trace *t = lf_tcmd_load(file);
    lf_step_profile p;
    rc = LF_EXIT_OK;
    if (!t || lf_step_profile_build(t, &p) != LF_OK) {
        if (t)
            lf_tcmd_error(cmd);
        rc = LF_EXIT_USAGE;
    } else {
        /* each difference as a line of text, or a string of the JSON's "differences"; names in
         * text cut as PyTorch's table cuts them (wider where two would look alike) and safe for
         * a terminal, whole in JSON */
        lf_sbuf out = {0}, diffs = {0};
        int bad = 0;
        size_t *keep = malloc((size_t)(p.n_kernels + 1) * sizeof *keep);
        const char **names = malloc((size_t)(p.n_kernels + 1) * sizeof *names);
        for (int64_t i = 0; names && i < p.n_kernels; i++)
            names[i] = p.kernels[i].name;
        if (!keep || !names || !lf_term_keeps(names, p.n_kernels, LF_TERM_NAME_KEEP, keep))
            out.oom = 1;
        if (want_kernels >= 0 && p.kernels_per_step != want_kernels) {
            lf_sbuf m = {0};
            lf_sbuf_printf(&m, "kernels per step: expected %g, the trace has %g over %lld steps", want_kernels,
                           p.kernels_per_step, (long long)p.steps);
            put_difference(&out, &diffs, json, &bad, &m);
        }
        for (int k = 0; k < np && !out.oom; k++) {
            int hits = 0;
            for (int64_t i = 0; i < p.n_kernels; i++)
                if (regexec(&re[k], p.kernels[i].name, 0, NULL, 0) == 0) {
                    hits++;
                    if (neg[k]) {
                        lf_sbuf m = {0};
                        lf_sbuf_printf(&m, "kernel '");
                        put_name(&m, p.kernels[i].name, json ? 0 : keep[i]);
                        lf_sbuf_printf(&m, "' matches --no-kernel '");
                        put_name(&m, pat[k], json ? 0 : LF_TERM_NAME_KEEP);
                        lf_sbuf_printf(&m, "'");
                        put_difference(&out, &diffs, json, &bad, &m);
                    }
                }
            if (!neg[k] && !hits) {
                lf_sbuf m = {0};
                lf_sbuf_printf(&m, "no kernel matches --kernel '");
                put_name(&m, pat[k], json ? 0 : LF_TERM_NAME_KEEP);
                lf_sbuf_printf(&m, "'");
                put_difference(&out, &diffs, json, &bad, &m);
                if (!json) {
                    lf_sbuf_printf(&out, "the kernels are:\n");
                    for (int64_t i = 0; i < p.n_kernels; i++) {
                        lf_sbuf_printf(&out, "  ");
                        lf_sbuf_term_str(&out, p.kernels[i].name, keep[i]);
                        lf_sbuf_printf(&out, " (%g per step)\n", p.kernels[i].per_step);
                    }
                }
            }
        }
        free(keep), free(names);
        if (out.oom || diffs.oom) {
            fprintf(stderr, "linfuse trace expect: out of memory\n");
            free(out.p), free(diffs.p);
            lf_step_profile_free(&p);
            for (int k = 0; k < np; k++)
                regfree(&re[k]);
            lf_trace_free(t);
            return LF_EXIT_FAIL;
        }
        if (json) {
            printf("{\"matched\": %s, \"steps\": %lld, \"kernels_per_step\": %g, \"differences\": [%s], \"kernels\": [",
                   bad ? "false" : "true", (long long)p.steps, p.kernels_per_step, diffs.p ? diffs.p : "");
            for (int64_t i = 0; i < p.n_kernels; i++) {
                lf_sbuf k = {0};
                lf_sbuf_json_str(&k, p.kernels[i].name);
                printf("%s{\"name\": %s, \"per_step\": %g}", i ? ", " : "", k.p ? k.p : "\"\"", p.kernels[i].per_step);
                free(k.p);
            }
            printf("]}\n");
        } else {
            fputs(out.p ? out.p : "", stdout);
            if (bad)
                printf("%d difference%s from the guess\n", bad, bad == 1 ? "" : "s");
            else
                printf("as expected: %g kernels per step over %lld steps\n", p.kernels_per_step, (long long)p.steps);
        }
        rc = bad ? LF_EXIT_FAIL : LF_EXIT_OK;
        free(out.p), free(diffs.p);
        lf_step_profile_free(&p);
    }
    for (int k = 0; k < np; k++)
        regfree(&re[k]);
    lf_trace_free(t);
    return rc;
}

static lf_status each_rank(lf_trace *t, lf_status (*one)(const lf_trace *, int64_t, void *), void *ctx)
{
    const int64_t ranks = lf_trace_meta_get(t)->merged_ranks;
    if (!ranks)
        return one(t, -1, ctx);
    lf_status st = LF_OK;
    for (int64_t r = 0; r < ranks && st == LF_OK; r++) {
        lf_trace *mine = NULL;
        st = lf_trace_of_rank(t, r, &mine);
        if (st == LF_OK)
            st = one(mine, r, ctx);
        lf_trace_free(mine);
    }
    return st;
}

typedef struct rank_out {
    int json, n;
} rank_out;

static lf_status summary_one(const lf_trace *t, int64_t rank, void *ctx)
{
    rank_out *o = ctx;
    lf_trace_summary s;
    LF_TRY(lf_trace_summarize(t, &s));
    if (o->json) {
        lf_sbuf b = {0};
        lf_sbuf_printf(&b, "%s\n  {", o->n++ ? "," : "");
        if (rank >= 0)
            lf_sbuf_printf(&b, "\"rank\": %lld, ", (long long)rank);
        lf_sbuf_printf(&b,
                       "\"steps\": %lld, \"kernels_per_step\": %g, \"graph_kernels_per_step\": %g, "
                       "\"cpu_ops_per_step\": %g, \"device_busy\": %.4f, \"step_us\": %.3f, "
                       "\"device_us_per_step\": %.3f, \"events\": %lld",
                       (long long)s.steps, s.kernels_per_step, s.graph_kernels_per_step, s.cpu_ops_per_step,
                       s.device_busy, s.step_ns / 1e3, s.device_ns_per_step / 1e3, (long long)lf_trace_count(t));
        if (s.has_comm)
            lf_sbuf_printf(&b, ", \"comm_us_per_step\": %.3f, \"exposed_comm_us_per_step\": %.3f, \"overlap\": %.4f",
                           s.comm_ns_per_step / 1e3, s.exposed_comm_ns_per_step / 1e3, s.overlap);
        lf_sbuf_printf(&b, ", \"verdict\": \"%s\"}",
                       s.has_comm && s.comm_bound ? "comm-bound"
                       : s.compute_bound          ? "compute-bound"
                                                  : "overhead-bound");
        if (b.oom)
            return lf_fail(LF_ENOMEM, "out of memory");
        fputs(b.p, stdout);
        free(b.p);
        return LF_OK;
    }
    char line[360], who[32] = "";
    if (rank >= 0)
        snprintf(who, sizeof who, "rank=%lld ", (long long)rank);
    lf_trace_summary_line(&s, line, sizeof line);
    printf("%s%s\n%ssteps=%lld step_time=%.3fus device_time/step=%.3fus events=%lld\n", who, line, who,
           (long long)s.steps, s.step_ns / 1e3, s.device_ns_per_step / 1e3, (long long)lf_trace_count(t));
    return LF_OK;
}

static lf_status breakdown_one(const lf_trace *t, int64_t rank, void *ctx)
{
    rank_out *o = ctx;
    lf_breakdown b;
    char *text = NULL;
    LF_TRY(lf_trace_breakdown(t, &b));
    lf_status st = lf_breakdown_format(&b, rank, o->json, &text);
    lf_breakdown_free(&b);
    if (st == LF_OK)
        printf("%s%s%s", o->json ? (o->n ? ",\n" : "\n") : (o->n ? "\n" : ""), text, o->json ? "" : "");
    o->n++;
    free(text);
    return st;
}

/* summary and breakdown: one trace, every rank of it; --json wraps the ranks in {"ranks": [...]} */
static int verb_per_rank(int argc, char **argv, const char *verb, lf_status (*one)(const lf_trace *, int64_t, void *))
{
    const char *file = NULL, *v;
    char cmd[64];
    snprintf(cmd, sizeof cmd, "linfuse trace %s", verb);
    enum { JSON };
    const lf_cli_opt opts[] = {{"json", 0, JSON, 0}, MAX_BYTES_OPT};
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, 2);
    rank_out o = {0, 0};
    int nf = 0, rc;
    for (int id; (id = lf_tcmd_next_arg(&a, verb, &v)) != LF_CLI_END;) {
        if (id == JSON)
            o.json = 1;
        else if ((rc = lf_tcmd_common_arg(id, v, cmd, &file, &nf, 1)) >= 0)
            return rc;
    }
    if (!file) {
        fprintf(stderr, "%s: which trace? (%s FILE.json)\n", cmd, cmd);
        return LF_EXIT_USAGE;
    }
    lf_trace *t = lf_tcmd_load(file);
    if (!t)
        return LF_EXIT_USAGE;
    if (o.json)
        printf("{\"ranks\": [");
    lf_status st = each_rank(t, one, &o);
    if (o.json && st == LF_OK)
        printf("\n]}\n");
    if (st != LF_OK)
        lf_tcmd_error(cmd);
    lf_trace_free(t);
    return st == LF_OK ? LF_EXIT_OK : LF_EXIT_FAIL;
}

static int verb_merge(int argc, char **argv)
{
    enum { MAX_IN = 256 };
    const char *files[MAX_IN], *out = NULL, *v, *cmd = "linfuse trace merge";
    int nf = 0, rc;
    enum { OUT };
    const lf_cli_opt opts[] = {{"output", 1, OUT, 'o'}, MAX_BYTES_OPT};
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, 2);
    for (int id; (id = lf_tcmd_next_arg(&a, "merge", &v)) != LF_CLI_END;) {
        if (id == OUT)
            out = v;
        else if ((rc = lf_tcmd_common_arg(id, v, cmd, files, &nf, MAX_IN)) >= 0)
            return rc;
    }
    if (nf < 1 || !out) {
        fprintf(stderr, "%s: usage: linfuse trace merge RANK0.json RANK1.json ... -o MERGED.json\n", cmd);
        return LF_EXIT_USAGE;
    }
    lf_trace *in[MAX_IN] = {0}, *m = NULL;
    rc = LF_EXIT_OK;
    for (int i = 0; i < nf && rc == LF_EXIT_OK; i++)
        if (!(in[i] = lf_tcmd_load(files[i])))
            rc = LF_EXIT_USAGE;
    if (rc == LF_EXIT_OK && lf_trace_merge((const lf_trace *const *)in, nf, &m) != LF_OK) {
        lf_tcmd_error(cmd);
        rc = LF_EXIT_USAGE;
    }
    if (rc == LF_EXIT_OK && lf_trace_write_json(m, out) != LF_OK) {
        lf_tcmd_error(cmd);
        rc = LF_EXIT_FAIL;
    }
    if (rc == LF_EXIT_OK)
        printf("wrote %s: %d rank%s, %lld events\n", out, nf, nf == 1 ? "" : "s", (long long)lf_trace_count(m));
    for (int i = 0; i < nf; i++)
        lf_trace_free(in[i]);
    lf_trace_free(m);
    return rc;
}

int lf_cli_trace(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? LF_EXIT_USAGE : LF_EXIT_OK;
    }
    const char *v = argv[1];
    if (!strcmp(v, "table"))
        return verb_table(argc - 1, argv + 1);
    if (!strcmp(v, "diff"))
        return verb_diff(argc - 1, argv + 1);
    if (!strcmp(v, "expect"))
        return verb_expect(argc - 1, argv + 1);
    if (!strcmp(v, "svg"))
        return lf_tcmd_svg(argc - 1, argv + 1);
    if (!strcmp(v, "summary"))
        return verb_per_rank(argc - 1, argv + 1, "summary", summary_one);
    if (!strcmp(v, "breakdown"))
        return verb_per_rank(argc - 1, argv + 1, "breakdown", breakdown_one);
    if (!strcmp(v, "merge"))
        return verb_merge(argc - 1, argv + 1);
    if (!strcmp(v, "report"))
        return lf_tcmd_report(argc - 1, argv + 1);
    if (!strcmp(v, "serve"))
        return lf_tcmd_serve(argc - 1, argv + 1);
    const char *names[sizeof verbs / sizeof verbs[0]];
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        names[i] = verbs[i].verb;
    const char *near = lf_cli_closest(v, names, (int)(sizeof names / sizeof names[0]));
    fprintf(stderr, "linfuse trace: unknown verb '%s'", v);
    if (near)
        fprintf(stderr, "; did you mean %s?", near);
    fprintf(stderr, "\n");
    usage(stderr);
    return LF_EXIT_USAGE;
}
