/* `linfuse tour`: the blog's experiments one after another on the default device, then the
 * blog's conclusion table measured here. Layer: cli/. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/experiments.h"

int lf_cli_tour(int argc, char **argv)
{
    const char *out = "traces";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc && *argv[i + 1]) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: linfuse tour [--out DIR]\nRuns matmul-add, linear and simple-mlp at the blog's sizes on "
                   "the default device and prints what changed between them.\n");
            return LF_EXIT_OK;
        } else {
            fprintf(stderr, "linfuse tour: unknown argument '%s'\n", argv[i]);
            return LF_EXIT_USAGE;
        }
    }
    exp_cfg cfg[EXP_COUNT];
    const char *notes[EXP_COUNT] = {NULL, NULL, NULL};
    for (int k = 0; k < EXP_COUNT; k++) {
        lf_exp_defaults(&cfg[k], (exp_kind)k);
        cfg[k].out_dir = out;
        cfg[k].device = lf_device_available(LF_DEVICE_CUDA) ? LF_DEVICE_CUDA : LF_DEVICE_CPU;
    }
    if (cfg[EXP_SIMPLE_MLP].device == LF_DEVICE_CPU) {
        /* 64 x 128 tokens through three 768x3072 GEMMs is ~0.4 s a forward on a small CPU */
        cfg[EXP_SIMPLE_MLP].batch = 8;
        notes[EXP_SIMPLE_MLP] = "batch 64 -> 8 on the CPU, so the tour takes seconds";
    }
    printf("linfuse tour: the blog's experiments on %s, %s, schedule wait=1 warmup=1 active=3\n\n",
           lf_device_name(cfg[0].device), lf_dtype_name(cfg[0].dtype));
    exp_result res[EXP_COUNT];
    for (int k = 0; k < EXP_COUNT; k++) {
        char shape[96];
        lf_exp_shape(&cfg[k], shape, sizeof shape);
        printf("[%d/%d] %s %s%s%s ...\n", k + 1, EXP_COUNT, lf_exp_name((exp_kind)k), shape, notes[k] ? "  (" : "",
               notes[k] ? notes[k] : "");
        fflush(stdout);
        if (notes[k])
            printf("      note: %s\n", notes[k]);
        int rc = lf_exp_run(&cfg[k], &res[k], 0);
        if (rc != LF_EXIT_OK)
            return rc;
        printf("      %s\n      trace: %s\n", res[k].summary, res[k].json_path);
    }
    static const char *const changed[EXP_COUNT] = {
        "matmul then add: two kernels, the add re-reads the GEMM's output",
        "linear: t() is a view (no kernel); the bias rides in the GEMM's epilogue: one kernel",
        "GeGLU: gelu and mul are two more passes over the [tokens, hidden] intermediate",
    };
    printf("\n%-34s %8s %8s %14s %14s  %s\n", "setup (eager)", "kernels", "cpu ops", "device/fwd", "CPU/fwd",
           "what changed");
    for (int k = 0; k < EXP_COUNT; k++) {
        char shape[96], setup[160];
        lf_exp_shape(&cfg[k], shape, sizeof shape);
        snprintf(setup, sizeof setup, "%s %s", lf_exp_name((exp_kind)k), shape);
        printf("%-34s %8g %8g %11.3f ms %11.3f ms  %s\n", setup, res[k].sum.kernels_per_step,
               res[k].sum.cpu_ops_per_step, res[k].sum.device_ns_per_step / 1e6, res[k].sum.step_ns / 1e6, changed[k]);
    }
    printf("\n(per forward: kernels and ops counted in the trace; device time is kernel time, CPU time the step's "
           "wall time%s)\n",
           cfg[0].device == LF_DEVICE_CPU
               ? ";\n on the CPU the kernels run on the same cores, so both columns measure the same seconds"
               : "");
    return LF_EXIT_OK;
}
