/* Device-independent half of the backend layer: the device table, checking GEMM and pointwise
 * descriptions and routing them to their device, the one gated decision, and the settings a
 * program gives the devices (the caller's stream, the gated schedule, GEMM plans). The float64
 * reference is reference.c's. Layer: backend/. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "linfuse/settings.h"
#include "tensor/tensor_impl.h"

lf_epilogue lf_epilogue_default(void)
{
    return (lf_epilogue){.alpha = 1.0f, .beta = 0.0f, .bias_dtype = LF_DTYPE_F32, .gate_group = 1};
}

/* --- the device table: the CPU built in, other devices loaded from their modules on first ask --- */

typedef struct device_slot {
    pthread_once_t once;
    const lf_backend_ops *ops; /* set once the device started and is usable */
    const char *why;           /* why not, otherwise */
} device_slot;

static device_slot devices[LF_DEVICE_COUNT] = {[LF_DEVICE_CPU] = {PTHREAD_ONCE_INIT, &lf_cpu_backend_ops, NULL},
                                               [LF_DEVICE_CUDA] = {PTHREAD_ONCE_INIT, NULL, NULL}};

static void start_cuda(void)
{
    device_slot *d = &devices[LF_DEVICE_CUDA];
    const lf_backend_ops *b = lf_backend_module_load(LF_DEVICE_CUDA, &d->why);
    if (b && (!b->available || b->available(&d->why)))
        d->ops = b;
}

static void (*const starters[LF_DEVICE_COUNT])(void) = {[LF_DEVICE_CUDA] = start_cuda};

static const device_slot *device_of(lf_device dev)
{
    if ((unsigned)dev >= LF_DEVICE_COUNT)
        return NULL;
    if (starters[dev])
        pthread_once(&devices[dev].once, starters[dev]);
    return &devices[dev];
}

const lf_backend_ops *lf_backend_for(lf_device dev)
{
    const device_slot *d = device_of(dev);
    if (d && d->ops)
        return d->ops;
    if (!d)
        lf_fail(LF_EDEVICE, "device %d is not a linfuse device", (int)dev);
    else
        lf_fail(LF_EDEVICE, "no %s device: %s", lf_device_name(dev), d->why ? d->why : "not available");
    return NULL;
}

int lf_device_available(lf_device dev)
{
    const device_slot *d = device_of(dev);
    return d && d->ops;
}

lf_status lf_device_require(lf_device dev)
{
    return lf_backend_for(dev) ? LF_OK : LF_EDEVICE;
}

lf_status lf_device_synchronize(lf_device dev)
{
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    return b->synchronize ? b->synchronize() : LF_OK;
}

int lf_device_count(lf_device dev)
{
    const device_slot *d = device_of(dev);
    if (!d || !d->ops)
        return 0;
    return d->ops->unit_count ? d->ops->unit_count() : 1;
}

lf_status lf_device_select(lf_device dev, int index)
{
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    int n = b->unit_count ? b->unit_count() : 1;
    if (index < 0 || index >= n || index >= LF_MAX_DEVICE_INDEX)
        return lf_fail(LF_EDEVICE, "lf_device_select: %s:%d does not exist (this machine has %d %s unit%s)",
                       lf_device_name(dev), index, n, lf_device_name(dev), n == 1 ? "" : "s");
    return b->select ? b->select(index) : LF_OK;
}

int lf_device_current(lf_device dev)
{
    const device_slot *d = device_of(dev);
    return d && d->ops && d->ops->current ? d->ops->current() : 0;
}

lf_status lf_device_memory(lf_device dev, int64_t *available, int64_t *total)
{
    LF_CHECK_PTR(available, "lf_device_memory", "available");
    LF_CHECK_PTR(total, "lf_device_memory", "total");
    *available = *total = 0;
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    if (!b->memory)
        return lf_fail(LF_EUNSUPPORTED, "lf_device_memory: the %s device does not say how much memory it has", b->name);
    return b->memory(available, total);
}

const lf_device_events *lf_backend_events(lf_device dev)
{
    const device_slot *d = device_of(dev);
    return d && d->ops ? d->ops->events : NULL;
}

/* Tensors on a device start its backend on first use (the tensor layer cannot call up). */
__attribute__((constructor)) static void register_starter(void)
{
    lf_tensor_set_device_starter(lf_device_available);
}

static char layout_letter(const lf_matrix *m)
{
    if (m->cs == 1 || m->cols == 1)
        return 'n';
    if (m->rs == 1 || m->rows == 1)
        return 't';
    return 's';
}

void lf_gemm_layout(const lf_gemm *g, char out[3])
{
    out[0] = layout_letter(&g->b);
    out[1] = layout_letter(&g->a);
    out[2] = '\0';
}

/* Byte interval [lo, hi] a matrix view touches. */
static void extent(const lf_matrix *m, uintptr_t *lo, uintptr_t *hi)
{
    size_t es = lf_dtype_size(m->dtype);
    *lo = (uintptr_t)m->data;
    *hi = *lo + (uintptr_t)(((m->rows - 1) * m->rs + (m->cols - 1) * m->cs) * (int64_t)es + (int64_t)es - 1);
}

static int overlaps(const lf_matrix *a, const lf_matrix *b)
{
    uintptr_t alo, ahi, blo, bhi;
    extent(a, &alo, &ahi);
    extent(b, &blo, &bhi);
    return alo <= bhi && blo <= ahi;
}

static lf_status check_matrix(const lf_matrix *m, const char *name)
{
    if (!m->data)
        return lf_fail(LF_EINVAL, "lf_gemm: matrix %s has no data pointer", name);
    if (!lf_dtype_computes(m->dtype) && m->dtype != LF_DTYPE_F8E4M3)
        return lf_fail(LF_EDTYPE, "lf_gemm: matrix %s is %s; a GEMM takes bf16, f16 or f32", name,
                       lf_dtype_known(m->dtype) ? lf_dtype_name(m->dtype) : "of an unknown dtype");
    if (m->rows < 1 || m->cols < 1)
        return lf_fail(LF_ESHAPE, "lf_gemm: matrix %s is %lld x %lld, expected both dims >= 1", name,
                       (long long)m->rows, (long long)m->cols);
    if (m->rs < 0 || m->cs < 0)
        return lf_fail(LF_ESHAPE, "lf_gemm: matrix %s has negative strides (%lld, %lld)", name, (long long)m->rs,
                       (long long)m->cs);
    int64_t x, y, z;
    if (!lf_mul_ok(m->rows - 1, m->rs, &x) || !lf_mul_ok(m->cols - 1, m->cs, &y) || !lf_add_ok(x, y, &z) ||
        !lf_mul_ok(z + 1, (int64_t)lf_dtype_size(m->dtype), &z))
        return lf_fail(LF_EOVERFLOW, "lf_gemm: matrix %s spans more bytes than fit in 63 bits", name);
    return LF_OK;
}

lf_status lf_gemm_validate(const lf_gemm *g)
{
    LF_CHECK_PTR(g, "lf_gemm", "g");
    LF_TRY(check_matrix(&g->a, "a"));
    LF_TRY(check_matrix(&g->b, "b"));
    LF_TRY(check_matrix(&g->d, "d"));
    const int64_t M = g->a.rows, K = g->a.cols, N = g->b.cols;
    if (g->b.rows != K)
        return lf_fail(LF_ESHAPE, "lf_gemm: a is %lld x %lld but b is %lld x %lld: inner dims differ (%lld != %lld)",
                       (long long)M, (long long)K, (long long)g->b.rows, (long long)N, (long long)K,
                       (long long)g->b.rows);
    if (g->a.dtype != g->b.dtype)
        return lf_fail(LF_EDTYPE, "lf_gemm: a is %s but b is %s; both operands must have one dtype",
                       lf_dtype_name(g->a.dtype), lf_dtype_name(g->b.dtype));
    const lf_epilogue *ep = &g->ep;
    const int fp8 = g->a.dtype == LF_DTYPE_F8E4M3;
    if (g->c.data && g->c.dtype == LF_DTYPE_F8E4M3)
        return lf_fail(LF_EDTYPE, "lf_gemm: c is f8e4m3; a C input must be bf16, f16 or f32");
    if (fp8 && (!ep->a_scale || !ep->b_scale))
        return lf_fail(LF_EINVAL, "lf_gemm: f8e4m3 operands need both scale vectors (a_scale, b_scale)");
    if (!fp8 && (ep->a_scale || ep->b_scale))
        return lf_fail(LF_EINVAL, "lf_gemm: scale vectors are for f8e4m3 operands; a and b are %s",
                       lf_dtype_name(g->a.dtype));
    if (ep->blockwise != 0 && (ep->blockwise != 1 || !fp8))
        return lf_fail(LF_EINVAL,
                       "lf_gemm: blockwise %d: 0 (row-wise scales) or 1 (1 x 128 and 128 x 128 blocks, "
                       "f8e4m3 only)",
                       ep->blockwise);
    if ((g->d.dtype == LF_DTYPE_F8E4M3) != (ep->d_scale != NULL))
        return lf_fail(LF_EINVAL,
                       g->d.dtype == LF_DTYPE_F8E4M3 ? "lf_gemm: an f8e4m3 d needs its block scales (d_scale)"
                                                     : "lf_gemm: d_scale is for an f8e4m3 d; d is %s",
                       lf_dtype_name(g->d.dtype));
    if (ep->d_scale && !fp8)
        return lf_fail(LF_EINVAL, "lf_gemm: an f8e4m3 d comes from f8e4m3 operands; a and b are %s",
                       lf_dtype_name(g->a.dtype));
    if ((unsigned)ep->act >= LF_ACT_COUNT)
        return lf_fail(LF_EINVAL, "lf_gemm: activation %d is not one of none, relu, gelu_tanh, gelu_erf, silu",
                       (int)ep->act);
    int64_t n_out = N;
    if (ep->gate == LF_GATE_PAIRED) {
        if (ep->gate_group < 1 || ep->gate_group > N / 2 || N % (2 * ep->gate_group)) /* 2 x group may not fit */
            return lf_fail(LF_ESHAPE,
                           "lf_gemm: paired gate needs b's %lld columns to be whole blocks of "
                           "2 x gate_group (%lld)",
                           (long long)N, (long long)ep->gate_group);
        if (g->c.data)
            return lf_fail(LF_EUNSUPPORTED, "lf_gemm: a paired-gate GEMM takes no C input");
        n_out = N / 2;
    } else if (ep->gate != LF_GATE_NONE) {
        return lf_fail(LF_EINVAL, "lf_gemm: gate mode %d is not none or paired", (int)ep->gate);
    }
    if (g->d.rows != M || g->d.cols != n_out)
        return lf_fail(LF_ESHAPE, "lf_gemm: d is %lld x %lld, expected %lld x %lld", (long long)g->d.rows,
                       (long long)g->d.cols, (long long)M, (long long)n_out);
    if (g->d.cs == 0 || g->d.rs == 0 ||
        (g->d.rows > 1 && g->d.cols > 1 && g->d.rs < g->d.cols * g->d.cs && g->d.cs < g->d.rows * g->d.rs))
        return lf_fail(LF_ESHAPE, "lf_gemm: d's strides (%lld, %lld) make elements overlap", (long long)g->d.rs,
                       (long long)g->d.cs);
    if (g->c.data) {
        LF_TRY(check_matrix(&g->c, "c"));
        if (g->c.rows != M || g->c.cols != N)
            return lf_fail(LF_ESHAPE, "lf_gemm: c is %lld x %lld, expected %lld x %lld", (long long)g->c.rows,
                           (long long)g->c.cols, (long long)M, (long long)N);
        if (overlaps(&g->d, &g->c))
            return lf_fail(LF_EINVAL, "lf_gemm: d overlaps c; write the result to separate memory");
    }
    if (ep->bias && (unsigned)ep->bias_dtype >= LF_DTYPE_COUNT)
        return lf_fail(LF_EDTYPE, "lf_gemm: bias dtype %d is unknown", (int)ep->bias_dtype);
    if (overlaps(&g->d, &g->a) || overlaps(&g->d, &g->b))
        return lf_fail(LF_EINVAL, "lf_gemm: d overlaps %s; write the result to separate memory",
                       overlaps(&g->d, &g->a) ? "a" : "b");
    return LF_OK;
}

/* b's choice for the valid paired-gate GEMM g: its backend's, or the fallback where it has no
 * gated kernel. */
static void gated_choose(const lf_backend_ops *b, const lf_gemm *g, lf_gated_choice *out)
{
    memset(out, 0, sizeof *out);
    if (b->gated_choose) {
        b->gated_choose(g, out);
    } else {
        out->kernel = LF_GATED_KERNEL_FALLBACK;
        snprintf(out->why, sizeof out->why, "%s has no gated kernel", b->name);
    }
}

lf_status lf_backend_gemm_supported(lf_device dev, const lf_gemm *g)
{
    LF_TRY(lf_gemm_validate(g));
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    if (g->ep.gate == LF_GATE_PAIRED) { /* the one gated decision (g validated just above) */
        lf_gated_choice c;
        gated_choose(b, g, &c);
        if (c.kernel == LF_GATED_KERNEL_FALLBACK)
            return lf_fail(LF_EUNSUPPORTED, "%s gemm: %s", b->name, c.why);
        return LF_OK;
    }
    char why[256];
    if (b->gemm_supports && !b->gemm_supports(g, why, sizeof why))
        return lf_fail(LF_EUNSUPPORTED, "%s gemm: %s", b->name, why);
    return LF_OK;
}

/* --- the caller's stream (linfuse/cuda.h) --- */

static const lf_backend_ops *with_streams(const char *fn, lf_status *s)
{
    const lf_backend_ops *b = lf_backend_for(LF_DEVICE_CUDA);
    if (!b)
        *s = lf_fail(LF_EDEVICE, "%s: %s", fn, lf_last_error());
    else if (!b->set_stream || !b->get_stream)
        *s = lf_fail(LF_EUNSUPPORTED, "%s: the cuda backend has no streams", fn), b = NULL;
    return b;
}

lf_status lf_cuda_set_stream(void *stream)
{
    lf_status s = LF_OK;
    const lf_backend_ops *b = with_streams("lf_cuda_set_stream", &s);
    return b ? b->set_stream(stream, 0) : s;
}

lf_status lf_cuda_use_own_stream(void)
{
    lf_status s = LF_OK;
    const lf_backend_ops *b = with_streams("lf_cuda_use_own_stream", &s);
    return b ? b->set_stream(NULL, 1) : s;
}

lf_status lf_cuda_get_stream(void **stream)
{
    LF_CHECK_PTR(stream, "lf_cuda_get_stream", "stream");
    *stream = NULL;
    lf_status s = LF_OK;
    const lf_backend_ops *b = with_streams("lf_cuda_get_stream", &s);
    if (b)
        *stream = b->get_stream();
    return s;
}

static const char *const gated_kernel_names[LF_GATED_KERNEL_COUNT] = {"epilogue", "gemv",    "cooperative",
                                                                      "pingpong", "offload", "fallback"};

const char *lf_gated_kernel_name(lf_gated_kernel k)
{
    return (unsigned)k < LF_GATED_KERNEL_COUNT ? gated_kernel_names[k] : "?";
}

lf_status lf_gated_choose(lf_device dev, const lf_gemm *g, lf_gated_choice *out)
{
    LF_CHECK_PTR(out, "lf_gated_choose", "out");
    memset(out, 0, sizeof *out);
    LF_TRY(lf_gemm_validate(g));
    if (g->ep.gate != LF_GATE_PAIRED)
        return lf_fail(LF_EINVAL, "lf_gated_choose: g is not a paired-gate GEMM (ep.gate %d)", (int)g->ep.gate);
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    gated_choose(b, g, out);
    return LF_OK;
}

lf_status lf_backend_gemm(lf_device dev, const lf_gemm *g, lf_kernel_info *info)
{
    LF_TRY(lf_gemm_validate(g));
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    return b->gemm(g, info);
}

lf_status lf_backend_pointwise(lf_device dev, const lf_pointwise *p, lf_kernel_info *info)
{
    LF_CHECK_PTR(p, "lf_pointwise", "p");
    if ((unsigned)p->op >= LF_PW_COUNT)
        return lf_fail(LF_EINVAL, "lf_pointwise: op %d is unknown", (int)p->op);
    if ((p->op == LF_PW_ACT || p->op == LF_PW_ACT_MUL) && (unsigned)p->act >= LF_ACT_COUNT)
        return lf_fail(LF_EINVAL, "lf_pointwise: activation %d is unknown", (int)p->act);
    if (p->ndim < 1 || p->ndim > LF_MAX_DIMS)
        return lf_fail(LF_ESHAPE, "lf_pointwise: %d dims, expected 1 to %d", p->ndim, LF_MAX_DIMS);
    for (int i = 0; i < p->ndim; i++)
        if (p->shape[i] < 1)
            return lf_fail(LF_ESHAPE, "lf_pointwise: dim %d is %lld, expected >= 1", i, (long long)p->shape[i]);
    int nin = lf_pw_arity(p->op);
    if (!p->out.data || !p->in[0].data || (nin == 2 && !p->in[1].data))
        return lf_fail(LF_EINVAL, "lf_pointwise: an operand has no data pointer");
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    return b->pointwise(p, info);
}

lf_status lf_backend_quantize_fp8(lf_device dev, const lf_quant *q, lf_kernel_info *info)
{
    LF_CHECK_PTR(q, "lf_quantize_fp8", "q");
    if ((unsigned)q->mode > LF_SCALE_128X128)
        return lf_fail(LF_EINVAL, "lf_quantize_fp8: scale mode %d is not rows, 1x128 or 128x128", (int)q->mode);
    if (q->pad_rows && (q->mode != LF_SCALE_ROWS || q->pad_rows < q->rows))
        return lf_fail(LF_EINVAL, "lf_quantize_fp8: pad_rows %lld: row-wise only, and at least the %lld rows",
                       (long long)q->pad_rows, (long long)q->rows);
    if (q->rows < 1 || q->cols < 1 || !q->in.data || !q->q || !q->scale || !lf_dtype_computes(q->in.dtype))
        return lf_fail(LF_EINVAL,
                       "lf_quantize_fp8: %lld x %lld %s: expected both dims >= 1, bf16/f16/f32 input and "
                       "every pointer set",
                       (long long)q->rows, (long long)q->cols,
                       lf_dtype_known(q->in.dtype) ? lf_dtype_name(q->in.dtype) : "unknown dtype");
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    if (!b->quantize_fp8)
        return lf_fail(LF_EUNSUPPORTED, "%s: no FP8 quantization kernel", b->name);
    return b->quantize_fp8(q, info);
}

static lf_status check_fused(const lf_fused *f)
{
    LF_CHECK_PTR(f, "lf_fused", "f");
    if (f->ndim < 1 || f->ndim > LF_MAX_DIMS || f->n_in < 1 || f->n_in > LF_FUSED_MAX_IN || f->n_ops < 1 ||
        f->n_ops > LF_FUSED_MAX_OPS)
        return lf_fail(LF_EINVAL, "lf_fused %s: %d dims, %d inputs, %d steps (limits %d, %d, %d)", f->name, f->ndim,
                       f->n_in, f->n_ops, LF_MAX_DIMS, LF_FUSED_MAX_IN, LF_FUSED_MAX_OPS);
    for (int i = 0; i < f->n_ops; i++) {
        const lf_fused_op *o = &f->ops[i];
        int regs = f->n_in + i, nsrc = lf_pw_arity(o->op);
        if ((unsigned)o->op >= LF_PW_COUNT || o->op == LF_PW_ACT_MUL || (unsigned)o->act >= LF_ACT_COUNT)
            return lf_fail(LF_EINVAL, "lf_fused %s: step %d has op %d", f->name, i, (int)o->op);
        for (int k = 0; k < nsrc; k++)
            if (o->src[k] < 0 || o->src[k] >= regs)
                return lf_fail(LF_EINVAL, "lf_fused %s: step %d reads register %d of %d", f->name, i, o->src[k], regs);
    }
    return LF_OK;
}

/* dev's backend when it has fused kernels / graphs (each a set of entries), else NULL with *s
 * saying which is missing. */
static const lf_backend_ops *with_fused(lf_device dev, lf_status *s)
{
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        *s = LF_EDEVICE;
    else if (!b->fused)
        *s = lf_fail(LF_EUNSUPPORTED, "%s: no fused pointwise kernels", b->name), b = NULL;
    return b;
}

static const lf_backend_ops *with_graphs(lf_device dev, lf_status *s)
{
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        *s = LF_EDEVICE;
    else if (!b->graph_begin || !b->graph_end || !b->graph_launch || !b->graph_free)
        *s = lf_fail(LF_EUNSUPPORTED, "%s: no graphs on this device", b->name), b = NULL;
    return b;
}

lf_status lf_backend_fused_prepare(lf_device dev, lf_fused *f, const char *cache_dir, int verbose)
{
    LF_TRY(check_fused(f));
    f->kernel_name = lf_kernel_name_intern(f->name); /* the hot path then copies a pointer */
    lf_status s = LF_OK;
    const lf_backend_ops *b = with_fused(dev, &s);
    if (!b)
        return s;
    return b->fused_prepare ? b->fused_prepare(f, cache_dir, verbose) : LF_OK;
}

lf_status lf_backend_fused(lf_device dev, const lf_fused *f, lf_kernel_info *info)
{
    lf_status s = LF_OK;
    const lf_backend_ops *b = with_fused(dev, &s);
    return b ? b->fused(f, info) : s;
}

void lf_backend_fused_release(lf_device dev, lf_fused *f)
{
    lf_status s;
    const lf_backend_ops *b = f && f->prepared ? with_fused(dev, &s) : NULL;
    if (b && b->fused_release)
        b->fused_release(f);
    if (f)
        f->prepared = NULL;
}

lf_status lf_backend_graph_begin(lf_device dev)
{
    lf_status s = LF_OK;
    const lf_backend_ops *b = with_graphs(dev, &s);
    return b ? b->graph_begin() : s;
}

lf_status lf_backend_graph_end(lf_device dev, void **graph)
{
    lf_status s = LF_OK;
    const lf_backend_ops *b = with_graphs(dev, &s);
    return b ? b->graph_end(graph) : s;
}

lf_status lf_backend_graph_launch(lf_device dev, void *graph)
{
    lf_status s = LF_OK;
    const lf_backend_ops *b = with_graphs(dev, &s);
    return b ? b->graph_launch(graph) : s;
}

void lf_backend_graph_free(lf_device dev, void *graph)
{
    lf_status s;
    const lf_backend_ops *b = graph ? with_graphs(dev, &s) : NULL;
    if (b)
        b->graph_free(graph);
}

/* -1: not set yet; the first ask reads the environment once (the gated kernel asks on every
 * launch, and getenv walks the whole environment) */
static _Atomic int gated_schedule = -1;

void lf_gated_schedule_force(lf_gated_schedule s)
{
    atomic_store(&gated_schedule, (int)s);
}

lf_gated_schedule lf_gated_schedule_forced(void)
{
    int v = atomic_load(&gated_schedule);
    if (v >= 0)
        return (lf_gated_schedule)v;
    /* settings.def lists the choices in lf_gated_schedule's order */
    const lf_gated_schedule s = (lf_gated_schedule)lf_setting_choice_or(LF_SET_GATED_SCHEDULE, LF_GATED_AUTO);
    int unset = -1; /* a force made meanwhile wins */
    atomic_compare_exchange_strong(&gated_schedule, &unset, (int)s);
    return (lf_gated_schedule)atomic_load(&gated_schedule);
}

/* -1: not set, the environment decides (LINFUSE_GEMM_AUTOTUNE=0 turns it off) */
static _Atomic int gemm_autotune = -1;

void lf_gemm_autotune_set(int on)
{
    atomic_store(&gemm_autotune, on ? 1 : 0);
}

enum { AUTOTUNE_ON, AUTOTUNE_OFF, AUTOTUNE_VERBOSE }; /* settings.def's order: 1|0|verbose */

int lf_gemm_autotune_enabled(void)
{
    int v = atomic_load(&gemm_autotune);
    if (v >= 0)
        return v;
    return lf_setting_choice_or(LF_SET_GEMM_AUTOTUNE, AUTOTUNE_ON) != AUTOTUNE_OFF;
}

int lf_gemm_autotune_verbose(void)
{
    return lf_setting_choice_or(LF_SET_GEMM_AUTOTUNE, AUTOTUNE_ON) == AUTOTUNE_VERBOSE;
}
