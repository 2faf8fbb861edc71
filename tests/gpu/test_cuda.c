/* The CUDA backend's GPU-only parts, what the case table (test_cases cuda: every op, layout,
 * dtype, epilogue and gated schedule against float64) does not hold: the cuBLASLt plan cache's
 * key, the caching allocator and device errors, profiling on the GPU (kernels, memory), compiled
 * plans as CUDA graphs with the NVRTC kernel cache, and (test_cuda_mlp.c, test_cuda_fp8.c,
 * test_cuda_fp8_layer.c) the MLP modules and FP8's refusals. Run on a GPU machine: `make test-gpu`. */
#include <stdlib.h>
#include <string.h>

#include "../testutil.h"
#include "backend/backend_impl.h"
#include "cuda_test.h"
#include "linfuse/compile.h"
#include "linfuse/nn.h"
#include "linfuse/profiler.h"

lf_tensor *to_gpu(const lf_tensor *t)
{
    lf_tensor *g = NULL;
    if (lf_tensor_to_device(&g, t, LF_DEVICE_CUDA) != LF_OK) {
        fprintf(stderr, "to_gpu: %s\n", lf_last_error());
        abort();
    }
    return g;
}

static void test_allocator_and_errors(void)
{
    int64_t s[2] = {1000, 1000};
    lf_tensor *a = NULL, *b = NULL;
    OK(lf_tensor_empty(&a, LF_DTYPE_F32, 2, s, LF_DEVICE_CUDA));
    void *pa = lf_tensor_data(a);
    lf_tensor_free(a);
    OK(lf_tensor_empty(&b, LF_DTYPE_F32, 2, s, LF_DEVICE_CUDA));
    CHECK(lf_tensor_data(b) == pa, "a freed block of the same size is reused");
    lf_tensor_free(b);
    /* a GPU tensor with a CPU tensor is a device error naming both */
    lf_rng rng;
    lf_rng_seed(&rng, 1);
    int64_t q[2] = {4, 4};
    lf_tensor *c = rand_tensor(&rng, LF_DTYPE_F32, 2, q), *gc = to_gpu(c), *y = NULL;
    FAILS(LF_EDEVICE, "'mat1' is on cuda but 'mat2' is on cpu", lf_mm(&y, gc, c));
    lf_tensor_free(c), lf_tensor_free(gc);
}

/* Profiling on the GPU: one kernel per linear step, named for its bias epilogue, timed on the
 * device (inside its step's time span, after its launch), on a CUDA lane. */
static void test_profiled_linear(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 9);
    lf_nn_linear lin;
    lf_nn_linear_opts o = {32, 64, 1, LF_DTYPE_BF16, LF_DEVICE_CPU};
    OK(lf_nn_linear_init(&lin, &o, &rng));
    lf_tensor *w = to_gpu(lin.weight), *b = to_gpu(lin.bias);
    lf_tensor_free(lin.weight), lf_tensor_free(lin.bias);
    lin.weight = w, lin.bias = b;
    int64_t xs[2] = {1024, 32};
    lf_tensor *xc = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs), *x = to_gpu(xc);
    lf_profiler *p = NULL;
    lf_prof_opts po = {.use_schedule = 1, .schedule = {1, 1, 3, 1, 0}, .record_shapes = 1};
    OK(lf_prof_start(&p, &po));
    for (int i = 0; i < 5; i++) {
        lf_tensor *y = NULL;
        OK(lf_nn_linear_forward(&lin, x, &y));
        lf_tensor_free(y);
        OK(lf_prof_step(p));
    }
    OK(lf_prof_stop(p));
    const lf_trace *t = NULL;
    OK(lf_prof_trace(p, &t));
    int kernels = 0, named = 0, placed = 0;
    for (int64_t i = 0; i < lf_trace_count(t); i++) {
        const lf_trace_event *e = lf_trace_get(t, i);
        if (e->cat != LF_TC_KERNEL)
            continue;
        kernels++;
        named += strstr(e->name, "bias") != NULL; /* cuBLAS's name (CUPTI) or linfuse's (event timing) */
        placed += e->dur_ns > 0 && e->dur_ns < 1000000 && e->flow_ts >= 0 && e->ts_ns >= e->flow_ts && e->pid == 0;
    }
    CHECK(kernels == 3 && named == 3 && placed == 3,
          "3 steps: %d kernels, %d named for the bias, %d timed on the device", kernels, named, placed);
    CHECK(!strcmp(lf_trace_meta_get(t)->device_label, "CUDA"), "device columns say CUDA");
    int launches = 0, linked = 0;
    for (int64_t i = 0; i < lf_trace_count(t); i++) {
        const lf_trace_event *e = lf_trace_get(t, i);
        launches += (e->cat == LF_TC_RUNTIME || e->cat == LF_TC_DRIVER) && strstr(e->name, "Launch");
        if (e->cat == LF_TC_KERNEL)
            for (int64_t j = 0; j < lf_trace_count(t); j++)
                linked += lf_trace_get(t, j)->cat == LF_TC_CPU_OP && !strcmp(lf_trace_get(t, j)->name, "lf::addmm") &&
                          lf_trace_get(t, j)->ext_id == e->ext_id;
    }
    printf("profiled linear on the GPU: %d kernels (e.g. %s), %d launch calls, %d kernels linked to lf::addmm\n",
           kernels, kernels ? "see trace" : "-", launches, linked);
    CHECK(linked == 3, "each kernel carries its lf::addmm's External id (%d of 3)", linked);
    lf_trace_summary s;
    OK(lf_trace_summarize(t, &s));
    CHECK(s.kernels_per_step == 1, "one kernel per step, got %g", s.kernels_per_step);
    lf_prof_free(p);
    lf_tensor_free(x), lf_tensor_free(xc);
    lf_nn_linear_free(&lin);
}

/* profile_memory on the GPU: [memory] events say CUDA, and Total Reserved is the caching
 * allocator's holding: a free keeps the block (allocated falls, reserved stays) and the next
 * allocation of that size reuses it (reserved still unchanged). */
static void test_profiled_memory(void)
{
    lf_profiler *p = NULL;
    lf_prof_opts po = {.profile_memory = 1};
    OK(lf_prof_start(&p, &po));
    int64_t s[2] = {512, 1000}; /* 2,048,000 bytes of f32: a size no earlier test cached */
    lf_tensor *a = NULL, *b = NULL;
    OK(lf_tensor_empty(&a, LF_DTYPE_F32, 2, s, LF_DEVICE_CUDA));
    lf_tensor_free(a);
    OK(lf_tensor_empty(&b, LF_DTYPE_F32, 2, s, LF_DEVICE_CUDA));
    lf_tensor_free(b);
    OK(lf_prof_stop(p));
    const lf_trace *t = NULL;
    OK(lf_prof_trace(p, &t));
    const lf_trace_event *ev[4];
    int n = 0;
    for (int64_t i = 0; i < lf_trace_count(t) && n < 4; i++) {
        const lf_trace_event *e = lf_trace_get(t, i);
        if (e->cat == LF_TC_MEMORY && e->mem_device_type == 1 && llabs(e->mem_bytes) == 2048000)
            ev[n++] = e;
    }
    CHECK(n == 4, "4 CUDA [memory] events, got %d", n);
    if (n == 4) {
        CHECK(ev[0]->mem_bytes > 0 && ev[1]->mem_bytes < 0 && ev[2]->mem_bytes > 0 && ev[3]->mem_bytes < 0,
              "alloc, free, alloc, free");
        for (int i = 0; i < 4; i++)
            CHECK(ev[i]->mem_total_reserved >= ev[i]->mem_total_allocated, "event %d: reserved %lld >= allocated %lld",
                  i, (long long)ev[i]->mem_total_reserved, (long long)ev[i]->mem_total_allocated);
        CHECK(ev[1]->mem_total_allocated == ev[0]->mem_total_allocated - 2048000 &&
                  ev[1]->mem_total_reserved == ev[0]->mem_total_reserved,
              "a free keeps the block: allocated %lld -> %lld, reserved %lld -> %lld",
              (long long)ev[0]->mem_total_allocated, (long long)ev[1]->mem_total_allocated,
              (long long)ev[0]->mem_total_reserved, (long long)ev[1]->mem_total_reserved);
        CHECK(ev[2]->mem_total_reserved == ev[0]->mem_total_reserved, "the next allocation reuses it: reserved %lld",
              (long long)ev[2]->mem_total_reserved);
        printf("profile_memory on the GPU: reserved %lld B, allocated %lld B at the first allocation\n",
               (long long)ev[0]->mem_total_reserved, (long long)ev[0]->mem_total_allocated);
    }
    lf_prof_free(p);
}

/* --- compile mode on the GPU --- */

typedef struct cmodel {
    lf_nn_gated_mlp mlp;
    lf_nn_linear lin;
    lf_tensor *w, *b;
    int which; /* 0 mlp, 1 linear, 2 matmul-add */
} cmodel;

static lf_status cfwd(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)n;
    cmodel *m = ctx;
    if (m->which == 1)
        return lf_nn_linear_forward(&m->lin, in[0], out);
    if (m->which == 2) {
        lf_tensor *t = NULL;
        lf_status s = lf_matmul(&t, in[0], m->w);
        if (s == LF_OK)
            s = lf_add(out, t, m->b);
        lf_tensor_free(t);
        return s;
    }
    return lf_nn_gated_mlp_forward(&m->mlp, in[0], out);
}

static int count_files(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s 2>/dev/null | grep -c cubin", dir);
    FILE *p = popen(cmd, "r");
    int n = 0;
    if (p) {
        if (fscanf(p, "%d", &n) != 1)
            n = 0;
        pclose(p);
    }
    return n;
}

/* The compiled MLP on the GPU: 4 kernels (3 GEMMs + a generated, NVRTC-built gelu*mul), 2 with
 * the gated pass, as one CUDA graph or kernel by kernel, against float64 on sampled tokens; the
 * generated kernel cached on disk and found again; matmul-add one GEMM; linear one kernel. */
static void test_compile_gpu(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 61);
    char cache[] = "/tmp/linfuse-test-cache-XXXXXX";
    CHECK(mkdtemp(cache) != NULL, "a temporary cache directory");
    static const int64_t shapes[][4] = {{2, 33, 256, 384}, {64, 128, 768, 3072}};
    for (size_t si = 0; si < 2; si++) {
        const int64_t B = shapes[si][0], S = shapes[si][1], D = shapes[si][2], H = shapes[si][3];
        cmodel cpu = {0}, gpu = {0};
        lf_nn_gated_mlp_opts o = {D, H, LF_DTYPE_BF16, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
        lf_rng r2 = rng;
        OK(lf_nn_gated_mlp_init(&cpu.mlp, &o, &rng));
        OK(lf_nn_gated_mlp_init(&gpu.mlp, &o, &r2));
        OK(lf_nn_gated_mlp_to_device(&gpu.mlp, LF_DEVICE_CUDA));
        int64_t xs[3] = {B, S, D};
        lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 3, xs), *gx = to_gpu(x);
        for (int variant = 0; variant < 3; variant++) { /* graph, no graph, gated */
            lf_compile_opts co = lf_compile_opts_default();
            co.cache_dir = cache;
            co.no_cuda_graph = variant == 1;
            co.passes = variant == 2 ? LF_PASSES_ALL : LF_PASSES_DEFAULT;
            lf_compiled *c = NULL;
            lf_status s = lf_compile(&c, cfwd, &gpu, 1, &gx, &co);
            CHECK(s == LF_OK, "compile mlp variant %d: %s", variant, s == LF_OK ? "" : lf_last_error());
            if (s != LF_OK)
                continue;
            lf_compiled_stats st = lf_compiled_get_stats(c);
            CHECK(st.kernels == (variant == 2 ? 2 : 4) && st.graph == (variant != 1),
                  "mlp variant %d: %d kernels, graph %d", variant, st.kernels, st.graph);
            for (int run = 0; run < 3; run++) { /* the graph is recorded on the first run, replayed after */
                lf_tensor *y = NULL;
                OK(lf_compiled_run(c, 1, &gx, &y));
                if (y && run == 2) {
                    double e = gated_mlp_err(&cpu.mlp, x, y, B * S > 1000 ? 97 : 1);
                    CHECK(e < tol_for(LF_DTYPE_BF16),
                          "compiled mlp %lldx%lldx%lldx%lld variant %d vs float64: err %.3g", (long long)B,
                          (long long)S, (long long)D, (long long)H, variant, e);
                }
                lf_tensor_free(y);
            }
            lf_compiled_free(c);
        }
        lf_tensor_free(x), lf_tensor_free(gx);
        lf_nn_gated_mlp_free(&cpu.mlp), lf_nn_gated_mlp_free(&gpu.mlp);
    }
    int files = count_files(cache);
    CHECK(files == 2, "one cached cubin per distinct generated kernel (2 shapes), found %d", files);
    /* compiling again finds them: no new files */
    {
        cmodel gpu = {0};
        lf_nn_gated_mlp_opts o = {256, 384, LF_DTYPE_BF16, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
        OK(lf_nn_gated_mlp_init(&gpu.mlp, &o, &rng));
        OK(lf_nn_gated_mlp_to_device(&gpu.mlp, LF_DEVICE_CUDA));
        int64_t xs[3] = {2, 33, 256};
        lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 3, xs), *gx = to_gpu(x);
        lf_compile_opts co = lf_compile_opts_default();
        co.cache_dir = cache;
        lf_compiled *c = NULL;
        OK(lf_compile(&c, cfwd, &gpu, 1, &gx, &co));
        CHECK(count_files(cache) == files, "the second compile loads the cached kernel");
        lf_compiled_free(c);
        lf_tensor_free(x), lf_tensor_free(gx);
        lf_nn_gated_mlp_free(&gpu.mlp);
    }
    /* linear and matmul-add: one kernel each */
    for (int which = 1; which <= 2; which++) {
        cmodel m = {.which = which};
        int64_t xs[2] = {1024, which == 1 ? 32 : 1024}, sq[2] = {1024, 1024};
        lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs), *gx = to_gpu(x), *ref = NULL, *y = NULL;
        if (which == 1) {
            lf_nn_linear_opts lo = {32, 64, 1, LF_DTYPE_BF16, LF_DEVICE_CPU};
            OK(lf_nn_linear_init(&m.lin, &lo, &rng));
            lf_tensor *w = to_gpu(m.lin.weight), *b = to_gpu(m.lin.bias);
            lf_tensor_free(m.lin.weight), lf_tensor_free(m.lin.bias);
            m.lin.weight = w, m.lin.bias = b;
        } else {
            lf_tensor *w = rand_tensor(&rng, LF_DTYPE_BF16, 2, sq), *b = rand_tensor(&rng, LF_DTYPE_BF16, 2, sq);
            m.w = to_gpu(w), m.b = to_gpu(b);
            lf_tensor_free(w), lf_tensor_free(b);
        }
        lf_compiled *c = NULL;
        OK(lf_compile(&c, cfwd, &m, 1, &gx, NULL));
        if (c) {
            CHECK(lf_compiled_get_stats(c).kernels == 1, "compiled %s: one kernel, got %d",
                  which == 1 ? "linear" : "matmul-add", lf_compiled_get_stats(c).kernels);
            OK(lf_compiled_run(c, 1, &gx, &y));
            if (y) { /* against float64: x W^T + b (linear) or x w + b with a 2-D b (matmul-add) */
                const int64_t M = xs[0], K = xs[1], N = which == 1 ? 64 : 1024;
                double *X = to_f64(x), *W = to_f64(which == 1 ? m.lin.weight : m.w),
                       *Bv = to_f64(which == 1 ? m.lin.bias : m.b);
                double *Y = to_f64(y), *R = malloc((size_t)(M * N) * sizeof *R),
                       *mag = malloc((size_t)(M * N) * sizeof *mag);
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double sum = 0, mm = 0;
                        for (int64_t k = 0; k < K; k++) {
                            double t = X[i * K + k] * (which == 1 ? W[j * K + k] : W[k * N + j]);
                            sum += t, mm += fabs(t);
                        }
                        double bv = which == 1 ? Bv[j] : Bv[i * N + j];
                        R[i * N + j] = sum + bv, mag[i * N + j] = mm + fabs(bv);
                    }
                double e = worst_err(Y, R, mag, M * N, LF_DTYPE_BF16, NULL);
                CHECK(e < 1e-2, "compiled %s vs float64: err %.3g", which == 1 ? "linear" : "matmul-add", e);
                free(X), free(W), free(Bv), free(Y), free(R), free(mag);
            }
        }
        lf_tensor_free(y), lf_tensor_free(ref);
        lf_compiled_free(c);
        lf_tensor_free(x), lf_tensor_free(gx), lf_tensor_free(m.w), lf_tensor_free(m.b);
        lf_nn_linear_free(&m.lin);
    }
    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf %s", cache);
    CHECK(system(rm) == 0, "cache removed");
}

/* Two GEMMs that differ only in N and in the alignment of their C input must not share a
 * cuBLASLt plan. The cache once packed its key as m << 32 ^ n ^ (align_c | align_d << 9) << 44:
 * N = 8192 with C aligned to 4 bytes and N = 16384 with C aligned to 2 gave the same bits (2^45
 * ^ 2^46 both ways), so the second GEMM ran with the first's plan and left half of D unwritten.
 * Both use the same padded row pitch (16400), so every other part of the key is equal too. */
static void test_plan_cache_key(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 11);
    const int64_t M = 16, K = 64, LD = 16400;
    for (int round = 0; round < 2; round++) {
        const int64_t N = round == 0 ? 8192 : 16384, c_off = round == 0 ? 2 : 1; /* C aligned to 4, then to 2 bytes */
        int64_t as[2] = {M, K}, bs[2] = {K, LD}, cs[2] = {M + 1, LD};
        lf_tensor *a = rand_tensor(&rng, LF_DTYPE_BF16, 2, as), *b = rand_tensor(&rng, LF_DTYPE_BF16, 2, bs);
        lf_tensor *c = rand_tensor(&rng, LF_DTYPE_BF16, 2, cs), *d = NULL;
        OK(lf_tensor_empty(&d, LF_DTYPE_BF16, 2, cs, LF_DEVICE_CPU));
        uint16_t *dh = lf_tensor_data(d);
        for (int64_t i = 0; i < (M + 1) * LD; i++)
            dh[i] = 0x7fc0; /* bf16 NaN: every element the GEMM must write starts poisoned */
        lf_tensor *ga = to_gpu(a), *gb = to_gpu(b), *gc = to_gpu(c), *gd = to_gpu(d);
        lf_gemm g = {.ep = lf_epilogue_default()};
        g.ep.beta = 1.0f;
        g.a = (lf_matrix){lf_tensor_data(ga), LF_DTYPE_BF16, M, K, K, 1};
        g.b = (lf_matrix){lf_tensor_data(gb), LF_DTYPE_BF16, K, N, LD, 1};
        g.c = (lf_matrix){(uint16_t *)lf_tensor_data(gc) + c_off, LF_DTYPE_BF16, M, N, LD, 1};
        g.d = (lf_matrix){lf_tensor_data(gd), LF_DTYPE_BF16, M, N, LD, 1};
        lf_status s = lf_backend_gemm(LF_DEVICE_CUDA, &g, NULL);
        CHECK(s == LF_OK, "plan key N=%lld: %s", (long long)N, lf_last_error());
        OK(lf_device_synchronize(LF_DEVICE_CUDA));
        lf_tensor *back = NULL;
        OK(lf_tensor_to_device(&back, gd, LF_DEVICE_CPU));
        /* the same GEMM on the host copies, in float64 */
        lf_gemm h = g;
        h.a.data = lf_tensor_data(a), h.b.data = lf_tensor_data(b);
        h.c.data = (uint16_t *)lf_tensor_data(c) + c_off, h.d.data = lf_tensor_data(d);
        OK(lf_gemm_reference(&h));
        int64_t bad = 0, first = -1;
        const uint16_t *got = lf_tensor_data(back), *ref = lf_tensor_data(d);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                float x = lf_f32_from_bf16(got[i * LD + j]), y = lf_f32_from_bf16(ref[i * LD + j]);
                if (!(fabsf(x - y) <= 2e-2f * (fabsf(y) + 1.0f)) && bad++ == 0)
                    first = i * N + j;
            }
        CHECK(bad == 0, "plan key: N=%lld with C aligned to %lld bytes: %lld of %lld results wrong (first at %lld)",
              (long long)N, (long long)(2 * c_off), (long long)bad, (long long)(M * N), (long long)first);
        lf_tensor *list[] = {a, b, c, d, ga, gb, gc, gd, back};
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
            lf_tensor_free(list[i]);
    }
}

int main(void)
{
    if (!lf_device_available(LF_DEVICE_CUDA)) {
        lf_device_synchronize(LF_DEVICE_CUDA);
        fprintf(stderr, "test_cuda: %s: this test runs on a GPU machine\n", lf_last_error());
        return 1;
    }
    test_plan_cache_key();
    test_allocator_and_errors();
    test_profiled_linear();
    test_profiled_memory();
    test_mlp_variants_gpu();
    test_mlp_decode_gpu();
    test_mlp_decode_race_gpu();
    test_scaled_refusals_gpu();
    test_fp8_mlp_gpu();
    test_fp8_layer_gpu();
    test_compile_gpu();
    return lf_test_finish("test_cuda");
}
