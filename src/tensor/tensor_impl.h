/* Internal view of the tensor layer: storage layout, per-device allocators, shape helpers used
 * by ops/ (reshape, contiguous) and backends. Layer: tensor/. */
#ifndef LF_TENSOR_IMPL_H
#define LF_TENSOR_IMPL_H

#include <stdatomic.h>

#include "core/core.h"
#include "linfuse/tensor.h"

struct lf_storage {
    atomic_int refs;
    lf_device device;
    int index; /* which unit of the device (a GPU's ordinal; 0 on the CPU) */
    size_t nbytes;
    void *data;
    /* memory the tensor layer did not allocate (lf_tensor_from_memory): given back through this
     * when the last view goes, instead of the device's allocator; NULL otherwise */
    void (*release)(void *ctx);
    void *release_ctx;
    void *tag; /* what the allocator said of the block (CUDA: the stream it was taken for) */
};

/* How bytes are obtained on a device. The CPU's is built in; a device backend registers its own
 * when it starts (so tensor/ never calls a backend). A device may have several units (GPUs):
 * alloc takes memory on the calling thread's unit and says which in *index, and may tag the block
 * (*tag: CUDA's allocator notes the stream the block is used on); free, copy and reserved are told
 * the unit, free the tag too. */
typedef struct lf_allocator {
    void *(*alloc)(size_t nbytes, int *index, void **tag, void *ctx); /* NULL on failure */
    void (*free)(void *p, size_t nbytes, int index, void *tag, void *ctx);
    /* Copy n bytes between unit index of this device and the host (to_host says which way),
     * finished when it returns. NULL for the CPU. */
    int (*copy)(void *dst, const void *src, size_t n, int to_host, int index, void *ctx);
    /* Bytes held from unit index: in use plus cached for reuse (PyTorch's "Total Reserved").
     * NULL when the allocator caches nothing, so reserved is what is in use. */
    int64_t (*reserved)(int index, void *ctx);
    void *ctx;
} lf_allocator;

void lf_tensor_set_allocator(lf_device dev, const lf_allocator *a);

/* t as a valid tensor (fn and name for the message): not NULL, a storage, 1 to LF_MAX_DIMS dims,
 * a known dtype (LF_EINVAL); every element it names inside its storage (LF_ESHAPE: the struct is
 * public, so its geometry may have been edited); its element count in 63 bits (LF_EOVERFLOW).
 * Every function here that walks a tensor's elements or copies its geometry asks it first, and
 * so does the ops layer (with its own checks of dtype and device on top). */
lf_status lf_tensor_check(const char *fn, const char *name, const lf_tensor *t);

/* Memory from the caller: while an arena is set on a thread, every tensor that thread creates on
 * the arena's device is carved from the arena's bytes (256-byte aligned, in order, never given
 * back) instead of taken from the allocator, so an out= forward (lf_nn_gated_mlp_forward_out)
 * runs in the caller's workspace and linfuse allocates nothing. Running out is LF_ENOMEM naming
 * both sizes. lf_tensor_arena_set returns the arena it replaces (NULL: none), to be set back. */
typedef struct lf_arena {
    lf_device dev;
    int index;  /* the unit its memory is on */
    char *base; /* size bytes */
    size_t size, used;
} lf_arena;
lf_arena *lf_tensor_arena_set(lf_arena *a);

/* The CPU's allocator (host_memory.c): 64-byte aligned blocks, large ones cached for reuse. */
void *lf_host_alloc(size_t nbytes, int *index, void **tag, void *ctx);
void lf_host_free(void *p, size_t nbytes, int index, void *tag, void *ctx);
int64_t lf_host_reserved(int index, void *ctx);

/* Called when a tensor is wanted on a device with no allocator yet, so a backend that starts
 * lazily can start (and register its allocator). Set by the backend layer at load time. */
void lf_tensor_set_device_starter(int (*start)(lf_device dev));

/* Check ndim and every dim (>= 1), and that numel and bytes fit; names `what` in messages. */
lf_status lf_shape_check(const char *what, int ndim, const int64_t *shape, lf_dtype dt, int64_t *numel);

/* Row-major strides for shape. */
void lf_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);

/* Resolve one -1 in shape_io against numel (errors name `what`), and check the product. */
lf_status lf_shape_infer(const char *what, int ndim, int64_t *shape_io, int64_t numel);

/* Strides that let t be seen with shape (already resolved), as PyTorch's view rules allow;
 * 0 when only a copy can give that shape. */
int lf_view_strides(const lf_tensor *t, int ndim, const int64_t *shape, int64_t *stride_out);

/* A tensor over memory the tensor layer did not allocate, on unit `index` of dev, the storage's
 * nbytes from data: release(ctx) runs when its last view goes (NULL: the memory is the caller's).
 * No checks beyond the allocation (what: the caller's name, for the error): lf_tensor_from_memory,
 * lf_tensor_from_dlpack and the gated MLP's raw forward check the geometry first. */
lf_status lf_tensor_over(lf_tensor **out, const char *what, lf_device dev, int index, lf_dtype dt, int ndim,
                         const int64_t *shape, const int64_t *stride, int64_t offset, void *data, size_t nbytes,
                         void (*release)(void *ctx), void *ctx);

/* A new handle over t's storage with the given geometry (no checks beyond the allocation). */
lf_status lf_tensor_alias(lf_tensor **out, const lf_tensor *t, int ndim, const int64_t *shape, const int64_t *stride,
                          int64_t offset);

#endif
