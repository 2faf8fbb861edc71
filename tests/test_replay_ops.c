/* A compiled plan's replay shown as the forward it stands for. On the CPU (its steps run one by
 * one): each kernel inside the ops that made it at capture, as annotation rows of the op's name
 * (lf::linear > lf::matmul > lf::mm over the GEMM), the ops' and the compiled region's rows
 * carrying their kernels' device time, and no op counted as dispatched. A CUDA graph's replay
 * (profiler/replay_ops.c, driven here with the records a launch leaves and kernels as the device
 * source reports them): each kernel, in the order they ran, under its step's op calls (one span
 * per call over its kernels, nested), its External id that span's; a launch that ran other than
 * one kernel a step left as it was. */
#include <stdlib.h>
#include <string.h>

#include "linfuse/compile.h"
#include "linfuse/profiler.h"
#include "profiler/prof_impl.h"
#include "testutil.h"

static lf_status mlp_fwd(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    (void)n;
    return lf_nn_gated_mlp_forward_variant(ctx, LF_MLP_EAGER, in[0], out);
}

static const lf_table_row *row(const lf_table *t, const char *name, int annotation)
{
    for (int64_t i = 0; i < t->n_rows; i++)
        if (!strcmp(t->rows[i].name, name) && !t->rows[i].is_device && t->rows[i].is_annotation == annotation)
            return &t->rows[i];
    return NULL;
}

static double kernels_us(const lf_table *t, const char *prefix)
{
    double us = 0;
    for (int64_t i = 0; i < t->n_rows; i++)
        if (t->rows[i].is_device && !strncmp(t->rows[i].name, prefix, strlen(prefix)))
            us += t->rows[i].device_total_us;
    return us;
}

static void test_cpu_plan(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 5);
    lf_nn_gated_mlp m;
    lf_nn_gated_mlp_opts mo = {64, 128, LF_DTYPE_F32, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
    OK(lf_nn_gated_mlp_init(&m, &mo, &rng));
    int64_t xs[2] = {16, 64};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, 2, xs);
    lf_compiled *c = NULL;
    lf_compile_opts co = lf_compile_opts_default();
    co.name = "mlp";
    OK(lf_compile(&c, mlp_fwd, &m, 1, &x, &co));
    lf_prof_opts po = {0};
    lf_profiler *p = NULL;
    OK(lf_prof_start(&p, &po));
    for (int i = 0; i < 3; i++) {
        lf_tensor *y = NULL;
        OK(lf_compiled_run(c, 1, &x, &y));
        lf_tensor_free(y);
    }
    OK(lf_prof_stop(p));
    const lf_trace *t = NULL;
    OK(lf_prof_trace(p, &t));
    lf_table tab;
    lf_table_opts to = {.row_limit = -1};
    OK(lf_table_build_opts(t, &to, &tab));
    const lf_table_row *lin = row(&tab, "lf::linear", 1), *mm = row(&tab, "lf::mm", 1),
                       *region = row(&tab, "Compiled Region: mlp", 1);
    const double gemm = kernels_us(&tab, "lf_cpu_gemm"), all = kernels_us(&tab, "lf_");
    CHECK(lin && lin->count == 9 && mm && mm->count == 9,
          "the three Linears of each replay as lf::linear, lf::mm: %lld, %lld", lin ? (long long)lin->count : -1,
          mm ? (long long)mm->count : -1);
    CHECK(lin && gemm > 0 && lin->device_total_us > 0.999 * gemm && lin->device_total_us < 1.001 * gemm,
          "lf::linear carries its GEMMs' time: %.3f of %.3f us", lin ? lin->device_total_us : -1, gemm);
    CHECK(region && region->device_total_us > 0.999 * all && region->device_total_us < 1.001 * all,
          "the compiled region carries every kernel's: %.3f of %.3f us", region ? region->device_total_us : -1, all);
    CHECK(!row(&tab, "lf::linear", 0), "no op counted as dispatched");
    lf_table_free(&tab);
    lf_prof_free(p);
    lf_compiled_free(c);
    lf_tensor_free(x);
    lf_nn_gated_mlp_free(&m);
}

static lf_trace_event kernel(int64_t ext, int64_t ts, int64_t dur, const char *name)
{
    return (lf_trace_event){.cat = LF_TC_KERNEL,
                            .name = name,
                            .pid = 0,
                            .tid = 7,
                            .ts_ns = ts,
                            .dur_ns = dur,
                            .ext_id = ext,
                            .correlation = 99,
                            .device = 0,
                            .flow_ts = -1,
                            .flow_pid = -1,
                            .flow_tid = -1};
}

static const lf_trace_event *nth(const lf_trace *t, lf_trace_cat cat, const char *name, int k)
{
    for (int64_t i = 0; i < lf_trace_count(t); i++) {
        const lf_trace_event *e = lf_trace_get(t, i);
        if (e->cat == cat && (!name || !strcmp(e->name, name)) && k-- == 0)
            return e;
    }
    return NULL;
}

static void test_graph_launch(void)
{
    /* a plan of three steps: linear(matmul(mm)) twice, then a fused step under mul */
    lf_replay_step steps[3] = {
        {3, {LF_OP_LINEAR, LF_OP_MATMUL, LF_OP_MM}, {0, 1, 2}},
        {3, {LF_OP_LINEAR, LF_OP_MATMUL, LF_OP_MM}, {5, 6, 7}},
        {1, {LF_OP_MUL}, {9}},
    };
    lf_rec launch = {.kind = REC_STEPS, .ext_id = 40, .u.s = {steps, 3}}, other = launch;
    other.ext_id = 50; /* a second launch whose kernels do not match its steps */
    const lf_rec *launches[2] = {&other, &launch};
    lf_replay_stash *s = lf_prof_replay_stash(launches, 2);
    CHECK(s != NULL, "a stash");
    lf_trace_event k[5] = {kernel(40, 300, 50, "k_fused"), kernel(40, 100, 50, "k_gemm_a"),
                           kernel(40, 200, 50, "k_gemm_b"), kernel(50, 500, 10, "k_x"), kernel(7, 600, 10, "k_other")};
    int taken = 0;
    for (int i = 0; i < 5; i++)
        taken += lf_prof_replay_take(s, &k[i]);
    CHECK(taken == 4, "the launches' kernels kept back: %d", taken);
    lf_trace *t = NULL;
    OK(lf_trace_create(&t));
    OK(lf_prof_replay_finish(s, t));
    const lf_trace_event *a = nth(t, LF_TC_KERNEL, "k_gemm_a", 0), *b = nth(t, LF_TC_KERNEL, "k_gemm_b", 0),
                         *f = nth(t, LF_TC_KERNEL, "k_fused", 0), *x = nth(t, LF_TC_KERNEL, "k_x", 0);
    const lf_trace_event *lin0 = nth(t, LF_TC_GPU_ANNOTATION, "lf::linear", 0),
                         *lin1 = nth(t, LF_TC_GPU_ANNOTATION, "lf::linear", 1),
                         *mm0 = nth(t, LF_TC_GPU_ANNOTATION, "lf::mm", 0),
                         *mul = nth(t, LF_TC_GPU_ANNOTATION, "lf::mul", 0);
    CHECK(a && b && f && lin0 && lin1 && mm0 && mul, "the kernels and their ops' spans");
    if (a && b && f && lin0 && lin1 && mm0 && mul) {
        CHECK(a->ext_id == mm0->ext_id && mm0->ts_ns == 100 && mm0->dur_ns == 50 && lin0->ts_ns == 100 &&
                  lin0->dur_ns == 50 && lin1->ts_ns == 200 && lin0->ext_id != lin1->ext_id,
              "each GEMM under its own linear > matmul > mm");
        CHECK(f->ext_id == mul->ext_id && mul->ts_ns == 300 && mul->dur_ns == 50, "the fused kernel under lf::mul");
        CHECK(b->ext_id != a->ext_id && b->ext_id != 40, "the second GEMM under the second call's mm");
    }
    CHECK(x && x->ext_id == 50, "a launch with fewer kernels than steps kept as it was");
    CHECK(lf_trace_count(t) == 4 + 7, "4 kernels and 7 spans: %lld events", (long long)lf_trace_count(t));
    lf_trace_free(t);
}

int main(void)
{
    test_cpu_plan();
    test_graph_launch();
    return lf_test_finish("test_replay_ops");
}
