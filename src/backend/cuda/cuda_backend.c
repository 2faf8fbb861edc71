/* The CUDA backend: device memory through a caching allocator, copies, GEMMs through
 * cuBLASLt with the epilogue descriptor mapped onto its epilogues, and pointwise kernels.
 * Everything runs on one stream per process; host copies synchronize it. Started lazily on
 * first use: no GPU (or no driver) simply means the device is not available.
 * Layer: backend/cuda (host side; kernels are in cuda_kernels.cu). */
#include <cublasLt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend_impl.h"
#include "backend/cuda/cuda_impl.h"
#include "tensor/tensor_impl.h"

enum { WORKSPACE_BYTES = 32 << 20 /* cuBLASLt's Hopper kernels want up to 32 MiB (llm.c) */ };

void lf_cupti_register(void);

static struct {
    int available;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *workspace;
    char why[160]; /* why the device is not available */
} cu;

/* --- a caching allocator: freed blocks are kept by size and handed out again --- */

typedef struct block {
    void *p;
    size_t size;
} block;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static block *pool; /* free blocks */
static size_t pool_n, pool_cap;
static int64_t reserved_bytes; /* everything cudaMalloc gave us and we still hold: in use + pool */

static size_t round_size(size_t n)
{
    return n < 512 ? 512 : (n + 511) & ~(size_t)511;
}

static void *cu_alloc(size_t n, void *ctx)
{
    (void)ctx;
    n = round_size(n);
    pthread_mutex_lock(&pool_lock);
    for (size_t i = 0; i < pool_n; i++)
        if (pool[i].size == n) {
            void *p = pool[i].p;
            pool[i] = pool[--pool_n];
            pthread_mutex_unlock(&pool_lock);
            return p;
        }
    pthread_mutex_unlock(&pool_lock);
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess) { /* out of memory: give the cache back, try once more */
        pthread_mutex_lock(&pool_lock);
        for (size_t i = 0; i < pool_n; i++) {
            cudaFree(pool[i].p);
            reserved_bytes -= (int64_t)pool[i].size;
        }
        pool_n = 0;
        pthread_mutex_unlock(&pool_lock);
        cudaGetLastError();
        if (cudaMalloc(&p, n) != cudaSuccess) {
            cudaGetLastError();
            return NULL;
        }
    }
    pthread_mutex_lock(&pool_lock);
    reserved_bytes += (int64_t)n;
    pthread_mutex_unlock(&pool_lock);
    return p;
}

/* Blocks go back to the pool; work queued on the one stream that still reads them runs before
 * any later work that reuses them, so no synchronization is needed. */
static void cu_free(void *p, size_t n, void *ctx)
{
    (void)ctx;
    pthread_mutex_lock(&pool_lock);
    if (pool_n == pool_cap) {
        size_t cap = pool_cap ? 2 * pool_cap : 64;
        block *b = realloc(pool, cap * sizeof *b);
        if (!b) {
            reserved_bytes -= (int64_t)round_size(n);
            pthread_mutex_unlock(&pool_lock);
            cudaFree(p);
            return;
        }
        pool = b;
        pool_cap = cap;
    }
    pool[pool_n++] = (block){p, round_size(n)};
    pthread_mutex_unlock(&pool_lock);
}

static int64_t cu_reserved(void *ctx)
{
    (void)ctx;
    pthread_mutex_lock(&pool_lock);
    int64_t r = reserved_bytes;
    pthread_mutex_unlock(&pool_lock);
    return r;
}

static int cu_copy(void *dst, const void *src, size_t n, int to_host, void *ctx)
{
    (void)ctx;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, cu.stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(cu.stream);
    return e == cudaSuccess ? 0 : -1;
}

static void start(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(cu.why, sizeof cu.why, "no usable CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        cudaGetLastError();
        return;
    }
    if (cudaSetDevice(0) != cudaSuccess ||
        cudaStreamCreateWithFlags(&cu.stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc(&cu.workspace, WORKSPACE_BYTES) != cudaSuccess) {
        snprintf(cu.why, sizeof cu.why, "CUDA device 0 could not be set up: %s",
                 cudaGetErrorString(cudaGetLastError()));
        return;
    }
    if (cublasLtCreate(&cu.lt) != CUBLAS_STATUS_SUCCESS) {
        snprintf(cu.why, sizeof cu.why, "cuBLASLt could not start");
        return;
    }
    lf_allocator a = {cu_alloc, cu_free, cu_copy, cu_reserved, NULL};
    lf_tensor_set_allocator(LF_DEVICE_CUDA, &a);
    cu.available = 1;
    lf_cupti_register(); /* the profiler's device source for this GPU */
}

int lf_cuda_available(const char **why)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, start);
    if (why)
        *why = cu.why;
    return cu.available;
}

/* --- timing launches on the device (until CUPTI reports kernels itself) ---
 * A pair of events around each launch; an anchor event, recorded and waited for, ties the
 * GPU's clock to CLOCK_MONOTONIC (it reads a few microseconds late: the wait's return). Anchors
 * are renewed each second so float milliseconds between events stay precise. */

typedef struct timing {
    struct timing *next;
    cudaEvent_t start, end;
    cudaEvent_t anchor;
    int64_t anchor_ns;
} timing;

static pthread_mutex_t timing_lock = PTHREAD_MUTEX_INITIALIZER;
static timing *timing_free;
static cudaEvent_t anchor_ev;
static int64_t anchor_ns = -1;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static timing *timing_begin(void)
{
    pthread_mutex_lock(&timing_lock);
    timing *t = timing_free;
    if (t)
        timing_free = t->next;
    int64_t now = mono_ns();
    if (anchor_ns < 0 || now - anchor_ns > 1000000000) {
        if (cudaEventCreate(&anchor_ev) == cudaSuccess && cudaEventRecord(anchor_ev, cu.stream) == cudaSuccess &&
            cudaEventSynchronize(anchor_ev) == cudaSuccess)
            anchor_ns = mono_ns();
    }
    pthread_mutex_unlock(&timing_lock);
    if (!t) {
        t = malloc(sizeof *t);
        if (!t || cudaEventCreate(&t->start) != cudaSuccess || cudaEventCreate(&t->end) != cudaSuccess) {
            free(t);
            return NULL;
        }
    }
    t->anchor = anchor_ev;
    t->anchor_ns = anchor_ns;
    cudaEventRecord(t->start, cu.stream);
    return t;
}

static int timing_resolve(void *h, int64_t *begin_ns, int64_t *end_ns)
{
    timing *t = h;
    float a = 0, b = 0;
    int ok = cudaEventSynchronize(t->end) == cudaSuccess &&
             cudaEventElapsedTime(&a, t->anchor, t->start) == cudaSuccess &&
             cudaEventElapsedTime(&b, t->anchor, t->end) == cudaSuccess;
    *begin_ns = t->anchor_ns + (int64_t)((double)a * 1e6);
    *end_ns = t->anchor_ns + (int64_t)((double)b * 1e6);
    pthread_mutex_lock(&timing_lock);
    t->next = timing_free;
    timing_free = t;
    pthread_mutex_unlock(&timing_lock);
    return ok ? 0 : -1;
}

static void time_cancel(timing *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&timing_lock);
    t->next = timing_free;
    timing_free = t;
    pthread_mutex_unlock(&timing_lock);
}

/* Start timing a launch when the profiler asks (info != NULL); finish after it. */
static timing *time_begin(lf_kernel_info *info)
{
    return info ? timing_begin() : NULL;
}

static void time_end(lf_kernel_info *info, timing *t)
{
    if (!info || !t)
        return;
    cudaEventRecord(t->end, cu.stream);
    info->timing = t;
    info->resolve = timing_resolve;
    info->device_index = 0;
    info->stream = 1;
}

/* --- GEMM through cuBLASLt --- */

static cudaDataType_t cuda_type(lf_dtype dt)
{
    return dt == LF_DTYPE_BF16 ? CUDA_R_16BF : dt == LF_DTYPE_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* One cached plan per distinct call: descriptors and the algorithm the heuristic chose. */
typedef struct lt_plan {
    uint64_t key[4];
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c, d;
    cublasLtMatmulAlgo_t algo;
    int used;
} lt_plan;

enum { PLANS = 64 };
static lt_plan plans[PLANS];
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct lt_call {
    /* cuBLAS's column-major view of D = A.B (row-major): D^T = B^T . A^T */
    cublasOperation_t ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    lf_dtype dt, out_dt, c_dt, bias_dt;
    cublasLtEpilogue_t epi;
    int has_c;
    uint32_t align[4]; /* bytes each of A', B', C, D is aligned to (pointer and leading dim) */
} lt_call;

/* The largest power of two (<= 256) dividing both the address and the row pitch in bytes:
 * cuBLASLt assumes 256 unless told, and a kernel chosen for aligned rows reads misaligned
 * ones wrong (seen on the H200: bf16 rows of 41 and 257 elements). PyTorch sets the same. */
static uint32_t alignment(const void *p, int64_t ld, lf_dtype dt)
{
    uint64_t v = (uint64_t)(uintptr_t)p | (uint64_t)(ld * (int64_t)lf_dtype_size(dt)) | 256u;
    return (uint32_t)(v & (~v + 1)); /* lowest set bit */
}

static lf_status describe(const lf_gemm *g, lt_call *c)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    /* cuBLAS's "A" is our B; its "B" is our A */
    if (B->cs == 1 || B->cols == 1)
        c->ta = CUBLAS_OP_N, c->lda = B->rs > B->cols ? B->rs : B->cols;
    else if (B->rs == 1)
        c->ta = CUBLAS_OP_T, c->lda = B->cs;
    else
        return lf_fail(LF_EUNSUPPORTED,
                       "cuda gemm: b has strides (%lld, %lld); one of them must be 1 (use lf_contiguous)",
                       (long long)B->rs, (long long)B->cs);
    if (A->cs == 1 || A->cols == 1)
        c->tb = CUBLAS_OP_N, c->ldb = A->rs > A->cols ? A->rs : A->cols;
    else if (A->rs == 1)
        c->tb = CUBLAS_OP_T, c->ldb = A->cs;
    else
        return lf_fail(LF_EUNSUPPORTED,
                       "cuda gemm: a has strides (%lld, %lld); one of them must be 1 (use lf_contiguous)",
                       (long long)A->rs, (long long)A->cs);
    if (D->cs != 1 && D->cols != 1)
        return lf_fail(LF_EUNSUPPORTED, "cuda gemm: d needs contiguous rows (column stride 1), has %lld",
                       (long long)D->cs);
    c->ldc = D->rs > D->cols ? D->rs : D->cols;
    c->m = B->cols, c->n = A->rows, c->k = A->cols;
    c->dt = A->dtype, c->out_dt = D->dtype;
    c->has_c = g->c.data != NULL;
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
    c->bias_dt = g->ep.bias_dtype;
    switch (g->ep.act) {
    case LF_ACT_RELU:
        c->epi = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
        break;
    case LF_ACT_GELU_TANH:
        c->epi = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
        break;
    default: /* gelu_erf has no cuBLASLt epilogue: the GEMM keeps the bias, a kernel follows */
        c->epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
        break;
    }
    return LF_OK;
}

static lf_status plan_for(const lt_call *c, lt_plan **out)
{
    uint64_t key[4] = {(uint64_t)c->m << 32 ^ (uint64_t)c->n, (uint64_t)c->k << 32 ^ (uint64_t)c->lda,
                       (uint64_t)c->ldb << 32 ^ (uint64_t)c->ldc,
                       (uint64_t)c->ta | (uint64_t)c->tb << 2 | (uint64_t)c->dt << 4 | (uint64_t)c->out_dt << 6 |
                           (uint64_t)c->c_dt << 8 | (uint64_t)c->bias_dt << 10 | (uint64_t)c->epi << 12 |
                           (uint64_t)c->has_c << 40 | (uint64_t)(c->align[0] | c->align[1] << 9) << 41};
    key[0] ^= (uint64_t)(c->align[2] | c->align[3] << 9) << 44;
    pthread_mutex_lock(&plan_lock);
    lt_plan *free_slot = NULL;
    for (int i = 0; i < PLANS; i++) {
        if (plans[i].used && !memcmp(plans[i].key, key, sizeof key)) {
            *out = &plans[i];
            pthread_mutex_unlock(&plan_lock);
            return LF_OK;
        }
        if (!plans[i].used && !free_slot)
            free_slot = &plans[i];
    }
    lt_plan *pl = free_slot ? free_slot : &plans[key[0] % PLANS]; /* full: replace one */
    if (pl->used) {
        cublasLtMatmulDescDestroy(pl->desc);
        cublasLtMatrixLayoutDestroy(pl->a), cublasLtMatrixLayoutDestroy(pl->b);
        cublasLtMatrixLayoutDestroy(pl->c), cublasLtMatrixLayoutDestroy(pl->d);
        pl->used = 0;
    }
    int ok = 1;
    cublasComputeType_t ct = CUBLAS_COMPUTE_32F; /* fp32 accumulate; TF32 off for f32 */
    ok &= cublasLtMatmulDescCreate(&pl->desc, ct, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    ok &= ok && cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSA, &c->ta, sizeof c->ta) == 0;
    ok &= ok && cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSB, &c->tb, sizeof c->tb) == 0;
    ok &= ok && cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c->epi, sizeof c->epi) == 0;
    if (ok && (c->epi & CUBLASLT_EPILOGUE_BIAS)) {
        cudaDataType_t bt = cuda_type(c->bias_dt);
        ok &= cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) == 0;
    }
    cudaDataType_t in = cuda_type(c->dt), outt = cuda_type(c->out_dt);
    int64_t arows = c->ta == CUBLAS_OP_N ? c->m : c->k, acols = c->ta == CUBLAS_OP_N ? c->k : c->m;
    int64_t brows = c->tb == CUBLAS_OP_N ? c->k : c->n, bcols = c->tb == CUBLAS_OP_N ? c->n : c->k;
    ok &= ok && cublasLtMatrixLayoutCreate(&pl->a, in, (uint64_t)arows, (uint64_t)acols, c->lda) == 0;
    ok &= ok && cublasLtMatrixLayoutCreate(&pl->b, in, (uint64_t)brows, (uint64_t)bcols, c->ldb) == 0;
    ok &= ok && cublasLtMatrixLayoutCreate(&pl->c, c->has_c ? cuda_type(c->c_dt) : outt, (uint64_t)c->m, (uint64_t)c->n,
                                           c->ldc) == 0;
    ok &= ok && cublasLtMatrixLayoutCreate(&pl->d, outt, (uint64_t)c->m, (uint64_t)c->n, c->ldc) == 0;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    uint64_t ws = WORKSPACE_BYTES;
    ok &= ok && cublasLtMatmulPreferenceCreate(&pref) == 0;
    ok &=
        ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) == 0;
    /* split-K partial sums only in fp32: reducing them in bf16 (the output type) costs bf16
     * results whole bits (seen on the H200 at 257x64x33); PyTorch masks the same schemes */
    static const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && ok; i++)
        ok &= cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &c->align[i], sizeof c->align[i]) == 0;
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    ok &= ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                     sizeof schemes) == 0;
    ok &= ok && cublasLtMatmulAlgoGetHeuristic(cu.lt, pl->desc, pl->a, pl->b, pl->c, pl->d, pref, 1, &res, &found) == 0;
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (!ok || !found) {
        pthread_mutex_unlock(&plan_lock);
        return lf_fail(LF_EUNSUPPORTED, "cuda gemm: cuBLASLt has no algorithm for %lldx%lldx%lld %s (epilogue %d)",
                       (long long)c->n, (long long)c->m, (long long)c->k, lf_dtype_name(c->dt), (int)c->epi);
    }
    pl->algo = res.algo;
    memcpy(pl->key, key, sizeof key);
    pl->used = 1;
    *out = pl;
    pthread_mutex_unlock(&plan_lock);
    return LF_OK;
}

typedef struct name_ctx {
    const lf_gemm *g;
} name_ctx;

static void gemm_name(char *buf, size_t cap, const void *ctx)
{
    const lf_gemm *g = ((const name_ctx *)ctx)->g;
    char suffix[64];
    lf_gemm_name_suffix(g, suffix, sizeof suffix);
    snprintf(buf, cap, "lf_cublaslt_gemm_%s_%s", lf_dtype_name(g->a.dtype), suffix);
}

static void gated_name(char *buf, size_t cap, const void *ctx)
{
    (void)ctx;
    snprintf(buf, cap, "lf::gated::gated_gemm_bf16_gelu_tanh_128x256");
}

/* The paired-gate epilogue has no cuBLASLt form: our Hopper kernel (gated_gemm.cu) runs it. */
static lf_status cuda_gated(const lf_gemm *g, lf_kernel_info *info)
{
    char why[256];
    if (!lf_cuda_gated_supported(g, why, sizeof why))
        return lf_fail(LF_EUNSUPPORTED, "cuda gemm: %s", why);
    timing *tm = time_begin(info);
    cudaError_t e = lf_cuda_gated_launch(g, cu.stream);
    if (e != cudaSuccess) {
        time_cancel(tm);
        return lf_fail(LF_EDEVICE, "cuda gemm: the gated kernel failed to launch: %s", cudaGetErrorString(e));
    }
    time_end(info, tm);
    if (info) {
        info->name = lf_kernel_name((uint64_t)5 << 40, gated_name, NULL);
        info->flops = 2.0 * (double)g->a.rows * (double)g->a.cols * (double)g->b.cols + 2.0 * (double)g->d.rows * (double)g->d.cols;
        info->bytes = (double)(g->a.rows * g->a.cols + g->b.rows * g->b.cols + g->d.rows * g->d.cols) * 2.0;
    }
    return LF_OK;
}

static int cuda_gemm_supports(const lf_gemm *g, char *why, size_t cap)
{
    if (g->ep.gate != LF_GATE_NONE)
        return lf_cuda_gated_supported(g, why, cap);
    return 1;
}

static lf_status cuda_gemm(const lf_gemm *g, lf_kernel_info *info)
{
    if (g->ep.gate != LF_GATE_NONE)
        return cuda_gated(g, info);
    lt_call c = {0};
    LF_TRY(describe(g, &c));
    lt_plan *pl = NULL;
    LF_TRY(plan_for(&c, &pl));
    const float alpha = g->ep.alpha, beta = c.has_c ? g->ep.beta : 0.0f;
    timing *tm = time_begin(info);
    if (c.epi & CUBLASLT_EPILOGUE_BIAS) /* the bias pointer changes per call; the plan does not */
        cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->ep.bias, sizeof g->ep.bias);
    cublasStatus_t s = cublasLtMatmul(cu.lt, pl->desc, &alpha, g->b.data, pl->a, g->a.data, pl->b, &beta,
                                      c.has_c ? g->c.data : g->d.data, pl->c, g->d.data, pl->d, &pl->algo, cu.workspace,
                                      WORKSPACE_BYTES, cu.stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
        time_cancel(tm);
        return lf_fail(LF_EDEVICE, "cuda gemm: cublasLtMatmul failed with status %d", (int)s);
    }
    if (g->ep.act == LF_ACT_GELU_ERF) { /* no cuBLASLt epilogue for it: an in-place kernel (timed with the GEMM) */
        lf_pointwise p = {.op = LF_PW_ACT, .act = LF_ACT_GELU_ERF, .ndim = 2, .shape = {g->d.rows, g->d.cols}};
        p.out = (lf_strided){g->d.data, g->d.dtype, {g->d.rs, g->d.cs}};
        p.in[0] = p.out;
        if (lf_cuda_pointwise_launch(&p, cu.stream) != cudaSuccess) {
            time_cancel(tm);
            return lf_fail(LF_EDEVICE, "cuda gemm: the gelu_erf kernel failed to launch");
        }
    }
    time_end(info, tm);
    if (info) {
        char lay[3];
        lf_gemm_layout(g, lay);
        uint64_t key = (uint64_t)g->a.dtype | (uint64_t)lay[0] << 8 | (uint64_t)lay[1] << 16 | (uint64_t)c.has_c << 24 |
                       (uint64_t)(g->ep.bias != NULL) << 25 | (uint64_t)g->ep.act << 26 | (uint64_t)3 << 40;
        name_ctx nc = {g};
        info->name = lf_kernel_name(key, gemm_name, &nc);
        info->flops = 2.0 * (double)g->a.rows * (double)g->a.cols * (double)g->b.cols;
        info->bytes = (double)(g->a.rows * g->a.cols + g->b.rows * g->b.cols) * (double)lf_dtype_size(g->a.dtype) +
                      (double)(g->d.rows * g->d.cols) * (double)lf_dtype_size(g->d.dtype);
    }
    return LF_OK;
}

static void pw_name(char *buf, size_t cap, const void *ctx)
{
    static const char *const ops[LF_PW_COUNT] = {"copy", "add", "mul", "act", "act_mul"};
    const lf_pointwise *p = ctx;
    int act = p->op == LF_PW_ACT || p->op == LF_PW_ACT_MUL;
    snprintf(buf, cap, "lf_cuda_%s%s_%s", act ? lf_act_name(p->act) : ops[p->op], p->op == LF_PW_ACT_MUL ? "_mul" : "",
             lf_dtype_name(p->out.dtype));
}

static lf_status cuda_pointwise(const lf_pointwise *p, lf_kernel_info *info)
{
    timing *tm = time_begin(info);
    if (lf_cuda_pointwise_launch(p, cu.stream) != cudaSuccess) {
        time_cancel(tm);
        return lf_fail(LF_EDEVICE, "cuda pointwise: launch failed: %s", cudaGetErrorString(cudaGetLastError()));
    }
    time_end(info, tm);
    if (info) {
        uint64_t key = (uint64_t)p->op | (uint64_t)p->act << 4 | (uint64_t)p->out.dtype << 8 | (uint64_t)4 << 40;
        info->name = lf_kernel_name(key, pw_name, p);
        double n = 1;
        for (int d = 0; d < p->ndim; d++)
            n *= (double)p->shape[d];
        info->flops = p->op == LF_PW_COPY ? 0 : p->op == LF_PW_ACT_MUL ? 2 * n : n;
        info->bytes = n * (double)(lf_dtype_size(p->out.dtype) + lf_dtype_size(p->in[0].dtype) +
                                   (lf_pw_arity(p->op) == 2 ? lf_dtype_size(p->in[1].dtype) : 0));
    }
    return LF_OK;
}

static lf_status lf_cuda_fused(const lf_fused *f, lf_kernel_info *info)
{
    timing *tm = time_begin(info);
    lf_status s = lf_cuda_fused_launch(f, cu.stream);
    if (s != LF_OK) {
        time_cancel(tm);
        return s;
    }
    time_end(info, tm);
    if (info)
        lf_fused_info(f, info);
    return LF_OK;
}

/* --- CUDA graphs: the backend's stream captured, then replayed as one launch --- */

static lf_status cuda_graph_begin(void)
{
    cudaError_t e = cudaStreamBeginCapture(cu.stream, cudaStreamCaptureModeThreadLocal);
    return e == cudaSuccess ? LF_OK : lf_fail(LF_EDEVICE, "cuda graph: cannot capture: %s", cudaGetErrorString(e));
}

static lf_status cuda_graph_end(void **out)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    cudaError_t e = cudaStreamEndCapture(cu.stream, &g);
    if (e == cudaSuccess)
        e = cudaGraphInstantiate(&x, g, 0);
    if (g)
        cudaGraphDestroy(g);
    if (e != cudaSuccess)
        return lf_fail(LF_EDEVICE, "cuda graph: capture failed: %s", cudaGetErrorString(e));
    *out = x;
    return LF_OK;
}

static lf_status cuda_graph_launch(void *graph)
{
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)graph, cu.stream);
    return e == cudaSuccess ? LF_OK : lf_fail(LF_EDEVICE, "cuda graph: launch failed: %s", cudaGetErrorString(e));
}

static void cuda_graph_free(void *graph)
{
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

const lf_backend_ops lf_cuda_backend_ops = {.name = "cuda",
                                            .gemm = cuda_gemm,
                                            .pointwise = cuda_pointwise,
                                            .gemm_supports = cuda_gemm_supports,
                                            .fused_prepare = lf_cuda_fused_prepare,
                                            .fused = lf_cuda_fused,
                                            .fused_release = lf_cuda_fused_release,
                                            .graph_begin = cuda_graph_begin,
                                            .graph_end = cuda_graph_end,
                                            .graph_launch = cuda_graph_launch,
                                            .graph_free = cuda_graph_free};

lf_status lf_cuda_synchronize(void)
{
    if (!lf_cuda_available(NULL))
        return lf_fail(LF_EDEVICE, "no cuda backend on this machine: %s", cu.why);
    cudaError_t e = cudaStreamSynchronize(cu.stream);
    return e == cudaSuccess ? LF_OK : lf_fail(LF_EDEVICE, "cuda: %s", cudaGetErrorString(e));
}
