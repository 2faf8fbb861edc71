/* nn.Linear: parameters initialised as torch does, forward through lf_linear. Layer: nn/. */
#include <math.h>

#include "core/core.h"
#include "linfuse/nn.h"

lf_status lf_nn_linear_init(lf_nn_linear *m, const lf_nn_linear_opts *o, lf_rng *rng)
{
    LF_CHECK_PTR(m, "lf_nn_linear_init", "m");
    memset(m, 0, sizeof *m);
    LF_CHECK_PTR(o, "lf_nn_linear_init", "opts");
    LF_CHECK_PTR(rng, "lf_nn_linear_init", "rng");
    if (o->in_features < 1 || o->out_features < 1)
        return lf_fail(LF_ESHAPE, "lf_nn_linear_init: in_features = %lld and out_features = %lld, expected both >= 1",
                       (long long)o->in_features, (long long)o->out_features);
    if (!lf_dtype_computes(o->dtype))
        return lf_fail(LF_EDTYPE, "lf_nn_linear_init: dtype %s: parameters are bf16, f16 or f32",
                       lf_dtype_known(o->dtype) ? lf_dtype_name(o->dtype) : "unknown");
    /* kaiming_uniform(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in)
     * = 1 / sqrt(fan_in); the bias uses the same bound. */
    const double bound = 1.0 / sqrt((double)o->in_features);
    int64_t wshape[2] = {o->out_features, o->in_features};
    lf_status s = lf_tensor_empty(&m->weight, o->dtype, 2, wshape, LF_DEVICE_CPU);
    if (s == LF_OK)
        s = lf_tensor_fill_uniform(m->weight, rng, -bound, bound);
    if (s == LF_OK && o->bias) {
        s = lf_tensor_empty(&m->bias, o->dtype, 1, &o->out_features, LF_DEVICE_CPU);
        if (s == LF_OK)
            s = lf_tensor_fill_uniform(m->bias, rng, -bound, bound);
    }
    if (s == LF_OK && o->device != LF_DEVICE_CPU)
        s = lf_fail(LF_EDEVICE, "lf_nn_linear_init: device %s: parameters can only be created on cpu in this build",
                    lf_device_name(o->device));
    if (s != LF_OK) {
        lf_nn_linear_free(m);
        return s;
    }
    m->in_features = o->in_features;
    m->out_features = o->out_features;
    return LF_OK;
}

lf_status lf_nn_linear_forward(const lf_nn_linear *m, const lf_tensor *x, lf_tensor **y)
{
    LF_CHECK_PTR(m, "lf_nn_linear_forward", "m");
    LF_CHECK_PTR(y, "lf_nn_linear_forward", "y");
    return lf_linear(y, x, m->weight, m->bias);
}

void lf_nn_linear_free(lf_nn_linear *m)
{
    if (!m)
        return;
    lf_tensor_free(m->weight);
    lf_tensor_free(m->bias);
    m->weight = m->bias = NULL;
}
