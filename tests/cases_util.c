/* What every family of the case table shares: operands on the host and the device, poisoned
 * outputs and their checks, the float64 GEMM reference, the tolerances, the kernel log, and how a
 * check fails or a run is skipped. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"

/* --- checks and skips --- */

void case_expect(case_run *r, int ok, const char *file, int line, const char *fmt, ...)
{
    lf_test_checks++;
    if (ok)
        return;
    lf_test_failures++;
    r->failed++;
    fprintf(stderr, "FAIL %s%s%s%s (%s:%d): ", r->name, r->variant[0] ? " [" : "", r->variant, r->variant[0] ? "]" : "",
            file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void case_skip(case_run *r, const char *fmt, ...)
{
    r->skipped = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->skip_why, sizeof r->skip_why, fmt, ap);
    va_end(ap);
}

int case_ok(case_run *r, lf_status s, const char *what)
{
    if (s == LF_OK)
        return 1;
    if (s == LF_EUNSUPPORTED) {
        case_skip(r, "%s", lf_last_error());
        return 0;
    }
    EXPECT(r, 0, "%s: %s: %s", what, lf_status_name(s), lf_last_error());
    return 0;
}

void case_each_variant(case_run *proto, void (*fn)(case_run *r, void *ctx), void *ctx)
{
    const int n = case_variants(proto->c, proto->dev);
    for (int v = 0; v < n; v++) {
        case_run r = *proto;
        case_variant_set(&r, v);
        fn(&r, ctx);
        case_variant_reset(proto->dev);
        case_record(&r);
    }
}

/* --- tolerances --- */

static int through_cublaslt(const case_t *c)
{
    switch (c->op) {
    case CASE_GEMM:
        return c->group == 0 && c->dt != LF_DTYPE_F8E4M3;
    case CASE_MM:
    case CASE_MM_OUT:
    case CASE_ADDMM:
    case CASE_ADDMM_ACT:
    case CASE_LINEAR:
    case CASE_MATMUL:
        return 1;
    default:
        return 0;
    }
}

/* The stated bounds (testutil.h's error measure). An f32 GEMM's plain ops take 3e-5 on every
 * device: K terms summed in float32 in another order than the float64 reference's are off by
 * about sqrt(K) x 2^-24 of the terms' magnitudes, and at K = 33 the CPU's worst over 16k outputs
 * reached 1.02e-5 and 1.18e-5 (AVX-512 and scalar) under two of six data seeds, past the 1e-5
 * other ops keep. On CUDA the deviations test_cuda measured on the H200 for cuBLASLt's GEMMs:
 * f32 3e-5 (its sums run in other orders than the float64 reference's), 1e-4 with its GELU epilogue (its tanh is an
 * approximation, up to 4.3e-6 absolute off the formula: docs/gpu_notes.md); 16-bit with a bias or an activation in the
 * epilogue, the error also relative to |A.B| (cuBLASLt rounds A.B to the output type before the epilogue: with the BIAS
 * epilogue bf16 results move by up to half a bf16 ulp of A.B). */
double case_bound(const case_t *c, lf_device dev, lf_dtype out, int *pre_rounded)
{
    *pre_rounded = 0;
    if (c->tol == TOL_FP8)
        return 1e-2;
    if (!through_cublaslt(c))
        return tol_for(out);
    if (dev != LF_DEVICE_CUDA) /* f32: the CPU's sums run in other orders than the reference's too */
        return out == LF_DTYPE_F32 ? 3e-5 : tol_for(out);
    const int epilogue_bias = c->op == CASE_ADDMM ? c->bias == BIAS_VEC && c->beta == 1.0f : c->bias != 0;
    if (out != LF_DTYPE_F32) {
        *pre_rounded = epilogue_bias || c->act != LF_ACT_NONE;
        return tol_for(out);
    }
    return c->act == LF_ACT_GELU_TANH ? 1e-4 : 3e-5;
}

/* --- operands --- */

static lf_tensor *new_buffer(lf_dtype dt, int64_t n)
{
    lf_tensor *t = NULL;
    if (lf_tensor_empty(&t, dt, 1, &n, LF_DEVICE_CPU) != LF_OK) {
        fprintf(stderr, "test_cases: %s\n", lf_last_error());
        abort();
    }
    if (dt == LF_DTYPE_F8E4M3)
        memset(lf_tensor_data(t), 0x7f, (size_t)n); /* the e4m3 NaN code */
    else if (lf_tensor_fill(t, NAN) != LF_OK)
        abort();
    return t;
}

static lf_tensor *view_of(lf_tensor *buf, int nd, const int64_t *shape, const int64_t *stride, int64_t off)
{
    lf_tensor *v = NULL;
    if (lf_tensor_as_strided(&v, buf, nd, shape, stride, off) != LF_OK) {
        fprintf(stderr, "test_cases: view: %s\n", lf_last_error());
        abort();
    }
    return v;
}

static int64_t round_up(int64_t x, int64_t m)
{
    return (x + m - 1) / m * m;
}

void operand_rand(operand *o, lf_rng *rng, lf_dtype dt, int nd, const int64_t *shape, case_layout l)
{
    memset(o, 0, sizeof *o);
    int64_t st[3], off = 0, total;
    const int64_t e16 = 16 / (int64_t)lf_dtype_size(dt);
    if (nd == 1) {
        st[0] = 1, total = shape[0];
    } else {
        const int64_t b = nd == 3 ? shape[0] : 1, R = shape[nd - 2], C = shape[nd - 1];
        int64_t rs = C, cs = 1, bs = R * C;
        switch (l) {
        case LAY_COL:
            rs = 1, cs = R, bs = R * C;
            break;
        case LAY_PAD:
            rs = C + 3, bs = R * rs, off = 5;
            break;
        case LAY_PAD16:
            rs = round_up(C, e16) + e16, bs = R * rs, off = e16;
            break;
        case LAY_PERM:
            bs = 1, rs = b, cs = R * b;
            break; /* (b, R, C) over a (C, R, b) buffer */
        default:
            break;
        }
        total = off + b * R * C + (l == LAY_PAD || l == LAY_PAD16 ? b * R * (rs - C) : 0);
        if (nd == 3)
            st[0] = bs, st[1] = rs, st[2] = cs;
        else
            st[0] = rs, st[1] = cs;
    }
    o->hbuf = new_buffer(dt, total);
    o->hview = view_of(o->hbuf, nd, shape, st, off);
    if (lf_tensor_fill_uniform(o->hview, rng, -1.0, 1.0) != LF_OK)
        abort();
    o->v = to_f64(o->hview);
}

void operand_from(operand *o, lf_tensor *t, int transpose)
{
    memset(o, 0, sizeof *o);
    o->hbuf = t;
    int64_t shape[2] = {t->shape[0], t->shape[1]}, st[2] = {t->stride[0], t->stride[1]};
    if (transpose) {
        shape[0] = t->shape[1], shape[1] = t->shape[0], st[0] = t->stride[1], st[1] = t->stride[0];
    }
    o->hview = view_of(t, 2, shape, st, t->offset);
    o->v = to_f64(o->hview);
}

void operand_poisoned(operand *o, lf_dtype dt, int64_t rows, int64_t cols, case_poison kind)
{
    memset(o, 0, sizeof *o);
    const int64_t e16 = 16 / (int64_t)lf_dtype_size(dt);
    const int64_t ld = kind == POISON_ALIGNED ? round_up(cols, e16) + e16 : kind == POISON_DENSE ? cols : cols + 2;
    const int64_t off = kind == POISON_ODD ? 3 : e16;
    o->hbuf = new_buffer(dt, off + rows * ld + (kind == POISON_DENSE ? e16 : 0));
    o->hview = view_of(o->hbuf, 2, (int64_t[]){rows, cols}, (int64_t[]){ld, 1}, off);
}

int operand_upload(case_run *r, operand *o, lf_device dev)
{
    lf_tensor_free(o->dview), lf_tensor_free(o->dbuf);
    o->dview = o->dbuf = NULL;
    lf_status s = lf_tensor_to_device(&o->dbuf, o->hbuf, dev);
    if (s == LF_OK)
        s = lf_tensor_as_strided(&o->dview, o->dbuf, o->hview->ndim, o->hview->shape, o->hview->stride,
                                 o->hview->offset - o->hbuf->offset + o->dbuf->offset);
    EXPECT(r, s == LF_OK, "upload to %s: %s", lf_device_name(dev), s == LF_OK ? "" : lf_last_error());
    return s == LF_OK;
}

void operand_free(operand *o)
{
    lf_tensor_free(o->hbuf), lf_tensor_free(o->hview), lf_tensor_free(o->dbuf), lf_tensor_free(o->dview);
    free(o->v);
    memset(o, 0, sizeof *o);
}

lf_tensor *download(case_run *r, const lf_tensor *t)
{
    lf_tensor *h = NULL;
    lf_status s = lf_tensor_to_device(&h, t, LF_DEVICE_CPU);
    EXPECT(r, s == LF_OK, "copy back: %s", s == LF_OK ? "" : lf_last_error());
    return h;
}

void expect_untouched(case_run *r, const operand *o, const char *what)
{
    if (!o->dbuf)
        return;
    lf_tensor *h = download(r, o->dbuf);
    if (!h)
        return;
    const size_t n = (size_t)lf_tensor_numel(h) * lf_dtype_size(h->dtype);
    EXPECT(r,
           n == (size_t)lf_tensor_numel(o->hbuf) * lf_dtype_size(o->hbuf->dtype) &&
               !memcmp(lf_tensor_data(h), lf_tensor_data(o->hbuf), n),
           "input %s was written to", what);
    lf_tensor_free(h);
}

double *expect_poison_kept(case_run *r, const operand *o, const char *what)
{
    lf_tensor *h = download(r, o->dbuf);
    if (!h)
        return NULL;
    const lf_tensor *v = o->hview;
    const int64_t rows = v->shape[0], cols = v->shape[1], ld = v->stride[0], off = v->offset - o->hbuf->offset;
    const int64_t n = lf_tensor_numel(h);
    const void *p = lf_tensor_data(h);
    double *got = malloc((size_t)(rows * cols) * sizeof *got);
    int64_t outside = 0, holes = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = lf_load_f32(p, h->dtype, i);
        const int64_t q = i - off;
        if (q >= 0 && q / ld < rows && q % ld < cols) {
            got[q / ld * cols + q % ld] = x;
            holes += isnan(x) != 0;
        } else {
            outside += !isnan(x);
        }
    }
    EXPECT(r, outside == 0 && holes == 0, "%s: %lld elements written outside it, %lld of its %lld left NaN", what,
           (long long)outside, (long long)holes, (long long)(rows * cols));
    lf_tensor_free(h);
    return got;
}

double rows_err(const double *got, const double *ref, const double *mag, int64_t rows, int64_t cols, int64_t step,
                lf_dtype dt, int64_t *where)
{
    double worst = 0;
    *where = 0;
    for (int64_t i = 0; i < rows; i += step) {
        int64_t w = 0;
        const double e = worst_err(got + i * cols, ref + i * cols, mag + i * cols, cols, dt, &w);
        if (!(e <= worst)) {
            worst = e;
            *where = i * cols + w;
        }
    }
    return worst;
}

int64_t ref_step(int64_t rows, double work)
{
    const double budget = 2e8; /* multiply-adds of float64 reference per case */
    if (work <= budget)
        return 1;
    int64_t s = (int64_t)(work / budget) + 1;
    s |= 1;
    return s < rows ? s : rows;
}

/* --- the float64 GEMM --- */

void ref_gemm_run(const ref_gemm *g, double *ref, double *mag, double *ab)
{
    const int64_t M = g->M, N = g->N, K = g->K, No = g->G ? N / 2 : N;
    double *z = malloc((size_t)N * sizeof *z), *zm = malloc((size_t)N * sizeof *zm);
    double *bt = malloc((size_t)(N * K) * sizeof *bt), *ka = malloc((size_t)K * sizeof *ka);
    for (int64_t k = 0; k < K; k++) /* b's columns as rows: both walks contiguous */
        for (int64_t j = 0; j < N; j++)
            bt[j * K + k] = g->B[k * N + j];
    for (int64_t i = 0; i < M; i += g->step) {
        const double *a = g->A + i * K;
        if (g->sa && g->blockwise) { /* a's row times its 1 x 128 blocks' scales */
            for (int64_t k = 0; k < K; k++)
                ka[k] = a[k] * g->sa[lf_scale_index(LF_SCALE_1X128, M, K, i, k)];
            a = ka;
        }
        for (int64_t j = 0; j < N; j++) {
            const double *b = bt + j * K;
            double s = 0, m = 0;
            if (g->sa && g->blockwise) {
                for (int64_t k0 = 0; k0 < K; k0 += LF_SCALE_BLOCK) { /* one 128 x 128 block of w at a time */
                    const double sb = g->sb[lf_scale_index(LF_SCALE_128X128, N, K, j, k0)];
                    for (int64_t k = k0; k < K && k < k0 + LF_SCALE_BLOCK; k++) {
                        const double t = a[k] * b[k] * sb;
                        s += t, m += fabs(t);
                    }
                }
            } else {
                for (int64_t k = 0; k < K; k++) {
                    const double t = a[k] * b[k];
                    s += t, m += fabs(t);
                }
            }
            if (g->sa && !g->blockwise)
                s *= (double)g->sa[i] * g->sb[j], m *= fabs((double)g->sa[i] * g->sb[j]);
            s *= g->alpha, m *= fabs(g->alpha);
            if (ab && !g->G)
                ab[i * No + j] = fabs(s);
            if (g->C)
                s += g->beta * g->C[i * N + j], m += fabs(g->beta * g->C[i * N + j]);
            if (g->bias)
                s += g->bias[j], m += fabs(g->bias[j]);
            z[j] = s, zm[j] = m;
        }
        for (int64_t jo = 0; jo < No; jo++) {
            if (!g->G) {
                ref[i * No + jo] = lf_act_ref(g->act, z[jo]);
                mag[i * No + jo] = zm[jo];
            } else {
                const int64_t gc = jo / g->G * 2 * g->G + jo % g->G, uc = gc + g->G;
                const double act = lf_act_ref(g->act, z[gc]);
                ref[i * No + jo] = act * z[uc];
                mag[i * No + jo] = (fabs(act) + zm[gc]) * (fabs(z[uc]) + zm[uc]);
            }
        }
    }
    free(z), free(zm), free(bt), free(ka);
}

/* --- the kernels the dispatcher launched --- */

static kernel_log *klog;

static void k_begin(void *u, lf_op_id op, int n, const lf_op_arg *a)
{
    (void)u, (void)op, (void)n, (void)a;
}
static void k_end(void *u, lf_op_id op, lf_status s)
{
    (void)u, (void)op, (void)s;
}
static void k_kbegin(void *u, lf_device d, lf_kernel_info *info)
{
    (void)u, (void)d, (void)info;
}
static void k_kend(void *u, lf_device d, const lf_kernel_info *info)
{
    (void)u, (void)d;
    if (!klog || !info)
        return;
    klog->n++;
    snprintf(klog->last, sizeof klog->last, "%s", info->name ? info->name : "");
}
static const lf_op_observer k_observer = {k_begin, k_end, k_kbegin, k_kend, NULL, NULL, NULL, NULL, NULL};

void kernel_log_start(kernel_log *k)
{
    memset(k, 0, sizeof *k);
    klog = k;
    lf_ops_set_observer(&k_observer);
}

void kernel_log_stop(void)
{
    lf_ops_set_observer(NULL);
    klog = NULL;
}

int name_has(const char *name, const char *token)
{
    const size_t n = strlen(token);
    for (const char *p = name ? strstr(name, token) : NULL; p; p = strstr(p + 1, token)) {
        const int before = p == name || p[-1] == '_' || p[-1] == ':', after = p[n] == '\0' || p[n] == '_';
        if (before && after)
            return 1;
    }
    return 0;
}
