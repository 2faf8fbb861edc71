/* The CPU backend's settings: how many threads it uses, and which instruction set its kernels
 * run (the best this CPU has, unless forced: benches and tests compare them); and a GEMM's B
 * packed once, for products that share a B (an inference weight).
 * Layer: backend/cpu, seen from above. */
#ifndef LINFUSE_CPU_H
#define LINFUSE_CPU_H

#include "linfuse/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads the CPU backend uses: n when set, else OpenMP's count (OMP_NUM_THREADS when the
 * environment sets it, else one per core the process may run on). n <= 0 restores the default.
 * Small GEMMs and pointwise kernels use one thread whatever the count (waking workers would
 * cost more than they give). */
LF_API void lf_cpu_set_threads(int n);
LF_API int lf_cpu_threads(void);

typedef enum lf_cpu_isa { LF_CPU_ISA_SCALAR, LF_CPU_ISA_AVX2, LF_CPU_ISA_AVX512, LF_CPU_ISA_COUNT } lf_cpu_isa;

/* The best instruction set this CPU runs, and the one in use (the best, unless forced). */
LF_API lf_cpu_isa lf_cpu_isa_detect(void);
LF_API lf_cpu_isa lf_cpu_isa_active(void);
/* Force an instruction set for every later call; LF_EUNSUPPORTED when the CPU lacks it. */
LF_API lf_status lf_cpu_isa_force(lf_cpu_isa isa);
/* "scalar", "avx2", "avx512" */
LF_API const char *lf_cpu_isa_name(lf_cpu_isa isa);

/* B packed once. Every CPU GEMM first copies B, as every BLAS does, into the micro-kernel's
 * layout (slivers of 32, 16 or 8 columns for AVX-512, AVX2 or scalar, k-major, widened to f32; a
 * bf16 weight seen as W^T for a bf16 A on a CPU with AVX512_BF16: in bf16 k-pairs, as they are):
 * 2-7% of a 1024 x 3072 x 768 Linear on two cores (about 4% on average). Where many products share one B (an
 * nn.Linear's weight in inference; MKL's cblas_sgemm_pack and oneDNN's packed weights serve the
 * same use), pack it once:
 *   lf_cpu_pack_b(&g, &p);                 B as g reads it (its strides, dtype and gate)
 *   lf_cpu_gemm_packed(&g, p, NULL);       g on the CPU, B read from p instead of packed again
 *   lf_cpu_packed_b_free(p);
 * p holds a copy of B's values in f32 (4 bytes each, whatever B's dtype; 2 in bf16 k-pairs), for
 * the kernels in use when it was packed. B itself must stay as it was packed for as long as p is used: a call of up
 * to 16 rows against a Linear weight (a decode step) reads B directly, as lf_backend_gemm does, and
 * after B's values change, pack again (p is not told). lf_cpu_gemm_packed takes any g with the
 * same B (its data pointer, shape, strides and dtype), gate mode, gate group and output width; A,
 * C and beta, D, the bias, the activation and alpha are the call's own (lf_cpu_pack_b reads B
 * alone). It refuses, with LF_EINVAL, a B that is not the one packed; with kernels forced to
 * another instruction set since (lf_cpu_isa_force) it packs B again for the call. p is
 * only read: threads may share it. The result is the one lf_backend_gemm(LF_DEVICE_CPU, &g, ...)
 * gives, to the bit. lf_cpu_pack_b needs a whole valid g (lf_gemm_validate) and refuses a B whose
 * packing would not fit in 63 bits of bytes (LF_EOVERFLOW). Every CPU GEMM, packed or not, refuses
 * a K past 2^40 (LF_EOVERFLOW: valid only with broadcast strides, past what its buffers index). */
typedef struct lf_cpu_packed_b lf_cpu_packed_b;
/* Rows of A up to which a GEMM against a Linear weight (B's columns along k) reads B itself, packed
 * or not: a decode step's tokens. */
#define LF_CPU_DIRECT_ROWS 16
struct lf_gemm;        /* linfuse/backend.h, which includes this header */
struct lf_kernel_info; /* likewise */
LF_API lf_status lf_cpu_pack_b(const struct lf_gemm *g, lf_cpu_packed_b **out);
LF_API lf_status lf_cpu_gemm_packed(const struct lf_gemm *g, const lf_cpu_packed_b *p, struct lf_kernel_info *info);
LF_API void lf_cpu_packed_b_free(lf_cpu_packed_b *p); /* NULL: nothing */

#ifdef __cplusplus
}
#endif
#endif
