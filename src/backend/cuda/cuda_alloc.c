/* The CUDA backend's memory: a caching allocator (freed blocks are kept by size and handed out
 * again, as PyTorch's caching allocator does, so steady-state forwards never call cudaMalloc)
 * and host copies. Registered with the tensor layer when the device starts. A block belongs to
 * the stream it was taken for (linfuse's own, or the caller's: lf_cuda_set_stream) and is handed
 * out again only for that stream: work queued there that still reads it runs before any later
 * work that reuses it, so nothing is synchronized, whatever streams the caller uses.
 * Layer: backend/cuda. */
#include <pthread.h>
#include <stdlib.h>

#include "backend/cuda/cuda_impl.h"
#include "tensor/tensor_impl.h"

typedef struct block {
    void *p;
    size_t size;
    cudaStream_t stream; /* the stream it was taken for */
} block;

/* One cache per GPU: a block is only ever handed out again on the GPU it came from. */
typedef struct pool_t {
    block *free;
    size_t n, cap;
    int64_t reserved; /* everything cudaMalloc gave us and we still hold: in use + cached */
} pool_t;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pool_t pools[LF_CUDA_MAX_DEVICES];

static size_t round_size(size_t n)
{
    return n < 512 ? 512 : (n + 511) & ~(size_t)511;
}

/* Give every block cached for GPU k back to the driver (before retrying an allocation that
 * failed there). */
static void release_pool(int k)
{
    pthread_mutex_lock(&pool_lock);
    pool_t *pl = &pools[k];
    for (size_t i = 0; i < pl->n; i++) {
        cudaFree(pl->free[i].p);
        pl->reserved -= (int64_t)pl->free[i].size;
    }
    pl->n = 0;
    pthread_mutex_unlock(&pool_lock);
}

static void *cu_alloc(size_t n, int *index, void **tag, void *ctx)
{
    (void)ctx;
    lf_cuda_dev *d = lf_cuda_cur();
    if (!d)
        return NULL;
    const int k = d->ordinal;
    const cudaStream_t stream = lf_cuda_stream(d);
    *index = k;
    *tag = (void *)stream;
    n = round_size(n);
    pthread_mutex_lock(&pool_lock);
    pool_t *pl = &pools[k];
    for (size_t i = 0; i < pl->n; i++)
        if (pl->free[i].size == n && pl->free[i].stream == stream) {
            void *p = pl->free[i].p;
            pl->free[i] = pl->free[--pl->n];
            pthread_mutex_unlock(&pool_lock);
            return p;
        }
    pthread_mutex_unlock(&pool_lock);
    void *p = NULL;
    /* A caller capturing a graph on its stream (torch.cuda.graph) would have its capture
     * invalidated by cudaMalloc in the global mode: cudaMalloc is no stream work, and relaxed
     * mode lets it run, as PyTorch's own allocator does (and lf_cuda_workspace). */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) { /* out of memory: give the cache back, try once more */
        cudaGetLastError();
        release_pool(k);
        e = cudaMalloc(&p, n);
    }
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (LF_CU_CHECK(RUNTIME, e) != LF_OK)
        return NULL; /* the tensor layer reports LF_ENOMEM with the size */
    pthread_mutex_lock(&pool_lock);
    pl->reserved += (int64_t)n;
    pthread_mutex_unlock(&pool_lock);
    return p;
}

/* Blocks go back to their GPU's pool under the stream they were taken for; work queued there that
 * still reads them runs before any later work that reuses them, so no synchronization is needed.
 * (Work queued on a collective's side stream is joined back into that stream before its op
 * returns.) */
static void cu_free(void *p, size_t n, int index, void *tag, void *ctx)
{
    (void)ctx;
    pthread_mutex_lock(&pool_lock);
    pool_t *pl = &pools[index];
    if (pl->n == pl->cap) {
        size_t cap = pl->cap ? 2 * pl->cap : 64;
        block *b = realloc(pl->free, cap * sizeof *b);
        if (!b) {
            pl->reserved -= (int64_t)round_size(n);
            pthread_mutex_unlock(&pool_lock);
            cudaFree(p);
            return;
        }
        pl->free = b;
        pl->cap = cap;
    }
    pl->free[pl->n++] = (block){p, round_size(n), (cudaStream_t)tag};
    pthread_mutex_unlock(&pool_lock);
}

static int64_t cu_reserved(int index, void *ctx)
{
    (void)ctx;
    pthread_mutex_lock(&pool_lock);
    int64_t r = pools[index].reserved;
    pthread_mutex_unlock(&pool_lock);
    return r;
}

/* A copy on the stream of the GPU that holds the device side (made current for the copy). */
static int cu_copy(void *dst, const void *src, size_t n, int to_host, int index, void *ctx)
{
    (void)ctx;
    lf_cuda_dev *d = lf_cuda_dev_get(index);
    int prev = index;
    if (!d || LF_CU_CHECK(RUNTIME, cudaGetDevice(&prev)) != LF_OK)
        return -1;
    lf_status s = prev == index ? LF_OK : LF_CU_CHECK(RUNTIME, cudaSetDevice(index));
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaMemcpyAsync(dst, src, n, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                                 lf_cuda_stream(d)));
    if (s == LF_OK) /* a host copy is finished when it returns, after the stream's earlier work */
        s = LF_CU_CHECK(RUNTIME, cudaStreamSynchronize(lf_cuda_stream(d)));
    if (prev != index)
        cudaSetDevice(prev);
    return s == LF_OK ? 0 : -1;
}

void lf_cuda_alloc_register(void)
{
    lf_allocator a = {cu_alloc, cu_free, cu_copy, cu_reserved, NULL};
    lf_tensor_set_allocator(LF_DEVICE_CUDA, &a);
}
