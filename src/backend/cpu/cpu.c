/* CPU backend plumbing: which kernel set runs (chosen once from cpuid, or forced by tests),
 * how many threads, and the workspace pool that keeps steady-state calls allocation-free.
 * Layer: backend/cpu. */
#ifdef LF_HAVE_X86_KERNELS
#include <cpuid.h>
#endif
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "backend/cpu/cpu_impl.h"

/* The CPU is always available, and its kernels finish before they return: no start, no
 * synchronize, no event source (the profiler times its kernels around the call). */
const lf_backend_ops lf_cpu_backend_ops = {.name = "cpu",
                                           .memory = lf_cpu_memory,
                                           .gemm = lf_cpu_gemm,
                                           .gemm_supports = lf_cpu_gemm_supports,
                                           .gated_choose = lf_cpu_gated_choose,
                                           .pointwise = lf_cpu_pointwise,
                                           .quantize_fp8 = lf_cpu_quantize_fp8,
                                           .fused = lf_cpu_fused};

static const char *const isa_names[LF_CPU_ISA_COUNT] = {"scalar", "avx2", "avx512"};

const char *lf_cpu_isa_name(lf_cpu_isa isa)
{
    return (unsigned)isa < LF_CPU_ISA_COUNT ? isa_names[isa] : "?";
}

#ifdef LF_HAVE_X86_KERNELS
/* F16C (the half <-> float conversions every vector kernel set uses) from CPUID leaf 1, ECX bit
 * 29: __builtin_cpu_supports has no "f16c" in clang 14. AVX's OS support (the XSAVE state the
 * vector registers need) is what __builtin_cpu_supports("avx2") already checks. */
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}
#endif

int lf_cpu_has_bf16_dots(void)
{
#ifdef LF_HAVE_X86_KERNELS
    static atomic_int has = -1;
    int h = atomic_load_explicit(&has, memory_order_relaxed);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") ? 1 : 0;
        atomic_store_explicit(&has, h, memory_order_relaxed);
    }
    return h;
#else
    return 0;
#endif
}

lf_cpu_isa lf_cpu_isa_detect(void)
{
#ifdef LF_HAVE_X86_KERNELS
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("fma") || !has_f16c())
        return LF_CPU_ISA_SCALAR;
    if (__builtin_cpu_supports("avx512f"))
        return LF_CPU_ISA_AVX512;
    if (__builtin_cpu_supports("avx2"))
        return LF_CPU_ISA_AVX2;
#endif
    return LF_CPU_ISA_SCALAR;
}

static const lf_cpu_kernels *kernels_for(lf_cpu_isa isa)
{
    switch (isa) {
#ifdef LF_HAVE_X86_KERNELS
    case LF_CPU_ISA_AVX512:
        return &lf_cpu_kernels_avx512;
    case LF_CPU_ISA_AVX2:
        return &lf_cpu_kernels_avx2;
#endif
    default:
        return &lf_cpu_kernels_scalar;
    }
}

static _Atomic(const lf_cpu_kernels *) active_kernels;

const lf_cpu_kernels *lf_cpu_kernels_active(void)
{
    const lf_cpu_kernels *k = atomic_load_explicit(&active_kernels, memory_order_acquire);
    if (!k) { /* first use: racing threads all store the same pointer */
        k = kernels_for(lf_cpu_isa_detect());
        atomic_store_explicit(&active_kernels, k, memory_order_release);
    }
    return k;
}

lf_cpu_isa lf_cpu_isa_active(void)
{
    return lf_cpu_kernels_active()->isa;
}

lf_status lf_cpu_isa_force(lf_cpu_isa isa)
{
    if ((unsigned)isa >= LF_CPU_ISA_COUNT)
        return lf_fail(LF_EINVAL, "lf_cpu_isa_force: isa %d is not scalar, avx2 or avx512", (int)isa);
    if (isa > lf_cpu_isa_detect())
        return lf_fail(LF_EUNSUPPORTED, "lf_cpu_isa_force: this CPU (or build) has no %s; best is %s",
                       lf_cpu_isa_name(isa), lf_cpu_isa_name(lf_cpu_isa_detect()));
    atomic_store_explicit(&active_kernels, kernels_for(isa), memory_order_release);
    return LF_OK;
}

static atomic_int thread_override;

void lf_cpu_set_threads(int n)
{
    atomic_store(&thread_override, n > 0 ? n : 0);
}

int lf_cpu_threads(void)
{
    int n = atomic_load(&thread_override);
    return n > 0 ? n : omp_get_max_threads();
}

/* --- workspace pool --- */

struct lf_cpu_ws {
    lf_cpu_ws *next;
    size_t slot_bytes;
    int n_slots;
    char *mem;
};

static pthread_mutex_t ws_lock = PTHREAD_MUTEX_INITIALIZER;
static lf_cpu_ws *ws_free; /* free list: reachable, so leak checkers see no leak */

lf_status lf_cpu_ws_acquire(lf_cpu_ws **out, int n_threads, size_t bytes)
{
    bytes = (bytes + 63) & ~(size_t)63;
    pthread_mutex_lock(&ws_lock);
    lf_cpu_ws **pp = &ws_free, *ws = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->n_slots >= n_threads && (*pp)->slot_bytes >= bytes) {
            ws = *pp;
            *pp = ws->next;
            break;
        }
    if (!ws && ws_free) { /* none fits: drop one too-small block rather than hoard it */
        lf_cpu_ws *old = ws_free;
        ws_free = old->next;
        free(old->mem);
        free(old);
    }
    pthread_mutex_unlock(&ws_lock);
    if (!ws) {
        size_t total;
        if (__builtin_mul_overflow(bytes, (size_t)n_threads, &total))
            return lf_fail(LF_EOVERFLOW, "cpu gemm: workspace size overflows");
        ws = malloc(sizeof *ws);
        char *mem = ws ? aligned_alloc(64, total) : NULL;
        if (!mem) {
            free(ws);
            return lf_fail(LF_ENOMEM, "cpu gemm: could not allocate a %zu-byte workspace", total);
        }
        ws->slot_bytes = bytes;
        ws->n_slots = n_threads;
        ws->mem = mem;
    }
    ws->next = NULL;
    *out = ws;
    return LF_OK;
}

void *lf_cpu_ws_slot(lf_cpu_ws *ws, int thread)
{
    return ws->mem + (size_t)thread * ws->slot_bytes;
}

void lf_cpu_ws_release(lf_cpu_ws *ws)
{
    pthread_mutex_lock(&ws_lock);
    ws->next = ws_free;
    ws_free = ws;
    pthread_mutex_unlock(&ws_lock);
}
