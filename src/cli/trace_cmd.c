/* `linfuse trace <verb>`: read any Kineto-schema trace (PyTorch's or linfuse's) and answer
 * questions about it: table, diff, expect, svg, summary. Works on CPU-only machines.
 * Exit status: 0 done (expect: the trace matched), 1 expect found differences, 2 bad command
 * line or unreadable trace. Layer: cli/. */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f)
{
    fputs("usage: linfuse trace <verb> ...\n"
          "  table   FILE.json [--sort-by KEY] [--row-limit N]   key_averages().table() of the trace\n"
          "  diff    A.json B.json [--json]                     what changed per step from A to B\n"
          "  expect  FILE.json --kernels-per-step N [--kernel REGEX]... [--no-kernel REGEX]...\n"
          "                                                     exit 0 if the trace matches the guess\n"
          "  svg     FILE.json [--step N] -o OUT.svg            one step drawn as a timeline\n"
          "  summary FILE.json                                  kernels per step, device busy, verdict\n"
          "KEY: self_cpu_time_total, cpu_time_total, self_cuda_time_total, cuda_time_total (default),\n"
          "     cpu_time, cuda_time, count (device_* spellings too)\n",
          f);
}

static lf_trace *load(const char *path)
{
    lf_trace *t = NULL;
    if (lf_trace_read_json(&t, path) != LF_OK) {
        fprintf(stderr, "linfuse trace: %s\n", lf_last_error());
        return NULL;
    }
    return t;
}

static int verb_table(int argc, char **argv)
{
    const char *file = NULL;
    lf_table_opts o = {LF_SORT_DEVICE_TIME_TOTAL, 100};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sort-by") || !strcmp(argv[i], "--sort_by")) {
            if (i + 1 >= argc || lf_sort_key_parse(argv[i + 1], &o.sort_by) != LF_OK) {
                fprintf(stderr, "linfuse trace table: --sort-by: %s\n", i + 1 < argc ? lf_last_error() : "needs a key");
                return LF_EXIT_USAGE;
            }
            i++;
        } else if (!strcmp(argv[i], "--row-limit") || !strcmp(argv[i], "--row_limit")) {
            char *end;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || v == 0 || v < -1 || v > 1000000) {
                fprintf(stderr, "linfuse trace table: --row-limit must be a positive count or -1 (all)\n");
                return LF_EXIT_USAGE;
            }
            o.row_limit = (int)v;
            i++;
        } else if (!file && argv[i][0] != '-') {
            file = argv[i];
        } else {
            fprintf(stderr, "linfuse trace table: unexpected argument '%s'\n", argv[i]);
            return LF_EXIT_USAGE;
        }
    }
    if (!file) {
        fprintf(stderr, "linfuse trace table: which trace? (linfuse trace table FILE.json)\n");
        return LF_EXIT_USAGE;
    }
    lf_trace *t = load(file);
    if (!t)
        return LF_EXIT_USAGE;
    lf_table tab;
    char *text = NULL;
    lf_status s = lf_table_build(t, o.sort_by, &tab);
    if (s == LF_OK) {
        s = lf_table_format(&tab, &o, &text);
        lf_table_free(&tab);
    }
    if (s == LF_OK)
        fputs(text, stdout);
    else
        fprintf(stderr, "linfuse trace table: %s\n", lf_last_error());
    free(text);
    lf_trace_free(t);
    return s == LF_OK ? LF_EXIT_OK : LF_EXIT_FAIL;
}

static int verb_diff(int argc, char **argv)
{
    const char *files[2] = {NULL, NULL};
    int nf = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (argv[i][0] != '-' && nf < 2)
            files[nf++] = argv[i];
        else {
            fprintf(stderr, "linfuse trace diff: unexpected argument '%s'\n", argv[i]);
            return LF_EXIT_USAGE;
        }
    }
    if (nf != 2) {
        fprintf(stderr, "linfuse trace diff: needs two traces (linfuse trace diff A.json B.json)\n");
        return LF_EXIT_USAGE;
    }
    lf_trace *a = load(files[0]), *b = a ? load(files[1]) : NULL;
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
        fprintf(stderr, "linfuse trace diff: %s\n", lf_last_error());
    }
    free(text);
    lf_trace_free(a), lf_trace_free(b);
    return s == LF_OK ? LF_EXIT_OK : LF_EXIT_FAIL;
}

enum { MAX_PATTERNS = 32 };

static int verb_expect(int argc, char **argv)
{
    const char *file = NULL;
    double want_kernels = -1;
    const char *pat[MAX_PATTERNS];
    int neg[MAX_PATTERNS], np = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--kernels-per-step") || !strcmp(argv[i], "--kernels_per_step")) {
            char *end;
            want_kernels = v ? strtod(v, &end) : -1;
            if (!v || *end || want_kernels < 0) {
                fprintf(stderr, "linfuse trace expect: --kernels-per-step needs a number >= 0\n");
                return LF_EXIT_USAGE;
            }
            i++;
        } else if (!strcmp(argv[i], "--kernel") || !strcmp(argv[i], "--no-kernel") || !strcmp(argv[i], "--no_kernel")) {
            if (!v || np == MAX_PATTERNS) {
                fprintf(stderr, "linfuse trace expect: %s needs a regular expression (at most %d)\n", argv[i],
                        MAX_PATTERNS);
                return LF_EXIT_USAGE;
            }
            neg[np] = strcmp(argv[i], "--kernel") != 0;
            pat[np++] = v;
            i++;
        } else if (!file && argv[i][0] != '-') {
            file = argv[i];
        } else {
            fprintf(stderr, "linfuse trace expect: unexpected argument '%s'\n", argv[i]);
            return LF_EXIT_USAGE;
        }
    }
    if (!file || (want_kernels < 0 && np == 0)) {
        fprintf(stderr, "linfuse trace expect: needs FILE.json and a guess (--kernels-per-step N, --kernel RE, "
                        "--no-kernel RE)\n");
        return LF_EXIT_USAGE;
    }
    regex_t re[MAX_PATTERNS];
    for (int k = 0; k < np; k++) {
        int rc = regcomp(&re[k], pat[k], REG_EXTENDED | REG_NOSUB);
        if (rc) {
            char msg[128];
            regerror(rc, &re[k], msg, sizeof msg);
            fprintf(stderr, "linfuse trace expect: bad regular expression '%s': %s\n", pat[k], msg);
            for (int j = 0; j < k; j++)
                regfree(&re[j]);
            return LF_EXIT_USAGE;
        }
    }
    lf_trace *t = load(file);
    lf_step_profile p;
    int rc = LF_EXIT_OK;
    if (!t || lf_step_profile_build(t, &p) != LF_OK) {
        if (t)
            fprintf(stderr, "linfuse trace expect: %s\n", lf_last_error());
        rc = LF_EXIT_USAGE;
    } else {
        int bad = 0;
        if (want_kernels >= 0 && p.kernels_per_step != want_kernels) {
            printf("kernels per step: expected %g, the trace has %g over %lld steps\n", want_kernels,
                   p.kernels_per_step, (long long)p.steps);
            bad++;
        }
        for (int k = 0; k < np; k++) {
            int hits = 0;
            for (int64_t i = 0; i < p.n_kernels; i++)
                if (regexec(&re[k], p.kernels[i].name, 0, NULL, 0) == 0) {
                    hits++;
                    if (neg[k]) {
                        printf("kernel '%s' matches --no-kernel '%s'\n", p.kernels[i].name, pat[k]);
                        bad++;
                    }
                }
            if (!neg[k] && !hits) {
                printf("no kernel matches --kernel '%s'; the kernels are:\n", pat[k]);
                for (int64_t i = 0; i < p.n_kernels; i++)
                    printf("  %s (%g per step)\n", p.kernels[i].name, p.kernels[i].per_step);
                bad++;
            }
        }
        if (bad) {
            printf("%d difference%s from the guess\n", bad, bad == 1 ? "" : "s");
            rc = LF_EXIT_FAIL;
        } else {
            printf("as expected: %g kernels per step over %lld steps\n", p.kernels_per_step, (long long)p.steps);
        }
        lf_step_profile_free(&p);
    }
    for (int k = 0; k < np; k++)
        regfree(&re[k]);
    lf_trace_free(t);
    return rc;
}

static int verb_svg(int argc, char **argv)
{
    const char *file = NULL, *out = NULL;
    int64_t step = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "linfuse trace svg: -o needs a file name\n");
                return LF_EXIT_USAGE;
            }
            out = argv[++i];
        } else if (!strcmp(argv[i], "--step")) {
            char *end;
            step = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
            if (i + 1 >= argc || *end || step < 0 || step > 1000000) {
                fprintf(stderr, "linfuse trace svg: --step needs a step index >= 0 (0 is the first kept step)\n");
                return LF_EXIT_USAGE;
            }
            i++;
        } else if (!file && argv[i][0] != '-') {
            file = argv[i];
        } else {
            fprintf(stderr, "linfuse trace svg: unexpected argument '%s'\n", argv[i]);
            return LF_EXIT_USAGE;
        }
    }
    if (!file || !out) {
        fprintf(stderr, "linfuse trace svg: usage: linfuse trace svg FILE.json [--step N] -o OUT.svg\n");
        return LF_EXIT_USAGE;
    }
    lf_trace *t = load(file);
    if (!t)
        return LF_EXIT_USAGE;
    lf_status s = lf_trace_svg(t, (int)step, out);
    lf_trace_free(t);
    if (s != LF_OK) {
        fprintf(stderr, "linfuse trace svg: %s\n", lf_last_error());
        return s == LF_EINVAL ? LF_EXIT_USAGE : LF_EXIT_FAIL;
    }
    printf("wrote %s\n", out);
    return LF_EXIT_OK;
}

static int verb_summary(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "linfuse trace summary: usage: linfuse trace summary FILE.json\n");
        return LF_EXIT_USAGE;
    }
    lf_trace *t = load(argv[1]);
    if (!t)
        return LF_EXIT_USAGE;
    lf_trace_summary s;
    char line[200];
    lf_status st = lf_trace_summarize(t, &s);
    if (st == LF_OK) {
        lf_trace_summary_line(&s, line, sizeof line);
        printf("%s\nsteps=%lld step_time=%.3fus device_time/step=%.3fus events=%lld\n", line, (long long)s.steps,
               s.step_ns / 1e3, s.device_ns_per_step / 1e3, (long long)lf_trace_count(t));
    } else {
        fprintf(stderr, "linfuse trace summary: %s\n", lf_last_error());
    }
    lf_trace_free(t);
    return st == LF_OK ? LF_EXIT_OK : LF_EXIT_FAIL;
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
        return verb_svg(argc - 1, argv + 1);
    if (!strcmp(v, "summary"))
        return verb_summary(argc - 1, argv + 1);
    fprintf(stderr, "linfuse trace: unknown verb '%s'\n", v);
    usage(stderr);
    return LF_EXIT_USAGE;
}
