/* The models the experiments' rows build (their sizes, inputs, forwards and memory estimates), and
 * the check that a run fits in memory before anything is made. experiments.c's table names
 * these per row. Layer: cli/. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/exp_models.h"

void exp_model_free(model *m)
{
    lf_tensor_free(m->x), lf_tensor_free(m->w), lf_tensor_free(m->b);
    lf_nn_linear_free(&m->lin);
    lf_nn_gated_mlp_free(&m->mlp);
}

lf_status exp_build_matmul_add(const exp_cfg *c, lf_rng *rng, model *m)
{
    int64_t sq[2] = {c->size, c->size}, b3[3] = {8, c->size, c->size};
    lf_status s = lf_tensor_empty(&m->x, c->dtype, c->batched ? 3 : 2, c->batched ? b3 : sq, LF_DEVICE_CPU);
    if (s == LF_OK)
        s = lf_tensor_empty(&m->w, c->dtype, 2, sq, LF_DEVICE_CPU);
    if (s == LF_OK)
        s = lf_tensor_empty(&m->b, c->dtype, 2, sq, LF_DEVICE_CPU); /* a 2-D bias, as in the blog */
    if (s == LF_OK)
        s = lf_tensor_fill_uniform(m->w, rng, -1, 1);
    return s == LF_OK ? lf_tensor_fill_uniform(m->b, rng, -1, 1) : s;
}

lf_status exp_build_linear(const exp_cfg *c, lf_rng *rng, model *m)
{
    lf_nn_linear_opts o = {c->in_dim, c->out_dim, !c->no_bias, c->dtype, LF_DEVICE_CPU};
    int64_t xs[2] = {c->batch, c->in_dim};
    lf_status s = lf_nn_linear_init(&m->lin, &o, rng);
    return s == LF_OK ? lf_tensor_empty(&m->x, c->dtype, 2, xs, LF_DEVICE_CPU) : s;
}

lf_status lf_exp_build_mlp(const exp_cfg *c, lf_rng *rng, lf_nn_gated_mlp *m)
{
    if (!c->weights) { /* the blog's: random, torch's default init */
        lf_nn_gated_mlp_opts o = {c->dim, c->hidden, c->dtype, LF_DEVICE_CPU, c->act};
        return lf_nn_gated_mlp_init(m, &o, rng);
    }
    lf_safetensors *st = NULL; /* a real layer, copied out of the file (it may change under us) */
    char prefix[512];
    lf_cli_mlp_prefix(prefix, sizeof prefix, c->prefix);
    lf_status s = lf_st_open(&st, c->weights);
    if (s == LF_OK)
        s = lf_nn_gated_mlp_load(m, st, prefix, c->act, c->dtype);
    lf_st_close(st);
    return s;
}

lf_status exp_build_mlp(const exp_cfg *c, lf_rng *rng, model *m)
{
    int64_t xs[3] = {c->batch, c->seq, c->dim};
    lf_status s = lf_exp_build_mlp(c, rng, &m->mlp);
    return s == LF_OK ? lf_tensor_empty(&m->x, c->dtype, 3, xs, LF_DEVICE_CPU) : s;
}

lf_status exp_forward_matmul_add(const exp_cfg *c, const model *m, const lf_tensor *x, lf_tensor **y)
{
    (void)c;
    lf_tensor *t = NULL;
    lf_status s = lf_matmul(&t, x, m->w);
    if (s == LF_OK)
        s = lf_add(y, t, m->b);
    lf_tensor_free(t);
    return s;
}

lf_status exp_forward_linear(const exp_cfg *c, const model *m, const lf_tensor *x, lf_tensor **y)
{
    (void)c;
    return lf_nn_linear_forward(&m->lin, x, y);
}

lf_status exp_forward_mlp(const exp_cfg *c, const model *m, const lf_tensor *x, lf_tensor **y)
{
    return lf_nn_gated_mlp_forward_variant(&m->mlp, c->variant, x, y);
}

void exp_shape_matmul_add(const exp_cfg *c, char *buf, size_t cap)
{
    if (c->batched)
        snprintf(buf, cap, "8x%lldx%lld", (long long)c->size, (long long)c->size);
    else
        snprintf(buf, cap, "%lld", (long long)c->size);
}

void exp_shape_linear(const exp_cfg *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%lldx%lldx%lld%s", (long long)c->batch, (long long)c->in_dim, (long long)c->out_dim,
             c->no_bias ? "_nobias" : "");
}

void exp_shape_mlp(const exp_cfg *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%lldx%lldx%lldx%lld", (long long)c->batch, (long long)c->seq, (long long)c->dim,
             (long long)c->hidden);
}

void exp_memory_matmul_add(const exp_cfg *c, exp_memory *e)
{
    double n2 = (double)c->size * (double)c->size, x = (c->batched ? 8 : 1) * n2;
    *e = (exp_memory){2 * n2, x, 2 * x}; /* w and b; x; x.w and the sum */
}

void exp_memory_linear(const exp_cfg *c, exp_memory *e)
{
    double bo = (double)c->batch * (double)c->out_dim;
    *e = (exp_memory){(double)c->out_dim * (double)c->in_dim + (c->no_bias ? 0 : (double)c->out_dim),
                      (double)c->batch * (double)c->in_dim, 2 * bo}; /* the GEMM's output and the bias add's */
}

void exp_memory_mlp(const exp_cfg *c, exp_memory *e)
{
    double tokens = (double)c->batch * (double)c->seq, th = tokens * (double)c->hidden;
    /* eager (and compile mode's unfused plan) holds g, u, gelu(g) and the product; fused g, u and
     * gelu(g)*u; gated the GEMM over [Wg; Wu] (2 TH) and, where it falls back, the fused middle */
    double middle = c->compile || c->variant == LF_MLP_EAGER ? 4 : 3;
    *e = (exp_memory){3 * (double)c->dim * (double)c->hidden, tokens * (double)c->dim,
                      middle * th + tokens * (double)c->dim};
}

static void fmt_bytes(double b, char *buf, size_t cap)
{
    const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    for (; b >= 1024 && u < 6; u++)
        b /= 1024;
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

/* Whether the run fits: the estimate against what dev can still give; 0 with the numbers
 * printed when it does not. A device that does not say how much it has is not checked. */
static int fits(const char *name, const char *shape, lf_dtype dt, lf_device dev, double need, const exp_memory *e,
                double esize)
{
    int64_t avail = 0, total = 0;
    if (lf_device_memory(dev, &avail, &total) != LF_OK || need <= (double)avail)
        return 1;
    char n[32], p[32], x[32], w[32], a[32], t[32];
    fmt_bytes(need, n, sizeof n), fmt_bytes(e->params * esize, p, sizeof p), fmt_bytes(e->input * esize, x, sizeof x);
    fmt_bytes(e->work * esize, w, sizeof w), fmt_bytes((double)avail, a, sizeof a),
        fmt_bytes((double)total, t, sizeof t);
    fprintf(stderr,
            "linfuse %s: %s in %s needs about %s of %s memory (parameters %s, input %s, intermediates and output "
            "%s); %s can give %s (of %s): choose smaller sizes\n",
            name, shape, lf_dtype_name(dt), n, lf_device_name(dev), p, x, dev == LF_DEVICE_CPU ? w : "on the device",
            lf_device_name(dev), a, t);
    return 0;
}

/* The whole run's memory, estimated before anything is made: the host holds the parameters and
 * input (all of the run on the CPU), the GPU all of it. */
int lf_exp_memory_fits(const exp_cfg *c, const char *name, const char *shape, const exp_memory *est)
{
    exp_memory e = *est;
    const double esize = (double)lf_dtype_size(c->dtype), all = (e.params + e.input + e.work) * esize;
    if (c->device == LF_DEVICE_CPU)
        return fits(name, shape, c->dtype, LF_DEVICE_CPU, all, &e, esize);
    exp_memory host = {e.params, e.input, 0};
    if (c->tp > 1) { /* one GPU holds its shard: a 1/tp of the parameters and of the hidden work */
        e.params /= c->tp;
        e.work = e.work / c->tp + e.input;
    }
    return fits(name, shape, c->dtype, LF_DEVICE_CPU, (e.params + e.input) * esize, &host, esize) &&
           fits(name, shape, c->dtype, c->device, (e.params + e.input + e.work) * esize, &e, esize);
}
