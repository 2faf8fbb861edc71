/* linfuse nn: modules that own parameters and call ops, as torch.nn does.
 *   lf_nn_linear:    y = x . W^T + b, W (out, in), b (out) or none
 *   lf_nn_geglu_mlp: y = down(gelu_tanh(gate(x)) * up(x)), three bias-free linears
 * Parameters start as torch's defaults do (kaiming_uniform with a = sqrt(5): uniform in
 * +-1/sqrt(in), bias likewise), drawn from a seeded lf_rng so runs repeat.
 * Layer: nn/ sits on ops/. */
#ifndef LINFUSE_NN_H
#define LINFUSE_NN_H

#include "linfuse/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lf_nn_linear {
    int64_t in_features, out_features;
    lf_tensor *weight; /* (out, in) */
    lf_tensor *bias;   /* (out), or NULL */
} lf_nn_linear;

typedef struct lf_nn_linear_opts {
    int64_t in_features, out_features;
    int bias; /* nonzero: has a bias */
    lf_dtype dtype;
    lf_device device;
} lf_nn_linear_opts;

lf_status lf_nn_linear_init(lf_nn_linear *m, const lf_nn_linear_opts *o, lf_rng *rng);
/* y (..., out) for x (..., in) */
lf_status lf_nn_linear_forward(const lf_nn_linear *m, const lf_tensor *x, lf_tensor **y);
void lf_nn_linear_free(lf_nn_linear *m);

typedef struct lf_nn_geglu_mlp {
    int64_t dim, hidden;
    lf_nn_linear gate, up; /* dim -> hidden */
    lf_nn_linear down;     /* hidden -> dim */
} lf_nn_geglu_mlp;

typedef struct lf_nn_geglu_mlp_opts {
    int64_t dim, hidden;
    lf_dtype dtype;
    lf_device device;
} lf_nn_geglu_mlp_opts;

lf_status lf_nn_geglu_mlp_init(lf_nn_geglu_mlp *m, const lf_nn_geglu_mlp_opts *o, lf_rng *rng);
/* y (batch, seq, dim) for x (batch, seq, dim): gate, up, gelu (tanh), mul, down: five kernels. */
lf_status lf_nn_geglu_mlp_forward(const lf_nn_geglu_mlp *m, const lf_tensor *x, lf_tensor **y);
void lf_nn_geglu_mlp_free(lf_nn_geglu_mlp *m);

#ifdef __cplusplus
}
#endif
#endif
