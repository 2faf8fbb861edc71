/* `linfuse trace <verb>`: read any Kineto-schema trace (PyTorch's or linfuse's) and answer
 * questions about it through the library's public trace API: table, diff, expect, summary,
 * breakdown, merge here; svg, report and serve in trace_views.c; what they share in
 * trace_args.c. Works on CPU-only machines.
 * Exit status: 0 done (expect: the trace matched), 1 expect found differences, 2 bad command
 * line or unreadable trace. Layer: cli/. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/trace_args.h"
#include "cli/trace_views.h"

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
            char *end = NULL;
            errno = 0;
            n = strtoll(v, &end, 10);
            if (!*v || *end || errno || !(n == -1 || (n >= 1 && n <= 1000000))) {
                fprintf(stderr, "%s: --row-limit must be -1 (every row) or an integer from 1 to 1000000, got '%s'\n",
                        cmd, v);
                return LF_EXIT_USAGE;
            }
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
    if (!strcmp(files[0], "-") && !strcmp(files[1], "-")) {
        fprintf(stderr, "%s: both traces are standard input, which holds one; name a file for the other\n", cmd);
        return LF_EXIT_USAGE;
    }
    lf_trace *a = lf_tcmd_load(files[0]), *b = a ? lf_tcmd_load(files[1]) : NULL;
    if (!a || !b) {
        lf_trace_free(a);
        return LF_EXIT_USAGE;
    }
    for (int i = 0; i < 2; i++) /* steps of several ranks would be summed as one: compare rank to rank */
        if (lf_trace_meta_get(i ? b : a)->merged_ranks) {
            fprintf(stderr,
                    "%s: %s is a merged trace of %lld ranks; diff compares one process's steps: diff the ranks' own "
                    "traces\n",
                    cmd, files[i], (long long)lf_trace_meta_get(i ? b : a)->merged_ranks);
            lf_trace_free(a), lf_trace_free(b);
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

/* expect's command line into o (patterns into pat, at most MAX_PATTERNS) and *file; -1 to go on,
 * else the exit status (the message printed). */
static int expect_args(int argc, char **argv, lf_expect_opts *o, lf_expect_pattern *pat, const char **file, int *json)
{
    const char *v, *cmd = "linfuse trace expect";
    int nf = 0, rc;
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
            o->kernels_per_step = strtod(v, &end);
            if (*end || !*v || !isfinite(o->kernels_per_step) || o->kernels_per_step < 0 || o->kernels_per_step > 1e9) {
                fprintf(stderr, "%s: --kernels-per-step needs a number from 0 to 1e9, got '%s'\n", cmd, v);
                return LF_EXIT_USAGE;
            }
        } else if (id == KERNEL || id == NO_KERNEL) {
            if (o->n_patterns == MAX_PATTERNS) {
                fprintf(stderr, "%s: at most %d --kernel/--no-kernel patterns\n", cmd, MAX_PATTERNS);
                return LF_EXIT_USAGE;
            }
            pat[o->n_patterns++] = (lf_expect_pattern){v, id == KERNEL ? LF_EXPECT_PRESENT : LF_EXPECT_ABSENT};
        } else if (id == JSON) {
            *json = 1;
        } else if ((rc = lf_tcmd_common_arg(id, v, cmd, file, &nf, 1)) >= 0) {
            return rc;
        }
    }
    if (!*file || (o->kernels_per_step < 0 && o->n_patterns == 0)) {
        fprintf(stderr, "linfuse trace expect: needs FILE.json and a guess (--kernels-per-step N, --kernel RE, "
                        "--no-kernel RE)\n");
        return LF_EXIT_USAGE;
    }
    return -1;
}

/* The guess is compiled before the trace is read, so a bad pattern is refused at once. */
static int verb_expect(int argc, char **argv)
{
    const char *file = NULL, *cmd = "linfuse trace expect";
    lf_expect_pattern pat[MAX_PATTERNS];
    lf_expect_opts o = {.kernels_per_step = -1, .patterns = pat};
    int json = 0, rc = expect_args(argc, argv, &o, pat, &file, &json);
    if (rc >= 0)
        return rc;
    lf_trace_expect *e = NULL;
    if (lf_trace_expect_create(&e, &o) != LF_OK) {
        lf_tcmd_error(cmd);
        return LF_EXIT_USAGE;
    }
    lf_trace *t = lf_tcmd_load(file);
    char *text = NULL;
    int differences = 0;
    lf_status s = t ? lf_trace_expect_check(e, t, json, &text, &differences) : LF_EINVAL;
    if (s == LF_OK) {
        fputs(text, stdout);
        rc = differences ? LF_EXIT_FAIL : LF_EXIT_OK;
    } else {
        if (t) /* else lf_tcmd_load said why */
            lf_tcmd_error(cmd);
        rc = s == LF_ENOMEM ? LF_EXIT_FAIL : LF_EXIT_USAGE;
    }
    free(text);
    lf_trace_free(t);
    lf_trace_expect_free(e);
    return rc;
}

static lf_status each_rank(lf_trace *t, lf_status (*one)(const lf_trace *, int64_t, void *), void *ctx)
{
    enum { MAX_RANKS = 4096 }; /* the most a merge makes */
    int64_t ranks[MAX_RANKS];
    const int64_t n = lf_trace_ranks(t, ranks, MAX_RANKS); /* whichever they are (3 and 5 of eight, say) */
    if (n < 0)
        return LF_ENOMEM;
    if (!n)
        return one(t, -1, ctx);
    if (n > MAX_RANKS)
        fprintf(stderr, "linfuse trace: the trace names %lld ranks; the first %d are shown\n", (long long)n, MAX_RANKS);
    lf_status st = LF_OK;
    for (int64_t k = 0; k < n && k < MAX_RANKS && st == LF_OK; k++) {
        lf_trace *mine = NULL;
        st = lf_trace_of_rank(t, ranks[k], &mine);
        if (st == LF_OK)
            st = one(mine, ranks[k], ctx);
        lf_trace_free(mine);
    }
    return st;
}

typedef struct rank_out {
    int json, n;
} rank_out;

/* One rank's summary (rank -1: the trace is no merged one), after the previous rank's. */
static lf_status summary_one(const lf_trace *t, int64_t rank, void *ctx)
{
    rank_out *o = ctx;
    char *text = NULL;
    lf_status st = lf_trace_summary_format(t, rank, o->json, &text);
    if (st == LF_OK)
        printf("%s%s", o->json ? (o->n ? ",\n  " : "\n  ") : "", text);
    o->n++;
    free(text);
    return st;
}

static lf_status breakdown_one(const lf_trace *t, int64_t rank, void *ctx)
{
    rank_out *o = ctx;
    lf_breakdown b;
    char *text = NULL;
    lf_status st = lf_trace_breakdown(t, &b);
    if (st != LF_OK)
        return st;
    st = lf_breakdown_format(&b, rank, o->json, &text);
    lf_breakdown_free(&b);
    if (st == LF_OK)
        printf("%s%s", o->json ? (o->n ? ",\n" : "\n") : (o->n ? "\n" : ""), text);
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
    if (!lf_tcmd_output_apart(cmd, out, files, nf))
        return LF_EXIT_USAGE;
    /* one input at a time, freed once added: the merged trace and one input are held, not all */
    lf_trace *m = NULL;
    rc = LF_EXIT_OK;
    if (lf_trace_merge_begin(&m) != LF_OK) {
        lf_tcmd_error(cmd);
        rc = LF_EXIT_FAIL;
    }
    for (int i = 0; i < nf && rc == LF_EXIT_OK; i++) {
        lf_trace *t = lf_tcmd_load_all(files[i]); /* every arg carried over */
        if (!t) {
            rc = LF_EXIT_USAGE;
        } else if (lf_trace_merge_add(m, t) != LF_OK) {
            lf_tcmd_error(cmd);
            rc = LF_EXIT_USAGE;
        }
        lf_trace_free(t);
    }
    if (rc == LF_EXIT_OK && lf_trace_write_json(m, out) != LF_OK) {
        lf_tcmd_error(cmd);
        rc = LF_EXIT_FAIL;
    }
    if (rc == LF_EXIT_OK)
        fprintf(lf_cli_note_stream(out), "wrote %s: %d rank%s, %lld events\n", out, nf, nf == 1 ? "" : "s",
                (long long)lf_trace_count(m));
    lf_trace_free(m);
    return rc;
}

int lf_cli_trace(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        lf_tcmd_usage(argc < 2 ? stderr : stdout);
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
    if (!strcmp(v, "stats"))
        return lf_tcmd_stats(argc - 1, argv + 1);
    if (!strcmp(v, "export"))
        return lf_tcmd_export(argc - 1, argv + 1);
    const char *near = lf_tcmd_closest(v);
    fprintf(stderr, "linfuse trace: unknown verb '%s' (linfuse trace --help lists the verbs)", v);
    if (near)
        fprintf(stderr, "; did you mean %s?", near);
    fprintf(stderr, "\n");
    return LF_EXIT_USAGE;
}
