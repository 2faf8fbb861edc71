/* One run of an experiment (experiments.c parses its command line): build the model, compile it
 * when asked, run profiled steps under a torch-like schedule, and for every window the schedule
 * records write <out>/<experiment>/<shape>_<dtype>_<cold|warm>_<mode>.json and .txt (DESIGN's
 * artifact names; `_window<k>` added when --repeat asks for several), print the table and a
 * one-line summary. Layer: cli/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/exp_table.h"
#include "cli/experiments.h"
#include "cli/tp_run.h"
#include "linfuse/io.h"
#include "linfuse/trace.h"

/* --- a run --- */

/* What each completed window needs: where its files go, and what the run has to report. */
typedef struct run_ctx {
    const exp_cfg *c;
    exp_result *r;
    const char *base; /* <dir>/<shape>_<dtype>_<cold|warm>_<mode> */
    int print;
    lf_status st;
    int write_failed;
} run_ctx;

/* The schedule's on_trace_ready: write this window's trace and table, summarize it. */
static void window_ready(lf_profiler *p, void *user)
{
    run_ctx *x = user;
    exp_result *r = x->r;
    if (x->st != LF_OK || x->write_failed)
        return;
    int k = r->windows + 1; /* counted once written */
    const char *sfx = "";
    char wsfx[32];
    if (x->c->sched.repeat > 1) {
        snprintf(wsfx, sizeof wsfx, "_window%d", k);
        sfx = wsfx;
    }
    snprintf(r->json_path, sizeof r->json_path, "%s%s.json", x->base, sfx);
    snprintf(r->txt_path, sizeof r->txt_path, "%s%s.txt", x->base, sfx);
    const lf_trace *t = NULL;
    char *table = NULL;
    lf_table_opts to = {.sort_by = LF_SORT_DEVICE_TIME_TOTAL, .row_limit = x->c->row_limit};
    lf_status s = lf_prof_trace(p, &t);
    if (s == LF_OK)
        s = lf_prof_table(p, &to, &table);
    if (s == LF_OK)
        s = lf_trace_summarize(t, &r->sum);
    if (s != LF_OK) {
        x->st = s;
    } else {
        /* the trace and its table together: both appear, or neither changes */
        lf_trace_json_job jj = {t, r->json_path};
        lf_file_job jobs[2] = {{r->json_path, lf_trace_json_write_cb, &jj}, {r->txt_path, lf_cli_put_text, table}};
        s = lf_write_files_atomic(jobs, 2);
        if (s != LF_OK) {
            fprintf(stderr, "linfuse %s: %s\n", lf_exp_defs[x->c->kind].name, lf_last_error());
            x->write_failed = 1;
        }
    }
    if (s == LF_OK) {
        r->windows = k;
        lf_trace_summary_line(&r->sum, r->summary, sizeof r->summary);
        if (x->print) {
            if (x->c->sched.repeat > 1)
                printf("window %d of %d:\n", k, x->c->sched.repeat);
            fputs(table, stdout);
            printf("trace: %s\ntable: %s\n%s\n", r->json_path, r->txt_path, r->summary);
        }
    }
    free(table);
}

typedef struct fwd_ctx {
    const exp_cfg *c;
    const model *m;
} fwd_ctx;

/* The forward as compile mode captures it: x is the input, the model's tensors are parameters. */
static lf_status compiled_forward(void *ctx, int n_in, lf_tensor *const *in, lf_tensor **out)
{
    const fwd_ctx *f = ctx;
    (void)n_in;
    return lf_exp_defs[f->c->kind].forward(f->c, f->m, in[0], out);
}

static lf_status forward(const exp_cfg *c, const model *m, lf_compiled *compiled)
{
    lf_tensor *y = NULL;
    lf_status s = compiled ? lf_compiled_run(compiled, 1, &m->x, &y) : lf_exp_defs[c->kind].forward(c, m, m->x, &y);
    lf_tensor_free(y);
    return s;
}

static lf_status model_build(const exp_cfg *c, model *m)
{
    memset(m, 0, sizeof *m);
    lf_rng rng;
    lf_rng_seed(&rng, 0);
    lf_status s = lf_exp_defs[c->kind].build(c, &rng, m);
    if (s == LF_OK)
        s = lf_tensor_fill_uniform(m->x, &rng, -1, 1);
    if (s == LF_OK && c->variant == LF_MLP_FP8 && m->mlp.gate_up) /* on the host, where a bad weight is reported */
        s = lf_nn_gated_mlp_quantize_fp8(&m->mlp);
    if (s == LF_OK && c->device != LF_DEVICE_CPU && m->mlp.gate_up)
        s = lf_nn_gated_mlp_to_device(&m->mlp, c->device);
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
        exp_model_free(m);
    return s;
}

/* compile, and each way the plan's passes or launch differ from the default's, so two compiled
 * runs of one shape that made different plans keep two sets of files (--compile --gated wrote
 * over --compile's): compile_gated, compile_fp8, _packed, _nofold, _nobias, _nofuse, _noact,
 * _nograph. Named for the plan made: --fp8 where the device has no FP8 GEMM makes the gated plan
 * (the pass says why), so its files are compile_gated's, as an eager fp8 run's are gated's. */
static void compile_mode(const exp_cfg *c, char *mode, size_t cap)
{
    const unsigned p = c->passes;
    const int fp8 = (p & LF_PASS_FP8) && lf_fp8_supported(c->device) == LF_OK;
    snprintf(mode, cap, "compile%s%s%s%s%s%s%s",
             fp8                        ? "_fp8"
             : (p & LF_PASS_GATED_GEMM) ? "_gated"
                                        : "",
             (p & LF_PASS_PACK_WEIGHTS) ? "_packed" : "", (p & LF_PASS_FOLD_VIEWS) ? "" : "_nofold",
             (p & LF_PASS_BIAS_EPILOGUE) ? "" : "_nobias", (p & LF_PASS_POINTWISE_FUSION) ? "" : "_nofuse",
             (p & LF_PASS_ACT_EPILOGUE) ? "" : "_noact", c->no_cuda_graph ? "_nograph" : "");
}

/* The path every file of the run starts with: <dir>/<shape>[_<layer>]_<dtype>_<cold|warm>_<mode>,
 * the mode saying how the forward ran (eager, kernels: the hand-fused middle, gated, fp8 or
 * compile[_...]: compile_mode; gated where fp8 was asked for and the device has no FP8 GEMM, said).
 * 0 when too long. */
static int name_outputs(const exp_cfg *c, const char *dir, const char *shape, char *base, size_t cap)
{
    const char *name = lf_exp_defs[c->kind].name;
    char compiled[96];
    compile_mode(c, compiled, sizeof compiled);
    const char *mode = c->compile                                  ? compiled
                       : !(lf_exp_defs[c->kind].takes & T_VARIANT) ? "eager"
                       : c->variant == LF_MLP_GATED                ? "gated"
                       : c->variant == LF_MLP_FP8                  ? "fp8"
                                                                   : "kernels";
    if (!c->compile && c->variant == LF_MLP_FP8 && (lf_exp_defs[c->kind].takes & T_VARIANT) &&
        lf_fp8_supported(c->device) != LF_OK) { /* the files are named by what ran, and the reason said whole */
        fprintf(stderr, "linfuse %s: --variant fp8: %s; the gated %s forward runs instead\n", name, lf_last_error(),
                lf_dtype_name(c->dtype));
        mode = "gated";
    }
    char layer[160] = ""; /* a real layer's outputs carry its name: two layers, two sets of files */
    if (c->weights && c->prefix) {
        char p[512];
        lf_cli_mlp_prefix(p, sizeof p, c->prefix);
        layer[0] = '_';
        lf_cli_file_word(layer + 1, sizeof layer - 1, p);
    }
    if (snprintf(base, cap, "%s/%s%s_%s_%s_%s", dir, shape, layer, lf_dtype_name(c->dtype), c->warm ? "warm" : "cold",
                 mode) >= (int)cap) {
        fprintf(stderr, "linfuse %s: --out: path too long\n", name);
        return 0;
    }
    return 1;
}

/* --compile: the first call's work, once, before the profiled steps (its time into r). */
static lf_status compile_model(const exp_cfg *c, fwd_ctx *fc, lf_compiled **compiled, exp_result *r, int print)
{
    lf_compile_opts co = lf_compile_opts_default();
    co.name = lf_exp_defs[c->kind].label;
    co.passes = c->passes;
    co.no_cuda_graph = c->no_cuda_graph;
    co.verbose = c->compile_verbose;
    lf_tensor *x = fc->m->x;
    lf_status s = lf_compile(compiled, compiled_forward, fc, 1, &x, &co);
    if (s != LF_OK)
        return s;
    lf_compiled_stats st = lf_compiled_get_stats(*compiled);
    if (print)
        printf("compile: %.1f ms, once before the profiled steps; each step replays a plan of %d kernel%s%s%s\n",
               st.compile_ms, st.kernels, st.kernels == 1 ? "" : "s", st.views ? " and view ops" : "",
               st.graph ? " as one CUDA graph launch" : "");
    r->compile_ms = st.compile_ms;
    return LF_OK;
}

/* The profiled steps: warm-up forwards first when asked (the blog's --warmup), then the
 * schedule's steps, each window written by window_ready as it completes (*pp: the profiler, for
 * the caller to free). */
static lf_status profile_steps(const exp_cfg *c, const model *m, lf_compiled *compiled, run_ctx *rc, lf_profiler **pp)
{
    lf_status s = LF_OK;
    for (int i = 0; c->warm && i < 3 && s == LF_OK; i++)
        s = forward(c, m, compiled);
    lf_profiler *p = NULL;
    lf_prof_opts po = lf_exp_prof_opts(c, window_ready, rc);
    if (s == LF_OK)
        s = lf_prof_start(&p, &po);
    *pp = p;
    int steps = c->sched.skip_first + (c->sched.wait + c->sched.warmup + c->sched.active) * c->sched.repeat;
    for (int i = 0; i < steps && s == LF_OK && rc->st == LF_OK && !rc->write_failed; i++) {
        lf_prof_range_push(lf_exp_defs[c->kind].label);
        s = forward(c, m, compiled);
        lf_prof_range_pop();
        if (s == LF_OK)
            s = lf_prof_step(p);
    }
    if (p && s == LF_OK)
        s = lf_prof_stop(p);
    return s == LF_OK ? rc->st : s;
}

/* The run itself, into dir (made and proved writable). */
static int run_into(const exp_cfg *c, exp_result *r, int print, const char *dir)
{
    const char *name = lf_exp_defs[c->kind].name;
    char shape[96], base[4400];
    lf_exp_shape(c, shape, sizeof shape);
    if (!name_outputs(c, dir, shape, base, sizeof base))
        return LF_EXIT_USAGE;
    lf_cpu_set_threads(c->threads);
    if (c->tp > 1 || c->tp < 0) { /* the MLP over several GPUs */
        exp_tp_job j = {c, name, lf_exp_defs[c->kind].label, base, c->variant, NULL};
        return lf_exp_run_tp(&j, r, print);
    }
    model m;
    lf_status s = model_build(c, &m);
    if (s != LF_OK) {
        fprintf(stderr, "linfuse %s: cannot set up %s: %s\n", name, shape, lf_last_error());
        /* refused before any work: sizes, or --weights that cannot be read (exit 2); a device failing, 1 */
        const int refused = s == LF_ENOMEM || s == LF_EOVERFLOW || s == LF_ESHAPE || s == LF_EINVAL || s == LF_EDTYPE;
        return refused ? LF_EXIT_USAGE : LF_EXIT_FAIL;
    }
    lf_compiled *compiled = NULL;
    fwd_ctx fc = {c, &m};
    if (c->compile && compile_model(c, &fc, &compiled, r, print) != LF_OK) {
        fprintf(stderr, "linfuse %s: --compile: %s\n", name, lf_last_error());
        exp_model_free(&m);
        return LF_EXIT_FAIL;
    }
    run_ctx rc = {c, r, base, print, LF_OK, 0};
    lf_profiler *p = NULL;
    s = profile_steps(c, &m, compiled, &rc, &p);
    int code = LF_EXIT_OK;
    if (s != LF_OK) {
        fprintf(stderr, "linfuse %s: %s\n", name, lf_last_error());
        code = LF_EXIT_FAIL;
    } else if (rc.write_failed) {
        code = LF_EXIT_FAIL;
    } else if (r->windows == 0) {
        fprintf(stderr, "linfuse %s: the schedule recorded no window\n", name);
        code = LF_EXIT_FAIL;
    }
    lf_prof_free(p);
    lf_compiled_free(compiled);
    exp_model_free(&m);
    lf_cpu_set_threads(0);
    return code;
}

int lf_exp_run(const exp_cfg *c, exp_result *r, int print)
{
    memset(r, 0, sizeof *r);
    const char *name = lf_exp_defs[c->kind].name;
    char err[512], dir[4200], made[4200];
    if (snprintf(dir, sizeof dir, "%s/%s", c->out_dir, name) >= (int)sizeof dir) {
        fprintf(stderr, "linfuse %s: --out: path too long\n", name);
        return LF_EXIT_USAGE;
    }
    exp_memory e;
    char shape[96];
    lf_exp_defs[c->kind].memory(c, &e);
    lf_exp_defs[c->kind].shape(c, shape, sizeof shape);
    if (!lf_exp_memory_fits(c, lf_exp_defs[c->kind].name, shape, &e))
        return LF_EXIT_USAGE;
    /* made and proved writable before the run; what was made is removed again when the run wrote
     * nothing (refused, failed), so a failed run leaves no empty directories behind */
    if (!lf_cli_prepare_dir(dir, made, sizeof made, err, sizeof err)) {
        fprintf(stderr, "linfuse %s: --out: %s\n", name, err);
        return LF_EXIT_USAGE;
    }
    int code = run_into(c, r, print, dir);
    if (r->windows == 0)
        lf_cli_unmake_dir(dir, made);
    return code;
}
