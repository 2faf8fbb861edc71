/* linfuse: the command-line tool. Subcommands live in their own files; this one routes.
 * Layer: cli/. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f)
{
    fputs("usage: linfuse <command> [flags]\n"
          "\n"
          "commands:\n"
          "  demo        run the GeGLU MLP eagerly on the CPU and show what the dispatcher ran\n"
          "  bench cpu   CPU GEMM and fused Linear+bias+GELU against OpenBLAS, in one run\n"
          "  help        this text\n"
          "\n"
          "`linfuse <command> --help` describes each command's flags.\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return LF_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "demo"))
        return lf_cli_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench"))
        return lf_cli_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return LF_EXIT_OK;
    }
    fprintf(stderr, "linfuse: unknown command '%s'\n", cmd);
    usage(stderr);
    return LF_EXIT_USAGE;
}
