/* GEMMs on CUDA: cuBLASLt with the epilogue descriptor mapped onto its BIAS/GELU/RELU
 * epilogues (the calls PyTorch's addmm makes: docs/gpu_notes.md, "cuBLASLt"), one cached plan
 * per distinct call; and the paired-gate epilogue, which cuBLASLt has no form of, on our
 * Hopper kernel (gated_gemm.cu). Layer: backend/cuda. */
#include <cublasLt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"

static cudaDataType_t cuda_type(lf_dtype dt)
{
    return dt == LF_DTYPE_BF16     ? CUDA_R_16BF
           : dt == LF_DTYPE_F16    ? CUDA_R_16F
           : dt == LF_DTYPE_F8E4M3 ? CUDA_R_8F_E4M3
                                   : CUDA_R_32F;
}

/* Everything that decides a cuBLASLt plan. It is the plan cache's key, compared whole with
 * memcmp (so it is zeroed before it is filled: padding compares too). */
typedef struct lt_call {
    /* cuBLAS's column-major view of D = A.B (row-major): D^T = B^T . A^T */
    cublasOperation_t ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    lf_dtype dt, out_dt, c_dt, bias_dt;
    cublasLtEpilogue_t epi;
    int has_c;
    int scaled;        /* FP8: 1 outer-vector scales (cuBLAS's A, our B, per column; its B, our A, per row); 2 blocks */
    uint32_t align[4]; /* bytes each of A', B', C, D is aligned to (pointer and leading dim) */
} lt_call;

typedef struct lt_plan {
    lt_call key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c, d;
    cublasLtMatmulAlgo_t algo;
    int used;
} lt_plan;

/* One cache per GPU (a plan's heuristic was asked of that GPU's handle), each with its own lock,
 * so threads driving different GPUs never wait for each other here. */
enum { PLANS = 64 };
typedef struct plan_cache {
    pthread_mutex_t lock;
    lt_plan plans[PLANS];
    unsigned next_victim; /* a full cache replaces plans round-robin */
} plan_cache;
static plan_cache caches[LF_CUDA_MAX_DEVICES];
static pthread_once_t caches_once = PTHREAD_ONCE_INIT;

static void caches_init(void)
{
    for (int i = 0; i < LF_CUDA_MAX_DEVICES; i++)
        pthread_mutex_init(&caches[i].lock, NULL);
}

/* The largest power of two (<= 256) dividing both the address and the row pitch in bytes:
 * cuBLASLt assumes 256 unless told, and a kernel chosen for aligned rows reads misaligned
 * ones wrong (seen on the H200: bf16 rows of 41 and 257 elements). PyTorch sets the same. */
static uint32_t alignment(const void *p, int64_t ld, lf_dtype dt)
{
    uint64_t v = (uint64_t)(uintptr_t)p | (uint64_t)(ld * (int64_t)lf_dtype_size(dt)) | 256u;
    return (uint32_t)(v & (~v + 1)); /* lowest set bit */
}

/* The operation and leading dimension cuBLAS reads matrix m with (column-major), or
 * LF_EUNSUPPORTED when neither of its strides is 1. */
static lf_status operand(const lf_matrix *m, const char *name, cublasOperation_t *op, int64_t *ld)
{
    if (m->cs == 1 || m->cols == 1) {
        *op = CUBLAS_OP_N;
        *ld = m->rs > m->cols ? m->rs : m->cols;
    } else if (m->rs == 1) {
        *op = CUBLAS_OP_T;
        *ld = m->cs;
    } else {
        return lf_fail(LF_EUNSUPPORTED,
                       "cuda gemm: %s has strides (%lld, %lld); one of them must be 1 (use lf_contiguous)", name,
                       (long long)m->rs, (long long)m->cs);
    }
    return LF_OK;
}

static lf_status describe(const lf_gemm *g, lt_call *c)
{
    memset(c, 0, sizeof *c);
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    LF_TRY(operand(B, "b", &c->ta, &c->lda)); /* cuBLAS's "A" is our B; its "B" is our A */
    LF_TRY(operand(A, "a", &c->tb, &c->ldb));
    if (D->cs != 1 && D->cols != 1)
        return lf_fail(LF_EUNSUPPORTED, "cuda gemm: d needs contiguous rows (column stride 1), has %lld",
                       (long long)D->cs);
    c->ldc = D->rs > D->cols ? D->rs : D->cols;
    c->m = B->cols, c->n = A->rows, c->k = A->cols;
    c->dt = A->dtype, c->out_dt = D->dtype;
    c->has_c = g->c.data != NULL;
    c->scaled = !g->ep.a_scale ? 0 : g->ep.blockwise ? 2 : 1;
    if (c->has_c) {
        if (g->c.cs != 1 || g->c.rs != c->ldc)
            return lf_fail(LF_EUNSUPPORTED,
                           "cuda gemm: a C input must be laid out like d (strides (%lld, 1)); got (%lld, %lld)",
                           (long long)c->ldc, (long long)g->c.rs, (long long)g->c.cs);
        c->c_dt = g->c.dtype;
    }
    c->align[0] = alignment(B->data, c->lda, B->dtype);
    c->align[1] = alignment(A->data, c->ldb, A->dtype);
    c->align[2] = c->has_c ? alignment(g->c.data, c->ldc, g->c.dtype) : 256;
    c->align[3] = alignment(D->data, c->ldc, D->dtype);
    int bias = g->ep.bias != NULL;
    c->bias_dt = bias ? g->ep.bias_dtype : LF_DTYPE_F32;
    switch (g->ep.act) {
    case LF_ACT_RELU:
        c->epi = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
        break;
    case LF_ACT_GELU_TANH:
        c->epi = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
        break;
    default: /* gelu_erf and silu have no cuBLASLt epilogue: the GEMM keeps the bias, a kernel follows */
        c->epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
        break;
    }
    return LF_OK;
}

static void plan_clear(lt_plan *pl)
{
    if (pl->desc)
        cublasLtMatmulDescDestroy(pl->desc);
    cublasLtMatrixLayout_t *lay[4] = {&pl->a, &pl->b, &pl->c, &pl->d};
    for (int i = 0; i < 4; i++)
        if (*lay[i])
            cublasLtMatrixLayoutDestroy(*lay[i]);
    memset(pl, 0, sizeof *pl);
}

enum { CANDIDATES = 8, TRIAL_WARM = 2, TRIAL_ROUNDS = 3, TRIAL_RUNS = 5 };

/* The pointers a plan's descriptor carries for one call: the bias, and an FP8 GEMM's scale
 * vectors (cuBLAS's A is our B, so its A scale is our b_scale). Set per call with the cache's
 * lock held; the plan is shared. */
static lf_status set_call_pointers(const lf_gemm *g, const lt_call *c, const lt_plan *pl)
{
    if (c->epi & CUBLASLT_EPILOGUE_BIAS)
        LF_CU_TRY(CUBLASLT, cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->ep.bias,
                                                           sizeof g->ep.bias));
    if (c->scaled) {
        LF_CU_TRY(CUBLASLT, cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                           &g->ep.b_scale, sizeof g->ep.b_scale));
        LF_CU_TRY(CUBLASLT, cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                           &g->ep.a_scale, sizeof g->ep.a_scale));
    }
    return LF_OK;
}

/* Launch pl with algorithm algo, writing D to out (a scratch buffer during trials). */
static cublasStatus_t lt_run(const lf_cuda_dev *d, const lf_gemm *g, const lt_call *c, const lt_plan *pl,
                             const cublasLtMatmulAlgo_t *algo, void *out)
{
    const float alpha = g->ep.alpha, beta = c->has_c ? g->ep.beta : 0.0f;
    return cublasLtMatmul((cublasLtHandle_t)d->lt, pl->desc, &alpha, g->b.data, pl->a, g->a.data, pl->b, &beta,
                          c->has_c ? g->c.data : out, pl->c, out, pl->d, algo, d->workspace, LF_CUDA_WORKSPACE_BYTES,
                          d->stream); /* trials run on the GPU's own stream, with its workspace */
}

static int float_order(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Which of cuBLASLt's candidates runs this call fastest, timed on the call's own operands with D
 * written to a scratch buffer (D may be C, or an input of a later op: it is not touched). Each is
 * warmed twice, then timed in TRIAL_ROUNDS rounds of TRIAL_RUNS launches between two events, the
 * candidates taking turns within a round, and scored by its median round: timed one after the
 * other, the first candidates ran on a cooler GPU than the last, and at a few hundred tokens the
 * candidates are within a few percent of each other. A candidate that fails to launch is skipped.
 * -1 when nothing could be timed. LINFUSE_GEMM_AUTOTUNE=verbose prints the trials. */
static int fastest(const lf_cuda_dev *d, const lf_gemm *g, const lt_call *c, lt_plan *pl,
                   const cublasLtMatmulHeuristicResult_t *res, int found)
{
    const size_t bytes = (size_t)c->ldc * (size_t)c->n * lf_dtype_size(c->out_dt);
    void *out = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms[CANDIDATES][TRIAL_ROUNDS];
    int ok[CANDIDATES] = {0}, best = -1;
    float best_ms = 0;
    /* on the GPU's own stream, after the caller's work so far (the operands' producers) */
    cudaEvent_t ready = NULL;
    if (lf_cuda_stream(d) != d->stream && (cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) != cudaSuccess ||
                                           cudaEventRecord(ready, lf_cuda_stream(d)) != cudaSuccess ||
                                           cudaStreamWaitEvent(d->stream, ready, 0) != cudaSuccess))
        goto done;
    if (cudaMallocAsync(&out, bytes, d->stream) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess)
        goto done;
    if (set_call_pointers(g, c, pl) != LF_OK)
        goto done;
    for (int i = 0; i < found; i++) {
        ok[i] = 1;
        for (int r = 0; r < TRIAL_WARM && ok[i]; r++)
            ok[i] = lt_run(d, g, c, pl, &res[i].algo, out) == CUBLAS_STATUS_SUCCESS;
    }
    for (int round = 0; round < TRIAL_ROUNDS; round++)
        for (int i = 0; i < found; i++) {
            if (!ok[i])
                continue;
            ok[i] = cudaEventRecord(e0, d->stream) == cudaSuccess;
            for (int r = 0; r < TRIAL_RUNS && ok[i]; r++)
                ok[i] = lt_run(d, g, c, pl, &res[i].algo, out) == CUBLAS_STATUS_SUCCESS;
            ok[i] = ok[i] && cudaEventRecord(e1, d->stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
                    cudaEventElapsedTime(&ms[i][round], e0, e1) == cudaSuccess;
        }
    const int verbose = lf_gemm_autotune_verbose();
    for (int i = 0; i < found; i++) {
        if (!ok[i])
            continue;
        float *t = ms[i]; /* the rounds in order: the median is the middle one */
        qsort(t, TRIAL_ROUNDS, sizeof *t, float_order);
        const float med = t[TRIAL_ROUNDS / 2];
        if (best < 0 || med < best_ms)
            best = i, best_ms = med;
        if (verbose) {
            int id = -1, tile = -1;
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, NULL);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, NULL);
            fprintf(stderr,
                    "linfuse: GEMM plan m=%lld n=%lld k=%lld %s: candidate %d (algo %d, tile %d) %.2f us "
                    "(rounds %.2f..%.2f)\n",
                    (long long)c->m, (long long)c->n, (long long)c->k, lf_dtype_name(c->dt), i, id, tile,
                    med * 1e3f / TRIAL_RUNS, t[0] * 1e3f / TRIAL_RUNS, t[TRIAL_ROUNDS - 1] * 1e3f / TRIAL_RUNS);
        }
    }
    if (verbose && best >= 0)
        fprintf(stderr, "linfuse: GEMM plan m=%lld n=%lld k=%lld: kept candidate %d of %d\n", (long long)c->m,
                (long long)c->n, (long long)c->k, best, found);
done:
    if (out)
        cudaFreeAsync(out, d->stream);
    if (ready)
        cudaEventDestroy(ready);
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cudaGetLastError(); /* a failed trial leaves no error behind for the next launch */
    return best;
}

/* Whether trial launches may run now: asked for, no profiler recording (the trace would hold
 * them), and no CUDA graph being captured on the stream (they would become part of it). */
static int may_time(const lf_cuda_dev *d)
{
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    return lf_gemm_autotune_enabled() && !lf_cupti_recording() &&
           cudaStreamIsCapturing(lf_cuda_stream(d), &cap) == cudaSuccess && cap == cudaStreamCaptureStatusNone;
}

/* The matmul's descriptor: fp32 accumulation, the operands' ops, the epilogue and its bias
 * type, and for FP8 the scales' modes. */
static lf_status describe_matmul(const lf_gemm *g, const lt_call *c, lt_plan *pl)
{
    LF_CU_TRY(CUBLASLT,
              cublasLtMatmulDescCreate(&pl->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)); /* fp32 accumulate; no TF32 */
    LF_CU_TRY(CUBLASLT, cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSA, &c->ta, sizeof c->ta));
    LF_CU_TRY(CUBLASLT, cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSB, &c->tb, sizeof c->tb));
    LF_CU_TRY(CUBLASLT,
              cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c->epi, sizeof c->epi));
    if (c->epi & CUBLASLT_EPILOGUE_BIAS) {
        cudaDataType_t bt = cuda_type(c->bias_dt);
        LF_CU_TRY(CUBLASLT,
                  cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    if (!c->scaled)
        return LF_OK;
    /* FP8 as torch._scaled_mm's: row-wise (a vector over each operand's outer dim), or blockwise:
     * the weight (cuBLAS's A) in 128 x 128 blocks, x (its B) in 1 x 128 ones (lf_scale_mode's
     * layouts, probed on an H200: docs/gpu_notes.md) */
    const int32_t amode = c->scaled == 1 ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                         : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                  bmode = c->scaled == 1 ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                         : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    LF_CU_TRY(CUBLASLT,
              cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &amode, sizeof amode));
    LF_CU_TRY(CUBLASLT,
              cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bmode, sizeof bmode));
    /* the heuristic refuses a vector mode whose pointers are unset (CUBLAS_STATUS_INVALID_VALUE,
     * seen on the H200): this call's, replaced at every launch */
    return set_call_pointers(g, c, pl);
}

/* The four matrices' layouts: A and B as stored (op applied by the descriptor), C and D m x n. */
static lf_status describe_layouts(const lt_call *c, lt_plan *pl)
{
    cudaDataType_t in = cuda_type(c->dt), out = cuda_type(c->out_dt);
    uint64_t arows = (uint64_t)(c->ta == CUBLAS_OP_N ? c->m : c->k),
             acols = (uint64_t)(c->ta == CUBLAS_OP_N ? c->k : c->m);
    uint64_t brows = (uint64_t)(c->tb == CUBLAS_OP_N ? c->k : c->n),
             bcols = (uint64_t)(c->tb == CUBLAS_OP_N ? c->n : c->k);
    LF_CU_TRY(CUBLASLT, cublasLtMatrixLayoutCreate(&pl->a, in, arows, acols, c->lda));
    LF_CU_TRY(CUBLASLT, cublasLtMatrixLayoutCreate(&pl->b, in, brows, bcols, c->ldb));
    LF_CU_TRY(CUBLASLT, cublasLtMatrixLayoutCreate(&pl->c, c->has_c ? cuda_type(c->c_dt) : out, (uint64_t)c->m,
                                                   (uint64_t)c->n, c->ldc));
    LF_CU_TRY(CUBLASLT, cublasLtMatrixLayoutCreate(&pl->d, out, (uint64_t)c->m, (uint64_t)c->n, c->ldc));
    return LF_OK;
}

/* cuBLASLt's candidates for the plan (res, *found of them, best first): within our workspace and
 * the operands' alignment, split-K reduced in fp32 only. */
static lf_status ask_heuristic(const lf_cuda_dev *d, const lt_call *c, const lt_plan *pl,
                               cublasLtMatmulHeuristicResult_t res[CANDIDATES], int *found)
{
    cublasLtMatmulPreference_t pref = NULL;
    LF_CU_TRY(CUBLASLT, cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = LF_CUDA_WORKSPACE_BYTES;
    static const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    /* split-K partial sums only in fp32: reducing them in bf16 (the output type) costs bf16
     * results whole bits (seen on the H200 at 257x64x33); PyTorch masks the same schemes */
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    lf_status s = LF_CU_CHECK(
        CUBLASLT, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    for (int i = 0; i < 4 && s == LF_OK; i++)
        s = LF_CU_CHECK(CUBLASLT,
                        cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &c->align[i], sizeof c->align[i]));
    if (s == LF_OK)
        s = LF_CU_CHECK(CUBLASLT, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                                       &schemes, sizeof schemes));
    *found = 0;
    if (s == LF_OK)
        s = LF_CU_CHECK(CUBLASLT, cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)d->lt, pl->desc, pl->a, pl->b, pl->c,
                                                                 pl->d, pref, CANDIDATES, res, found));
    cublasLtMatmulPreferenceDestroy(pref);
    return s;
}

/* With autotune on: the plan measured before on this GPU (kept on disk) while cuBLASLt still takes
 * it, else the fastest of the candidates timed now, remembered. */
static void tune_algo(const lf_cuda_dev *d, const lt_call *c, const lf_gemm *g, lt_plan *pl,
                      cublasLtMatmulHeuristicResult_t *res, int found)
{
    cublasLtMatmulAlgo_t kept;
    cublasLtMatmulHeuristicResult_t check;
    if (lf_cuda_tune_get(d, c, sizeof *c, &kept, sizeof kept)) {
        /* measured before; still a valid algorithm for this call with our workspace? */
        if (cublasLtMatmulAlgoCheck((cublasLtHandle_t)d->lt, pl->desc, pl->a, pl->b, pl->c, pl->d, &kept, &check) ==
                CUBLAS_STATUS_SUCCESS &&
            check.workspaceSize <= LF_CUDA_WORKSPACE_BYTES) {
            pl->algo = kept;
            return;
        }
    }
    if (found > 1 && may_time(d)) {
        const int best = fastest(d, g, c, pl, res, found);
        if (best >= 0) {
            pl->algo = res[best].algo;
            lf_cuda_tune_put(d, c, sizeof *c, &pl->algo, sizeof pl->algo);
        }
    }
}

/* Descriptors for c and its algorithm on GPU d: the one measured fastest in an earlier run (the
 * disk cache) when cuBLASLt still accepts it, else the fastest of cuBLASLt's first CANDIDATES
 * timed now on g's operands when that may be done (may_time), else cuBLASLt's first choice. */
static lf_status plan_build(const lf_cuda_dev *d, const lt_call *c, const lf_gemm *g, lt_plan *pl)
{
    LF_TRY(describe_matmul(g, c, pl));
    LF_TRY(describe_layouts(c, pl));
    cublasLtMatmulHeuristicResult_t res[CANDIDATES];
    int found = 0;
    LF_TRY(ask_heuristic(d, c, pl, res, &found));
    if (!found)
        return lf_fail(LF_EUNSUPPORTED, "cuda gemm: cuBLASLt has no algorithm for %lldx%lldx%lld %s (epilogue %d)",
                       (long long)c->n, (long long)c->m, (long long)c->k, lf_dtype_name(c->dt), (int)c->epi);
    pl->algo = res[0].algo;
    if (lf_gemm_autotune_enabled())
        tune_algo(d, c, g, pl, res, found);
    return LF_OK;
}

/* GPU d's cached plan for c, built on a miss (replacing plans round-robin when the cache is
 * full). Called with the cache's lock held, which the caller keeps until its launch is queued: a
 * plan's descriptor carries the call's bias pointer, so two threads must not share it at once. */
static lf_status plan_for(const lf_cuda_dev *d, const lt_call *c, const lf_gemm *g, lt_plan **out)
{
    plan_cache *pc = &caches[d->ordinal];
    lt_plan *plans = pc->plans, *slot = NULL;
    for (int i = 0; i < PLANS; i++) {
        if (plans[i].used && !memcmp(&plans[i].key, c, sizeof *c)) {
            *out = &plans[i];
            return LF_OK;
        }
        if (!plans[i].used && !slot)
            slot = &plans[i];
    }
    if (!slot)
        slot = &plans[pc->next_victim++ % PLANS];
    plan_clear(slot);
    lf_status s = plan_build(d, c, g, slot);
    if (s != LF_OK) {
        plan_clear(slot);
        return s;
    }
    slot->key = *c;
    slot->used = 1;
    *out = slot;
    return LF_OK;
}

/* Queue the planned call (with the lock held, see plan_for), timed from after planning when
 * info asks. */
static lf_status lt_launch(lf_cuda_dev *d, const lf_gemm *g, const lt_call *c, const lf_kernel_info *info,
                           lf_cuda_timing **tm)
{
    lt_plan *pl = NULL;
    LF_TRY(plan_for(d, c, g, &pl));
    const cudaStream_t stream = lf_cuda_stream(d);
    void *ws = lf_cuda_workspace(d, stream);
    if (!ws)
        return LF_EDEVICE;
    *tm = lf_cuda_time_begin(d, info);
    const float alpha = g->ep.alpha, beta = c->has_c ? g->ep.beta : 0.0f;
    LF_TRY(set_call_pointers(g, c, pl)); /* they change per call; the plan does not */
    return LF_CU_CHECK(CUBLASLT, cublasLtMatmul((cublasLtHandle_t)d->lt, pl->desc, &alpha, g->b.data, pl->a, g->a.data,
                                                pl->b, &beta, c->has_c ? g->c.data : g->d.data, pl->c, g->d.data, pl->d,
                                                &pl->algo, ws, LF_CUDA_WORKSPACE_BYTES, stream));
}

/* The end of one of our own GEMM kernels' launch on d's stream (tm from lf_cuda_time_begin before
 * it, e what the launch returned, name the launch function's, for the error message): timed when
 * info asks, the timing dropped when it failed. */
static lf_status own_kernel_done(const lf_cuda_dev *d, lf_kernel_info *info, lf_cuda_timing *tm, cudaError_t e,
                                 const char *name)
{
    const lf_status s = lf_cu_status(LF_CU_RUNTIME, (int)e, name);
    if (s != LF_OK) {
        lf_cuda_time_cancel(tm);
        return s;
    }
    lf_cuda_time_end(d, info, tm);
    return LF_OK;
}

/* The paired-gate epilogue has no cuBLASLt form: our kernels run it, the one lf_gated_choose
 * names. */
static lf_status gated_gemm(const lf_cuda_dev *d, const lf_gemm *g, lf_kernel_info *info)
{
    lf_gated_choice c;
    lf_cuda_gated_choose(g, &c);
    if (c.kernel == LF_GATED_KERNEL_FALLBACK)
        return lf_fail(LF_EUNSUPPORTED, "cuda gemm: %s", c.why);
    lf_cuda_timing *tm = lf_cuda_time_begin(d, info);
    const int gemv = c.kernel == LF_GATED_KERNEL_GEMV;
    const int tma = gemv && c.tile_m;
    const cudaError_t e = tma    ? lf_cuda_gemv_tma_launch(g, lf_cuda_stream(d))
                          : gemv ? lf_cuda_gemv_launch(g, lf_cuda_stream(d))
                                 : lf_cuda_gated_launch(g, c.kernel, lf_cuda_stream(d));
    LF_TRY(own_kernel_done(d, info, tm, e,
                           tma    ? "lf_cuda_gemv_tma_launch"
                           : gemv ? "lf_cuda_gemv_launch"
                                  : "lf_cuda_gated_launch"));
    if (info) {
        const lf_cuda_family fam = gemv                                   ? LF_CUDA_KF_GEMV
                                   : c.kernel == LF_GATED_KERNEL_PINGPONG ? LF_CUDA_KF_GATED_PINGPONG
                                   : c.kernel == LF_GATED_KERNEL_OFFLOAD  ? LF_CUDA_KF_GATED_OFFLOAD
                                                                          : LF_CUDA_KF_GATED_COOPERATIVE;
        lf_gemm_report(g, lf_cuda_kernel_namer, fam, c.tile_m, c.tile_n, info);
    }
    return LF_OK;
}

/* A bf16 GEMM of 1 to 16 tokens after the Hopper gated GEMV: the plain TMA-fed GEMV
 * (gemv_hopper.cu), launched to overlap the gated kernel's drain, where cuBLASLt's split-K plan
 * starts after it and adds a reduce kernel. */
static lf_status gemv_gemm(const lf_cuda_dev *d, const lf_gemm *g, lf_kernel_info *info)
{
    lf_cuda_timing *tm = lf_cuda_time_begin(d, info);
    LF_TRY(own_kernel_done(d, info, tm, lf_cuda_gemv_tma_launch(g, lf_cuda_stream(d)), "lf_cuda_gemv_tma_launch"));
    if (info)
        lf_gemm_report(g, lf_cuda_kernel_namer, LF_CUDA_KF_GEMV, g->a.rows <= 8 ? 8 : 16, 32, info); /* 32 outputs */
    return LF_OK;
}

int lf_cuda_gemm_supports(const lf_gemm *g, char *why, size_t cap)
{
    if (g->ep.gate != LF_GATE_NONE) {
        lf_gated_choice c;
        lf_cuda_gated_choose(g, &c);
        snprintf(why, cap, "%s", c.why);
        return c.kernel != LF_GATED_KERNEL_FALLBACK;
    }
    if (g->ep.a_scale) { /* cuBLASLt's FP8 GEMM: the "tn" layout only, rows of 16-byte multiples */
        const lf_matrix *A = &g->a, *B = &g->b;
        const lf_cuda_dev *d = lf_cuda_cur();
        if (!d || d->cc < 89) {
            snprintf(why, cap, "FP8 GEMMs need a GPU of compute capability 8.9 or later");
            return 0;
        }
        if (A->cs != 1 || B->rs != 1 || A->rs % 16 || B->cs % 16 || A->cols % 16 || (uintptr_t)A->data % 16 ||
            (uintptr_t)B->data % 16 || (g->d.rs * (int64_t)lf_dtype_size(g->d.dtype)) % 16) {
            snprintf(why, cap,
                     "cuBLASLt's FP8 GEMM takes a row-major x and a weight seen transposed (\"tn\"), K and row "
                     "strides multiples of 16 (K %lld)",
                     (long long)A->cols);
            return 0;
        }
        if (g->ep.blockwise && A->rows % 4) { /* CUBLAS_STATUS_NOT_SUPPORTED at 333 rows (1 x 128 on x) */
            snprintf(why, cap, "cuBLASLt's block-scaled FP8 GEMM needs M a multiple of 4 (%lld)", (long long)A->rows);
            return 0;
        }
        if (g->ep.d_scale) {
            snprintf(why, cap, "cuBLASLt's FP8 GEMM here writes bf16, f16 or f32, not a block-quantized f8e4m3 d");
            return 0;
        }
    }
    if (g->ep.act == LF_ACT_GELU_ERF || g->ep.act == LF_ACT_SILU) { /* lf_cuda_gemm runs it as a GEMM + a kernel */
        snprintf(why, cap, "cuBLASLt has no %s epilogue", lf_act_name(g->ep.act));
        return 0;
    }
    return 1;
}

lf_status lf_cuda_gemm(const lf_gemm *g, lf_kernel_info *info)
{
    lf_cuda_dev *d = lf_cuda_cur();
    if (!d)
        return LF_EDEVICE;
    const int gemv = lf_cuda_gemv_plain_takes(g, lf_cuda_stream(d)); /* asked of every GEMM: see cuda_impl.h */
    if (g->ep.gate != LF_GATE_NONE)
        return gated_gemm(d, g, info);
    if (gemv)
        return gemv_gemm(d, g, info);
    char why[256];
    if (g->ep.a_scale && !lf_cuda_gemm_supports(g, why, sizeof why)) /* FP8: said by name, not by cuBLASLt's code */
        return lf_fail(LF_EUNSUPPORTED, "cuda gemm: %s", why);
    /* cuBLASLt's bias epilogue takes a bias of d's dtype and refuses, with no algorithm, an f32
     * one on a bf16 d (seen on the H200; an lf_epilogue's default bias dtype is f32): a bias of
     * another dtype than d's is added by a kernel after the bare GEMM, then the activation by
     * another. Each rounds to d's dtype: one rounding more than cuBLASLt's epilogue, which
     * rounds A.B to d's dtype before it, and two extra passes over d (a path for a mismatched
     * bias, not for speed). */
    const int late_bias = g->ep.bias && g->ep.bias_dtype != g->d.dtype;
    lf_gemm bare = *g;
    if (late_bias)
        bare.ep.bias = NULL, bare.ep.act = LF_ACT_NONE;
    lt_call c;
    LF_TRY(describe(&bare, &c));
    lf_cuda_timing *tm = NULL;
    pthread_once(&caches_once, caches_init);
    plan_cache *pc = &caches[d->ordinal];
    pthread_mutex_lock(&pc->lock);
    lf_status s = lt_launch(d, &bare, &c, info, &tm);
    pthread_mutex_unlock(&pc->lock);
    /* what the epilogue did not do: in-place kernels, timed with the GEMM */
    lf_pointwise p = {.ndim = 2, .shape = {g->d.rows, g->d.cols}};
    p.out = (lf_strided){g->d.data, g->d.dtype, {g->d.rs, g->d.cs}};
    p.in[0] = p.out;
    if (s == LF_OK && late_bias) {
        p.op = LF_PW_ADD;
        p.in[1] = (lf_strided){(void *)g->ep.bias, g->ep.bias_dtype, {0, 1}}; /* read only */
        s = LF_CU_CHECK(RUNTIME, lf_cuda_pointwise_launch(&p, lf_cuda_stream(d)));
    }
    /* silu and gelu_erf have no cuBLASLt epilogue; a late bias comes before any activation */
    if (s == LF_OK &&
        (g->ep.act == LF_ACT_GELU_ERF || g->ep.act == LF_ACT_SILU || (late_bias && g->ep.act != LF_ACT_NONE))) {
        p.op = LF_PW_ACT, p.act = g->ep.act;
        s = LF_CU_CHECK(RUNTIME, lf_cuda_pointwise_launch(&p, lf_cuda_stream(d)));
    }
    if (s != LF_OK) {
        lf_cuda_time_cancel(tm);
        return s;
    }
    lf_cuda_time_end(d, info, tm);
    if (info)
        lf_gemm_report(g, lf_cuda_kernel_namer, LF_CUDA_KF_CUBLASLT, 0, 0, info);
    return LF_OK;
}
