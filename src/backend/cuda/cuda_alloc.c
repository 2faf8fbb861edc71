/* The CUDA backend's memory: a caching allocator (freed blocks are kept by size and handed out
 * again, as PyTorch's caching allocator does, so steady-state forwards never call cudaMalloc)
 * and host copies. Registered with the tensor layer when the device starts.
 * Layer: backend/cuda. */
#include <pthread.h>
#include <stdlib.h>

#include "backend/cuda/cuda_impl.h"
#include "tensor/tensor_impl.h"

typedef struct block {
    void *p;
    size_t size;
} block;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static block *pool; /* free blocks */
static size_t pool_n, pool_cap;
static int64_t reserved_bytes; /* everything cudaMalloc gave us and we still hold: in use + pool */

static size_t round_size(size_t n)
{
    return n < 512 ? 512 : (n + 511) & ~(size_t)511;
}

/* Give every cached block back to the driver (before retrying an allocation that failed). */
static void release_pool(void)
{
    pthread_mutex_lock(&pool_lock);
    for (size_t i = 0; i < pool_n; i++) {
        cudaFree(pool[i].p);
        reserved_bytes -= (int64_t)pool[i].size;
    }
    pool_n = 0;
    pthread_mutex_unlock(&pool_lock);
}

static void *cu_alloc(size_t n, void *ctx)
{
    (void)ctx;
    n = round_size(n);
    pthread_mutex_lock(&pool_lock);
    for (size_t i = 0; i < pool_n; i++)
        if (pool[i].size == n) {
            void *p = pool[i].p;
            pool[i] = pool[--pool_n];
            pthread_mutex_unlock(&pool_lock);
            return p;
        }
    pthread_mutex_unlock(&pool_lock);
    void *p = NULL;
    if (LF_CU_CHECK(RUNTIME, cudaMalloc(&p, n)) != LF_OK) { /* out of memory: give the cache back, try once more */
        release_pool();
        if (LF_CU_CHECK(RUNTIME, cudaMalloc(&p, n)) != LF_OK)
            return NULL; /* the tensor layer reports LF_ENOMEM with the size */
    }
    pthread_mutex_lock(&pool_lock);
    reserved_bytes += (int64_t)n;
    pthread_mutex_unlock(&pool_lock);
    return p;
}

/* Blocks go back to the pool; work queued on the one stream that still reads them runs before
 * any later work that reuses them, so no synchronization is needed. */
static void cu_free(void *p, size_t n, void *ctx)
{
    (void)ctx;
    pthread_mutex_lock(&pool_lock);
    if (pool_n == pool_cap) {
        size_t cap = pool_cap ? 2 * pool_cap : 64;
        block *b = realloc(pool, cap * sizeof *b);
        if (!b) {
            reserved_bytes -= (int64_t)round_size(n);
            pthread_mutex_unlock(&pool_lock);
            cudaFree(p);
            return;
        }
        pool = b;
        pool_cap = cap;
    }
    pool[pool_n++] = (block){p, round_size(n)};
    pthread_mutex_unlock(&pool_lock);
}

static int64_t cu_reserved(void *ctx)
{
    (void)ctx;
    pthread_mutex_lock(&pool_lock);
    int64_t r = reserved_bytes;
    pthread_mutex_unlock(&pool_lock);
    return r;
}

static int cu_copy(void *dst, const void *src, size_t n, int to_host, void *ctx)
{
    (void)ctx;
    lf_status s = LF_CU_CHECK(RUNTIME, cudaMemcpyAsync(dst, src, n, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                                      lf_cuda.stream));
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaStreamSynchronize(lf_cuda.stream));
    return s == LF_OK ? 0 : -1;
}

void lf_cuda_alloc_register(void)
{
    lf_allocator a = {cu_alloc, cu_free, cu_copy, cu_reserved, NULL};
    lf_tensor_set_allocator(LF_DEVICE_CUDA, &a);
}
