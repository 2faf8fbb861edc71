/* `linfuse mlp`: one MLP layer of a Hugging Face checkpoint run on an input file: tensor x
 * ([tokens, dim] or [batch, seq, dim]) from --input, tensor y of the same shape to --output, in
 * any form linfuse has (eager, fused, gated, compiled) on any device. A run that fails writes
 * nothing. Exit status: 0 done, 1 the forward failed, 2 bad flags or unreadable files.
 * Layer: cli/. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "core/core.h"
#include "linfuse/compile.h"
#include "linfuse/safetensors.h"

int lf_cli_act(const char *cmd, const char *v, lf_act *act)
{
    if (!strcmp(v, "silu") || !strcmp(v, "swish"))
        *act = LF_ACT_SILU;
    else if (!strcmp(v, "gelu_tanh") || !strcmp(v, "gelu_pytorch_tanh"))
        *act = LF_ACT_GELU_TANH;
    else if (!strcmp(v, "gelu") || !strcmp(v, "gelu_erf"))
        *act = LF_ACT_GELU_ERF;
    else {
        fprintf(stderr, "%s: --act must be silu, gelu_tanh or gelu, got '%s'\n", cmd, v);
        return LF_EXIT_USAGE;
    }
    return LF_EXIT_OK;
}

int lf_cli_mlp_shape(const char *cmd, const char *weights, const char *prefix, int64_t *dim, int64_t *hidden)
{
    lf_safetensors *st = NULL;
    char name[512];
    int64_t shape[8];
    snprintf(name, sizeof name, "%s.gate_proj.weight", prefix);
    lf_status s = lf_st_open(&st, weights);
    const int ndim = s == LF_OK ? lf_st_shape(st, name, shape) : 0; /* the header alone: FP8 or not */
    if (s == LF_OK && ndim < 0)
        s = lf_fail(LF_EINVAL, "%s: the checkpoint has no \"%.300s\"", weights, name);
    else if (s == LF_OK && ndim != 2)
        s = lf_fail(LF_ESHAPE, "%s: %s has %d dims, expected (hidden, dim)", weights, name, ndim);
    if (s == LF_OK)
        *hidden = shape[0], *dim = shape[1];
    else
        fprintf(stderr, "%s: --weights: %s\n", cmd, lf_last_error());
    lf_st_close(st);
    return s == LF_OK ? LF_EXIT_OK : LF_EXIT_USAGE;
}

typedef struct mlp_run {
    const lf_nn_gated_mlp *m;
    lf_mlp_variant v;
} mlp_run;

static lf_status fwd(void *ctx, int n, lf_tensor *const *in, lf_tensor **out)
{
    const mlp_run *r = ctx;
    (void)n;
    return lf_nn_gated_mlp_forward_variant(r->m, r->v, in[0], out);
}

static void usage(FILE *f)
{
    fputs("usage: linfuse mlp --weights FILE|DIR --prefix NAME --input X.safetensors --output Y.safetensors\n"
          "                   [--act silu|gelu_tanh|gelu] [--variant eager|fused|gated|fp8] [--compile]\n"
          "                   [--device auto|cpu|cuda] [--dtype bf16|f16|f32]\n"
          "Runs the MLP <NAME>.{gate,up,down}_proj of a Hugging Face checkpoint (a .safetensors file, its\n"
          "index, or their directory) on tensor x of --input ([tokens, dim] or [batch, seq, dim]) and writes\n"
          "tensor y, the same shape, to --output. --act defaults to the config.json beside the weights;\n"
          "--dtype to the weights' own; --variant to eager. Nothing is written when the run fails.\n",
          f);
}

int lf_cli_mlp(int argc, char **argv)
{
    const char *cmd = "linfuse mlp", *weights = NULL, *prefix = NULL, *input = NULL, *output = NULL, *v;
    const char *device = "auto";
    lf_act act = LF_ACT_NONE;
    lf_mlp_variant variant = LF_MLP_EAGER;
    lf_dtype dtype = LF_DTYPE_COUNT;
    int compile = 0;
    enum { WEIGHTS, PREFIX, INPUT, OUTPUT, ACT, VARIANT, COMPILE, DEVICE, DTYPE };
    const lf_cli_opt opts[] = {{"weights", 1, WEIGHTS, 0}, {"prefix", 1, PREFIX, 0},   {"input", 1, INPUT, 0},
                               {"output", 1, OUTPUT, 0},   {"act", 1, ACT, 0},         {"variant", 1, VARIANT, 0},
                               {"compile", 0, COMPILE, 0}, {"device", 1, DEVICE, 0},   {"dtype", 1, DTYPE, 0}};
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
    for (int id; (id = lf_cli_next(&a, &v)) != LF_CLI_END;) {
        switch (id) {
        case WEIGHTS: weights = v; break;
        case PREFIX: prefix = v; break;
        case INPUT: input = v; break;
        case OUTPUT: output = v; break;
        case ACT:
            if (lf_cli_act(cmd, v, &act) != LF_EXIT_OK)
                return LF_EXIT_USAGE;
            break;
        case VARIANT:
            if (lf_mlp_variant_parse(v) < 0) {
                fprintf(stderr, "%s: --variant must be eager, fused, gated or fp8, got '%s'\n", cmd, v);
                return LF_EXIT_USAGE;
            }
            variant = (lf_mlp_variant)lf_mlp_variant_parse(v);
            break;
        case COMPILE: compile = 1; break;
        case DEVICE:
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda")) {
                fprintf(stderr, "%s: --device must be auto, cpu or cuda, got '%s'\n", cmd, v);
                return LF_EXIT_USAGE;
            }
            device = v;
            break;
        case DTYPE:
            if (lf_dtype_parse(v, &dtype) != LF_OK) {
                fprintf(stderr, "%s: --dtype: %s\n", cmd, lf_last_error());
                return LF_EXIT_USAGE;
            }
            break;
        case LF_CLI_HELP: usage(stdout); return LF_EXIT_OK;
        case LF_CLI_WORD: fprintf(stderr, "%s: unexpected argument '%s'\n", cmd, v); return LF_EXIT_USAGE;
        default: usage(stderr); return LF_EXIT_USAGE;
        }
    }
    if (!weights || !prefix || !input || !output) {
        fprintf(stderr, "%s: --weights, --prefix, --input and --output are all needed (linfuse mlp --help)\n", cmd);
        return LF_EXIT_USAGE;
    }
    if (compile && variant == LF_MLP_FUSED) {
        fprintf(stderr, "%s: --compile fuses the eager forward itself; use it with --variant eager, gated or fp8\n",
                cmd);
        return LF_EXIT_USAGE;
    }
    if (!strcmp(device, "cuda") && lf_device_require(LF_DEVICE_CUDA) != LF_OK) {
        fprintf(stderr, "%s: --device cuda: %s\n", cmd, lf_last_error());
        return LF_EXIT_USAGE;
    }
    const lf_device dev = !strcmp(device, "cuda") || (!strcmp(device, "auto") && lf_device_available(LF_DEVICE_CUDA))
                              ? LF_DEVICE_CUDA
                              : LF_DEVICE_CPU;
    if (act == LF_ACT_NONE && lf_hf_config_act(weights, &act) != LF_OK) {
        fprintf(stderr, "%s: --act: %s; say which (--act silu|gelu_tanh|gelu)\n", cmd, lf_last_error());
        return LF_EXIT_USAGE;
    }
    /* reading: any failure here is the files' (exit 2) */
    lf_safetensors *wst = NULL, *ist = NULL;
    lf_nn_gated_mlp m = {0};
    lf_tensor *xf = NULL, *x = NULL, *y = NULL;
    char stored[16] = ""; /* the checkpoint's own dtype, when the weights were dequantized from it */
    lf_status s = lf_st_open(&wst, weights);
    if (s == LF_OK)
        s = lf_nn_gated_mlp_load(&m, wst, prefix, act, dtype);
    if (s == LF_OK) {
        char gate[600];
        snprintf(gate, sizeof gate, "%s.gate_proj.weight", prefix);
        const char *fdt = lf_st_dtype(wst, gate);
        if (fdt && !strncmp(fdt, "F8_", 3))
            snprintf(stored, sizeof stored, " from %s", fdt);
    }
    lf_st_close(wst);
    if (s == LF_OK)
        s = lf_st_open(&ist, input);
    if (s == LF_OK)
        s = lf_st_get_as(ist, "x", m.gate_up->dtype, &xf); /* x in the module's dtype */
    lf_st_close(ist);
    if (s == LF_OK && (xf->ndim < 2 || xf->ndim > 3 || xf->shape[xf->ndim - 1] != m.dim))
        s = lf_fail(LF_ESHAPE, "%s: x has %d dims, last %lld: expected [tokens, %lld] or [batch, seq, %lld]", input,
                    xf->ndim, (long long)xf->shape[xf->ndim - 1], (long long)m.dim, (long long)m.dim);
    if (s == LF_OK && dev != LF_DEVICE_CPU) /* on the module's device */
        s = lf_tensor_to_device(&x, xf, dev);
    else if (s == LF_OK)
        x = xf, xf = NULL;
    if (s == LF_OK && variant == LF_MLP_FP8) /* on the host, where a non-finite weight is reported */
        s = lf_nn_gated_mlp_quantize_fp8(&m);
    if (s == LF_OK && dev != LF_DEVICE_CPU)
        s = lf_nn_gated_mlp_to_device(&m, dev);
    if (s != LF_OK) {
        fprintf(stderr, "%s: %s\n", cmd, lf_last_error());
        lf_tensor_free(xf), lf_tensor_free(x);
        lf_nn_gated_mlp_free(&m);
        return LF_EXIT_USAGE;
    }
    /* running: a failure here is the forward's (exit 1) */
    mlp_run r = {&m, variant};
    lf_compiled *c = NULL;
    double t0 = lf_cli_now();
    if (compile) {
        lf_compile_opts co = lf_compile_opts_default();
        co.name = prefix;
        if (variant == LF_MLP_GATED)
            co.passes = LF_PASSES_ALL, r.v = LF_MLP_EAGER; /* the gated pass makes the gated GEMM itself */
        s = lf_compile(&c, fwd, &r, 1, &x, &co);
        if (s == LF_OK)
            s = lf_compiled_run(c, 1, &x, &y);
    } else {
        s = fwd(&r, 1, &x, &y);
    }
    if (s == LF_OK)
        s = lf_device_synchronize(dev);
    double ms = (lf_cli_now() - t0) * 1e3;
    int code = LF_EXIT_OK;
    if (s != LF_OK) {
        fprintf(stderr, "%s: %s\n", cmd, lf_last_error());
        code = LF_EXIT_FAIL;
    } else {
        lf_st_entry e = {"y", y};
        if (lf_st_write(output, &e, 1) != LF_OK) {
            fprintf(stderr, "%s: %s\n", cmd, lf_last_error());
            code = LF_EXIT_FAIL;
        } else {
            char xs[64], ys[64];
            printf("mlp %s (%s, %lld -> %lld, %s%s) on %s, %s%s: x %s -> y %s in %.3f ms (first call); wrote %s\n",
                   prefix, lf_act_name(m.act), (long long)m.dim, (long long)m.hidden, lf_dtype_name(m.gate_up->dtype),
                   stored, lf_device_name(dev), compile ? "compiled " : "", lf_mlp_variant_name(variant),
                   lf_fmt_shape(xs, sizeof xs, x->ndim, x->shape), lf_fmt_shape(ys, sizeof ys, y->ndim, y->shape), ms,
                   output);
            if (variant == LF_MLP_FP8 && lf_fp8_supported(dev) != LF_OK)
                printf("fp8: %s; the gated bf16 forward ran instead\n", lf_last_error());
        }
    }
    lf_compiled_free(c);
    lf_tensor_free(y), lf_tensor_free(x), lf_tensor_free(xf);
    lf_nn_gated_mlp_free(&m);
    return code;
}
