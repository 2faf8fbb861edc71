/* The gated MLP's weights (linfuse/nn.h): made at random, taken from tensors or a safetensors
 * checkpoint, moved to a device, quantized to FP8 or given FP8 weights, freed. Its forwards are
 * mlp.c's. Layer: nn/. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "linfuse/nn.h"
#include "tensor/tensor_impl.h"

/* The activations a gated MLP takes. */
static int gated_act(lf_act a)
{
    return a == LF_ACT_GELU_TANH || a == LF_ACT_SILU || a == LF_ACT_GELU_ERF;
}

/* gate.weight and up.weight as row views of gate_up (old views dropped). */
static lf_status make_views(lf_nn_gated_mlp *m)
{
    const int64_t H = m->hidden, D = m->dim, shape[2] = {H, D}, stride[2] = {D, 1};
    lf_tensor *g = NULL, *u = NULL;
    lf_status s = lf_tensor_as_strided(&g, m->gate_up, 2, shape, stride, 0);
    if (s == LF_OK)
        s = lf_tensor_as_strided(&u, m->gate_up, 2, shape, stride, H * D);
    if (s != LF_OK) {
        lf_tensor_free(g);
        return s;
    }
    lf_tensor_free(m->gate.weight);
    lf_tensor_free(m->up.weight);
    m->gate.weight = g;
    m->up.weight = u;
    return LF_OK;
}

lf_status lf_nn_gated_mlp_init(lf_nn_gated_mlp *m, const lf_nn_gated_mlp_opts *o, lf_rng *rng)
{
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_init", "m");
    memset(m, 0, sizeof *m);
    LF_CHECK_PTR(o, "lf_nn_gated_mlp_init", "opts");
    LF_CHECK_PTR(rng, "lf_nn_gated_mlp_init", "rng");
    if (o->dim < 1 || o->hidden < 1)
        return lf_fail(LF_ESHAPE, "lf_nn_gated_mlp_init: dim = %lld and hidden = %lld, expected both >= 1",
                       (long long)o->dim, (long long)o->hidden);
    if (!lf_dtype_computes(o->dtype))
        return lf_fail(LF_EDTYPE,
                       "lf_nn_gated_mlp_init: dtype %s: parameters are bf16, f16 or f32 (an FP8 module is made "
                       "from one by lf_nn_gated_mlp_quantize_fp8)",
                       lf_dtype_known(o->dtype) ? lf_dtype_name(o->dtype) : "unknown");
    if (o->act != LF_ACT_NONE && !gated_act(o->act))
        return lf_fail(LF_EINVAL,
                       "lf_nn_gated_mlp_init: act %s: a gated MLP's is gelu_tanh (GeGLU), silu (SwiGLU) or gelu_erf",
                       lf_act_name(o->act));
    if (o->device != LF_DEVICE_CPU)
        return lf_fail(LF_EDEVICE,
                       "lf_nn_gated_mlp_init: device %s: parameters are created on cpu; move them with "
                       "lf_nn_gated_mlp_to_device",
                       lf_device_name(o->device));
    /* gate then up, drawn in that order as two nn.Linear(dim, hidden) would be */
    const double bound = 1.0 / sqrt((double)o->dim);
    int64_t gu[2] = {2 * o->hidden, o->dim};
    lf_nn_linear_opts outo = {
        .in_features = o->hidden, .out_features = o->dim, .bias = 0, .dtype = o->dtype, .device = LF_DEVICE_CPU};
    lf_status s = lf_tensor_empty(&m->gate_up, o->dtype, 2, gu, LF_DEVICE_CPU);
    if (s == LF_OK)
        s = lf_tensor_fill_uniform(m->gate_up, rng, -bound, bound);
    m->dim = o->dim;
    m->hidden = o->hidden;
    m->act = o->act == LF_ACT_NONE ? LF_ACT_GELU_TANH : o->act;
    if (s == LF_OK)
        s = make_views(m);
    m->gate.in_features = m->up.in_features = o->dim;
    m->gate.out_features = m->up.out_features = o->hidden;
    if (s == LF_OK)
        s = lf_nn_linear_init(&m->down, &outo, rng);
    if (s != LF_OK) {
        lf_nn_gated_mlp_free(m);
        return s;
    }
    return LF_OK;
}

lf_status lf_nn_gated_mlp_from_weights(lf_nn_gated_mlp *m, lf_tensor *gate_up, lf_tensor *down_weight, lf_act act)
{
    if (gate_up && gate_up == down_weight) { /* one handle cannot be owned twice (nor fit both shapes) */
        lf_tensor_free(gate_up);
        if (m)
            memset(m, 0, sizeof *m);
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_from_weights: gate_up and down_weight are the same handle; "
                                  "pass two tensors, (2H, D) and (D, H)");
    }
    if (!m) { /* the weights are the module's "also when this fails": freed, as they would be */
        lf_tensor_free(gate_up);
        lf_tensor_free(down_weight);
    }
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_from_weights", "m");
    memset(m, 0, sizeof *m);
    if (!gate_up || !down_weight || !gated_act(act)) {
        lf_tensor_free(gate_up);
        lf_tensor_free(down_weight);
        if (!gated_act(act))
            return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_from_weights: act %s: gelu_tanh, silu or gelu_erf",
                           lf_act_name(act));
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_from_weights: argument '%s' is NULL",
                       gate_up ? "down_weight" : "gate_up");
    }
    char a[LF_SHAPE_STR_CAP], b[LF_SHAPE_STR_CAP];
    lf_status s = LF_OK;
    const int shapes_fit = gate_up->ndim == 2 && down_weight->ndim == 2 && gate_up->shape[0] % 2 == 0 &&
                           down_weight->shape[0] == gate_up->shape[1] &&
                           down_weight->shape[1] == gate_up->shape[0] / 2 && gate_up->dtype == down_weight->dtype &&
                           lf_tensor_device(gate_up) == lf_tensor_device(down_weight);
    if (shapes_fit && !lf_tensor_is_contiguous(gate_up)) /* the shapes are right: say what is not */
        s = lf_fail(LF_ESHAPE,
                    "lf_nn_gated_mlp_from_weights: gate_up %s (%s) is not contiguous (strides %lld, %lld): expected a "
                    "contiguous (2H, D); pass a contiguous copy",
                    lf_fmt_shape(a, sizeof a, gate_up->ndim, gate_up->shape), lf_dtype_name(gate_up->dtype),
                    (long long)gate_up->stride[0], (long long)gate_up->stride[1]);
    else if (!shapes_fit)
        s = lf_fail(LF_ESHAPE,
                    "lf_nn_gated_mlp_from_weights: gate_up %s (%s) and down %s (%s): expected a contiguous (2H, D) "
                    "and a (D, H) of one dtype and device",
                    lf_fmt_shape(a, sizeof a, gate_up->ndim, gate_up->shape), lf_dtype_name(gate_up->dtype),
                    lf_fmt_shape(b, sizeof b, down_weight->ndim, down_weight->shape),
                    lf_dtype_name(down_weight->dtype));
    if (s == LF_OK) {
        m->dim = gate_up->shape[1];
        m->hidden = gate_up->shape[0] / 2;
        m->act = act;
        m->gate_up = gate_up;
        s = make_views(m);
    }
    if (s != LF_OK) { /* the weights were handed over: they go with the failure */
        memset(m, 0, sizeof *m);
        lf_tensor_free(gate_up);
        lf_tensor_free(down_weight);
        return s;
    }
    m->gate.in_features = m->up.in_features = m->dim;
    m->gate.out_features = m->up.out_features = m->hidden;
    m->down.weight = down_weight;
    m->down.in_features = m->hidden;
    m->down.out_features = m->dim;
    return LF_OK;
}

lf_status lf_nn_gated_mlp_to_device(lf_nn_gated_mlp *m, lf_device dev)
{
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_to_device", "m");
    if (!m->gate_up || !m->down.weight)
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_to_device: the module is not initialised");
    /* every parameter copied first, then swapped in: a failure leaves m as it was */
    lf_tensor **own[6] = {&m->gate_up, &m->down.weight, &m->gate_up_q, &m->gate_up_scale, &m->down_q, &m->down_scale};
    lf_tensor *moved[6] = {NULL};
    lf_status s = LF_OK;
    for (int i = 0; i < 6 && s == LF_OK; i++)
        if (*own[i])
            s = lf_tensor_to_device(&moved[i], *own[i], dev);
    lf_tensor *old_gu = m->gate_up;
    if (s == LF_OK) {
        m->gate_up = moved[0];
        s = make_views(m);
        if (s != LF_OK) /* put the old storage back: the views still point into it */
            m->gate_up = old_gu;
    }
    if (s != LF_OK) {
        for (int i = 0; i < 6; i++)
            lf_tensor_free(moved[i]);
        return s;
    }
    for (int i = 0; i < 6; i++) {
        lf_tensor_free(i == 0 ? old_gu : *own[i]);
        *own[i] = moved[i];
    }
    return LF_OK;
}

/* The FP8 weights q (gate_up's codes and scales, down's codes and scales) made the module's,
 * replacing any it had, when s is LF_OK; freed, and m (which may then be NULL) left as it was,
 * otherwise. Returns s. */
static lf_status take_fp8(lf_nn_gated_mlp *m, lf_tensor *q[4], lf_status s)
{
    if (s != LF_OK) { /* m may be NULL here */
        for (int i = 0; i < 4; i++)
            lf_tensor_free(q[i]);
        return s;
    }
    lf_tensor **own[4] = {&m->gate_up_q, &m->gate_up_scale, &m->down_q, &m->down_scale};
    for (int i = 0; i < 4; i++) {
        lf_tensor_free(*own[i]);
        *own[i] = q[i];
    }
    return LF_OK;
}

lf_status lf_nn_gated_mlp_quantize_fp8(lf_nn_gated_mlp *m)
{
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_quantize_fp8", "m");
    if (!m->gate_up || !m->down.weight)
        return lf_fail(LF_EINVAL, "lf_nn_gated_mlp_quantize_fp8: the module is not initialised");
    lf_tensor *q[4] = {NULL};
    lf_status s = lf_quantize_fp8(&q[0], &q[1], m->gate_up);
    if (s == LF_OK)
        s = lf_quantize_fp8_128x128(&q[2], &q[3], m->down.weight);
    return take_fp8(m, q, s);
}

/* Whether t is a contiguous (rows, cols) tensor of dtype dt on ref's device and unit. */
static int fits(const lf_tensor *t, lf_dtype dt, int64_t rows, int64_t cols, const lf_tensor *ref)
{
    return t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols && t->dtype == dt && lf_tensor_is_contiguous(t) &&
           lf_tensor_device(t) == lf_tensor_device(ref) && lf_tensor_device_index(t) == lf_tensor_device_index(ref);
}

lf_status lf_nn_gated_mlp_set_fp8_weights(lf_nn_gated_mlp *m, lf_tensor *gate_up_q, lf_tensor *gate_up_scale,
                                          lf_tensor *down_q, lf_tensor *down_scale)
{
    static const char fn[] = "lf_nn_gated_mlp_set_fp8_weights";
    lf_tensor *q[4] = {gate_up_q, gate_up_scale, down_q, down_scale};
    static const char *const name[4] = {"gate_up_q", "gate_up_scale", "down_q", "down_scale"};
    lf_status s = LF_OK;
    if (!m)
        s = lf_fail(LF_EINVAL, "%s: argument 'm' is NULL", fn);
    else if (!m->gate_up || !m->down.weight)
        s = lf_fail(LF_EINVAL, "%s: the module is not initialised", fn);
    for (int i = 0; i < 4 && s == LF_OK; i++)
        if (!q[i])
            s = lf_fail(LF_EINVAL, "%s: argument '%s' is NULL", fn, name[i]);
    if (s == LF_OK) {
        const int64_t H = m->hidden, D = m->dim;
        int64_t ds[2];
        lf_scale_shape(LF_SCALE_128X128, D, H, ds);
        const struct {
            lf_dtype dt;
            int64_t rows, cols;
        } want[4] = {{LF_DTYPE_F8E4M3, 2 * H, D},
                     {LF_DTYPE_F32, 2 * H, 1},
                     {LF_DTYPE_F8E4M3, D, H},
                     {LF_DTYPE_F32, ds[0], ds[1]}};
        char a[LF_SHAPE_STR_CAP];
        for (int i = 0; i < 4 && s == LF_OK; i++)
            if (!fits(q[i], want[i].dt, want[i].rows, want[i].cols, m->gate_up))
                s = lf_fail(q[i]->dtype != want[i].dt ? LF_EDTYPE : LF_ESHAPE,
                            "%s: %s is %s %s on %s:%d; expected a contiguous (%lld, %lld) %s on %s:%d (the "
                            "module's dim = %lld, hidden = %lld)",
                            fn, name[i], lf_fmt_shape(a, sizeof a, q[i]->ndim, q[i]->shape), lf_dtype_name(q[i]->dtype),
                            lf_device_name(lf_tensor_device(q[i])), lf_tensor_device_index(q[i]),
                            (long long)want[i].rows, (long long)want[i].cols, lf_dtype_name(want[i].dt),
                            lf_device_name(lf_tensor_device(m->gate_up)), lf_tensor_device_index(m->gate_up),
                            (long long)D, (long long)H);
    }
    return take_fp8(m, q, s); /* handed over: on a failure they go with it */
}

void lf_nn_gated_mlp_free(lf_nn_gated_mlp *m)
{
    if (!m)
        return;
    lf_nn_linear_free(&m->gate);
    lf_nn_linear_free(&m->up);
    lf_nn_linear_free(&m->down);
    lf_tensor_free(m->gate_up);
    lf_tensor_free(m->gate_up_q), lf_tensor_free(m->gate_up_scale);
    lf_tensor_free(m->down_q), lf_tensor_free(m->down_scale);
    m->gate_up = m->gate_up_q = m->gate_up_scale = m->down_q = m->down_scale = NULL;
}

/* How checkpoints name a gated MLP's projections, in the order they are looked for: Hugging
 * Face's (Llama, Mistral, Qwen, Gemma and the many alike), Phi-3's one fused gate_up_proj ((2H, D):
 * the gates' rows, then the ups', linfuse's own gate_up layout), and Meta's reference naming (w1
 * the gate, w3 the up, w2 the down: Llama's original checkpoints, Mixtral's experts). */
static const struct {
    const char *gate, *up, *down; /* up NULL: gate is the fused [gate; up] */
} layouts[] = {{"gate_proj", "up_proj", "down_proj"}, {"gate_up_proj", NULL, "down_proj"}, {"w1", "w3", "w2"}};
enum { N_LAYOUTS = sizeof layouts / sizeof *layouts };

/* Whether st has the weight "<prefix>.<part>.weight" (prefix: its first plen bytes). */
static int has_part(const lf_safetensors *st, const char *prefix, size_t plen, const char *part)
{
    char name[600];
    return part && snprintf(name, sizeof name, "%.*s.%s.weight", (int)plen, prefix, part) < (int)sizeof name &&
           lf_st_has(st, name);
}

/* Whether naming l shows at prefix in st: a weight of its own there (down_proj, which Hugging
 * Face's two namings share, tells neither apart). */
static int naming_there(const lf_safetensors *st, const char *prefix, size_t plen, int l)
{
    const char *own[3] = {layouts[l].gate, layouts[l].up,
                          strcmp(layouts[l].down, "down_proj") ? layouts[l].down : NULL};
    for (int i = 0; i < 3; i++)
        if (has_part(st, prefix, plen, own[i]))
            return 1;
    return 0;
}

/* The MLP layers st holds (the prefixes of their gates' weights, by every naming, each layer
 * once), a few, into buf. */
static void list_layers(const lf_safetensors *st, char *buf, size_t cap)
{
    size_t at = 0;
    int64_t found = 0;
    buf[0] = '\0';
    for (int64_t i = 0; i < lf_st_count(st); i++) {
        const char *name = lf_st_name(st, i);
        const size_t n = strlen(name);
        for (int l = 0; l < N_LAYOUTS; l++) {
            char tail[64];
            const size_t tl = (size_t)snprintf(tail, sizeof tail, ".%s.weight", layouts[l].gate);
            if (n <= tl || strcmp(name + n - tl, tail))
                continue;
            int earlier = 0; /* a layer of two namings is listed under the first */
            for (int k = 0; k < l && !earlier; k++)
                earlier = has_part(st, name, n - tl, layouts[k].gate);
            if (earlier)
                continue;
            if (++found <= 5 && at < cap)
                at += (size_t)snprintf(buf + at, cap - at, "%s%.*s", found > 1 ? ", " : "",
                                       (int)(n - tl > 120 ? 120 : n - tl), name);
        }
    }
    if (!found)
        snprintf(buf, cap, "none (no tensor named *.gate_proj.weight, *.gate_up_proj.weight or *.w1.weight)");
    else if (found > 5 && at < cap)
        snprintf(buf + at, cap - at, ", ... (%lld in all)", (long long)found);
}

/* A naming's projections as a message names them: "gate_proj/up_proj/down_proj". */
static const char *naming_words(int l, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s%s/%s", layouts[l].gate, layouts[l].up ? "/" : "", layouts[l].up ? layouts[l].up : "",
             layouts[l].down);
    return buf;
}

/* The naming whose weights are all at prefix in st (into *which), their names into name; LF_EINVAL
 * when two namings are there (which would run is not the file's to leave to the order linfuse
 * looks in: a layer converted twice, say, whose halves disagree), or when none is, listing the
 * layers st holds. */
static lf_status find_layout(const lf_safetensors *st, const char *prefix, const char *fn, int *which,
                             char (*name)[512])
{
    const size_t plen = strlen(prefix);
    int there[N_LAYOUTS], n_there = 0;
    for (int l = 0; l < N_LAYOUTS; l++)
        if (naming_there(st, prefix, plen, l))
            there[n_there++] = l;
    if (n_there > 1) {
        char a[80], b[80];
        return lf_fail(LF_EINVAL,
                       "%s: \"%.200s\" holds two namings of one MLP, %s and %s: linfuse does not choose between "
                       "them; keep one in the checkpoint",
                       fn, prefix, naming_words(there[0], a, sizeof a), naming_words(there[1], b, sizeof b));
    }
    for (int l = 0; l < N_LAYOUTS; l++) {
        const char *part[3] = {layouts[l].gate, layouts[l].up, layouts[l].down};
        int all = 1;
        for (int i = 0; i < 3; i++) {
            name[i][0] = '\0';
            if (part[i] && snprintf(name[i], 512, "%s.%s.weight", prefix, part[i]) >= 512)
                return lf_fail(LF_EINVAL, "%s: prefix too long", fn);
            all &= !part[i] || lf_st_has(st, name[i]);
        }
        if (all) {
            *which = l;
            return LF_OK;
        }
    }
    char layers[800];
    list_layers(st, layers, sizeof layers);
    return lf_fail(LF_EINVAL,
                   "%s: no \"%.200s.gate_proj.weight\" (nor gate_up_proj, nor Meta's w1/w3/w2: prefix \"%.200s\"); "
                   "the MLP layers there: %s",
                   fn, prefix, prefix, layers);
}

lf_status lf_nn_gated_mlp_find(const lf_safetensors *st, const char *prefix, char *gate, size_t cap, int64_t *dim,
                               int64_t *hidden)
{
    const char *const fn = "lf_nn_gated_mlp_find";
    LF_CHECK_PTR(st, fn, "st");
    LF_CHECK_PTR(prefix, fn, "prefix");
    LF_CHECK_PTR(gate, fn, "gate");
    LF_CHECK_PTR(dim, fn, "dim");
    LF_CHECK_PTR(hidden, fn, "hidden");
    char name[3][512];
    int which;
    LF_TRY(find_layout(st, prefix, fn, &which, name));
    int64_t shape[8];
    const int ndim = lf_st_shape(st, name[0], shape), fused = !layouts[which].up; /* the header alone */
    if (ndim != 2 || (fused && shape[0] % 2))
        return lf_fail(LF_ESHAPE, "%s: %s has %d dims%s, expected (%shidden, dim)", fn, name[0], ndim,
                       ndim == 2 ? " and an odd row count" : "", fused ? "2 x " : "");
    if (snprintf(gate, cap, "%s", name[0]) >= (int)cap)
        return lf_fail(LF_EINVAL, "%s: the gate's name %s is longer than %zu bytes", fn, name[0], cap);
    *hidden = fused ? shape[0] / 2 : shape[0], *dim = shape[1];
    return LF_OK;
}

lf_status lf_nn_gated_mlp_load(lf_nn_gated_mlp *m, const lf_safetensors *st, const char *prefix, lf_act act,
                               lf_dtype dtype)
{
    LF_CHECK_PTR(m, "lf_nn_gated_mlp_load", "m");
    memset(m, 0, sizeof *m);
    LF_CHECK_PTR(st, "lf_nn_gated_mlp_load", "st");
    LF_CHECK_PTR(prefix, "lf_nn_gated_mlp_load", "prefix");
    const char *const fn = "lf_nn_gated_mlp_load";
    char name[3][512];
    int which;
    LF_TRY(find_layout(st, prefix, fn, &which, name));
    const char *part[3] = {layouts[which].gate, layouts[which].up, layouts[which].down};
    for (int i = 0; i < 3; i++) { /* a projection with a bias is no gated MLP linfuse runs: said, not dropped */
        char bias[512];
        if (part[i] && snprintf(bias, sizeof bias, "%s.%s.bias", prefix, part[i]) < (int)sizeof bias &&
            lf_st_has(st, bias))
            return lf_fail(LF_EUNSUPPORTED,
                           "%s: \"%.300s\" is there: the MLP's projections have biases (mlp_bias), which linfuse's "
                           "gated MLP has no place for; it would run without them and give other numbers",
                           fn, bias);
    }
    lf_tensor *w[3] = {NULL, NULL, NULL}, *gu = NULL, *down = NULL;
    lf_status s = LF_OK;
    for (int i = 0; i < 3 && s == LF_OK; i++) /* converted to dtype, or FP8 dequantized with its scales */
        if (part[i])
            s = lf_st_get_as(st, name[i], dtype, &w[i]);
    const int fused = !part[1];
    char a[LF_SHAPE_STR_CAP], b[LF_SHAPE_STR_CAP], c[LF_SHAPE_STR_CAP];
    if (s == LF_OK && fused &&
        (w[0]->ndim != 2 || w[2]->ndim != 2 || w[0]->shape[0] % 2 || w[2]->shape[0] != w[0]->shape[1] ||
         w[2]->shape[1] != w[0]->shape[0] / 2))
        s = lf_fail(LF_ESHAPE, "%s: %s: gate_up_proj %s, down_proj %s: expected (2H, D), (D, H)", fn, prefix,
                    lf_fmt_shape(a, sizeof a, w[0]->ndim, w[0]->shape),
                    lf_fmt_shape(c, sizeof c, w[2]->ndim, w[2]->shape));
    if (s == LF_OK && !fused &&
        (w[0]->ndim != 2 || w[1]->ndim != 2 || w[2]->ndim != 2 || w[0]->shape[0] != w[1]->shape[0] ||
         w[0]->shape[1] != w[1]->shape[1] || w[2]->shape[0] != w[0]->shape[1] || w[2]->shape[1] != w[0]->shape[0]))
        s = lf_fail(LF_ESHAPE, "%s: %s: %s %s, %s %s, %s %s: expected (H, D), (H, D), (D, H)", fn, prefix, part[0],
                    lf_fmt_shape(a, sizeof a, w[0]->ndim, w[0]->shape), part[1],
                    lf_fmt_shape(b, sizeof b, w[1]->ndim, w[1]->shape), part[2],
                    lf_fmt_shape(c, sizeof c, w[2]->ndim, w[2]->shape));
    if (s == LF_OK && (w[0]->dtype != w[2]->dtype || (!fused && w[0]->dtype != w[1]->dtype)))
        s = lf_fail(LF_EDTYPE, "%s: %s: the weights are %s, %s, %s; expected one dtype", fn, prefix,
                    lf_dtype_name(w[0]->dtype), fused ? "-" : lf_dtype_name(w[1]->dtype), lf_dtype_name(w[2]->dtype));
    const lf_dtype dt = s == LF_OK ? w[0]->dtype : LF_DTYPE_COUNT;
    if (s == LF_OK && fused) { /* already [Wg; Wu]: the gated GEMM's one weight, as it is */
        gu = w[0], w[0] = NULL;
    } else if (s == LF_OK) { /* [Wg; Wu] stacked */
        const int64_t H = w[0]->shape[0], D = w[0]->shape[1], gs[2] = {2 * H, D};
        s = lf_tensor_empty(&gu, dt, 2, gs, LF_DEVICE_CPU);
        if (s == LF_OK) {
            const size_t half = (size_t)(H * D) * lf_dtype_size(dt);
            memcpy(lf_tensor_data(gu), lf_tensor_data(w[0]), half);
            memcpy((char *)lf_tensor_data(gu) + half, lf_tensor_data(w[1]), half);
        }
    }
    if (s == LF_OK) /* the file's own bytes when the dtype is the file's */
        down = w[2], w[2] = NULL;
    for (int i = 0; i < 3; i++)
        lf_tensor_free(w[i]);
    if (s != LF_OK) {
        lf_tensor_free(gu), lf_tensor_free(down);
        return s;
    }
    return lf_nn_gated_mlp_from_weights(m, gu, down, act);
}
