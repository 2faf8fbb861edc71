/* linfuse nn: modules that own parameters and call ops, as torch.nn does.
 *   lf_nn_linear:    y = x . W^T + b, W (out, in), b (out) or none
 *   lf_nn_geglu_mlp: y = down(gelu_tanh(gate(x)) * up(x)), three bias-free linears, run eagerly,
 *                    with a fused middle, or as a gated GEMM plus down
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
    /* The one weight-layout decision of the gated GEMM, made at init: gate's and up's weights
     * live stacked in gate_up (2*hidden, dim) = [Wg; Wu], and gate.weight and up.weight are
     * row views of it. Eager and fused forwards use the views (nothing changes for them); the
     * gated forward hands gate_up to one GEMM whose epilogue pairs column j with column
     * hidden + j (lf_gate LF_GATE_PAIRED, gate_group = hidden). Load weights by writing into
     * the views (or gate_up); replacing the view pointers leaves gate_up stale. */
    lf_tensor *gate_up;
    lf_nn_linear gate, up; /* dim -> hidden, no bias */
    lf_nn_linear down;     /* hidden -> dim, no bias */
} lf_nn_geglu_mlp;

typedef struct lf_nn_geglu_mlp_opts {
    int64_t dim, hidden;
    lf_dtype dtype;
    lf_device device;
} lf_nn_geglu_mlp_opts;

/* How a forward runs, from most kernels to fewest (all compute down(gelu_tanh(gate(x)) * up(x))):
 *   EAGER  gate, up, gelu, mul, down: five kernels, as torch eager (simple-mlp);
 *   FUSED  gate, up, gelu_mul, down: four, the hand-fused middle of the blog's kernels-mlp;
 *   GATED  mm_gated over gate_up (gelu(g) * u in the GEMM's epilogue), down: two. Where the
 *          device has no gated kernel for the shape, mm_gated says so in the trace and runs one
 *          GEMM over gate_up plus the fused middle instead. */
typedef enum lf_mlp_variant { LF_MLP_EAGER, LF_MLP_FUSED, LF_MLP_GATED, LF_MLP_VARIANT_COUNT } lf_mlp_variant;
const char *lf_mlp_variant_name(lf_mlp_variant v); /* "eager", "fused", "gated" */

lf_status lf_nn_geglu_mlp_init(lf_nn_geglu_mlp *m, const lf_nn_geglu_mlp_opts *o, lf_rng *rng);
/* y (..., dim) for x (..., dim), eagerly: five kernels. */
lf_status lf_nn_geglu_mlp_forward(const lf_nn_geglu_mlp *m, const lf_tensor *x, lf_tensor **y);
lf_status lf_nn_geglu_mlp_forward_variant(const lf_nn_geglu_mlp *m, lf_mlp_variant v, const lf_tensor *x,
                                          lf_tensor **y);
/* Move every parameter to dev (the views follow gate_up). On failure m is unchanged. */
lf_status lf_nn_geglu_mlp_to_device(lf_nn_geglu_mlp *m, lf_device dev);
void lf_nn_geglu_mlp_free(lf_nn_geglu_mlp *m);

#ifdef __cplusplus
}
#endif
#endif
