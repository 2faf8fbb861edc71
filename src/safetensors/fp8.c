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

/* The length of a scale block along a dimension of len values that grid blocks cover, where the
 * grid alone says it: one block (the whole dimension) or one block a value; else 0. Any other grid
 * is a block size the file does not state: 3 blocks over 300 rows are 128, 128 and 44 (DeepSeek's
 * blocks, the last cut short) or 100 each, or anything from 100 to 149, and each decodes to other
 * numbers (read as 100 where they were 128: rows 100-127 take their neighbour's scale, 50-340%
 * off). So the block size comes from the checkpoint's config, or the tensor is refused. */
static int64_t grid_block(int64_t len, int64_t grid)
{
    return grid == 1 ? len : grid == len ? 1 : 0;
}

/* A [rows, cols] block size as a config states it: two JSON integers over 0. */
static int block_pair(const json_t *v, int64_t *br, int64_t *bc)
{
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 0)) ||
        !json_is_integer(json_array_get(v, 1)))
        return 0;
    *br = json_integer_value(json_array_get(v, 0)), *bc = json_integer_value(json_array_get(v, 1));
    return *br > 0 && *bc > 0;
}

/* v as a short JSON text for a message. */
static void json_text(const json_t *v, char *buf, size_t cap)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    snprintf(buf, cap, "%.80s%s", t ? t : "?", t && strlen(t) > 80 ? "..." : "");
    free(t);
}

/* The block size config.json (cfg, parsed as j) states, where it states one: the key of DeepSeek's
 * and Qwen's FP8 checkpoints (quantization_config.weight_block_size) or of compressed-tensors'
 * block strategy (llm-compressor's: quantization_config.config_groups.*.weights.block_structure).
 * *given 0 when neither is there (or is null); an error naming the key when one holds something
 * that is not [rows, cols], two integers over 0, or when groups state different sizes. */
static lf_status config_block_size(const char *cfg, json_t *j, int64_t *br, int64_t *bc, int *given)
{
    char shown[100];
    json_t *q = json_object_get(j, "quantization_config");
    json_t *wbs = json_object_get(q, "weight_block_size");
    *given = 0;
    if (wbs && !json_is_null(wbs)) {
        if (!block_pair(wbs, br, bc)) {
            json_text(wbs, shown, sizeof shown);
            return lf_fail(LF_EINVAL,
                           "%s: quantization_config.weight_block_size is %s: expected [rows, cols], two integers "
                           "over 0 (as [128, 128])",
                           cfg, shown);
        }
        *given = 1;
        return LF_OK;
    }
    const char *group;
    json_t *g;
    json_object_foreach(json_object_get(q, "config_groups"), group, g)
    {
        json_t *bs = json_object_get(json_object_get(g, "weights"), "block_structure");
        int64_t r, c;
        if (!bs || json_is_null(bs))
            continue;
        if (!block_pair(bs, &r, &c)) {
            json_text(bs, shown, sizeof shown);
            return lf_fail(LF_EINVAL,
                           "%s: quantization_config.config_groups.%.60s.weights.block_structure is %s: expected "
                           "[rows, cols], two integers over 0",
                           cfg, group, shown);
        }
        if (*given && (r != *br || c != *bc))
            return lf_fail(LF_EINVAL,
                           "%s: the config_groups' block_structure give blocks of %lld x %lld and %lld x %lld: "
                           "linfuse cannot tell which a tensor has",
                           cfg, (long long)*br, (long long)*bc, (long long)r, (long long)c);
        *br = r, *bc = c, *given = 1;
    }
    return LF_OK;
}

/* The block size of the FP8 tensors of file f from the config.json beside it (see
 * config_block_size): *given 0 when it has none or there is no such file; an error when the file
 * is there but unreadable, or states an unusable size. path gets the config's path. */
static lf_status config_blocks(const st_file *f, char *cfg, size_t cap, int64_t *br, int64_t *bc, int *given)
{
    *given = 0;
    snprintf(cfg, cap, "config.json");
    if (f->fd < 0 || !f->path) /* a buffer: nothing beside it */
        return LF_OK;
    snprintf(cfg, cap, "%s", f->path);
    char *slash = strrchr(cfg, '/');
    snprintf(slash ? slash + 1 : cfg, cap - (size_t)(slash ? slash + 1 - cfg : 0), "config.json");
    struct stat sb;
    if (stat(cfg, &sb) != 0)
        return LF_OK;
    json_t *j = NULL;
    LF_TRY(st_load_json(cfg, 0, &j));
    lf_status s = config_block_size(cfg, j, br, bc, given);
    json_decref(j);
    return s;
}

/* An FP8 weight and its scale as the decoder sees them: the weight as rows x cols (a vector: one
 * column), the scale as a grid of sr x sc blocks of br x bc values each, and the names and shapes
 * its messages give. */
typedef struct scaled {
    const st_file *f, *sf; /* the weight's file, the scale's */
    const st_tensor *t, *s;
    const char *name;
    char sname[600], ws[LF_SHAPE_STR_CAP], ss[LF_SHAPE_STR_CAP];
    int64_t rows, cols, sr, sc, br, bc;
} scaled;

/* g's blocks: where the grid alone says their size, that; else the size the checkpoint's config
 * states, which must fit the grid; else refused, saying what to add. */
static lf_status block_size(scaled *g)
{
    g->br = grid_block(g->rows, g->sr), g->bc = grid_block(g->cols, g->sc);
    if (g->br && g->bc)
        return LF_OK;
    char cfg[4200];
    int64_t br = 0, bc = 0;
    int given = 0;
    LF_TRY(config_blocks(g->f, cfg, sizeof cfg, &br, &bc, &given));
    if (!given)
        return lf_fail(LF_ESHAPE,
                       "%s: FP8 tensor \"%.200s\" %s has scale \"%.200s\" %s: blocks whose size the grid does not "
                       "tell and the checkpoint does not state; add \"quantization_config\": "
                       "{\"weight_block_size\": [rows, cols]} to %s (DeepSeek-V3's and Qwen3's FP8 checkpoints "
                       "have [128, 128] there)",
                       g->f->path, g->name, g->ws, g->sname, g->ss, cfg);
    if (cdiv(g->rows, br) != g->sr || cdiv(g->cols, bc) != g->sc)
        return lf_fail(LF_ESHAPE,
                       "%s: scale \"%.200s\" %s over weight %s does not fit the %lld x %lld blocks that %s's "
                       "weight_block_size gives",
                       g->sf->path, g->sname, g->ss, g->ws, (long long)br, (long long)bc, cfg);
    g->br = br, g->bc = bc;
    return LF_OK;
}

/* The scale of FP8 tensor t (name) of file f, found and checked into g: its grid over the weight
 * and the size of its blocks. */
static lf_status find_scale(const lf_safetensors *st, const st_file *f, const st_tensor *t, const char *name, scaled *g)
{
    *g = (scaled){.f = f, .t = t, .name = name};
    for (int inv = 0; inv < 2 && !g->s; inv++) {
        snprintf(g->sname, sizeof g->sname, "%s%s", name, inv ? "_scale_inv" : "_scale");
        g->s = st_find(st, g->sname, &g->sf);
    }
    const st_tensor *s = g->s;
    if (!s)
        return lf_fail(LF_EINVAL,
                       "%s: tensor \"%.200s\" is %s and the checkpoint has no \"%.200s_scale\" or \"%.200s_scale_inv\" "
                       "to dequantize it with",
                       f->path, name, t->dtype_name, name, name);
    if (!lf_dtype_computes((lf_dtype)s->dtype))
        return lf_fail(LF_EDTYPE, "%s: scale \"%.200s\" is %s; expected F32, BF16 or F16", g->sf->path, g->sname,
                       s->dtype_name);
    lf_fmt_shape(g->ws, sizeof g->ws, t->ndim, t->shape), lf_fmt_shape(g->ss, sizeof g->ss, s->ndim, s->shape);
    if (has_zero_dim(t) || has_zero_dim(s)) /* nothing to decode, and a dimension no block divides */
        return lf_fail(LF_ESHAPE, "%s: FP8 tensor \"%.200s\" %s with scale \"%.200s\" %s: a zero dimension", f->path,
                       name, g->ws, g->sname, g->ss);
    g->rows = t->ndim ? t->shape[0] : 1, g->cols = numel(t) / g->rows;
    g->sr = 1, g->sc = 1;
    if (numel(s) != 1) {
        if (t->ndim > 2 || s->ndim > 2 || s->ndim == 0)
            g->sr = 0;
        else
            g->sr = s->shape[0], g->sc = s->ndim == 2 ? s->shape[1] : 1;
    }
    if (!g->sr || !g->sc || g->sr > g->rows || g->sc > g->cols)
        return lf_fail(LF_ESHAPE,
                       "%s: scale \"%.200s\" %s does not fit weight %s: expected one value, one per row, or a grid of "
                       "blocks of a 2-D weight",
                       g->sf->path, g->sname, g->ss, g->ws);
    return block_size(g);
}

/* Decode FP8 tensor t of file f into dst (its numel floats), times its scale; both read from the
 * file. */
static lf_status dequantize(const lf_safetensors *st, const st_file *f, const st_tensor *t, const char *name,
                            float *dst)
{
    scaled g;
    LF_TRY(find_scale(st, f, t, name, &g));
    const st_tensor *s = g.s;
    const st_file *sf = g.sf;
    const char *sname = g.sname;
    const int64_t n = numel(t), sn = numel(s), rows = g.rows, cols = g.cols, sc = g.sc, br = g.br, bc = g.bc;
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
