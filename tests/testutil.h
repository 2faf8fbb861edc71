/* Test helpers: checks that count failures (each test exits non-zero if any failed), random
 * tensors, poisoning, and float64 comparisons with a stated error measure. */
#ifndef LF_TESTUTIL_H
#define LF_TESTUTIL_H

#include <math.h>
#include <stdio.h>

#include "linfuse/nn.h"

extern int lf_test_failures, lf_test_checks;

#define CHECK(cond, ...)                                                             \
    do {                                                                             \
        lf_test_checks++;                                                            \
        if (!(cond)) {                                                               \
            lf_test_failures++;                                                      \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
        }                                                                            \
    } while (0)

/* A call that must succeed; on failure the test reports lf_last_error() and returns. */
#define OK(call)                                                                                         \
    do {                                                                                                 \
        lf_status s_ = (call);                                                                           \
        lf_test_checks++;                                                                                \
        if (s_ != LF_OK) {                                                                               \
            lf_test_failures++;                                                                          \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call, lf_status_name(s_), \
                    lf_last_error());                                                                    \
            return;                                                                                      \
        }                                                                                                \
    } while (0)

/* A call that must fail with status `want` and a message containing `needle` (NULL: any). */
#define FAILS(want, needle, call) lf_test_fails((want), (needle), (call), #call, __FILE__, __LINE__)
void lf_test_fails(lf_status want, const char *needle, lf_status got, const char *expr, const char *file, int line);

/* Print the summary line and return the exit status. */
int lf_test_finish(const char *name);

/* A new CPU tensor of the given shape and dtype, uniform in [-1, 1) from rng. */
lf_tensor *rand_tensor(lf_rng *rng, lf_dtype dt, int ndim, const int64_t *shape);
/* A (rows, cols) view with row stride ld >= cols and element offset `off` into a larger
 * buffer whose unused elements are NaN: a non-contiguous, offset operand. Random values. */
lf_tensor *rand_padded(lf_rng *rng, lf_dtype dt, int64_t rows, int64_t cols, int64_t ld, int64_t off);
/* A (rows, cols) view whose columns are contiguous (row stride 1), i.e. the transpose of a
 * row-major (cols, rows) buffer. Random values. */
lf_tensor *rand_colmajor(lf_rng *rng, lf_dtype dt, int64_t rows, int64_t cols);
/* Values of t as doubles in row-major order of its shape (caller frees). */
double *to_f64(const lf_tensor *t);

/* The error measure of every numeric test: |got - ref| / (|ref| + 0.01 * mag + floor(dt)), where
 * mag is the sum of the magnitudes of the terms that made ref (for a GEMM, sum_k |a_ik b_kj| and
 * so on) and floor(dt) is the smallest normal of the stored dtype (2^-14 for f16, 2^-126 for
 * bf16, 0 for f32), below which a dtype has only absolute resolution. It is a relative error
 * that does not blow up where a sum cancels to near zero. Returns the worst value over n
 * elements and the index where it happened. */
double worst_err(const double *got, const double *ref, const double *mag, int64_t n, lf_dtype dt, int64_t *where);

/* The worst error (worst_err's measure) of y (tokens, dim), computed by m from x (..., dim),
 * against down(act(gate(x)) * up(x)) (m's act) in float64 over tokens `step` apart; mag holds the
 * magnitudes of every term through both layers. m's weights must be host tensors. */
double gated_mlp_err(const lf_nn_gated_mlp *m, const lf_tensor *x, const lf_tensor *y, int64_t step);

/* FP8 helpers (test_fp8, the GPU's FP8 tests): a (n, k) . b (m, k)^T in float64; t (2-D) quantized
 * per row by lf_quantize_fp8 and decoded back (code x scale) in float64 (t on the CPU); the relative RMS and the
 * largest error over the largest magnitude of y against ref. Callers free what is returned. */
double *mm_nt(const double *a, const double *b, int64_t n, int64_t m, int64_t k);
/* act(g) * u in float64 from a (t, 2h) product whose row holds the h gates, then their h ups (the
 * stacked [Wg; Wu]): (t, h) */
double *gated_mid(const double *gu, int64_t t, int64_t h, lf_act act);
double *fp8_round_trip(const lf_tensor *t);
/* the same with the scales in mode m (lf_quantize_fp8_1x128, lf_quantize_fp8_128x128) */
double *fp8_round_trip_as(const lf_tensor *t, lf_scale_mode m);
/* the same for float64 values (rows, cols), first rounded to float and stored as dt (f32 or bf16:
 * the tensor a kernel would quantize) */
double *fp8_round_trip_values(const double *v, int64_t rows, int64_t cols, lf_dtype dt, lf_scale_mode m);
void rel_errors(const double *y, const double *ref, int64_t n, double *rms, double *max);

/* Tolerance for results stored in dt: 1e-5 for f32, 1e-2 for bf16 and f16. */
double tol_for(lf_dtype dt);

/* A fresh directory /tmp/<prefix>XXXXXX for a test's files (0 when it cannot be made), and a
 * name in it (four kept at a time, so a call may take a few), and a text file written there. */
int lf_test_tmpdir(const char *prefix);
const char *lf_test_path(const char *name);
extern char lf_test_dir[64];
void lf_test_write_text(const char *path, const char *text);

#endif
