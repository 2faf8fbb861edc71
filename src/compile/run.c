/* Running a compiled plan: its steps through the observer, or straight to the backend while a
 * CUDA graph records them, and that graph replayed. A replay is shown as the forward it stands for:
 * each kernel inside the ops that made it when the forward was captured (lf::linear, lf::mm, ...),
 * opened and closed around the step when the steps run one by one, and told to the observer for
 * a graph's kernels (it puts them under those ops on the GPU). Layer: compile/. */
#include <stdlib.h>
#include <string.h>

#include "compile/compile_impl.h"

/* Whether node n launches a kernel of its own (a step the plan's table lists). */
static int is_kernel_step(const node *n)
{
    return !n->dead && n->kind != N_VIEW && n->kind != N_WAIT;
}

lf_status cg_plan_steps(plan *p)
{
    int k = 0;
    for (int i = 0; i < p->g.n_nodes; i++)
        k += is_kernel_step(&p->g.nodes[i]);
    p->steps = k ? malloc((size_t)k * sizeof *p->steps) : NULL;
    if (k && !p->steps)
        return lf_fail(LF_ENOMEM, "compile: out of memory for the plan's steps");
    p->n_steps = 0;
    for (int i = 0; i < p->g.n_nodes; i++)
        if (is_kernel_step(&p->g.nodes[i]))
            p->steps[p->n_steps++] = p->g.nodes[i].made_in;
    return LF_OK;
}

/* The ops open around the steps of one run, as the observer was told of them. */
typedef struct open_ops {
    int depth;
    lf_op_id ops[LF_REPLAY_DEPTH];
    int32_t calls[LF_REPLAY_DEPTH];
} open_ops;

/* Open what step s was made in, after closing what of the last step's it was not: a call whose
 * steps follow one another stays open across them, as it was in the forward. */
static void enter_ops(open_ops *o, const lf_replay_step *s)
{
    int same = 0;
    while (same < o->depth && same < s->n_ops && o->ops[same] == s->ops[same] && o->calls[same] == s->calls[same])
        same++;
    for (; o->depth > same; o->depth--)
        lf_ops_replay_op(LF_OP_COUNT);
    for (; o->depth < s->n_ops; o->depth++) {
        o->ops[o->depth] = s->ops[o->depth], o->calls[o->depth] = s->calls[o->depth];
        lf_ops_replay_op(o->ops[o->depth]);
    }
}

static lf_status run_view(const plan *p, const node *n, lf_tensor *const *in)
{
    lf_tensor *x = NULL, *y = NULL;
    lf_status s;
    if (n->vin.kind == R_CONST) {
        x = n->vin_const;
    } else {
        const lf_tensor *base = n->vin.kind == R_VALUE ? p->g.values[n->vin.idx].buf : in[n->vin.idx];
        int64_t off = n->vin.off / (int64_t)lf_dtype_size(base->dtype) + base->offset;
        s = lf_tensor_alias(&x, base, n->vin_ndim, n->vin_shape, n->vin_stride, off);
        if (s != LF_OK)
            return s;
    }
    switch (n->op) {
    case LF_OP_T:
        s = lf_t(&y, x);
        break;
    case LF_OP_TRANSPOSE:
        s = lf_transpose(&y, x, n->v_d0, n->v_d1);
        break;
    case LF_OP_VIEW:
        s = lf_view(&y, x, n->v_ndim, n->v_shape);
        break;
    case LF_OP_RESHAPE:
        s = lf_reshape(&y, x, n->v_ndim, n->v_shape);
        break;
    default:
        s = lf_contiguous(&y, x);
        break;
    }
    lf_tensor_free(y);
    if (x != n->vin_const)
        lf_tensor_free(x);
    return s;
}

/* Every step once. direct: straight to the backend (recording a graph), else through the
 * launch hooks the profiler watches, each inside the ops that made it. */
static lf_status run_steps(plan *p, lf_tensor *const *in, int direct)
{
    open_ops open = {0};
    lf_status s = LF_OK;
    for (int i = 0; i < p->g.n_nodes && s == LF_OK; i++) {
        const node *n = &p->g.nodes[i];
        if (n->dead)
            continue;
        if (!direct)
            enter_ops(&open, &n->made_in);
        switch (n->kind) {
        case N_GEMM: /* a packed B is a CPU step's, never recorded in a graph */
            s = n->packed ? lf_launch_gemm_packed(&n->g, n->packed)
                : direct  ? lf_backend_gemm(n->dev, &n->g, NULL)
                          : lf_launch_gemm(n->dev, &n->g);
            break;
        case N_PW:
            s = direct ? lf_backend_pointwise(n->dev, &n->p, NULL) : lf_launch_pointwise(n->dev, &n->p);
            break;
        case N_FUSED:
            s = direct ? lf_backend_fused(n->dev, &n->f, NULL) : lf_launch_fused(n->dev, &n->f);
            break;
        case N_COLL:
            s = lf_launch_collective(n->dev, &n->coll, direct);
            break;
        case N_WAIT:
            s = lf_launch_comm_wait(n->dev, n->coll.comm, direct);
            break;
        case N_QUANT:
            s = direct ? lf_backend_quantize_fp8(n->dev, &n->q, NULL) : lf_launch_quant(n->dev, &n->q);
            break;
        default:
            s = run_view(p, n, in);
            break;
        }
    }
    if (!direct) /* every op closed, whether the run failed or not: the observer's stack stays whole */
        enter_ops(&open, &(lf_replay_step){0});
    return s;
}

static void apply_patches(plan *p, lf_tensor *const *in)
{
    for (int i = 0; i < p->n_patches; i++)
        *p->patches[i].field = (char *)lf_tensor_data(in[p->patches[i].input]) + p->patches[i].off;
}

lf_status cg_run_plan(plan *p, lf_tensor *const *in, int graphs_allowed)
{
    apply_patches(p, in);
    const int graphs = p->dev == LF_DEVICE_CUDA && graphs_allowed && p->views == 0;
    if (!graphs)
        return run_steps(p, in, 0);
    int same = p->graph_exec != NULL;
    for (int i = 0; i < p->g.n_in && same; i++)
        same = p->graph_ptrs[i] == lf_tensor_data(in[i]);
    if (!same) { /* record the steps once for these input addresses */
        if (p->graph_exec) {
            lf_ops_note_begin("cuda graph re-recorded (an input moved)");
            lf_backend_graph_free(p->dev, p->graph_exec);
            p->graph_exec = NULL;
        }
        LF_TRY(lf_backend_graph_begin(p->dev));
        lf_status s = run_steps(p, in, 1);
        void *exec = NULL;
        lf_status e = lf_backend_graph_end(p->dev, &exec);
        if (s == LF_OK)
            s = e;
        if (s != LF_OK) {
            if (exec)
                lf_backend_graph_free(p->dev, exec);
            return s;
        }
        p->graph_exec = exec;
        for (int i = 0; i < p->g.n_in; i++)
            p->graph_ptrs[i] = lf_tensor_data(in[i]);
    }
    return lf_launch_graph(p->dev, p->graph_exec, p->g.n_in, in, p->n_steps, p->steps);
}
