/* Internal dispatcher helpers: the observer hooks every op goes through, kernel launches that
 * report to the observer, and the input checks ops share. Layer: ops/. */
#ifndef LF_DISPATCH_H
#define LF_DISPATCH_H

#include <stdatomic.h>

#include "backend/backend_impl.h"
#include "linfuse/ops.h"
#include "tensor/tensor_impl.h"

extern _Atomic(const lf_op_observer *) lf_observer_ptr;

static inline const lf_op_observer *lf_obs(void)
{
    return atomic_load_explicit(&lf_observer_ptr, memory_order_acquire);
}

/* Compile mode's capture (compile/ sets these around one forward): while a thread's hooks are
 * set, each op on that thread and each launch is reported to them as well; the ops still run.
 * op_end gets the op's result (NULL on failure). */
typedef struct lf_capture_hooks {
    void (*op_begin)(void *user, lf_op_id op);
    void (*op_end)(void *user, lf_op_id op, int n_args, const lf_op_arg *args, const lf_tensor *out);
    void (*gemm)(void *user, lf_device dev, const lf_gemm *g);
    void (*pointwise)(void *user, lf_device dev, const lf_pointwise *p);
    /* a collective's launch, and a wait for the async ones (NULL: not captured) */
    void (*collective)(void *user, lf_device dev, const lf_collective *c);
    void (*comm_wait)(void *user, lf_device dev, void *comm);
    /* an FP8 quantization's launch (activations quantized inside the forward) */
    void (*quant)(void *user, lf_device dev, const lf_quant *q);
    void *user;
} lf_capture_hooks;

extern _Thread_local const lf_capture_hooks *lf_capture_tls;

/* Run `call` (an lf_status expression) as op `id` producing *out; the observer, if any, sees the
 * op begin before and end after, and so does a capture on this thread. Returns from the
 * enclosing function. */
#define LF_DISPATCH(id, args, out, call)                                                      \
    do {                                                                                      \
        const lf_op_observer *o_ = lf_obs();                                                  \
        const lf_capture_hooks *c_ = lf_capture_tls;                                          \
        const int n_ = (int)(sizeof(args) / sizeof((args)[0]));                               \
        if (__builtin_expect(o_ != NULL, 0))                                                  \
            o_->op_begin(o_->user, LF_OP_##id, n_, args);                                     \
        if (__builtin_expect(c_ != NULL, 0))                                                  \
            c_->op_begin(c_->user, LF_OP_##id);                                               \
        lf_status s_ = (call);                                                                \
        if (__builtin_expect(c_ != NULL, 0))                                                  \
            c_->op_end(c_->user, LF_OP_##id, n_, args, s_ == LF_OK && (out) ? *(out) : NULL); \
        if (__builtin_expect(o_ != NULL, 0))                                                  \
            o_->op_end(o_->user, LF_OP_##id, s_);                                             \
        return s_;                                                                            \
    } while (0)

#define LF_ARG(tensor)   ((lf_op_arg){.t = (tensor)})
#define LF_ARG_SCALAR(v) ((lf_op_arg){.scalar = (v), .is_scalar = 1})

/* Launch through dev's backend, with the observer told about the kernel. */
lf_status lf_launch_gemm(lf_device dev, const lf_gemm *g);
/* A CPU GEMM whose B was packed once (lf_cpu_pack_b), seen by the hooks as lf_launch_gemm's. */
lf_status lf_launch_gemm_packed(const lf_gemm *g, const lf_cpu_packed_b *p);
lf_status lf_launch_pointwise(lf_device dev, const lf_pointwise *p);
lf_status lf_launch_fused(lf_device dev, const lf_fused *f);
/* FP8 quantization (row-wise or in blocks); a capture records it as a step. */
lf_status lf_launch_quant(lf_device dev, const lf_quant *q);
/* A collective through dev's backend (the observer sees its kernel inside the library's span,
 * "nccl:all_reduce"), and the wait for a communicator's async ones. direct: no observer, no
 * capture (a plan recording a CUDA graph). */
lf_status lf_launch_collective(lf_device dev, const lf_collective *c, int direct);
lf_status lf_launch_comm_wait(lf_device dev, void *comm, int direct);

/* A recorded CUDA graph replayed as op lf::cuda_graph_replay over the plan's n inputs: CUPTI
 * gives every kernel of a graph launch the launch's correlation, so they all carry this op's
 * External id (docs/trace_format.md, "CUDA graphs"); the observer is told the n_steps steps it
 * replays (the ops that made each kernel). No capture sees it. */
lf_status lf_launch_graph(lf_device dev, void *graph, int n, lf_tensor *const *in, int n_steps,
                          const lf_replay_step *steps);
/* A compiled plan's step run by itself (no graph) inside the ops that made it at capture: the
 * observer told op `op` is entered (LF_OP_COUNT: the innermost such op left), so its kernels show
 * under it though it was not dispatched. */
void lf_ops_replay_op(lf_op_id op);

/* Checks that name the op and the argument in their messages. */
lf_status lf_check_tensor(const char *op, const char *name, const lf_tensor *t);
/* lf_check_tensor, f8e4m3 allowed: for ops that only re-view a tensor or take FP8 by design. */
lf_status lf_check_stored(const char *op, const char *name, const lf_tensor *t);
lf_status lf_check_ndim(const char *op, const char *name, const lf_tensor *t, int ndim);
lf_status lf_check_same(const char *op, const char *na, const lf_tensor *a, const char *nb, const lf_tensor *b);

/* The 2-D matrix view of a 2-D tensor, and a strided view of any tensor. */
lf_matrix lf_matrix_of(const lf_tensor *t);
lf_strided lf_strided_of(const lf_tensor *t);

/* Run pointwise p writing into the fresh tensor y (p's out, ndim and shape are taken from y);
 * *out = y on success, y freed on failure. */
lf_status lf_pointwise_into(lf_tensor **out, lf_tensor *y, lf_pointwise *p);

/* y (M, H) = act(g) * u over the columns of a plain product p (M, 2H) arranged in blocks of
 * 2 x group (gates, then their partners): the gated GEMMs' fallbacks, one pointwise pass. */
lf_status lf_gate_pairs(lf_tensor *y, const lf_tensor *p, lf_act act, int64_t group);

/* A new contiguous tensor like `like` but with the given shape. */
lf_status lf_new_output(lf_tensor **out, const lf_tensor *like, int ndim, const int64_t *shape);

#endif
