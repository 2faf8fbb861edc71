/* The parts of a CPU kernel set that are plain C: included once per instruction-set file,
 * which compiles them with its own -m flags and names them with LF_KSUF. Loops are written so
 * the compiler vectorizes them (checked with -fopt-info-vec). Layer: backend/cpu. */
#include <math.h>

#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/vmath.h"

#define LF_CAT2(a, b) a##b
#define LF_CAT(a, b)  LF_CAT2(a, b)
#define LF_K(name)    LF_CAT(name, LF_KSUF)

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
#ifdef LF_VEC_GELU_TANH_ROW
        LF_VEC_GELU_TANH_ROW(y, x, NULL, 1.0f, n);
#else
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = lf_vgelu_tanh(x[i]);
#endif
        break;
    case LF_ACT_GELU_ERF:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = lf_vgelu_erf(x[i]);
        break;
    case LF_ACT_SILU:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = lf_vsilu(x[i]);
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
    case LF_ACT_SILU:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = lf_vsilu(x[i]) * u[i];
        break;
    default:
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * u[i];
        break;
    }
}

/* Pack slivers of B whose nr columns are one run of a row-major B (the nn case): sliver s takes
 * valid[s] columns starting at element start[s] of row 0 (zeros after them), rows rs apart;
 * dst holds nsl slivers of (K, nr). k runs outside so B is read row by row, in order. */
static void LF_K(pack_rows_)(const void *base, lf_dtype dt, int64_t rs, const int64_t *start, const int *valid,
                             int64_t nsl, int64_t K, int nr, float *dst)
{
    for (int64_t k = 0; k < K; k++)
        for (int64_t s = 0; s < nsl; s++) {
            float *restrict o = dst + (s * K + k) * nr;
            const int64_t off = start[s] + k * rs;
            const int v = valid[s];
            if (dt == LF_DTYPE_F32) {
                const float *restrict x = (const float *)base + off;
#pragma omp simd
                for (int p = 0; p < v; p++)
                    o[p] = x[p];
            } else if (dt == LF_DTYPE_BF16) {
                const uint16_t *restrict x = (const uint16_t *)base + off;
#pragma omp simd
                for (int p = 0; p < v; p++)
                    o[p] = lf_f32_from_bits((uint32_t)x[p] << 16);
            } else {
                const uint16_t *restrict x = (const uint16_t *)base + off;
                for (int p = 0; p < v; p++)
                    o[p] = lf_f32_from_f16(x[p]);
            }
            for (int p = v; p < nr; p++)
                o[p] = 0.0f;
        }
}

/* z = alpha * acc + bias, then act (or act(gate) * partner) into dst: one vector loop per
 * activation, chosen outside the row loop. */
#define LF_EP_ROWS(ACT)                                                                              \
    for (int64_t r = 0; r < rows; r++) {                                                             \
        const float *restrict acc = acc0 + r * nr;                                                   \
        char *row = row0 + r * row_bytes;                                                            \
        float *restrict dst = direct ? (float *)row : o;                                             \
        if (gated) {                                                                                 \
            _Pragma("omp simd") for (int p = 0; p < half; p++) dst[p] =                              \
                ACT(alpha * acc[p] + bias[p]) * (alpha * acc[p + half] + bias[p + half]);            \
        } else {                                                                                     \
            _Pragma("omp simd") for (int p = 0; p < nr; p++) dst[p] = ACT(alpha * acc[p] + bias[p]); \
        }                                                                                            \
        if (!direct)                                                                                 \
            LF_K(store_row_)(d, row, o, nout);                                                       \
    }

#define LF_IDENTITY(x) (x)

static void LF_K(store_row_)(const lf_matrix *d, char *row, const float *o, int n)
{
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

static void LF_K(ep_strip_)(const lf_ep_strip *s)
{
    const lf_gemm *g = s->g;
    const lf_epilogue *ep = &g->ep;
    const int nr = s->nr, gated = ep->gate == LF_GATE_PAIRED, half = nr / 2;
    const int width = gated ? half : nr; /* output columns per tile */
    const float alpha = ep->alpha;
    const float *restrict bias = s->bias;
    const lf_matrix *d = &g->d;
    const int64_t esize = (int64_t)lf_dtype_size(d->dtype);
    /* full-width f32 rows are written straight into D; others go through o */
    const int direct = d->cs == 1 && d->dtype == LF_DTYPE_F32 && s->nout == width;
    const int64_t rows = s->rows, row_bytes = d->rs * esize;
    const int nout = s->nout;
    const float *acc0 = s->acc;
    char *const row0 = (char *)d->data + (s->i0 * d->rs + s->o0 * d->cs) * esize;
    float o[LF_CPU_NR_MAX];
    if (g->c.data) { /* addmm with beta: read C through its strides, any dtype (never gated) */
        const lf_matrix *c = &g->c;
        float z[LF_CPU_NR_MAX];
        for (int64_t r = 0; r < s->rows; r++) {
            const int64_t i = s->i0 + r;
            for (int p = 0; p < nr; p++)
                z[p] = alpha * s->acc[r * nr + p] + bias[p] +
                       (s->cols[p] >= 0 ? ep->beta * lf_load_f32(c->data, c->dtype, i * c->rs + s->cols[p] * c->cs)
                                        : 0.0f);
            LF_K(act_row_)(ep->act, z, o, nr);
            LF_K(store_row_)(d, (char *)d->data + (i * d->rs + s->o0 * d->cs) * esize, o, s->nout);
        }
        return;
    }
#ifdef LF_VEC_GELU_TANH_ROW /* this instruction set has its own gelu_tanh row */
    if (ep->act == LF_ACT_GELU_TANH && !gated) {
        for (int64_t r = 0; r < rows; r++) {
            char *row = row0 + r * row_bytes;
            float *dst = direct ? (float *)row : o;
            LF_VEC_GELU_TANH_ROW(dst, acc0 + r * nr, bias, alpha, nr);
            if (!direct)
                LF_K(store_row_)(d, row, o, nout);
        }
        return;
    }
#endif
    switch (ep->act) {
    case LF_ACT_RELU:
        LF_EP_ROWS(lf_vrelu);
        break;
    case LF_ACT_GELU_TANH:
        LF_EP_ROWS(lf_vgelu_tanh);
        break;
    case LF_ACT_GELU_ERF:
        LF_EP_ROWS(lf_vgelu_erf);
        break;
    case LF_ACT_SILU:
        LF_EP_ROWS(lf_vsilu);
        break;
    default:
        LF_EP_ROWS(LF_IDENTITY);
        break;
    }
}

/* One rounding per product-sum, as the micro-kernels' FMAs. GCC in C11 mode contracts no
 * a * b + c by itself, so it is asked with fmaf where the instruction set has FMA (elsewhere fmaf
 * would be a libm call); clang contracts a * b + c on its own (-ffp-contract=on), and under
 * ThreadSanitizer it does not vectorize a loop of fmaf calls. */
#if defined(__FMA__) && !defined(__clang__)
#define LF_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define LF_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* acc[r * ld + p] = a[r] . w_p for r < m, p < n: a holds m rows of K floats, K apart; w_p is K
 * floats (col[p], or zeros where col[p] is NULL). Blocks of two columns by four rows: each
 * loaded w value serves four rows, each x value two columns, eight sums in flight (few enough
 * registers for AVX2 too); each sum is vector partial sums in the instruction set's width, added
 * at the end. Columns outside, so a block's columns stay in cache while the row blocks pass. */
#if defined(LF_DOTS_COLS) && LF_DOTS_COLS == 4
/* Four columns by four rows (sixteen sums: an instruction set with 32 vector registers). */
static void LF_K(dots_)(const float *a, int64_t m, int64_t K, const float *const *col, int n, float *acc, int64_t ld)
{
    for (int p0 = 0; p0 < n; p0 += 4) {
        const int q = n - p0 < 4 ? n - p0 : 4;
        const float *c[4] = {NULL, NULL, NULL, NULL}, *any = NULL;
        for (int j = 0; j < q; j++)
            if ((c[j] = col[p0 + j]) && !any)
                any = c[j];
        if (!any) {
            lf_dots_zero_block(acc, ld, m, p0, q);
            continue;
        }
        /* a missing column reads another's values; its sums are stored as zeros */
        const float *restrict w0 = c[0] ? c[0] : any, *restrict w1 = c[1] ? c[1] : any,
                              *restrict w2 = c[2] ? c[2] : any, *restrict w3 = c[3] ? c[3] : any;
        for (int64_t r0 = 0; r0 < m; r0 += 4) {
            const int64_t nr4 = m - r0 < 4 ? m - r0 : 4;
            const float *restrict x0 = a + r0 * K, *restrict x1 = a + (r0 + (nr4 > 1)) * K,
                                  *restrict x2 = a + (r0 + (nr4 > 2 ? 2 : nr4 - 1)) * K,
                                  *restrict x3 = a + (r0 + nr4 - 1) * K;
            float s[4][4];
            float s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0, s20 = 0, s21 = 0, s22 = 0,
                  s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
            if (nr4 == 1) { /* one row (a decode step's token): four sums, not sixteen */
#pragma omp simd reduction(+ : s00, s01, s02, s03)
                for (int64_t k = 0; k < K; k++) {
                    const float y0 = x0[k];
                    s00 = LF_FMA(y0, w0[k], s00), s01 = LF_FMA(y0, w1[k], s01);
                    s02 = LF_FMA(y0, w2[k], s02), s03 = LF_FMA(y0, w3[k], s03);
                }
            } else {
#pragma omp simd reduction(+ : s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, s31, s32, s33)
                for (int64_t k = 0; k < K; k++) {
                    const float u0 = w0[k], u1 = w1[k], u2 = w2[k], u3 = w3[k], y0 = x0[k], y1 = x1[k], y2 = x2[k],
                                y3 = x3[k];
                    s00 = LF_FMA(y0, u0, s00), s01 = LF_FMA(y0, u1, s01), s02 = LF_FMA(y0, u2, s02);
                    s03 = LF_FMA(y0, u3, s03), s10 = LF_FMA(y1, u0, s10), s11 = LF_FMA(y1, u1, s11);
                    s12 = LF_FMA(y1, u2, s12), s13 = LF_FMA(y1, u3, s13), s20 = LF_FMA(y2, u0, s20);
                    s21 = LF_FMA(y2, u1, s21), s22 = LF_FMA(y2, u2, s22), s23 = LF_FMA(y2, u3, s23);
                    s30 = LF_FMA(y3, u0, s30), s31 = LF_FMA(y3, u1, s31), s32 = LF_FMA(y3, u2, s32);
                    s33 = LF_FMA(y3, u3, s33);
                }
            }
            s[0][0] = s00, s[0][1] = s01, s[0][2] = s02, s[0][3] = s03, s[1][0] = s10, s[1][1] = s11;
            s[1][2] = s12, s[1][3] = s13, s[2][0] = s20, s[2][1] = s21, s[2][2] = s22, s[2][3] = s23;
            s[3][0] = s30, s[3][1] = s31, s[3][2] = s32, s[3][3] = s33;
            for (int64_t i = 0; i < nr4; i++)
                for (int j = 0; j < q; j++)
                    acc[(r0 + i) * ld + p0 + j] = c[j] ? s[i][j] : 0.0f;
        }
    }
}
#else
static void LF_K(dots_)(const float *a, int64_t m, int64_t K, const float *const *col, int n, float *acc, int64_t ld)
{
    for (int p0 = 0; p0 < n; p0 += 2) {
        const int q = n - p0 < 2 ? n - p0 : 2;
        const float *c0 = col[p0], *c1 = q > 1 ? col[p0 + 1] : NULL;
        if (!c0 && !c1) {
            lf_dots_zero_block(acc, ld, m, p0, q);
            continue;
        }
        /* a missing column reads the other's values; its sums are stored as zeros */
        const float *restrict w0 = c0 ? c0 : c1, *restrict w1 = c1 ? c1 : w0;
        for (int64_t r0 = 0; r0 < m; r0 += 4) {
            const int64_t nr4 = m - r0 < 4 ? m - r0 : 4;
            /* rows past m read the last real row again; their sums are not stored */
            const float *restrict x0 = a + r0 * K, *restrict x1 = a + (r0 + (nr4 > 1)) * K,
                                  *restrict x2 = a + (r0 + (nr4 > 2 ? 2 : nr4 - 1)) * K,
                                  *restrict x3 = a + (r0 + nr4 - 1) * K;
            float s00 = 0.0f, s01 = 0.0f, s10 = 0.0f, s11 = 0.0f, s20 = 0.0f, s21 = 0.0f, s30 = 0.0f, s31 = 0.0f;
            if (nr4 == 1) {
#pragma omp simd reduction(+ : s00, s01)
                for (int64_t k = 0; k < K; k++) {
                    s00 = LF_FMA(x0[k], w0[k], s00);
                    s01 = LF_FMA(x0[k], w1[k], s01);
                }
            } else {
#pragma omp simd reduction(+ : s00, s01, s10, s11, s20, s21, s30, s31)
                for (int64_t k = 0; k < K; k++) {
                    const float u = w0[k], v = w1[k];
                    s00 = LF_FMA(x0[k], u, s00);
                    s01 = LF_FMA(x0[k], v, s01);
                    s10 = LF_FMA(x1[k], u, s10);
                    s11 = LF_FMA(x1[k], v, s11);
                    s20 = LF_FMA(x2[k], u, s20);
                    s21 = LF_FMA(x2[k], v, s21);
                    s30 = LF_FMA(x3[k], u, s30);
                    s31 = LF_FMA(x3[k], v, s31);
                }
            }
            const float s[4][2] = {{s00, s01}, {s10, s11}, {s20, s21}, {s30, s31}};
            for (int64_t i = 0; i < nr4; i++) {
                acc[(r0 + i) * ld + p0] = c0 ? s[i][0] : 0.0f;
                if (q > 1)
                    acc[(r0 + i) * ld + p0 + 1] = c1 ? s[i][1] : 0.0f;
            }
        }
    }
}

#endif

#ifndef LF_DOTS_BF16
#define LF_DOTS_BF16 NULL /* no bf16 dot products of its own: bf16 rows are widened to f32 first */
#endif

#ifndef LF_UKR_BF16
#define LF_UKR_BF16   NULL /* no bf16 micro-kernel: the packed path widens bf16 to f32 */
#define LF_PACK_PAIRS NULL
#endif

#define LF_KERNEL_SET(isa_, mr_, nr_, ukr_, pack_) \
    const lf_cpu_kernels LF_K(lf_cpu_kernels_) = { \
        .isa = (isa_),                             \
        .mr = (mr_),                               \
        .nr = (nr_),                               \
        .ukr = (ukr_),                             \
        .pack_cols = (pack_),                      \
        .pack_rows = LF_K(pack_rows_),             \
        .ep_strip = LF_K(ep_strip_),               \
        .dots = LF_K(dots_),                       \
        .dots_bf16 = LF_DOTS_BF16,                 \
        .ukr_bf16 = LF_UKR_BF16,                   \
        .pack_pairs = LF_PACK_PAIRS,               \
        .act_row = LF_K(act_row_),                 \
        .act_mul_row = LF_K(act_mul_row_),         \
    }
