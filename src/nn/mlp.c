/* The GeGLU MLP of the blog's simple-mlp: y = down(gelu_tanh(gate(x)) * up(x)). Eager: each
 * step is its own op and kernel, so a trace shows all five. Layer: nn/. */
#include "core/core.h"
#include "linfuse/nn.h"

lf_status lf_nn_geglu_mlp_init(lf_nn_geglu_mlp *m, const lf_nn_geglu_mlp_opts *o, lf_rng *rng)
{
    LF_CHECK_PTR(m, "lf_nn_geglu_mlp_init", "m");
    memset(m, 0, sizeof *m);
    LF_CHECK_PTR(o, "lf_nn_geglu_mlp_init", "opts");
    lf_nn_linear_opts in = {o->dim, o->hidden, 0, o->dtype, o->device};
    lf_nn_linear_opts outo = {o->hidden, o->dim, 0, o->dtype, o->device};
    lf_status s = lf_nn_linear_init(&m->gate, &in, rng);
    if (s == LF_OK)
        s = lf_nn_linear_init(&m->up, &in, rng);
    if (s == LF_OK)
        s = lf_nn_linear_init(&m->down, &outo, rng);
    if (s != LF_OK) {
        lf_nn_geglu_mlp_free(m);
        return s;
    }
    m->dim = o->dim;
    m->hidden = o->hidden;
    return LF_OK;
}

lf_status lf_nn_geglu_mlp_forward(const lf_nn_geglu_mlp *m, const lf_tensor *x, lf_tensor **y)
{
    LF_CHECK_PTR(m, "lf_nn_geglu_mlp_forward", "m");
    LF_CHECK_PTR(y, "lf_nn_geglu_mlp_forward", "y");
    *y = NULL;
    lf_tensor *g = NULL, *u = NULL, *a = NULL, *h = NULL;
    lf_status s = lf_nn_linear_forward(&m->gate, x, &g);
    if (s == LF_OK)
        s = lf_nn_linear_forward(&m->up, x, &u);
    if (s == LF_OK)
        s = lf_gelu(&a, g, LF_GELU_TANH);
    if (s == LF_OK)
        s = lf_mul(&h, a, u);
    if (s == LF_OK)
        s = lf_nn_linear_forward(&m->down, h, y);
    lf_tensor_free(g);
    lf_tensor_free(u);
    lf_tensor_free(a);
    lf_tensor_free(h);
    return s;
}

void lf_nn_geglu_mlp_free(lf_nn_geglu_mlp *m)
{
    if (!m)
        return;
    lf_nn_linear_free(&m->gate);
    lf_nn_linear_free(&m->up);
    lf_nn_linear_free(&m->down);
}
