/* The experiments' table: one row an experiment (name, the blog's spelling, trace label, help
 * line, the flags it takes, default batch, and its shape, memory, model and forward), as ops.def
 * is for ops; experiments.c's parser and exp_run.c's run read it. Layer: cli/. */
#include <string.h>

#include "cli/exp_table.h"
#include "cli/experiments.h"

/* clang-format off */
const exp_def lf_exp_defs[EXP_COUNT] = {
    [EXP_MATMUL_ADD] = {"matmul-add", "matmul_add", "matmul_add", "Part 1: matmul then add, profiled", T_SIZE | T_COMPILE,
                        0, exp_shape_matmul_add, exp_memory_matmul_add, exp_build_matmul_add, exp_forward_matmul_add},
    [EXP_LINEAR] = {"linear", NULL, "linear_fwd", "Part 2: nn.Linear with bias, profiled", T_LINEAR | T_COMPILE, 1024,
                    exp_shape_linear, exp_memory_linear, exp_build_linear, exp_forward_linear},
    [EXP_SIMPLE_MLP] = {"simple-mlp", "simple_mlp", "mlp_fwd", "Part 2: the GeGLU MLP, profiled",
                        T_MLP | T_COMPILE | T_GATE, 64,
                        exp_shape_mlp, exp_memory_mlp, exp_build_mlp, exp_forward_mlp},
    /* no --compile: kernels-mlp is the hand-fused path, the blog's point being "no compile" */
    [EXP_KERNELS_MLP] = {"kernels-mlp", "kernels_mlp", "mlp_fwd",
                         "Part 2: the GeGLU MLP with a hand-fused gelu*mul kernel, profiled", T_MLP | T_VARIANT, 64,
                         exp_shape_mlp, exp_memory_mlp, exp_build_mlp, exp_forward_mlp},
};
/* clang-format on */

const char *lf_exp_name(exp_kind k)
{
    return lf_exp_defs[k].name;
}

int lf_exp_find(const char *name)
{
    for (int k = 0; k < EXP_COUNT; k++)
        if (!strcmp(name, lf_exp_defs[k].name) || (lf_exp_defs[k].alias && !strcmp(name, lf_exp_defs[k].alias)))
            return k;
    return -1;
}

void lf_exp_shape(const exp_cfg *c, char *buf, size_t cap)
{
    lf_exp_defs[c->kind].shape(c, buf, cap);
}
