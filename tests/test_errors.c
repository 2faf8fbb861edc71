/* Bad input is an error with a message naming the argument and the expected and actual
 * values: never a crash, a leak or a wrong answer. (AddressSanitizer and LeakSanitizer watch
 * this run; allocator_may_return_null lets a huge allocation fail as it would without them.) */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend_impl.h"
#include "testutil.h"

static void test_tensor_errors(void)
{
    lf_tensor *t = (lf_tensor *)1, *v = (lf_tensor *)1;
    int64_t zero[2] = {3, 0}, neg[2] = {-2, 4}, five[5] = {1, 1, 1, 1, 1};
    FAILS(LF_ESHAPE, "dim 1 = 0", lf_tensor_empty(&t, LF_DTYPE_F32, 2, zero, LF_DEVICE_CPU));
    CHECK(t == NULL, "out is NULL after a failure");
    FAILS(LF_ESHAPE, "dim 0 = -2", lf_tensor_empty(&t, LF_DTYPE_F32, 2, neg, LF_DEVICE_CPU));
    FAILS(LF_ESHAPE, "expected 1 to 4", lf_tensor_empty(&t, LF_DTYPE_F32, 5, five, LF_DEVICE_CPU));
    FAILS(LF_EINVAL, "'shape' is NULL", lf_tensor_empty(&t, LF_DTYPE_F32, 2, NULL, LF_DEVICE_CPU));
    FAILS(LF_EINVAL, "'out' is NULL", lf_tensor_empty(NULL, LF_DTYPE_F32, 2, zero, LF_DEVICE_CPU));
    FAILS(LF_EDTYPE, "dtype 7", lf_tensor_empty(&t, (lf_dtype)7, 1, five, LF_DEVICE_CPU));
    /* element count overflow, byte count overflow */
    int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40}, big[1] = {INT64_C(1) << 62};
    FAILS(LF_EOVERFLOW, "63 bits", lf_tensor_empty(&t, LF_DTYPE_F32, 2, huge, LF_DEVICE_CPU));
    FAILS(LF_EOVERFLOW, "bytes", lf_tensor_empty(&t, LF_DTYPE_F32, 1, big, LF_DEVICE_CPU));
    /* a valid size the machine cannot give */
    int64_t too_much[1] = {INT64_C(1) << 60};
    FAILS(LF_ENOMEM, "could not allocate", lf_tensor_empty(&t, LF_DTYPE_BF16, 1, too_much, LF_DEVICE_CPU));
    CHECK(t == NULL, "out is NULL after ENOMEM");
    /* a device this build has no backend for */
    FAILS(LF_EDEVICE, "no cuda backend", lf_tensor_empty(&t, LF_DTYPE_F32, 1, five, LF_DEVICE_CUDA));
    FAILS(LF_EDEVICE, "not cpu or cuda", lf_tensor_empty(&t, LF_DTYPE_F32, 1, five, (lf_device)9));

    int64_t s[2] = {4, 6};
    OK(lf_tensor_empty(&t, LF_DTYPE_F32, 2, s, LF_DEVICE_CPU));
    FAILS(LF_EINVAL, "dim0 = 2 is out of range", lf_tensor_transpose(&v, t, 2, 0));
    CHECK(v == NULL, "view out is NULL after a failure");
    FAILS(LF_EINVAL, "dim0 = -3", lf_tensor_transpose(&v, t, -3, 0));
    int perm[2] = {0, 0};
    FAILS(LF_EINVAL, "appears twice", lf_tensor_permute(&v, t, perm));
    int64_t s5[2] = {5, 5};
    FAILS(LF_ESHAPE, "invalid for 24 elements", lf_tensor_view(&v, t, 2, s5));
    int64_t two_infer[2] = {-1, -1};
    FAILS(LF_ESHAPE, NULL, lf_tensor_view(&v, t, 2, two_infer));
    int64_t negstride[2] = {-1, 1};
    FAILS(LF_EINVAL, "negative", lf_tensor_as_strided(&v, t, 2, s, negstride, 0));
    FAILS(LF_EINVAL, "offset -1", lf_tensor_as_strided(&v, t, 2, s, negstride + 1, -1));
    float small[3];
    FAILS(LF_EINVAL, "dst holds 3 elements, tensor has 24", lf_tensor_to_f32(t, small, 3));
    FAILS(LF_EINVAL, "[1, -1) is empty", lf_tensor_fill_uniform(t, &(lf_rng){{1, 2, 3, 4}}, 1, -1));
    lf_dtype dt;
    FAILS(LF_EINVAL, "unknown dtype 'f64'", lf_dtype_parse("f64", &dt));
    lf_tensor_free(t);
    lf_tensor_free(NULL);
}

static void test_op_errors(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 3);
    int64_t s23[2] = {2, 3}, s43[2] = {4, 3}, s34[2] = {3, 4}, s4[1] = {4}, s5[1] = {5};
    lf_tensor *a = rand_tensor(&rng, LF_DTYPE_F32, 2, s23), *b = rand_tensor(&rng, LF_DTYPE_F32, 2, s43);
    lf_tensor *c = rand_tensor(&rng, LF_DTYPE_F32, 2, s34), *h = rand_tensor(&rng, LF_DTYPE_BF16, 2, s34);
    lf_tensor *b4 = rand_tensor(&rng, LF_DTYPE_F32, 1, s4), *b5 = rand_tensor(&rng, LF_DTYPE_F32, 1, s5);
    lf_tensor *y = (lf_tensor *)1;
    /* shape: the message shows both shapes and the dims that disagree */
    FAILS(LF_ESHAPE, "mat1 [2, 3] and mat2 [4, 3] cannot be multiplied (3 != 4)", lf_mm(&y, a, b));
    CHECK(y == NULL, "no output on failure");
    /* dtype and NULL */
    FAILS(LF_EDTYPE, "'mat1' is f32 but 'mat2' is bf16", lf_mm(&y, a, h));
    FAILS(LF_EINVAL, "'mat2' is NULL", lf_mm(&y, a, NULL));
    FAILS(LF_EINVAL, "'out' is NULL", lf_mm(NULL, a, c));
    FAILS(LF_ESHAPE, "'mat1' must have 2 dims, got 1", lf_mm(&y, b4, c));
    /* addmm bias that does not broadcast */
    FAILS(LF_ESHAPE, "bias of shape [5] does not broadcast to the result's [2, 4]", lf_addmm(&y, b5, a, c, 1, 1));
    FAILS(LF_ESHAPE, "expected [4]", lf_addmm_act(&y, b5, a, c, LF_ACT_GELU_TANH));
    FAILS(LF_EINVAL, "activation 9", lf_addmm_act(&y, NULL, a, c, (lf_act)9));
    FAILS(LF_ESHAPE, "whole blocks of 2 x group (group 3)", lf_mm_gated(&y, a, c, LF_ACT_GELU_TANH, 3));
    /* 2 x group wrapped to -4, which divides 4 columns: the up column was then read 2^63 - 2 columns on */
    FAILS(LF_ESHAPE, "whole blocks of 2 x group", lf_mm_gated(&y, a, c, LF_ACT_SILU, INT64_MAX - 1));
    /* linear: input features, bias length */
    FAILS(LF_ESHAPE, "input [2, 3] has 3 features but weight [3, 4] expects 4", lf_linear(&y, a, c, NULL));
    FAILS(LF_ESHAPE, "bias [5] does not match weight [4, 3]", lf_linear(&y, a, b, b5));
    FAILS(LF_EDTYPE, "'input' is f32 but 'weight' is bf16", lf_linear(&y, c, h, NULL));
    /* broadcasting */
    FAILS(LF_ESHAPE, "shapes [2, 3] and [4, 3] do not broadcast", lf_add(&y, a, b));
    FAILS(LF_EINVAL, "approximate = 5", lf_gelu(&y, a, (lf_gelu_approx)5));
    FAILS(LF_EUNSUPPORTED, "supported are", lf_matmul(&y, b4, c));
    int64_t bad_shape[2] = {7, 7};
    FAILS(LF_ESHAPE, "invalid for 6 elements", lf_reshape(&y, a, 2, bad_shape));
    lf_tensor *list[] = {a, b, c, h, b4, b5};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        lf_tensor_free(list[i]);
}

static void test_backend_errors(void)
{
    float buf[64];
    memset(buf, 0, sizeof buf);
    lf_gemm g = {.ep = lf_epilogue_default()};
    g.a = (lf_matrix){buf, LF_DTYPE_F32, 2, 3, 3, 1};
    g.b = (lf_matrix){buf + 8, LF_DTYPE_F32, 3, 4, 4, 1};
    g.d = (lf_matrix){buf + 24, LF_DTYPE_F32, 2, 4, 4, 1};
    OK(lf_backend_gemm(LF_DEVICE_CPU, &g, NULL));
    lf_gemm bad = g;
    bad.d.data = buf + 2; /* D overlaps A */
    FAILS(LF_EINVAL, "d overlaps a", lf_backend_gemm(LF_DEVICE_CPU, &bad, NULL));
    bad = g;
    bad.b.rows = 5;
    FAILS(LF_ESHAPE, "inner dims differ", lf_backend_gemm(LF_DEVICE_CPU, &bad, NULL));
    bad = g;
    bad.d.cols = 3;
    FAILS(LF_ESHAPE, "d is 2 x 3, expected 2 x 4", lf_backend_gemm(LF_DEVICE_CPU, &bad, NULL));
    bad = g;
    bad.d.cs = 0;
    FAILS(LF_ESHAPE, "overlap", lf_backend_gemm(LF_DEVICE_CPU, &bad, NULL));
    bad = g;
    bad.ep.gate = LF_GATE_PAIRED;
    bad.ep.gate_group = 3;
    FAILS(LF_ESHAPE, "2 x gate_group", lf_backend_gemm(LF_DEVICE_CPU, &bad, NULL));
    bad.ep.gate_group = INT64_MAX - 1; /* 2 x group wraps to -4, which divides b's 4 columns */
    FAILS(LF_ESHAPE, "2 x gate_group", lf_backend_gemm(LF_DEVICE_CPU, &bad, NULL));
    FAILS(LF_ESHAPE, "2 x gate_group", lf_gemm_reference(&bad));
    bad.ep.gate_group = 1;
    bad.d.cols = 2;
    bad.c = (lf_matrix){buf + 40, LF_DTYPE_F32, 2, 4, 4, 1};
    FAILS(LF_EUNSUPPORTED, "takes no C input", lf_backend_gemm(LF_DEVICE_CPU, &bad, NULL));
    bad = g; /* a K of 2^57 over broadcast operands: valid, and past what any CPU path takes */
    bad.a = (lf_matrix){buf, LF_DTYPE_F32, 2, (int64_t)1 << 57, 0, 0};
    bad.b = (lf_matrix){buf, LF_DTYPE_F32, (int64_t)1 << 57, 4, 0, 0};
    FAILS(LF_EOVERFLOW, "is past the", lf_backend_gemm(LF_DEVICE_CPU, &bad, NULL));
    FAILS(LF_EOVERFLOW, "is past the 2^40", lf_gemm_reference(&bad));
    bad = g;
    bad.a.rs = INT64_MAX / 2;
    FAILS(LF_EOVERFLOW, "63 bits", lf_backend_gemm(LF_DEVICE_CPU, &bad, NULL));
    if (!lf_device_available(LF_DEVICE_CUDA)) /* says why there is none */
        FAILS(LF_EDEVICE, "no cuda device: ", lf_backend_gemm(LF_DEVICE_CUDA, &g, NULL));
    FAILS(LF_EINVAL, "'g' is NULL", lf_backend_gemm(LF_DEVICE_CPU, NULL, NULL));
    FAILS(LF_EINVAL, "isa 3", lf_cpu_isa_force(LF_CPU_ISA_COUNT));
}

/* Run f in a child process; its stderr and whether it died of SIGABRT. */
static int dies_saying(void (*f)(void), const char *needle)
{
    int fds[2];
    if (pipe(fds))
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        f();
        _exit(0); /* it should not come back */
    }
    close(fds[1]);
    char buf[1024] = {0};
    size_t n = 0;
    ssize_t k;
    while (n < sizeof buf - 1 && (k = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)k;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(buf, needle);
}

static void data_of_null(void)
{
    (void)lf_tensor_data(NULL);
}
static void contiguous_of_null(void)
{
    (void)lf_tensor_is_contiguous(NULL);
}
static void device_of_null(void)
{
    (void)lf_tensor_device(NULL);
}

/* The public struct's geometry edited to reach past its storage, and accessors given NULL:
 * the first is an op's error, the second a precondition that stops the program by name. */
static void test_tensor_preconditions(void)
{
    CHECK(dies_saying(data_of_null, "lf_tensor_data: argument 't' is NULL"), "lf_tensor_data(NULL)");
    CHECK(dies_saying(contiguous_of_null, "lf_tensor_is_contiguous"), "lf_tensor_is_contiguous(NULL)");
    CHECK(dies_saying(device_of_null, "lf_tensor_device"), "lf_tensor_device(NULL)");
    int64_t s[2] = {4, 4};
    lf_tensor *a = NULL, *b = NULL, *y = NULL;
    OK(lf_tensor_empty(&a, LF_DTYPE_F32, 2, s, LF_DEVICE_CPU));
    OK(lf_tensor_empty(&b, LF_DTYPE_F32, 2, s, LF_DEVICE_CPU));
    OK(lf_tensor_fill(a, 1.0f));
    OK(lf_tensor_fill(b, 1.0f));
    a->stride[0] = 1000; /* rows 1000 floats apart in a 16-float buffer */
    FAILS(LF_ESHAPE,
          "lf_mm: argument 'mat1' (shape [4, 4], strides [1000, 1], offset 0) reaches past its storage of 64 bytes",
          lf_mm(&y, a, b));
    a->stride[0] = 4;
    a->offset = 1; /* one past: the last element falls off the end */
    FAILS(LF_ESHAPE, "reaches past its storage", lf_mm(&y, a, b));
    a->offset = 0;
    b->stride[1] = -1;
    FAILS(LF_ESHAPE, "reaches past its storage", lf_gelu(&y, b, LF_GELU_TANH));
    b->stride[1] = 1;
    OK(lf_mm(&y, a, b));
    /* the tensor layer's own walks and views check the same: they wrote or read past the buffer */
    float out[16];
    lf_rng rng;
    lf_rng_seed(&rng, 1);
    lf_tensor *v = NULL;
    a->stride[0] = (int64_t)1 << 40;
    FAILS(LF_ESHAPE, "lf_tensor_fill: argument 't'", lf_tensor_fill(a, 2.0f));
    FAILS(LF_ESHAPE, "reaches past its storage", lf_tensor_fill_uniform(a, &rng, 0, 1));
    FAILS(LF_ESHAPE, "reaches past its storage", lf_tensor_to_f32(a, out, 16));
    FAILS(LF_ESHAPE, "reaches past its storage", lf_tensor_to_device(&v, a, LF_DEVICE_CPU));
    FAILS(LF_ESHAPE, "reaches past its storage", lf_tensor_t(&v, a));
    a->stride[0] = a->stride[1] = 0; /* every element the first: inside, but 2^64 of them */
    a->shape[0] = a->shape[1] = (int64_t)1 << 32;
    FAILS(LF_EOVERFLOW, "more elements than 63 bits", lf_tensor_to_f32(a, out, 16));
    a->shape[0] = a->shape[1] = 4, a->stride[0] = 4, a->stride[1] = 1;
    a->ndim = 32; /* permute copied 32 dims into arrays of 4 */
    const int perm[32] = {1, 0};
    FAILS(LF_EINVAL, "not a valid tensor", lf_tensor_permute(&v, a, perm));
    a->ndim = 2;
    OK(lf_tensor_to_f32(a, out, 16));
    CHECK(v == NULL && out[15] == 1.0f, "refused calls changed nothing");
    lf_tensor_free(y), lf_tensor_free(a), lf_tensor_free(b);
}

/* lf_copy_out into an out whose elements overlap: refused (a (2^30, 2^30) view of one float
 * walked 2^60 elements); a plain copy still works, and into a broadcast-free out. */
static void test_copy_out(void)
{
    lf_tensor *one = NULL, *x = NULL, *out = NULL, *bx = NULL;
    int64_t s1 = 1, big[2] = {(int64_t)1 << 30, (int64_t)1 << 30}, zero[2] = {0, 0}, sh[2] = {2, 3};
    OK(lf_tensor_empty(&one, LF_DTYPE_F32, 1, &s1, LF_DEVICE_CPU));
    OK(lf_tensor_fill(one, 3.0f));
    OK(lf_tensor_as_strided(&bx, one, 2, big, zero, 0));
    OK(lf_tensor_empty(&x, LF_DTYPE_F32, 1, &s1, LF_DEVICE_CPU));
    OK(lf_tensor_as_strided(&out, x, 2, big, zero, 0));
    alarm(60); /* the walk of 2^60 elements it replaced: killed, not waited for */
    FAILS(LF_EINVAL, "out's elements overlap (dim 0", lf_copy_out(out, bx));
    alarm(0);
    lf_tensor_free(out), lf_tensor_free(bx), out = bx = NULL;
    OK(lf_tensor_as_strided(&bx, one, 2, sh, zero, 0)); /* x may repeat its elements; out may not */
    OK(lf_tensor_empty(&out, LF_DTYPE_F32, 2, sh, LF_DEVICE_CPU));
    OK(lf_copy_out(out, bx));
    float v[6];
    OK(lf_tensor_to_f32(out, v, 6));
    CHECK(v[0] == 3.0f && v[5] == 3.0f, "a broadcast x copied into a plain out");
    lf_tensor_free(one), lf_tensor_free(x), lf_tensor_free(out), lf_tensor_free(bx);
    /* one storage: row 0 into row 1 copies (as torch's copy_); a row into itself or into the
     * whole matrix overlaps, and is refused */
    lf_tensor *m = NULL, *r0 = NULL, *r1 = NULL;
    int64_t ms[2] = {2, 3}, rs[1] = {3}, st1[1] = {1};
    const float init[6] = {1, 2, 3, 4, 5, 6};
    OK(lf_tensor_from_f32(&m, LF_DTYPE_F32, 2, ms, init, LF_DEVICE_CPU));
    OK(lf_tensor_as_strided(&r0, m, 1, rs, st1, 0));
    OK(lf_tensor_as_strided(&r1, m, 1, rs, st1, 3));
    OK(lf_copy_out(r1, r0));
    OK(lf_tensor_to_f32(m, v, 6));
    CHECK(v[3] == 1 && v[4] == 2 && v[5] == 3 && v[0] == 1, "row 0 copied into row 1 of one matrix");
    lf_tensor_free(r1), r1 = NULL;
    OK(lf_tensor_as_strided(&r1, m, 1, rs, st1, 2)); /* elements 2-4: shares element 2 with row 0 */
    FAILS(LF_EINVAL, "overlap in memory", lf_copy_out(r1, r0));
    lf_tensor_free(m), lf_tensor_free(r0), lf_tensor_free(r1);
}

int main(void)
{
    test_tensor_errors();
    test_copy_out();
    test_tensor_preconditions();
    test_op_errors();
    test_backend_errors();
    CHECK(!strcmp(lf_status_name(LF_EGUARD), "LF_EGUARD") && !strcmp(lf_status_name((lf_status)99), "LF_E?"),
          "status names");
    return lf_test_finish("test_errors");
}
