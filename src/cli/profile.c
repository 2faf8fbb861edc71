/* `linfuse profile [flags] -- CMD ARGS...`: PyTorch-style traces and tables of any CUDA program,
 * with no change to it. CMD runs with linfuse's injection library set up (CUDA_INJECTION64_PATH;
 * NVTX_INJECTION64_PATH for NVTX ranges); every process of it that starts CUDA, children and
 * torchrun's workers too, writes one Kineto trace when it ends; then this prints each one's
 * key_averages() table and summary line, as the experiments do, and exits with CMD's status. The
 * tables go to standard error: CMD's standard output stays CMD's. docs/profile.md. Layer: cli/. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/profile.h"
#include "linfuse/settings.h"
#include "linfuse/trace.h"

static const char CMD_NAME[] = "linfuse profile";

typedef struct profile_opts {
    const char *output; /* DIR, or FILE ending in .json or .json.gz */
    const char *delay, *duration, *capture_range, *steps;
    int gzip, kernels_only, require_gpu, python_stack, no_graphs;
    int64_t row_limit;
    char **cmd; /* CMD ARGS..., NULL-terminated (argv's own tail) */
} profile_opts;

enum {
    O_OUTPUT,
    O_GZIP,
    O_DELAY,
    O_DURATION,
    O_CAPTURE,
    O_STEPS,
    O_KERNELS_ONLY,
    O_PYTHON_STACK,
    O_NO_GRAPHS,
    O_REQUIRE_GPU,
    O_ROW_LIMIT
};

static const lf_cli_opt opts[] = {
    {"output", 1, O_OUTPUT, 'o'},
    {"gzip", 0, O_GZIP, 0},
    {"delay", 1, O_DELAY, 0},
    {"duration", 1, O_DURATION, 0},
    {"capture-range", 1, O_CAPTURE, 0},
    {"steps", 1, O_STEPS, 0},
    {"kernels-only", 0, O_KERNELS_ONLY, 0},
    {"python-stack", 0, O_PYTHON_STACK, 0},
    {"no-graph-captures", 0, O_NO_GRAPHS, 0},
    {"require-gpu", 0, O_REQUIRE_GPU, 0},
    {"row-limit", 1, O_ROW_LIMIT, 0},
};

static void usage(FILE *f)
{
    fputs("usage: linfuse profile [flags] [--] CMD [ARGS...]\n"
          "Runs CMD with CUPTI injected: each of its processes that starts CUDA (children and torchrun's\n"
          "workers too) writes one Kineto trace of its kernels, copies, CUDA calls and NVTX ranges when it\n"
          "ends; then each trace's key_averages() table and summary are printed (on standard error).\n"
          "Exits with CMD's status (128+N when signal N ended it). Without a CUDA driver, CMD runs untraced.\n"
          "  -o, --output DIR|FILE  where traces go: DIR/<program>_<pid>[_rank<R>].json, or FILE (.json or\n"
          "                         .json.gz) for a program of one process (traces/profile)\n"
          "  --gzip                 write DIR's traces as .json.gz\n"
          "  --delay S              record from S seconds after each process starts\n"
          "  --duration S           record S seconds (from --delay, or from when the process starts CUDA),\n"
          "                         then write the trace (the program runs on)\n"
          "  --capture-range NAME   keep only what runs inside NVTX ranges named NAME (NAME@DOMAIN: in that\n"
          "                         domain), as Nsight's capture range\n"
          "  --steps A:B            keep only steps A to B: NVTX ranges named ProfilerStep#N (A:, :B, N too)\n"
          "  --kernels-only         device work and NVTX ranges only, no CUDA calls: the least overhead\n"
          "  --python-stack         the innermost Python frames of every kernel launch, copy and set\n"
          "                         (a CUDA graph's captures get their ranges and frames either way)\n"
          "  --no-graph-captures    leave CUDA graph captures unrecorded: replayed kernels stay tied to their\n"
          "                         cudaGraphLaunch only\n"
          "  --require-gpu          fail (exit 1) instead of running CMD untraced when CUDA cannot be traced\n"
          "  --row-limit N          table rows printed per process (20; 0 prints no table)\n",
          f);
}

/* S: a number of seconds, 0 to 10^7. */
static int seconds(const char *flag, const char *v)
{
    char *end = NULL;
    errno = 0;
    double x = v ? strtod(v, &end) : NAN;
    if (!v || errno || end == v || *end || !isfinite(x) || x < 0 || x > 1e7 || v[0] == ' ') {
        fprintf(stderr, "%s: %s must be a number of seconds from 0 to 10000000, got '%s'\n", CMD_NAME, flag,
                v ? v : "");
        return 0;
    }
    return 1;
}

/* "A:B", "A:", ":B" or "N", whole non-negative numbers with A <= B. */
static int steps_ok(const char *s)
{
    const char *colon = strchr(s, ':');
    long long lo = 0, hi = -1;
    char *end;
    if (colon != s) {
        if (*s < '0' || *s > '9')
            return 0;
        lo = strtoll(s, &end, 10);
        if (end != (colon ? colon : s + strlen(s)))
            return 0;
    }
    if (!colon)
        return 1;
    if (colon[1]) {
        if (colon[1] < '0' || colon[1] > '9')
            return 0;
        hi = strtoll(colon + 1, &end, 10);
        if (*end || hi < lo)
            return 0;
    }
    return colon != s || colon[1];
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* Flags up to CMD (the first word, or what follows "--"). LF_EXIT_OK to go on. */
static int parse(int argc, char **argv, profile_opts *o)
{
    *o = (profile_opts){.output = "traces/profile", .row_limit = 20};
    lf_cli_args a;
    lf_cli_args_init(&a, CMD_NAME, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
    const char *v;
    for (int id; !o->cmd && (id = lf_cli_next(&a, &v)) != LF_CLI_END;) {
        switch (id) {
        case LF_CLI_HELP:
            usage(stdout);
            return -1;
        case LF_CLI_BAD:
            return LF_EXIT_USAGE;
        case LF_CLI_WORD:
            o->cmd = argv + a.next - 1;
            break;
        case O_OUTPUT:
            o->output = v;
            break;
        case O_GZIP:
            o->gzip = 1;
            break;
        case O_DELAY:
            if (!seconds("--delay", v))
                return LF_EXIT_USAGE;
            o->delay = v;
            break;
        case O_DURATION:
            if (!seconds("--duration", v))
                return LF_EXIT_USAGE;
            o->duration = v;
            break;
        case O_CAPTURE:
            if (!*v) {
                fprintf(stderr, "%s: --capture-range needs a range's name\n", CMD_NAME);
                return LF_EXIT_USAGE;
            }
            o->capture_range = v;
            break;
        case O_STEPS:
            if (!steps_ok(v)) {
                fprintf(stderr, "%s: --steps must be A:B (A <= B), A:, :B or N, got '%s'\n", CMD_NAME, v);
                return LF_EXIT_USAGE;
            }
            o->steps = v;
            break;
        case O_KERNELS_ONLY:
            o->kernels_only = 1;
            break;
        case O_PYTHON_STACK:
            o->python_stack = 1;
            break;
        case O_NO_GRAPHS:
            o->no_graphs = 1;
            break;
        case O_REQUIRE_GPU:
            o->require_gpu = 1;
            break;
        case O_ROW_LIMIT:
            if (!lf_cli_int(CMD_NAME, "--row-limit", v, 0, 100000, &o->row_limit))
                return LF_EXIT_USAGE;
            break;
        }
    }
    if (!o->cmd) {
        fprintf(stderr, "%s: no program to run: linfuse profile [flags] -- CMD [ARGS...]\n", CMD_NAME);
        return LF_EXIT_USAGE;
    }
    if (!*o->output) {
        fprintf(stderr, "%s: --output needs a directory or a .json file\n", CMD_NAME);
        return LF_EXIT_USAGE;
    }
    return LF_EXIT_OK;
}

/* Where the traces go: their directory, the list the processes add their traces to, and for a
 * FILE output the file. */
typedef struct out_place {
    char dir[4096], list[4200];   /* absolute, so a CMD that changes directory still finds them */
    char asked[4096], made[4096]; /* the directory as given, and what lf_cli_prepare_dir made of it */
    const char *file;             /* NULL: a directory */
    int gzip;
} out_place;

/* The text file beside a trace: X.json or X.json.gz -> X.txt. */
static void table_path(const char *trace, char *out, size_t cap)
{
    size_t n = strlen(trace);
    n -= ends_with(trace, ".json.gz") ? 8 : ends_with(trace, ".json") ? 5 : 0;
    snprintf(out, cap, "%.*s.txt", (int)n, trace);
}

/* Which of this tool's standard output and error (CMD's too) path is: "" when neither. */
static const char *std_stream_at(const char *path)
{
    return lf_cli_same_file(path, "/dev/fd/1")   ? "standard output"
           : lf_cli_same_file(path, "/dev/fd/2") ? "standard error"
                                                 : "";
}

static int prepare_output(const profile_opts *o, out_place *p)
{
    char err[512];
    p->made[0] = '\0';
    p->file = ends_with(o->output, ".json") || ends_with(o->output, ".json.gz") ? o->output : NULL;
    p->gzip = p->file ? ends_with(o->output, ".gz") : o->gzip;
    if (p->file) {
        const char *slash = strrchr(p->file, '/');
        snprintf(p->dir, sizeof p->dir, "%.*s", slash ? (int)(slash - p->file) : 1, slash ? p->file : ".");
        if (slash == p->file)
            snprintf(p->dir, sizeof p->dir, "/");
        if (!lf_cli_check_output(p->file, err, sizeof err)) {
            fprintf(stderr, "%s: --output %s: %s\n", CMD_NAME, p->file, err);
            return 0;
        }
        /* the trace and its table replace what is there: never what CMD writes its output to */
        char txt[4300];
        table_path(p->file, txt, sizeof txt);
        const char *paths[2] = {p->file, txt};
        for (int i = 0; i < 2; i++)
            if (*std_stream_at(paths[i])) {
                fprintf(stderr, "%s: --output %s: %s is this command's %s, where %s's output goes; name another file\n",
                        CMD_NAME, p->file, paths[i], std_stream_at(paths[i]), o->cmd[0]);
                return 0;
            }
    } else {
        snprintf(p->dir, sizeof p->dir, "%s", o->output);
        if (!lf_cli_prepare_dir(p->dir, p->made, sizeof p->made, err, sizeof err)) {
            fprintf(stderr, "%s: --output %s: %s\n", CMD_NAME, o->output, err);
            return 0;
        }
    }
    snprintf(p->asked, sizeof p->asked, "%s", p->dir);
    char abs[PATH_MAX];
    if (p->dir[0] != '/' && realpath(p->asked, abs)) /* made or checked above: it exists */
        snprintf(p->dir, sizeof p->dir, "%s", abs);
    snprintf(p->list, sizeof p->list, "%s/.linfuse-profile-%d.list", p->dir, (int)getpid());
    unlink(p->list);
    return 1;
}

/* One process's trace: its table written beside it and printed, its summary line; a process that
 * ran no GPU work (a framework's helper that only asked about the device) gets one line. */
static int show(const char *path, int pid, int64_t row_limit)
{
    lf_trace *t = NULL;
    if (lf_trace_read_json(&t, path) != LF_OK) {
        fprintf(stderr, "%s: %s\n", CMD_NAME, lf_last_error());
        return 0;
    }
    const lf_trace_meta *m = lf_trace_meta_get(t);
    lf_trace_summary sum;
    lf_status st = lf_trace_summarize(t, &sum);
    if (st == LF_OK && !sum.device_events) {
        fprintf(stderr, "\n%s: pid %d: no GPU work recorded; trace: %s\n", CMD_NAME, pid, path);
        lf_trace_free(t);
        return 1;
    }
    lf_table tab;
    lf_table_opts to = {.sort_by = LF_SORT_DEVICE_TIME_TOTAL, .row_limit = (int)row_limit};
    char *text = NULL, line[512] = "", txt[4300];
    if (st == LF_OK)
        st = lf_table_build(t, to.sort_by, &tab);
    if (st == LF_OK) {
        st = lf_table_format(&tab, &to, &text);
        lf_table_free(&tab);
    }
    if (st == LF_OK)
        lf_trace_summary_line(&sum, line, sizeof line);
    table_path(path, txt, sizeof txt);
    if (st == LF_OK && !lf_cli_write_text(txt, text))
        txt[0] = '\0';
    if (st == LF_OK) {
        fprintf(stderr, "\npid %d", pid);
        if (m->rank >= 0)
            fprintf(stderr, ", rank %lld of %lld", (long long)m->rank, (long long)m->world_size);
        fputs(":\n", stderr);
        if (row_limit > 0)
            fputs(text, stderr);
        fprintf(stderr, "trace: %s\n", path);
        if (txt[0])
            fprintf(stderr, "table: %s\n", txt);
        fprintf(stderr, "%s\n", line);
        if (m->dropped_events)
            fprintf(stderr, "dropped: %lld records the tracer could not keep\n", (long long)m->dropped_events);
    } else {
        fprintf(stderr, "%s: %s: %s\n", CMD_NAME, path, lf_last_error());
    }
    free(text);
    lf_trace_free(t);
    return st == LF_OK;
}

/* One trace a process listed: "PID PATH". */
typedef struct trace_file {
    int pid;
    char *path;
} trace_file;

/* The traces CMD's processes listed, in the order they were written. */
static void read_list(const char *list, trace_file **out, int *n)
{
    *out = NULL, *n = 0;
    FILE *f = fopen(list, "r");
    if (!f)
        return; /* no process wrote one */
    char line[4400];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *space = strchr(line, ' ');
        trace_file *g = space ? realloc(*out, (size_t)(*n + 1) * sizeof *g) : NULL;
        if (!g)
            continue;
        *out = g;
        if ((g[*n].path = strdup(space + 1))) {
            g[*n].pid = atoi(line);
            (*n)++;
        }
    }
    fclose(f);
}

/* The variables CMD runs with: the injection, and the settings its processes read (those not
 * asked for unset, so none comes from the shell by accident). */
static void run_env(const profile_opts *o, const out_place *p, const char *lib, const char **names, const char **values,
                    int *n)
{
    static const lf_setting which[] = {LF_SET_PROFILE_OUT,   LF_SET_PROFILE_LIST,         LF_SET_PROFILE_GZIP,
                                       LF_SET_PROFILE_DELAY, LF_SET_PROFILE_DURATION,     LF_SET_PROFILE_CAPTURE_RANGE,
                                       LF_SET_PROFILE_STEPS, LF_SET_PROFILE_KERNELS_ONLY, LF_SET_PROFILE_PYTHON_STACK,
                                       LF_SET_PROFILE_GRAPHS};
    const char *vals[] = {p->dir,
                          p->list,
                          p->gzip ? "1" : "0",
                          o->delay,
                          o->duration,
                          o->capture_range,
                          o->steps,
                          o->kernels_only ? "1" : NULL,
                          o->python_stack ? "1" : NULL,
                          o->no_graphs ? "0" : NULL};
    const char *old = getenv("CUDA_INJECTION64_PATH");
    if (old && *old && strcmp(old, lib))
        fprintf(stderr, "%s: CUDA_INJECTION64_PATH was %s; linfuse's injection replaces it for %s\n", CMD_NAME, old,
                o->cmd[0]);
    names[0] = "CUDA_INJECTION64_PATH", values[0] = lib;
    names[1] = "NVTX_INJECTION64_PATH", values[1] = lib; /* which hands NVTX to CUPTI */
    *n = 2;
    for (size_t i = 0; i < sizeof which / sizeof which[0]; i++, (*n)++) {
        names[*n] = lf_setting_describe(which[i])->name;
        values[*n] = vals[i];
    }
}

/* A finished trace's bytes, for lf_write_file_atomic. */
static int copy_trace(FILE *f, void *ctx)
{
    FILE *in = fopen(ctx, "rb");
    if (!in)
        return -1;
    char buf[1 << 16];
    size_t got;
    int bad = 0;
    while (!bad && (got = fread(buf, 1, sizeof buf, in)) > 0)
        bad = fwrite(buf, 1, got, f) != got;
    bad |= ferror(in);
    fclose(in);
    return bad ? -1 : 0;
}

/* The trace at path to file: renamed there where file is a plain file (or none) beside it, else
 * written through lf_write_file_atomic, which follows a link to the file it names, writes a FIFO
 * or a device in place and replaces no file the user may not write (a rename would replace the
 * link, the FIFO or the read-only file itself); the trace then goes. 0 and errno on failure. */
static int move_trace(const char *path, const char *file)
{
    struct stat sb;
    if (lstat(file, &sb) != 0 ? errno == ENOENT : S_ISREG(sb.st_mode) && access(file, W_OK) == 0)
        if (rename(path, file) == 0)
            return 1; /* else (another file system, say) copied below */
    if (lf_write_file_atomic(file, copy_trace, (void *)path) != LF_OK) {
        errno = EIO;
        return 0;
    }
    unlink(path);
    return 1;
}

/* --output FILE: CMD's own process's trace moved there (else the only one); any other stays
 * beside it under its own name. */
static void place_file(const out_place *p, trace_file *t, int n, int cmd_pid)
{
    int k = -1;
    for (int i = 0; i < n; i++)
        if (t[i].pid == cmd_pid)
            k = i;
    if (k < 0 && n == 1)
        k = 0;
    if (k < 0) {
        fprintf(stderr, "%s: %d processes of CMD were traced, CMD's own not among them: their traces are in %s\n",
                CMD_NAME, n, p->dir);
        return;
    }
    if (!move_trace(t[k].path, p->file)) {
        fprintf(stderr, "%s: cannot move %s to %s: %s\n", CMD_NAME, t[k].path, p->file,
                errno == EIO ? lf_last_error() : strerror(errno));
        return;
    }
    free(t[k].path);
    t[k].path = strdup(p->file);
    if (n > 1)
        fprintf(stderr, "%s: %d processes were traced: CMD's own in %s, the others beside it\n", CMD_NAME, n, p->file);
}

int lf_cli_profile(int argc, char **argv)
{
    profile_opts o; /* the dispositions CMD gets were noted when the tool started (main.c) */
    int rc = parse(argc, argv, &o);
    if (rc != LF_EXIT_OK)
        return rc < 0 ? LF_EXIT_OK : rc;
    char why[1200], lib[4096];
    const int traced =
        !lf_profile_no_driver(why, sizeof why) && lf_profile_find_library(lib, sizeof lib, why, sizeof why);
    if (!traced) {
        if (o.require_gpu) {
            fprintf(stderr, "%s: --require-gpu: %s\n", CMD_NAME, why);
            return LF_EXIT_FAIL;
        }
        fprintf(stderr, "%s: %s; %s runs untraced\n", CMD_NAME, why, o.cmd[0]);
        lf_profile_run plain = {o.cmd, NULL, NULL, 0, 0};
        return lf_profile_exec(&plain);
    }
    out_place p;
    if (!prepare_output(&o, &p))
        return LF_EXIT_USAGE;
    const char *names[16], *values[16];
    int n_set = 0;
    run_env(&o, &p, lib, names, values, &n_set);
    lf_profile_run r = {o.cmd, names, values, n_set, 0};
    const int status = lf_profile_exec(&r);
    trace_file *t = NULL;
    int n = 0;
    read_list(p.list, &t, &n);
    unlink(p.list);
    if (!n) {
        fprintf(stderr, "%s: no process of %s started CUDA: nothing was traced\n", CMD_NAME, o.cmd[0]);
        lf_cli_unmake_dir(p.asked, p.made); /* the directories this run made, were they left empty */
    }
    if (n && p.file)
        place_file(&p, t, n, r.pid);
    for (int i = 0; i < n; i++) {
        if (t[i].path)
            show(t[i].path, t[i].pid, o.row_limit);
        free(t[i].path);
    }
    free(t);
    return status;
}
