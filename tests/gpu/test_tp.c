/* Several GPUs in one process, one thread each: tensors stay on the GPU their thread selected
 * and ops refuse another's; lf_all_reduce sums across GPUs over NCCL (at once, and async then
 * waited for); the MLP split over the GPUs (every variant, with and without chunks, compiled
 * into one CUDA graph per rank) equals the full MLP in float64 at odd token counts. Needs two
 * GPUs (the nvidia-h200-x2 machine); with fewer it says so and passes nothing. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "linfuse/compile.h"
#include "linfuse/dist.h"
#include "../testutil.h"

enum { MAXR = 8 };

typedef struct job {
    int rank, n;
    lf_comm *comm;
    void (*fn)(struct job *);
    const lf_nn_gated_mlp *full;
    const lf_tensor *x;
    lf_mlp_variant v;
    int chunks, compiled;
    double *out; /* rank's result on the host (f64), or NULL */
    int64_t out_n;
    lf_tensor **made; /* make_on_one: the tensor it made */
    char err[256];
    int failed;
} job;

static void *thread_main(void *p)
{
    job *j = p;
    if (lf_device_select(LF_DEVICE_CUDA, j->rank) != LF_OK) {
        snprintf(j->err, sizeof j->err, "select: %s", lf_last_error());
        j->failed = 1;
        return NULL;
    }
    j->fn(j);
    return NULL;
}

/* Run fn on n threads, rank r on cuda:r. */
static void on_ranks(job *jobs, int n) /* jobs[i] on a thread of its own, on cuda:jobs[i].rank */
{
    pthread_t th[MAXR];
    for (int r = 0; r < n; r++)
        pthread_create(&th[r], NULL, thread_main, &jobs[r]);
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        CHECK(!jobs[r].failed, "rank %d: %s", r, jobs[r].err);
    }
}

#define JOB_TRY(j, call)                                                          \
    do {                                                                          \
        lf_status s_ = (call);                                                    \
        if (s_ != LF_OK) {                                                        \
            snprintf((j)->err, sizeof(j)->err, "%s: %s", #call, lf_last_error()); \
            (j)->failed = 1;                                                      \
            return;                                                               \
        }                                                                         \
    } while (0)

/* A (33, 65) tensor of v on this thread's GPU. */
static lf_status on_gpu(lf_tensor **out, lf_dtype d, const int64_t *shape, const float *v)
{
    lf_tensor *h = NULL;
    lf_status s = lf_tensor_from_f32(&h, d, 2, shape, v, LF_DEVICE_CPU);
    if (s == LF_OK)
        s = lf_tensor_to_device(out, h, LF_DEVICE_CUDA);
    lf_tensor_free(h);
    return s;
}

/* Each rank sums (rank + 1) * v over the group: sum_r (r + 1) * v = n (n + 1) / 2 * v. */
static void reduce_job(job *j)
{
    for (int dt = 0; dt < 2; dt++) {
        const lf_dtype d = dt ? LF_DTYPE_BF16 : LF_DTYPE_F32;
        const int64_t shape[2] = {33, 65};
        float *v = malloc(33 * 65 * sizeof *v);
        for (int i = 0; i < 33 * 65; i++)
            v[i] = (float)((i % 13) - 6) * (float)(j->rank + 1); /* small integers: exact in bf16 */
        lf_tensor *t = NULL;
        JOB_TRY(j, on_gpu(&t, d, shape, v));
        if (lf_tensor_device_index(t) != j->rank) {
            snprintf(j->err, sizeof j->err, "a tensor made on rank %d's thread is on cuda:%d", j->rank,
                     lf_tensor_device_index(t));
            j->failed = 1;
        }
        for (int async = 0; async < 2 && !j->failed; async++) {
            if (async) { /* back to (rank + 1) * v, then sum async and wait */
                lf_tensor_free(t);
                t = NULL;
                JOB_TRY(j, on_gpu(&t, d, shape, v));
            }
            JOB_TRY(j, lf_all_reduce(t, j->comm, async));
            if (async)
                JOB_TRY(j, lf_comm_wait(j->comm));
            float *got = malloc(33 * 65 * sizeof *got);
            JOB_TRY(j, lf_tensor_to_f32(t, got, 33 * 65));
            const float k = (float)(j->n * (j->n + 1) / 2) / (float)(j->rank + 1);
            for (int i = 0; i < 33 * 65 && !j->failed; i++)
                if (got[i] != v[i] * k) {
                    snprintf(j->err, sizeof j->err, "%s %s: element %d is %g, expected %g", lf_dtype_name(d),
                             async ? "async" : "sync", i, got[i], v[i] * k);
                    j->failed = 1;
                }
            free(got);
        }
        lf_tensor_free(t);
        free(v);
    }
    /* misuse: a strided tensor; a tensor from another GPU's thread is refused by the ops */
    int64_t s2[2] = {8, 8};
    lf_tensor *t = NULL, *tt = NULL;
    JOB_TRY(j, lf_tensor_empty(&t, LF_DTYPE_F32, 2, s2, LF_DEVICE_CUDA));
    JOB_TRY(j, lf_t(&tt, t));
    if (lf_all_reduce(tt, j->comm, 0) != LF_EINVAL || !strstr(lf_last_error(), "contiguous")) {
        snprintf(j->err, sizeof j->err, "a transposed tensor was not refused: %s", lf_last_error());
        j->failed = 1;
    }
    lf_tensor_free(tt), lf_tensor_free(t);
}

static void test_all_reduce(int n)
{
    lf_comm *comms[MAXR];
    OK(lf_comm_init_local(comms, n, LF_DEVICE_CUDA));
    CHECK(lf_comm_size(comms[0]) == n && lf_comm_rank(comms[n - 1]) == n - 1, "ranks and size");
    CHECK(!strncmp(lf_comm_library(comms[0]), "nccl 2.", 7), "NCCL underneath: %s", lf_comm_library(comms[0]));
    char info[1024];
    OK(lf_comm_describe(comms[1], info, sizeof info));
    CHECK(strstr(info, "\"rank\": 1") && strstr(info, "\"backend\": \"nccl\"") &&
              strstr(info, "\"nccl_version\": \"2."),
          "distributedInfo: %s", info);
    job jobs[MAXR];
    for (int r = 0; r < n; r++)
        jobs[r] = (job){.rank = r, .n = n, .comm = comms[r], .fn = reduce_job};
    on_ranks(jobs, n);
    for (int r = 0; r < n; r++)
        lf_comm_free(comms[r]);
}

/* A tensor made on cuda:1 handed to an op on a thread that runs on cuda:0. */
static void make_on_one(job *j)
{
    int64_t s[2] = {4, 4};
    JOB_TRY(j, lf_tensor_empty(j->made, LF_DTYPE_F32, 2, s, LF_DEVICE_CUDA));
}

static void test_wrong_gpu(void)
{
    lf_tensor *t = NULL, *y = NULL;
    job j = {.rank = 1, .n = 2, .fn = make_on_one, .made = &t};
    on_ranks(&j, 1); /* one thread, on cuda:1 */
    CHECK(t && lf_tensor_device_index(t) == 1, "made on cuda:1");
    OK(lf_device_select(LF_DEVICE_CUDA, 0));
    FAILS(LF_EDEVICE, "is on cuda:1 but this thread runs on cuda:0", lf_mm(&y, t, t));
    FAILS(LF_EDEVICE, "cuda:99 does not exist", lf_device_select(LF_DEVICE_CUDA, 99));
    lf_tensor_free(t);
}

static lf_status tp_fwd(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)n;
    return lf_nn_tp_mlp_forward(ctx, LF_MLP_EAGER, in[0], out);
}

static void tp_job(job *j)
{
    lf_nn_tp_mlp m;
    lf_tensor *x = NULL, *y = NULL;
    lf_compiled *c = NULL;
    JOB_TRY(j, lf_nn_tp_mlp_shard(&m, j->full, j->rank, j->n, j->comm, LF_DEVICE_CUDA));
    m.chunks = j->chunks;
    JOB_TRY(j, lf_tensor_to_device(&x, j->x, LF_DEVICE_CUDA));
    if (j->compiled) {
        lf_compile_opts co = lf_compile_opts_default();
        co.name = "tp_mlp";
        JOB_TRY(j, lf_compile(&c, tp_fwd, &m, 1, &x, &co));
        if (!lf_compiled_get_stats(c).graph) {
            snprintf(j->err, sizeof j->err, "the compiled TP forward is not one CUDA graph");
            j->failed = 1;
        }
        for (int i = 0; i < 3 && !j->failed; i++) { /* replayed: the same answer each time */
            lf_tensor_free(y);
            y = NULL;
            JOB_TRY(j, lf_compiled_run(c, 1, &x, &y));
        }
    } else {
        JOB_TRY(j, lf_nn_tp_mlp_forward(&m, j->v, x, &y));
    }
    float *f = malloc((size_t)j->out_n * sizeof *f);
    JOB_TRY(j, lf_tensor_to_f32(y, f, j->out_n));
    for (int64_t i = 0; i < j->out_n; i++)
        j->out[i] = f[i];
    free(f);
    lf_compiled_free(c);
    lf_tensor_free(y), lf_tensor_free(x);
    lf_nn_tp_mlp_free(&m);
}

static void test_tp_mlp(int n)
{
    lf_comm *comms[MAXR];
    OK(lf_comm_init_local(comms, n, LF_DEVICE_CUDA));
    lf_rng rng;
    lf_rng_seed(&rng, 11);
    const int64_t D = 256, H = 256 * n; /* each rank's half tile: the gated kernel's 128-wide groups */
    lf_nn_gated_mlp full;
    lf_nn_gated_mlp_opts o = {D, H, LF_DTYPE_BF16, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
    OK(lf_nn_gated_mlp_init(&full, &o, &rng));
    const int64_t tokens[2] = {37, 2 * 1031}; /* odd: no tile divides them */
    for (int ti = 0; ti < 2; ti++) {
        int64_t xs[2] = {tokens[ti], D};
        lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs);
        const int64_t N = tokens[ti] * D;
        struct {
            lf_mlp_variant v;
            int chunks, compiled;
        } runs[] = {{LF_MLP_EAGER, 1, 0}, {LF_MLP_FUSED, 1, 0}, {LF_MLP_GATED, 1, 0},
                    {LF_MLP_EAGER, 3, 0}, {LF_MLP_GATED, 4, 0}, {LF_MLP_EAGER, 1, 1}};
        double *first = NULL;
        for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
            job jobs[MAXR];
            double *outs[MAXR];
            for (int r = 0; r < n; r++) {
                outs[r] = malloc((size_t)N * sizeof(double));
                jobs[r] = (job){.rank = r,
                                .n = n,
                                .comm = comms[r],
                                .fn = tp_job,
                                .full = &full,
                                .x = x,
                                .v = runs[k].v,
                                .chunks = runs[k].chunks,
                                .compiled = runs[k].compiled,
                                .out = outs[r],
                                .out_n = N};
            }
            on_ranks(jobs, n);
            /* every rank holds the full MLP's output */
            float *f = malloc((size_t)N * sizeof *f);
            for (int64_t i = 0; i < N; i++)
                f[i] = (float)outs[0][i];
            lf_tensor *y = NULL;
            OK(lf_tensor_from_f32(&y, LF_DTYPE_F32, 2, xs, f, LF_DEVICE_CPU));
            double e = gated_mlp_err(&full, x, y, 1);
            CHECK(e < tol_for(LF_DTYPE_BF16), "TP over %d GPUs, %lld tokens, %s, chunks %d%s: err %.3g", n,
                  (long long)tokens[ti], lf_mlp_variant_name(runs[k].v), runs[k].chunks,
                  runs[k].compiled ? ", compiled" : "", e);
            int same = 1;
            for (int r = 1; r < n; r++)
                same &= !memcmp(outs[r], outs[0], (size_t)N * sizeof(double));
            CHECK(same, "every rank has the same sum (%s)", lf_mlp_variant_name(runs[k].v));
            /* chunks split the GEMMs by rows, which changes no element's sum: the same bits as one pass
             * (the compiled forward fuses gelu into a GEMM's epilogue, so only its error is checked) */
            if (runs[k].v == LF_MLP_EAGER && runs[k].chunks == 1 && !runs[k].compiled)
                first = outs[0], outs[0] = NULL;
            else if (runs[k].v == LF_MLP_EAGER && !runs[k].compiled && first)
                CHECK(!memcmp(first, outs[0], (size_t)N * sizeof(double)),
                      "the chunked TP forward equals the one-pass one bit for bit");
            lf_tensor_free(y);
            free(f);
            for (int r = 0; r < n; r++)
                free(outs[r]);
        }
        free(first);
        lf_tensor_free(x);
    }
    lf_nn_gated_mlp_free(&full);
    for (int r = 0; r < n; r++)
        lf_comm_free(comms[r]);
}

int main(void)
{
    int n = lf_device_count(LF_DEVICE_CUDA);
    if (n < 2) {
        printf("test_tp: %d GPU%s here; tensor parallel needs 2 (the nvidia-h200-x2 machine)\n", n, n == 1 ? "" : "s");
        return 0;
    }
    if (n > MAXR)
        n = MAXR;
    test_wrong_gpu();
    test_all_reduce(n);
    test_tp_mlp(n);
    return lf_test_finish("test_tp (gpu)");
}
