/* The CPU backend's inside: one kernel set per instruction set (micro-kernel, GEMM epilogue,
 * activation rows), a per-call workspace pool, and the thread count. Layer: backend/cpu. */
#ifndef LF_CPU_IMPL_H
#define LF_CPU_IMPL_H

#include "backend/backend_impl.h"

#define LF_CPU_NR_MAX    32   /* widest micro-tile among the kernel sets */
#define LF_CPU_PANEL_MAX 1024 /* most slivers in one packed B panel (2048 columns / nr >= 2) */
/* The longest K the CPU GEMM takes: its workspaces hold K x (up to 2048 columns or 96 rows) floats,
 * so this keeps every size far inside 63 bits (a longer K is only valid with broadcast strides). */
#define LF_CPU_K_MAX ((int64_t)1 << 40)

/* One row-block of GEMM results leaving the micro-kernels: apply alpha, C, bias, the
 * activation and the gate, and store to D, while the block is still in L1. */
typedef struct lf_ep_strip {
    const lf_gemm *g;
    int nr;              /* micro-tile width, pre-gate columns */
    int64_t i0, rows;    /* first row of D and how many rows */
    int64_t o0;          /* first column of D */
    int nout;            /* how many D columns are real (the rest is padding) */
    const int64_t *cols; /* (nr) pre-gate column of each tile position */
    const float *bias;   /* (nr) bias per tile position, zeros when there is none */
    const float *acc;    /* (rows, nr) row-major: alpha-free A.B sums */
} lf_ep_strip;

typedef struct lf_cpu_kernels {
    lf_cpu_isa isa;
    int mr, nr;
    /* c (mr, nr) row-major = [c +] a.b over kc steps; a packed (kc, mr), b packed (kc, nr). */
    void (*ukr)(int64_t kc, const float *a, const float *b, float *c, int accumulate);
    /* Pack n vectors that are each contiguous along k into dst (K, n) row-major, widening to
     * float: B's columns when B is an nn.Linear weight seen as W^T, or A's rows when A is
     * row-major. Vector p starts at element src[p] of base; src[p] < 0 gives zeros. A
     * transpose, done in 8x8 and 4x4 register blocks where the instruction set allows. */
    void (*pack_cols)(const void *base, lf_dtype dt, const int64_t *src, int64_t K, int n, float *dst);
    /* Pack nsl slivers of a row-major B, each a run of valid[s] <= nr columns starting at
     * element start[s] of row 0; rows rs apart; dst (nsl, K, nr). */
    void (*pack_rows)(const void *base, lf_dtype dt, int64_t rs, const int64_t *start, const int *valid, int64_t nsl,
                      int64_t K, int nr, float *dst);
    void (*ep_strip)(const lf_ep_strip *s);
    /* A few rows of A against n of B's columns as dot products (no packing): acc[r * ld + p] =
     * a[r] . col[p] over K floats (zeros where col[p] is NULL); a is (m, K) row-major. */
    void (*dots)(const float *a, int64_t m, int64_t K, const float *const *col, int n, float *acc, int64_t ld);
    /* The same in bf16, a and col read as they are (bf16 bits), f32 sums; NULL where the kernel set
     * has none, and used only where lf_cpu_has_bf16_dots() says the CPU runs it. */
    void (*dots_bf16)(const uint16_t *a, int64_t m, int64_t K, const uint16_t *const *col, int n, float *acc,
                      int64_t ld);
    /* The packed path in bf16 (NULL where the kernel set has none; used only where
     * lf_cpu_has_bf16_dots() says the CPU runs it). Operands packed in k-pairs: element (kp, p) of
     * a panel is one 32-bit word holding vector p's values at k = 2 kp (low half) and 2 kp + 1
     * (high half, zero past K). ukr_bf16: c (mr, nr) = [c +] a.b over kp pairs, a packed (kp, mr),
     * b (kp, nr). pack_pairs: n bf16 vectors each contiguous along k (src as pack_cols) into dst
     * ((K + 1) / 2, n). */
    void (*ukr_bf16)(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int accumulate);
    void (*pack_pairs)(const uint16_t *base, const int64_t *src, int64_t K, int n, uint32_t *dst);
    /* y[i] = act(x[i]) (x and y may be the same) */
    void (*act_row)(lf_act act, const float *x, float *y, int64_t n);
    /* y[i] = act(x[i]) * u[i] */
    void (*act_mul_row)(lf_act act, const float *x, const float *u, float *y, int64_t n);
} lf_cpu_kernels;

/* The dots kernels' column block p0 .. p0 + q with no column there (every col[p] NULL): its sums
 * are zeros, for the m rows. */
static inline void lf_dots_zero_block(float *acc, int64_t ld, int64_t m, int p0, int q)
{
    for (int64_t r = 0; r < m; r++)
        for (int j = 0; j < q; j++)
            acc[r * ld + p0 + j] = 0.0f;
}

/* Whether the CPU has AVX512_BF16 (VDPBF16PS), asked once: a kernel set's dots_bf16 and ukr_bf16
 * run only then. */
int lf_cpu_has_bf16_dots(void);

/* Whether g's operands are bf16 against bf16 on a CPU with bf16 dot products: what the kernel
 * sets' dots_bf16 and ukr_bf16 take (AVX512_BF16 treats bf16 values below the normal range as
 * zero and flushes such results, where the f32 paths keep them). */
static inline int lf_bf16_dots_apply(const lf_gemm *g)
{
    return g->a.dtype == LF_DTYPE_BF16 && g->b.dtype == LF_DTYPE_BF16 && lf_cpu_has_bf16_dots();
}

/* The k-pair word of pack_pairs' layout: a vector of K bf16 values at base + s, step apart; its
 * values at k = 2 kp (low half) and 2 kp + 1 (high half, zero past K). */
static inline uint32_t lf_bf16_pair(const uint16_t *base, int64_t s, int64_t step, int64_t K, int64_t kp)
{
    const int64_t k = 2 * kp;
    return (uint32_t)base[s + k * step] | (k + 1 < K ? (uint32_t)base[s + (k + 1) * step] << 16 : 0u);
}

extern const lf_cpu_kernels lf_cpu_kernels_scalar;
#ifdef LF_HAVE_X86_KERNELS
extern const lf_cpu_kernels lf_cpu_kernels_avx2;
extern const lf_cpu_kernels lf_cpu_kernels_avx512;
#endif

const lf_cpu_kernels *lf_cpu_kernels_active(void);

/* Scratch memory for one call: n_threads slots of `bytes` each, 64-byte aligned. Taken from a
 * pool so steady-state calls neither allocate nor fault pages; returned after the call. */
typedef struct lf_cpu_ws lf_cpu_ws;
lf_status lf_cpu_ws_acquire(lf_cpu_ws **out, int n_threads, size_t bytes);
void *lf_cpu_ws_slot(lf_cpu_ws *ws, int thread);
void lf_cpu_ws_release(lf_cpu_ws *ws);

/* The CPU's kernel families and their names (cpu_names.c). */
typedef enum lf_cpu_family { LF_CPU_KF_GEMM, LF_CPU_KF_POINTWISE, LF_CPU_KF_QUANT } lf_cpu_family;
void lf_cpu_kernel_namer(const lf_kernel_key *key, char *buf, size_t cap);

lf_status lf_cpu_gemm(const lf_gemm *g, lf_kernel_info *info);
/* Every valid GEMM but a scaled (FP8) one, which is refused by name: the fp8 MLP runs its bf16
 * form here. */
int lf_cpu_gemm_supports(const lf_gemm *g, char *why, size_t cap);
/* The paired gate rides in the GEMM's epilogue, in every dtype the CPU computes in. */
void lf_cpu_gated_choose(const lf_gemm *g, lf_gated_choice *c);
lf_status lf_cpu_pointwise(const lf_pointwise *p, lf_kernel_info *info);
lf_status lf_cpu_quantize_fp8(const lf_quant *q, lf_kernel_info *info);
lf_status lf_cpu_fused(const lf_fused *f, lf_kernel_info *info);
/* Memory the CPU can still give and its size, in bytes (cpu_memory.c). */
lf_status lf_cpu_memory(int64_t *available, int64_t *total);

#endif
