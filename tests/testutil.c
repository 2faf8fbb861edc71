/* Test helpers (see testutil.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

int lf_test_failures, lf_test_checks;

void lf_test_fails(lf_status want, const char *needle, lf_status got, const char *expr, const char *file, int line)
{
    lf_test_checks++;
    const char *msg = lf_last_error();
    if (got != want || (needle && !strstr(msg, needle))) {
        lf_test_failures++;
        fprintf(stderr, "%s:%d: %s: expected %s%s%s%s, got %s \"%s\"\n", file, line, expr, lf_status_name(want),
                needle ? " with \"" : "", needle ? needle : "", needle ? "\"" : "", lf_status_name(got), msg);
    }
}

int lf_test_finish(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, lf_test_checks, lf_test_failures);
    return lf_test_failures ? 1 : 0;
}

lf_tensor *rand_tensor(lf_rng *rng, lf_dtype dt, int ndim, const int64_t *shape)
{
    lf_tensor *t = NULL;
    if (lf_tensor_empty(&t, dt, ndim, shape, LF_DEVICE_CPU) != LF_OK ||
        lf_tensor_fill_uniform(t, rng, -1.0, 1.0) != LF_OK) {
        fprintf(stderr, "rand_tensor: %s\n", lf_last_error());
        abort();
    }
    return t;
}

lf_tensor *rand_padded(lf_rng *rng, lf_dtype dt, int64_t rows, int64_t cols, int64_t ld, int64_t off)
{
    int64_t n = off + rows * ld;
    lf_tensor *buf = NULL, *v = NULL;
    if (lf_tensor_empty(&buf, dt, 1, &n, LF_DEVICE_CPU) != LF_OK || lf_tensor_fill(buf, NAN) != LF_OK)
        abort();
    int64_t shape[2] = {rows, cols}, stride[2] = {ld, 1};
    if (lf_tensor_as_strided(&v, buf, 2, shape, stride, off) != LF_OK || lf_tensor_fill_uniform(v, rng, -1, 1) != LF_OK)
        abort();
    lf_tensor_free(buf);
    return v;
}

lf_tensor *rand_colmajor(lf_rng *rng, lf_dtype dt, int64_t rows, int64_t cols)
{
    int64_t shape[2] = {cols, rows};
    lf_tensor *base = rand_tensor(rng, dt, 2, shape), *v = NULL;
    if (lf_tensor_t(&v, base) != LF_OK)
        abort();
    lf_tensor_free(base);
    return v;
}

double *to_f64(const lf_tensor *t)
{
    int64_t n = lf_tensor_numel(t);
    float *f = malloc((size_t)n * sizeof *f);
    double *d = malloc((size_t)n * sizeof *d);
    if (!f || !d || lf_tensor_to_f32(t, f, n) != LF_OK)
        abort();
    for (int64_t i = 0; i < n; i++)
        d[i] = f[i];
    free(f);
    return d;
}

double worst_err(const double *got, const double *ref, const double *mag, int64_t n, lf_dtype dt, int64_t *where)
{
    const double floor_dt = dt == LF_DTYPE_F16 ? 0x1p-14 : dt == LF_DTYPE_BF16 ? 0x1p-126 : 0.0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (got[i] == ref[i])
            continue;
        double e = fabs(got[i] - ref[i]) / (fabs(ref[i]) + 0.01 * mag[i] + floor_dt);
        if (!(e <= worst)) { /* NaN counts as the worst */
            worst = isnan(e) ? INFINITY : e;
            if (where)
                *where = i;
        }
    }
    return worst;
}

double tol_for(lf_dtype dt)
{
    return dt == LF_DTYPE_F32 ? 1e-5 : 1e-2;
}

/* The worst error of y (tokens, dim) against down(gelu_tanh(gate(x)) * up(x)) in float64, over
 * tokens `step` apart, by the measure of test_nn (mag: the magnitudes of every term). */
double gated_mlp_err(const lf_nn_gated_mlp *m, const lf_tensor *x, const lf_tensor *y, int64_t step)
{
    const int64_t D = m->dim, H = m->hidden, T = lf_tensor_numel(x) / D;
    double *X = to_f64(x), *Wg = to_f64(m->gate.weight), *Wu = to_f64(m->up.weight), *Wd = to_f64(m->down.weight);
    double *Y = to_f64(y), *h = malloc((size_t)H * sizeof *h), *hm = malloc((size_t)H * sizeof *hm);
    double *ref = malloc((size_t)D * sizeof *ref), *mag = malloc((size_t)D * sizeof *mag), worst = 0;
    for (int64_t t = 0; t < T; t += step) {
        for (int64_t j = 0; j < H; j++) {
            double g = 0, u = 0, gm = 0, um = 0;
            for (int64_t k = 0; k < D; k++) {
                g += X[t * D + k] * Wg[j * D + k], gm += fabs(X[t * D + k] * Wg[j * D + k]);
                u += X[t * D + k] * Wu[j * D + k], um += fabs(X[t * D + k] * Wu[j * D + k]);
            }
            double a = lf_act_ref(m->act, g);
            h[j] = a * u, hm[j] = (fabs(a) + gm) * (fabs(u) + um);
        }
        for (int64_t j = 0; j < D; j++) {
            double sum = 0, sm = 0;
            for (int64_t k = 0; k < H; k++)
                sum += h[k] * Wd[j * H + k], sm += hm[k] * fabs(Wd[j * H + k]);
            ref[j] = sum, mag[j] = sm;
        }
        double e = worst_err(Y + t * D, ref, mag, D, y->dtype, NULL);
        worst = e > worst ? e : worst;
    }
    free(X), free(Wg), free(Wu), free(Wd), free(Y), free(h), free(hm), free(ref), free(mag);
    return worst;
}

char lf_test_dir[64];

int lf_test_tmpdir(const char *prefix)
{
    snprintf(lf_test_dir, sizeof lf_test_dir, "/tmp/%sXXXXXX", prefix);
    if (mkdtemp(lf_test_dir))
        return 1;
    perror("mkdtemp");
    return 0;
}

const char *lf_test_path(const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", lf_test_dir, name);
    return buf[k];
}

void lf_test_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* a (n, k) . b (m, k)^T in float64 */
double *mm_nt(const double *a, const double *b, int64_t n, int64_t m, int64_t k)
{
    double *c = calloc((size_t)(n * m), sizeof *c);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            double acc = 0;
            for (int64_t p = 0; p < k; p++)
                acc += a[i * k + p] * b[j * k + p];
            c[i * m + j] = acc;
        }
    return c;
}

double *gated_mid(const double *gu, int64_t t, int64_t h, lf_act act)
{
    double *m = malloc((size_t)(t * h) * sizeof *m);
    for (int64_t i = 0; i < t; i++)
        for (int64_t j = 0; j < h; j++)
            m[i * h + j] = lf_act_ref(act, gu[i * 2 * h + j]) * gu[i * 2 * h + h + j];
    return m;
}

/* t quantized per row by lf_quantize_fp8 and decoded back (code x scale), in float64. */
static double *round_trip(const lf_tensor *t, lf_scale_mode m)
{
    lf_tensor *q = NULL, *sc = NULL;
    const lf_status st = m == LF_SCALE_1X128     ? lf_quantize_fp8_1x128(&q, &sc, t)
                         : m == LF_SCALE_128X128 ? lf_quantize_fp8_128x128(&q, &sc, t)
                                                 : lf_quantize_fp8(&q, &sc, t);
    CHECK(st == LF_OK, "quantize: %s", st == LF_OK ? "" : lf_last_error());
    const int64_t R = t->shape[0], C = t->shape[1];
    double *d = malloc((size_t)(R * C) * sizeof *d);
    const uint8_t *codes = q ? lf_tensor_data(q) : NULL;
    const float *s = sc ? lf_tensor_data(sc) : NULL;
    for (int64_t i = 0; i < R * C; i++) {
        const float scale = s ? s[lf_scale_index(m, R, C, i / C, i % C)] : NAN;
        d[i] = codes ? (double)lf_f32_from_f8e4m3(codes[i]) * scale : NAN;
    }
    lf_tensor_free(q), lf_tensor_free(sc);
    return d;
}

double *fp8_round_trip(const lf_tensor *t)
{
    return round_trip(t, LF_SCALE_ROWS);
}

double *fp8_round_trip_as(const lf_tensor *t, lf_scale_mode m)
{
    return round_trip(t, m);
}

double *fp8_round_trip_values(const double *v, int64_t rows, int64_t cols, lf_dtype dt, lf_scale_mode m)
{
    float *f = malloc((size_t)(rows * cols) * sizeof *f);
    for (int64_t i = 0; i < rows * cols; i++)
        f[i] = (float)v[i];
    lf_tensor *t = NULL;
    const lf_status st = lf_tensor_from_f32(&t, dt, 2, (int64_t[]){rows, cols}, f, LF_DEVICE_CPU);
    CHECK(st == LF_OK, "fp8_round_trip_values: %s", st == LF_OK ? "" : lf_last_error());
    free(f);
    double *d = t ? round_trip(t, m) : NULL;
    lf_tensor_free(t);
    return d;
}

/* relative RMS and largest error (over the largest magnitude) of y against ref */
void rel_errors(const double *y, const double *ref, int64_t n, double *rms, double *max)
{
    double se = 0, sr = 0, me = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        se += (y[i] - ref[i]) * (y[i] - ref[i]), sr += ref[i] * ref[i];
        me = fmax(me, fabs(y[i] - ref[i])), mr = fmax(mr, fabs(ref[i]));
    }
    *rms = sqrt(se / sr), *max = me / mr;
}
