/* Kernel names: built once per distinct kernel from a key that says everything the name says,
 * then found by that key, so the profiler's hot path costs a table lookup, not a snprintf.
 * report.c fills the keys; this room knows only keys and text. Layer: backend/. */
#ifndef LF_BACKEND_NAMES_H
#define LF_BACKEND_NAMES_H

#include <stdint.h>

/* Everything a kernel's name says. Compared whole (no bit packing), so two kernels that differ
 * in any field never share a name. family is an lf_kernel_family (backend_impl.h). */
typedef struct lf_kernel_key {
    uint8_t family, dtype, out_dtype, op, act, flags, lay_b, lay_a;
    uint16_t tile_m, tile_n;
} lf_kernel_key;
_Static_assert(sizeof(lf_kernel_key) == 12, "lf_kernel_key has no padding: keys are compared and hashed as bytes");

/* LF_KEY_BLOCKS: a GEMM scaled in blocks (with LF_KEY_SCALED; lf_epilogue.blockwise), not per row.
 * A quantization kernel's key holds its lf_scale_mode in op. */
enum { LF_KEY_C = 1, LF_KEY_BIAS = 2, LF_KEY_GATED = 4, LF_KEY_STRIDED = 8, LF_KEY_SCALED = 16, LF_KEY_BLOCKS = 32 };

/* The interned name of key (valid for the life of the process). */
const char *lf_kernel_name(const lf_kernel_key *key);

#endif
