/* linfuse backends, the part users see: the GEMM description every device takes (with the
 * epilogue descriptor: "fusion" anywhere in linfuse means filling it instead of launching
 * another kernel), the float64 reference beside it, what a launched kernel reports, and which
 * devices this machine can use. Operands are strided 2-D views of device memory, so a
 * transposed operand is only a stride swap: nothing is copied to make it contiguous.
 * Pointwise and fused kernels, graphs and the device table are internal (src/backend/).
 * Layer: backend/ sits under ops/ and knows tensors only as raw views. */
#ifndef LINFUSE_BACKEND_H
#define LINFUSE_BACKEND_H

#include "linfuse/cpu.h"
#include "linfuse/cuda.h"
#include "linfuse/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lf_act {
    LF_ACT_NONE,
    LF_ACT_RELU,
    LF_ACT_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), cuBLASLt's GELU */
    LF_ACT_GELU_ERF,  /* 0.5 x (1 + erf(x / sqrt(2))), torch's default gelu */
    LF_ACT_SILU,      /* x sigmoid(x) = x / (1 + e^-x): SwiGLU's (Llama, Mistral, Qwen); torch's silu */
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
    /* Scaled (FP8) GEMMs, as torch._scaled_mm. Set both exactly when A and B are f8e4m3 (NULL
     * otherwise). blockwise 0, row-wise: element (i, j) of A.B is first multiplied by
     * a_scale[i] * b_scale[j] (f32 vectors of M and of N, the latter over the pre-gate columns).
     * blockwise 1, DeepSeek-V3's recipe: every product term a[i, k] b[k, j] is multiplied by
     * a_scale over A in LF_SCALE_1X128 blocks and b_scale over B's transpose (the (N, K) weight)
     * in LF_SCALE_128X128 blocks (lf_scale_mode says where each scale is). */
    const float *a_scale, *b_scale;
    int blockwise;
    /* An f8e4m3 D (a scaled gated GEMM's h for the next FP8 GEMM): each output is rounded to
     * bf16, then every 1 x 128 block of a row is quantized as lf_quantize_fp8_1x128 does, its
     * scales laid out as LF_SCALE_1X128 says (padding rows 1). NULL exactly when D is not
     * f8e4m3. */
    float *d_scale;
    float alpha;
    float beta;       /* scales C; ignored when there is no C */
    const void *bias; /* (N) one per column of A.B (pre-gate), added unscaled; NULL = none */
    /* f32 by default; on CUDA a bias of another dtype than d's is added by a kernel after
     * cuBLASLt's GEMM, whose bias epilogue takes only d's */
    lf_dtype bias_dtype;
    lf_act act; /* applied to every column, or to the gates in paired mode */
    lf_gate gate;
    int64_t gate_group; /* paired mode: width of each gate/up half of a block; >= 1 */
} lf_epilogue;

/* How FP8 scales cover a (rows, cols) matrix, and where each is stored (cuBLASLt's layouts for its
 * VEC128_32F and BLK128x128_32F modes, found by probing an H200: docs/gpu_notes.md):
 *   LF_SCALE_ROWS     one per row: scale[r];
 *   LF_SCALE_1X128    one per 1 x 128 block of a row, block-major with the rows padded to 4:
 *                     scale[r + (c / 128) * LF_SCALE_LD(rows)], (LF_SCALE_BLOCKS(cols), LF_SCALE_LD(rows));
 *   LF_SCALE_128X128  one per 128 x 128 block, row-block-major with the column blocks padded to 4:
 *                     scale[(r / 128) * LF_SCALE_LD(LF_SCALE_BLOCKS(cols)) + c / 128].
 * Padding entries are 1. */
typedef enum lf_scale_mode { LF_SCALE_ROWS, LF_SCALE_1X128, LF_SCALE_128X128 } lf_scale_mode;
#define LF_SCALE_BLOCK     128
#define LF_SCALE_LD(n)     (((n) + 3) / 4 * 4)
#define LF_SCALE_BLOCKS(k) (((k) + LF_SCALE_BLOCK - 1) / LF_SCALE_BLOCK)

/* The scales over a (rows, cols) matrix in mode m: their 2-D shape, their count, and the index of
 * element (r, c)'s scale. The one statement of the layouts above; host code uses nothing else. */
static inline void lf_scale_shape(lf_scale_mode m, int64_t rows, int64_t cols, int64_t shape[2])
{
    shape[0] = m == LF_SCALE_ROWS ? rows : m == LF_SCALE_1X128 ? LF_SCALE_BLOCKS(cols) : LF_SCALE_BLOCKS(rows);
    shape[1] = m == LF_SCALE_ROWS ? 1 : m == LF_SCALE_1X128 ? LF_SCALE_LD(rows) : LF_SCALE_LD(LF_SCALE_BLOCKS(cols));
}

static inline int64_t lf_scale_count(lf_scale_mode m, int64_t rows, int64_t cols)
{
    int64_t s[2];
    lf_scale_shape(m, rows, cols, s);
    return s[0] * s[1];
}

static inline int64_t lf_scale_index(lf_scale_mode m, int64_t rows, int64_t cols, int64_t r, int64_t c)
{
    switch (m) {
    case LF_SCALE_1X128:
        return r + c / LF_SCALE_BLOCK * LF_SCALE_LD(rows);
    case LF_SCALE_128X128:
        return r / LF_SCALE_BLOCK * LF_SCALE_LD(LF_SCALE_BLOCKS(cols)) + c / LF_SCALE_BLOCK;
    default:
        return r;
    }
}

/* alpha 1, beta 0, no bias, no activation, no gate. */
LF_API lf_epilogue lf_epilogue_default(void);

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

/* What a backend launched, filled only when the caller asks (the profiler does). The name
 * carries the work's identity, as cuBLAS's do (docs/design.md, "Kernel names"), e.g.
 * lf_cpu_gemm_bf16_8x32_tn_bias_gelu_tanh: same name, same work. FLOPs and bytes are counted
 * the same way on every device (docs/design.md, "Kernel reports"). */
typedef struct lf_kernel_info {
    const char *name; /* interned: valid for the life of the process, so it can be kept by pointer */
    double flops;     /* floating-point operations of the product, an FMA counted as 2 */
    double bytes;     /* bytes read and written, each operand once */
    /* For the profiler: device work runs after its launch returns. A backend that times it
     * with device events leaves a handle here; resolve(timing, ...) (which waits for the work)
     * gives its start and end on CLOCK_MONOTONIC, and the handle is then spent. NULL: the
     * kernel ran between kernel_begin and kernel_end (the CPU). Other observers ignore these. */
    void *timing;
    int (*resolve)(void *timing, int64_t *begin_ns, int64_t *end_ns);
    int device_index, stream;
    /* In: the observer asks for device timing (set at kernel_begin; the profiler does when no
     * tracer reports the device's work). Without it a backend times nothing. */
    int time_on_device;
} lf_kernel_info;

/* The layout letters of a GEMM in cuBLAS's column-major reading (docs/gpu_notes.md, "Layouts"): first
 * the letter of B, then of A; 'n' when the operand's rows are contiguous (cs == 1), 't' when
 * its columns are (rs == 1), 's' otherwise. An nn.Linear (A = x, B = W^T) is "tn". */
LF_API void lf_gemm_layout(const lf_gemm *g, char out[3]);

/* Check a GEMM description: shapes agree, dtypes are known, no overlap of D with the inputs,
 * gate mode is consistent. */
LF_API lf_status lf_gemm_validate(const lf_gemm *g);

/* Whether this build and machine can run work on dev: the CPU always; CUDA when the CUDA
 * module (liblinfuse_cuda.so, loaded at run time) is installed beside the library, the
 * machine has an NVIDIA driver and a GPU. The first ask loads and starts the device. */
LF_API int lf_device_available(lf_device dev);

/* LF_OK when dev is available, else LF_EDEVICE with a message saying why (no module in this
 * build, no driver, a CUDA library that did not load, no GPU). */
LF_API lf_status lf_device_require(lf_device dev);

/* Wait until the device has finished all work queued so far (timing, before reading results
 * through raw pointers). A no-op on the CPU, whose kernels finish before they return. */
LF_API lf_status lf_device_synchronize(lf_device dev);

/* Units of dev this machine has (GPUs: what the driver sees; the CPU: 1), 0 when dev is not
 * available. */
LF_API int lf_device_count(lf_device dev);

/* Make unit index of dev this thread's, as cudaSetDevice does: the tensors this thread creates
 * on dev live there and its ops run there (a thread starts on unit 0). The unit is started on
 * first use. One thread per GPU is how one process drives several (lf_comm_init_local).
 * LF_EDEVICE when there is no such unit or it cannot start. */
LF_API lf_status lf_device_select(lf_device dev, int index);
/* This thread's unit of dev (0 until it selects another). */
LF_API int lf_device_current(lf_device dev);

/* Bytes dev can still give (*available) and its size (*total). The CPU: MemAvailable plus free
 * swap, lowered by the process's cgroup memory limits and RLIMIT_AS; a GPU: its free and total
 * memory. LF_EDEVICE when dev is not available, LF_EUNSUPPORTED when the system does not say. */
LF_API lf_status lf_device_memory(lf_device dev, int64_t *available, int64_t *total);

/* LF_OK when dev's backend runs g as described, else LF_EUNSUPPORTED with a message saying
 * why (a layout, dtype or shape the kernel does not take): callers that have another way to
 * compute g ask first. Invalid descriptions fail as lf_backend_gemm would. For a paired-gate
 * GEMM this is lf_gated_choose's answer: LF_EUNSUPPORTED where it chooses the fallback. */
LF_API lf_status lf_backend_gemm_supported(lf_device dev, const lf_gemm *g);

/* --- the gated GEMM: one decision, asked by every caller ---
 * Which kernel runs a paired-gate GEMM (act(x Wg^T) * (x Wu^T), lf_gate) is decided in one place:
 * the op (lf_mm_gated and the scaled forms), the MLP's forwards, compile mode's passes and the
 * backends themselves all ask lf_gated_choose. */
typedef enum lf_gated_kernel {
    LF_GATED_KERNEL_EPILOGUE,    /* the device's GEMM with the gate in its epilogue (the CPU) */
    LF_GATED_KERNEL_GEMV,        /* 1 to 16 tokens: one pass over the weights on the tensor cores (CUDA) */
    LF_GATED_KERNEL_COOPERATIVE, /* Hopper: 128 x 256 tiles, two consumer warpgroups on one tile */
    LF_GATED_KERNEL_PINGPONG,    /* Hopper: 128 x 128 tiles, the consumers on alternate tiles */
    LF_GATED_KERNEL_OFFLOAD,     /* Hopper: the cooperative tile, its activation on the producer's spare warps */
    LF_GATED_KERNEL_FALLBACK,    /* no gated kernel for it here (why says why): a GEMM into g and u, then act_mul */
    LF_GATED_KERNEL_COUNT
} lf_gated_kernel;

typedef struct lf_gated_choice {
    lf_gated_kernel kernel;
    int tile_m, tile_n; /* the kernel's output tile in pre-gate columns; 0 x 0 where it has none */
    char why[256];      /* LF_GATED_KERNEL_FALLBACK: the reason; "" otherwise */
} lf_gated_choice;

/* Which kernel dev runs the paired-gate GEMM g with: its shape, dtypes (bf16, or scaled e4m3 in
 * and bf16 or e4m3 out) and strides, the device, and a forced schedule (linfuse/cuda.h) decide.
 * LF_OK with *out filled, LF_GATED_KERNEL_FALLBACK among the answers; an error when g is not a
 * valid paired-gate GEMM or dev is not available. */
LF_API lf_status lf_gated_choose(lf_device dev, const lf_gemm *g, lf_gated_choice *out);
/* "epilogue", "gemv", "cooperative", "pingpong", "offload", "fallback" */
LF_API const char *lf_gated_kernel_name(lf_gated_kernel k);

/* Run a GEMM on the device that holds its memory. info may be NULL. */
LF_API lf_status lf_backend_gemm(lf_device dev, const lf_gemm *g, lf_kernel_info *info);

/* The plain reference: float64 accumulation, exact libm activations, one element at a time.
 * Host memory only. Tests and debugging compare the fast paths against it. */
LF_API lf_status lf_gemm_reference(const lf_gemm *g);

/* Scalar activations in float64, the reference for every fast path. */
LF_API double lf_act_ref(lf_act act, double x);
LF_API const char *lf_act_name(lf_act act); /* "none", "relu", "gelu_tanh", "gelu_erf" */

/* The CPU backend's settings (threads, instruction set) are in linfuse/cpu.h; the CUDA backend's
 * (its stream, the gated GEMM's schedule, GEMM plans by measurement) in linfuse/cuda.h. */

#ifdef __cplusplus
}
#endif
#endif
