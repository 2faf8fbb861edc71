/* The blog's experiments as commands: matmul-add, linear, simple-mlp, kernels-mlp. Each is one
 * row of a table (exp_table.c: name, trace label, the flags it takes, shape, model, forward); the
 * parser, the usage text and a run (exp_run.c) read the rows, so a new experiment is a new row.
 * Here: the flags each row takes, and the command line parsed into an exp_cfg.
 * Layer: cli/. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/exp_table.h"
#include "cli/experiments.h"

/* --- the flags --- */

/* The flags and the experiments are tables: a row a line, as written. */
/* clang-format off */
enum opt_id {
    O_SIZE, O_BATCHED, O_WARM, O_BATCH, O_IN_DIM, O_OUT_DIM, O_NO_BIAS, O_SEQ, O_DIM, O_HIDDEN, O_VARIANT,
    O_COMPILE, O_NO_CUDA_GRAPH, O_COMPILE_VERBOSE, O_NO_FOLD_VIEWS, O_NO_BIAS_EPILOGUE, O_NO_POINTWISE_FUSION,
    O_NO_ACT_EPILOGUE, O_GATED, O_FP8, O_PACK_WEIGHTS, O_DEVICE, O_DTYPE, O_OUT, O_WAIT, O_WARMUP_STEPS, O_ACTIVE, O_REPEAT, O_ROW_LIMIT,
    O_THREADS, O_TP, O_CHUNKS, O_WEIGHTS, O_PREFIX, O_ACT, O_NO_GEMM_AUTOTUNE, O_COUNT
};

typedef struct flag_def {
    lf_cli_opt opt;
    unsigned takes; /* the row bits that take it; 0: every experiment */
    const char *usage, *help;
} flag_def;

static const flag_def flag_defs[O_COUNT] = {
    {{"size", 1, O_SIZE, 0}, T_SIZE, "--size N", "matmul of two N x N matrices, plus an N x N bias (64)"},
    {{"batched", 0, O_BATCHED, 0}, T_SIZE, "--batched", "an (8, N, N) input: matmul flattens it"},
    {{"warmup", 0, O_WARM, 0}, T_SIZE, "--warmup", "three forwards before profiling (a warm trace)"},
    {{"batch", 1, O_BATCH, 0}, T_LINEAR | T_MLP, "--batch N", "rows of x (linear 1024, the MLPs 64)"},
    {{"in-dim", 1, O_IN_DIM, 0}, T_LINEAR, "--in-dim N", "input features (32)"},
    {{"out-dim", 1, O_OUT_DIM, 0}, T_LINEAR, "--out-dim N", "output features (64)"},
    {{"no-bias", 0, O_NO_BIAS, 0}, T_LINEAR, "--no-bias", "a Linear without bias"},
    {{"seq", 1, O_SEQ, 0}, T_MLP, "--seq N", "sequence length (128)"},
    {{"dim", 1, O_DIM, 0}, T_MLP, "--dim N", "model dimension (768)"},
    {{"hidden", 1, O_HIDDEN, 0}, T_MLP, "--hidden N", "hidden dimension (3072)"},
    {{"variant", 1, O_VARIANT, 0}, T_VARIANT, "--variant fused|gated|fp8",
     "fused: gate, up, one hand-fused gelu_tanh(g)*u kernel, down (four kernels); gated: one gated GEMM over "
     "[Wg; Wu] whose epilogue writes gelu_tanh(g)*u, then down (two; where the device has no gated kernel for "
     "the shape, the trace says why and a GEMM plus the fused kernel run); fp8: weights quantized once (gate and "
     "up per channel, down in 128 x 128 blocks), x per token, the gated GEMM in FP8 writing h in e4m3 with 1 x 128 "
     "block scales, down in FP8 (three kernels; where the device has no FP8 GEMM, the trace says why and gated "
     "runs)"},
    {{"compile", 0, O_COMPILE, 0}, T_COMPILE, "--compile",
     "capture one forward, fuse, replay a plan (on CUDA one graph launch); the flags below need it"},
    {{"no-cuda-graph", 0, O_NO_CUDA_GRAPH, 0}, T_COMPILE, "--no-cuda-graph", "launch the plan kernel by kernel"},
    {{"compile-verbose", 0, O_COMPILE_VERBOSE, 0}, T_COMPILE, "--compile-verbose",
     "print the plan, each pass and generated kernels' paths"},
    {{"no-fold-views", 0, O_NO_FOLD_VIEWS, 0}, T_COMPILE, "--no-fold-views", "keep view ops in the plan"},
    {{"no-bias-epilogue", 0, O_NO_BIAS_EPILOGUE, 0}, T_COMPILE, "--no-bias-epilogue", "add the bias in a kernel of its own"},
    {{"no-pointwise-fusion", 0, O_NO_POINTWISE_FUSION, 0}, T_COMPILE, "--no-pointwise-fusion",
     "one kernel per pointwise op"},
    {{"no-act-epilogue", 0, O_NO_ACT_EPILOGUE, 0}, T_COMPILE, "--no-act-epilogue", "activations not folded into GEMMs"},
    {{"gated", 0, O_GATED, 0}, T_GATE, "--gated", "two GEMMs meeting in act(a)*b become one gated GEMM"},
    {{"fp8", 0, O_FP8, 0}, T_GATE, "--fp8",
     "--gated, its GEMM in FP8 where the device has one (x per token at run time, [Wg; Wu] per channel at "
     "compile time; down stays bf16); elsewhere the plan says why"},
    {{"pack-weights", 0, O_PACK_WEIGHTS, 0}, T_COMPILE, "--pack-weights",
     "CPU: each GEMM reads its weight packed once, at compile time, not at every run (same results; change no "
     "weight after compiling)"},
    {{"device", 1, O_DEVICE, 0}, 0, "--device auto|cpu|cuda", "where to run (auto: cuda when a GPU is usable)"},
    {{"dtype", 1, O_DTYPE, 0}, 0, "--dtype bf16|f16|f32", "element type (bf16)"},
    {{"out", 1, O_OUT, 0}, 0, "--out DIR", "where traces go (traces)"},
    {{"wait", 1, O_WAIT, 0}, 0, "--wait N", "schedule: steps skipped at the start of a window (1)"},
    {{"warmup-steps", 1, O_WARMUP_STEPS, 0}, 0, "--warmup-steps N", "schedule: steps run traced but discarded (1)"},
    {{"active", 1, O_ACTIVE, 0}, 0, "--active N", "schedule: steps kept in a window's trace (3)"},
    {{"repeat", 1, O_REPEAT, 0}, 0, "--repeat N",
     "schedule: windows to record, 1 to 16 (1); each window's trace and table are written"},
    {{"row-limit", 1, O_ROW_LIMIT, 0}, 0, "--row-limit N", "table rows printed (25)"},
    {{"threads", 1, O_THREADS, 0}, 0, "--threads N",
     "CPU threads (default: OMP_NUM_THREADS when set, else one per core)"},
    {{"tp", 1, O_TP, 0}, T_MLP, "--tp N",
     "tensor parallel over N GPUs (Megatron's split, NCCL): one thread per GPU, or under torchrun one process "
     "per GPU (N = WORLD_SIZE); each rank writes <file>_rank<R>.json"},
    {{"weights", 1, O_WEIGHTS, 0}, T_MLP, "--weights FILE|DIR",
     "a real layer from a Hugging Face checkpoint (safetensors file, index or directory): dim and hidden from it"},
    {{"prefix", 1, O_PREFIX, 0}, T_MLP, "--prefix NAME",
     "with --weights: the layer's names in it, e.g. model.layers.0.mlp (no default)"},
    {{"act", 1, O_ACT, 0}, T_MLP, "--act silu|gelu_tanh|gelu",
     "the activation: SwiGLU's silu, GeGLU's gelu_tanh (default; with --weights the config.json's)"},
    {{"no-gemm-autotune", 0, O_NO_GEMM_AUTOTUNE, 0}, 0, "--no-gemm-autotune",
     "on a GPU, take cuBLASLt's first choice for each GEMM instead of the fastest of its candidates as timed "
     "once and cached on disk (also LINFUSE_GEMM_AUTOTUNE=0)"},
    {{"chunks", 1, O_CHUNKS, 0}, T_MLP, "--chunks N",
     "--tp: token chunks whose all-reduce overlaps the next chunk's compute (default 1: measured faster)"},
};

/* clang-format on */

static int takes(exp_kind k, const flag_def *f)
{
    return !f->takes || (f->takes & lf_exp_defs[k].takes);
}

void lf_exp_defaults(exp_cfg *c, exp_kind k)
{
    memset(c, 0, sizeof *c);
    c->kind = k;
    c->size = 64;
    c->batch = lf_exp_defs[k].batch;
    c->in_dim = 32, c->out_dim = 64;
    c->seq = 128, c->dim = 768, c->hidden = 3072;
    c->dtype = LF_DTYPE_BF16;
    c->device = LF_DEVICE_CPU;
    c->sched = (lf_prof_schedule){.wait = 1, .warmup = 1, .active = 3, .repeat = 1};
    c->out_dir = "traces";
    c->row_limit = 25;
    c->variant = lf_exp_defs[k].takes & T_VARIANT ? LF_MLP_FUSED : LF_MLP_EAGER;
    c->act = LF_ACT_GELU_TANH;
    c->passes = LF_PASSES_DEFAULT;
}

static void usage(FILE *f, exp_kind k)
{
    fprintf(f,
            "usage: linfuse %s [flags]\n%s. The defaults are the blog's sizes; each recorded window's trace\n"
            "and table are written to DIR/%s/.\n",
            lf_exp_defs[k].name, lf_exp_defs[k].what, lf_exp_defs[k].name);
    for (int i = 0; i < O_COUNT; i++)
        if (takes(k, &flag_defs[i])) {
            /* the help wrapped at 100 columns, under its own column */
            const char *h = flag_defs[i].help;
            fprintf(f, "  %-24s ", flag_defs[i].usage);
            while (*h) {
                int n = (int)strlen(h);
                if (n > 73)
                    for (n = 73; n > 0 && h[n] != ' '; n--)
                        ;
                if (n == 0)
                    n = (int)strlen(h);
                fprintf(f, "%.*s\n", n, h);
                h += n;
                while (*h == ' ')
                    h++;
                if (*h)
                    fprintf(f, "%27s", "");
            }
        }
    fprintf(f, "Flags take `--flag value` or `--flag=value`; underscores may replace dashes (--in_dim).\n");
}

/* After an unknown flag (bad, as typed): the experiments that take it, when some do. */
static void other_commands(exp_kind k, const char *bad)
{
    if (!bad || strncmp(bad, "--", 2))
        return;
    const size_t len = strcspn(bad + 2, "=");
    for (int i = 0; i < O_COUNT; i++) {
        const char *name = flag_defs[i].opt.name;
        int same = strlen(name) == len;
        for (size_t c = 0; c < len && same; c++)
            same = bad[2 + c] == name[c] || (bad[2 + c] == '_' && name[c] == '-');
        if (!same)
            continue;
        fprintf(stderr, "linfuse %s: --%s is for", lf_exp_defs[k].name, name);
        for (int e = 0, first = 1; e < EXP_COUNT; e++)
            if (takes((exp_kind)e, &flag_defs[i]))
                fprintf(stderr, "%s %s", first ? "" : ",", lf_exp_defs[e].name), first = 0;
        fprintf(stderr, "\n");
    }
}

/* What parsing has seen beyond c itself, for the checks after the flags. */
typedef struct seen_flags {
    const char *device; /* --device's word */
    int compile_flag;   /* a flag that needs --compile */
    int dims_given, act_given;
} seen_flags;

enum { FLAG_BAD = 0, FLAG_OK = 1, FLAG_NOT_MINE = -1 };

/* The model's flags: sizes, variant, a real layer and its activation. FLAG_OK, FLAG_BAD (said),
 * or FLAG_NOT_MINE. */
static int model_flag(exp_cfg *c, const char *cmd, int id, const char *v, seen_flags *sf)
{
    const int64_t big = INT64_C(1) << 40;
    switch (id) {
    case O_SIZE:
        return lf_cli_int(cmd, "--size", v, 1, big, &c->size);
    case O_BATCHED:
        c->batched = 1;
        return FLAG_OK;
    case O_WARM:
        c->warm = 1;
        return FLAG_OK;
    case O_BATCH:
        return lf_cli_int(cmd, "--batch", v, 1, big, &c->batch);
    case O_IN_DIM:
        return lf_cli_int(cmd, "--in-dim", v, 1, big, &c->in_dim);
    case O_OUT_DIM:
        return lf_cli_int(cmd, "--out-dim", v, 1, big, &c->out_dim);
    case O_NO_BIAS:
        c->no_bias = 1;
        return FLAG_OK;
    case O_SEQ:
        return lf_cli_int(cmd, "--seq", v, 1, big, &c->seq);
    case O_DIM:
        sf->dims_given = 1;
        return lf_cli_int(cmd, "--dim", v, 1, big, &c->dim);
    case O_HIDDEN:
        sf->dims_given = 1;
        return lf_cli_int(cmd, "--hidden", v, 1, big, &c->hidden);
    case O_VARIANT: {
        const int pv = lf_mlp_variant_parse(v);
        if (pv != LF_MLP_FUSED && pv != LF_MLP_GATED && pv != LF_MLP_FP8) {
            fprintf(stderr, "%s: --variant must be fused, gated or fp8, got '%s'\n", cmd, v);
            return FLAG_BAD;
        }
        c->variant = (lf_mlp_variant)pv;
        return FLAG_OK;
    }
    case O_WEIGHTS:
        c->weights = v;
        return FLAG_OK;
    case O_PREFIX:
        c->prefix = v;
        return FLAG_OK;
    case O_ACT:
        sf->act_given = 1;
        return lf_cli_act(cmd, v, &c->act) == LF_EXIT_OK;
    default:
        return FLAG_NOT_MINE;
    }
}

/* --compile and the flags that need it (each pass's off switch, the gated and FP8 passes). */
static int compile_flag(exp_cfg *c, int id, seen_flags *sf)
{
    switch (id) {
    case O_COMPILE:
        c->compile = 1;
        return FLAG_OK;
    case O_NO_CUDA_GRAPH:
        c->no_cuda_graph = 1;
        break;
    case O_COMPILE_VERBOSE:
        c->compile_verbose = 1;
        break;
    case O_NO_FOLD_VIEWS:
        c->passes &= ~(unsigned)LF_PASS_FOLD_VIEWS;
        break;
    case O_NO_BIAS_EPILOGUE:
        c->passes &= ~(unsigned)LF_PASS_BIAS_EPILOGUE;
        break;
    case O_NO_POINTWISE_FUSION:
        c->passes &= ~(unsigned)LF_PASS_POINTWISE_FUSION;
        break;
    case O_NO_ACT_EPILOGUE:
        c->passes &= ~(unsigned)LF_PASS_ACT_EPILOGUE;
        break;
    case O_GATED:
        c->passes |= LF_PASS_GATED_GEMM;
        break;
    case O_FP8:
        c->passes |= LF_PASS_GATED_GEMM | LF_PASS_FP8;
        break;
    case O_PACK_WEIGHTS:
        c->passes |= LF_PASS_PACK_WEIGHTS;
        break;
    default:
        return FLAG_NOT_MINE;
    }
    sf->compile_flag = 1;
    return FLAG_OK;
}

/* Where and how it runs: device, dtype, output, the profiler's schedule, threads, GPUs. */
static int run_flag(exp_cfg *c, const char *cmd, int id, const char *v, seen_flags *sf)
{
    int64_t x = 0;
    int ok;
    switch (id) {
    case O_DEVICE:
        if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda")) {
            fprintf(stderr, "%s: --device must be auto, cpu or cuda, got '%s'\n", cmd, v);
            return FLAG_BAD;
        }
        sf->device = v;
        return FLAG_OK;
    case O_DTYPE:
        if (lf_dtype_parse(v, &c->dtype) != LF_OK) {
            fprintf(stderr, "%s: --dtype: %s\n", cmd, lf_last_error());
            return FLAG_BAD;
        }
        return FLAG_OK;
    case O_OUT:
        if (!*v) {
            fprintf(stderr, "%s: --out needs a directory\n", cmd);
            return FLAG_BAD;
        }
        c->out_dir = v;
        return FLAG_OK;
    case O_WAIT:
        ok = lf_cli_int(cmd, "--wait", v, 0, 1000, &x), c->sched.wait = (int)x;
        return ok;
    case O_WARMUP_STEPS:
        ok = lf_cli_int(cmd, "--warmup-steps", v, 0, 1000, &x), c->sched.warmup = (int)x;
        return ok;
    case O_ACTIVE:
        ok = lf_cli_int(cmd, "--active", v, 1, 1000, &x), c->sched.active = (int)x;
        return ok;
    /* the library's schedule takes repeat 0 as "forever"; a command must end, so it takes 1..16 */
    case O_REPEAT:
        ok = lf_cli_int(cmd, "--repeat", v, 1, EXP_MAX_WINDOWS, &x), c->sched.repeat = (int)x;
        return ok;
    case O_ROW_LIMIT:
        ok = lf_cli_int(cmd, "--row-limit", v, 1, 100000, &x), c->row_limit = (int)x;
        return ok;
    case O_THREADS:
        ok = lf_cli_int(cmd, "--threads", v, 1, 4096, &x), c->threads = (int)x;
        return ok;
    case O_TP:
        ok = lf_cli_int(cmd, "--tp", v, 1, LF_MAX_DEVICE_INDEX, &x), c->tp = (int)x;
        return ok;
    case O_CHUNKS:
        ok = lf_cli_int(cmd, "--chunks", v, 1, 64, &x), c->chunks = (int)x;
        return ok;
    case O_NO_GEMM_AUTOTUNE:
        lf_gemm_autotune_set(0);
        return FLAG_OK;
    default:
        return FLAG_NOT_MINE;
    }
}

/* What the flags say together: a real layer's sizes and activation read from it, flags that need
 * another, and the device chosen (auto: CUDA where it is). LF_EXIT_OK or LF_EXIT_USAGE (said). */
static int check_flags(exp_cfg *c, const char *cmd, const seen_flags *sf)
{
    if (c->weights || c->prefix) { /* a real layer: its sizes and activation come with it */
        if (!c->weights || !c->prefix || sf->dims_given) {
            fprintf(stderr,
                    "%s: --weights and --prefix go together, and the layer's sizes come from it (no --dim, --hidden)\n",
                    cmd);
            return LF_EXIT_USAGE;
        }
        if (lf_cli_mlp_shape(cmd, c->weights, c->prefix, &c->dim, &c->hidden) != LF_EXIT_OK)
            return LF_EXIT_USAGE;
        if (!sf->act_given && lf_hf_config_act(c->weights, &c->act) != LF_OK) {
            fprintf(stderr, "%s: --act: %s; say which (--act silu|gelu_tanh|gelu)\n", cmd, lf_last_error());
            return LF_EXIT_USAGE;
        }
    }
    if (sf->compile_flag && !c->compile) {
        fprintf(stderr,
                "%s: compile flags (--no-cuda-graph, --gated, --fp8, --pack-weights, --no-...) need --compile\n", cmd);
        return LF_EXIT_USAGE;
    }
    /* torchrun's RANK is read only when --tp asks for a split (tp_run.c): set in a shell for another
     * program, it must not turn a one-device run into a distributed one */
    const int split = c->tp > 1 || c->tp < 0;
    if (c->variant == LF_MLP_FP8 && split) {
        fprintf(stderr, "%s: --variant fp8 runs on one device; --tp takes fused or gated\n", cmd);
        return LF_EXIT_USAGE;
    }
    if (c->chunks && c->tp == 0) {
        fprintf(stderr, "%s: --chunks needs --tp\n", cmd);
        return LF_EXIT_USAGE;
    }
    if (split && !strcmp(sf->device, "cpu")) {
        fprintf(stderr, "%s: --tp runs on GPUs (NCCL); the cpu has no collectives\n", cmd);
        return LF_EXIT_USAGE;
    }
    if (split && lf_device_require(LF_DEVICE_CUDA) != LF_OK) {
        fprintf(stderr, "%s: --tp: %s\n", cmd, lf_last_error());
        return LF_EXIT_USAGE;
    }
    if (!strcmp(sf->device, "cuda") && lf_device_require(LF_DEVICE_CUDA) != LF_OK) {
        fprintf(stderr, "%s: --device cuda: %s; use --device cpu\n", cmd, lf_last_error());
        return LF_EXIT_USAGE;
    }
    c->device = !strcmp(sf->device, "cuda") || (!strcmp(sf->device, "auto") && lf_device_available(LF_DEVICE_CUDA))
                    ? LF_DEVICE_CUDA
                    : LF_DEVICE_CPU;
    return LF_EXIT_OK;
}

/* Parse argv (argv[0] is the experiment's name) into c. Returns LF_EXIT_OK, LF_EXIT_USAGE, or
 * -1 when --help was printed. */
static int parse(exp_cfg *c, exp_kind k, int argc, char **argv)
{
    lf_exp_defaults(c, k);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "linfuse %s", lf_exp_defs[k].name);
    lf_cli_opt opts[O_COUNT];
    int n = 0;
    for (int i = 0; i < O_COUNT; i++)
        if (takes(k, &flag_defs[i]))
            opts[n++] = flag_defs[i].opt;
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, n);
    seen_flags sf = {.device = "auto"};
    const char *v;
    int id;
    while ((id = lf_cli_next(&a, &v)) != LF_CLI_END) {
        if (id == LF_CLI_HELP) {
            usage(stdout, k);
            return -1;
        }
        if (id == LF_CLI_BAD) {
            other_commands(k, a.bad);
            return LF_EXIT_USAGE;
        }
        if (id == LF_CLI_WORD) {
            fprintf(stderr, "%s: unexpected argument '%s'\n", cmd, v);
            return LF_EXIT_USAGE;
        }
        int ok = model_flag(c, cmd, id, v, &sf);
        if (ok == FLAG_NOT_MINE)
            ok = compile_flag(c, id, &sf);
        if (ok == FLAG_NOT_MINE)
            ok = run_flag(c, cmd, id, v, &sf);
        if (ok != FLAG_OK)
            return LF_EXIT_USAGE;
    }
    return check_flags(c, cmd, &sf);
}

int lf_cli_experiment(exp_kind k, int argc, char **argv)
{
    exp_cfg c;
    int rc = parse(&c, k, argc, argv);
    if (rc != LF_EXIT_OK)
        return rc < 0 ? LF_EXIT_OK : rc;
    exp_result r;
    return lf_exp_run(&c, &r, 1);
}
