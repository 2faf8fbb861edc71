/* linfuse backends: where numbers are computed. Every GEMM on every device takes the same
 * epilogue descriptor; "fusion" anywhere in linfuse means filling it instead of launching
 * another kernel. Operands are strided 2-D views of device memory, so a transposed operand is
 * only a stride swap: nothing is copied to make it contiguous.
 * Layer: backend/ sits under ops/ and knows tensors only as raw views. */
#ifndef LINFUSE_BACKEND_H
#define LINFUSE_BACKEND_H

#include "linfuse/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lf_act {
    LF_ACT_NONE,
    LF_ACT_RELU,
    LF_ACT_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), cuBLASLt's GELU */
    LF_ACT_GELU_ERF,  /* 0.5 x (1 + erf(x / sqrt(2))), torch's default gelu */
    LF_ACT_COUNT
} lf_act;

typedef enum lf_gate {
    LF_GATE_NONE,
    /* The product has 2*H columns arranged in blocks of 2*gate_group: in each block the first
     * gate_group columns are gates g, the next gate_group are their partners u. The output has
     * H columns: out[:, j] = act(g_j) * u_j. gate_group = 1 is the "(h two)" interleave;
     * gate_group = H is [gate | up] side by side, as torch.cat([Wg, Wu]) gives. */
    LF_GATE_PAIRED
} lf_gate;

/* D = epilogue(alpha * A.B + beta * C + bias), in that order, then act, then the gate. */
typedef struct lf_epilogue {
    float alpha;
    float beta;       /* scales C; ignored when there is no C */
    const void *bias; /* (N) one per column of A.B (pre-gate), added unscaled; NULL = none */
    lf_dtype bias_dtype;
    lf_act act; /* applied to every column, or to the gates in paired mode */
    lf_gate gate;
    int64_t gate_group; /* paired mode: width of each gate/up half of a block; >= 1 */
} lf_epilogue;

/* alpha 1, beta 0, no bias, no activation, no gate. */
lf_epilogue lf_epilogue_default(void);

/* A strided 2-D view: element (i, j) is at data + (i*rs + j*cs) elements. */
typedef struct lf_matrix {
    void *data;
    lf_dtype dtype;
    int64_t rows, cols;
    int64_t rs, cs; /* element strides; >= 0 (0 broadcasts, useful for a C input) */
} lf_matrix;

typedef struct lf_gemm {
    lf_matrix a; /* (M, K) */
    lf_matrix b; /* (K, N) */
    lf_matrix c; /* (M, N) optional input scaled by beta; data == NULL: none */
    lf_matrix d; /* (M, N) output, or (M, N/2) in paired-gate mode; must not overlap a, b, c */
    lf_epilogue ep;
} lf_gemm;

/* What a backend launched, filled only when the caller asks (the profiler does). Names follow
 * DESIGN.md: the name carries the work's identity, e.g. lf_cpu_gemm_bf16_12x32_tn_bias_gelu_tanh;
 * same name, same work. */
typedef struct lf_kernel_info {
    const char *name; /* interned: valid for the life of the process, so it can be kept by pointer */
    double flops;     /* floating-point operations, an FMA counted as 2 */
    double bytes;     /* bytes read and written at least once */
    /* Device work runs after its launch returns. A backend that times it on the device leaves
     * a handle here; the profiler later calls resolve(timing, ...) (which waits for the work)
     * for its start and end on CLOCK_MONOTONIC, and the handle is then spent. NULL: the kernel
     * ran between kernel_begin and kernel_end (the CPU). */
    void *timing;
    int (*resolve)(void *timing, int64_t *begin_ns, int64_t *end_ns);
    int device_index, stream;
} lf_kernel_info;

/* The layout letters of a GEMM in cuBLAS's column-major reading (GPU_NOTES.md section 1): first
 * the letter of B, then of A; 'n' when the operand's rows are contiguous (cs == 1), 't' when
 * its columns are (rs == 1), 's' otherwise. An nn.Linear (A = x, B = W^T) is "tn". */
void lf_gemm_layout(const lf_gemm *g, char out[3]);

/* Check a GEMM description: shapes agree, dtypes are known, no overlap of D with the inputs,
 * gate mode is consistent. */
lf_status lf_gemm_validate(const lf_gemm *g);

/* Whether this build and machine can run work on dev (CPU always; CUDA with a backend and a
 * usable GPU). */
int lf_device_available(lf_device dev);

/* Wait until the device has finished all work queued so far (timing, before reading results
 * through raw pointers). A no-op on the CPU, whose kernels finish before they return. */
lf_status lf_device_synchronize(lf_device dev);

/* LF_OK when dev's backend runs g as described, else LF_EUNSUPPORTED with a message saying
 * why (a layout, dtype or shape the kernel does not take): callers that have another way to
 * compute g ask first. Invalid descriptions fail as lf_backend_gemm would. */
lf_status lf_backend_gemm_supported(lf_device dev, const lf_gemm *g);

/* Run a GEMM on the device that holds its memory. info may be NULL. */
lf_status lf_backend_gemm(lf_device dev, const lf_gemm *g, lf_kernel_info *info);

/* The plain reference: float64 accumulation, exact libm activations, one element at a time.
 * Host memory only. Tests and debugging compare the fast paths against it. */
lf_status lf_gemm_reference(const lf_gemm *g);

/* --- pointwise --- */

typedef enum lf_pw_op {
    LF_PW_COPY, /* out = in0 (converting dtype) */
    LF_PW_ADD,  /* out = in0 + in1 */
    LF_PW_MUL,  /* out = in0 * in1 */
    LF_PW_ACT,  /* out = act(in0) */
    /* out = act(in0) * in1, the activation rounded to out's dtype before the product, so the
     * result equals the two-pass act-then-mul bit for bit (Liger's GeGLU kernel does the same) */
    LF_PW_ACT_MUL,
    LF_PW_COUNT
} lf_pw_op;

/* How many inputs op reads: 2 for add, mul and act_mul, else 1. */
static inline int lf_pw_arity(lf_pw_op op)
{
    return op == LF_PW_ADD || op == LF_PW_MUL || op == LF_PW_ACT_MUL ? 2 : 1;
}

typedef struct lf_strided {
    void *data;
    lf_dtype dtype;
    int64_t stride[LF_MAX_DIMS]; /* 0 in a dim broadcasts that dim */
} lf_strided;

/* out[idx] = op(in0[idx], in1[idx]) for every index of shape. Inputs are read through their
 * strides (a broadcast input has stride 0), math is in float. */
typedef struct lf_pointwise {
    lf_pw_op op;
    lf_act act; /* for LF_PW_ACT and LF_PW_ACT_MUL */
    int ndim;
    int64_t shape[LF_MAX_DIMS];
    lf_strided out;
    lf_strided in[2];
} lf_pointwise;

lf_status lf_backend_pointwise(lf_device dev, const lf_pointwise *p, lf_kernel_info *info);

/* --- fused pointwise (compile mode) --- */

/* A chain of pointwise ops fused into one pass over `shape`: the inputs are read through their
 * strides, a short program runs in float (no rounding between its steps, as Inductor's fused
 * kernels do), the last step's value is stored to out. Registers 0..n_in-1 hold the inputs;
 * step i writes register n_in + i from src[0] (and src[1] for add and mul). */
enum { LF_FUSED_MAX_IN = 4, LF_FUSED_MAX_OPS = 8 };
typedef struct lf_fused_op {
    lf_pw_op op; /* LF_PW_ADD, LF_PW_MUL, LF_PW_ACT (LF_PW_COPY passes a value through) */
    lf_act act;
    int src[2];
} lf_fused_op;

typedef struct lf_fused {
    char name[64]; /* what it fused, numbered within its plan: "lf_poi_fused_gelu_mul_0" */
    int ndim;
    int64_t shape[LF_MAX_DIMS];
    int n_in;
    lf_strided in[LF_FUSED_MAX_IN];
    int n_ops;
    lf_fused_op ops[LF_FUSED_MAX_OPS];
    lf_strided out;
    void *prepared;    /* the backend's compiled form (CUDA: a kernel built with NVRTC), or NULL */
    uint64_t name_key; /* set by lf_backend_fused_prepare: the profiler finds the name by it */
} lf_fused;

/* Build f's kernel for dev once, before it runs: on CUDA the program's shape and strides are
 * written into CUDA C, compiled with NVRTC and cached in cache_dir (NULL: the default,
 * $XDG_CACHE_HOME/linfuse or ~/.cache/linfuse) under a hash of the source; verbose prints the
 * file, as Inductor prints its kernels' paths. On the CPU there is nothing to build. Only the
 * data pointers of f may change between prepare and run. */
lf_status lf_backend_fused_prepare(lf_device dev, lf_fused *f, const char *cache_dir, int verbose);
lf_status lf_backend_fused(lf_device dev, const lf_fused *f, lf_kernel_info *info);
void lf_backend_fused_release(lf_device dev, lf_fused *f);

/* --- CUDA graphs (compile mode's replay) --- */

/* Record every launch dev's backend makes between begin and end into a graph instead of running
 * it; *graph is then launched with lf_backend_graph_launch, as one call. LF_EUNSUPPORTED on a
 * device without graphs (the CPU). */
lf_status lf_backend_graph_begin(lf_device dev);
lf_status lf_backend_graph_end(lf_device dev, void **graph);
lf_status lf_backend_graph_launch(lf_device dev, void *graph);
void lf_backend_graph_free(lf_device dev, void *graph);

/* Scalar activations in float64, the reference for every fast path. */
double lf_act_ref(lf_act act, double x);
const char *lf_act_name(lf_act act); /* "none", "relu", "gelu_tanh", "gelu_erf" */

/* --- the CPU backend --- */

typedef enum lf_cpu_isa { LF_CPU_ISA_SCALAR, LF_CPU_ISA_AVX2, LF_CPU_ISA_AVX512, LF_CPU_ISA_COUNT } lf_cpu_isa;

/* The best instruction set this CPU runs, and the one in use (the best, unless forced). */
lf_cpu_isa lf_cpu_isa_detect(void);
lf_cpu_isa lf_cpu_isa_active(void);
/* Force an instruction set (tests compare all of them); LF_EUNSUPPORTED when the CPU lacks it. */
lf_status lf_cpu_isa_force(lf_cpu_isa isa);
const char *lf_cpu_isa_name(lf_cpu_isa isa);

/* Threads the CPU backend uses (OpenMP's count unless set). n <= 0 restores the default. */
void lf_cpu_set_threads(int n);
int lf_cpu_threads(void);

#ifdef __cplusplus
}
#endif
#endif
