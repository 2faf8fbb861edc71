/* The CPU backend's settings: how many threads it uses, and which instruction set its kernels
 * run (the best this CPU has, unless forced: benches and tests compare them).
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

#ifdef __cplusplus
}
#endif
#endif
