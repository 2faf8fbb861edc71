/* `linfuse mlp`: one MLP layer of a Hugging Face checkpoint run on an input file: tensor x
 * ([tokens, dim] or [batch, seq, dim]) from --input, tensor y of the same shape to --output, in
 * any form linfuse has (eager, fused, gated, compiled) on any device. A run that fails writes
 * nothing. Exit status, as every command's: 0 done; 2 refused before any work (bad flags, an
 * input that cannot be read or is not what it should be, an output that cannot be written there
 * or would overwrite an input); 1 the work itself failed (the forward, or the write: a full disk,
 * a file past `ulimit -f`), its partial output removed. Layer: cli/. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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

void lf_cli_mlp_prefix(char *dst, size_t cap, const char *prefix)
{
    size_t n = strlen(prefix);
    while (n && prefix[n - 1] == '.') /* "model.layers.0.mlp." as copied from a tensor's name */
        n--;
    snprintf(dst, cap, "%.*s", (int)n, prefix);
}

/* The MLP layers st holds (the prefixes of its "*.gate_proj.weight"), a few, into buf. */
static void list_layers(const lf_safetensors *st, char *buf, size_t cap)
{
    static const char tail[] = ".gate_proj.weight";
    const size_t tl = sizeof tail - 1;
    size_t at = 0;
    int64_t found = 0;
    buf[0] = '\0';
    for (int64_t i = 0; i < lf_st_count(st); i++) {
        const char *name = lf_st_name(st, i);
        const size_t n = strlen(name);
        if (n <= tl || strcmp(name + n - tl, tail))
            continue;
        if (++found <= 5 && at < cap)
            at += (size_t)snprintf(buf + at, cap - at, "%s%.*s", found > 1 ? ", " : "",
                                   (int)(n - tl > 120 ? 120 : n - tl), name);
    }
    if (!found)
        snprintf(buf, cap, "none (no tensor named *%s)", tail);
    else if (found > 5 && at < cap)
        snprintf(buf + at, cap - at, ", ... (%lld in all)", (long long)found);
}

/* prefix's layer in st: its sizes from gate_proj's shape, or a message naming the layers there are. */
static lf_status find_layer(const lf_safetensors *st, const char *weights, const char *prefix, int64_t *dim,
                            int64_t *hidden)
{
    char name[600], layers[800];
    int64_t shape[8];
    snprintf(name, sizeof name, "%s.gate_proj.weight", prefix);
    const int ndim = lf_st_shape(st, name, shape); /* the header alone: FP8 or not */
    if (ndim < 0) {
        list_layers(st, layers, sizeof layers);
        return lf_fail(LF_EINVAL, "%s: no \"%.300s\" (--prefix %.200s); the MLP layers there: %s", weights, name,
                       prefix, layers);
    }
    if (ndim != 2)
        return lf_fail(LF_ESHAPE, "%s: %s has %d dims, expected (hidden, dim)", weights, name, ndim);
    *hidden = shape[0], *dim = shape[1];
    return LF_OK;
}

int lf_cli_mlp_shape(const char *cmd, const char *weights, const char *prefix, int64_t *dim, int64_t *hidden)
{
    lf_safetensors *st = NULL;
    char pfx[512];
    lf_cli_mlp_prefix(pfx, sizeof pfx, prefix);
    lf_status s = lf_st_open(&st, weights);
    if (s == LF_OK)
        s = find_layer(st, weights, pfx, dim, hidden);
    if (s != LF_OK)
        fprintf(stderr, "%s: --weights: %s\n", cmd, lf_last_error());
    lf_st_close(st);
    return s == LF_OK ? LF_EXIT_OK : LF_EXIT_USAGE;
}

/* A message for --input without tensor x: the file and what it holds. */
static lf_status no_x(const lf_safetensors *st, const char *input)
{
    char list[700];
    size_t at = 0;
    const int64_t n = lf_st_count(st);
    list[0] = '\0';
    for (int64_t i = 0; i < n && i < 10 && at < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%.60s", i ? ", " : "", lf_st_name(st, i));
    if (n > 10 && at < sizeof list)
        snprintf(list + at, sizeof list - at, ", ...");
    return lf_fail(LF_EINVAL,
                   "--input %s has no tensor \"x\" (the input, [tokens, dim] or [batch, seq, dim]); it holds %lld: %s",
                   input, (long long)n, list);
}

/* The config.json lf_hf_config_act reads for weights. */
static void config_path(const char *weights, char *buf, size_t cap)
{
    struct stat sb;
    const size_t n = strlen(weights);
    if (stat(weights, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(buf, cap, "%s/config.json", weights);
    else if (n >= 11 && !strcmp(weights + n - 11, "config.json"))
        snprintf(buf, cap, "%s", weights);
    else if (strrchr(weights, '/'))
        snprintf(buf, cap, "%.*s/config.json", (int)(strrchr(weights, '/') - weights), weights);
    else
        snprintf(buf, cap, "config.json");
}

/* The input --output names, if any (*which says which flag), else NULL: --input, --weights (a
 * file or an index), each of its files, the config.json read (config, or NULL). Writing would
 * replace it: the checkpoint destroyed by its own run. */
static const char *clobbered(const char *output, const char *input, const char *weights, const lf_safetensors *wst,
                             const char *config, const char **which)
{
    const char *flag[3] = {"--input", "--weights", "the config beside --weights"}, *path[3] = {input, weights, config};
    for (int i = 0; i < 3; i++)
        if (path[i] && lf_cli_same_file(output, path[i])) {
            *which = flag[i];
            return path[i];
        }
    for (int64_t i = 0; i < lf_st_file_count(wst); i++)
        if (lf_cli_same_file(output, lf_st_file(wst, i))) {
            *which = "a file of --weights";
            return lf_st_file(wst, i);
        }
    return NULL;
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
    char pfx[512], cfg[4200] = "", err[600];
    lf_cli_mlp_prefix(pfx, sizeof pfx, prefix);
    if (!pfx[0]) {
        fprintf(stderr, "%s: --prefix '%s' names no layer (e.g. model.layers.0.mlp)\n", cmd, prefix);
        return LF_EXIT_USAGE;
    }
    if (act == LF_ACT_NONE) {
        if (lf_hf_config_act(weights, &act) != LF_OK) {
            fprintf(stderr, "%s: --act: %s; say which (--act silu|gelu_tanh|gelu)\n", cmd, lf_last_error());
            return LF_EXIT_USAGE;
        }
        config_path(weights, cfg, sizeof cfg);
    }
    /* reading and checking, before any work: a failure here is the flags' or the files' (exit 2) */
    lf_safetensors *wst = NULL, *ist = NULL;
    lf_nn_gated_mlp m = {0};
    lf_tensor *xf = NULL, *x = NULL, *y = NULL;
    char stored[16] = ""; /* the checkpoint's own dtype, when the weights were dequantized from it */
    int64_t dim = 0, hidden = 0;
    const char *which = NULL, *victim = NULL;
    lf_status s = lf_st_open(&wst, weights);
    if (s == LF_OK)
        s = find_layer(wst, weights, pfx, &dim, &hidden);
    if (s == LF_OK)
        s = lf_st_open(&ist, input);
    if (s == LF_OK && !lf_st_has(ist, "x"))
        s = no_x(ist, input);
    if (s == LF_OK && !lf_cli_check_output(output, err, sizeof err))
        s = lf_fail(LF_EINVAL, "--output: %s", err);
    if (s == LF_OK && (victim = clobbered(output, input, weights, wst, cfg[0] ? cfg : NULL, &which)))
        s = lf_fail(LF_EINVAL, "--output %s is the same file as %s %s: writing it would destroy an input", output,
                    which, victim);
    if (s == LF_OK) /* the weights copied out of the file: a checkpoint cut short mid-run is no fault */
        s = lf_nn_gated_mlp_load(&m, wst, pfx, act, dtype);
    if (s == LF_OK) {
        char gate[600];
        snprintf(gate, sizeof gate, "%s.gate_proj.weight", pfx);
        const char *fdt = lf_st_dtype(wst, gate);
        if (fdt && !strncmp(fdt, "F8_", 3))
            snprintf(stored, sizeof stored, " from %s", fdt);
    }
    lf_st_close(wst);
    if (s == LF_OK)
        s = lf_st_get_as(ist, "x", m.gate_up->dtype, &xf); /* x in the module's dtype, a copy */
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
    /* what runs: fp8 where the device has FP8 GEMMs, else the gated forward in the weights' dtype */
    char ran[64];
    snprintf(ran, sizeof ran, "%s", lf_mlp_variant_name(variant));
    if (variant == LF_MLP_FP8 && lf_fp8_supported(dev) != LF_OK) {
        fprintf(stderr, "%s: --variant fp8: %s; the gated %s forward runs instead\n", cmd, lf_last_error(),
                lf_dtype_name(m.gate_up->dtype));
        snprintf(ran, sizeof ran, "gated (fp8 asked)");
    }
    /* running: a failure here is the forward's (exit 1) */
    mlp_run r = {&m, variant};
    lf_compiled *c = NULL;
    double t0 = lf_cli_now();
    if (compile) {
        lf_compile_opts co = lf_compile_opts_default();
        co.name = pfx;
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
            printf("mlp %s (%s, %lld -> %lld, %s%s) on %s, %s%s: x %s -> y %s in %.3f ms (first call); wrote %s\n", pfx,
                   lf_act_name(m.act), (long long)m.dim, (long long)m.hidden, lf_dtype_name(m.gate_up->dtype), stored,
                   lf_device_name(dev), compile ? "compiled " : "", ran, lf_fmt_shape(xs, sizeof xs, x->ndim, x->shape),
                   lf_fmt_shape(ys, sizeof ys, y->ndim, y->shape), ms, output);
        }
    }
    lf_compiled_free(c);
    lf_tensor_free(y), lf_tensor_free(x), lf_tensor_free(xf);
    lf_nn_gated_mlp_free(&m);
    return code;
}
