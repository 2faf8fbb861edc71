/* The experiments' models and memory estimate (exp_models.c), named by experiments.c's table.
 * Layer: cli/. */
#ifndef LF_CLI_EXP_MODELS_H
#define LF_CLI_EXP_MODELS_H

#include "cli/exp_cfg.h"

typedef struct model {
    lf_tensor *x, *w, *b; /* x: the input; w, b: matmul-add's operands */
    lf_nn_linear lin;
    lf_nn_gated_mlp mlp;
} model;
void exp_model_free(model *m);

/* What a run holds at its peak, in elements: the parameters and input (made on the host, then
 * moved to the device), and the largest set of intermediates alive at once (outputs included).
 * An upper bound from the forwards in exp_models.c, which free each intermediate when their op
 * is done. */
typedef struct exp_memory {
    double params, input, work;
} exp_memory;

/* The MLP an experiment runs: random at its sizes, or its --weights layer (dims from the file). */
lf_status lf_exp_build_mlp(const exp_cfg *c, lf_rng *rng, lf_nn_gated_mlp *m);

/* Per model: build it (weights, input), run one forward, print its shape, estimate its memory. */
lf_status exp_build_matmul_add(const exp_cfg *c, lf_rng *rng, model *m);
lf_status exp_build_linear(const exp_cfg *c, lf_rng *rng, model *m);
lf_status exp_build_mlp(const exp_cfg *c, lf_rng *rng, model *m);
lf_status exp_forward_matmul_add(const exp_cfg *c, const model *m, const lf_tensor *x, lf_tensor **y);
lf_status exp_forward_linear(const exp_cfg *c, const model *m, const lf_tensor *x, lf_tensor **y);
lf_status exp_forward_mlp(const exp_cfg *c, const model *m, const lf_tensor *x, lf_tensor **y);
void exp_shape_matmul_add(const exp_cfg *c, char *buf, size_t cap);
void exp_shape_linear(const exp_cfg *c, char *buf, size_t cap);
void exp_shape_mlp(const exp_cfg *c, char *buf, size_t cap);
void exp_memory_matmul_add(const exp_cfg *c, exp_memory *e);
void exp_memory_linear(const exp_cfg *c, exp_memory *e);
void exp_memory_mlp(const exp_cfg *c, exp_memory *e);

/* Whether a run with estimate e fits what its devices can still give; 0 with the numbers printed
 * (name: the command, shape: the run's, as lf_exp_shape gives it) when it does not. */
int lf_exp_memory_fits(const exp_cfg *c, const char *name, const char *shape, const exp_memory *e);

#endif
