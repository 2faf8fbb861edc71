/* Kernel names and reports, the device-independent half: a key that says everything a name says,
 * the interned text of each distinct key (formatted once by the backend that owns the kernel,
 * then found by key, so the profiler's hot path costs a table lookup, not a snprintf), and each
 * kind of work's FLOPs and bytes, the same on every device. Which kernel families exist and how
 * each is spelled belongs to its backend (cpu/cpu_names.c, cuda/cuda_names.c).
 * Layer: backend/. */
#ifndef LF_BACKEND_NAMES_H
#define LF_BACKEND_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "backend/work.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Everything a kernel's name says. Compared whole (no bit packing), so two kernels that differ
 * in any field never share a name. family is the backend's own (its namer's) kernel family. */
typedef struct lf_kernel_key {
    uint8_t family, dtype, out_dtype, op, act, flags, lay_b, lay_a;
    uint16_t tile_m, tile_n;
} lf_kernel_key;
#ifdef __cplusplus
static_assert(sizeof(lf_kernel_key) == 12, "lf_kernel_key has no padding: keys are compared and hashed as bytes");
#else
_Static_assert(sizeof(lf_kernel_key) == 12, "lf_kernel_key has no padding: keys are compared and hashed as bytes");
#endif

/* LF_KEY_BLOCKS: a GEMM scaled in blocks (with LF_KEY_SCALED; lf_epilogue.blockwise), not per row.
 * A quantization kernel's key holds its lf_scale_mode in op. */
enum { LF_KEY_C = 1, LF_KEY_BIAS = 2, LF_KEY_GATED = 4, LF_KEY_STRIDED = 8, LF_KEY_SCALED = 16, LF_KEY_BLOCKS = 32 };

/* A backend's spelling of its kernels: key's name into buf. */
typedef void (*lf_kernel_namer)(const lf_kernel_key *key, char *buf, size_t cap);

/* The interned name of key as namer spells it (valid for the life of the process). */
const char *lf_kernel_name(lf_kernel_namer namer, const lf_kernel_key *key);
/* A name kept for the life of the process, found again by its text (fused kernels intern their
 * plan's name once, at prepare, so the hot path copies a pointer). */
const char *lf_kernel_name_intern(const char *name);

/* Pieces namers share: a GEMM's "tn_rowwise_c_bias_gelu_tanh_gated" (layout, then what the
 * epilogue does, in order), and a pointwise op's word ("copy", "add", "mul", "act", "act_mul"). */
void lf_kernel_gemm_suffix(const lf_kernel_key *key, char *buf, size_t cap);
const char *lf_kernel_pw_op_name(int op);

/* The reports (report.c): the name as namer spells family's kernel, and the FLOPs and bytes.
 * A GEMM: FLOPs 2*M*N*K (N counting gates and partners: the epilogue's work is not counted, as
 * PyTorch counts addmm), bytes of A, B, C, bias, scales and D once each; a tile of 0 x 0 puts no
 * tile in the key. Pointwise: one FLOP per element per step (none for a copy), each operand's
 * bytes once. Quantization: a FLOP per element, the input, codes and scales once. Fused: its
 * plan's name, a FLOP per element per step, each operand once. */
void lf_gemm_report(const lf_gemm *g, lf_kernel_namer namer, int family, int tile_m, int tile_n, lf_kernel_info *info);
void lf_pointwise_report(const lf_pointwise *p, lf_kernel_namer namer, int family, lf_kernel_info *info);
void lf_quant_report(const lf_quant *q, lf_kernel_namer namer, int family, lf_kernel_info *info);
void lf_fused_report(const lf_fused *f, lf_kernel_info *info);

#ifdef __cplusplus
}
#endif
#endif
