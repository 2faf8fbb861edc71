/* The CUDA backend's settings, for programs that run linfuse beside their own CUDA work and for
 * benches that compare one kernel choice with another: the GEMM plans measured on this GPU and
 * the Hopper gated GEMM's schedule. Each function is callable on any machine; where there is no
 * GPU the settings are kept for when one is used. GPUs themselves are chosen with
 * lf_device_select (linfuse/backend.h). Layer: backend/cuda, seen from above. */
#ifndef LINFUSE_CUDA_H
#define LINFUSE_CUDA_H

#include "linfuse/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- whose stream ---
 * By default linfuse queues its work on each GPU on a stream of its own. A program with streams of
 * its own (PyTorch's current stream, a CUDA graph being captured) hands linfuse the stream its
 * work must go to: every kernel, copy and event linfuse queues on that GPU from this thread then
 * goes there, in order with the program's own work, and linfuse synchronizes nothing in between
 * (memory it takes for intermediates is reused only for work on the same stream). The exceptions
 * are stated where they are: host copies (lf_tensor_to_device, lf_tensor_to_f32) finish before
 * they return, and a GEMM shape's first call times cuBLASLt's candidates (lf_gemm_autotune_set
 * turns that off). Per thread and per GPU: it applies to the calling thread's current GPU
 * (lf_device_select). stream is a cudaStream_t; NULL is the legacy default stream (PyTorch's
 * default stream); cudaStreamPerThread is refused (LF_EINVAL: it names another stream on each
 * thread). Each stream linfuse is handed gets a cuBLASLt workspace of 32 MiB at once, kept for
 * the process (64 streams at most, LF_EDEVICE with the reason past that); LF_EDEVICE where there
 * is no GPU.
 * What the caller keeps in mind, as with PyTorch's caching allocator: a block of linfuse's is
 * reused only for work on the stream it was taken for, so a tensor linfuse made on one stream and
 * the caller used on another must not be freed until that other stream's work on it is done
 * (synchronize it, or free it in that stream's order); and blocks cached for a stream the caller
 * destroyed stay cached until an allocation fails and the cache is given back. */
LF_API lf_status lf_cuda_set_stream(void *stream);
/* Back to linfuse's own stream, for the calling thread's GPU. */
LF_API lf_status lf_cuda_use_own_stream(void);
/* The stream this thread's work on its GPU goes to now (a cudaStream_t). */
LF_API lf_status lf_cuda_get_stream(void **stream);

/* --- GEMM plans chosen by measurement ---
 * On a GPU, the first call of each GEMM shape times cuBLASLt's top heuristic candidates on the
 * call's own operands and keeps the fastest, as torch.compile's max-autotune does for its GEMMs;
 * the choice is cached on disk beside the compiled kernels ($XDG_CACHE_HOME/linfuse or
 * ~/.cache/linfuse, gemm-plans/), keyed by GPU, driver and cuBLASLt versions. Nothing is timed
 * while a profiler records (the trace would hold the trials) or while a CUDA graph is captured:
 * a plan from the disk cache, else cuBLASLt's first choice, is used then. On by default; off with
 * lf_gemm_autotune_set(0), LINFUSE_GEMM_AUTOTUNE=0 or the CLI's --no-gemm-autotune.
 * LINFUSE_GEMM_AUTOTUNE=verbose keeps it on and prints each candidate's time and the one kept
 * to stderr (lf_gemm_autotune_verbose says whether it is set). */
LF_API void lf_gemm_autotune_set(int on);
LF_API int lf_gemm_autotune_enabled(void);
LF_API int lf_gemm_autotune_verbose(void);

/* --- the Hopper gated GEMM's schedule ---
 * By default (LF_GATED_AUTO) chosen by shape (lf_gated_choose in linfuse/backend.h says which);
 * forcing one measures it against the others. Until forced, LINFUSE_GATED_SCHEDULE decides
 * (auto|cooperative|pingpong|offload). An e4m3 output always takes the cooperative kernel and a
 * gate_group that is not a multiple of 128 always takes ping-pong. */
typedef enum lf_gated_schedule {
    LF_GATED_AUTO,
    LF_GATED_COOPERATIVE,
    LF_GATED_PINGPONG,
    LF_GATED_OFFLOAD /* the cooperative tile, its activation on the producer warpgroup's spare warps */
} lf_gated_schedule;

LF_API void lf_gated_schedule_force(lf_gated_schedule s);
LF_API lf_gated_schedule lf_gated_schedule_forced(void);

#ifdef __cplusplus
}
#endif
#endif
