/* The parts of a CPU kernel set that are plain C: included once per instruction-set file,
 * which compiles them with its own -m flags and names them with LF_KSUF. Loops are written so
 * the compiler vectorizes them (checked with -fopt-info-vec). Layer: backend/cpu. */
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/vmath.h"

#define LF_CAT2(a, b) a##b
#define LF_CAT(a, b) LF_CAT2(a, b)
#define LF_K(name) LF_CAT(name, LF_KSUF)

/* y = act(x) over n floats; the switch is outside the loops so each loop is one vector body. */
static void LF_K(act_row_)(lf_act act, const float *x, float *y, int64_t n)
{
    switch (act) {
    case LF_ACT_RELU:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = lf_vrelu(x[i]);
        break;
    case LF_ACT_GELU_TANH:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = lf_vgelu_tanh(x[i]);
        break;
    case LF_ACT_GELU_ERF:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = lf_vgelu_erf(x[i]);
        break;
    default:
        if (x != y)
            memcpy(y, x, (size_t)n * sizeof *y);
        break;
    }
}

static void LF_K(act_mul_row_)(lf_act act, const float *x, const float *u, float *y, int64_t n)
{
    switch (act) {
    case LF_ACT_RELU:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = lf_vrelu(x[i]) * u[i];
        break;
    case LF_ACT_GELU_TANH:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = lf_vgelu_tanh(x[i]) * u[i];
        break;
    case LF_ACT_GELU_ERF:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = lf_vgelu_erf(x[i]) * u[i];
        break;
    default:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * u[i];
        break;
    }
}

static void LF_K(ep_strip_)(const lf_ep_strip *s)
{
    const lf_gemm *g = s->g;
    const lf_epilogue *ep = &g->ep;
    const int nr = s->nr, gated = ep->gate == LF_GATE_PAIRED, half = nr / 2;
    const int width = gated ? half : nr; /* output columns per tile */
    const float alpha = ep->alpha;
    const lf_matrix *c = g->c.data ? &g->c : NULL;
    const lf_matrix *d = &g->d;
    float z[LF_CPU_NR_MAX], o[LF_CPU_NR_MAX];
    for (int64_t r = 0; r < s->rows; r++) {
        const float *acc = s->acc + r * nr;
        const int64_t i = s->i0 + r;
#pragma omp simd
        for (int p = 0; p < nr; p++)
            z[p] = alpha * acc[p] + s->bias[p];
        if (c) { /* rare (addmm with beta): read C through its strides, any dtype */
            const float beta = ep->beta;
            for (int p = 0; p < nr; p++)
                if (s->cols[p] >= 0)
                    z[p] += beta * lf_load_f32(c->data, c->dtype, i * c->rs + s->cols[p] * c->cs);
        }
        if (gated)
            LF_K(act_mul_row_)(ep->act, z, z + half, o, width);
        else
            LF_K(act_row_)(ep->act, z, o, width);
        const int n = s->nout;
        char *row = (char *)d->data + (i * d->rs + s->o0 * d->cs) * (int64_t)lf_dtype_size(d->dtype);
        if (d->cs == 1 && d->dtype == LF_DTYPE_F32) {
            memcpy(row, o, (size_t)n * sizeof(float));
        } else if (d->cs == 1 && d->dtype == LF_DTYPE_BF16) {
            uint16_t *q = (uint16_t *)row;
#pragma omp simd
            for (int p = 0; p < n; p++)
                q[p] = lf_vbf16(o[p]);
        } else {
            for (int p = 0; p < n; p++)
                lf_store_f32(row, d->dtype, (int64_t)p * d->cs, o[p]);
        }
    }
}

#define LF_KERNEL_SET(isa_, mr_, nr_, ukr_)                                                   \
    const lf_cpu_kernels LF_K(lf_cpu_kernels_) = {                                            \
        .isa = (isa_), .mr = (mr_), .nr = (nr_), .ukr = (ukr_), .ep_strip = LF_K(ep_strip_), \
        .act_row = LF_K(act_row_), .act_mul_row = LF_K(act_mul_row_),                         \
    }
