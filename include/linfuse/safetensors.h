/* Hugging Face checkpoints: safetensors files read as linfuse tensors that view the file (mapped,
 * no copy on the CPU; one upload when a module moves to the GPU), sharded checkpoints through
 * their model.safetensors.index.json, a writer for outputs, and the activation a checkpoint's
 * config.json names.
 *
 * The format: 8 bytes (little-endian u64) N, then N bytes of JSON {"name": {"dtype": "BF16",
 * "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {...}}, then the data, every
 * byte of it some tensor's. Every file is checked whole when it is opened: a length past the
 * end, JSON that is not valid or not UTF-8, a name given twice, an unknown dtype, offsets out of
 * range, overlapping, or leaving bytes no tensor owns, shape x dtype not the byte length: each an
 * LF_EINVAL naming the file and what is wrong; a path that is not a regular file (a FIFO, a
 * device) is refused without being read, so it cannot block. Layer: safetensors/ sits on
 * tensor/. */
#ifndef LINFUSE_SAFETENSORS_H
#define LINFUSE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "linfuse/backend.h"
#include "linfuse/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lf_safetensors lf_safetensors;

/* Open a checkpoint: a .safetensors file, a model.safetensors.index.json (its shards beside it),
 * or a directory holding either. */
LF_API lf_status lf_st_open(lf_safetensors **out, const char *path);
/* The same checks on a file already in memory (name for messages); the bytes are copied. */
LF_API lf_status lf_st_open_buffer(lf_safetensors **out, const void *data, size_t size, const char *name);
LF_API void lf_st_close(lf_safetensors *st); /* tensors handed out stay valid: they hold the file */

LF_API int64_t lf_st_count(const lf_safetensors *st);
/* Tensor i's name, dtype string ("BF16") and shape; NULL past the end. */
LF_API const char *lf_st_name(const lf_safetensors *st, int64_t i);
/* Whether the checkpoint has a tensor of this name. */
LF_API int lf_st_has(const lf_safetensors *st, const char *name);
/* The file's dtype for tensor `name`, as the format spells it ("BF16", "F8_E4M3"), or NULL; its
 * shape into shape[0..7] and its number of dims (0 for a scalar), or -1 when there is no such
 * tensor. Neither reads the data. */
LF_API const char *lf_st_dtype(const lf_safetensors *st, const char *name);
LF_API int lf_st_shape(const lf_safetensors *st, const char *name, int64_t shape[8]);
/* Tensor `name` as a CPU tensor viewing the file (BF16, F16, F32, or F8_E4M3 as stored, without
 * its scale; 1 to 4 dims). Writing it changes only this process's copy of the page, never the
 * file. A view is the mapping itself: if another program cuts the file short while the view is
 * used, the system raises SIGBUS on the lost pages, as for any mapped file (linfuse installs no
 * signal handler behind its caller's back). Where the file may change, use lf_st_get_as, which
 * copies. */
LF_API lf_status lf_st_get(const lf_safetensors *st, const char *name, lf_tensor **out);
/* Tensor `name` as a CPU tensor of dtype dt and of its own, read from the file (pread, never
 * through the mapping: a file cut short since it was opened is an LF_EINVAL naming it, not a
 * fault), converted or dequantized: BF16, F16 and F32 tensors are converted (copied as they are
 * when dt is theirs); FP8 ones (F8_E4M3, F8_E5M2, as
 * llm-compressor, FBGEMM and DeepSeek write them) are decoded exactly, multiplied in fp32 by the
 * scale stored beside them as "<name>_scale" or else "<name>_scale_inv" (F32, BF16 or F16; both
 * names are dequantization multipliers) and rounded once to dt. The scale is one value for the
 * tensor, one per row (shape [rows] or [rows, 1]) or one per block of a 2-D weight (shape
 * [ceil(rows/br), ceil(cols/bc)], such as DeepSeek-V3's 128 x 128); a weight or scale with a zero
 * dimension, or a scale that is not finite, is refused by name. dt LF_DTYPE_COUNT keeps a BF16,
 * F16 or F32 tensor's own dtype and gives BF16 for FP8. */
LF_API lf_status lf_st_get_as(const lf_safetensors *st, const char *name, lf_dtype dt, lf_tensor **out);
/* One FP8 E5M2 value (IEEE-like: infinities and NaNs; largest 57344), exactly; E4M3 is a dtype
 * of its own (lf_f32_from_f8e4m3 in tensor.h). */
LF_API float lf_f32_from_f8e5m2(uint8_t b);

/* The checkpoint's files: the one file, or each shard of an index; NULL past the end. */
LF_API int64_t lf_st_file_count(const lf_safetensors *st);
LF_API const char *lf_st_file(const lf_safetensors *st, int64_t i);

/* __metadata__'s value for key, or NULL (the first file's, for a sharded checkpoint). */
LF_API const char *lf_st_metadata(const lf_safetensors *st, const char *key);

/* Write tensors (any device, any layout: each is written contiguous) to path as one safetensors
 * file, whole or not at all; names must be distinct, and none may be __metadata__ (the header's
 * own key: such a file would not read back). A refused write leaves a file at path as it was. */
typedef struct lf_st_entry {
    const char *name;
    const lf_tensor *t;
} lf_st_entry;
LF_API lf_status lf_st_write(const char *path, const lf_st_entry *entries, int n);

/* The activation a Hugging Face config.json names (hidden_activation, else hidden_act): silu,
 * gelu_pytorch_tanh (gelu_tanh), gelu (gelu_erf). path: config.json, or the directory or file
 * beside it. LF_EINVAL when there is none or it names another. */
LF_API lf_status lf_hf_config_act(const char *path, lf_act *act);

#ifdef __cplusplus
}
#endif
#endif
