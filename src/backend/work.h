/* What a device is asked to do besides a GEMM (whose description is public: linfuse/backend.h):
 * pointwise kernels, FP8 quantization, fused pointwise chains (compile mode) and collectives, as
 * plain descriptions every backend takes. Layer: backend/. */
#ifndef LF_BACKEND_WORK_H
#define LF_BACKEND_WORK_H

#include "linfuse/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* --- FP8 quantization, one scale per row ---
 * q[i, j] = e4m3(in[i, j] * (1 / scale[i])) with scale[i] = max_j |in[i, j]| / 448 (1 for a row
 * of zeros, at least 2^-126 otherwise): the row-wise recipe of torch._scaled_mm, for weights (per
 * output channel, once) and activations (per token, every forward). The reciprocal and the
 * product are rounded to nearest, then the code (nearest even), so every device writes the same
 * bytes. */
typedef struct lf_quant {
    int64_t rows, cols;
    lf_strided in; /* bf16, f16 or f32; strides {row, column} */
    uint8_t *q;    /* rows x cols e4m3, contiguous */
    float *scale;  /* laid out as mode says (lf_scale_mode), padding entries 1 */
    lf_scale_mode mode;
    int64_t pad_rows; /* LF_SCALE_ROWS: q and scale have this many rows (>= rows; 0: rows), the extra
                       * ones zero codes with scale 1 (tokens padded for a GEMM that takes groups of 4) */
} lf_quant;

/* How many rows q writes (pad_rows, or rows) and how many scales. */
static inline int64_t lf_quant_rows(const lf_quant *q)
{
    return q->pad_rows > q->rows ? q->pad_rows : q->rows;
}
static inline int64_t lf_quant_scales(const lf_quant *q)
{
    return lf_scale_count(q->mode, q->mode == LF_SCALE_ROWS ? lf_quant_rows(q) : q->rows, q->cols);
}

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
    void *prepared;          /* the backend's compiled form (CUDA: a kernel built with NVRTC), or NULL */
    const char *kernel_name; /* name, interned by lf_backend_fused_prepare for the profiler's hot path */
} lf_fused;

/* --- collectives: the units of one device kind (GPUs) summing together ---
 * A communicator joins `world` ranks, one per unit; the device's library (NCCL on CUDA) moves
 * the bytes. Made from an id that one rank creates and every other rank is handed (over TCP by
 * linfuse/dist.h), or for all units of one process at once. */
enum { LF_COMM_ID_BYTES = 128 }; /* ncclUniqueId */
typedef struct lf_collective {
    void *comm; /* the backend's communicator */
    void *data; /* summed in place: count contiguous elements on the calling thread's unit */
    lf_dtype dtype;
    int64_t count;
    /* 0: the unit's stream waits for the result (ops after it see the sum); 1: it runs on the
     * communicator's own stream beside later work until comm_wait */
    int async;
} lf_collective;

#ifdef __cplusplus
}
#endif
#endif
