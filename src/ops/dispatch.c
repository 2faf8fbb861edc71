/* The op table, the observer, kernel launches and shared input checks. Layer: ops/. */
#include "ops/dispatch.h"

static const struct {
    const char *name;
    lf_op_kind kind;
} op_table[] = {
#define LF_OP(id, name, kind) [LF_OP_##id] = {name, kind},
#include "linfuse/ops.def"
#undef LF_OP
};
_Static_assert(sizeof op_table / sizeof op_table[0] == LF_OP_COUNT, "one table entry per op id");

const char *lf_op_name(lf_op_id op)
{
    return (unsigned)op < LF_OP_COUNT ? op_table[op].name : "lf::?";
}
lf_op_kind lf_op_kind_of(lf_op_id op)
{
    return (unsigned)op < LF_OP_COUNT ? op_table[op].kind : LF_OPK_COMPOSITE;
}

_Atomic(const lf_op_observer *) lf_observer_ptr;

void lf_ops_set_observer(const lf_op_observer *obs)
{
    atomic_store_explicit(&lf_observer_ptr, obs, memory_order_release);
}

_Thread_local const lf_capture_hooks *lf_capture_tls;

/* A GEMM on dev, or on the CPU with a B packed once (p), seen by the hooks the same way. */
static lf_status launch_gemm(lf_device dev, const lf_gemm *g, const lf_cpu_packed_b *p)
{
    const lf_capture_hooks *c = lf_capture_tls;
    if (__builtin_expect(c != NULL, 0))
        c->gemm(c->user, dev, g);
    const lf_op_observer *o = lf_obs();
    lf_kernel_info info = {0}, *ip = o ? &info : NULL;
    if (o)
        o->kernel_begin(o->user, dev, ip);
    lf_status s = p ? lf_cpu_gemm_packed(g, p, ip) : lf_backend_gemm(dev, g, ip);
    if (o)
        o->kernel_end(o->user, dev, s == LF_OK ? ip : NULL);
    return s;
}

lf_status lf_launch_gemm(lf_device dev, const lf_gemm *g)
{
    return launch_gemm(dev, g, NULL);
}

lf_status lf_launch_gemm_packed(const lf_gemm *g, const lf_cpu_packed_b *p)
{
    return launch_gemm(LF_DEVICE_CPU, g, p);
}

lf_status lf_launch_pointwise(lf_device dev, const lf_pointwise *p)
{
    const lf_capture_hooks *c = lf_capture_tls;
    if (__builtin_expect(c != NULL, 0))
        c->pointwise(c->user, dev, p);
    const lf_op_observer *o = lf_obs();
    if (__builtin_expect(o == NULL, 1))
        return lf_backend_pointwise(dev, p, NULL);
    lf_kernel_info info = {0};
    o->kernel_begin(o->user, dev, &info);
    lf_status s = lf_backend_pointwise(dev, p, &info);
    o->kernel_end(o->user, dev, s == LF_OK ? &info : NULL);
    return s;
}

lf_status lf_launch_quant(lf_device dev, const lf_quant *q)
{
    const lf_capture_hooks *c = lf_capture_tls;
    if (__builtin_expect(c != NULL, 0) && c->quant)
        c->quant(c->user, dev, q);
    const lf_op_observer *o = lf_obs();
    if (__builtin_expect(o == NULL, 1))
        return lf_backend_quantize_fp8(dev, q, NULL);
    lf_kernel_info info = {0};
    o->kernel_begin(o->user, dev, &info);
    lf_status s = lf_backend_quantize_fp8(dev, q, &info);
    o->kernel_end(o->user, dev, s == LF_OK ? &info : NULL);
    return s;
}

lf_status lf_launch_fused(lf_device dev, const lf_fused *f)
{
    const lf_op_observer *o = lf_obs();
    if (__builtin_expect(o == NULL, 1))
        return lf_backend_fused(dev, f, NULL);
    lf_kernel_info info = {0};
    o->kernel_begin(o->user, dev, &info);
    lf_status s = lf_backend_fused(dev, f, &info);
    o->kernel_end(o->user, dev, s == LF_OK ? &info : NULL);
    return s;
}

lf_status lf_launch_collective(lf_device dev, const lf_collective *c, int direct)
{
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    if (!b->all_reduce)
        return lf_fail(LF_EUNSUPPORTED, "collectives: %s has none", lf_device_name(dev));
    if (direct)
        return b->all_reduce(c, NULL);
    const lf_capture_hooks *cap = lf_capture_tls;
    if (__builtin_expect(cap != NULL, 0) && cap->collective)
        cap->collective(cap->user, dev, c);
    const lf_op_observer *o = lf_obs();
    if (__builtin_expect(o == NULL, 1))
        return b->all_reduce(c, NULL);
    if (o->note_begin)
        o->note_begin(o->user, "nccl:all_reduce"); /* the library's span, as c10d names it */
    lf_kernel_info info = {0};
    o->kernel_begin(o->user, dev, &info);
    lf_status s = b->all_reduce(c, &info);
    o->kernel_end(o->user, dev, s == LF_OK ? &info : NULL);
    if (o->note_end)
        o->note_end(o->user);
    return s;
}

lf_status lf_launch_comm_wait(lf_device dev, void *comm, int direct)
{
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    const lf_capture_hooks *cap = lf_capture_tls;
    if (!direct && __builtin_expect(cap != NULL, 0) && cap->comm_wait)
        cap->comm_wait(cap->user, dev, comm);
    return b->comm_wait ? b->comm_wait(comm) : LF_OK;
}

lf_status lf_launch_graph(lf_device dev, void *graph, int n, lf_tensor *const *in, int n_steps,
                          const lf_replay_step *steps)
{
    const lf_op_observer *o = lf_obs();
    if (__builtin_expect(o == NULL, 1))
        return lf_backend_graph_launch(dev, graph);
    lf_op_arg args[8] = {{0}};
    const int k = n < 8 ? n : 8; /* the shapes a trace shows; a plan's graph has a few inputs */
    for (int i = 0; i < k; i++)
        args[i] = LF_ARG(in[i]);
    o->op_begin(o->user, LF_OP_CUDA_GRAPH_REPLAY, k, args);
    if (o->graph_steps && n_steps > 0)
        o->graph_steps(o->user, n_steps, steps);
    lf_status s = lf_backend_graph_launch(dev, graph);
    o->op_end(o->user, LF_OP_CUDA_GRAPH_REPLAY, s);
    return s;
}

void lf_ops_replay_op(lf_op_id op)
{
    const lf_op_observer *o = lf_obs();
    if (o && o->replay_op)
        o->replay_op(o->user, op);
}

void lf_ops_note_begin(const char *text)
{
    const lf_op_observer *o = lf_obs();
    if (o && o->note_begin)
        o->note_begin(o->user, text);
}

void lf_ops_note_end(void)
{
    const lf_op_observer *o = lf_obs();
    if (o && o->note_end)
        o->note_end(o->user);
}

lf_status lf_pointwise_into(lf_tensor **out, lf_tensor *y, lf_pointwise *p)
{
    p->out = lf_strided_of(y);
    p->ndim = y->ndim;
    memcpy(p->shape, y->shape, sizeof p->shape);
    lf_status s = lf_launch_pointwise(lf_tensor_device(y), p);
    if (s != LF_OK) {
        lf_tensor_free(y);
        return s;
    }
    *out = y;
    return LF_OK;
}

/* t is a tensor whose every element lies in its storage, on this thread's unit; f8e4m3 only where
 * the op takes it (views, the scaled GEMMs). */
static lf_status check_tensor(const char *op, const char *name, const lf_tensor *t, int f8_ok)
{
    if (!t)
        return lf_fail(LF_EINVAL, "%s: argument '%s' is NULL", op, name);
    if (t->dtype == LF_DTYPE_F8E4M3 && !f8_ok)
        return lf_fail(LF_EDTYPE,
                       "%s: '%s' is f8e4m3, a dtype linfuse stores but does not compute in: convert it "
                       "first (lf_tensor_to_f32, lf_st_get_as), or use the FP8 GEMMs (lf_scaled_mm)",
                       op, name);
    /* the struct is public, so its geometry may have been edited: every element it names must
     * lie inside its storage, or a kernel would read or write past it */
    LF_TRY(lf_tensor_check(op, name, t));
    /* a device's kernels run on this thread's unit (lf_device_select): its tensors must be there */
    if (t->storage->device != LF_DEVICE_CPU && t->storage->index != lf_device_current(t->storage->device))
        return lf_fail(LF_EDEVICE, "%s: '%s' is on %s:%d but this thread runs on %s:%d (lf_device_select)", op, name,
                       lf_device_name(t->storage->device), t->storage->index, lf_device_name(t->storage->device),
                       lf_device_current(t->storage->device));
    return LF_OK;
}

lf_status lf_check_tensor(const char *op, const char *name, const lf_tensor *t)
{
    return check_tensor(op, name, t, 0);
}

lf_status lf_check_stored(const char *op, const char *name, const lf_tensor *t)
{
    return check_tensor(op, name, t, 1);
}

lf_status lf_check_ndim(const char *op, const char *name, const lf_tensor *t, int ndim)
{
    char buf[LF_SHAPE_STR_CAP];
    LF_TRY(lf_check_tensor(op, name, t));
    if (t->ndim != ndim)
        return lf_fail(LF_ESHAPE, "%s: '%s' must have %d dims, got %d (shape %s)", op, name, ndim, t->ndim,
                       lf_fmt_shape(buf, sizeof buf, t->ndim, t->shape));
    return LF_OK;
}

lf_status lf_check_same(const char *op, const char *na, const lf_tensor *a, const char *nb, const lf_tensor *b)
{
    if (a->dtype != b->dtype)
        return lf_fail(LF_EDTYPE, "%s: '%s' is %s but '%s' is %s; expected one dtype", op, na, lf_dtype_name(a->dtype),
                       nb, lf_dtype_name(b->dtype));
    if (lf_tensor_device(a) != lf_tensor_device(b))
        return lf_fail(LF_EDEVICE, "%s: '%s' is on %s but '%s' is on %s; expected one device", op, na,
                       lf_device_name(lf_tensor_device(a)), nb, lf_device_name(lf_tensor_device(b)));
    return LF_OK;
}

lf_matrix lf_matrix_of(const lf_tensor *t)
{
    LF_ASSERT(t->ndim == 2);
    return (lf_matrix){lf_tensor_data(t), t->dtype, t->shape[0], t->shape[1], t->stride[0], t->stride[1]};
}

lf_strided lf_strided_of(const lf_tensor *t)
{
    lf_strided s = {lf_tensor_data(t), t->dtype, {0}};
    memcpy(s.stride, t->stride, sizeof s.stride);
    return s;
}

lf_status lf_new_output(lf_tensor **out, const lf_tensor *like, int ndim, const int64_t *shape)
{
    return lf_tensor_empty(out, like->dtype, ndim, shape, lf_tensor_device(like));
}
