/* linfuse: the command-line tool. Subcommands live in their own files; this one routes.
 * Layer: cli/. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/experiments.h"
#include "cli/profile.h"

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
        "                 merge (ranks into one Perfetto file), report (HTML), serve (to ui.perfetto.dev)\n"
        "  demo           run the GeGLU MLP eagerly on the CPU and show what the dispatcher ran\n"
        "  mlp            one MLP layer of a Hugging Face checkpoint (safetensors) on an input file\n"
        "  profile        trace any CUDA program from outside (-- CMD ARGS): a Kineto trace and table per process\n"
        "  bench cpu      CPU GEMM and fused Linear+bias+GELU against OpenBLAS, in one run\n"
        "  bench profiler what recording costs per event and per step, profiler on and off\n"
        "  bench cuda     the forwards (eager, kernels-mlp, gated, fp8, compiled) on the GPU, for bench/*_vs_torch.py\n"
        "  bench tp       the MLP over several GPUs (tensor parallel, NCCL), for bench/tp_vs_torch.py\n"
        "  help           this text (also --help, -h); --version prints the version\n"
        "\n"
        "`linfuse <command> --help` describes each command's flags; flags take `--flag value` or `--flag=value`.\n",
        f);
}

int main(int argc, char **argv)
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
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("linfuse %s\n", lf_version());
        return LF_EXIT_OK;
    }
    static const char *const commands[] = {"tour", "matmul-add", "linear",  "simple-mlp", "kernels-mlp", "trace",
                                           "demo", "mlp",        "profile", "bench",      "help",        "version"};
    const char *near = lf_cli_closest(cmd, commands, (int)(sizeof commands / sizeof commands[0]));
    fprintf(stderr, "linfuse: unknown command '%s'", cmd);
    if (near)
        fprintf(stderr, "; did you mean %s?", near);
    fprintf(stderr, "\n\n");
    usage(stderr);
    return LF_EXIT_USAGE;
}
