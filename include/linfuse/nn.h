/* linfuse nn: modules that own parameters and call ops, as torch.nn does.
 *   lf_nn_linear:    y = x . W^T + b, W (out, in), b (out) or none
 *   lf_nn_gated_mlp: y = down(gelu_tanh(gate(x)) * up(x)), three bias-free linears, run eagerly,
 *                    with a fused middle, or as a gated GEMM plus down
 * Parameters start as torch's defaults do (kaiming_uniform with a = sqrt(5): uniform in
 * +-1/sqrt(in), bias likewise), drawn from a seeded lf_rng so runs repeat.
 * Layer: nn/ sits on ops/. */
#ifndef LINFUSE_NN_H
#define LINFUSE_NN_H

#include "linfuse/ops.h"
#include "linfuse/safetensors.h"

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

LF_API lf_status lf_nn_linear_init(lf_nn_linear *m, const lf_nn_linear_opts *o, lf_rng *rng);
/* y (..., out) for x (..., in) */
LF_API lf_status lf_nn_linear_forward(const lf_nn_linear *m, const lf_tensor *x, lf_tensor **y);
LF_API void lf_nn_linear_free(lf_nn_linear *m);

/* The gated MLP of Gemma (GeGLU: gelu_tanh) and of Llama, Mistral, Qwen (SwiGLU: silu):
 * y = down(act(gate(x)) * up(x)), act one setting of the module. */
typedef struct lf_nn_gated_mlp {
    int64_t dim, hidden;
    lf_act act; /* LF_ACT_GELU_TANH (GeGLU), LF_ACT_SILU (SwiGLU), or LF_ACT_GELU_ERF (no gated kernel) */
    /* The one weight-layout decision of the gated GEMM, made at init: gate's and up's weights
     * live stacked in gate_up (2*hidden, dim) = [Wg; Wu], and gate.weight and up.weight are
     * row views of it. Eager and fused forwards use the views (nothing changes for them); the
     * gated forward hands gate_up to one GEMM whose epilogue pairs column j with column
     * hidden + j (lf_gate LF_GATE_PAIRED, gate_group = hidden). Load weights by writing into
     * the views (or gate_up); replacing the view pointers leaves gate_up stale. */
    lf_tensor *gate_up;
    lf_nn_linear gate, up; /* dim -> hidden, no bias */
    lf_nn_linear down;     /* hidden -> dim, no bias */
    /* FP8 copies of gate_up (one f32 scale per output channel) and down.weight (one per 128 x 128
     * block, lf_quantize_fp8_128x128), made by lf_nn_gated_mlp_quantize_fp8 for the fp8
     * variant (NULL until then); the bf16 weights stay for the other variants and for devices
     * without FP8 GEMMs. */
    lf_tensor *gate_up_q, *gate_up_scale, *down_q, *down_scale;
} lf_nn_gated_mlp;

typedef struct lf_nn_gated_mlp_opts {
    int64_t dim, hidden;
    lf_dtype dtype;
    lf_device device;
    lf_act act; /* LF_ACT_GELU_TANH or LF_ACT_SILU; LF_ACT_NONE (0) means GELU_TANH, the blog's GeGLU */
} lf_nn_gated_mlp_opts;

/* How a forward runs, from most kernels to fewest (all compute down(act(gate(x)) * up(x))):
 *   EAGER  gate, act, up, mul, down: five kernels in torch eager's order (simple-mlp);
 *   FUSED  gate, up, act_mul (lf_gelu_mul / lf_silu_mul), down: four, the hand-fused middle of
 *          the blog's kernels-mlp;
 *   GATED  mm_gated over gate_up (act(g) * u in the GEMM's epilogue), down: two. Where the
 *          device has no gated kernel for the shape, mm_gated says so in the trace and runs one
 *          GEMM over gate_up plus the fused middle instead. */
typedef enum lf_mlp_variant {
    LF_MLP_EAGER,
    LF_MLP_FUSED,
    LF_MLP_GATED,
    LF_MLP_VARIANT_COUNT, /* the variants above compute in the module's dtype and agree to its rounding */
    /* FP8  x quantized per token (lf_quantize_fp8), the gated GEMM in FP8 with row-wise scales
     *      writing h in e4m3 with 1 x 128 block scales (lf_scaled_mm_gated_fp8: quantized in
     *      its epilogue on Hopper), the down GEMM in FP8 over those blocks and the down weight's
     *      128 x 128 ones (DeepSeek-V3's recipe); weights from lf_nn_gated_mlp_quantize_fp8. Three kernels on
     *      Hopper; a few percent relative RMS error against float64 where bf16 has 2e-3
     *      (docs/design.md). Not one of the COUNT variants above: it computes at another
     *      precision. Where the device has no FP8 GEMM (the CPU, a GPU before Hopper) the trace
     *      says so in a note and GATED runs. */
    LF_MLP_FP8 = LF_MLP_VARIANT_COUNT
} lf_mlp_variant;
LF_API const char *lf_mlp_variant_name(lf_mlp_variant v); /* "eager", "fused", "gated", "fp8" */
/* The variant named s ("eager", "fused", "gated", "fp8"), or -1. */
LF_API int lf_mlp_variant_parse(const char *s);

LF_API lf_status lf_nn_gated_mlp_init(lf_nn_gated_mlp *m, const lf_nn_gated_mlp_opts *o, lf_rng *rng);
/* y (..., dim) for x (..., dim), eagerly: five kernels. */
LF_API lf_status lf_nn_gated_mlp_forward(const lf_nn_gated_mlp *m, const lf_tensor *x, lf_tensor **y);
LF_API lf_status lf_nn_gated_mlp_forward_variant(const lf_nn_gated_mlp *m, lf_mlp_variant v, const lf_tensor *x,
                                                 lf_tensor **y);
/* The forward for programs that own their memory (a framework's allocator, a CUDA graph being
 * captured): y (..., dim), an existing tensor of x's leading shape, dtype and device (any strides
 * whose leading dims flatten into one: where the GEMM cannot write y in place, its result goes
 * through the workspace and is copied) gets the result, and every intermediate the variant needs
 * is carved from workspace, a contiguous tensor on x's device of at least
 * lf_nn_gated_mlp_workspace bytes (any dtype: its bytes are used; apart from x and y in memory),
 * so linfuse takes no memory and, on a caller's stream (lf_cuda_set_stream), synchronizes
 * nothing. Any tensor the calling thread makes on x's device while this runs (an observer's,
 * say) is carved from the workspace too. The workspace may be reused by the next forward queued on the same
 * stream. The fp8 variant needs FP8 weights (lf_nn_gated_mlp_quantize_fp8) and, where the device
 * has none, runs the gated variant, as lf_nn_gated_mlp_forward_variant does. */
LF_API lf_status lf_nn_gated_mlp_forward_out(const lf_nn_gated_mlp *m, lf_mlp_variant v, const lf_tensor *x,
                                             lf_tensor *y, lf_tensor *workspace);
/* lf_nn_gated_mlp_forward_out over memory the caller holds, for bindings whose arrays live in
 * another framework (wrapping each into an lf_tensor on every call costs an eager decode step more
 * than the call): x (rows, dim) at row stride x_rs elements, y (rows, dim) at row stride y_rs,
 * both with unit column stride, and workspace_bytes (at least lf_nn_gated_mlp_workspace's) of
 * workspace, all in the module's dtype and on its device. On a GPU the call selects the module's
 * GPU for the thread (lf_device_select: it stays selected) and runs, where stream is not NULL, on
 * *stream (a cudaStream_t; a NULL one is the legacy default stream, PyTorch's default), the
 * thread's stream put back after; else on the thread's current stream (lf_cuda_set_stream). Under
 * lf_compile the memory is taken as any tensor is (kept for the plan where it is a constant). */
LF_API lf_status lf_nn_gated_mlp_forward_raw(const lf_nn_gated_mlp *m, lf_mlp_variant v, const void *x, int64_t rows,
                                             int64_t x_rs, void *y, int64_t y_rs, void *workspace,
                                             size_t workspace_bytes, void *const *stream);
/* The workspace bytes lf_nn_gated_mlp_forward_out needs for `tokens` tokens (the product of x's
 * leading dims) in variant v. */
LF_API lf_status lf_nn_gated_mlp_workspace(const lf_nn_gated_mlp *m, lf_mlp_variant v, int64_t tokens, size_t *bytes);
/* The middle alone: h (..., hidden) = act(gate(x)) * up(x), by the variant's kernels. */
LF_API lf_status lf_nn_gated_mlp_middle(const lf_nn_gated_mlp *m, lf_mlp_variant v, const lf_tensor *x, lf_tensor **h);
/* A module over given weights: gate_up (2H, D) = [Wg; Wu] contiguous, down_weight (D, H), act
 * GELU_TANH, SILU or GELU_ERF; m owns both tensors from now on (lf_nn_gated_mlp_free frees them),
 * also when this fails. */
LF_API lf_status lf_nn_gated_mlp_from_weights(lf_nn_gated_mlp *m, lf_tensor *gate_up, lf_tensor *down_weight,
                                              lf_act act);
/* A Hugging Face MLP (Llama's, Mistral's, Qwen's, Gemma's): <prefix>.gate_proj.weight (H, D),
 * .up_proj.weight (H, D), .down_proj.weight (D, H) from st (or Phi-3's one .gate_up_proj.weight
 * (2H, D), [gate; up], taken as gate_up; or Meta's .w1 gate, .w3 up, .w2 down), their sizes
 * checked against each other, refused (LF_EUNSUPPORTED) when a projection has a .bias beside it,
 * gate and up copied into the stacked gate_up, down read in place where dtype is the
 * file's (LF_DTYPE_COUNT: keep the file's dtype, else each weight converted). FP8 checkpoints
 * (F8_E4M3/F8_E5M2 weights with "<name>_scale" or "_scale_inv" beside them) are dequantized as
 * lf_st_get_as does, to bf16 under LF_DTYPE_COUNT. On the CPU; move it with
 * lf_nn_gated_mlp_to_device. */
/* Which MLP st holds at prefix, by the names lf_nn_gated_mlp_load reads, from the file's header
 * alone (no weight read): its gate's weight name (gate_proj's, Phi-3's gate_up_proj's or Meta's
 * w1's) into gate (cap bytes), dim and hidden from that weight's shape. LF_EINVAL when no naming
 * is all there (the message lists the MLP layers st holds), LF_ESHAPE when the gate is no
 * (hidden, dim) ((2 x hidden, dim) fused). */
LF_API lf_status lf_nn_gated_mlp_find(const lf_safetensors *st, const char *prefix, char *gate, size_t cap,
                                      int64_t *dim, int64_t *hidden);
LF_API lf_status lf_nn_gated_mlp_load(lf_nn_gated_mlp *m, const lf_safetensors *st, const char *prefix, lf_act act,
                                      lf_dtype dtype);
/* The fp8 variant's weights: gate_up quantized per output channel (lf_quantize_fp8) and
 * down.weight per 128 x 128 block (lf_quantize_fp8_128x128), on the module's device, replacing any
 * made before. On failure m is unchanged. */
LF_API lf_status lf_nn_gated_mlp_quantize_fp8(lf_nn_gated_mlp *m);
/* The fp8 variant's weights made elsewhere (by lf_nn_gated_mlp_quantize_fp8 of a module over the
 * same weights, kept by a framework as its own tensors and handed back for each call): gate_up_q
 * (2H, D) f8e4m3 and gate_up_scale (2H, 1) f32 as lf_quantize_fp8 makes them, down_q (D, H)
 * f8e4m3 and down_scale f32 in lf_quantize_fp8_128x128's layout (lf_scale_shape), each contiguous
 * and on gate_up's device and unit. m owns the four from now on (lf_nn_gated_mlp_free frees them),
 * also when this fails; on failure m is otherwise unchanged. */
LF_API lf_status lf_nn_gated_mlp_set_fp8_weights(lf_nn_gated_mlp *m, lf_tensor *gate_up_q, lf_tensor *gate_up_scale,
                                                 lf_tensor *down_q, lf_tensor *down_scale);
/* Move every parameter to dev (the views follow gate_up). On failure m is unchanged. */
LF_API lf_status lf_nn_gated_mlp_to_device(lf_nn_gated_mlp *m, lf_device dev);
LF_API void lf_nn_gated_mlp_free(lf_nn_gated_mlp *m);

/* --- tensor parallel: Megatron-LM's split of the MLP over N ranks ---
 * gate and up column-parallel (rank r holds rows r*H/N .. (r+1)*H/N of each, stacked as its own
 * [Wg_r; Wu_r]), down row-parallel (the same columns of Wd): each rank computes a partial
 * down(gelu(x Wg_r^T) * (x Wu_r^T)) by any variant on one GPU, and one all-reduce sums the
 * partials into the full MLP's output. */
typedef struct lf_nn_tp_mlp {
    int rank, world;
    int64_t dim, hidden;   /* the full MLP's */
    lf_nn_gated_mlp local; /* this rank's shard: dim -> hidden / world -> dim */
    lf_comm *comm;         /* the group (not owned); NULL: partial sums only */
    /* Token chunks: chunk i's all-reduce runs on the communicator's stream while chunk i+1
     * computes. 0: lf_nn_tp_chunks's choice (one pass: on 2 H200s chunking lost at every shape
     * measured); 1: no overlap. */
    int chunks;
} lf_nn_tp_mlp;

/* Rank `rank` of `world`'s shard of full (on the CPU, contiguous), moved to dev (on this
 * thread's unit). world must divide hidden. comm may be NULL, else its rank and size must be
 * rank and world. */
LF_API lf_status lf_nn_tp_mlp_shard(lf_nn_tp_mlp *m, const lf_nn_gated_mlp *full, int rank, int world, lf_comm *comm,
                                    lf_device dev);
/* This rank's partial output: summed over every rank it is the full MLP's. */
LF_API lf_status lf_nn_tp_mlp_forward_partial(const lf_nn_tp_mlp *m, lf_mlp_variant v, const lf_tensor *x,
                                              lf_tensor **y);
/* The full MLP's output on every rank: the partial, all-reduced over the group, in chunks. */
LF_API lf_status lf_nn_tp_mlp_forward(const lf_nn_tp_mlp *m, lf_mlp_variant v, const lf_tensor *x, lf_tensor **y);
/* The chunk count chosen for a forward of `tokens` rows (bench/RESULTS.md says why it is 1). */
LF_API int lf_nn_tp_chunks(int64_t tokens);
LF_API void lf_nn_tp_mlp_free(lf_nn_tp_mlp *m);

#ifdef __cplusplus
}
#endif
#endif
