/* linfuse ops: the dispatcher. Each op checks its inputs (shape, dtype, device), tells the
 * observer (the profiler) that it began, derives GEMM layouts from strides instead of copying,
 * launches kernels through the device's backend, and tells the observer it ended. Composite
 * ops call other ops, so the chain a user sees is honest: lf::linear -> lf::t -> lf::addmm.
 * Every op returns a new tensor through `out` (the caller frees it) and an lf_status.
 * Layer: ops/ sits on backend/ and tensor/. */
#ifndef LINFUSE_OPS_H
#define LINFUSE_OPS_H

#include "linfuse/backend.h"
#include "linfuse/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The op table: one line per op (ops.def), the names users see in traces. */
typedef enum lf_op_id {
#define LF_OP(id, name, kind) LF_OP_##id,
#include "linfuse/ops.def"
#undef LF_OP
    LF_OP_COUNT
} lf_op_id;

typedef enum lf_op_kind {
    LF_OPK_VIEW,
    LF_OPK_COPY,
    LF_OPK_GEMM,
    LF_OPK_POINTWISE,
    LF_OPK_COMPOSITE,
    LF_OPK_COMM /* collectives, and record_param_comms, the span PyTorch gives their arguments */
} lf_op_kind;

LF_API const char *lf_op_name(lf_op_id op); /* "lf::addmm" */
LF_API lf_op_kind lf_op_kind_of(lf_op_id op);

/* --- views as ops (recorded, launch nothing) --- */
LF_API lf_status lf_t(lf_tensor **out, const lf_tensor *x);
LF_API lf_status lf_transpose(lf_tensor **out, const lf_tensor *x, int d0, int d1);
LF_API lf_status lf_view(lf_tensor **out, const lf_tensor *x, int ndim, const int64_t *shape);
/* A view when strides allow, else a contiguous copy (as torch.reshape). */
LF_API lf_status lf_reshape(lf_tensor **out, const lf_tensor *x, int ndim, const int64_t *shape);
/* x's values written into out, an existing tensor of x's shape on x's device (any strides, any
 * dtype linfuse computes in: converted, rounded to nearest even), as torch's copy_. out and x may
 * be views of one storage where the bytes they span do not meet (row 0 into row 1); spans that
 * meet are refused, also views that interleave without sharing an element. */
LF_API lf_status lf_copy_out(lf_tensor *out, const lf_tensor *x);
/* x itself (a new handle) when already contiguous, else a contiguous copy. */
LF_API lf_status lf_contiguous(lf_tensor **out, const lf_tensor *x);

/* --- GEMMs --- */
/* out (M, N) = a (M, K) . b (K, N) */
LF_API lf_status lf_mm(lf_tensor **out, const lf_tensor *a, const lf_tensor *b);
/* out = beta * bias + alpha * a . b; bias broadcasts to (M, N): (N), (1, N), (M, 1) or (M, N).
 * A (N) bias with beta == 1 rides in the GEMM's epilogue; any other bias is read as the GEMM's
 * C input with beta. Never a separate add, never a copy of the bias. */
LF_API lf_status lf_addmm(lf_tensor **out, const lf_tensor *bias, const lf_tensor *a, const lf_tensor *b, float beta,
                          float alpha);
/* out = act(a . b + bias): one GEMM with bias and activation in its epilogue (bias may be NULL;
 * when given it is (N)). torch calls this _addmm_activation. */
LF_API lf_status lf_addmm_act(lf_tensor **out, const lf_tensor *bias, const lf_tensor *a, const lf_tensor *b,
                              lf_act act);
/* out (M, N/2) = act(g) * u, where a . b (M, N) holds gates and partners in blocks of
 * 2 x group columns (lf_gate, LF_GATE_PAIRED). One GEMM; g and u never reach memory. */
LF_API lf_status lf_mm_gated(lf_tensor **out, const lf_tensor *a, const lf_tensor *b, lf_act act, int64_t group);
/* out = a . b written into out, an existing (M, N) tensor of a's dtype and device: a view is
 * fine (a block of rows of a larger tensor, as torch.mm(a, b, out=...)); its columns must be
 * contiguous on CUDA. out must not overlap a or b. */
LF_API lf_status lf_mm_out(lf_tensor *out, const lf_tensor *a, const lf_tensor *b);
/* The same two written into out, an existing (M, N) / (M, N/2) tensor of a's dtype and device
 * (a view is fine; its columns contiguous on CUDA), apart from a and b: for programs that own
 * their memory (a framework's allocator, a CUDA graph being captured). They take no memory of
 * their own, but where lf_gated_choose picks the fallback (no gated kernel for the shape), whose
 * g and u are an intermediate. */
LF_API lf_status lf_addmm_act_out(lf_tensor *out, const lf_tensor *bias, const lf_tensor *a, const lf_tensor *b,
                                  lf_act act);
LF_API lf_status lf_mm_gated_out(lf_tensor *out, const lf_tensor *a, const lf_tensor *b, lf_act act, int64_t group);
/* 2-D x 2-D is mm; (B, S, K) x (K, N) flattens the first operand to (B*S, K), runs mm and views
 * the result as (B, S, N), as torch.matmul does. */
LF_API lf_status lf_matmul(lf_tensor **out, const lf_tensor *a, const lf_tensor *b);
/* y = x . w^T + b for x (..., in), w (out, in), b (out) or NULL: lf::t on the weight, then
 * addmm (or mm without bias); inputs with more than 2 dims go through matmul (no bias) or
 * a flattened addmm (bias), as torch's linear does. */
LF_API lf_status lf_linear(lf_tensor **out, const lf_tensor *x, const lf_tensor *w, const lf_tensor *b);

/* --- pointwise (numpy broadcasting; both operands of one dtype) --- */
LF_API lf_status lf_add(lf_tensor **out, const lf_tensor *a, const lf_tensor *b);
LF_API lf_status lf_mul(lf_tensor **out, const lf_tensor *a, const lf_tensor *b);
typedef enum lf_gelu_approx { LF_GELU_ERF, LF_GELU_TANH } lf_gelu_approx;
LF_API lf_status lf_gelu(lf_tensor **out, const lf_tensor *x, lf_gelu_approx approx);
/* out = gelu(g) * u in one pass (GeGLU's middle): g and u of one shape and dtype, any strides.
 * gelu(g) is rounded to the dtype before the product, so the result equals
 * lf_mul(lf_gelu(g), u) bit for bit while reading g and u once and writing out once. On CUDA
 * one block per row, its width chosen from the row length as Liger's kernel does. */
LF_API lf_status lf_gelu_mul(lf_tensor **out, const lf_tensor *g, const lf_tensor *u, lf_gelu_approx approx);
/* silu(x) = x sigmoid(x), torch's F.silu; and SwiGLU's middle silu(g) * u in one pass (silu(g)
 * rounded to the dtype first, so it equals lf_mul(lf_silu(g), u) bit for bit). */
LF_API lf_status lf_silu(lf_tensor **out, const lf_tensor *x);
LF_API lf_status lf_silu_mul(lf_tensor **out, const lf_tensor *g, const lf_tensor *u);

/* --- FP8 ---
 * w (rows, cols), bf16, f16 or f32, any strides, quantized per row (per output channel of an
 * nn.Linear weight, per token of an activation): scale[r] = max |w[r, :]| / 448 (1 for a row of
 * zeros, at least 2^-126) and q = w x (1 / scale) rounded to E4M3, nearest even
 * (lf_f8e4m3_from_f32). q is (rows, cols)
 * f8e4m3 and scale (rows, 1) f32, on w's device; q x scale is w to within E4M3's step, 2^-4 of a
 * value at most (less relative precision below 2^-6 of the row's largest). It runs where w lives
 * (a kernel on CUDA, every device writing the same bytes); inside compile's capture it becomes a
 * step of the plan. On the CPU a non-finite element is an error; on a GPU it is not checked (that would
 * cost a read back): a NaN becomes a NaN code, an infinity an infinite row scale, and the GEMM
 * they feed gives NaN. */
LF_API lf_status lf_quantize_fp8(lf_tensor **q, lf_tensor **scale, const lf_tensor *w);
/* lf_quantize_fp8 of x into q (rows, cols) and scale (rows, 1), rows >= x's: the rows past x's are
 * zero codes with scale 1. Tokens padded for a GEMM that takes whole groups of rows (cuBLASLt's
 * block-scaled FP8 GEMM takes multiples of 4); the padding's results are dropped after. */
LF_API lf_status lf_quantize_fp8_rows(lf_tensor **q, lf_tensor **scale, const lf_tensor *x, int64_t rows);
/* Block scales (DeepSeek-V3's recipe; torch's ScalingType.BlockWise1x128 and BlockWise128x128):
 * lf_quantize_fp8 with one scale per 1 x 128 block of each row (activations: finer than per row,
 * one outlier costs its 128 neighbours precision, not its whole row), or per 128 x 128 block
 * (weights). scale is f32 in lf_scale_mode's layouts: (ceil(cols / 128), rows rounded up to 4)
 * for 1 x 128, (ceil(rows / 128), ceil(cols / 128) rounded up to 4) for 128 x 128; padding 1. */
LF_API lf_status lf_quantize_fp8_1x128(lf_tensor **q, lf_tensor **scale, const lf_tensor *x);
LF_API lf_status lf_quantize_fp8_128x128(lf_tensor **q, lf_tensor **scale, const lf_tensor *w);
/* out = a . b with scales, for f8e4m3 a (M, K) and b (K, N), fp32 accumulation, out (M, N) of
 * out_dtype: torch._scaled_mm. Row-wise scales, (M, 1) and (N, 1): element (i, j) times
 * a_scale[i] * b_scale[j]. Block scales (lf_quantize_fp8_1x128 of a, lf_quantize_fp8_128x128 of
 * b's transpose, the weight): each 128-long piece of K times its two blocks' scales. On CUDA
 * cuBLASLt's FP8 GEMM; it takes the "tn" layout only (a row-major, b a weight seen transposed), K
 * a multiple of 16, and with block scales M a multiple of 4. LF_EUNSUPPORTED where the device has
 * no FP8 GEMM (the CPU). */
LF_API lf_status lf_scaled_mm(lf_tensor **out, const lf_tensor *a, const lf_tensor *a_scale, const lf_tensor *b,
                              const lf_tensor *b_scale, lf_dtype out_dtype);
/* lf_scaled_mm written into out, an existing (M, N) bf16, f16 or f32 tensor on a's device (its
 * dtype is the result's). */
LF_API lf_status lf_scaled_mm_out(lf_tensor *out, const lf_tensor *a, const lf_tensor *a_scale, const lf_tensor *b,
                                  const lf_tensor *b_scale);
/* lf_mm_gated in FP8: the scales are applied to the 2H pre-gate columns before the activation,
 * out (M, H) bf16. On Hopper the gated kernel's FP8 form (wgmma e4m3); elsewhere a scaled GEMM
 * then act(g) * u, with a note in the trace; LF_EUNSUPPORTED where neither runs (the CPU). */
LF_API lf_status lf_scaled_mm_gated(lf_tensor **out, const lf_tensor *a, const lf_tensor *a_scale, const lf_tensor *b,
                                    const lf_tensor *b_scale, lf_act act, int64_t group);
/* lf_scaled_mm_gated with h leaving in FP8 for the next FP8 GEMM: h (M, H) f8e4m3 and its 1 x 128
 * block scales, exactly lf_quantize_fp8_1x128 of the bf16 h. On Hopper the gated kernel's
 * epilogue quantizes each tile as it writes it (row-wise scales on a and b, group a multiple of
 * 128), so h is written once in half the bytes and never read back to be quantized; elsewhere the
 * two steps run, with a note in the trace. */
LF_API lf_status lf_scaled_mm_gated_fp8(lf_tensor **h, lf_tensor **h_scale, const lf_tensor *a,
                                        const lf_tensor *a_scale, const lf_tensor *b, const lf_tensor *b_scale,
                                        lf_act act, int64_t group);

/* LF_OK when dev runs FP8 GEMMs (lf_scaled_mm and, on Hopper, the gated kernel's FP8 form), else
 * LF_EUNSUPPORTED saying why: callers with a bf16 path ask first. */
LF_API lf_status lf_fp8_supported(lf_device dev);

/* A note span for the observer, which a trace shows beside the ops (a fallback and why, a
 * compiled region): ops and modules say why they took another path. text is copied. */
LF_API void lf_ops_note_begin(const char *text);
LF_API void lf_ops_note_end(void);

/* --- collectives ---
 * A communicator is one rank of a group of devices (GPUs) that sum together; linfuse/dist.h
 * makes them (one process per GPU under torchrun, or one thread per GPU in one process). */
typedef struct lf_comm lf_comm;
/* t = the sum of t over every rank of comm, in place: t contiguous, on the comm's GPU, the same
 * shape and dtype on every rank. Traced as PyTorch's c10d::allreduce_ is: the op, inside it
 * record_param_comms carrying the collective's arguments, and the device library's kernel.
 * async 0: ops after it on this rank see the sum. async 1: it runs on the communicator's own
 * stream beside the work that follows (overlap), and t must not be read, written or freed until
 * lf_comm_wait(comm). */
LF_API lf_status lf_all_reduce(lf_tensor *t, lf_comm *comm, int async);
/* This rank's later work waits for every async collective queued on comm. */
LF_API lf_status lf_comm_wait(lf_comm *comm);

/* --- the observer: how the profiler (or a test) sees the dispatcher --- */

/* One argument of an op as a trace records it: a tensor, a scalar, or nothing. */
typedef struct lf_op_arg {
    const lf_tensor *t; /* NULL for a scalar or an absent optional tensor */
    double scalar;
    int is_scalar;
} lf_op_arg;

/* One step of a compiled plan a CUDA graph replays, as the observer is told of it: the kernel the
 * step launches and the ops that were open when compile mode captured it, outermost first, each
 * with the number of its call in the captured forward (steps of one call share the number, so a
 * trace can show the call once over all its kernels). */
enum { LF_REPLAY_DEPTH = 8 };
typedef struct lf_replay_step {
    int n_ops;
    lf_op_id ops[LF_REPLAY_DEPTH];
    int32_t calls[LF_REPLAY_DEPTH];
} lf_replay_step;

typedef struct lf_op_observer {
    void (*op_begin)(void *user, lf_op_id op, int n_args, const lf_op_arg *args);
    void (*op_end)(void *user, lf_op_id op, lf_status status);
    /* around each kernel launch; at kernel_begin info is empty but for what the observer asks
     * (time_on_device), at kernel_end it is complete */
    void (*kernel_begin)(void *user, lf_device dev, lf_kernel_info *info);
    void (*kernel_end)(void *user, lf_device dev, const lf_kernel_info *info);
    void *user;
    /* optional: a named span inside an op, e.g. a fallback and why it was taken (text copied) */
    void (*note_begin)(void *user, const char *text);
    void (*note_end)(void *user);
    /* optional: a compiled plan's steps shown as the forward they stand for. replay_op: a step
     * run by itself enters (op: the op that made it at capture) or leaves (LF_OP_COUNT) such an
     * op, which was not dispatched; graph_steps: inside op lf::cuda_graph_replay, the n steps the
     * graph replays (read during the call only) */
    void (*replay_op)(void *user, lf_op_id op);
    void (*graph_steps)(void *user, int n, const lf_replay_step *steps);
} lf_op_observer;

/* Install (or with NULL remove) the process-wide observer. The struct must outlive its use. While
 * none is installed, the dispatcher pays one predictable branch per op. */
LF_API void lf_ops_set_observer(const lf_op_observer *obs);

#ifdef __cplusplus
}
#endif
#endif
