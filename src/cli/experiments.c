/* The blog's experiments as commands: matmul-add, linear, simple-mlp, kernels-mlp. Each builds its model,
 * runs profiled steps under a torch-like schedule, writes
 * <out>/<experiment>/<shape>_<dtype>_<cold|warm>_<mode>.json and .txt, prints the table and a
 * one-line summary. Layer: cli/. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/experiments.h"
#include "core/core.h"

static const char *const exp_names[EXP_COUNT] = {"matmul-add", "linear", "simple-mlp", "kernels-mlp"};
static const char *const exp_labels[EXP_COUNT] = {"matmul_add", "linear_fwd", "mlp_fwd", "mlp_fwd"};

static int is_mlp(exp_kind k)
{
    return k == EXP_SIMPLE_MLP || k == EXP_KERNELS_MLP;
}

const char *lf_exp_name(exp_kind k)
{
    return exp_names[k];
}

void lf_exp_defaults(exp_cfg *c, exp_kind k)
{
    memset(c, 0, sizeof *c);
    c->kind = k;
    c->size = 64;
    c->batch = k == EXP_LINEAR ? 1024 : 64;
    c->in_dim = 32, c->out_dim = 64;
    c->seq = 128, c->dim = 768, c->hidden = 3072;
    c->dtype = LF_DTYPE_BF16;
    c->device = LF_DEVICE_CPU;
    c->sched = (lf_prof_schedule){.wait = 1, .warmup = 1, .active = 3, .repeat = 1};
    c->out_dir = "traces";
    c->row_limit = 25;
    c->variant = k == EXP_KERNELS_MLP ? LF_MLP_FUSED : LF_MLP_EAGER;
    c->passes = LF_PASSES_DEFAULT;
}

/* The pass flags of --compile: each turns one pass off, except --gated, which turns one on. */
static const struct {
    const char *flag;
    unsigned pass;
    int on;
} pass_flags[] = {
    {"--no-fold-views", LF_PASS_FOLD_VIEWS, 0},       {"--no-bias-epilogue", LF_PASS_BIAS_EPILOGUE, 0},
    {"--no-pointwise-fusion", LF_PASS_POINTWISE_FUSION, 0}, {"--no-act-epilogue", LF_PASS_ACT_EPILOGUE, 0},
    {"--gated", LF_PASS_GATED_GEMM, 1},
};

/* "--in_dim" and "--in-dim" are one flag: compare with '_' read as '-'. */
static int flag_is(const char *arg, const char *name)
{
    for (; *arg && *name; arg++, name++)
        if (*arg != *name && !(*arg == '_' && *name == '-'))
            return 0;
    return !*arg && !*name;
}

static int pass_flag(const char *arg)
{
    for (int i = 0; i < (int)(sizeof pass_flags / sizeof pass_flags[0]); i++)
        if (flag_is(arg, pass_flags[i].flag))
            return i;
    return -1;
}

static void usage(FILE *f, exp_kind k)
{
    static const char *const shapes[EXP_COUNT] = {
        "[--size N] [--batched] [--warmup]",
        "[--batch N] [--in_dim N] [--out_dim N] [--no-bias]",
        "[--batch N] [--seq N] [--dim N] [--hidden N]",
        "[--batch N] [--seq N] [--dim N] [--hidden N] [--variant fused|gated]",
    };
    fprintf(f,
            "usage: linfuse %s %s [--compile [compile flags]]\n"
            "         [--device auto|cpu|cuda] [--dtype bf16|f16|f32] [--out DIR]\n"
            "         [--wait N] [--warmup-steps N] [--active N] [--repeat N] [--row-limit N]\n"
            "Profiles the blog's %s (defaults are the blog's sizes) and writes a trace and a table\n"
            "to DIR/%s/ (DIR defaults to traces).\n",
            exp_names[k], shapes[k], exp_names[k], exp_names[k]);
    if (k != EXP_KERNELS_MLP)
        fprintf(f, "--compile: capture one forward, fuse, replay a plan (on CUDA one graph launch). Compile flags:\n"
                   "  --no-cuda-graph --no-fold-views --no-bias-epilogue --no-pointwise-fusion --no-act-epilogue\n"
                   "  --gated (two GEMMs meeting in act(a)*b become one gated GEMM) --compile-verbose\n");
    if (k == EXP_KERNELS_MLP)
        fprintf(f, "--variant fused: gate, up, one hand-fused gelu_tanh(g)*u kernel, down (four kernels)\n"
                   "--variant gated: one gated GEMM over [Wg; Wu] whose epilogue writes gelu_tanh(g)*u, then down\n"
                   "                 (two kernels; where the device has no gated kernel for the shape, the trace\n"
                   "                 says why and one GEMM plus the fused kernel run instead)\n");
}

int lf_exp_parse(exp_cfg *c, exp_kind k, int argc, char **argv)
{
    lf_exp_defaults(c, k);
    const char *device = "auto";
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t *dst = NULL, max = INT64_C(1) << 40, tmp;
        int *idst = NULL;
        if (flag_is(f, "--help") || !strcmp(f, "-h")) {
            usage(stdout, k);
            return -1;
        } else if (flag_is(f, "--compile")) {
            c->compile = 1;
            continue;
        } else if (flag_is(f, "--no-cuda-graph")) {
            c->no_cuda_graph = c->compile_flag_seen = 1;
            continue;
        } else if (flag_is(f, "--compile-verbose")) {
            c->compile_verbose = c->compile_flag_seen = 1;
            continue;
        } else if (k == EXP_MATMUL_ADD && flag_is(f, "--batched")) {
            c->batched = 1;
            continue;
        } else if (k == EXP_MATMUL_ADD && flag_is(f, "--warmup")) {
            c->warm = 1;
            continue;
        } else if (k == EXP_LINEAR && flag_is(f, "--no-bias")) {
            c->no_bias = 1;
            continue;
        } else if (k == EXP_MATMUL_ADD && flag_is(f, "--size")) {
            dst = &c->size;
        } else if (k != EXP_MATMUL_ADD && flag_is(f, "--batch")) {
            dst = &c->batch;
        } else if (k == EXP_LINEAR && flag_is(f, "--in-dim")) {
            dst = &c->in_dim;
        } else if (k == EXP_LINEAR && flag_is(f, "--out-dim")) {
            dst = &c->out_dim;
        } else if (is_mlp(k) && flag_is(f, "--seq")) {
            dst = &c->seq;
        } else if (is_mlp(k) && flag_is(f, "--dim")) {
            dst = &c->dim;
        } else if (is_mlp(k) && flag_is(f, "--hidden")) {
            dst = &c->hidden;
        } else if (k == EXP_KERNELS_MLP && flag_is(f, "--variant")) {
            if (!v || (strcmp(v, "fused") && strcmp(v, "gated"))) {
                fprintf(stderr, "linfuse %s: --variant must be fused or gated%s%s\n", exp_names[k], v ? ", got " : "",
                        v ? v : "");
                return LF_EXIT_USAGE;
            }
            c->variant = !strcmp(v, "gated") ? LF_MLP_GATED : LF_MLP_FUSED;
            i++;
            continue;
        } else if (flag_is(f, "--wait")) {
            idst = &c->sched.wait;
        } else if (flag_is(f, "--warmup-steps")) {
            idst = &c->sched.warmup;
        } else if (flag_is(f, "--active")) {
            idst = &c->sched.active;
        } else if (flag_is(f, "--repeat")) {
            idst = &c->sched.repeat;
        } else if (pass_flag(f) >= 0) {
            int pf = pass_flag(f);
            c->passes = pass_flags[pf].on ? c->passes | pass_flags[pf].pass : c->passes & ~pass_flags[pf].pass;
            c->compile_flag_seen = 1;
            continue;
        } else if (flag_is(f, "--row-limit")) {
            idst = &c->row_limit;
        } else if (flag_is(f, "--device")) {
            if (!v || (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda"))) {
                fprintf(stderr, "linfuse %s: --device must be auto, cpu or cuda%s%s\n", exp_names[k], v ? ", got " : "",
                        v ? v : "");
                return LF_EXIT_USAGE;
            }
            device = v;
            i++;
            continue;
        } else if (flag_is(f, "--dtype")) {
            if (!v || lf_dtype_parse(v, &c->dtype) != LF_OK) {
                fprintf(stderr, "linfuse %s: --dtype: %s\n", exp_names[k], v ? lf_last_error() : "needs a value");
                return LF_EXIT_USAGE;
            }
            i++;
            continue;
        } else if (flag_is(f, "--out")) {
            if (!v || !*v) {
                fprintf(stderr, "linfuse %s: --out needs a directory\n", exp_names[k]);
                return LF_EXIT_USAGE;
            }
            c->out_dir = v;
            i++;
            continue;
        } else {
            fprintf(stderr, "linfuse %s: unknown flag '%s'\n", exp_names[k], f);
            usage(stderr, k);
            return LF_EXIT_USAGE;
        }
        /* the schedule may hold zeros (wait, warmup); sizes may not */
        if (idst) {
            int zero_ok = idst == &c->sched.wait || idst == &c->sched.warmup;
            if (zero_ok && v && !strcmp(v, "0")) {
                *idst = 0;
            } else {
                if (!lf_cli_parse_pos(f, v, 1000, &tmp))
                    return LF_EXIT_USAGE;
                *idst = (int)tmp;
            }
        } else if (!lf_cli_parse_pos(f, v, max, dst)) {
            return LF_EXIT_USAGE;
        }
        i++;
    }
    if (c->compile && k == EXP_KERNELS_MLP) {
        fprintf(stderr, "linfuse kernels-mlp: no --compile here: kernels-mlp is the hand-fused path (the blog's "
                        "point: no compile); use simple-mlp --compile\n");
        return LF_EXIT_USAGE;
    }
    if (c->compile_flag_seen && !c->compile) {
        fprintf(stderr, "linfuse %s: compile flags (--no-cuda-graph, --gated, --no-...) need --compile\n", exp_names[k]);
        return LF_EXIT_USAGE;
    }
    if (!strcmp(device, "cuda") && !lf_device_available(LF_DEVICE_CUDA)) {
        fprintf(stderr,
                "linfuse %s: --device cuda: no usable CUDA device (this build has no CUDA backend or the "
                "machine has no GPU); use --device cpu\n",
                exp_names[k]);
        return LF_EXIT_USAGE;
    }
    c->device = !strcmp(device, "cuda") || (!strcmp(device, "auto") && lf_device_available(LF_DEVICE_CUDA))
                    ? LF_DEVICE_CUDA
                    : LF_DEVICE_CPU;
    return LF_EXIT_OK;
}

/* mkdir -p, then prove the directory takes a file. */
static int prepare_dir(const char *dir, char *err, int cap)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        snprintf(err, (size_t)cap, "path too long");
        return 0;
    }
    for (char *p = path + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = '\0';
            if (mkdir(path, 0777) != 0 && errno != EEXIST) {
                snprintf(err, (size_t)cap, "cannot create %.*s: %s", cap / 2, path, strerror(errno));
                return 0;
            }
            *p = c;
            if (!c)
                break;
        }
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.linfuse-write-test-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0) {
        snprintf(err, (size_t)cap, "cannot write in %.*s: %s", cap / 2, dir, strerror(errno));
        return 0;
    }
    close(fd);
    unlink(probe);
    return 1;
}

static int put_text(FILE *f, void *ctx)
{
    return fputs(ctx, f) < 0 ? -1 : 0;
}

int lf_cli_write_text(const char *path, const char *text)
{
    return lf_write_file_atomic(path, put_text, (void *)text) == LF_OK;
}

void lf_exp_shape(const exp_cfg *c, char *buf, size_t cap)
{
    switch (c->kind) {
    case EXP_MATMUL_ADD:
        if (c->batched)
            snprintf(buf, cap, "8x%lldx%lld", (long long)c->size, (long long)c->size);
        else
            snprintf(buf, cap, "%lld", (long long)c->size);
        break;
    case EXP_LINEAR:
        snprintf(buf, cap, "%lldx%lldx%lld%s", (long long)c->batch, (long long)c->in_dim, (long long)c->out_dim,
                 c->no_bias ? "_nobias" : "");
        break;
    default:
        snprintf(buf, cap, "%lldx%lldx%lldx%lld", (long long)c->batch, (long long)c->seq, (long long)c->dim,
                 (long long)c->hidden);
        break;
    }
}

/* --- the models --- */

typedef struct model {
    lf_tensor *x, *w, *b;
    lf_nn_linear lin;
    lf_nn_geglu_mlp mlp;
} model;

static void model_free(model *m)
{
    lf_tensor_free(m->x), lf_tensor_free(m->w), lf_tensor_free(m->b);
    lf_nn_linear_free(&m->lin);
    lf_nn_geglu_mlp_free(&m->mlp);
}

static lf_status model_build(const exp_cfg *c, model *m)
{
    memset(m, 0, sizeof *m);
    lf_rng rng;
    lf_rng_seed(&rng, 0);
    lf_status s = LF_OK;
    switch (c->kind) {
    case EXP_MATMUL_ADD: {
        int64_t sq[2] = {c->size, c->size}, b3[3] = {8, c->size, c->size};
        s = lf_tensor_empty(&m->x, c->dtype, c->batched ? 3 : 2, c->batched ? b3 : sq, LF_DEVICE_CPU);
        if (s == LF_OK)
            s = lf_tensor_empty(&m->w, c->dtype, 2, sq, LF_DEVICE_CPU);
        if (s == LF_OK) /* a 2-D bias, as in the blog: matmul(x, w) + b */
            s = lf_tensor_empty(&m->b, c->dtype, 2, sq, LF_DEVICE_CPU);
        if (s == LF_OK)
            s = lf_tensor_fill_uniform(m->w, &rng, -1, 1);
        if (s == LF_OK)
            s = lf_tensor_fill_uniform(m->b, &rng, -1, 1);
        break;
    }
    case EXP_LINEAR: {
        lf_nn_linear_opts o = {c->in_dim, c->out_dim, !c->no_bias, c->dtype, LF_DEVICE_CPU};
        int64_t xs[2] = {c->batch, c->in_dim};
        s = lf_nn_linear_init(&m->lin, &o, &rng);
        if (s == LF_OK)
            s = lf_tensor_empty(&m->x, c->dtype, 2, xs, LF_DEVICE_CPU);
        break;
    }
    default: {
        lf_nn_geglu_mlp_opts o = {c->dim, c->hidden, c->dtype, LF_DEVICE_CPU};
        int64_t xs[3] = {c->batch, c->seq, c->dim};
        s = lf_nn_geglu_mlp_init(&m->mlp, &o, &rng);
        if (s == LF_OK)
            s = lf_tensor_empty(&m->x, c->dtype, 3, xs, LF_DEVICE_CPU);
        break;
    }
    }
    if (s == LF_OK)
        s = lf_tensor_fill_uniform(m->x, &rng, -1, 1);
    if (s == LF_OK && c->device != LF_DEVICE_CPU && is_mlp(c->kind))
        s = lf_nn_geglu_mlp_to_device(&m->mlp, c->device);
    if (s == LF_OK && c->device != LF_DEVICE_CPU) { /* parameters start on the host, as torch's */
        lf_tensor **all[] = {&m->x, &m->w, &m->b, &m->lin.weight, &m->lin.bias};
        for (size_t i = 0; i < sizeof all / sizeof all[0] && s == LF_OK; i++)
            if (*all[i]) {
                lf_tensor *d = NULL;
                s = lf_tensor_to_device(&d, *all[i], c->device);
                if (s == LF_OK) {
                    lf_tensor_free(*all[i]);
                    *all[i] = d;
                }
            }
    }
    if (s != LF_OK)
        model_free(m);
    return s;
}

/* The forward as compile mode captures it: x is the input, the model's tensors are parameters. */
typedef struct fwd_ctx {
    const exp_cfg *c;
    const model *m;
} fwd_ctx;

static lf_status forward_of(void *ctx, int n_in, lf_tensor *const *in, lf_tensor **out)
{
    const fwd_ctx *f = ctx;
    lf_tensor *t = NULL;
    lf_status s;
    (void)n_in;
    switch (f->c->kind) {
    case EXP_MATMUL_ADD:
        s = lf_matmul(&t, in[0], f->m->w);
        if (s == LF_OK)
            s = lf_add(out, t, f->m->b);
        lf_tensor_free(t);
        return s;
    case EXP_LINEAR: return lf_nn_linear_forward(&f->m->lin, in[0], out);
    default: return lf_nn_geglu_mlp_forward_variant(&f->m->mlp, f->c->variant, in[0], out);
    }
}

static lf_status forward(const exp_cfg *c, const model *m, lf_compiled *compiled)
{
    lf_tensor *y = NULL, *t = NULL;
    lf_status s;
    if (compiled) {
        s = lf_compiled_run(compiled, 1, &m->x, &y);
        lf_tensor_free(y);
        return s;
    }
    switch (c->kind) {
    case EXP_MATMUL_ADD:
        s = lf_matmul(&t, m->x, m->w);
        if (s == LF_OK)
            s = lf_add(&y, t, m->b);
        break;
    case EXP_LINEAR:
        s = lf_nn_linear_forward(&m->lin, m->x, &y);
        break;
    default:
        s = lf_nn_geglu_mlp_forward_variant(&m->mlp, c->variant, m->x, &y);
        break;
    }
    lf_tensor_free(t);
    lf_tensor_free(y);
    return s;
}

int lf_exp_run(const exp_cfg *c, exp_result *r, int print)
{
    memset(r, 0, sizeof *r);
    char err[512], shape[96];
    if (!prepare_dir(c->out_dir, err, sizeof err)) {
        fprintf(stderr, "linfuse %s: --out: %s\n", exp_names[c->kind], err);
        return LF_EXIT_USAGE;
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", c->out_dir, exp_names[c->kind]);
    if (!prepare_dir(dir, err, sizeof err)) {
        fprintf(stderr, "linfuse %s: --out: %s\n", exp_names[c->kind], err);
        return LF_EXIT_USAGE;
    }
    lf_exp_shape(c, shape, sizeof shape);
    /* the mode says how the forward ran (DESIGN.md's artifact names): eager, kernels (the
     * hand-fused middle) or gated */
    const char *mode = c->compile                   ? "compile"
                       : c->kind != EXP_KERNELS_MLP ? "eager"
                       : c->variant == LF_MLP_GATED ? "gated"
                                                    : "kernels";
    snprintf(r->json_path, sizeof r->json_path, "%s/%s_%s_%s_%s.json", dir, shape, lf_dtype_name(c->dtype),
             c->warm ? "warm" : "cold", mode);
    snprintf(r->txt_path, sizeof r->txt_path, "%s/%s_%s_%s_%s.txt", dir, shape, lf_dtype_name(c->dtype),
             c->warm ? "warm" : "cold", mode);

    model m;
    lf_status s = model_build(c, &m);
    if (s != LF_OK) {
        fprintf(stderr, "linfuse %s: cannot set up %s: %s\n", exp_names[c->kind], shape, lf_last_error());
        return s == LF_ENOMEM || s == LF_EOVERFLOW || s == LF_ESHAPE ? LF_EXIT_USAGE : LF_EXIT_FAIL;
    }
    lf_compiled *compiled = NULL;
    fwd_ctx fc = {c, &m};
    if (c->compile) { /* the first call's work, once, before the profiled steps */
        lf_compile_opts co = lf_compile_opts_default();
        co.name = exp_labels[c->kind];
        co.passes = c->passes;
        co.no_cuda_graph = c->no_cuda_graph;
        co.verbose = c->compile_verbose;
        s = lf_compile(&compiled, forward_of, &fc, 1, &m.x, &co);
        if (s != LF_OK) {
            fprintf(stderr, "linfuse %s: --compile: %s\n", exp_names[c->kind], lf_last_error());
            model_free(&m);
            return LF_EXIT_FAIL;
        }
        lf_compiled_stats st = lf_compiled_get_stats(compiled);
        if (print)
            printf("compile: %.1f ms, once before the profiled steps; each step replays a plan of %d kernel%s%s%s\n",
                   st.compile_ms, st.kernels, st.kernels == 1 ? "" : "s", st.views ? " and view ops" : "",
                   st.graph ? " as one CUDA graph launch" : "");
        r->compile_ms = st.compile_ms;
    }
    for (int i = 0; c->warm && i < 3 && s == LF_OK; i++) /* the blog's --warmup: run before profiling */
        s = forward(c, &m, compiled);
    lf_profiler *p = NULL;
    lf_prof_opts po = {.use_schedule = 1, .schedule = c->sched, .record_shapes = 1, .with_flops = 1};
    if (s == LF_OK)
        s = lf_prof_start(&p, &po);
    int steps = c->sched.skip_first + (c->sched.wait + c->sched.warmup + c->sched.active) * c->sched.repeat;
    for (int i = 0; i < steps && s == LF_OK; i++) {
        lf_prof_range_push(exp_labels[c->kind]);
        s = forward(c, &m, compiled);
        lf_prof_range_pop();
        if (s == LF_OK)
            s = lf_prof_step(p);
    }
    if (p && s == LF_OK)
        s = lf_prof_stop(p);
    const lf_trace *t = NULL;
    char *table = NULL;
    lf_table_opts to = {LF_SORT_DEVICE_TIME_TOTAL, c->row_limit};
    if (s == LF_OK)
        s = lf_prof_trace(p, &t);
    if (s == LF_OK)
        s = lf_prof_table(p, &to, &table);
    if (s == LF_OK)
        s = lf_trace_summarize(t, &r->sum);
    if (s == LF_OK)
        s = lf_trace_write_json(t, r->json_path);
    int rc = LF_EXIT_OK;
    if (s != LF_OK) {
        fprintf(stderr, "linfuse %s: %s\n", exp_names[c->kind], lf_last_error());
        rc = LF_EXIT_FAIL;
    } else if (!lf_cli_write_text(r->txt_path, table)) {
        unlink(r->json_path); /* both files or neither */
        fprintf(stderr, "linfuse %s: cannot write %s\n", exp_names[c->kind], r->txt_path);
        rc = LF_EXIT_FAIL;
    } else {
        lf_trace_summary_line(&r->sum, r->summary, sizeof r->summary);
        if (print) {
            fputs(table, stdout);
            printf("trace: %s\ntable: %s\n%s\n", r->json_path, r->txt_path, r->summary);
        }
    }
    free(table);
    lf_prof_free(p);
    lf_compiled_free(compiled);
    model_free(&m);
    return rc;
}

int lf_cli_experiment(exp_kind k, int argc, char **argv)
{
    exp_cfg c;
    int rc = lf_exp_parse(&c, k, argc, argv);
    if (rc != LF_EXIT_OK)
        return rc < 0 ? LF_EXIT_OK : rc;
    exp_result r;
    return lf_exp_run(&c, &r, 1);
}
