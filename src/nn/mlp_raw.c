/* The gated MLP's forward over memory a binding already holds (linfuse/nn.h): the three arrays
 * wrapped here for the one call, the module's GPU and the caller's stream selected for it and put
 * back after. A framework's eager decode calls this once per layer and token; through
 * lf_nn_gated_mlp_forward_out it would make three lf_tensors (three DLPack exports from Python),
 * select the device and swap the stream around the call, each a crossing into C (in Python's
 * ctypes, microseconds each: bench/RESULTS.md). Layer: nn/. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "linfuse/backend.h"
#include "linfuse/cuda.h"
#include "linfuse/nn.h"
#include "tensor/tensor_impl.h"

static void keep(void *ctx)
{
    (void)ctx; /* the caller's memory */
}

/* A 2-D view of rows x cols elements at row stride rs (unit column stride) over memory linfuse
 * does not own, on w's device and in w's dtype: a header and storage on the caller's stack, whose
 * one reference is never dropped (views made inside the call take and give back their own). */
typedef struct borrowed {
    lf_tensor t;
    lf_storage s;
} borrowed;

static void borrow(borrowed *b, const lf_tensor *w, const void *data, int64_t rows, int64_t cols, int64_t rs,
                   size_t nbytes)
{
    memset(b, 0, sizeof *b);
    atomic_init(&b->s.refs, 1);
    b->s.device = lf_tensor_device(w);
    b->s.index = lf_tensor_device_index(w);
    b->s.nbytes = nbytes;
    b->s.data = (void *)data;
    b->s.release = keep;
    b->t.storage = &b->s;
    b->t.dtype = w->dtype;
    b->t.ndim = 2;
    b->t.shape[0] = rows, b->t.shape[1] = cols;
    b->t.stride[0] = rs, b->t.stride[1] = 1;
}

/* The bytes a rows x cols view at row stride rs spans, or 0 when rs is below cols or the span
 * overflows. */
static size_t span(int64_t rows, int64_t cols, int64_t rs, size_t es)
{
    uint64_t n;
    if (rows < 1 || cols < 1 || rs < cols || __builtin_mul_overflow((uint64_t)(rows - 1), (uint64_t)rs, &n) ||
        __builtin_add_overflow(n, (uint64_t)cols, &n) || n > ((uint64_t)1 << 62) / es)
        return 0;
    return (size_t)(n * es);
}

lf_status lf_nn_gated_mlp_forward_raw(const lf_nn_gated_mlp *m, lf_mlp_variant v, const void *x, int64_t rows,
                                      int64_t x_rs, void *y, int64_t y_rs, void *workspace, size_t workspace_bytes,
                                      void *const *stream)
{
    static const char fn[] = "lf_nn_gated_mlp_forward_raw";
    LF_CHECK_PTR(m, fn, "m");
    if (!m->gate_up)
        return lf_fail(LF_EINVAL, "%s: the module is not initialised", fn);
    LF_CHECK_PTR(x, fn, "x");
    LF_CHECK_PTR(y, fn, "y");
    LF_CHECK_PTR(workspace, fn, "workspace");
    const lf_tensor *w = m->gate_up;
    const size_t es = lf_dtype_size(w->dtype);
    const size_t xb = span(rows, m->dim, x_rs, es), yb = span(rows, m->dim, y_rs, es);
    if (!xb || !yb)
        return lf_fail(LF_ESHAPE,
                       "%s: %lld rows of %lld at row strides %lld (x) and %lld (y): rows must be >= 1 and each "
                       "row stride at least the row's length",
                       fn, (long long)rows, (long long)m->dim, (long long)x_rs, (long long)y_rs);
    if (workspace_bytes < 1)
        return lf_fail(LF_EINVAL, "%s: workspace_bytes is 0 (lf_nn_gated_mlp_workspace says how many)", fn);
    borrowed bx, by, bw;
    borrow(&bx, w, x, rows, m->dim, x_rs, xb);
    borrow(&by, w, y, rows, m->dim, y_rs, yb);
    borrow(&bw, w, workspace, 1, (int64_t)(workspace_bytes / es), (int64_t)(workspace_bytes / es),
           workspace_bytes / es * es);
    bw.t.ndim = 1;
    bw.t.shape[0] = (int64_t)(workspace_bytes / es), bw.t.stride[0] = 1;
    if (bw.t.shape[0] < 1)
        return lf_fail(LF_EINVAL, "%s: %zu workspace bytes hold no %s element", fn, workspace_bytes,
                       lf_dtype_name(w->dtype));
    const lf_device dev = lf_tensor_device(w);
    if (dev == LF_DEVICE_CPU)
        return lf_nn_gated_mlp_forward_out(m, v, &bx.t, &by.t, &bw.t);
    /* the module's GPU and the caller's stream for the call; the thread's own put back after */
    const int was = lf_device_current(dev), index = lf_tensor_device_index(w);
    void *prev = NULL;
    LF_TRY(lf_device_select(dev, index));
    lf_status s = lf_cuda_get_stream(&prev);
    if (s == LF_OK && stream)
        s = lf_cuda_set_stream(*stream);
    if (s == LF_OK) {
        s = lf_nn_gated_mlp_forward_out(m, v, &bx.t, &by.t, &bw.t);
        if (stream)
            lf_cuda_set_stream(prev);
    }
    if (was != index)
        lf_device_select(dev, was);
    return s;
}
