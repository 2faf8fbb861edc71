/* linfuse: the command-line tool. Subcommands live in their own files; this one routes.
 * Layer: cli/. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/experiments.h"
#include "cli/profile.h"
#include "linfuse/io.h"
#include "linfuse/settings.h"

static void usage(FILE *f)
{
    fputs(
        "usage: linfuse <command> [flags]\n"
        "\n"
        "commands:\n"
        "  tour           the blog's experiments at its sizes (and the MLP compiled, fused, gated), measured here\n"
        "  matmul-add     Part 1: matmul then add, profiled (trace + table)\n"
        "  linear         Part 2: nn.Linear with bias, profiled\n"
        "  simple-mlp     Part 2: the GeGLU MLP, profiled\n"
        "  kernels-mlp    Part 2: the GeGLU MLP with a hand-fused gelu*mul kernel (--variant gated|fp8: a gated GEMM)\n"
        "  trace          read any PyTorch or linfuse trace: table, diff, expect, svg, summary, breakdown,\n"
        "                 merge (ranks into one Perfetto file), report (HTML), serve (to ui.perfetto.dev),\n"
        "                 stats (nsys's reports by their names), export (a SQLite database)\n"
        "  demo           run the GeGLU MLP eagerly on the CPU and show what the dispatcher ran\n"
        "  mlp            one MLP layer of a Hugging Face checkpoint (safetensors) on an input file\n"
        "  profile        trace any CUDA program from outside (-- CMD ARGS): a Kineto trace and table per process\n"
        "  bench cpu      CPU GEMM and fused Linear+bias+GELU against OpenBLAS, in one run\n"
        "  bench profiler what recording costs per event and per step, profiler on and off\n"
        "  bench cuda     the forwards (eager, kernels-mlp, gated, fp8, compiled) on the GPU, for bench/*_vs_torch.py\n"
        "  bench tp       the MLP over several GPUs (tensor parallel, NCCL), for bench/tp_vs_torch.py\n"
        "  help           this text (also --help, -h); --version prints the version\n"
        "  --help-env     the LINFUSE_* environment variables: kind, default, meaning, and the value set now\n"
        "\n"
        "`linfuse <command> --help` describes each command's flags; flags take `--flag value` or `--flag=value`.\n",
        f);
}

/* text, words wrapped to lines of at most width columns, each after indent spaces. */
static void put_wrapped(FILE *f, const char *text, int indent, int width)
{
    const int room = width - indent;
    while (*text) {
        int n = (int)strlen(text);
        if (n > room) { /* the last blank that leaves the line within room; a longer word whole */
            n = room;
            while (n > 0 && text[n] != ' ')
                n--;
            if (n == 0)
                n = (int)strcspn(text, " ");
        }
        fprintf(f, "%*s%.*s\n", indent, "", n, text);
        text += n;
        while (*text == ' ')
            text++;
    }
}

/* What setting i takes, in words: "an integer from 1 to 1024", "one of auto|cooperative". */
static void setting_kind(const lf_setting_info *i, char *buf, size_t cap)
{
    const char *noun = i->kind == LF_SETTING_INT ? "an integer" : "a number";
    switch (i->kind) {
    case LF_SETTING_PATH:
        snprintf(buf, cap, "a path");
        break;
    case LF_SETTING_TEXT:
        snprintf(buf, cap, "text");
        break;
    case LF_SETTING_CHOICE:
        snprintf(buf, cap, "one of %s", i->values);
        break;
    case LF_SETTING_INT:
    case LF_SETTING_NUMBER:
        if (i->max >= 9.2e18)
            snprintf(buf, cap, "%s from %.15g up", noun, i->min);
        else
            snprintf(buf, cap, "%s from %.15g to %.15g", noun, i->min, i->max);
        break;
    }
}

/* Whether setting s's value (set) is one it takes: NULL, or the library's words why not. */
static const char *setting_refusal(lf_setting s, lf_setting_kind kind)
{
    int64_t i = 0;
    double x = 0;
    int c = 0;
    const lf_status st = kind == LF_SETTING_INT      ? lf_setting_int(s, &i)
                         : kind == LF_SETTING_NUMBER ? lf_setting_number(s, &x)
                         : kind == LF_SETTING_CHOICE ? lf_setting_choice(s, &c)
                                                     : LF_OK;
    return st == LF_OK ? NULL : lf_last_error();
}

/* linfuse --version: the version, the library file this tool runs (a wheel's, a build tree's, an
 * install's) and whether the CUDA module loads, or why not. */
static int version(void)
{
    Dl_info di;
    char real[PATH_MAX];
    const int found = dladdr((void *)(uintptr_t)lf_version, &di) && di.dli_fname;
    printf("linfuse %s\nlibrary: %s\n", lf_version(),
           !found                         ? "(not known)"
           : realpath(di.dli_fname, real) ? real
                                          : di.dli_fname);
    if (lf_device_require(LF_DEVICE_CUDA) == LF_OK)
        printf("cuda: available\n");
    else
        printf("cuda: not available: %s\n", lf_last_error());
    return LF_EXIT_OK;
}

/* linfuse --help-env: every setting of linfuse/settings.def, from the library's own table. */
static int help_env(void)
{
    puts("The LINFUSE_* environment variables linfuse reads (declared once, in include/linfuse/settings.def),\n"
         "each read when the code that uses it first runs. A value a setting does not take is refused with\n"
         "the variable named, or said once on standard error and the default used.");
    for (int s = 0; s < LF_SET_COUNT; s++) {
        const lf_setting_info *i = lf_setting_describe((lf_setting)s);
        char kind[160];
        setting_kind(i, kind, sizeof kind);
        printf("\n%s (%s)\n", i->name, kind);
        put_wrapped(stdout, i->meaning, 4, 100);
        printf("    default: %s\n", i->default_value);
        const char *v = lf_setting_get((lf_setting)s);
        if (v) {
            char safe[4 * 256 + 4];
            const char *why = setting_refusal((lf_setting)s, i->kind);
            printf("    set now: %s", lf_term_cut(safe, sizeof safe, v, 200));
            if (why)
                printf(" (refused: %s)", lf_term_cut(safe, sizeof safe, why, 200));
            putchar('\n');
        }
    }
    return LF_EXIT_OK;
}

/* The command argv[1] names, run; its exit status. */
static int run_command(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return LF_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    int exp = lf_exp_find(cmd);
    if (exp >= 0)
        return lf_cli_experiment((exp_kind)exp, argc - 1, argv + 1);
    if (!strcmp(cmd, "tour"))
        return lf_cli_tour(argc - 1, argv + 1);
    if (!strcmp(cmd, "trace"))
        return lf_cli_trace(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo"))
        return lf_cli_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "mlp"))
        return lf_cli_mlp(argc - 1, argv + 1);
    if (!strcmp(cmd, "profile"))
        return lf_cli_profile(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench"))
        return lf_cli_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return LF_EXIT_OK;
    }
    if (!strcmp(cmd, "--help-env"))
        return help_env();
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version"))
        return version();
    static const char *const commands[] = {"tour",  "matmul-add", "linear",    "simple-mlp", "kernels-mlp",
                                           "trace", "demo",       "mlp",       "profile",    "bench",
                                           "help",  "version",    "--help-env"};
    const char *near = lf_cli_closest(cmd, commands, (int)(sizeof commands / sizeof commands[0]));
    fprintf(stderr, "linfuse: unknown command '%s' (linfuse help lists the commands)", cmd);
    if (near)
        fprintf(stderr, "; did you mean %s?", near);
    fprintf(stderr, "\n");
    return LF_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    /* the signal dispositions `linfuse profile` hands its command: the tool's as it started */
    lf_profile_note_signals();
    /* every command's writes: past `ulimit -f` a write fails with EFBIG and is cleaned up as a
     * full disk is, instead of SIGXFSZ killing the run mid-write */
    lf_cli_ignore_sigxfsz();
    /* what a command printed is only out once standard output is flushed and closed: a full disk,
     * a file past `ulimit -f` or /dev/full fail there (or failed an earlier write), and the exit
     * status says so, as coreutils' close_stdout does */
    return lf_cli_close_stdout(run_command(argc, argv));
}
