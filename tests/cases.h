/* The case table, as ggml's test-backend-ops: every op case written once (op, shapes, layouts,
 * dtypes, epilogue, the tolerance it is held to) and run by test_cases on any device against
 * float64. cases.c builds the list; cases_gemm.c (lf_backend_gemm), cases_ops.c (the GEMM ops),
 * cases_fp8.c (quantization and the scaled ops) and cases_pointwise.c run it, with cases_util.c;
 * test_cases.c picks the device, its variants and the cases. Only the public API is used. */
#ifndef LF_TEST_CASES_H
#define LF_TEST_CASES_H

#include "linfuse/linfuse.h"
#include "testutil.h"

typedef enum case_op {
    CASE_GEMM,      /* lf_backend_gemm: every epilogue, scales, an e4m3 d; d inside a NaN-poisoned buffer */
    CASE_MM,        /* the ops, on new outputs */
    CASE_MM_OUT,    /* into a view of a NaN-poisoned buffer */
    CASE_ADDMM,     /* bias as (N), (M, N) or (M, 1); beta, alpha */
    CASE_ADDMM_ACT, /* bias (N) and an activation */
    CASE_LINEAR,    /* x of 1, 2 or 3 dims, w (N, K), bias */
    CASE_MATMUL,    /* a 3-D x that no view flattens */
    CASE_MM_GATED,  /* the gated GEMM as an op: the device's kernel or the fallback */
    CASE_SCALED_MM, /* FP8, row-wise or block scales */
    CASE_SCALED_MM_GATED,
    CASE_SCALED_MM_GATED_FP8, /* h in e4m3 with 1 x 128 scales */
    CASE_ADD,
    CASE_MUL,
    CASE_GELU, /* act: gelu_tanh or gelu_erf */
    CASE_SILU,
    CASE_ACT_MUL, /* gelu_mul (act gelu_tanh) or silu_mul (act silu) */
    CASE_QUANTIZE,
    CASE_OP_COUNT
} case_op;

/* How an operand sits in memory. */
typedef enum case_layout {
    LAY_ROW,       /* row-major, contiguous */
    LAY_COL,       /* columns contiguous: the transpose of a row-major buffer (a weight seen as w^T) */
    LAY_PAD,       /* row-major, rows cols + 3 apart, 5 elements into a NaN-filled buffer: odd and misaligned */
    LAY_PAD16,     /* row-major, rows padded and offset by 16 bytes: what TMA kernels take */
    LAY_HALF,      /* act_mul: g and u the two halves of each row of one (rows, 2 cols) buffer */
    LAY_BCAST_ROW, /* a pointwise op's second operand: (cols), broadcast down the rows */
    LAY_BCAST_COL, /* (rows, 1), broadcast along each row */
    LAY_PERM,      /* matmul: x (batch, m, k) the transpose (0, 2) of a (k, m, batch) buffer */
    LAY_COUNT
} case_layout;

/* addmm's bias forms */
enum { BIAS_NONE, BIAS_VEC, BIAS_MAT, BIAS_COL };

/* What a case's result is held to. */
typedef enum case_tol {
    /* worst_err (testutil.h) against float64 below tol_for(dtype of the result): f32 1e-5, bf16
     * and f16 1e-2, relative to the result plus 1% of the magnitude of its terms; with the CUDA
     * deviations case_bound states. */
    TOL_DTYPE,
    /* FP8: against float64 of the decoded operands times their scales, below 1e-2 by worst_err:
     * the inputs are exact, so the only errors are fp32 accumulation and the bf16 result. */
    TOL_FP8,
    /* An e4m3 h against lf_gemm_reference's codes and scales: every decoded value within one E4M3
     * step and a bf16 step of its scale of the reference's, or within 2^-8 of its block's largest
     * (tanh.approx's error near gelu's zero); codes equal but for 4%; scales within a bf16 step;
     * padding scales 1 (test_cuda's bound, measured on an H200). */
    TOL_FP8_CODES,
    /* Bytes: quantization equal to its definition computed here (lf_fp8_scale_of, then
     * lf_f8e4m3_from_f32 of x times the scale's reciprocal) on every device; act_mul also equal to
     * the device's own act then mul, bit for bit. */
    TOL_BITS,
    TOL_COUNT
} case_tol;

typedef struct case_t {
    case_op op;
    lf_dtype dt;         /* the operands'; f8e4m3: bf16 data quantized here, codes and scales uploaded */
    int64_t m, n, k;     /* GEMMs: (m, k) x (k, n), n counting gates and ups; pointwise, quantize: (m, n) */
    int64_t batch;       /* a leading dim: linear's and pointwise's 3-D forms, matmul's (batch, m, k) */
    int nd;              /* linear: x's dims (1, 2, 3); pointwise: 2 or 3 */
    case_layout la, lb;  /* a (x, g) and b (w, u); pointwise: first and second operand */
    int bias;            /* (n) vector; addmm: a BIAS_ form */
    int bias_f32;        /* gemm: the bias in f32 whatever dt is (an lf_epilogue's default) */
    int gemv_tma;        /* gemm: under LINFUSE_GEMV_KERNEL=tma, a Hopper GPU runs it on the TMA GEMV's plain form */
    int c_input;         /* gemm: a C input, laid out as d is */
    float alpha, beta;   /* gemm, addmm */
    lf_act act;          /* epilogue, pointwise activation */
    int64_t group;       /* the paired gate's group (gemm, mm_gated, scaled gated); 0: none */
    lf_scale_mode scale; /* FP8: LF_SCALE_ROWS, or LF_SCALE_1X128 (x) with LF_SCALE_128X128 (w) */
    int out_fp8;         /* gemm: d in e4m3 with 1 x 128 scales */
    int64_t pad_rows;    /* quantize: rows of zero codes added (lf_quantize_fp8_rows) */
    int special;         /* quantize: a row of zeros, one near 1e-38, an outlier, one value far below its row */
    int big;             /* more work than the CPU does in CI under ASan: CUDA (or --big) only */
    case_tol tol;
    const char *cuda_refuses; /* mm_gated: CUDA's lf_gated_choose must answer fallback for this reason */
} case_t;

typedef struct case_list {
    case_t *v;
    int n, cap;
} case_list;

/* The table (cases.c). */
void cases_build(case_list *l);
void cases_free(case_list *l);
void case_name(const case_t *c, char *buf, size_t cap);
const char *case_op_name(case_op op);
const char *case_layout_name(case_layout l);
const char *case_tol_name(case_tol t);

/* --- running (test_cases.c owns the device and the variants; the families run cases) --- */

/* One run of a case on a device in one variant: the CPU's instruction set, or on CUDA the
 * gated GEMM's forced schedule. */
typedef struct case_run {
    const case_t *c;
    lf_device dev;
    int verbose;
    char name[192];
    char variant[24];           /* "avx2", "pingpong", "" */
    lf_gated_schedule schedule; /* CUDA gated cases: the forced schedule of this run */
    int failed, skipped;
    char skip_why[256];
    char note[256]; /* verbose: what ran and how close it came */
} case_run;

/* A check of run r: counted; a failure names the case and the variant. */
#define EXPECT(r, cond, ...) case_expect((r), (cond) != 0, __FILE__, __LINE__, __VA_ARGS__)
void case_expect(case_run *r, int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Run r is skipped: the device cannot run the case, and why (its own words). */
void case_skip(case_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A call that must succeed: on failure r fails with lf_last_error() and 0 is returned; an
 * LF_EUNSUPPORTED status skips r with the device's reason instead. */
int case_ok(case_run *r, lf_status s, const char *what);

/* Variants of c on the run's device: how many, and making variant v current (test_cases.c). */
int case_variants(const case_t *c, lf_device dev);
void case_variant_set(case_run *r, int v);
void case_variant_reset(lf_device dev);
/* Count run r in its op's tally, and print it when verbose (test_cases.c). */
void case_record(const case_run *r);
/* Whether this CUDA device runs the Hopper gated kernel at all (test_cases.c asks once): where it
 * does not, every gated GEMM's reason to fall back is the device, not the case. */
extern int case_gated_here;

/* The bound c's result is held to on dev, and whether the error is also taken relative to |A.B|
 * (cuBLASLt's epilogue rounds A.B to the output type first): see case_bound in cases_util.c. */
double case_bound(const case_t *c, lf_device dev, lf_dtype out, int *pre_rounded);

/* The families: each builds its inputs and float64 reference once, then runs every variant. */
typedef void (*case_runner)(case_run *proto, lf_rng *rng);
void run_gemm_case(case_run *proto, lf_rng *rng);
void run_op_gemm_case(case_run *proto, lf_rng *rng);
void run_fp8_case(case_run *proto, lf_rng *rng);
void run_pointwise_case(case_run *proto, lf_rng *rng);
/* Every variant of a case goes through this: it copies proto, sets the variant, calls fn(run, ctx),
 * and records the run (cases_util.c). */
void case_each_variant(case_run *proto, void (*fn)(case_run *r, void *ctx), void *ctx);

/* --- operands: a host buffer, a view of it, and the same on the device (cases_util.c) --- */

typedef struct operand {
    lf_tensor *hbuf, *hview; /* host: the buffer (NaN where the view does not reach) and the view */
    lf_tensor *dbuf, *dview; /* the device's copy of the buffer and the same view of it */
    double *v;               /* the view's values, row-major over its shape */
} operand;

/* A random operand in [-1, 1) of the given shape (2-D, or 1-D, or 3-D for ROW/PERM) and layout. */
void operand_rand(operand *o, lf_rng *rng, lf_dtype dt, int nd, const int64_t *shape, case_layout l);
/* An operand over an existing host tensor (taken over) or its transpose (LAY_COL). */
void operand_from(operand *o, lf_tensor *t, int transpose);
/* An output (rows, cols) inside a buffer poisoned with NaN (0x7f codes for e4m3): ODD a gap of 2
 * after every row and 3 before the first (misaligned); ALIGNED row pitch and offset multiples of 16
 * bytes (what TMA kernels write); DENSE rows back to back with 16 bytes of poison either side
 * (scales, which kernels write as one array). */
typedef enum case_poison { POISON_ODD, POISON_ALIGNED, POISON_DENSE } case_poison;
void operand_poisoned(operand *o, lf_dtype dt, int64_t rows, int64_t cols, case_poison kind);
/* Copy the host buffer to dev (again: a fresh copy, poison and all) and make the view there. 0 on
 * failure (r failed). */
int operand_upload(case_run *r, operand *o, lf_device dev);
void operand_free(operand *o);
/* The device buffer copied back to the host (caller frees), or NULL (r failed). */
lf_tensor *download(case_run *r, const lf_tensor *t);
/* Check that the device's copy of an input buffer still holds the host's bytes. */
void expect_untouched(case_run *r, const operand *o, const char *what);
/* Check an output read back from its poisoned buffer: nothing written outside the view, no NaN
 * left inside it. The view's values are returned (caller frees). */
double *expect_poison_kept(case_run *r, const operand *o, const char *what);

/* worst_err over the rows i % step == 0 of (rows, cols); *where the worst element. */
double rows_err(const double *got, const double *ref, const double *mag, int64_t rows, int64_t cols, int64_t step,
                lf_dtype dt, int64_t *where);
/* Rows of the reference worth computing: every one, or every step-th for a case too large for
 * float64 loops in a test (odd, so the sampled rows fall in different tiles). */
int64_t ref_step(int64_t rows, double work);

/* The float64 GEMM: z = alpha * (A.B, each term times its scales) + beta * C + bias, then act, or
 * with a group act(g) * u of the paired columns; its magnitude (the sum of the magnitudes of the
 * terms that made it), and |alpha * A.B| (no gate). Rows i % step == 0 of ref, mag, ab (M, No). */
typedef struct ref_gemm {
    int64_t M, N, K, G;   /* N pre-gate columns; G the gate group, 0: none */
    const double *A, *B;  /* (M, K), (K, N) row-major: a's values, b's (decoded codes for e4m3) */
    const float *sa, *sb; /* scales (lf_epilogue's) or NULL */
    int blockwise;
    const double *C; /* (M, N) or NULL */
    double alpha, beta;
    const double *bias; /* (N) or NULL */
    lf_act act;
    int64_t step;
} ref_gemm;
void ref_gemm_run(const ref_gemm *g, double *ref, double *mag, double *ab);

/* FP8 operands (cases_fp8.c): x (M, K) and w (N, K) random bf16 quantized here (row-wise, or x in
 * 1 x 128 blocks and w in 128 x 128 ones), a the codes of x and b those of w seen transposed
 * (K, N); their scales in *sa, *sb (host tensors). */
void fp8_operands(lf_rng *rng, const case_t *c, operand *a, operand *b, lf_tensor **sa, lf_tensor **sb);
/* An e4m3 h (M, H), row pitch ldg, and its 1 x 128 scales against the reference's codes rq (M, H)
 * and scales rs (TOL_FP8_CODES). */
void expect_fp8_codes(case_run *r, const uint8_t *rq, const float *rs, const uint8_t *gq, int64_t ldg, const float *gs,
                      int64_t M, int64_t H);

/* The kernels an op launched, as the dispatcher's observer saw them. */
typedef struct kernel_log {
    int n;
    char last[160];
} kernel_log;
void kernel_log_start(kernel_log *k);
void kernel_log_stop(void);
/* Whether name has token (between underscores, or at either end): "bias", "c", "gated". */
int name_has(const char *name, const char *token);

#endif
