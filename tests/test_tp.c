/* Tensor parallel without a GPU: the Megatron split's arithmetic (every rank's partial output,
 * computed one after another on the CPU and summed, is the full MLP's output, against float64,
 * for every variant, odd token counts, 2, 3 and 4 ranks), lf_mm_out into a block of rows, the
 * errors of the collectives on a device that has none. The ranks' meeting (TCP) is test_dist;
 * the same forward over NCCL on two GPUs is tests/gpu/test_tp.c. */
#include <stdlib.h>
#include <string.h>

#include "linfuse/dist.h"
#include "testutil.h"

static void test_shards_sum_to_full(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 21);
    for (int dt = 0; dt < 2; dt++) {
        const lf_dtype d = dt ? LF_DTYPE_BF16 : LF_DTYPE_F32;
        const int64_t B = 1, S = 37, D = 40, H = 96, T = B * S; /* 37 tokens: no tile divides them */
        lf_nn_gated_mlp full;
        lf_nn_gated_mlp_opts o = {D, H, d, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
        OK(lf_nn_gated_mlp_init(&full, &o, &rng));
        int64_t xs[3] = {B, S, D};
        lf_tensor *x = rand_tensor(&rng, d, 3, xs);
        for (int world = 2; world <= 4; world++)
            for (int v = 0; v < LF_MLP_VARIANT_COUNT; v++) {
                double *sum = calloc((size_t)(T * D), sizeof *sum);
                for (int r = 0; r < world; r++) {
                    lf_nn_tp_mlp m;
                    OK(lf_nn_tp_mlp_shard(&m, &full, r, world, NULL, LF_DEVICE_CPU));
                    CHECK(m.local.hidden == H / world && m.local.dim == D, "rank %d's shard is %lld wide", r,
                          (long long)m.local.hidden);
                    m.chunks = 3; /* without a group there is nothing to overlap: one pass */
                    lf_tensor *y = NULL;
                    OK(lf_nn_tp_mlp_forward_partial(&m, (lf_mlp_variant)v, x, &y));
                    CHECK(y->ndim == 3 && y->shape[1] == S && y->shape[2] == D, "partial's shape");
                    double *p = to_f64(y);
                    for (int64_t i = 0; i < T * D; i++)
                        sum[i] += p[i];
                    free(p);
                    lf_tensor_free(y);
                    /* with no communicator the "full" forward is the partial too */
                    OK(lf_nn_tp_mlp_forward(&m, (lf_mlp_variant)v, x, &y));
                    lf_tensor_free(y);
                    lf_nn_tp_mlp_free(&m);
                }
                float *f = malloc((size_t)(T * D) * sizeof *f);
                for (int64_t i = 0; i < T * D; i++)
                    f[i] = (float)sum[i];
                lf_tensor *ys = NULL;
                OK(lf_tensor_from_f32(&ys, LF_DTYPE_F32, 3, xs, f, LF_DEVICE_CPU));
                double e = gated_mlp_err(&full, x, ys, 1);
                CHECK(e < tol_for(d), "%d ranks, %s, %s: the partials sum to the full MLP (err %.3g)", world,
                      lf_mlp_variant_name((lf_mlp_variant)v), lf_dtype_name(d), e);
                lf_tensor_free(ys);
                free(f), free(sum);
            }
        lf_tensor_free(x);
        lf_nn_gated_mlp_free(&full);
    }
}

static void test_mm_out(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 5);
    int64_t as[2] = {7, 12}, bs[2] = {12, 9}, ys[2] = {20, 9};
    lf_tensor *a = rand_tensor(&rng, LF_DTYPE_F32, 2, as), *b = rand_tensor(&rng, LF_DTYPE_F32, 2, bs), *y = NULL,
              *block = NULL, *ref = NULL;
    OK(lf_tensor_empty(&y, LF_DTYPE_F32, 2, ys, LF_DEVICE_CPU));
    float *yd = lf_tensor_data(y);
    for (int64_t i = 0; i < 20 * 9; i++)
        yd[i] = NAN; /* poisoned: rows outside the block must stay so */
    int64_t shape[2] = {7, 9}, stride[2] = {9, 1};
    OK(lf_tensor_as_strided(&block, y, 2, shape, stride, 5 * 9)); /* rows 5..11 */
    OK(lf_mm_out(block, a, b));
    OK(lf_mm(&ref, a, b));
    const float *r = lf_tensor_data(ref);
    int same = 1, untouched = 1;
    for (int64_t i = 0; i < 20 * 9; i++) {
        int inside = i >= 5 * 9 && i < 12 * 9;
        if (inside)
            same &= yd[i] == r[i - 5 * 9];
        else
            untouched &= yd[i] != yd[i];
    }
    CHECK(same, "mm_out into rows 5..11 equals mm bit for bit");
    CHECK(untouched, "mm_out wrote nothing outside its block");
    int64_t wrong[2] = {7, 8};
    lf_tensor *w = NULL;
    OK(lf_tensor_empty(&w, LF_DTYPE_F32, 2, wrong, LF_DEVICE_CPU));
    FAILS(LF_ESHAPE, "the product is [7, 9]", lf_mm_out(w, a, b));
    lf_tensor *alias = NULL; /* a (7, 9) view over a's own memory */
    int64_t al_stride[2] = {12, 1};
    OK(lf_tensor_as_strided(&alias, a, 2, shape, al_stride, 0));
    FAILS(LF_EINVAL, "shares memory", lf_mm_out(alias, a, b));
    lf_tensor_free(alias), lf_tensor_free(w), lf_tensor_free(block), lf_tensor_free(ref);
    lf_tensor_free(a), lf_tensor_free(b), lf_tensor_free(y);
}

static void test_errors(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 3);
    lf_nn_gated_mlp full;
    lf_nn_gated_mlp_opts o = {16, 30, LF_DTYPE_F32, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
    OK(lf_nn_gated_mlp_init(&full, &o, &rng));
    lf_nn_tp_mlp m;
    FAILS(LF_ESHAPE, "not divisible by 4 ranks", lf_nn_tp_mlp_shard(&m, &full, 0, 4, NULL, LF_DEVICE_CPU));
    FAILS(LF_EINVAL, "rank 2 of 2", lf_nn_tp_mlp_shard(&m, &full, 2, 2, NULL, LF_DEVICE_CPU));
    int64_t xs[2] = {3, 16};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, 2, xs), *y = NULL;
    FAILS(LF_EINVAL, "'comm' is NULL", lf_all_reduce(x, NULL, 0));
    FAILS(LF_EINVAL, "'comm' is NULL", lf_comm_wait(NULL));
    lf_comm *comms[2] = {(lf_comm *)1, (lf_comm *)1};
    FAILS(LF_EDEVICE, NULL, lf_comm_init_local(comms, 2, LF_DEVICE_CPU));
    CHECK(comms[0] == NULL && comms[1] == NULL, "no communicators after a failure");
    OK(lf_nn_tp_mlp_shard(&m, &full, 1, 2, NULL, LF_DEVICE_CPU));
    int64_t bad[2] = {3, 15};
    lf_tensor *xb = rand_tensor(&rng, LF_DTYPE_F32, 2, bad);
    FAILS(LF_ESHAPE, "expected dim = 16", lf_nn_tp_mlp_forward(&m, LF_MLP_EAGER, xb, &y));
    CHECK(y == NULL, "no output on failure");
    lf_nn_tp_mlp_free(&m);
    lf_nn_tp_mlp_free(&m); /* twice is harmless */
    lf_tensor_free(x), lf_tensor_free(xb);
    lf_nn_gated_mlp_free(&full);
    CHECK(lf_nn_tp_chunks(16) == 1 && lf_nn_tp_chunks(8192) == 1, "chunks: one pass (measured: chunking lost)");
}

int main(void)
{
    test_shards_sum_to_full();
    test_mm_out();
    test_errors();
    return lf_test_finish("test_tp");
}
