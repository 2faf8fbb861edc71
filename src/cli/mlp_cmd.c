/* `linfuse mlp`: one MLP layer of a Hugging Face checkpoint run on an input file: tensor x
 * ([tokens, dim] or [batch, seq, dim]) from --input, tensor y of the same shape to --output, in
 * any form linfuse has (eager, fused, gated, compiled) on any device. A run that fails writes
 * nothing. Exit status, as every command's: 0 done; 2 refused before any work (bad flags, an
 * input that cannot be read or is not what it should be, an output that cannot be written there
 * or would overwrite an input); 1 the work itself failed (the forward, or the write: a full disk,
 * a file past `ulimit -f`), its partial output removed. Layer: cli/. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "linfuse/compile.h"
#include "linfuse/safetensors.h"

/* The command's own refusals, said as the library's errors are: a status and a message, kept
 * until printed (reason() gives it, else the library's lf_last_error for a call of its that
 * failed). */
typedef struct why {
    char text[1400];
} why;

static lf_status refuse(why *w, lf_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static lf_status refuse(why *w, lf_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->text, sizeof w->text, fmt, ap);
    va_end(ap);
    return s;
}

static const char *reason(const why *w)
{
    return w->text[0] ? w->text : lf_last_error();
}

/* A shape as "[2, 3, 4]" into buf (always terminated); returns buf. */
static char *shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

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

/* prefix's layer in st (lf_nn_gated_mlp_find): its gate's weight name into gate and its sizes, or
 * the library's message (naming the layers there are) with the weights it was looked for in. */
static lf_status find_layer(const lf_safetensors *st, const char *weights, const char *prefix, int64_t *dim,
                            int64_t *hidden, char *gate, size_t gate_cap, why *w)
{
    const lf_status s = lf_nn_gated_mlp_find(st, prefix, gate, gate_cap, dim, hidden);
    return s == LF_OK ? s : refuse(w, s, "%s (--weights %.300s, --prefix %.200s)", lf_last_error(), weights, prefix);
}

int lf_cli_mlp_shape(const char *cmd, const char *weights, const char *prefix, int64_t *dim, int64_t *hidden)
{
    lf_safetensors *st = NULL;
    char pfx[512];
    why w = {""};
    lf_cli_mlp_prefix(pfx, sizeof pfx, prefix);
    lf_status s = lf_st_open(&st, weights);
    char gate[600];
    if (s == LF_OK)
        s = find_layer(st, weights, pfx, dim, hidden, gate, sizeof gate, &w);
    if (s != LF_OK)
        fprintf(stderr, "%s: --weights: %s\n", cmd, reason(&w));
    lf_st_close(st);
    return s == LF_OK ? LF_EXIT_OK : LF_EXIT_USAGE;
}

/* A message for --input without tensor x: the file and what it holds. */
static lf_status no_x(const lf_safetensors *st, const char *input, why *w)
{
    char list[700];
    size_t at = 0;
    const int64_t n = lf_st_count(st);
    list[0] = '\0';
    for (int64_t i = 0; i < n && i < 10 && at < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%.60s", i ? ", " : "", lf_st_name(st, i));
    if (n > 10 && at < sizeof list)
        snprintf(list + at, sizeof list - at, ", ...");
    return refuse(w, LF_EINVAL,
                  "--input %s has no tensor \"x\" (the input, [tokens, dim] or [batch, seq, dim]); it holds %lld: %s",
                  input, (long long)n, list);
}

/* --input: a file, an index or a directory, or "-", standard input (one .safetensors file). */
static lf_status open_input(const char *input, lf_safetensors **st, why *w)
{
    if (strcmp(input, "-"))
        return lf_st_open(st, input);
    size_t n = 0;
    char *data = lf_cli_read_stdin("linfuse mlp: --input -", "an input", (int64_t)1 << 40, &n);
    if (!data)
        return refuse(w, LF_EINVAL, "--input -: standard input could not be read (said above)");
    lf_status s = lf_st_open_buffer(st, data, n, "standard input");
    free(data);
    return s;
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

/* The input --output names, if any (*which says which flag), else NULL: --input and --weights
 * (a file, an index or a directory), the index a directory holds, each file of either, the
 * config.json read (config, or NULL). Writing would replace it: a checkpoint, or the input,
 * destroyed by its own run. */
static const char *clobbered(const char *output, const char *input, const char *weights, const lf_safetensors *wst,
                             const lf_safetensors *ist, const char *config, const char **which)
{
    static char index[2][PATH_MAX + 40];
    snprintf(index[0], sizeof index[0], "%s/model.safetensors.index.json", input);
    snprintf(index[1], sizeof index[1], "%s/model.safetensors.index.json", weights);
    const char *flag[5] = {"--input", "--weights", "the config beside --weights", "the index of --input",
                           "the index of --weights"},
               *path[5] = {input, weights, config, index[0], index[1]};
    for (int i = 0; i < 5; i++)
        if (path[i] && lf_cli_same_file(output, path[i])) {
            *which = flag[i];
            return path[i];
        }
    const lf_safetensors *st[2] = {wst, ist};
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < lf_st_file_count(st[k]); i++)
            if (lf_cli_same_file(output, lf_st_file(st[k], i))) {
                *which = k ? "a file of --input" : "a file of --weights";
                return lf_st_file(st[k], i);
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
          "--dtype to the weights' own; --variant to eager. Nothing is written when the run fails.\n"
          "--input - reads a .safetensors file from standard input; --output - writes one to standard output\n"
          "(the line saying what ran then goes to standard error).\n",
          f);
}

/* The command line: what to run, on what, where. */
typedef struct mlp_cfg {
    const char *weights, *prefix, *input, *output, *device;
    lf_act act; /* LF_ACT_NONE: the checkpoint's config.json says */
    lf_mlp_variant variant;
    lf_dtype dtype; /* LF_DTYPE_COUNT: the weights' own */
    int compile;
} mlp_cfg;

/* The flags into c; -1 to go on, else the exit status (the message or the help printed). */
static int mlp_args(int argc, char **argv, mlp_cfg *c)
{
    const char *cmd = "linfuse mlp", *v;
    *c = (mlp_cfg){.device = "auto", .act = LF_ACT_NONE, .variant = LF_MLP_EAGER, .dtype = LF_DTYPE_COUNT};
    enum { WEIGHTS, PREFIX, INPUT, OUTPUT, ACT, VARIANT, COMPILE, DEVICE, DTYPE };
    const lf_cli_opt opts[] = {{"weights", 1, WEIGHTS, 0}, {"prefix", 1, PREFIX, 0}, {"input", 1, INPUT, 0},
                               {"output", 1, OUTPUT, 0},   {"act", 1, ACT, 0},       {"variant", 1, VARIANT, 0},
                               {"compile", 0, COMPILE, 0}, {"device", 1, DEVICE, 0}, {"dtype", 1, DTYPE, 0}};
    lf_cli_args a;
    lf_cli_args_init(&a, cmd, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
    for (int id; (id = lf_cli_next(&a, &v)) != LF_CLI_END;) {
        switch (id) {
        case WEIGHTS:
            c->weights = v;
            break;
        case PREFIX:
            c->prefix = v;
            break;
        case INPUT:
            c->input = v;
            break;
        case OUTPUT:
            c->output = v;
            break;
        case ACT:
            if (lf_cli_act(cmd, v, &c->act) != LF_EXIT_OK)
                return LF_EXIT_USAGE;
            break;
        case VARIANT:
            if (lf_mlp_variant_parse(v) < 0) {
                fprintf(stderr, "%s: --variant must be eager, fused, gated or fp8, got '%s'\n", cmd, v);
                return LF_EXIT_USAGE;
            }
            c->variant = (lf_mlp_variant)lf_mlp_variant_parse(v);
            break;
        case COMPILE:
            c->compile = 1;
            break;
        case DEVICE:
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda")) {
                fprintf(stderr, "%s: --device must be auto, cpu or cuda, got '%s'\n", cmd, v);
                return LF_EXIT_USAGE;
            }
            c->device = v;
            break;
        case DTYPE:
            if (lf_dtype_parse(v, &c->dtype) != LF_OK) {
                fprintf(stderr, "%s: --dtype: %s\n", cmd, lf_last_error());
                return LF_EXIT_USAGE;
            }
            break;
        case LF_CLI_HELP:
            usage(stdout);
            return LF_EXIT_OK;
        case LF_CLI_WORD:
            fprintf(stderr, "%s: unexpected argument '%s'\n", cmd, v);
            return LF_EXIT_USAGE;
        default: /* said by lf_cli_next */
            return LF_EXIT_USAGE;
        }
    }
    return -1;
}

/* What the flags mean together, checked before any file is read: the device (*dev), the layer's
 * prefix (pfx) and, with no --act, the activation from config.json (its path in cfg). -1 to go on,
 * else LF_EXIT_USAGE (the message printed). */
static int mlp_check(mlp_cfg *c, lf_device *dev, char *pfx, size_t pfx_cap, char *cfg, size_t cfg_cap)
{
    const char *cmd = "linfuse mlp";
    if (!c->weights || !c->prefix || !c->input || !c->output) {
        fprintf(stderr, "%s: --weights, --prefix, --input and --output are all needed (linfuse mlp --help)\n", cmd);
        return LF_EXIT_USAGE;
    }
    if (c->compile && c->variant == LF_MLP_FUSED) {
        fprintf(stderr, "%s: --compile fuses the eager forward itself; use it with --variant eager, gated or fp8\n",
                cmd);
        return LF_EXIT_USAGE;
    }
    if (!strcmp(c->device, "cuda") && lf_device_require(LF_DEVICE_CUDA) != LF_OK) {
        fprintf(stderr, "%s: --device cuda: %s\n", cmd, lf_last_error());
        return LF_EXIT_USAGE;
    }
    *dev = !strcmp(c->device, "cuda") || (!strcmp(c->device, "auto") && lf_device_available(LF_DEVICE_CUDA))
               ? LF_DEVICE_CUDA
               : LF_DEVICE_CPU;
    lf_cli_mlp_prefix(pfx, pfx_cap, c->prefix);
    if (!pfx[0]) {
        fprintf(stderr, "%s: --prefix '%s' names no layer (e.g. model.layers.0.mlp)\n", cmd, c->prefix);
        return LF_EXIT_USAGE;
    }
    struct stat sb;
    if (stat(c->weights, &sb) != 0) { /* said of the weights, before anything is looked for beside them */
        fprintf(stderr, "%s: --weights %s: %s\n", cmd, c->weights, strerror(errno));
        return LF_EXIT_USAGE;
    }
    cfg[0] = '\0';
    if (c->act == LF_ACT_NONE) {
        if (lf_hf_config_act(c->weights, &c->act) != LF_OK) {
            fprintf(stderr, "%s: --act: %s; say which (--act silu|gelu_tanh|gelu)\n", cmd, lf_last_error());
            return LF_EXIT_USAGE;
        }
        config_path(c->weights, cfg, cfg_cap);
    }
    return -1;
}

/* What is read before the forward: the layer's module and x, on dev. */
typedef struct mlp_loaded {
    lf_nn_gated_mlp m;
    lf_tensor *x;
    char stored[16]; /* " from F8_E4M3": the checkpoint's own dtype, when the weights were dequantized */
} mlp_loaded;

/* The weights' layer pfx and the input's x, checked against each other and against the output,
 * then on dev: a failure here is the flags' or the files' (exit 2; said with w, else in
 * lf_last_error). Nothing is left allocated on failure. */
static lf_status mlp_load(const mlp_cfg *c, const char *pfx, const char *cfg, lf_device dev, mlp_loaded *l, why *w)
{
    lf_safetensors *wst = NULL, *ist = NULL;
    lf_tensor *xf = NULL;
    char err[600];
    int64_t dim = 0, hidden = 0;
    char gate[600] = "";
    const char *which = NULL, *victim = NULL;
    memset(l, 0, sizeof *l);
    lf_status s = lf_st_open(&wst, c->weights);
    if (s == LF_OK)
        s = find_layer(wst, c->weights, pfx, &dim, &hidden, gate, sizeof gate, w);
    if (s == LF_OK)
        s = open_input(c->input, &ist, w);
    if (s == LF_OK && !lf_st_has(ist, "x"))
        s = no_x(ist, c->input, w);
    if (s == LF_OK && !lf_cli_check_output(c->output, err, sizeof err))
        s = refuse(w, LF_EINVAL, "--output: %s", err);
    if (s == LF_OK && (victim = clobbered(c->output, c->input, c->weights, wst, ist, cfg[0] ? cfg : NULL, &which)))
        s = refuse(w, LF_EINVAL, "--output %s is the same file as %s %s: writing it would destroy an input", c->output,
                   which, victim);
    if (s == LF_OK) /* the weights copied out of the file: a checkpoint cut short mid-run is no fault */
        s = lf_nn_gated_mlp_load(&l->m, wst, pfx, c->act, c->dtype);
    if (s == LF_OK) {
        const char *fdt = lf_st_dtype(wst, gate);
        if (fdt && !strncmp(fdt, "F8_", 3))
            snprintf(l->stored, sizeof l->stored, " from %s", fdt);
    }
    lf_st_close(wst);
    if (s == LF_OK)
        s = lf_st_get_as(ist, "x", l->m.gate_up->dtype, &xf); /* x in the module's dtype, a copy */
    lf_st_close(ist);
    if (s == LF_OK && (xf->ndim < 2 || xf->ndim > 3 || xf->shape[xf->ndim - 1] != l->m.dim))
        s = refuse(w, LF_ESHAPE, "%s: x has %d dims, last %lld: expected [tokens, %lld] or [batch, seq, %lld]",
                   c->input, xf->ndim, (long long)xf->shape[xf->ndim - 1], (long long)l->m.dim, (long long)l->m.dim);
    if (s == LF_OK && dev != LF_DEVICE_CPU) /* on the module's device */
        s = lf_tensor_to_device(&l->x, xf, dev);
    else if (s == LF_OK)
        l->x = xf, xf = NULL;
    if (s == LF_OK && c->variant == LF_MLP_FP8) /* on the host, where a non-finite weight is reported */
        s = lf_nn_gated_mlp_quantize_fp8(&l->m);
    if (s == LF_OK && dev != LF_DEVICE_CPU)
        s = lf_nn_gated_mlp_to_device(&l->m, dev);
    lf_tensor_free(xf);
    if (s != LF_OK) {
        lf_tensor_free(l->x);
        lf_nn_gated_mlp_free(&l->m);
        memset(l, 0, sizeof *l);
    }
    return s;
}

/* The forward, eager or compiled, and y written: a failure here is the work's (exit 1). */
static int mlp_execute(const mlp_cfg *c, const char *pfx, lf_device dev, mlp_loaded *l)
{
    const char *cmd = "linfuse mlp";
    /* what runs: fp8 where the device has FP8 GEMMs, else the gated forward in the weights' dtype */
    char ran[64];
    snprintf(ran, sizeof ran, "%s", lf_mlp_variant_name(c->variant));
    if (c->variant == LF_MLP_FP8 && lf_fp8_supported(dev) != LF_OK) {
        fprintf(stderr, "%s: --variant fp8: %s; the gated %s forward runs instead\n", cmd, lf_last_error(),
                lf_dtype_name(l->m.gate_up->dtype));
        snprintf(ran, sizeof ran, "gated (fp8 asked)");
    }
    mlp_run r = {&l->m, c->variant};
    lf_compiled *comp = NULL;
    lf_tensor *y = NULL;
    lf_status s;
    double t0 = lf_cli_now();
    if (c->compile) {
        lf_compile_opts co = lf_compile_opts_default();
        co.name = pfx;
        if (c->variant == LF_MLP_GATED)
            co.passes = LF_PASSES_ALL, r.v = LF_MLP_EAGER; /* the gated pass makes the gated GEMM itself */
        s = lf_compile(&comp, fwd, &r, 1, &l->x, &co);
        if (s == LF_OK)
            s = lf_compiled_run(comp, 1, &l->x, &y);
    } else {
        s = fwd(&r, 1, &l->x, &y);
    }
    if (s == LF_OK)
        s = lf_device_synchronize(dev);
    double ms = (lf_cli_now() - t0) * 1e3;
    lf_st_entry e = {"y", y};
    if (s == LF_OK)
        s = lf_st_write(c->output, &e, 1);
    if (s != LF_OK) {
        fprintf(stderr, "%s: %s\n", cmd, lf_last_error());
    } else {
        char xs[64], ys[64];
        fprintf(lf_cli_note_stream(c->output),
                "mlp %s (%s, %lld -> %lld, %s%s) on %s, %s%s: x %s -> y %s in %.3f ms (first call); wrote %s\n", pfx,
                lf_act_name(l->m.act), (long long)l->m.dim, (long long)l->m.hidden, lf_dtype_name(l->m.gate_up->dtype),
                l->stored, lf_device_name(dev), c->compile ? "compiled " : "", ran,
                shape_str(xs, sizeof xs, l->x->ndim, l->x->shape), shape_str(ys, sizeof ys, y->ndim, y->shape), ms,
                c->output);
    }
    lf_compiled_free(comp);
    lf_tensor_free(y);
    return s == LF_OK ? LF_EXIT_OK : LF_EXIT_FAIL;
}

int lf_cli_mlp(int argc, char **argv)
{
    mlp_cfg c;
    lf_device dev;
    char pfx[512], cfg[4200];
    int code = mlp_args(argc, argv, &c);
    if (code < 0)
        code = mlp_check(&c, &dev, pfx, sizeof pfx, cfg, sizeof cfg);
    if (code >= 0)
        return code;
    mlp_loaded l;
    why w = {""};
    if (mlp_load(&c, pfx, cfg, dev, &l, &w) != LF_OK) { /* reading and checking, before any work */
        fprintf(stderr, "linfuse mlp: %s\n", reason(&w));
        return LF_EXIT_USAGE;
    }
    code = mlp_execute(&c, pfx, dev, &l);
    lf_tensor_free(l.x);
    lf_nn_gated_mlp_free(&l.m);
    return code;
}
