/* Compile mode (include/linfuse/compile.h): capture (capture.c) and passes (passes.c) give a
 * graph; here it becomes a plan: a buffer per remaining value, every step with its pointers
 * resolved except the inputs', which a run patches in; on CUDA the steps are recorded once as a
 * graph and replayed. Guards pick the plan for a call or refuse it; recompiles add plans.
 * Layer: compile/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compile/compile_impl.h"

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

static void plan_free(plan *p)
{
    if (!p)
        return;
    if (p->graph_exec)
        lf_backend_graph_free(p->dev, p->graph_exec);
    for (int i = 0; i < p->g.n_nodes; i++)
        if (p->g.nodes[i].kind == N_FUSED)
            lf_backend_fused_release(p->dev, &p->g.nodes[i].f);
    free(p->patches), free(p->steps);
    cg_free(&p->g);
    free(p);
}

static const char *op_short(const lf_fused_op *o)
{
    if (o->op == LF_PW_ACT)
        return o->act == LF_ACT_RELU   ? "relu"
               : o->act == LF_ACT_NONE ? "copy"
               : o->act == LF_ACT_SILU ? "silu"
                                       : "gelu";
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
    cg_run_passes(g, o->passes, p->passes_log, sizeof p->passes_log);

    /* buffers: one per value a live node writes */
    p->dev = LF_DEVICE_CPU;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].kind != N_VIEW)
            p->dev = g->nodes[i].dev;
    for (int v = 0; v < g->n_values; v++) {
        value *val = &g->values[v];
        if (g->nodes[val->writer].dead && !val->users)
            continue;
        const node *w = &g->nodes[val->writer];
        if (w->kind == N_COLL && w->cout.idx == v) { /* in place: the buffer of what it sums */
            const value *src = &g->values[w->cin.idx];
            LF_TRY(lf_tensor_alias(&val->buf, src->buf, src->buf->ndim, src->buf->shape, src->buf->stride,
                                   src->buf->offset + w->cin.off / (int64_t)lf_dtype_size(val->dtype)));
            continue;
        }
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
            if (n->g.ep.a_scale) {
                LF_TRY(bind(p, n->gsa, (void **)&n->g.ep.a_scale));
                LF_TRY(bind(p, n->gsb, (void **)&n->g.ep.b_scale));
            }
            LF_TRY(bind(p, n->gd, &n->g.d.data));
            if (n->g.ep.d_scale)
                LF_TRY(bind(p, n->gds, (void **)&n->g.ep.d_scale));
            p->kernels++;
        } else if (n->kind == N_QUANT) {
            LF_TRY(bind(p, n->qin, &n->q.in.data));
            LF_TRY(bind(p, n->qq, (void **)&n->q.q));
            LF_TRY(bind(p, n->qs, (void **)&n->q.scale));
            p->kernels++;
        } else if (n->kind == N_PW) {
            for (int q = 0; q < lf_pw_arity(n->p.op); q++)
                LF_TRY(bind(p, n->fin[q], &n->p.in[q].data));
            LF_TRY(bind(p, n->fout, &n->p.out.data));
            p->kernels++;
        } else if (n->kind == N_COLL) {
            LF_TRY(bind(p, n->cout, &n->coll.data));
            p->kernels++;
        } else if (n->kind == N_WAIT) {
            continue;
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
    return cg_plan_steps(p);
}

/* --- guards --- */

/* A guard's miss at input i, check `level` (0 NULL, 1 dtype, 2 device, 3 shape, 4 strides): how
 * far the inputs matched before it, for guards_pass's *depth. */
static int miss_depth(int i, int level)
{
    return 5 * i + level;
}

/* 1 when in passes p's guards; else 0 with why filled (names the input, expected and actual) and
 * *depth how far the inputs matched before it (miss_depth), so that of several plans the nearest
 * miss is the one reported. */
static int guards_pass(const plan *p, int n_in, lf_tensor *const *in, char *why, size_t cap, int *depth)
{
    *depth = -1;
    if (n_in != p->g.n_in) {
        snprintf(why, cap, "%d inputs, compiled for %d", n_in, p->g.n_in);
        return 0;
    }
    for (int i = 0; i < n_in; i++) {
        const lf_tensor *t = in[i];
        char a[96], b[96];
        if (!t || !t->storage) {
            snprintf(why, cap, "input %d is NULL", i);
            *depth = miss_depth(i, 0);
            return 0;
        }
        if (t->dtype != p->in_dtype[i]) {
            snprintf(why, cap, "input %d: dtype %s, compiled for %s", i, lf_dtype_name(t->dtype),
                     lf_dtype_name(p->in_dtype[i]));
            *depth = miss_depth(i, 1);
            return 0;
        }
        if (lf_tensor_device(t) != p->in_dev[i]) {
            snprintf(why, cap, "input %d: device %s, compiled for %s", i, lf_device_name(lf_tensor_device(t)),
                     lf_device_name(p->in_dev[i]));
            *depth = miss_depth(i, 2);
            return 0;
        }
        if (t->ndim != p->in_ndim[i] || memcmp(t->shape, p->in_shape[i], (size_t)t->ndim * sizeof t->shape[0])) {
            lf_fmt_shape(a, sizeof a, t->ndim, t->shape), lf_fmt_shape(b, sizeof b, p->in_ndim[i], p->in_shape[i]);
            snprintf(why, cap, "input %d: shape %s, compiled for %s", i, a, b);
            *depth = miss_depth(i, 3);
            return 0;
        }
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] > 1 && t->stride[d] != p->in_stride[i][d]) {
                lf_fmt_shape(a, sizeof a, t->ndim, t->stride),
                    lf_fmt_shape(b, sizeof b, p->in_ndim[i], p->in_stride[i]);
                snprintf(why, cap, "input %d: strides %s, compiled for %s", i, a, b);
                *depth = miss_depth(i, 4);
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
    lf_status s = cg_capture(&p->g, c->fn, c->ctx, n_in, in);
    int captured = p->g.n_nodes;
    if (s == LF_OK)
        s = build_plan(p, &c->o);
    /* one run before any graph is recorded: libraries load their kernels and plans now */
    if (s == LF_OK)
        s = cg_run_plan(p, in, 0);
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
    const unsigned known = LF_PASSES_ALL | LF_PASS_FP8 | LF_PASS_PACK_WEIGHTS;
    if (o && (o->passes & ~known))
        return lf_fail(LF_EINVAL, "lf_compile: passes 0x%x holds bits that are no LF_PASS_* (0x%x)", o->passes,
                       o->passes & ~known);
    if (o && (o->recompile_limit < 0 || o->recompile_limit > MAX_PLANS - 1))
        return lf_fail(LF_EINVAL, "lf_compile: recompile_limit %d, expected 0 to %d", o->recompile_limit,
                       MAX_PLANS - 1);
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
    char why[256] = "", first[256] = ""; /* first: the nearest miss (the last plan used, on a tie) */
    plan *p = NULL;
    for (int i = 0, depth, best = -2; i < c->n_plans && !p; i++) {
        int k = (c->current + i) % c->n_plans; /* the last plan used first */
        if (guards_pass(c->plans[k], n_in, in, why, sizeof why, &depth))
            p = c->plans[k], c->current = k;
        else if (depth > best)
            memcpy(first, why, sizeof first), best = depth;
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
        s = cg_run_plan(p, in, !c->o.no_cuda_graph);
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
    case R_INPUT:
        return snprintf(buf, cap, "input%d%s", r.idx, r.off ? "+" : "");
    case R_VALUE:
        return snprintf(buf, cap, "v%d%s", r.idx, r.off ? "+" : "");
    case R_CONST:
        return snprintf(buf, cap, "const");
    default:
        return snprintf(buf, cap, "-");
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
                                  p->views == 1 ? "" : "s", lf_compiled_get_stats(c).graph ? ", one CUDA graph" : "");
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
            len += (size_t)snprintf(b + len, cap - len, "  %d. gemm %lldx%lldx%lld %s (%s): %s . %s -> %s%s%s\n",
                                    step++, (long long)n->g.a.rows, (long long)n->g.b.cols, (long long)n->g.a.cols, lay,
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
        case N_COLL:
            fmt_ref(r[0], sizeof r[0], n->cin), fmt_ref(r[2], sizeof r[2], n->cout);
            len += (size_t)snprintf(b + len, cap - len, "  %d. all_reduce (%s) %lld %s: %s -> %s in place%s\n", step++,
                                    lf_op_name(n->op), (long long)n->coll.count, lf_dtype_name(n->coll.dtype), r[0],
                                    r[2], n->coll.async ? ", async" : "");
            break;
        case N_WAIT:
            len += (size_t)snprintf(b + len, cap - len, "  -  wait for the collectives (%s)\n", lf_op_name(n->op));
            break;
        case N_QUANT:
            fmt_ref(r[0], sizeof r[0], n->qin), fmt_ref(r[1], sizeof r[1], n->qq), fmt_ref(r[2], sizeof r[2], n->qs);
            len += (size_t)snprintf(b + len, cap - len, "  %d. quantize_fp8 %lldx%lld %s (%s): %s -> %s, scales %s\n",
                                    step++, (long long)n->q.rows, (long long)n->q.cols,
                                    n->q.mode == LF_SCALE_ROWS    ? "per row"
                                    : n->q.mode == LF_SCALE_1X128 ? "1x128"
                                                                  : "128x128",
                                    lf_op_name(n->op), r[0], r[1], r[2]);
            break;
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
