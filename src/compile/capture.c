/* Compile mode's capture: the forward runs once with the dispatcher's capture hooks set on this
 * thread; every launch becomes a node whose operands are references. A launch's output is a new
 * value (the memory it wrote, at that moment); an operand is the newest value whose memory holds
 * it, else an input's memory, else a constant (a parameter, read in place). So a buffer the
 * allocator reuses within the forward is two values. View ops that launch nothing become view
 * nodes (view folding drops them: the kernels already carry their strides). Layer: compile/. */
#include <stdlib.h>
#include <string.h>

#include "compile/compile_impl.h"

static node *new_node(graph *g, node_kind k, lf_device dev)
{
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 32;
        node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
        if (!n) {
            g->err = lf_fail(LF_ENOMEM, "compile: out of memory capturing the graph");
            return NULL;
        }
        g->nodes = n, g->cap_nodes = cap;
    }
    node *n = &g->nodes[g->n_nodes++];
    memset(n, 0, sizeof *n);
    n->kind = k;
    n->dev = dev;
    n->op = g->depth > 0 ? g->stack[g->depth - 1] : LF_OP_COUNT;
    const int depth = g->depth < 64 ? g->depth : 64;
    n->made_in.n_ops = depth < LF_REPLAY_DEPTH ? depth : LF_REPLAY_DEPTH; /* the outermost: the calls a user made */
    for (int i = 0; i < n->made_in.n_ops; i++)
        n->made_in.ops[i] = g->stack[i], n->made_in.calls[i] = g->call_of[i];
    return n;
}

/* A capture hook's node: the launch counted as a kernel, then its node; NULL once capture has
 * failed (the launch is still counted) or when memory runs out. */
static node *hook_node(graph *g, node_kind k, lf_device dev)
{
    g->kernels++;
    return g->err == LF_OK ? new_node(g, k, dev) : NULL;
}

static int new_value(graph *g, uintptr_t lo, uintptr_t hi, lf_device dev, lf_dtype dt)
{
    if (g->n_values == g->cap_values) {
        int cap = g->cap_values ? 2 * g->cap_values : 32;
        value *v = realloc(g->values, (size_t)cap * sizeof *v);
        if (!v) {
            g->err = lf_fail(LF_ENOMEM, "compile: out of memory capturing the graph");
            return -1;
        }
        g->values = v, g->cap_values = cap;
    }
    value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->lo = lo, v->hi = hi, v->dev = dev, v->dtype = dt, v->writer = g->n_nodes - 1;
    return g->n_values++;
}

/* Byte span of a 2-D view / a strided view over shape (non-negative strides). */
static void span_matrix(const lf_matrix *m, uintptr_t *lo, uintptr_t *hi)
{
    size_t es = lf_dtype_size(m->dtype);
    *lo = (uintptr_t)m->data;
    *hi = *lo + (uintptr_t)(((m->rows - 1) * m->rs + (m->cols - 1) * m->cs + 1) * (int64_t)es);
}

static void span_strided(const lf_strided *s, int ndim, const int64_t *shape, uintptr_t *lo, uintptr_t *hi)
{
    int64_t last = 0;
    for (int d = 0; d < ndim; d++)
        last += (shape[d] - 1) * s->stride[d];
    *lo = (uintptr_t)s->data;
    *hi = *lo + (uintptr_t)((last + 1) * (int64_t)lf_dtype_size(s->dtype));
}

static ref resolve(const graph *g, uintptr_t lo, uintptr_t hi)
{
    for (int v = g->n_values - 1; v >= 0; v--)
        if (lo >= g->values[v].lo && hi <= g->values[v].hi)
            return (ref){R_VALUE, v, (int64_t)(lo - g->values[v].lo), NULL};
    for (int i = 0; i < g->n_in; i++)
        if (lo >= g->in_lo[i] && hi <= g->in_hi[i])
            return (ref){R_INPUT, i, (int64_t)(lo - g->in_lo[i]), NULL};
    return (ref){R_CONST, -1, 0, (void *)lo};
}

/* n floats at p (a scaled GEMM's scales). */
static ref resolve_floats(const graph *g, const float *p, int64_t n)
{
    return resolve(g, (uintptr_t)p, (uintptr_t)(p + n));
}

static ref resolve_matrix(const graph *g, const lf_matrix *m)
{
    uintptr_t lo, hi;
    span_matrix(m, &lo, &hi);
    return resolve(g, lo, hi);
}

static void cap_op_begin(void *user, lf_op_id op)
{
    graph *g = user;
    if (g->depth < 64) {
        g->stack[g->depth] = op;
        g->call_of[g->depth] = g->calls;
        g->kernels_at[g->depth] = g->kernels;
    }
    g->calls++;
    g->depth++;
}

static int is_view_op(lf_op_id op)
{
    return op == LF_OP_T || op == LF_OP_TRANSPOSE || op == LF_OP_VIEW || op == LF_OP_RESHAPE || op == LF_OP_CONTIGUOUS;
}

static void cap_op_end(void *user, lf_op_id op, int n_args, const lf_op_arg *args, const lf_tensor *out)
{
    graph *g = user;
    g->depth--;
    if (g->depth >= 64 || g->err != LF_OK || !out || !is_view_op(op) || n_args < 1 || !args[0].t)
        return;
    /* a view op that launched nothing, not inside another view op: a view step */
    if (g->kernels != g->kernels_at[g->depth] || (g->depth > 0 && is_view_op(g->stack[g->depth - 1])))
        return;
    const lf_tensor *x = args[0].t;
    node *n = new_node(g, N_VIEW, lf_tensor_device(x));
    if (!n)
        return;
    n->op = op;
    lf_strided xs = {lf_tensor_data(x), x->dtype, {0}};
    memcpy(xs.stride, x->stride, sizeof xs.stride);
    uintptr_t lo, hi;
    span_strided(&xs, x->ndim, x->shape, &lo, &hi);
    n->vin = resolve(g, lo, hi);
    n->vin_ndim = x->ndim;
    memcpy(n->vin_shape, x->shape, sizeof n->vin_shape);
    memcpy(n->vin_stride, x->stride, sizeof n->vin_stride);
    if (n->vin.kind == R_CONST && lf_tensor_alias(&n->vin_const, x, x->ndim, x->shape, x->stride, x->offset) != LF_OK)
        g->err = lf_fail(LF_ENOMEM, "compile: out of memory");
    n->v_ndim = out->ndim;
    memcpy(n->v_shape, out->shape, sizeof n->v_shape);
    n->v_d0 = n_args > 1 ? (int)args[1].scalar : 0;
    n->v_d1 = n_args > 2 ? (int)args[2].scalar : 0;
}

static void cap_gemm(void *user, lf_device dev, const lf_gemm *gm)
{
    graph *g = user;
    node *n = hook_node(g, N_GEMM, dev);
    if (!n)
        return;
    n->g = *gm;
    n->ga = resolve_matrix(g, &gm->a);
    n->gb = resolve_matrix(g, &gm->b);
    if (gm->c.data)
        n->gc = resolve_matrix(g, &gm->c);
    if (gm->ep.bias) {
        int64_t nb = gm->ep.gate == LF_GATE_NONE ? gm->d.cols : 2 * gm->d.cols;
        uintptr_t lo = (uintptr_t)gm->ep.bias, hi = lo + (uintptr_t)(nb * (int64_t)lf_dtype_size(gm->ep.bias_dtype));
        n->gbias = resolve(g, lo, hi);
    }
    if (gm->ep.a_scale) { /* FP8: the scales are operands too (row-wise, or blocks) */
        const int64_t M = gm->a.rows, K = gm->a.cols, N = gm->b.cols;
        n->gsa =
            resolve_floats(g, gm->ep.a_scale, lf_scale_count(gm->ep.blockwise ? LF_SCALE_1X128 : LF_SCALE_ROWS, M, K));
        n->gsb = resolve_floats(g, gm->ep.b_scale,
                                lf_scale_count(gm->ep.blockwise ? LF_SCALE_128X128 : LF_SCALE_ROWS, N, K));
    }
    uintptr_t lo, hi;
    span_matrix(&gm->d, &lo, &hi);
    n->gd = (ref){R_VALUE, new_value(g, lo, hi, dev, gm->d.dtype), 0, NULL};
    if (gm->ep.d_scale) { /* an f8e4m3 d's block scales: a second value the GEMM writes */
        lo = (uintptr_t)gm->ep.d_scale;
        hi = lo + (uintptr_t)(lf_scale_count(LF_SCALE_1X128, gm->d.rows, gm->d.cols) * (int64_t)sizeof(float));
        n->gds = (ref){R_VALUE, new_value(g, lo, hi, dev, LF_DTYPE_F32), 0, NULL};
    }
}

/* An FP8 quantization: reads its input, writes its codes and its scales (two values). */
static void cap_quant(void *user, lf_device dev, const lf_quant *q)
{
    graph *g = user;
    node *n = hook_node(g, N_QUANT, dev);
    if (!n)
        return;
    n->q = *q;
    uintptr_t lo, hi;
    span_strided(&q->in, 2, (int64_t[]){q->rows, q->cols}, &lo, &hi);
    n->qin = resolve(g, lo, hi);
    lo = (uintptr_t)q->q, hi = lo + (uintptr_t)(lf_quant_rows(q) * q->cols);
    n->qq = (ref){R_VALUE, new_value(g, lo, hi, dev, LF_DTYPE_F8E4M3), 0, NULL};
    lo = (uintptr_t)q->scale, hi = lo + (uintptr_t)(lf_quant_scales(q) * (int64_t)sizeof(float));
    n->qs = (ref){R_VALUE, new_value(g, lo, hi, dev, LF_DTYPE_F32), 0, NULL};
}

static void cap_pointwise(void *user, lf_device dev, const lf_pointwise *p)
{
    graph *g = user;
    node *n = hook_node(g, N_PW, dev);
    if (!n)
        return;
    n->p = *p;
    /* the same work as a one-step program; ACT_MUL as act then mul */
    lf_fused *f = &n->f;
    f->ndim = p->ndim;
    memcpy(f->shape, p->shape, sizeof f->shape);
    f->n_in = lf_pw_arity(p->op);
    for (int q = 0; q < f->n_in; q++) {
        f->in[q] = p->in[q];
        uintptr_t lo, hi;
        span_strided(&p->in[q], p->ndim, p->shape, &lo, &hi);
        n->fin[q] = resolve(g, lo, hi);
    }
    if (p->op == LF_PW_ACT_MUL) {
        f->n_ops = 2;
        f->ops[0] = (lf_fused_op){LF_PW_ACT, p->act, {0, 0}};
        f->ops[1] = (lf_fused_op){LF_PW_MUL, LF_ACT_NONE, {2, 1}};
    } else {
        f->n_ops = 1;
        f->ops[0] = (lf_fused_op){p->op, p->act, {0, 1}};
    }
    f->out = p->out;
    uintptr_t lo, hi;
    span_strided(&p->out, p->ndim, p->shape, &lo, &hi);
    n->fout = (ref){R_VALUE, new_value(g, lo, hi, dev, p->out.dtype), 0, NULL};
}

/* A collective sums a value in place: it reads the value and writes a new one over the same
 * bytes (the plan gives both one buffer). */
static void cap_collective(void *user, lf_device dev, const lf_collective *c)
{
    graph *g = user;
    node *n = hook_node(g, N_COLL, dev);
    if (!n)
        return;
    n->coll = *c;
    uintptr_t lo = (uintptr_t)c->data, hi = lo + (uintptr_t)(c->count * (int64_t)lf_dtype_size(c->dtype));
    n->cin = resolve(g, lo, hi);
    if (n->cin.kind != R_VALUE) {
        g->err =
            lf_fail(LF_EUNSUPPORTED, "compile: a collective on %s is not captured (only on what the forward computed)",
                    n->cin.kind == R_INPUT ? "an input" : "a parameter");
        return;
    }
    n->cout = (ref){R_VALUE, new_value(g, lo, hi, dev, c->dtype), 0, NULL};
}

static void cap_comm_wait(void *user, lf_device dev, void *comm)
{
    graph *g = user;
    if (g->err != LF_OK)
        return;
    node *n = new_node(g, N_WAIT, dev);
    if (n)
        n->coll.comm = comm;
}

void cg_free(graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        lf_tensor_free(g->nodes[i].vin_const);
        lf_cpu_packed_b_free(g->nodes[i].packed);
    }
    for (int v = 0; v < g->n_values; v++)
        lf_tensor_free(g->values[v].buf);
    for (int i = 0; i < g->n_owned; i++)
        lf_tensor_free(g->owned[i]);
    free(g->nodes);
    free(g->values);
    memset(g, 0, sizeof *g);
}

lf_status cg_capture(graph *g, lf_forward_fn fn, void *ctx, int n_in, lf_tensor *const *in)
{
    g->n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        lf_strided s = {lf_tensor_data(in[i]), in[i]->dtype, {0}};
        memcpy(s.stride, in[i]->stride, sizeof s.stride);
        span_strided(&s, in[i]->ndim, in[i]->shape, &g->in_lo[i], &g->in_hi[i]);
    }
    lf_capture_hooks hooks = {.op_begin = cap_op_begin,
                              .op_end = cap_op_end,
                              .gemm = cap_gemm,
                              .pointwise = cap_pointwise,
                              .collective = cap_collective,
                              .comm_wait = cap_comm_wait,
                              .quant = cap_quant,
                              .user = g};
    lf_tensor *y = NULL;
    lf_capture_tls = &hooks;
    lf_status s = fn(ctx, n_in, in, &y);
    lf_capture_tls = NULL;
    if (s == LF_OK && g->err != LF_OK)
        s = g->err;
    if (s == LF_OK && !y)
        s = lf_fail(LF_EINVAL, "compile: the forward returned LF_OK but no output tensor");
    if (s == LF_OK) {
        lf_strided ys = {lf_tensor_data(y), y->dtype, {0}};
        memcpy(ys.stride, y->stride, sizeof ys.stride);
        uintptr_t lo, hi;
        span_strided(&ys, y->ndim, y->shape, &lo, &hi);
        g->out = resolve(g, lo, hi);
        g->out_ndim = y->ndim;
        g->out_dtype = y->dtype;
        memcpy(g->out_shape, y->shape, sizeof g->out_shape);
        memcpy(g->out_stride, y->stride, sizeof g->out_stride);
        if (g->out.kind != R_VALUE)
            s = lf_fail(LF_EUNSUPPORTED,
                        "compile: the forward's output is %s, not something it computed: nothing to compile",
                        g->out.kind == R_INPUT ? "one of its inputs" : "a tensor it did not write");
        else if (g->n_nodes == 0)
            s = lf_fail(LF_EUNSUPPORTED, "compile: the forward launched no kernels");
    }
    lf_tensor_free(y);
    return s;
}
