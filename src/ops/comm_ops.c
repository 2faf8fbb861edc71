/* Collectives as ops: the communicator (one rank of a group, over the device's library) and
 * lf::all_reduce, traced the way PyTorch's c10d::allreduce_ is: the op, record_param_comms
 * inside it (its arguments say which collective, how many elements, which rank of how many),
 * the library's own span (nccl:all_reduce) and the kernel it launches. linfuse/dist.h decides
 * how ranks find each other; this file only asks the device. Layer: ops/. */
#include <stdlib.h>
#include <string.h>

#include "ops/comm.h"

lf_status lf_comm_new_id(lf_device dev, unsigned char id[LF_COMM_ID_BYTES])
{
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    if (!b->comm_unique_id)
        return lf_fail(LF_EUNSUPPORTED, "collectives: %s has no communication library (cuda has NCCL)",
                       lf_device_name(dev));
    return b->comm_unique_id(id);
}

static lf_status comm_wrap(lf_comm **out, const lf_backend_ops *b, lf_device dev, int unit, void *handle, int rank,
                           int world)
{
    lf_comm *c = calloc(1, sizeof *c);
    if (!c) {
        b->comm_free(handle);
        return lf_fail(LF_ENOMEM, "collectives: out of memory");
    }
    *c = (lf_comm){b, handle, dev, unit, rank, world, {0}};
    const char *lib = b->comm_library ? b->comm_library() : NULL;
    snprintf(c->library, sizeof c->library, "%s", lib ? lib : b->name);
    *out = c;
    return LF_OK;
}

lf_status lf_comm_create(lf_comm **out, lf_device dev, const unsigned char id[LF_COMM_ID_BYTES], int rank, int world)
{
    *out = NULL;
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    if (!b->comm_init)
        return lf_fail(LF_EUNSUPPORTED, "collectives: %s has no communication library (cuda has NCCL)",
                       lf_device_name(dev));
    void *h = NULL;
    LF_TRY(b->comm_init(&h, id, rank, world));
    return comm_wrap(out, b, dev, lf_device_current(dev), h, rank, world);
}

lf_status lf_comm_create_all(lf_comm **out, lf_device dev, int n)
{
    const lf_backend_ops *b = lf_backend_for(dev);
    if (!b)
        return LF_EDEVICE;
    if (!b->comm_init_all)
        return lf_fail(LF_EUNSUPPORTED, "collectives: %s has no communication library (cuda has NCCL)",
                       lf_device_name(dev));
    if (n < 1 || n > LF_MAX_DEVICE_INDEX)
        return lf_fail(LF_EINVAL, "collectives: %d ranks, expected 1 to %d", n, LF_MAX_DEVICE_INDEX);
    void *h[LF_MAX_DEVICE_INDEX] = {0};
    LF_TRY(b->comm_init_all(h, n));
    lf_status s = LF_OK;
    for (int i = 0; i < n; i++) {
        if (s == LF_OK)
            s = comm_wrap(&out[i], b, dev, i, h[i], i, n);
        else
            b->comm_free(h[i]);
    }
    if (s != LF_OK)
        for (int i = 0; i < n; i++) {
            lf_comm_destroy(out[i]);
            out[i] = NULL;
        }
    return s;
}

void lf_comm_destroy(lf_comm *c)
{
    if (!c)
        return;
    c->b->comm_free(c->handle);
    free(c);
}

static lf_status check_comm(const char *fn, const lf_tensor *t, const lf_comm *comm)
{
    if (!comm)
        return lf_fail(LF_EINVAL, "%s: argument 'comm' is NULL", fn);
    LF_TRY(lf_check_tensor(fn, "t", t));
    if (!lf_tensor_is_contiguous(t))
        return lf_fail(LF_EINVAL, "%s: t must be contiguous (use lf_contiguous)", fn);
    if (lf_tensor_device(t) != comm->dev || lf_tensor_device_index(t) != comm->unit)
        return lf_fail(LF_EDEVICE, "%s: t is on %s:%d, the communicator on %s:%d", fn,
                       lf_device_name(lf_tensor_device(t)), lf_tensor_device_index(t), lf_device_name(comm->dev),
                       comm->unit);
    return LF_OK;
}

static lf_status launch_impl(lf_tensor *t, lf_comm *comm, int async)
{
    lf_collective x = {comm->handle, lf_tensor_data(t), t->dtype, lf_tensor_numel(t), async};
    return lf_launch_collective(comm->dev, &x, 0);
}

/* record_param_comms: PyTorch's span around a collective's launch, whose arguments name it. The
 * profiler turns (t, rank, group size) into Kineto's "Collective name", "dtype", "In msg nelems"
 * and the rest. */
static lf_status record_param_comms(lf_tensor *t, lf_comm *comm, int async)
{
    lf_op_arg args[] = {LF_ARG(t), LF_ARG_SCALAR(comm->rank), LF_ARG_SCALAR(comm->world)};
    lf_tensor **none = NULL;
    LF_DISPATCH(RECORD_PARAM_COMMS, args, none, launch_impl(t, comm, async));
}

static lf_status all_reduce_impl(lf_tensor *t, lf_comm *comm, int async)
{
    LF_TRY(check_comm("lf_all_reduce", t, comm));
    if (comm->world == 1)
        return LF_OK; /* a group of one: the sum is t */
    return record_param_comms(t, comm, async);
}

lf_status lf_all_reduce(lf_tensor *t, lf_comm *comm, int async)
{
    lf_op_arg args[] = {LF_ARG(t)};
    lf_tensor **none = NULL;
    LF_DISPATCH(ALL_REDUCE, args, none, all_reduce_impl(t, comm, async));
}

lf_status lf_comm_wait(lf_comm *comm)
{
    if (!comm)
        return lf_fail(LF_EINVAL, "lf_comm_wait: argument 'comm' is NULL");
    return comm->world == 1 ? LF_OK : lf_launch_comm_wait(comm->dev, comm->handle, 0);
}
