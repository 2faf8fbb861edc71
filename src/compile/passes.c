/* Compile mode's passes over the captured graph, in the order they run: fold views, bias into
 * the GEMM, two GEMMs into a gated GEMM (in FP8 when asked), pointwise chains into one program,
 * activations into epilogues. Each rewrite asks the backend whether it runs the result first. Layer: compile/. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/compile_impl.h"

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
        if (n->g.ep.a_scale)
            out[k++] = n->gsa, out[k++] = n->gsb;
        break;
    case N_QUANT:
        out[k++] = n->qin;
        break;
    case N_PW:
    case N_FUSED:
        for (int q = 0; q < n->f.n_in; q++)
            out[k++] = n->fin[q];
        break;
    case N_COLL:
        out[k++] = n->cin;
        break;
    case N_WAIT:
        break;
    default:
        out[k++] = n->vin;
        break;
    }
    return k;
}

void cg_count_users(graph *g)
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
static int as_2d(int ndim, const int64_t *shape, const lf_strided *s, int64_t *R, int64_t *C, int64_t *rs, int64_t *cs)
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

/* A GEMM with nothing in its epilogue (and not scaled: an FP8 GEMM is left as captured). */
static int plain_gemm(const node *a)
{
    return a->kind == N_GEMM && !a->dead && !a->g.c.data && !a->g.ep.bias && a->g.ep.act == LF_ACT_NONE &&
           a->g.ep.gate == LF_GATE_NONE && !a->g.ep.a_scale;
}

static int single(const node *n, lf_pw_op op)
{
    return n->kind == N_PW && !n->dead && n->f.n_ops == 1 && n->f.ops[0].op == op;
}

__attribute__((format(printf, 3, 4))) static void logf_(char *log, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(log);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(log + len, cap - len, fmt, ap);
    va_end(ap);
}

/* --- bias into the GEMM (LF_PASS_BIAS_EPILOGUE): mm + add(bias) -> one GEMM --- */

static int pass_bias(graph *g, char *log, size_t cap)
{
    int done = 0;
    cg_count_users(g);
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
        cg_count_users(g);
    }
    return done;
}

/* --- the gated GEMM (LF_PASS_GATED_GEMM; runs before pointwise fusion, which would otherwise take
 * the act and the mul): two GEMMs of one input meeting in act(a) * b --- */

/* A value the passes add (no capture address: only its size matters to the plan), or -1. */
static int add_value(graph *g, int64_t bytes, lf_device dev, lf_dtype dt, int writer)
{
    if (g->n_values == g->cap_values) {
        int cap = g->cap_values ? 2 * g->cap_values : 32;
        value *v = realloc(g->values, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        g->values = v, g->cap_values = cap;
    }
    value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->lo = 0, v->hi = (uintptr_t)bytes, v->dev = dev, v->dtype = dt, v->writer = writer;
    return g->n_values++;
}

/* LF_PASS_FP8: the gated GEMM at node ig (its up GEMM's node iu now dead) made FP8: [Wg; Wu] (a
 * parameter) quantized per output channel now, into tensors the graph owns; a quantization of x
 * per token at run time, in the earlier of the two GEMMs' places; the scaled gated GEMM in the
 * later (the gated output is written after both). Where the device has no FP8 gated GEMM, or the
 * weight is not a parameter, the log says why and the bf16 gated GEMM stays. dead: a dead node's
 * index, to which the two GEMMs' old outputs (now read by nobody) are handed. */
static void make_fp8(graph *g, int ig, int iu, int dead, char *log, size_t cap)
{
    node *A = &g->nodes[ig];
    const lf_device dev = A->dev;
    const lf_matrix *a = &A->g.a, *b = &A->g.b;
    const int64_t M = a->rows, K = a->cols, N2 = b->cols;
    if (lf_fp8_supported(dev) != LF_OK) {
        logf_(log, cap, "  fp8: not here (%s): the gated GEMM stays %s\n", lf_last_error(), lf_dtype_name(a->dtype));
        return;
    }
    if (A->gb.kind != R_CONST || g->n_owned + 2 > (int)(sizeof g->owned / sizeof g->owned[0])) {
        logf_(log, cap, "  fp8: the gated GEMM's weight is not a parameter: it stays %s\n", lf_dtype_name(a->dtype));
        return;
    }
    lf_tensor *wq = NULL, *ws = NULL;
    lf_status s = lf_tensor_empty(&wq, LF_DTYPE_F8E4M3, 2, (int64_t[]){N2, K}, dev);
    if (s == LF_OK)
        s = lf_tensor_empty(&ws, LF_DTYPE_F32, 2, (int64_t[]){N2, 1}, dev);
    lf_gemm t = A->g; /* the FP8 gated GEMM, with stand-in addresses until the plan binds it */
    t.a = (lf_matrix){lf_tensor_data(wq), LF_DTYPE_F8E4M3, M, K, K, 1};
    t.b = (lf_matrix){lf_tensor_data(wq), LF_DTYPE_F8E4M3, K, N2, 1, K};
    t.ep.a_scale = t.ep.b_scale = ws ? lf_tensor_data(ws) : NULL;
    if (s == LF_OK)
        s = lf_backend_gemm_supported(dev, &t);
    lf_quant qw = {.rows = N2, .cols = K, .in = {A->gb.ptr, b->dtype, {b->cs, b->rs}}, .mode = LF_SCALE_ROWS};
    qw.q = wq ? lf_tensor_data(wq) : NULL, qw.scale = ws ? lf_tensor_data(ws) : NULL;
    if (s == LF_OK)
        s = lf_backend_quantize_fp8(dev, &qw, NULL);
    const int vq = s == LF_OK ? add_value(g, M * K, dev, LF_DTYPE_F8E4M3, -1) : -1;
    const int vs = vq >= 0 ? add_value(g, M * (int64_t)sizeof(float), dev, LF_DTYPE_F32, -1) : -1;
    if (s != LF_OK || vs < 0) {
        logf_(log, cap, "  fp8: the gated GEMM stays %s (%s)\n", lf_dtype_name(a->dtype),
              s != LF_OK ? lf_last_error() : "out of memory");
        if (vq >= 0) /* no writer yet: take it back */
            g->n_values = vq;
        lf_tensor_free(wq), lf_tensor_free(ws);
        return;
    }
    A = &g->nodes[ig];
    g->owned[g->n_owned++] = wq, g->owned[g->n_owned++] = ws;
    const int lo = ig < iu ? ig : iu, hi = ig < iu ? iu : ig;
    for (int v = 0; v < g->n_values; v++) /* gate's and up's old outputs: nobody's now */
        if ((g->values[v].writer == ig || g->values[v].writer == iu) && v != A->gd.idx)
            g->values[v].writer = dead;
    node gated = *A, quant = {.kind = N_QUANT, .op = LF_OP_QUANTIZE_FP8, .dev = dev};
    quant.q = (lf_quant){.rows = M, .cols = K, .in = {NULL, a->dtype, {a->rs, a->cs}}, .mode = LF_SCALE_ROWS};
    quant.qin = A->ga;
    quant.qq = (ref){R_VALUE, vq, 0, NULL}, quant.qs = (ref){R_VALUE, vs, 0, NULL};
    snprintf(quant.note, sizeof quant.note, "fp8: x per token");
    gated.g = t;
    gated.ga = quant.qq, gated.gsa = quant.qs;
    gated.gb = (ref){R_CONST, -1, 0, lf_tensor_data(wq)};
    gated.gsb = (ref){R_CONST, -1, 0, lf_tensor_data(ws)};
    snprintf(gated.note, sizeof gated.note, "fp8: e4m3 x and [Wg; Wu], %s(g) * u in the epilogue",
             lf_act_name(t.ep.act));
    g->nodes[lo] = quant, g->nodes[hi] = gated;
    g->values[vq].writer = g->values[vs].writer = lo;
    g->values[gated.gd.idx].writer = hi;
    logf_(log, cap,
          "  fp8: nodes %d and %d -> x quantized per token, then the gated GEMM in e4m3 ([Wg; Wu] "
          "quantized per channel at compile time)\n",
          lo, hi);
}

static int pass_gated(graph *g, int fp8, char *log, size_t cap)
{
    int done = 0;
    cg_count_users(g);
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
            if (!adjacent || !reads_matrix(P1, &P1->f.in[0], &A1->g.d) ||
                !reads_matrix(P2, &P2->f.in[1 - k], &A2->g.d) || !out_matrix(P2, &out) || P1->f.ndim != P2->f.ndim ||
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
            if (fp8)
                make_fp8(g, ig, iu, i2, log, cap);
            done++;
            cg_count_users(g);
            break;
        }
    }
    return done;
}

/* --- pointwise fusion (LF_PASS_POINTWISE_FUSION): a pointwise node whose only reader is pointwise
 * goes into that reader --- */

static int find_input(const lf_fused *f, const ref *refs, int n, const lf_strided *s, ref r)
{
    for (int q = 0; q < n; q++)
        if (ref_eq(refs[q], r) && f->in[q].dtype == s->dtype &&
            same_strides(f->ndim, f->shape, f->in[q].stride, s->stride))
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
            o.src[s] = o.src[s] == k          ? p_last
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
        cg_count_users(g);
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

/* --- activation epilogues (LF_PASS_ACT_EPILOGUE): GEMM + activation -> epilogue --- */

static int pass_act(graph *g, char *log, size_t cap)
{
    int done = 0;
    cg_count_users(g);
    for (int ia = 0; ia < g->n_nodes; ia++) {
        node *A = &g->nodes[ia];
        if (A->kind != N_GEMM || A->dead || A->g.ep.act != LF_ACT_NONE || A->g.ep.gate != LF_GATE_NONE ||
            A->g.ep.a_scale)
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
        cg_count_users(g);
    }
    return done;
}

/* --- packed weights (LF_PASS_PACK_WEIGHTS) --- */

/* Every live CPU GEMM whose B is a constant (a parameter, or a weight a pass made) gets B packed
 * now; the plan's step then reads the packed copy (lf_cpu_gemm_packed). A GEMM of up to
 * LF_CPU_DIRECT_ROWS rows against a Linear weight reads the weight itself (linfuse/cpu.h): it is
 * left as it was, and sees the weight's values at each run. The node's g still holds
 * the capture's addresses for A, C and D, which packing does not read: it reads B and checks the
 * description's shapes. */
static void pass_pack(graph *g, char *log, size_t cap)
{
    int packed = 0, refused = 0, direct = 0;
    lf_status why = LF_OK;
    for (int i = 0; i < g->n_nodes; i++) {
        node *n = &g->nodes[i];
        if (n->dead || n->kind != N_GEMM || n->dev != LF_DEVICE_CPU || n->gb.kind != R_CONST)
            continue;
        if (n->g.a.rows <= LF_CPU_DIRECT_ROWS && (n->g.b.rs == 1 || n->g.a.cols == 1)) {
            direct++; /* a decode step's rows: the GEMM reads the weight itself, packed or not */
            continue;
        }
        const lf_status s = lf_cpu_pack_b(&n->g, &n->packed);
        if (s == LF_OK) {
            packed++;
            snprintf(n->note + strlen(n->note), sizeof n->note - strlen(n->note), "%sB packed once",
                     n->note[0] ? "; " : "");
        } else {
            refused++, why = s; /* n->packed stays NULL */
        }
    }
    if (packed || refused || direct)
        logf_(log, cap, "  pack weights: %d GEMM%s read a B packed at compile time%s%s%s\n", packed,
              packed == 1 ? "" : "s", direct ? "; left as they were (16 rows or fewer read the weight itself)" : "",
              refused ? "; left as they were (packing refused): " : "", refused ? lf_status_name(why) : "");
}

/* --- the driver --- */

void cg_run_passes(graph *g, unsigned passes, char *log, size_t cap)
{
    log[0] = '\0';
    if (!(passes & LF_PASS_FOLD_VIEWS))
        logf_(log, cap, "  views: kept (pass off): each run dispatches them again\n");
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].kind == N_VIEW && (passes & LF_PASS_FOLD_VIEWS))
            g->nodes[i].dead = 1;
    if (passes & LF_PASS_BIAS_EPILOGUE)
        pass_bias(g, log, cap);
    if (passes & LF_PASS_GATED_GEMM)
        pass_gated(g, (passes & LF_PASS_FP8) != 0, log, cap);
    if (passes & LF_PASS_POINTWISE_FUSION)
        pass_pointwise(g, log, cap);
    if (passes & LF_PASS_ACT_EPILOGUE)
        pass_act(g, log, cap);
    if (passes & LF_PASS_PACK_WEIGHTS)
        pass_pack(g, log, cap);
    cg_count_users(g);
}
