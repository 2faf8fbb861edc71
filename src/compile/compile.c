/* Compile mode (include/linfuse/compile.h).
 *
 * Capture: the forward runs once with capture hooks set on this thread; every kernel launch
 * becomes a node whose operands are references to values. A launch's output is a new value (the
 * memory it wrote, at that moment); an operand is the newest value whose memory holds it, else an
 * input's memory, else a constant (a parameter, read in place). So a buffer the allocator reuses
 * within the forward is two values, and the plan gives each its own buffer. View ops launch
 * nothing and leave no node, since the kernels already carry the views' strides: that is pass 1,
 * and with it off they are kept as view steps that a run dispatches again.
 * Passes rewrite the node list (bias, gated GEMM, pointwise fusion, activation epilogue).
 * Plan: a buffer per remaining value, every step with its pointers resolved except the inputs',
 * which a run patches in; on CUDA the steps are recorded once as a graph.
 * Layer: compile/. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

typedef enum { N_GEMM, N_PW, N_FUSED, N_VIEW } node_kind;

typedef struct node {
    node_kind kind;
    lf_op_id op; /* the op whose call launched it (or the view op) */
    int dead;
    lf_device dev;
    lf_gemm g;
    ref ga, gb, gc, gd, gbias;
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
    int depth, kernels_at[64], kernels;
    lf_status err;
    /* the output */
    ref out;
    int out_ndim;
    lf_dtype out_dtype;
    int64_t out_shape[LF_MAX_DIMS], out_stride[LF_MAX_DIMS];
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
    void *graph_exec; /* CUDA graph, recorded for graph_ptrs */
    void *graph_ptrs[MAX_INPUTS];
    char passes_log[1024];
} plan;

struct lf_compiled {
    lf_forward_fn fn;
    void *ctx;
    lf_compile_opts o;
    char name[64], region[96];
    plan *plans[MAX_PLANS];
    int n_plans, current;
    double compile_ms;
};

lf_compile_opts lf_compile_opts_default(void)
{
    return (lf_compile_opts){.name = "forward", .passes = LF_PASSES_DEFAULT};
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* --- capture --- */

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
    return n;
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
        g->kernels_at[g->depth] = g->kernels;
    }
    g->depth++;
}

static int is_view_op(lf_op_id op)
{
    return op == LF_OP_T || op == LF_OP_TRANSPOSE || op == LF_OP_VIEW || op == LF_OP_RESHAPE ||
           op == LF_OP_CONTIGUOUS;
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
    if (n->vin.kind == R_CONST &&
        lf_tensor_alias(&n->vin_const, x, x->ndim, x->shape, x->stride, x->offset) != LF_OK)
        g->err = lf_fail(LF_ENOMEM, "compile: out of memory");
    n->v_ndim = out->ndim;
    memcpy(n->v_shape, out->shape, sizeof n->v_shape);
    n->v_d0 = n_args > 1 ? (int)args[1].scalar : 0;
    n->v_d1 = n_args > 2 ? (int)args[2].scalar : 0;
}

static void cap_gemm(void *user, lf_device dev, const lf_gemm *gm)
{
    graph *g = user;
    g->kernels++;
    if (g->err != LF_OK)
        return;
    node *n = new_node(g, N_GEMM, dev);
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
    uintptr_t lo, hi;
    span_matrix(&gm->d, &lo, &hi);
    n->gd = (ref){R_VALUE, new_value(g, lo, hi, dev, gm->d.dtype), 0, NULL};
}

static void cap_pointwise(void *user, lf_device dev, const lf_pointwise *p)
{
    graph *g = user;
    g->kernels++;
    if (g->err != LF_OK)
        return;
    node *n = new_node(g, N_PW, dev);
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

/* --- the graph's facts the passes need --- */

/* The first n entries of two shape or stride arrays agree (entries past ndim mean nothing). */
static int same_dims(int n, const int64_t *a, const int64_t *b)
{
    return !memcmp(a, b, (size_t)n * sizeof *a);
}

/* Two operands' strides over one shape agree where they matter (dims longer than 1). */
static int same_strides(int n, const int64_t *shape, const int64_t *a, const int64_t *b)
{
    for (int d = 0; d < n; d++)
        if (shape[d] > 1 && a[d] != b[d])
            return 0;
    return 1;
}

static int ref_eq(ref a, ref b)
{
    return a.kind == b.kind && (a.kind == R_CONST ? a.ptr == b.ptr : a.idx == b.idx && a.off == b.off);
}

static int is_value(ref r, int v)
{
    return r.kind == R_VALUE && r.idx == v && r.off == 0;
}

static int n_reads(const node *n, ref *out)
{
    int k = 0;
    switch (n->kind) {
    case N_GEMM:
        out[k++] = n->ga, out[k++] = n->gb;
        if (n->g.c.data)
            out[k++] = n->gc;
        if (n->g.ep.bias)
            out[k++] = n->gbias;
        break;
    case N_PW:
    case N_FUSED:
        for (int q = 0; q < n->f.n_in; q++)
            out[k++] = n->fin[q];
        break;
    default: out[k++] = n->vin; break;
    }
    return k;
}

static void count_users(graph *g)
{
    for (int v = 0; v < g->n_values; v++)
        g->values[v].users = 0, g->values[v].is_output = 0;
    ref r[LF_FUSED_MAX_IN + 4];
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead)
            for (int k = n_reads(&g->nodes[i], r), j = 0; j < k; j++)
                if (r[j].kind == R_VALUE)
                    g->values[r[j].idx].users++;
    if (g->out.kind == R_VALUE)
        g->values[g->out.idx].users++, g->values[g->out.idx].is_output = 1;
}

/* The one live node that reads value v, or -1. */
static int reader_of(const graph *g, int v)
{
    ref r[LF_FUSED_MAX_IN + 4];
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead)
            for (int k = n_reads(&g->nodes[i], r), j = 0; j < k; j++)
                if (r[j].kind == R_VALUE && r[j].idx == v)
                    return i;
    return -1;
}

/* Operand s of a pointwise walk over (ndim, shape) as a 2-D (R, C) view: leading dims folded into
 * rows where its strides allow. 0 when they do not. */
static int as_2d(int ndim, const int64_t *shape, const lf_strided *s, int64_t *R, int64_t *C, int64_t *rs,
                 int64_t *cs)
{
    *C = shape[ndim - 1];
    *cs = s->stride[ndim - 1];
    *R = 1;
    *rs = *C * (*cs ? *cs : 1);
    int64_t inner = 0; /* stride of the innermost leading dim longer than 1 */
    for (int d = ndim - 2; d >= 0; d--) {
        if (shape[d] == 1)
            continue;
        int64_t expect = inner ? 0 : s->stride[d];
        if (inner) {
            int64_t rows_inside = 1;
            for (int e = d + 1; e < ndim - 1; e++)
                rows_inside *= shape[e];
            expect = inner * rows_inside;
        } else {
            inner = s->stride[d];
            *rs = inner;
        }
        if (s->stride[d] != expect)
            return 0;
        *R *= shape[d];
    }
    return 1;
}

/* Whether operand s of pointwise node n reads exactly the (M, N) matrix m (same strides). */
static int reads_matrix(const node *n, const lf_strided *s, const lf_matrix *m)
{
    int64_t R, C, rs, cs;
    if (!as_2d(n->f.ndim, n->f.shape, s, &R, &C, &rs, &cs) || R != m->rows || C != m->cols)
        return 0;
    return (R == 1 || rs == m->rs) && (C == 1 || cs == m->cs);
}

/* Pointwise node n's output as an (M, N) matrix. */
static int out_matrix(const node *n, lf_matrix *m)
{
    int64_t R, C, rs, cs;
    if (!as_2d(n->f.ndim, n->f.shape, &n->f.out, &R, &C, &rs, &cs))
        return 0;
    *m = (lf_matrix){n->f.out.data, n->f.out.dtype, R, C, rs, cs};
    return 1;
}

static int plain_gemm(const node *a)
{
    return a->kind == N_GEMM && !a->dead && !a->g.c.data && !a->g.ep.bias && a->g.ep.act == LF_ACT_NONE &&
           a->g.ep.gate == LF_GATE_NONE;
}

static int single(const node *n, lf_pw_op op)
{
    return n->kind == N_PW && !n->dead && n->f.n_ops == 1 && n->f.ops[0].op == op;
}

static void logf_(char *log, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(log);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(log + len, cap - len, fmt, ap);
    va_end(ap);
}

/* --- pass 2: mm + add(bias) -> one GEMM --- */

static int pass_bias(graph *g, char *log, size_t cap)
{
    int done = 0;
    count_users(g);
    for (int ia = 0; ia < g->n_nodes; ia++) {
        node *A = &g->nodes[ia];
        if (!plain_gemm(A))
            continue;
        int v = A->gd.idx;
        if (g->values[v].users != 1 || g->values[v].is_output)
            continue;
        int ib = reader_of(g, v);
        node *B = ib >= 0 ? &g->nodes[ib] : NULL;
        if (!B || !single(B, LF_PW_ADD))
            continue;
        int k = is_value(B->fin[0], v) ? 0 : is_value(B->fin[1], v) ? 1 : -1;
        lf_matrix out;
        int64_t R, C, rs, cs;
        if (k < 0 || !reads_matrix(B, &B->f.in[k], &A->g.d) || !out_matrix(B, &out) ||
            !as_2d(B->f.ndim, B->f.shape, &B->f.in[1 - k], &R, &C, &rs, &cs))
            continue;
        ref x = B->fin[1 - k];
        if ((x.kind == R_VALUE && g->values[x.idx].writer >= ia) || B->f.in[1 - k].dtype != A->g.d.dtype)
            continue;
        lf_gemm t = A->g;
        t.d = out;
        int row_bias = (R == 1 || rs == 0) && cs == 1 && A->g.ep.alpha == 1.0f;
        if (row_bias) {
            t.ep.bias = B->f.in[1 - k].data;
            t.ep.bias_dtype = B->f.in[1 - k].dtype;
        } else {
            t.c = (lf_matrix){B->f.in[1 - k].data, B->f.in[1 - k].dtype, R, C, rs, cs};
            t.ep.beta = 1.0f;
        }
        if (lf_backend_gemm_supported(A->dev, &t) != LF_OK)
            continue;
        A->g = t;
        if (row_bias)
            A->gbias = x;
        else
            A->gc = x;
        A->gd = B->fout;
        g->values[B->fout.idx].writer = ia;
        B->dead = 1;
        snprintf(A->note, sizeof A->note, "%s: the add's %s", row_bias ? "bias epilogue" : "C input",
                 row_bias ? "bias row" : "2-D operand, read in place");
        logf_(log, cap, "  bias: node %d (%s) takes node %d's add as its %s\n", ia, lf_op_name(A->op), ib,
              row_bias ? "bias epilogue" : "C input (no copy of the bias)");
        done++;
        count_users(g);
    }
    return done;
}

/* --- pass 5 (runs before fusion): two GEMMs of one input meeting in act(a) * b --- */

static int pass_gated(graph *g, char *log, size_t cap)
{
    int done = 0;
    count_users(g);
    for (int i2 = 0; i2 < g->n_nodes; i2++) {
        node *P2 = &g->nodes[i2];
        if (!single(P2, LF_PW_MUL) || P2->fin[0].kind != R_VALUE || P2->fin[1].kind != R_VALUE)
            continue;
        for (int k = 0; k < 2; k++) {
            int va = P2->fin[k].idx, vu = P2->fin[1 - k].idx;
            int i1 = g->values[va].writer, iu = g->values[vu].writer;
            node *P1 = &g->nodes[i1];
            if (!single(P1, LF_PW_ACT) || P1->f.ops[0].act == LF_ACT_NONE || P1->fin[0].kind != R_VALUE ||
                g->values[va].users != 1 || P2->fin[k].off || P2->fin[1 - k].off)
                continue;
            int vg = P1->fin[0].idx, ig = g->values[vg].writer;
            node *A1 = &g->nodes[ig], *A2 = &g->nodes[iu];
            if (ig == iu || !plain_gemm(A1) || !plain_gemm(A2) || g->values[vg].users != 1 ||
                g->values[vu].users != 1 || A1->g.ep.alpha != 1.0f || A2->g.ep.alpha != 1.0f)
                continue;
            const lf_matrix *a1 = &A1->g.a, *a2 = &A2->g.a, *b1 = &A1->g.b, *b2 = &A2->g.b;
            if (!ref_eq(A1->ga, A2->ga) || a1->rows != a2->rows || a1->cols != a2->cols || a1->rs != a2->rs ||
                a1->cs != a2->cs || b1->dtype != b2->dtype || b1->rows != b2->rows || b1->cols != b2->cols ||
                b1->rs != b2->rs || b1->cs != b2->cs)
                continue;
            /* the up weight right after the gate weight: one (K, 2H) view, partners H columns on */
            const int64_t H = b1->cols, step = H * b1->cs * (int64_t)lf_dtype_size(b1->dtype);
            int adjacent = A1->gb.kind == A2->gb.kind &&
                           (A1->gb.kind == R_CONST ? (char *)A2->gb.ptr == (char *)A1->gb.ptr + step
                                                   : A1->gb.idx == A2->gb.idx && A2->gb.off == A1->gb.off + step);
            lf_matrix out;
            if (!adjacent || !reads_matrix(P1, &P1->f.in[0], &A1->g.d) || !reads_matrix(P2, &P2->f.in[1 - k], &A2->g.d) ||
                !out_matrix(P2, &out) || P1->f.ndim != P2->f.ndim ||
                !same_dims(P1->f.ndim, P1->f.shape, P2->f.shape) ||
                !same_strides(P1->f.ndim, P1->f.shape, P1->f.out.stride, P2->f.in[k].stride))
                continue;
            lf_gemm t = A1->g;
            t.b.cols = 2 * H;
            t.d = out;
            t.ep.act = P1->f.ops[0].act;
            t.ep.gate = LF_GATE_PAIRED;
            t.ep.gate_group = H;
            if (lf_backend_gemm_supported(A1->dev, &t) != LF_OK) {
                logf_(log, cap, "  gated: nodes %d and %d qualify, but %s\n", ig, iu, lf_last_error());
                continue;
            }
            A1->g = t;
            A1->gd = P2->fout;
            g->values[P2->fout.idx].writer = ig;
            A2->dead = P1->dead = P2->dead = 1;
            snprintf(A1->note, sizeof A1->note, "gated: %s(g) * u in the epilogue, group %lld", lf_act_name(t.ep.act),
                     (long long)H);
            logf_(log, cap, "  gated: nodes %d, %d, %d, %d -> one gated GEMM (%s(g) * u; g and u never stored)\n", ig,
                  iu, i1, i2, lf_act_name(t.ep.act));
            done++;
            count_users(g);
            break;
        }
    }
    return done;
}

/* --- pass 4: a pointwise node whose only reader is pointwise goes into that reader --- */

static int find_input(const lf_fused *f, const ref *refs, int n, const lf_strided *s, ref r)
{
    for (int q = 0; q < n; q++)
        if (ref_eq(refs[q], r) && f->in[q].dtype == s->dtype && same_strides(f->ndim, f->shape, f->in[q].stride, s->stride))
            return q;
    return -1;
}

static int merge(node *P, node *Q, int k)
{
    lf_fused m = Q->f;
    ref refs[LF_FUSED_MAX_IN];
    int n_in = 0, map_p[LF_FUSED_MAX_IN], map_q[LF_FUSED_MAX_IN];
    for (int q = 0; q < P->f.n_in; q++) {
        int at = find_input(&m, refs, n_in, &P->f.in[q], P->fin[q]);
        if (at < 0) {
            if (n_in == LF_FUSED_MAX_IN)
                return 0;
            at = n_in++;
            m.in[at] = P->f.in[q], refs[at] = P->fin[q];
        }
        map_p[q] = at;
    }
    for (int q = 0; q < Q->f.n_in; q++) {
        if (q == k)
            continue;
        int at = find_input(&m, refs, n_in, &Q->f.in[q], Q->fin[q]);
        if (at < 0) {
            if (n_in == LF_FUSED_MAX_IN)
                return 0;
            at = n_in++;
            m.in[at] = Q->f.in[q], refs[at] = Q->fin[q];
        }
        map_q[q] = at;
    }
    if (P->f.n_ops + Q->f.n_ops > LF_FUSED_MAX_OPS)
        return 0;
    m.n_in = n_in;
    m.n_ops = 0;
    for (int i = 0; i < P->f.n_ops; i++) {
        lf_fused_op o = P->f.ops[i];
        for (int s = 0; s < 2; s++)
            o.src[s] = o.src[s] < P->f.n_in ? map_p[o.src[s]] : n_in + (o.src[s] - P->f.n_in);
        m.ops[m.n_ops++] = o;
    }
    const int p_last = n_in + P->f.n_ops - 1;
    for (int i = 0; i < Q->f.n_ops; i++) {
        lf_fused_op o = Q->f.ops[i];
        for (int s = 0; s < 2; s++)
            o.src[s] = o.src[s] == k                ? p_last
                       : o.src[s] < Q->f.n_in ? map_q[o.src[s]]
                                              : n_in + P->f.n_ops + (o.src[s] - Q->f.n_in);
        m.ops[m.n_ops++] = o;
    }
    Q->f = m;
    memcpy(Q->fin, refs, sizeof refs);
    Q->kind = N_FUSED;
    return 1;
}

static int pass_pointwise(graph *g, char *log, size_t cap)
{
    int done = 0, again = 1;
    while (again) {
        again = 0;
        count_users(g);
        for (int ip = 0; ip < g->n_nodes && !again; ip++) {
            node *P = &g->nodes[ip];
            if (P->dead || (P->kind != N_PW && P->kind != N_FUSED))
                continue;
            int v = P->fout.idx;
            if (g->values[v].users != 1 || g->values[v].is_output)
                continue;
            int iq = reader_of(g, v);
            node *Q = iq >= 0 ? &g->nodes[iq] : NULL;
            if (!Q || (Q->kind != N_PW && Q->kind != N_FUSED) || Q->f.ndim != P->f.ndim ||
                !same_dims(P->f.ndim, Q->f.shape, P->f.shape))
                continue;
            int k = -1;
            for (int q = 0; q < Q->f.n_in; q++)
                if (is_value(Q->fin[q], v) && same_strides(P->f.ndim, P->f.shape, Q->f.in[q].stride, P->f.out.stride))
                    k = q;
            if (k < 0 || !merge(P, Q, k))
                continue;
            P->dead = 1;
            logf_(log, cap, "  pointwise: node %d goes into node %d (%d steps in one kernel)\n", ip, iq, Q->f.n_ops);
            done++, again = 1;
        }
    }
    return done;
}

/* --- pass 3: GEMM + activation -> epilogue --- */

static int pass_act(graph *g, char *log, size_t cap)
{
    int done = 0;
    count_users(g);
    for (int ia = 0; ia < g->n_nodes; ia++) {
        node *A = &g->nodes[ia];
        if (A->kind != N_GEMM || A->dead || A->g.ep.act != LF_ACT_NONE || A->g.ep.gate != LF_GATE_NONE)
            continue;
        int v = A->gd.idx;
        if (g->values[v].users != 1 || g->values[v].is_output)
            continue;
        int iq = reader_of(g, v);
        node *Q = iq >= 0 ? &g->nodes[iq] : NULL;
        lf_matrix out;
        if (!Q || !single(Q, LF_PW_ACT) || Q->f.ops[0].act == LF_ACT_NONE || !is_value(Q->fin[0], v) ||
            !reads_matrix(Q, &Q->f.in[0], &A->g.d) || !out_matrix(Q, &out))
            continue;
        lf_gemm t = A->g;
        t.d = out;
        t.ep.act = Q->f.ops[0].act;
        if (lf_backend_gemm_supported(A->dev, &t) != LF_OK)
            continue;
        A->g = t;
        A->gd = Q->fout;
        g->values[Q->fout.idx].writer = ia;
        Q->dead = 1;
        snprintf(A->note, sizeof A->note, "%s epilogue", lf_act_name(t.ep.act));
        logf_(log, cap, "  act: node %d's %s goes into node %d's epilogue\n", iq, lf_act_name(t.ep.act), ia);
        done++;
        count_users(g);
    }
    return done;
}

/* --- capture, passes, plan --- */

static void graph_free(graph *g)
{
    for (int i = 0; i < g->n_nodes; i++)
        lf_tensor_free(g->nodes[i].vin_const);
    for (int v = 0; v < g->n_values; v++)
        lf_tensor_free(g->values[v].buf);
    free(g->nodes);
    free(g->values);
    memset(g, 0, sizeof *g);
}

static void plan_free(plan *p)
{
    if (!p)
        return;
    if (p->graph_exec)
        lf_backend_graph_free(p->dev, p->graph_exec);
    for (int i = 0; i < p->g.n_nodes; i++)
        if (p->g.nodes[i].kind == N_FUSED)
            lf_backend_fused_release(p->dev, &p->g.nodes[i].f);
    free(p->patches);
    graph_free(&p->g);
    free(p);
}

static lf_status capture(graph *g, lf_forward_fn fn, void *ctx, int n_in, lf_tensor *const *in)
{
    g->n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        lf_strided s = {lf_tensor_data(in[i]), in[i]->dtype, {0}};
        memcpy(s.stride, in[i]->stride, sizeof s.stride);
        span_strided(&s, in[i]->ndim, in[i]->shape, &g->in_lo[i], &g->in_hi[i]);
    }
    lf_capture_hooks hooks = {cap_op_begin, cap_op_end, cap_gemm, cap_pointwise, g};
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

static const char *op_short(const lf_fused_op *o)
{
    if (o->op == LF_PW_ACT)
        return o->act == LF_ACT_RELU ? "relu" : o->act == LF_ACT_NONE ? "copy" : "gelu";
    return o->op == LF_PW_ADD ? "add" : o->op == LF_PW_MUL ? "mul" : "copy";
}

/* Where ref r points in the plan; an input's address is recorded as a patch instead. */
static lf_status bind(plan *p, ref r, void **field)
{
    if (r.kind == R_CONST) {
        *field = r.ptr;
        return LF_OK;
    }
    if (r.kind == R_VALUE) {
        *field = (char *)lf_tensor_data(p->g.values[r.idx].buf) + r.off;
        return LF_OK;
    }
    patch *np = realloc(p->patches, (size_t)(p->n_patches + 1) * sizeof *np);
    if (!np)
        return lf_fail(LF_ENOMEM, "compile: out of memory");
    p->patches = np;
    p->patches[p->n_patches++] = (patch){field, r.idx, r.off};
    *field = NULL;
    return LF_OK;
}

static lf_status build_plan(plan *p, const lf_compile_opts *o)
{
    graph *g = &p->g;
    unsigned passes = o->passes;
    p->passes_log[0] = '\0';
    const size_t cap = sizeof p->passes_log;
    if (!(passes & LF_PASS_FOLD_VIEWS))
        logf_(p->passes_log, cap, "  views: kept (pass off): each run dispatches them again\n");
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].kind == N_VIEW && (passes & LF_PASS_FOLD_VIEWS))
            g->nodes[i].dead = 1;
    if (passes & LF_PASS_BIAS_EPILOGUE)
        pass_bias(g, p->passes_log, cap);
    if (passes & LF_PASS_GATED_GEMM)
        pass_gated(g, p->passes_log, cap);
    if (passes & LF_PASS_POINTWISE_FUSION)
        pass_pointwise(g, p->passes_log, cap);
    if (passes & LF_PASS_ACT_EPILOGUE)
        pass_act(g, p->passes_log, cap);
    count_users(g);

    /* buffers: one per value a live node writes */
    p->dev = LF_DEVICE_CPU;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].kind != N_VIEW)
            p->dev = g->nodes[i].dev;
    for (int v = 0; v < g->n_values; v++) {
        value *val = &g->values[v];
        if (g->nodes[val->writer].dead && !val->users)
            continue;
        int64_t es = (int64_t)lf_dtype_size(val->dtype), numel = ((int64_t)(val->hi - val->lo) + es - 1) / es;
        LF_TRY(lf_tensor_empty(&val->buf, val->dtype, 1, &numel, val->dev));
    }
    /* resolve every step; name the fused kernels after what they fused */
    int fused_no = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        node *n = &g->nodes[i];
        if (n->dead)
            continue;
        if (n->kind == N_GEMM) {
            LF_TRY(bind(p, n->ga, &n->g.a.data));
            LF_TRY(bind(p, n->gb, &n->g.b.data));
            if (n->g.c.data)
                LF_TRY(bind(p, n->gc, &n->g.c.data));
            if (n->g.ep.bias)
                LF_TRY(bind(p, n->gbias, (void **)&n->g.ep.bias));
            LF_TRY(bind(p, n->gd, &n->g.d.data));
            p->kernels++;
        } else if (n->kind == N_PW) {
            for (int q = 0; q < lf_pw_arity(n->p.op); q++)
                LF_TRY(bind(p, n->fin[q], &n->p.in[q].data));
            LF_TRY(bind(p, n->fout, &n->p.out.data));
            p->kernels++;
        } else if (n->kind == N_FUSED) {
            int len = snprintf(n->f.name, sizeof n->f.name, "lf_poi_fused");
            for (int k = 0; k < n->f.n_ops && len < (int)sizeof n->f.name - 16; k++)
                len += snprintf(n->f.name + len, sizeof n->f.name - (size_t)len, "_%s", op_short(&n->f.ops[k]));
            snprintf(n->f.name + len, sizeof n->f.name - (size_t)len, "_%d", fused_no++);
            for (int q = 0; q < n->f.n_in; q++)
                LF_TRY(bind(p, n->fin[q], &n->f.in[q].data));
            LF_TRY(bind(p, n->fout, &n->f.out.data));
            /* inputs' addresses are not known yet: prepare with the example's, patched later */
            LF_TRY(lf_backend_fused_prepare(n->dev, &n->f, o->cache_dir, o->verbose));
            p->kernels++;
        } else {
            p->views++;
        }
    }
    p->out_buf = g->values[g->out.idx].buf;
    p->out_offset = g->out.off / (int64_t)lf_dtype_size(g->out_dtype);
    return LF_OK;
}

/* --- running a plan --- */

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
    case LF_OP_T: s = lf_t(&y, x); break;
    case LF_OP_TRANSPOSE: s = lf_transpose(&y, x, n->v_d0, n->v_d1); break;
    case LF_OP_VIEW: s = lf_view(&y, x, n->v_ndim, n->v_shape); break;
    case LF_OP_RESHAPE: s = lf_reshape(&y, x, n->v_ndim, n->v_shape); break;
    default: s = lf_contiguous(&y, x); break;
    }
    lf_tensor_free(y);
    if (x != n->vin_const)
        lf_tensor_free(x);
    return s;
}

/* Every step once. direct: straight to the backend (recording a graph), else through the
 * launch hooks the profiler watches. */
static lf_status run_steps(plan *p, lf_tensor *const *in, int direct)
{
    for (int i = 0; i < p->g.n_nodes; i++) {
        const node *n = &p->g.nodes[i];
        if (n->dead)
            continue;
        lf_status s;
        switch (n->kind) {
        case N_GEMM: s = direct ? lf_backend_gemm(n->dev, &n->g, NULL) : lf_launch_gemm(n->dev, &n->g); break;
        case N_PW: s = direct ? lf_backend_pointwise(n->dev, &n->p, NULL) : lf_launch_pointwise(n->dev, &n->p); break;
        case N_FUSED: s = direct ? lf_backend_fused(n->dev, &n->f, NULL) : lf_launch_fused(n->dev, &n->f); break;
        default: s = run_view(p, n, in); break;
        }
        if (s != LF_OK)
            return s;
    }
    return LF_OK;
}

static void apply_patches(plan *p, lf_tensor *const *in)
{
    for (int i = 0; i < p->n_patches; i++)
        *p->patches[i].field = (char *)lf_tensor_data(in[p->patches[i].input]) + p->patches[i].off;
}

static lf_status run_plan(lf_compiled *c, plan *p, lf_tensor *const *in)
{
    apply_patches(p, in);
    const int graphs = p->dev == LF_DEVICE_CUDA && !c->o.no_cuda_graph && p->views == 0;
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
    return lf_backend_graph_launch(p->dev, p->graph_exec);
}

/* --- guards --- */

static void fmt_dims(char *buf, size_t cap, int n, const int64_t *d)
{
    int len = snprintf(buf, cap, "(");
    for (int i = 0; i < n && len < (int)cap; i++)
        len += snprintf(buf + len, cap - (size_t)len, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (len < (int)cap)
        snprintf(buf + len, cap - (size_t)len, ")");
}

/* 1 when in passes p's guards; else 0 with why filled (names the input, expected and actual). */
static int guards_pass(const plan *p, int n_in, lf_tensor *const *in, char *why, size_t cap)
{
    if (n_in != p->g.n_in) {
        snprintf(why, cap, "%d inputs, compiled for %d", n_in, p->g.n_in);
        return 0;
    }
    for (int i = 0; i < n_in; i++) {
        const lf_tensor *t = in[i];
        char a[96], b[96];
        if (!t || !t->storage) {
            snprintf(why, cap, "input %d is NULL", i);
            return 0;
        }
        if (t->dtype != p->in_dtype[i]) {
            snprintf(why, cap, "input %d: dtype %s, compiled for %s", i, lf_dtype_name(t->dtype),
                     lf_dtype_name(p->in_dtype[i]));
            return 0;
        }
        if (lf_tensor_device(t) != p->in_dev[i]) {
            snprintf(why, cap, "input %d: device %s, compiled for %s", i, lf_device_name(lf_tensor_device(t)),
                     lf_device_name(p->in_dev[i]));
            return 0;
        }
        if (t->ndim != p->in_ndim[i] || memcmp(t->shape, p->in_shape[i], (size_t)t->ndim * sizeof t->shape[0])) {
            fmt_dims(a, sizeof a, t->ndim, t->shape), fmt_dims(b, sizeof b, p->in_ndim[i], p->in_shape[i]);
            snprintf(why, cap, "input %d: shape %s, compiled for %s", i, a, b);
            return 0;
        }
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] > 1 && t->stride[d] != p->in_stride[i][d]) {
                fmt_dims(a, sizeof a, t->ndim, t->stride), fmt_dims(b, sizeof b, p->in_ndim[i], p->in_stride[i]);
                snprintf(why, cap, "input %d: strides %s, compiled for %s", i, a, b);
                return 0;
            }
    }
    return 1;
}

/* --- the API --- */

static lf_status compile_plan(lf_compiled *c, int n_in, lf_tensor *const *in, plan **out)
{
    double t0 = now_ms();
    plan *p = calloc(1, sizeof *p);
    if (!p)
        return lf_fail(LF_ENOMEM, "compile: out of memory");
    for (int i = 0; i < n_in; i++) {
        p->in_dtype[i] = in[i]->dtype;
        p->in_dev[i] = lf_tensor_device(in[i]);
        p->in_ndim[i] = in[i]->ndim;
        memcpy(p->in_shape[i], in[i]->shape, sizeof p->in_shape[i]);
        memcpy(p->in_stride[i], in[i]->stride, sizeof p->in_stride[i]);
    }
    char note[160];
    snprintf(note, sizeof note, "lf::compile %s", c->name);
    lf_ops_note_begin(note);
    lf_status s = capture(&p->g, c->fn, c->ctx, n_in, in);
    int captured = p->g.n_nodes;
    if (s == LF_OK)
        s = build_plan(p, &c->o);
    /* one run before any graph is recorded: libraries load their kernels and plans now */
    if (s == LF_OK) {
        apply_patches(p, in);
        s = run_steps(p, in, 0);
    }
    if (s == LF_OK)
        s = lf_device_synchronize(p->dev);
    lf_ops_note_end();
    if (s != LF_OK) {
        plan_free(p);
        return s;
    }
    c->compile_ms += now_ms() - t0;
    if (c->o.verbose) {
        char *text = NULL;
        fprintf(stderr, "linfuse compile %s: captured %d steps (kernels and view ops)\n", c->name, captured);
        c->plans[c->n_plans] = p;
        c->current = c->n_plans;
        if (lf_compiled_describe(c, &text) == LF_OK)
            fputs(text, stderr);
        free(text);
    }
    *out = p;
    return LF_OK;
}

lf_status lf_compile(lf_compiled **out, lf_forward_fn fn, void *ctx, int n_in, lf_tensor *const *example,
                     const lf_compile_opts *o)
{
    LF_CHECK_PTR(out, "lf_compile", "out");
    *out = NULL;
    LF_CHECK_PTR(fn, "lf_compile", "fn");
    if (n_in < 0 || n_in > MAX_INPUTS || (n_in > 0 && !example))
        return lf_fail(LF_EINVAL, "lf_compile: %d inputs, expected 0 to %d with example tensors", n_in, MAX_INPUTS);
    for (int i = 0; i < n_in; i++)
        if (!example[i] || !example[i]->storage)
            return lf_fail(LF_EINVAL, "lf_compile: example input %d is NULL", i);
    if (o && (o->recompile_limit < 0 || o->recompile_limit > MAX_PLANS - 1))
        return lf_fail(LF_EINVAL, "lf_compile: recompile_limit %d, expected 0 to %d", o->recompile_limit, MAX_PLANS - 1);
    lf_compiled *c = calloc(1, sizeof *c);
    if (!c)
        return lf_fail(LF_ENOMEM, "lf_compile: out of memory");
    c->fn = fn, c->ctx = ctx;
    c->o = o ? *o : lf_compile_opts_default();
    snprintf(c->name, sizeof c->name, "%s", c->o.name && *c->o.name ? c->o.name : "forward");
    c->o.name = c->name;
    snprintf(c->region, sizeof c->region, "Compiled Region: %s", c->name);
    plan *p = NULL;
    lf_status s = compile_plan(c, n_in, example, &p);
    if (s != LF_OK) {
        free(c);
        return s;
    }
    c->plans[0] = p;
    c->n_plans = 1;
    c->current = 0;
    *out = c;
    return LF_OK;
}

lf_status lf_compiled_run(lf_compiled *c, int n_in, lf_tensor *const *in, lf_tensor **out)
{
    LF_CHECK_PTR(c, "lf_compiled_run", "c");
    LF_CHECK_PTR(out, "lf_compiled_run", "out");
    *out = NULL;
    if (n_in > 0 && !in)
        return lf_fail(LF_EINVAL, "lf_compiled_run(%s): %d inputs but no array", c->name, n_in);
    lf_ops_note_begin(c->region);
    lf_ops_note_begin("lf::guard_check");
    char why[256] = "", first[256] = "";
    plan *p = NULL;
    for (int i = 0; i < c->n_plans && !p; i++) {
        int k = (c->current + i) % c->n_plans; /* the last plan used first */
        if (guards_pass(c->plans[k], n_in, in, why, sizeof why))
            p = c->plans[k], c->current = k;
        else if (!first[0])
            memcpy(first, why, sizeof first);
    }
    lf_ops_note_end();
    lf_status s = LF_OK;
    if (!p && c->n_plans - 1 < c->o.recompile_limit && n_in == c->plans[0]->g.n_in) {
        int valid = 1;
        for (int i = 0; i < n_in; i++)
            valid &= in[i] && in[i]->storage;
        char note[400];
        snprintf(note, sizeof note, "Recompile: %s (%s)", c->name, first);
        lf_ops_note_begin(note);
        s = valid ? compile_plan(c, n_in, in, &p) : lf_fail(LF_EINVAL, "lf_compiled_run(%s): %s", c->name, first);
        lf_ops_note_end();
        if (s == LF_OK) {
            c->plans[c->n_plans] = p;
            c->current = c->n_plans++;
        }
    } else if (!p) {
        s = lf_fail(LF_EGUARD, "lf_compiled_run(%s): %s%s", c->name, first,
                    c->o.recompile_limit ? " (recompile limit reached)" : " (recompile_limit is 0)");
    }
    if (s == LF_OK)
        s = run_plan(c, p, in);
    if (s == LF_OK)
        s = lf_tensor_alias(out, p->out_buf, p->g.out_ndim, p->g.out_shape, p->g.out_stride,
                            p->out_buf->offset + p->out_offset);
    lf_ops_note_end();
    return s;
}

lf_compiled_stats lf_compiled_get_stats(const lf_compiled *c)
{
    lf_compiled_stats st = {0};
    if (!c || !c->n_plans)
        return st;
    const plan *p = c->plans[c->current];
    st.kernels = p->kernels;
    st.views = p->views;
    st.graph = p->dev == LF_DEVICE_CUDA && !c->o.no_cuda_graph && p->views == 0;
    st.plans = c->n_plans;
    st.compile_ms = c->compile_ms;
    return st;
}

static int fmt_ref(char *buf, size_t cap, ref r)
{
    switch (r.kind) {
    case R_INPUT: return snprintf(buf, cap, "input%d%s", r.idx, r.off ? "+" : "");
    case R_VALUE: return snprintf(buf, cap, "v%d%s", r.idx, r.off ? "+" : "");
    case R_CONST: return snprintf(buf, cap, "const");
    default: return snprintf(buf, cap, "-");
    }
}

lf_status lf_compiled_describe(const lf_compiled *c, char **text)
{
    LF_CHECK_PTR(c, "lf_compiled_describe", "c");
    LF_CHECK_PTR(text, "lf_compiled_describe", "text");
    const plan *p = c->plans[c->current];
    size_t cap = 512 + (size_t)p->g.n_nodes * 256 + sizeof p->passes_log;
    char *b = malloc(cap);
    if (!b)
        return lf_fail(LF_ENOMEM, "lf_compiled_describe: out of memory");
    size_t len = (size_t)snprintf(b, cap, "plan for %s on %s: %d kernel%s, %d view op%s per run%s\n", c->name,
                                  lf_device_name(p->dev), p->kernels, p->kernels == 1 ? "" : "s", p->views,
                                  p->views == 1 ? "" : "s",
                                  lf_compiled_get_stats(c).graph ? ", one CUDA graph" : "");
    int step = 0;
    for (int i = 0; i < p->g.n_nodes && len < cap; i++) {
        const node *n = &p->g.nodes[i];
        if (n->dead)
            continue;
        char r[4][24] = {"", "", "", ""}, lay[3];
        switch (n->kind) {
        case N_GEMM:
            fmt_ref(r[0], sizeof r[0], n->ga), fmt_ref(r[1], sizeof r[1], n->gb), fmt_ref(r[2], sizeof r[2], n->gd);
            lf_gemm_layout(&n->g, lay);
            len += (size_t)snprintf(b + len, cap - len, "  %d. gemm %lldx%lldx%lld %s (%s): %s . %s -> %s%s%s\n", step++,
                                    (long long)n->g.a.rows, (long long)n->g.b.cols, (long long)n->g.a.cols, lay,
                                    lf_op_name(n->op), r[0], r[1], r[2], n->note[0] ? "; " : "", n->note);
            break;
        case N_PW:
        case N_FUSED: {
            int l = 0;
            for (int q = 0; q < n->f.n_in; q++)
                l += snprintf(r[3] + l, sizeof r[3] - (size_t)l, "%s", q ? "," : ""),
                    l += fmt_ref(r[3] + l, sizeof r[3] - (size_t)l, n->fin[q]);
            fmt_ref(r[2], sizeof r[2], n->fout);
            len += (size_t)snprintf(b + len, cap - len, "  %d. %s (%s): %s -> %s\n", step++,
                                    n->kind == N_FUSED ? n->f.name : "pointwise", lf_op_name(n->op), r[3], r[2]);
            break;
        }
        default:
            fmt_ref(r[0], sizeof r[0], n->vin);
            len += (size_t)snprintf(b + len, cap - len, "  -  %s on %s (a view: no kernel)\n", lf_op_name(n->op), r[0]);
            break;
        }
    }
    if (len < cap)
        snprintf(b + len, cap - len, "passes:\n%s", p->passes_log[0] ? p->passes_log : "  (none applied)\n");
    *text = b;
    return LF_OK;
}

void lf_compiled_free(lf_compiled *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_plans; i++)
        plan_free(c->plans[i]);
    free(c);
}
