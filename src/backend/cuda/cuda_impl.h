/* Inside the CUDA backend: its state, what its files share (the C host files and the CUDA
 * kernel files), and the one check every CUDA, cuBLASLt, CUPTI and NVRTC call goes through.
 * Layer: backend/cuda. */
#ifndef LF_CUDA_IMPL_H
#define LF_CUDA_IMPL_H

#include <cuda_runtime.h>

#include "backend/backend_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- checking calls ---
 * Every library this backend calls reports success as 0 and failure as a code of its own
 * enum. LF_CU_CHECK(lib, call) is the call's lf_status: LF_OK, or LF_EDEVICE with a message
 * naming the call and the library's words for the code ("cuda: cudaMalloc(&p, n): out of
 * memory"). LF_CU_TRY returns that status from the enclosing function when it is not LF_OK. */
typedef enum lf_cu_lib { LF_CU_RUNTIME, LF_CU_CUBLASLT, LF_CU_CUPTI, LF_CU_NVRTC } lf_cu_lib;
lf_status lf_cu_status(lf_cu_lib lib, int code, const char *call);
#define LF_CU_CHECK(lib, call) lf_cu_status(LF_CU_##lib, (int)(call), #call)
#define LF_CU_TRY(lib, call)   LF_TRY(LF_CU_CHECK(lib, call))

/* --- the backend's devices (cuda_device.c): per GPU, one stream each ---
 * A process may drive several GPUs, one thread each (lf_device_select, as cudaSetDevice): every
 * call works on the calling thread's GPU, whose state lf_cuda_cur() returns. A GPU starts (its
 * stream, cuBLASLt handle and workspace) the first time a thread uses it. */
enum { LF_CUDA_MAX_DEVICES = LF_MAX_DEVICE_INDEX };
typedef struct lf_cuda_dev {
    int ordinal;
    cudaStream_t stream; /* every launch on this GPU goes here */
    void *lt;            /* cublasLtHandle_t */
    void *workspace;     /* (LF_CUDA_WORKSPACE_BYTES) for cuBLASLt */
    int sm_count;
    int cc; /* compute capability, 10 * major + minor: 90 on Hopper */
} lf_cuda_dev;
enum { LF_CUDA_WORKSPACE_BYTES = 32 << 20 /* cuBLASLt's Hopper kernels want up to 32 MiB (llm.c) */ };

/* Load the backend once: the driver answers and sees a GPU; 0 (with *why saying why) when not.
 * No GPU is started here: each starts on first use. (The table's available then hands the
 * tensor layer the allocator, cuda_backend.c.) */
int lf_cuda_available(const char **why);
/* This thread's GPU, started and current for the thread; NULL (the message set) when it cannot
 * start. Cheap after the thread's first call: one thread-local load. */
lf_cuda_dev *lf_cuda_cur(void);
/* GPU ordinal's state, started (NULL with the message set when it cannot be). Does not change
 * which GPU is the calling thread's. */
lf_cuda_dev *lf_cuda_dev_get(int ordinal);
int lf_cuda_device_count(void);
/* Make GPU k the calling thread's (started if it was not), and which GPU that is now. */
lf_status lf_cuda_select(int k);
int lf_cuda_current(void);
/* Wait for every GPU this process has started (the profiler's drain). */
lf_status lf_cuda_synchronize_all(void);

/* --- whose stream: linfuse's own per GPU, or the caller's (lf_cuda_set_stream) ---
 * A thread that set a stream for a GPU has all of linfuse's work on that GPU queued there, in
 * order with the caller's own work, and nothing synchronized in between. */
typedef struct lf_cuda_thread_stream {
    cudaStream_t stream[LF_MAX_DEVICE_INDEX];
    unsigned char set[LF_MAX_DEVICE_INDEX];
} lf_cuda_thread_stream;
#ifdef __cplusplus
extern thread_local lf_cuda_thread_stream lf_cuda_tls_stream;
#else
extern _Thread_local lf_cuda_thread_stream lf_cuda_tls_stream;
#endif
/* The stream this thread's work on d goes to. */
static inline cudaStream_t lf_cuda_stream(const lf_cuda_dev *d)
{
    return lf_cuda_tls_stream.set[d->ordinal] ? lf_cuda_tls_stream.stream[d->ordinal] : d->stream;
}
/* cuBLASLt's workspace for work on stream s of d: one per stream (GEMMs queued on two streams
 * may run at once), made on first use; NULL (the message set) when none could be made. */
void *lf_cuda_workspace(lf_cuda_dev *d, cudaStream_t s);

/* --- the on-disk cache (fused_nvrtc.c): generated kernels and measured GEMM plans --- */
/* given, else $XDG_CACHE_HOME/linfuse, else ~/.cache/linfuse, else /tmp/linfuse-cache; made. */
lf_status lf_cuda_cache_dir(const char *given, char *dir, size_t cap);
/* A whole file (caller frees; NULL when it cannot be read), and one written atomically (1 when
 * it was: a temporary renamed over path). */
void *lf_cuda_read_file(const char *path, size_t *n);
int lf_cuda_write_file(const char *path, const void *p, size_t n);

/* --- GEMM plans timed once and kept on disk (gemm_tune.c) --- */
/* The plan GPU d's disk cache holds for the key's bytes (1, *algo filled), else 0. A cache file
 * that does not read back whole and checksummed is ignored, with one warning, and rewritten. */
int lf_cuda_tune_get(const lf_cuda_dev *d, const void *key, size_t n, void *algo, size_t algo_n);
/* Remember a measured plan (written through to the file; a failed write costs only the cache). */
void lf_cuda_tune_put(const lf_cuda_dev *d, const void *key, size_t n, const void *algo, size_t algo_n);
/* Whether CUPTI is recording (no trial launches then: the trace would hold them). */
int lf_cupti_recording(void);

/* --- the caching allocator (cuda_alloc.c) --- */
/* Hand the tensor layer this device's allocator and copies. */
void lf_cuda_alloc_register(void);

/* --- timing launches with events, when no tracer reports them (cuda_timing.c) --- */
typedef struct lf_cuda_timing lf_cuda_timing;
/* Begin timing a launch when info asks (time_on_device: the profiler does when CUPTI is off):
 * NULL otherwise, or when no events could be had (the kernel then goes untimed). */
lf_cuda_timing *lf_cuda_time_begin(const lf_cuda_dev *d, const lf_kernel_info *info);
/* After a successful launch: the end event, and the handle left in info for the profiler. */
void lf_cuda_time_end(const lf_cuda_dev *d, lf_kernel_info *info, lf_cuda_timing *t);
/* After a failed launch: the handle goes back unused. */
void lf_cuda_time_cancel(lf_cuda_timing *t);

/* --- collectives over NCCL (cuda_nccl.c): the table's comm_* and all_reduce slots --- */
lf_status lf_cuda_comm_unique_id(unsigned char id[LF_COMM_ID_BYTES]);
lf_status lf_cuda_comm_init(void **comm, const unsigned char id[LF_COMM_ID_BYTES], int rank, int world);
lf_status lf_cuda_comm_init_all(void **comms, int n);
lf_status lf_cuda_all_reduce(const lf_collective *c, lf_kernel_info *info);
lf_status lf_cuda_comm_wait(void *comm);
void lf_cuda_comm_free(void *comm);
const char *lf_cuda_comm_library(void);

/* --- the core library's services, handed over at load (cuda_host.c) --- */
void lf_cuda_host_set(const lf_backend_host *host);

/* --- the kernel families and their names (cuda_names.c) --- */
typedef enum lf_cuda_family {
    LF_CUDA_KF_CUBLASLT,
    LF_CUDA_KF_POINTWISE,
    LF_CUDA_KF_GATED_COOPERATIVE,
    LF_CUDA_KF_GATED_PINGPONG,
    LF_CUDA_KF_GATED_OFFLOAD,
    LF_CUDA_KF_GEMV,
    LF_CUDA_KF_QUANT
} lf_cuda_family;
void lf_cuda_kernel_namer(const lf_kernel_key *key, char *buf, size_t cap);

/* --- GEMMs (cuda_gemm.c) --- */
lf_status lf_cuda_gemm(const lf_gemm *g, lf_kernel_info *info);
int lf_cuda_gemm_supports(const lf_gemm *g, char *why, size_t cap);

/* --- kernels (cuda_kernels.cu, gated_gemm.cu) --- */

/* Launch the pointwise kernel for p on stream (any op, dtype and strides; 4-D index math). */
cudaError_t lf_cuda_pointwise_launch(const lf_pointwise *p, cudaStream_t stream);
/* Row-wise FP8 quantization (quant.cu). */
cudaError_t lf_cuda_quantize_launch(const lf_quant *q, cudaStream_t stream);

/* The gated GEMM's kernels: for 1 to 16 tokens a GEMV (a memory-bound pass over the
 * weights), else the Hopper kernel in the schedule lf_gated_rule picks (gated_gemm.cu).
 * lf_cuda_gated_choose is the backend's answer to lf_gated_choose; the launches run the kernel
 * it chose. */
void lf_cuda_gated_choose(const lf_gemm *g, lf_gated_choice *c);
int lf_cuda_gated_supported(const lf_gemm *g, char *why, size_t cap);
/* The operands every few-token GEMV takes: 1 to LF_CUDA_GEMV_MAX_TOKENS bf16 tokens, with no C and
 * alpha 1; x row-major in 16-byte rows and 16-byte aligned, the weight row-major seen transposed
 * and 16-byte aligned, out row-major. */
#define LF_CUDA_GEMV_MAX_TOKENS 16
static inline int lf_cuda_gemv_operands(const lf_gemm *g)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    return A->rows >= 1 && A->rows <= LF_CUDA_GEMV_MAX_TOKENS && A->dtype == LF_DTYPE_BF16 &&
           B->dtype == LF_DTYPE_BF16 && D->dtype == LF_DTYPE_BF16 && !g->c.data && g->ep.alpha == 1.0f && A->cs == 1 &&
           A->rs % 8 == 0 && A->cols % 8 == 0 && (uintptr_t)A->data % 16 == 0 && B->rs == 1 &&
           (uintptr_t)B->data % 16 == 0 && D->cs == 1;
}
/* What both gated GEMVs take: those operands, a paired gate in silu, gelu_tanh or gelu_erf and no
 * bias ((2H, K) weight). Each kernel's own check adds its limits. */
static inline int lf_cuda_gemv_shape(const lf_gemm *g)
{
    return g->ep.gate == LF_GATE_PAIRED && !g->ep.bias &&
           (g->ep.act == LF_ACT_SILU || g->ep.act == LF_ACT_GELU_TANH || g->ep.act == LF_ACT_GELU_ERF) &&
           lf_cuda_gemv_operands(g);
}
int lf_cuda_gemv_supported(const lf_gemm *g);
cudaError_t lf_cuda_gemv_launch(const lf_gemm *g, cudaStream_t stream);
/* The Hopper GEMV (gemv_hopper.cu: TMA into shared memory, wgmma), gated where it applies and
 * LINFUSE_GEMV_KERNEL does not ask for the mma.sync one (lf_cuda_gated_choose then gives its
 * tile, tokens 8 or 16 x 128 pre-gate columns), or plain (+ bias). */
int lf_cuda_gemv_tma_supported(const lf_gemm *g);
/* Whether the plain form runs g on stream: where it applies and, under LINFUSE_GEMV_KERNEL=auto,
 * only for the GEMM that reads what this thread's last gated GEMV wrote on the same stream (the
 * decode step's down projection, launched to overlap it); =tma for every GEMM it applies to.
 * Call it once for every GEMM, gated or not: it forgets that last gated GEMV. */
int lf_cuda_gemv_plain_takes(const lf_gemm *g, cudaStream_t stream);
cudaError_t lf_cuda_gemv_tma_launch(const lf_gemm *g, cudaStream_t stream);
cudaError_t lf_cuda_gated_launch(const lf_gemm *g, lf_gated_kernel k, cudaStream_t stream);

/* --- fused pointwise kernels built with NVRTC (fused_nvrtc.c) --- */
lf_status lf_cuda_fused_prepare(lf_fused *f, const char *cache_dir, int verbose);
lf_status lf_cuda_fused_launch(const lf_fused *f, cudaStream_t stream);
void lf_cuda_fused_release(lf_fused *f);

/* --- CUPTI as the device's event source (cupti_source.c) --- */
extern const lf_device_events lf_cupti_events;

#ifdef __cplusplus
}
#endif
#endif
