/* What a kernel reports, one helper per kind and the same on every device: its name (a key that
 * the backend's namer spells, names.c), its FLOPs and its bytes. Layer: backend/. */
#include "backend/backend_impl.h"
#include "backend/names.h"

/* --- the reports --- */

static double bytes_of(int64_t rows, int64_t cols, lf_dtype dt)
{
    return (double)rows * (double)cols * (double)lf_dtype_size(dt);
}

void lf_gemm_report(const lf_gemm *g, lf_kernel_namer namer, int fam, int tile_m, int tile_n, lf_kernel_info *info)
{
    char lay[3];
    lf_gemm_layout(g, lay);
    const int gated = g->ep.gate == LF_GATE_PAIRED;
    lf_kernel_key key = {.family = (uint8_t)fam,
                         .dtype = (uint8_t)g->a.dtype,
                         .out_dtype = (uint8_t)g->d.dtype,
                         .act = (uint8_t)g->ep.act,
                         .flags = (uint8_t)((g->c.data ? LF_KEY_C : 0) | (g->ep.bias ? LF_KEY_BIAS : 0) |
                                            (gated ? LF_KEY_GATED : 0) | (g->ep.a_scale ? LF_KEY_SCALED : 0) |
                                            (g->ep.blockwise ? LF_KEY_BLOCKS : 0)),
                         .lay_b = (uint8_t)lay[0],
                         .lay_a = (uint8_t)lay[1],
                         .tile_m = (uint16_t)tile_m,
                         .tile_n = (uint16_t)tile_n};
    info->name = lf_kernel_name(namer, &key);
    const int64_t M = g->a.rows, K = g->a.cols, N = g->b.cols;
    info->flops = 2.0 * (double)M * (double)N * (double)K;
    info->bytes =
        bytes_of(M, K, g->a.dtype) + bytes_of(K, N, g->b.dtype) + bytes_of(g->d.rows, g->d.cols, g->d.dtype) +
        (g->c.data ? bytes_of(M, N, g->c.dtype) : 0.0) + (g->ep.bias ? bytes_of(1, N, g->ep.bias_dtype) : 0.0) +
        (g->ep.a_scale ? bytes_of(lf_scale_count(g->ep.blockwise ? LF_SCALE_1X128 : LF_SCALE_ROWS, M, K) +
                                      lf_scale_count(g->ep.blockwise ? LF_SCALE_128X128 : LF_SCALE_ROWS, N, K),
                                  1, LF_DTYPE_F32)
                       : 0.0) +
        (g->ep.d_scale ? bytes_of(lf_scale_count(LF_SCALE_1X128, g->d.rows, g->d.cols), 1, LF_DTYPE_F32) : 0.0);
}

void lf_quant_report(const lf_quant *q, lf_kernel_namer namer, int fam, lf_kernel_info *info)
{
    lf_kernel_key key = {.family = (uint8_t)fam,
                         .dtype = (uint8_t)q->in.dtype,
                         .out_dtype = (uint8_t)LF_DTYPE_F8E4M3,
                         .op = (uint8_t)q->mode};
    info->name = lf_kernel_name(namer, &key);
    info->flops = (double)q->rows * (double)q->cols;
    info->bytes = bytes_of(q->rows, q->cols, q->in.dtype) + bytes_of(q->rows, q->cols, LF_DTYPE_F8E4M3) +
                  bytes_of(lf_quant_scales(q), 1, LF_DTYPE_F32);
}

/* Whether every operand walks the shape in row-major order (the kernel's flat path). */
static int pointwise_contiguous(const lf_pointwise *p)
{
    int ok = 1, nin = lf_pw_arity(p->op);
    int64_t st = 1;
    for (int i = p->ndim - 1; i >= 0; i--) {
        ok &= p->out.stride[i] == st || p->shape[i] == 1;
        for (int q = 0; q < nin; q++)
            ok &= p->in[q].stride[i] == st || p->shape[i] == 1;
        st *= p->shape[i];
    }
    return ok;
}

void lf_pointwise_report(const lf_pointwise *p, lf_kernel_namer namer, int fam, lf_kernel_info *info)
{
    const int nin = lf_pw_arity(p->op);
    const int act = p->op == LF_PW_ACT || p->op == LF_PW_ACT_MUL;
    lf_kernel_key key = {.family = (uint8_t)fam,
                         .dtype = (uint8_t)(p->op == LF_PW_COPY ? p->in[0].dtype : p->out.dtype),
                         .out_dtype = (uint8_t)p->out.dtype,
                         .op = (uint8_t)p->op,
                         .act = (uint8_t)(act ? p->act : LF_ACT_NONE),
                         .flags = (uint8_t)(pointwise_contiguous(p) ? 0 : LF_KEY_STRIDED)};
    info->name = lf_kernel_name(namer, &key);
    double n = 1;
    for (int d = 0; d < p->ndim; d++)
        n *= (double)p->shape[d];
    info->flops = p->op == LF_PW_COPY ? 0.0 : p->op == LF_PW_ACT_MUL ? 2.0 * n : n;
    double per = (double)lf_dtype_size(p->out.dtype);
    for (int q = 0; q < nin; q++)
        per += (double)lf_dtype_size(p->in[q].dtype);
    info->bytes = n * per;
}

void lf_fused_report(const lf_fused *f, lf_kernel_info *info)
{
    info->name = f->kernel_name ? f->kernel_name : lf_kernel_name_intern(f->name);
    double n = 1, per = (double)lf_dtype_size(f->out.dtype);
    for (int d = 0; d < f->ndim; d++)
        n *= (double)f->shape[d];
    for (int q = 0; q < f->n_in; q++)
        per += (double)lf_dtype_size(f->in[q].dtype);
    info->flops = n * f->n_ops;
    info->bytes = n * per;
}
