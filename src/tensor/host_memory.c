/* Host tensor memory: 64-byte aligned blocks, and a cache of freed large blocks handed out again
 * at the same size, as the CUDA backend's allocator does for the GPU.
 *
 * Why a cache: glibc gives large blocks back to the kernel (blocks over its mmap threshold are
 * unmapped when freed; the top of its heap is trimmed once it is free beyond its trim threshold),
 * and the next forward's tensors then land on fresh pages, each faulted in by the kernel that
 * first writes it. On a 2-core machine the eager MLP's gelu and mul each took 12-13 ms a call in
 * the first profiled window instead of about 1 (`simple-mlp --batch 8 --repeat 3`), in every
 * window with a plain malloc, and `kernels-mlp` paid it in its first two (bench/RESULTS.md,
 * 2026-12-01, 8393e07). glibc's tunables are the process's,
 * not a library's to set. So blocks of CACHE_MIN bytes or more are kept when freed, up to a cap
 * (a sixteenth of physical memory, at most 1 GiB: a forward's intermediates, not every one-off
 * host copy a GPU program makes; LINFUSE_HOST_CACHE_MB sets it, 0 turns the cache off; past it a
 * freed block goes back to the system), and every cached block goes back when an allocation
 * fails. Smaller blocks stay with malloc, which reuses them on its heap.
 *
 * Why not aligned_alloc: glibc's memalign asks its heap for n + the alignment + a header and
 * gives back the rest, so a block one forward frees is a few bytes too small for the same
 * request in the next. Blocks are a plain malloc of n + PAD bytes, aligned by hand, the block's
 * own address kept 16 bytes before the tensor's.
 *
 * Under AddressSanitizer everything around a tensor but that address is poisoned (an access a
 * byte before or past it is caught), and so is a cached block (a use after free is caught as a
 * use after poison). Layer: tensor/. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linfuse/settings.h"
#include "tensor/tensor_impl.h"

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define POISON(p, n)   ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define PAD       80                /* the address (16 before the tensor), up to 63 to reach 64, 1 past */
#define CACHE_MIN ((size_t)1 << 17) /* glibc's first mmap threshold, 128 KiB */
#define PAGE      ((size_t)4096)

typedef struct block {
    char *p;
    size_t size; /* the block's capacity: a request rounded up to a page */
} block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block *cache; /* reachable, so leak checkers see no leak */
static size_t n_cached, cap_blocks;
static size_t cached_bytes; /* in the cache */
/* from the system: in use plus cached (the profiler's "Total Reserved"); atomic, so that a block
 * too small to cache is taken and given back without the lock */
static atomic_llong held_bytes;
static size_t cache_limit; /* limit()'s answer */

/* The cache's cap in bytes, decided on first use (under the lock). */
static size_t limit(void)
{
    static int decided;
    if (!decided) {
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        const size_t phys = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : (size_t)8 << 30;
        cache_limit = phys / 16 < ((size_t)1 << 30) ? phys / 16 : (size_t)1 << 30;
        cache_limit = (size_t)lf_setting_int_or(LF_SET_HOST_CACHE_MB, (int64_t)(cache_limit >> 20)) << 20;
        decided = 1;
    }
    return cache_limit;
}

/* What a request of n bytes holds: a cached size is rounded up to a page, so that requests a few
 * bytes apart share blocks. */
static size_t block_size(size_t n)
{
    return n >= CACHE_MIN ? (n + PAGE - 1) & ~(PAGE - 1) : n;
}

/* n usable bytes from the system, 64-byte aligned; everything around them poisoned. */
static char *take(size_t n)
{
    char *raw = malloc(n + PAD);
    if (!raw)
        return NULL;
    char *p = (char *)(((uintptr_t)raw + 16 + 63) & ~(uintptr_t)63);
    memcpy(p - 16, &raw, sizeof raw);
    POISON(raw, (size_t)(p - 16 - raw));
    POISON(p - 16 + sizeof raw, 16 - sizeof raw);
    POISON(p + n, (size_t)(raw + n + PAD - (p + n)));
    return p;
}

static void give_back(char *p)
{
    char *raw;
    memcpy(&raw, p - 16, sizeof raw);
    free(raw); /* ASan's free takes the whole block back, poisoning and all */
}

/* Every cached block back to the system (before retrying an allocation that failed). */
static void release_cache(void)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_cached; i++) {
        give_back(cache[i].p);
        atomic_fetch_sub(&held_bytes, (long long)cache[i].size);
    }
    n_cached = 0, cached_bytes = 0;
    pthread_mutex_unlock(&lock);
}

void *lf_host_alloc(size_t n, int *index, void **tag, void *ctx)
{
    (void)ctx;
    *tag = NULL;
    *index = 0;
    if (n > SIZE_MAX - PAD - PAGE)
        return NULL;
    const size_t size = block_size(n);
    if (n >= CACHE_MIN) {
        pthread_mutex_lock(&lock);
        for (size_t i = n_cached; i-- > 0;) /* the most recently freed first: still warm */
            if (cache[i].size == size) {
                char *p = cache[i].p;
                cache[i] = cache[--n_cached];
                cached_bytes -= size;
                pthread_mutex_unlock(&lock);
                UNPOISON(p, n);
                return p;
            }
        pthread_mutex_unlock(&lock);
    }
    char *p = take(size);
    if (!p) { /* out of memory: give the cache back, try once more */
        release_cache();
        p = take(size);
    }
    if (!p)
        return NULL; /* the tensor layer reports LF_ENOMEM with the size */
    if (size > n)
        POISON(p + n, size - n);
    atomic_fetch_add(&held_bytes, (long long)size);
    return p;
}

void lf_host_free(void *p, size_t n, int index, void *tag, void *ctx)
{
    (void)index, (void)tag, (void)ctx;
    if (!p)
        return;
    const size_t size = block_size(n);
    if (n >= CACHE_MIN) {
        POISON(p, size); /* before another thread can take it from the cache */
        pthread_mutex_lock(&lock);
        if (cached_bytes + size <= limit() && n_cached == cap_blocks) {
            const size_t cap = cap_blocks ? 2 * cap_blocks : 64;
            block *b = realloc(cache, cap * sizeof *b);
            if (b)
                cache = b, cap_blocks = cap;
        }
        const int keep = cached_bytes + size <= limit() && n_cached < cap_blocks;
        if (keep)
            cache[n_cached++] = (block){(char *)p, size}, cached_bytes += size;
        pthread_mutex_unlock(&lock);
        if (keep)
            return;
    }
    atomic_fetch_sub(&held_bytes, (long long)size);
    give_back(p);
}

int64_t lf_host_reserved(int index, void *ctx)
{
    (void)index, (void)ctx;
    return (int64_t)atomic_load(&held_bytes);
}
