/* CPU pointwise kernels: copy (with dtype conversion), add, mul and activations over strided,
 * broadcasting operands. Rows of the innermost dim are widened to float in chunks, combined
 * by the active kernel set's vector loops, and narrowed back. Layer: backend/cpu. */
#include <omp.h>
#include <stdio.h>

#include "backend/cpu/cpu_impl.h"

enum { CHUNK = 512 };

static void load_chunk(const lf_strided *s, int64_t base, int64_t step, int64_t n, float *dst)
{
    const void *p = s->data;
    if (step == 0) { /* broadcast along the row */
        float v = lf_load_f32(p, s->dtype, base);
        for (int64_t i = 0; i < n; i++)
            dst[i] = v;
        return;
    }
    switch (s->dtype) {
    case LF_DTYPE_F32:
        for (int64_t i = 0; i < n; i++)
            dst[i] = ((const float *)p)[base + i * step];
        break;
    case LF_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = lf_f32_from_bf16(((const uint16_t *)p)[base + i * step]);
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            dst[i] = lf_f32_from_f16(((const uint16_t *)p)[base + i * step]);
        break;
    }
}

static void store_chunk(const lf_strided *s, int64_t base, int64_t step, int64_t n, const float *src)
{
    void *p = s->data;
    switch (s->dtype) {
    case LF_DTYPE_F32:
        for (int64_t i = 0; i < n; i++)
            ((float *)p)[base + i * step] = src[i];
        break;
    case LF_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)p)[base + i * step] = lf_bf16_from_f32(src[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)p)[base + i * step] = lf_f16_from_f32(src[i]);
        break;
    }
}

/* Row r of a walk over shape (every dim but the last) -> the element offset of that row's start
 * in each of n operands. */
static void row_offsets(int nd, const int64_t *shape, int64_t r, int n, const lf_strided *const *ops, int64_t *off)
{
    for (int q = 0; q < n; q++)
        off[q] = 0;
    for (int i = nd - 2; i >= 0; i--) {
        int64_t idx = r % shape[i];
        r /= shape[i];
        for (int q = 0; q < n; q++)
            off[q] += idx * ops[q]->stride[i];
    }
}

/* Round each value to dtype and back, as a store and a reload would. */
static void round_to(lf_dtype dt, float *v, int64_t n)
{
    if (dt == LF_DTYPE_BF16)
        for (int64_t i = 0; i < n; i++)
            v[i] = lf_f32_from_bf16(lf_bf16_from_f32(v[i]));
    else if (dt == LF_DTYPE_F16)
        for (int64_t i = 0; i < n; i++)
            v[i] = lf_f32_from_f16(lf_f16_from_f32(v[i]));
}

/* dst = x op y (or act(x)) over m floats of one chunk; dst may be x. */
static void apply(const lf_cpu_kernels *k, lf_pw_op op, lf_act act, const float *x, const float *y, float *dst,
                  int64_t m)
{
    switch (op) {
    case LF_PW_ADD:
#pragma omp simd
        for (int64_t i = 0; i < m; i++)
            dst[i] = x[i] + y[i];
        break;
    case LF_PW_MUL:
#pragma omp simd
        for (int64_t i = 0; i < m; i++)
            dst[i] = x[i] * y[i];
        break;
    case LF_PW_ACT:
        k->act_row(act, x, dst, m);
        break;
    default:
        if (dst != x)
            memcpy(dst, x, (size_t)m * sizeof *dst);
        break;
    }
}

static void run_row(const lf_pointwise *pw, const lf_cpu_kernels *k, const int64_t *off, int64_t n)
{
    const int d = pw->ndim - 1;
    float x[CHUNK], y[CHUNK], o[CHUNK];
    const int nin = lf_pw_arity(pw->op);
    for (int64_t j = 0; j < n; j += CHUNK) {
        int64_t m = n - j < CHUNK ? n - j : CHUNK;
        load_chunk(&pw->in[0], off[1] + j * pw->in[0].stride[d], pw->in[0].stride[d], m, x);
        if (nin == 2)
            load_chunk(&pw->in[1], off[2] + j * pw->in[1].stride[d], pw->in[1].stride[d], m, y);
        if (pw->op == LF_PW_ACT_MUL) { /* one pass: the activation never leaves this chunk */
            k->act_row(pw->act, x, o, m);
            round_to(pw->out.dtype, o, m);
            apply(k, LF_PW_MUL, LF_ACT_NONE, o, y, o, m);
        } else {
            apply(k, pw->op, pw->act, x, y, o, m);
        }
        store_chunk(&pw->out, off[0] + j * pw->out.stride[d], pw->out.stride[d], m, o);
    }
}

lf_status lf_cpu_pointwise(const lf_pointwise *pw, lf_kernel_info *info)
{
    const lf_cpu_kernels *k = lf_cpu_kernels_active();
    const int nd = pw->ndim;
    int64_t rows = 1, n = pw->shape[nd - 1];
    for (int i = 0; i < nd - 1; i++)
        rows *= pw->shape[i];
    int T = rows * n >= (1 << 18) && rows > 1 ? lf_cpu_threads() : 1; /* same reasoning as the GEMM */
#pragma omp parallel for num_threads(T) if (T > 1) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const lf_strided *ops[3] = {&pw->out, &pw->in[0], &pw->in[1]};
        int64_t off[3];
        row_offsets(nd, pw->shape, r, 3, ops, off);
        run_row(pw, k, off, n);
    }
    if (info)
        lf_pointwise_report(pw, lf_cpu_kernel_namer, LF_CPU_KF_POINTWISE, info);
    return LF_OK;
}

/* --- fused chains (compile mode): the same row walk, the program run per chunk --- */

static void run_fused_row(const lf_fused *f, const lf_cpu_kernels *k, const int64_t *off, int64_t n)
{
    const int d = f->ndim - 1;
    float regs[LF_FUSED_MAX_IN + LF_FUSED_MAX_OPS][CHUNK];
    for (int64_t j = 0; j < n; j += CHUNK) {
        int64_t m = n - j < CHUNK ? n - j : CHUNK;
        for (int q = 0; q < f->n_in; q++)
            load_chunk(&f->in[q], off[1 + q] + j * f->in[q].stride[d], f->in[q].stride[d], m, regs[q]);
        for (int i = 0; i < f->n_ops; i++) {
            const lf_fused_op *o = &f->ops[i];
            apply(k, o->op, o->act, regs[o->src[0]], regs[o->src[1]], regs[f->n_in + i], m);
        }
        store_chunk(&f->out, off[0] + j * f->out.stride[d], f->out.stride[d], m, regs[f->n_in + f->n_ops - 1]);
    }
}

lf_status lf_cpu_fused(const lf_fused *f, lf_kernel_info *info)
{
    const lf_cpu_kernels *k = lf_cpu_kernels_active();
    const int nd = f->ndim;
    int64_t rows = 1, n = f->shape[nd - 1];
    for (int i = 0; i < nd - 1; i++)
        rows *= f->shape[i];
    int T = rows * n >= (1 << 18) && rows > 1 ? lf_cpu_threads() : 1;
#pragma omp parallel for num_threads(T) if (T > 1) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const lf_strided *ops[1 + LF_FUSED_MAX_IN] = {&f->out};
        for (int q = 0; q < f->n_in; q++)
            ops[1 + q] = &f->in[q];
        int64_t off[1 + LF_FUSED_MAX_IN];
        row_offsets(nd, f->shape, r, 1 + f->n_in, ops, off);
        run_fused_row(f, k, off, n);
    }
    if (info)
        lf_fused_report(f, info);
    return LF_OK;
}
