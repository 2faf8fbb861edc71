/* Inside compile mode: the captured graph that capture.c builds, passes.c rewrites and
 * compile.c turns into a plan. Layer: compile/. */
#ifndef LF_COMPILE_IMPL_H
#define LF_COMPILE_IMPL_H

#include "linfuse/compile.h"
#include "ops/dispatch.h"

enum { MAX_INPUTS = 8, MAX_PLANS = 9 };

typedef enum { R_NONE, R_INPUT, R_VALUE, R_CONST } ref_kind;

/* Where an operand lives: input idx / value idx at a byte offset, or a constant address. */
typedef struct ref {
    ref_kind kind;
    int idx;
    int64_t off;
    void *ptr; /* R_CONST */
} ref;

typedef struct value {
    uintptr_t lo, hi; /* bytes it occupied at capture */
    lf_device dev;
    lf_dtype dtype;
    int writer; /* node index */
    int users;
    int is_output;
    lf_tensor *buf; /* the plan's buffer */
} value;

typedef enum { N_GEMM, N_PW, N_FUSED, N_VIEW, N_COLL, N_WAIT, N_QUANT } node_kind;

typedef struct node {
    node_kind kind;
    lf_op_id op; /* the op whose call launched it (or the view op) */
    /* the ops open when it was captured, outermost first, with their calls' numbers: what its
     * kernel is shown under when the plan replays (a view node: the ops around its own) */
    lf_replay_step made_in;
    int dead;
    lf_device dev;
    lf_gemm g;
    ref ga, gb, gc, gd, gbias;
    lf_cpu_packed_b *packed; /* LF_PASS_PACK_WEIGHTS: B (a parameter) packed once; NULL otherwise */
    ref gsa, gsb, gds;       /* a scaled GEMM's scales: a's and b's read, an f8e4m3 d's written */
    /* N_QUANT: an FP8 quantization, qin read, its codes qq and scales qs written */
    lf_quant q;
    ref qin, qq, qs;
    lf_fused f; /* N_PW is a one-step N_FUSED until the plan: same description, its own kernel */
    lf_pointwise p;
    ref fin[LF_FUSED_MAX_IN], fout;
    /* N_VIEW: the op, its input (geometry at capture) and its arguments */
    ref vin;
    int vin_ndim;
    int64_t vin_shape[LF_MAX_DIMS], vin_stride[LF_MAX_DIMS];
    lf_tensor *vin_const; /* a handle on a parameter's storage */
    int v_ndim;
    int64_t v_shape[LF_MAX_DIMS];
    int v_d0, v_d1;
    /* N_COLL: a collective in place (cin read, cout the sum in the same buffer); N_WAIT: the
     * wait for a communicator's async collectives (coll.comm) */
    lf_collective coll;
    ref cin, cout;
    char note[96]; /* what a pass did to it */
} node;

typedef struct graph {
    node *nodes;
    int n_nodes, cap_nodes;
    value *values;
    int n_values, cap_values;
    int n_in;
    uintptr_t in_lo[MAX_INPUTS], in_hi[MAX_INPUTS];
    /* capture state */
    lf_op_id stack[64];
    int32_t call_of[64]; /* each open op's call number in the forward */
    int32_t calls;
    int depth, kernels_at[64], kernels;
    lf_status err;
    /* the output */
    ref out;
    int out_ndim;
    lf_dtype out_dtype;
    int64_t out_shape[LF_MAX_DIMS], out_stride[LF_MAX_DIMS];
    /* tensors the passes made (FP8 weights quantized at compile time), freed with the graph */
    lf_tensor *owned[16];
    int n_owned;
} graph;

/* Where an input's pointer goes in a step, patched per run. */
typedef struct patch {
    void **field;
    int input;
    int64_t off;
} patch;

typedef struct plan {
    graph g;
    lf_dtype in_dtype[MAX_INPUTS];
    lf_device in_dev[MAX_INPUTS];
    int in_ndim[MAX_INPUTS];
    int64_t in_shape[MAX_INPUTS][LF_MAX_DIMS], in_stride[MAX_INPUTS][LF_MAX_DIMS];
    lf_device dev; /* where the steps run */
    patch *patches;
    int n_patches;
    lf_tensor *out_buf;
    int64_t out_offset; /* elements */
    int kernels, views;
    /* the kernel steps in order, each with the ops that made it: what a replay shows them under */
    lf_replay_step *steps;
    int n_steps;
    void *graph_exec; /* CUDA graph, recorded for graph_ptrs */
    void *graph_ptrs[MAX_INPUTS];
    char passes_log[1024];
} plan;

/* capture.c: run fn once on in with the capture hooks set; g gets its nodes, values and output. */
lf_status cg_capture(graph *g, lf_forward_fn fn, void *ctx, int n_in, lf_tensor *const *in);
void cg_free(graph *g);
/* passes.c: the passes in `passes` (LF_PASS_* bits), in order, each line of what they did in log. */
void cg_run_passes(graph *g, unsigned passes, char *log, size_t cap);
/* users and is_output of every value, from the live nodes and the output */
void cg_count_users(graph *g);
/* run.c: one run of plan p on inputs in: as a CUDA graph (recorded on the first run, again when an
 * input moved) where the plan is CUDA's, graphs allowed and it has no view step, else step by
 * step through the observer, each kernel inside the ops that made it. */
lf_status cg_run_plan(plan *p, lf_tensor *const *in, int graphs_allowed);
/* p's steps table (p->steps: the kernel steps in order with the ops that made them). */
lf_status cg_plan_steps(plan *p);

#endif
