/* Checkpoint tensors read as a chosen dtype: BF16/F16/F32 converted, FP8 weights dequantized
 * with the scales stored beside them. linfuse computes in BF16, F16 and F32, so an FP8 checkpoint
 * (llm-compressor's, FBGEMM's, DeepSeek's block-scaled ones) runs on every device at the cost of
 * its dequantized size; lf_st_get hands out E4M3 as stored (an LF_DTYPE_F8E4M3 tensor, no scale).
 * Decoding is written out (E4M3 in tensor.h, E5M2 here): two formulas from the OCP FP8
 * specification, which no Debian library offers. Layer: safetensors/. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors/st_impl.h"

float lf_f32_from_f8e5m2(uint8_t b)
{
    const int e = (b >> 2) & 0x1f, m = b & 3;
    float v;
    if (e == 0x1f)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexpf((float)m, -16); /* subnormal: m/4 x 2^-14 */
    else
        v = ldexpf((float)(4 + m), e - 17); /* (1 + m/4) x 2^(e-15) */
    return b & 0x80 ? -v : v;
}

/* Element i of a BF16/F16/F32 tensor's bytes, which the format does not promise are aligned. */
static float elem(const st_tensor *t, const unsigned char *p, int64_t i)
{
    union {
        uint16_t h;
        float f;
    } u = {0};
    memcpy(&u, p + i * t->esize, (size_t)t->esize);
    return lf_load_f32(&u, (lf_dtype)t->dtype, 0);
}

/* A tensor's elements; the header's check (shape x dtype = its bytes, within the file) keeps this
 * in range once no dimension is zero. */
static int64_t numel(const st_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

static int has_zero_dim(const st_tensor *t)
{
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] == 0)
            return 1;
    return 0;
}

static int64_t cdiv(int64_t a, int64_t b) /* a >= 0, b > 0; never overflows */
{
    return a / b + (a % b != 0);
}

/* The length of a scale block along a dimension of len values that the scale covers in grid
 * blocks, or 0 when the grid does not tell. Block-scaled checkpoints (DeepSeek-V3's, and
 * llm-compressor's and FBGEMM's block formats) use 128 x 128 blocks, the last one of a dimension
 * that 128 does not divide cut short: 300 rows in 3 blocks are blocks of 128, 128 and 44 (splitting
 * the grid evenly, 100 each, gave rows 100-127 their neighbour's scale: a silent 50-340% error).
 * So 128 where the grid has ceil(len / 128) blocks; else an even split where len divides into
 * the grid (blocks of another size, all whole); else 0: the block cannot be read off the grid. */
static int64_t block_len(int64_t len, int64_t grid)
{
    if (grid == 1)
        return len;
    if (grid == len)
        return 1;
    if (cdiv(len, 128) == grid)
        return 128;
    return len % grid == 0 ? len / grid : 0;
}

/* The block size the checkpoint states, where a config.json beside the weight's file has one
 * (quantization_config.weight_block_size, [rows, cols], as DeepSeek-V3's and Qwen3's FP8
 * checkpoints write it): 1 with *br, *bc set, else 0 (no such file or entry: the grid decides). */
static int config_blocks(const st_file *f, int64_t *br, int64_t *bc)
{
    if (f->fd < 0 || !f->path) /* a buffer: nothing beside it */
        return 0;
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s", f->path);
    char *slash = strrchr(cfg, '/');
    snprintf(slash ? slash + 1 : cfg, sizeof cfg - (size_t)(slash ? slash + 1 - cfg : 0), "config.json");
    struct stat sb;
    json_t *j = NULL;
    if (stat(cfg, &sb) != 0 || !S_ISREG(sb.st_mode) || st_load_json(cfg, 0, &j) != LF_OK) {
        lf_clear_error(); /* no config, or one that is not JSON: the grid decides, as without one */
        return 0;
    }
    json_t *q = json_object_get(json_object_get(j, "quantization_config"), "weight_block_size");
    int ok = json_is_array(q) && json_array_size(q) == 2 && json_is_integer(json_array_get(q, 0)) &&
             json_is_integer(json_array_get(q, 1));
    if (ok) {
        *br = json_integer_value(json_array_get(q, 0)), *bc = json_integer_value(json_array_get(q, 1));
        ok = *br > 0 && *bc > 0;
    }
    json_decref(j);
    return ok;
}

/* Decode FP8 tensor t of file f into dst (n floats), times its scale; both read from the file. */
static lf_status dequantize(const lf_safetensors *st, const st_file *f, const st_tensor *t, const char *name,
                            float *dst)
{
    char sname[600];
    const st_file *sf = NULL;
    const st_tensor *s = NULL;
    for (int inv = 0; inv < 2 && !s; inv++) {
        snprintf(sname, sizeof sname, "%s%s", name, inv ? "_scale_inv" : "_scale");
        s = st_find(st, sname, &sf);
    }
    if (!s)
        return lf_fail(LF_EINVAL,
                       "%s: tensor \"%.200s\" is %s and the checkpoint has no \"%.200s_scale\" or \"%.200s_scale_inv\" "
                       "to dequantize it with",
                       f->path, name, t->dtype_name, name, name);
    if (!lf_dtype_computes((lf_dtype)s->dtype))
        return lf_fail(LF_EDTYPE, "%s: scale \"%.200s\" is %s; expected F32, BF16 or F16", sf->path, sname,
                       s->dtype_name);
    char ws[LF_SHAPE_STR_CAP], ss[LF_SHAPE_STR_CAP];
    lf_fmt_shape(ws, sizeof ws, t->ndim, t->shape), lf_fmt_shape(ss, sizeof ss, s->ndim, s->shape);
    if (has_zero_dim(t) || has_zero_dim(s)) /* nothing to decode, and a dimension no block divides */
        return lf_fail(LF_ESHAPE, "%s: FP8 tensor \"%.200s\" %s with scale \"%.200s\" %s: a zero dimension", f->path,
                       name, ws, sname, ss);
    /* the weight as rows x cols (a vector: one column); the scale as a grid of sr x sc blocks */
    const int64_t rows = t->ndim ? t->shape[0] : 1, n = numel(t), cols = n / rows;
    const int64_t sn = numel(s);
    int64_t sr = 1, sc = 1;
    if (sn != 1) {
        if (t->ndim > 2 || s->ndim > 2 || s->ndim == 0)
            sr = 0;
        else
            sr = s->shape[0], sc = s->ndim == 2 ? s->shape[1] : 1;
    }
    if (!sr || !sc || sr > rows || sc > cols)
        return lf_fail(LF_ESHAPE,
                       "%s: scale \"%.200s\" %s does not fit weight %s: expected one value, one per row, or a grid of "
                       "blocks of a 2-D weight",
                       sf->path, sname, ss, ws);
    int64_t br = block_len(rows, sr), bc = block_len(cols, sc), cbr, cbc;
    const int grid = s->ndim == 2 && (sr > 1 || sc > 1) && sr != rows && sc != cols; /* blocks, not rows or columns */
    if (grid && config_blocks(f, &cbr, &cbc)) { /* and the size the checkpoint says they have */
        if (cdiv(rows, cbr) != sr || cdiv(cols, cbc) != sc)
            return lf_fail(LF_ESHAPE,
                           "%s: scale \"%.200s\" %s over weight %s does not fit the %lld x %lld blocks config.json's "
                           "weight_block_size gives",
                           sf->path, sname, ss, ws, (long long)cbr, (long long)cbc);
        br = cbr, bc = cbc;
    }
    if (!br || !bc)
        return lf_fail(LF_ESHAPE,
                       "%s: scale \"%.200s\" %s over weight %s: the blocks' size cannot be told from the grid (not "
                       "128, the last block cut short, nor an even split); linfuse reads 128 x 128 blocks, as "
                       "DeepSeek-V3's checkpoints have them",
                       sf->path, sname, ss, ws);
    unsigned char *q = malloc((size_t)n), *sp = malloc((size_t)(s->end - s->begin));
    lf_status st_ = q && sp ? LF_OK : lf_fail(LF_ENOMEM, "%s: out of memory reading \"%.200s\"", f->path, name);
    if (st_ == LF_OK)
        st_ = st_read(f, t->begin, (size_t)n, q, name);
    if (st_ == LF_OK)
        st_ = st_read(sf, s->begin, (size_t)(s->end - s->begin), sp, sname);
    for (int64_t i = 0; st_ == LF_OK && i < sn; i++) { /* a NaN or infinite scale would make the layer NaN */
        const float v = elem(s, sp, i);
        if (!isfinite(v))
            st_ = lf_fail(LF_EINVAL,
                          "%s: scale \"%.200s\" of FP8 tensor \"%.200s\" holds %g at element %lld: a scale "
                          "must be finite",
                          sf->path, sname, name, (double)v, (long long)i);
    }
    float (*decode)(uint8_t) = !strcmp(t->dtype_name, "F8_E4M3") ? lf_f32_from_f8e4m3 : lf_f32_from_f8e5m2;
    for (int64_t r = 0; st_ == LF_OK && r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[r * cols + c] = decode(q[r * cols + c]) * elem(s, sp, (r / br) * sc + c / bc);
    free(q), free(sp);
    return st_;
}

lf_status lf_st_get_as(const lf_safetensors *st, const char *name, lf_dtype dt, lf_tensor **out)
{
    LF_CHECK_PTR(out, "lf_st_get_as", "out");
    *out = NULL;
    LF_CHECK_PTR(st, "lf_st_get_as", "st");
    LF_CHECK_PTR(name, "lf_st_get_as", "name");
    if ((unsigned)dt > LF_DTYPE_COUNT)
        return lf_fail(LF_EDTYPE, "lf_st_get_as: dtype %s: expected bf16, f16, f32 or LF_DTYPE_COUNT (the file's)",
                       lf_dtype_name(dt));
    const st_file *f = NULL;
    const st_tensor *t = st_find(st, name, &f);
    const int fp8 = t && !strncmp(t->dtype_name, "F8_", 3);
    if (!fp8) { /* the tensor as stored, read into memory of its own (or the error saying why not) */
        lf_tensor *raw = NULL;
        LF_TRY(st_copy(st, name, &raw));
        if (dt == LF_DTYPE_COUNT || dt == raw->dtype) {
            *out = raw;
            return LF_OK;
        }
        const int64_t n = lf_tensor_numel(raw);
        float *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
        lf_status s = tmp ? lf_tensor_to_f32(raw, tmp, n) : lf_fail(LF_ENOMEM, "lf_st_get_as: out of memory");
        if (s == LF_OK)
            s = lf_tensor_from_f32(out, dt, raw->ndim, raw->shape, tmp, LF_DEVICE_CPU);
        free(tmp);
        lf_tensor_free(raw);
        return s;
    }
    if (t->ndim < 1 || t->ndim > LF_MAX_DIMS)
        return lf_fail(LF_ESHAPE, "%s: tensor \"%.200s\" has %d dims; linfuse tensors have 1 to %d", f->path, name,
                       t->ndim, LF_MAX_DIMS);
    const int64_t n = has_zero_dim(t) ? 0 : numel(t);
    float *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!tmp)
        return lf_fail(LF_ENOMEM, "%s: out of memory dequantizing \"%.200s\" (%lld values)", f->path, name,
                       (long long)n);
    lf_status s = dequantize(st, f, t, name, tmp);
    if (s == LF_OK)
        s = lf_tensor_from_f32(out, dt == LF_DTYPE_COUNT ? LF_DTYPE_BF16 : dt, t->ndim, t->shape, tmp, LF_DEVICE_CPU);
    free(tmp);
    return s;
}
