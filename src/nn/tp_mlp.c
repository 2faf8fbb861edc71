/* The MLP split over ranks as Megatron-LM splits it (nn.h): sharding a full module, and the
 * forward that sums the ranks' partial outputs with one all-reduce, in token chunks so that a
 * chunk's all-reduce runs while the next chunk computes. Layer: nn/ (on ops/, and distributed/'s
 * communicators). */
#include <string.h>

#include "core/core.h"
#include "linfuse/dist.h"
#include "linfuse/nn.h"

int lf_nn_tp_chunks(int64_t tokens)
{
    /* Measured on 2 x H200 over NVLink (bench/RESULTS.md, "tensor parallel"): splitting the
     * tokens lost at every shape and count tried, 6-41% (16 to 8192 tokens, 2 and 4 chunks, with
     * NCCL's LL, LL128 and Simple protocols): a chunk's GEMMs are smaller, and the NCCL kernel
     * running beside them takes SMs the GEMMs' waves were sized for. So the choice is one pass
     * at every size: overlap stays a flag (--chunks) until a GEMM that leaves SMs to NCCL makes
     * it pay. */
    (void)tokens;
    return 1;
}

lf_status lf_nn_tp_mlp_shard(lf_nn_tp_mlp *m, const lf_nn_gated_mlp *full, int rank, int world, lf_comm *comm,
                             lf_device dev)
{
    LF_CHECK_PTR(m, "lf_nn_tp_mlp_shard", "m");
    memset(m, 0, sizeof *m);
    LF_CHECK_PTR(full, "lf_nn_tp_mlp_shard", "full");
    if (!full->gate_up || !full->down.weight)
        return lf_fail(LF_EINVAL, "lf_nn_tp_mlp_shard: the full MLP is not initialised");
    const int64_t D = full->dim, H = full->hidden;
    if (world < 1 || rank < 0 || rank >= world)
        return lf_fail(LF_EINVAL, "lf_nn_tp_mlp_shard: rank %d of %d", rank, world);
    if (H % world)
        return lf_fail(LF_ESHAPE, "lf_nn_tp_mlp_shard: hidden %lld is not divisible by %d ranks", (long long)H, world);
    if (comm && (lf_comm_rank(comm) != rank || lf_comm_size(comm) != world))
        return lf_fail(LF_EINVAL, "lf_nn_tp_mlp_shard: the communicator is rank %d of %d, asked for %d of %d",
                       lf_comm_rank(comm), lf_comm_size(comm), rank, world);
    const lf_tensor *gu = full->gate_up, *dw = full->down.weight;
    if (lf_tensor_device(gu) != LF_DEVICE_CPU || lf_tensor_device(dw) != LF_DEVICE_CPU ||
        !lf_tensor_is_contiguous(gu) || !lf_tensor_is_contiguous(dw))
        return lf_fail(LF_EDEVICE, "lf_nn_tp_mlp_shard: shard from the full module on the cpu, contiguous "
                                   "(each rank then takes its part to its GPU)");
    const int64_t h = H / world;
    const size_t es = lf_dtype_size(gu->dtype);
    lf_tensor *gur = NULL, *dwr = NULL;
    int64_t gs[2] = {2 * h, D}, ds[2] = {D, h};
    lf_status s = lf_tensor_empty(&gur, gu->dtype, 2, gs, LF_DEVICE_CPU);
    if (s == LF_OK)
        s = lf_tensor_empty(&dwr, dw->dtype, 2, ds, LF_DEVICE_CPU);
    if (s != LF_OK) {
        lf_tensor_free(gur);
        return s;
    }
    /* [Wg_r; Wu_r]: rows r*h.. of the gate half, then the same rows of the up half */
    const char *src = lf_tensor_data(gu);
    char *dst = lf_tensor_data(gur);
    memcpy(dst, src + (size_t)(rank * h * D) * es, (size_t)(h * D) * es);
    memcpy(dst + (size_t)(h * D) * es, src + (size_t)((H + rank * h) * D) * es, (size_t)(h * D) * es);
    /* Wd's columns r*h.. : row i of the shard is a piece of row i of Wd */
    const char *dsrc = lf_tensor_data(dw);
    char *ddst = lf_tensor_data(dwr);
    for (int64_t i = 0; i < D; i++)
        memcpy(ddst + (size_t)(i * h) * es, dsrc + (size_t)(i * H + rank * h) * es, (size_t)h * es);
    s = lf_nn_gated_mlp_from_weights(&m->local, gur, dwr, full->act);
    if (s == LF_OK && dev != LF_DEVICE_CPU)
        s = lf_nn_gated_mlp_to_device(&m->local, dev);
    if (s != LF_OK) {
        lf_nn_gated_mlp_free(&m->local);
        memset(m, 0, sizeof *m);
        return s;
    }
    m->rank = rank, m->world = world, m->dim = D, m->hidden = H, m->comm = comm;
    return LF_OK;
}

/* rows [r0, r1) of the contiguous (T, cols) tensor t, as a view */
static lf_status rows(lf_tensor **out, const lf_tensor *t, int64_t r0, int64_t r1)
{
    const int64_t cols = t->shape[1], shape[2] = {r1 - r0, cols}, stride[2] = {cols, 1};
    return lf_tensor_as_strided(out, t, 2, shape, stride, t->offset + r0 * cols);
}

/* The partial output, summed over the group when `sum`: x (..., dim) -> (..., dim). */
static lf_status forward(const lf_nn_tp_mlp *m, lf_mlp_variant v, const lf_tensor *x, lf_tensor **y, int sum)
{
    LF_CHECK_PTR(m, "lf_nn_tp_mlp_forward", "m");
    LF_CHECK_PTR(y, "lf_nn_tp_mlp_forward", "y");
    *y = NULL;
    LF_CHECK_PTR(x, "lf_nn_tp_mlp_forward", "x");
    if (!m->local.gate_up)
        return lf_fail(LF_EINVAL, "lf_nn_tp_mlp_forward: the module is not sharded");
    const int64_t D = m->dim;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != D)
        return lf_fail(LF_ESHAPE, "lf_nn_tp_mlp_forward: x's last dim is %lld, expected dim = %lld",
                       x->ndim ? (long long)x->shape[x->ndim - 1] : 0LL, (long long)D);
    const int64_t T = lf_tensor_numel(x) / D, flat[2] = {T, D};
    const int group = sum && m->comm && m->world > 1;
    int chunks = m->chunks > 0 ? m->chunks : lf_nn_tp_chunks(T);
    if (!group || chunks > T)
        chunks = group ? (int)T : 1; /* without a sum there is nothing to overlap */
    const int64_t step = (T + chunks - 1) / chunks;
    lf_tensor *x2 = NULL, *xc = NULL, *out = NULL, *wt = NULL;
    lf_status s = lf_reshape(&x2, x, 2, flat);
    if (s == LF_OK && !lf_tensor_is_contiguous(x2)) {
        lf_tensor *c = NULL;
        s = lf_contiguous(&c, x2);
        lf_tensor_free(x2);
        x2 = c;
    }
    if (s == LF_OK)
        s = lf_tensor_empty(&out, x->dtype, 2, flat, lf_tensor_device(x));
    if (s == LF_OK)
        s = lf_t(&wt, m->local.down.weight); /* (h, D): read in place, layout tn */
    int pending = 0;
    for (int64_t r0 = 0; r0 < T && s == LF_OK; r0 += step) {
        const int64_t r1 = r0 + step < T ? r0 + step : T;
        lf_tensor *h = NULL, *yc = NULL;
        s = chunks == 1 ? lf_tensor_as_strided(&xc, x2, 2, flat, x2->stride, x2->offset) : rows(&xc, x2, r0, r1);
        if (s == LF_OK)
            s = lf_nn_gated_mlp_middle(&m->local, v, xc, &h);
        if (s == LF_OK)
            s = chunks == 1 ? lf_tensor_as_strided(&yc, out, 2, flat, out->stride, 0) : rows(&yc, out, r0, r1);
        if (s == LF_OK)
            s = lf_mm_out(yc, h, wt);
        /* chunk i sums on the communicator's stream while chunk i+1 computes; out's storage stays
         * alive (and untouched by this rank) until the wait below */
        if (s == LF_OK && group)
            s = lf_all_reduce(yc, m->comm, chunks > 1);
        pending |= s == LF_OK && group && chunks > 1;
        lf_tensor_free(h);
        lf_tensor_free(yc);
        lf_tensor_free(xc);
        xc = NULL;
    }
    if (pending) {
        lf_status w = lf_comm_wait(m->comm); /* also after a failure: out may not go while it is summed */
        if (s == LF_OK)
            s = w;
    }
    if (s == LF_OK)
        s = lf_view(y, out, x->ndim, x->shape);
    lf_tensor_free(wt);
    lf_tensor_free(x2);
    lf_tensor_free(out);
    return s;
}

lf_status lf_nn_tp_mlp_forward_partial(const lf_nn_tp_mlp *m, lf_mlp_variant v, const lf_tensor *x, lf_tensor **y)
{
    return forward(m, v, x, y, 0);
}

lf_status lf_nn_tp_mlp_forward(const lf_nn_tp_mlp *m, lf_mlp_variant v, const lf_tensor *x, lf_tensor **y)
{
    return forward(m, v, x, y, 1);
}

void lf_nn_tp_mlp_free(lf_nn_tp_mlp *m)
{
    if (!m)
        return;
    lf_nn_gated_mlp_free(&m->local);
    memset(m, 0, sizeof *m);
}
