/* The gated MLP's forward over memory a binding already holds (linfuse/nn.h): the three arrays
 * wrapped here for the one call, the caller's stream set for it and put back after. A framework's
 * eager decode calls this once per layer and token; through lf_nn_gated_mlp_forward_out it would
 * make three lf_tensors (three DLPack exports from Python), select the device and swap the stream
 * around the call, each a crossing into C (in Python's ctypes, microseconds each:
 * bench/RESULTS.md). Layer: nn/. */

#include "core/core.h"
#include "linfuse/backend.h"
#include "linfuse/cuda.h"
#include "linfuse/nn.h"
#include "tensor/tensor_impl.h"

/* A view of memory linfuse does not own, on w's device and in w's dtype: rows x cols elements at
 * row stride rs (unit column stride; rows 0: one dimension of cols). Refcounted as any tensor: a
 * compiled plan being captured may keep a reference to an input past the call (as it keeps any
 * tensor it takes for a constant). */
static lf_status borrow(lf_tensor **out, const lf_tensor *w, const void *data, int64_t rows, int64_t cols, int64_t rs,
                        size_t nbytes)
{
    const int64_t shape[2] = {rows ? rows : cols, cols}, stride[2] = {rows ? rs : 1, 1};
    return lf_tensor_over(out, "lf_nn_gated_mlp_forward_raw", lf_tensor_device(w), lf_tensor_device_index(w), w->dtype,
                          rows ? 2 : 1, shape, stride, 0, (void *)data, nbytes, NULL, NULL);
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

/* The forward on the module's GPU (selected for the thread, as a call on its tensors would) and,
 * where stream is given, on *stream, the thread's stream put back after. */
static lf_status run_on_gpu(const lf_nn_gated_mlp *m, lf_mlp_variant v, const lf_tensor *x, lf_tensor *y, lf_tensor *ws,
                            void *const *stream)
{
    LF_TRY(lf_device_select(lf_tensor_device(m->gate_up), lf_tensor_device_index(m->gate_up)));
    if (!stream)
        return lf_nn_gated_mlp_forward_out(m, v, x, y, ws);
    void *prev = NULL;
    LF_TRY(lf_cuda_get_stream(&prev));
    LF_TRY(lf_cuda_set_stream(*stream));
    const lf_status s = lf_nn_gated_mlp_forward_out(m, v, x, y, ws);
    if (lf_cuda_set_stream(prev) != LF_OK && s == LF_OK)
        return LF_EDEVICE; /* said by lf_cuda_set_stream */
    return s;
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
    if (workspace_bytes < es)
        return lf_fail(LF_EINVAL,
                       "%s: %zu workspace bytes hold no %s element (lf_nn_gated_mlp_workspace says how many)", fn,
                       workspace_bytes, lf_dtype_name(w->dtype));
    lf_tensor *tx = NULL, *ty = NULL, *tw = NULL;
    lf_status s = borrow(&tx, w, x, rows, m->dim, x_rs, xb);
    if (s == LF_OK)
        s = borrow(&ty, w, y, rows, m->dim, y_rs, yb);
    if (s == LF_OK)
        s = borrow(&tw, w, workspace, 0, (int64_t)(workspace_bytes / es), 0, workspace_bytes / es * es);
    if (s == LF_OK)
        s = lf_tensor_device(w) == LF_DEVICE_CPU ? lf_nn_gated_mlp_forward_out(m, v, tx, ty, tw)
                                                 : run_on_gpu(m, v, tx, ty, tw, stream);
    lf_tensor_free(tx), lf_tensor_free(ty), lf_tensor_free(tw);
    return s;
}
