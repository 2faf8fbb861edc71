/* The case table's lf_backend_gemm family: a GEMM described directly to the device (every
 * epilogue: bias, C with beta, alpha, an activation, the paired gate; FP8 scales, an e4m3 d), d a
 * view inside a NaN-poisoned buffer. Each run checks the values against float64, that nothing was
 * written outside d and every element of it was, the inputs untouched, the kernel's report
 * (FLOPs, bytes, a name that carries its epilogue), and for a paired gate that lf_gated_choose
 * named the kernel that ran: on CUDA the GEMV for 1 to 16 bf16 tokens, else the schedule forced
 * for the run wherever the rule (linfuse/cuda.h) lets it be forced. */
#include <stdlib.h>
#include <string.h>

#include "cases.h"

typedef struct gemm_ctx {
    const case_t *c;
    int64_t M, N, K, No;
    operand a, b, cin, bias, d, dsc;  /* dsc: an e4m3 d's 1 x 128 scales, poisoned */
    lf_tensor *hsa, *hsb, *dsa, *dsb; /* FP8 scales, host and device */
    double *ref, *mag, *ab;
    int64_t step;
    uint8_t *rq; /* e4m3 d: the reference's codes (M, No) and scales */
    float *rs;
} gemm_ctx;

static lf_matrix mat(const lf_tensor *t)
{
    return (lf_matrix){lf_tensor_data(t), t->dtype, t->shape[0], t->shape[1], t->stride[0], t->stride[1]};
}

/* The description on the device's copies (dev) or on the host's (the reference). */
static lf_gemm describe(const gemm_ctx *x, int host)
{
    const case_t *c = x->c;
    lf_gemm g = {.ep = lf_epilogue_default()};
    g.a = mat(host ? x->a.hview : x->a.dview);
    g.b = mat(host ? x->b.hview : x->b.dview);
    g.d = mat(host ? x->d.hview : x->d.dview);
    g.ep.alpha = c->alpha, g.ep.act = c->act;
    if (c->bias) {
        g.ep.bias = lf_tensor_data(host ? x->bias.hview : x->bias.dview);
        g.ep.bias_dtype = c->bias_f32 ? LF_DTYPE_F32 : c->dt;
    }
    if (c->c_input) {
        g.c = mat(host ? x->cin.hview : x->cin.dview);
        g.ep.beta = c->beta;
    }
    if (c->group) {
        g.ep.gate = LF_GATE_PAIRED;
        g.ep.gate_group = c->group;
    }
    if (x->hsa) {
        g.ep.a_scale = lf_tensor_data(host ? x->hsa : x->dsa);
        g.ep.b_scale = lf_tensor_data(host ? x->hsb : x->dsb);
        g.ep.blockwise = c->scale != LF_SCALE_ROWS;
    }
    if (c->out_fp8)
        g.ep.d_scale = lf_tensor_data(host ? x->dsc.hview : x->dsc.dview);
    return g;
}

/* The report every backend gives (docs/design.md, "Kernel reports"): 2 M N K over all N product
 * columns, and each operand's bytes once in its own dtype, scales included. */
static void expect_report(case_run *r, const gemm_ctx *x, const lf_gemm *g, const lf_kernel_info *info)
{
    const case_t *c = x->c;
    const double M = (double)x->M, N = (double)x->N, K = (double)x->K;
    double bytes = M * K * (double)lf_dtype_size(g->a.dtype) + K * N * (double)lf_dtype_size(g->b.dtype) +
                   M * (double)x->No * (double)lf_dtype_size(g->d.dtype);
    if (c->c_input)
        bytes += M * N * (double)lf_dtype_size(c->dt);
    if (c->bias)
        bytes += N * (double)lf_dtype_size(c->bias_f32 ? LF_DTYPE_F32 : c->dt);
    if (x->hsa)
        bytes += 4.0 * (double)(lf_scale_count(g->ep.blockwise ? LF_SCALE_1X128 : LF_SCALE_ROWS, x->M, x->K) +
                                lf_scale_count(g->ep.blockwise ? LF_SCALE_128X128 : LF_SCALE_ROWS, x->N, x->K));
    if (c->out_fp8)
        bytes += 4.0 * (double)lf_scale_count(LF_SCALE_1X128, x->M, x->No);
    EXPECT(r, info->flops == 2.0 * M * N * K && info->bytes == bytes,
           "%s reports %.0f FLOPs and %.0f bytes, expected %.0f and %.0f", info->name, info->flops, info->bytes,
           2.0 * M * N * K, bytes);
    const char *nm = info->name;
    EXPECT(r,
           nm && name_has(nm, "bias") == (c->bias != 0) && name_has(nm, "gated") == (c->group != 0) &&
               (c->act == LF_ACT_NONE || name_has(nm, lf_act_name(c->act))) && (!c->c_input || name_has(nm, "c")),
           "kernel name %s does not carry its epilogue", nm ? nm : "(none)");
    EXPECT(r, r->dev != LF_DEVICE_CPU || (nm && !strncmp(nm, "lf_cpu_gemm_", 12)), "kernel name %s", nm ? nm : "");
}

/* The kernel a paired-gate GEMM took: what lf_gated_choose said, and on CUDA what the run's forced
 * schedule and the token count allow. */
static void expect_gated_kernel(case_run *r, const gemm_ctx *x, const lf_gated_choice *ch, const char *nm)
{
    const case_t *c = x->c;
    const lf_gated_kernel k = ch->kernel;
    snprintf(r->note + strlen(r->note), sizeof r->note - strlen(r->note), " [%s]", lf_gated_kernel_name(k));
    if (r->dev == LF_DEVICE_CPU) {
        EXPECT(r, k == LF_GATED_KERNEL_EPILOGUE, "the CPU's gated GEMM is its epilogue, lf_gated_choose says %s",
               lf_gated_kernel_name(k));
        return;
    }
    const int hopper =
        k == LF_GATED_KERNEL_COOPERATIVE || k == LF_GATED_KERNEL_PINGPONG || k == LF_GATED_KERNEL_OFFLOAD;
    EXPECT(r, k != LF_GATED_KERNEL_GEMV || x->M <= 16, "the GEMV at %lld tokens", (long long)x->M);
    EXPECT(r, !(hopper && x->M <= 16 && c->dt == LF_DTYPE_BF16 && c->act != LF_ACT_NONE),
           "%lld bf16 tokens take the GEMV, not %s", (long long)x->M, lf_gated_kernel_name(k));
    if (hopper) { /* linfuse/cuda.h: a group not a multiple of 128 is ping-pong, an e4m3 h cooperative */
        const lf_gated_kernel want = c->group % 128                     ? LF_GATED_KERNEL_PINGPONG
                                     : c->out_fp8                       ? LF_GATED_KERNEL_COOPERATIVE
                                     : r->schedule == LF_GATED_PINGPONG ? LF_GATED_KERNEL_PINGPONG
                                     : r->schedule == LF_GATED_OFFLOAD  ? LF_GATED_KERNEL_OFFLOAD
                                                                        : LF_GATED_KERNEL_COOPERATIVE;
        EXPECT(r, k == want, "forced %s, lf_gated_choose says %s (expected %s)", r->variant, lf_gated_kernel_name(k),
               lf_gated_kernel_name(want));
    }
    const char *tile = k == LF_GATED_KERNEL_GEMV       ? "gated_gemv_"
                       : k == LF_GATED_KERNEL_PINGPONG ? "_pingpong"
                       : k == LF_GATED_KERNEL_OFFLOAD  ? "_offload"
                                                       : "_128x256";
    EXPECT(r,
           nm && strstr(nm, tile) && (k == LF_GATED_KERNEL_OFFLOAD || !strstr(nm, "_offload")) &&
               (k == LF_GATED_KERNEL_PINGPONG || !strstr(nm, "_pingpong")) && !strstr(nm, "_to_f8e4m3") == !c->out_fp8,
           "lf_gated_choose says %s, the kernel that ran is %s", lf_gated_kernel_name(k), nm ? nm : "(none)");
}

/* Whether CUDA must run c rather than skip it, by what linfuse says it takes (linfuse/cuda.h,
 * backend.h): cuBLASLt every layout with a unit stride in every dtype and epilogue but gelu_erf
 * and silu; where the gated kernels run at all, a gate in GeGLU's or SwiGLU's activation on bf16
 * or row-scaled e4m3, with no bias, C or alpha, a group a multiple of 64 (of 128 for an e4m3 h), x
 * in 16-byte rows and the weight seen transposed. A skip there would hide a kernel lost. */
static int cuda_must_run(const case_t *c)
{
    if (!c->group)
        return c->dt != LF_DTYPE_F8E4M3 && c->act != LF_ACT_GELU_ERF && c->act != LF_ACT_SILU;
    const int64_t per16 = c->dt == LF_DTYPE_F8E4M3 ? 16 : 8;
    return case_gated_here && (c->act == LF_ACT_GELU_TANH || c->act == LF_ACT_SILU) &&
           (c->dt == LF_DTYPE_BF16 || (c->dt == LF_DTYPE_F8E4M3 && c->scale == LF_SCALE_ROWS)) && !c->bias &&
           !c->c_input && c->alpha == 1.0f && c->group % (c->out_fp8 ? 128 : 64) == 0 && c->k % per16 == 0 &&
           (c->la == LAY_ROW || c->la == LAY_PAD16) && c->lb == LAY_COL;
}

static void gemm_run(case_run *r, void *ctxp)
{
    gemm_ctx *x = ctxp;
    const case_t *c = x->c;
    /* d and its scales poisoned afresh on the device: every variant writes them */
    if (!operand_upload(r, &x->d, r->dev) || (c->out_fp8 && !operand_upload(r, &x->dsc, r->dev)))
        return;
    lf_gemm g = describe(x, 0);
    lf_status s = lf_backend_gemm_supported(r->dev, &g);
    if (s == LF_EUNSUPPORTED && r->dev == LF_DEVICE_CUDA && cuda_must_run(c)) {
        EXPECT(r, 0, "CUDA must run it: %s", lf_last_error());
        return;
    }
    if (!case_ok(r, s, "lf_backend_gemm_supported"))
        return;
    lf_gated_choice ch = {0};
    if (c->group && !case_ok(r, lf_gated_choose(r->dev, &g, &ch), "lf_gated_choose"))
        return;
    lf_kernel_info info = {0};
    s = lf_backend_gemm(r->dev, &g, &info);
    EXPECT(r, s == LF_OK, "supported, then lf_backend_gemm: %s", s == LF_OK ? "" : lf_last_error());
    if (s != LF_OK)
        return;
    if (info.timing && info.resolve)
        info.resolve(info.timing, &(int64_t){0}, &(int64_t){0});
    s = lf_device_synchronize(r->dev);
    EXPECT(r, s == LF_OK, "synchronize: %s", s == LF_OK ? "" : lf_last_error());
    snprintf(r->note, sizeof r->note, "%s", info.name ? info.name : "?");
    expect_report(r, x, &g, &info);
    const char *gk = lf_setting_get(LF_SET_GEMV_KERNEL);
    if (c->gemv_tma && r->dev == LF_DEVICE_CUDA && case_gated_here && gk && !strcmp(gk, "tma"))
        EXPECT(r, info.name && strstr(info.name, "gemv_tma"),
               "LINFUSE_GEMV_KERNEL=tma: the TMA GEMV's plain form runs it, not %s", info.name ? info.name : "?");
    if (c->group)
        expect_gated_kernel(r, x, &ch, info.name);
    double *got = expect_poison_kept(r, &x->d, "d");
    if (got && c->out_fp8) {
        double *gs = expect_poison_kept(r, &x->dsc, "d's scales"); /* padding rows too: every scale written */
        const int64_t n = x->M * x->No;
        uint8_t *gq = malloc((size_t)n);
        float *gsf = malloc((size_t)lf_scale_count(LF_SCALE_1X128, x->M, x->No) * sizeof *gsf);
        for (int64_t i = 0; i < n; i++)
            gq[i] = lf_f8e4m3_from_f32((float)got[i]); /* decoded codes encode back exactly */
        for (int64_t i = 0; gs && i < lf_scale_count(LF_SCALE_1X128, x->M, x->No); i++)
            gsf[i] = (float)gs[i];
        if (gs)
            expect_fp8_codes(r, x->rq, x->rs, gq, x->No, gsf, x->M, x->No);
        free(gq), free(gsf), free(gs);
    } else if (got) {
        int pre = 0;
        const lf_dtype out = g.d.dtype;
        const double bound = case_bound(c, r->dev, out, &pre);
        double *mag = x->mag, *m2 = NULL;
        if (pre) { /* cuBLASLt's epilogue on A.B rounded to the output type */
            m2 = malloc((size_t)(x->M * x->No) * sizeof *m2);
            for (int64_t i = 0; i < x->M * x->No; i++)
                m2[i] = x->mag[i] + 100 * x->ab[i];
            mag = m2;
        }
        int64_t at = 0;
        const double e = rows_err(got, x->ref, mag, x->M, x->No, x->step, out, &at);
        EXPECT(r, e < bound, "%s: err %.3g (bound %.3g) at [%lld, %lld]: got %.9g, float64 %.9g", info.name, e, bound,
               (long long)(at / x->No), (long long)(at % x->No), got[at], x->ref[at]);
        snprintf(r->note + strlen(r->note), sizeof r->note - strlen(r->note), " err %.2g < %.2g", e, bound);
        free(m2);
    }
    free(got);
    expect_untouched(r, &x->a, "a");
    expect_untouched(r, &x->b, "b");
    expect_untouched(r, &x->cin, "c");
    expect_untouched(r, &x->bias, "bias");
}

void run_gemm_case(case_run *proto, lf_rng *rng)
{
    const case_t *c = proto->c;
    gemm_ctx x = {.c = c, .M = c->m, .N = c->n, .K = c->k, .No = c->group ? c->n / 2 : c->n};
    const int fp8 = c->dt == LF_DTYPE_F8E4M3;
    if (fp8) {
        lf_status s = lf_fp8_supported(proto->dev);
        if (s != LF_OK) { /* the CPU: its reason, once for the case */
            EXPECT(proto, !case_gated_here, "a GPU with the gated kernel has FP8 GEMMs: %s", lf_last_error());
            case_skip(proto, "%s", lf_last_error());
            case_record(proto);
            return;
        }
        fp8_operands(rng, c, &x.a, &x.b, &x.hsa, &x.hsb);
    } else {
        operand_rand(&x.a, rng, c->dt, 2, (int64_t[]){x.M, x.K}, c->la);
        operand_rand(&x.b, rng, c->dt, 2, (int64_t[]){x.K, x.N}, c->lb);
    }
    if (c->bias)
        operand_rand(&x.bias, rng, c->bias_f32 ? LF_DTYPE_F32 : c->dt, 1, &x.N, LAY_ROW);
    /* d aligned to 16 bytes where a TMA kernel writes it (the gated kernels, FP8), else an odd pitch */
    const lf_dtype out = c->out_fp8 ? LF_DTYPE_F8E4M3 : fp8 ? LF_DTYPE_BF16 : c->dt;
    operand_poisoned(&x.d, out, x.M, x.No, c->group || fp8 ? POISON_ALIGNED : POISON_ODD);
    if (c->c_input) { /* C with d's row pitch and offset: CUDA reads it in d's layout */
        const lf_tensor *dv = x.d.hview;
        const int64_t ld = x.N + (dv->stride[0] - x.No), off = dv->offset;
        lf_tensor *buf = NULL, *v = NULL;
        OK(lf_tensor_empty(&buf, c->dt, 1, (int64_t[]){off + x.M * ld}, LF_DEVICE_CPU));
        OK(lf_tensor_fill(buf, NAN));
        OK(lf_tensor_as_strided(&v, buf, 2, (int64_t[]){x.M, x.N}, (int64_t[]){ld, 1}, off));
        OK(lf_tensor_fill_uniform(v, rng, -1, 1));
        x.cin.hbuf = buf, x.cin.hview = v, x.cin.v = to_f64(v);
    }
    if (c->out_fp8) { /* the scales' padding rows are written too (1) */
        int64_t ss[2];
        lf_scale_shape(LF_SCALE_1X128, x.M, x.No, ss);
        operand_poisoned(&x.dsc, LF_DTYPE_F32, ss[0], ss[1], POISON_DENSE);
    }
    int up = operand_upload(proto, &x.a, proto->dev) && operand_upload(proto, &x.b, proto->dev);
    up = up && (!c->bias || operand_upload(proto, &x.bias, proto->dev)) &&
         (!c->c_input || operand_upload(proto, &x.cin, proto->dev));
    if (up && fp8)
        up = case_ok(proto, lf_tensor_to_device(&x.dsa, x.hsa, proto->dev), "scales") &&
             case_ok(proto, lf_tensor_to_device(&x.dsb, x.hsb, proto->dev), "scales");
    /* the reference, once for every variant */
    const int64_t n_out = x.M * x.No;
    x.step = ref_step(x.M, (double)x.M * (double)x.N * (double)x.K);
    if (up && c->out_fp8) {
        x.rq = malloc((size_t)n_out);
        x.rs = malloc((size_t)lf_scale_count(LF_SCALE_1X128, x.M, x.No) * sizeof *x.rs);
        lf_gemm h = describe(&x, 1);
        h.d = (lf_matrix){x.rq, LF_DTYPE_F8E4M3, x.M, x.No, x.No, 1};
        h.ep.d_scale = x.rs;
        up = case_ok(proto, lf_gemm_reference(&h), "lf_gemm_reference");
    } else if (up) {
        x.ref = calloc((size_t)n_out, sizeof *x.ref);
        x.mag = calloc((size_t)n_out, sizeof *x.mag);
        x.ab = calloc((size_t)n_out, sizeof *x.ab);
        ref_gemm rg = {.M = x.M,
                       .N = x.N,
                       .K = x.K,
                       .G = c->group,
                       .A = x.a.v,
                       .B = x.b.v,
                       .C = c->c_input ? x.cin.v : NULL,
                       .alpha = c->alpha,
                       .beta = c->beta,
                       .bias = c->bias ? x.bias.v : NULL,
                       .act = c->act,
                       .step = x.step};
        if (fp8) {
            rg.sa = lf_tensor_data(x.hsa), rg.sb = lf_tensor_data(x.hsb);
            rg.blockwise = c->scale != LF_SCALE_ROWS;
        }
        ref_gemm_run(&rg, x.ref, x.mag, x.ab);
    }
    if (up)
        case_each_variant(proto, gemm_run, &x);
    else
        case_record(proto);
    operand_free(&x.a), operand_free(&x.b), operand_free(&x.cin), operand_free(&x.bias), operand_free(&x.d);
    operand_free(&x.dsc);
    lf_tensor_free(x.hsa), lf_tensor_free(x.hsb), lf_tensor_free(x.dsa), lf_tensor_free(x.dsb);
    free(x.ref), free(x.mag), free(x.ab), free(x.rq), free(x.rs);
}
