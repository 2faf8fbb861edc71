/* The case table's pointwise ops: add and mul (strided, padded and broadcast operands), gelu both
 * ways and silu on strided inputs, and the fused gelu_mul / silu_mul, each against float64 loops;
 * act_mul also equal to the device's own act then mul, bit for bit (ops.h: the activation is
 * rounded to the dtype before the product). One kernel each, the output a new contiguous tensor on
 * the device, the inputs untouched. */
#include <stdlib.h>
#include <string.h>

#include "cases.h"

typedef struct pw_ctx {
    const case_t *c;
    int nd;
    int64_t shape[3], n;          /* the output's */
    operand a, b, gu;             /* gu: act_mul's (rows, 2 cols) buffer when g and u are its halves */
    lf_tensor *hg, *hu, *dg, *du; /* act_mul's g and u views (host, device) */
    double *ref, *mag;
} pw_ctx;

static lf_gelu_approx approx_of(lf_act act)
{
    return act == LF_ACT_GELU_ERF ? LF_GELU_ERF : LF_GELU_TANH;
}

static lf_status act_mul(lf_tensor **y, const case_t *c, const lf_tensor *g, const lf_tensor *u)
{
    return c->act == LF_ACT_SILU ? lf_silu_mul(y, g, u) : lf_gelu_mul(y, g, u, approx_of(c->act));
}

/* act(g) then mul on the device, as two ops */
static lf_status two_ops(lf_tensor **y, const case_t *c, const lf_tensor *g, const lf_tensor *u)
{
    lf_tensor *a = NULL;
    lf_status s = c->act == LF_ACT_SILU ? lf_silu(&a, g) : lf_gelu(&a, g, approx_of(c->act));
    if (s == LF_OK)
        s = lf_mul(y, a, u);
    lf_tensor_free(a);
    return s;
}

static lf_status call(const pw_ctx *x, lf_tensor **y)
{
    const case_t *c = x->c;
    switch (c->op) {
    case CASE_ADD:
        return lf_add(y, x->a.dview, x->b.dview);
    case CASE_MUL:
        return lf_mul(y, x->a.dview, x->b.dview);
    case CASE_GELU:
        return lf_gelu(y, x->a.dview, approx_of(c->act));
    case CASE_SILU:
        return lf_silu(y, x->a.dview);
    default:
        return act_mul(y, c, x->dg, x->du);
    }
}

static void pw_run(case_run *r, void *ctxp)
{
    pw_ctx *x = ctxp;
    const case_t *c = x->c;
    lf_tensor *y = NULL;
    kernel_log k;
    kernel_log_start(&k);
    lf_status s = call(x, &y);
    kernel_log_stop();
    if (!case_ok(r, s, case_op_name(c->op)))
        return;
    snprintf(r->note, sizeof r->note, "%s", k.last);
    EXPECT(r, k.n == 1, "%d kernels (last %s)", k.n, k.last);
    EXPECT(r,
           y->ndim == x->nd && !memcmp(y->shape, x->shape, (size_t)x->nd * sizeof *x->shape) && y->dtype == c->dt &&
               lf_tensor_device(y) == r->dev && lf_tensor_is_contiguous(y),
           "output: %d-D %s on %s%s", y->ndim, lf_dtype_name(y->dtype), lf_device_name(lf_tensor_device(y)),
           lf_tensor_is_contiguous(y) ? "" : ", not contiguous");
    lf_tensor *h = r->failed ? NULL : download(r, y);
    if (h) {
        double *got = to_f64(h);
        int64_t at = 0;
        const double bound = tol_for(c->dt), e = rows_err(got, x->ref, x->mag, 1, x->n, 1, c->dt, &at);
        EXPECT(r, e < bound, "err %.3g (bound %.3g) at %lld: got %.9g, float64 %.9g", e, bound, (long long)at, got[at],
               x->ref[at]);
        snprintf(r->note + strlen(r->note), sizeof r->note - strlen(r->note), " err %.2g < %.2g", e, bound);
        free(got);
    }
    if (h && c->op == CASE_ACT_MUL) { /* == the device's act then mul */
        lf_tensor *two = NULL, *h2 = NULL;
        if (case_ok(r, two_ops(&two, c, x->dg, x->du), "act then mul") && (h2 = download(r, two)))
            EXPECT(r, !memcmp(lf_tensor_data(h), lf_tensor_data(h2), (size_t)x->n * lf_dtype_size(c->dt)),
                   "%s differs from %s then mul", c->act == LF_ACT_SILU ? "silu_mul" : "gelu_mul", lf_act_name(c->act));
        lf_tensor_free(two), lf_tensor_free(h2);
    }
    lf_tensor_free(h), lf_tensor_free(y);
    expect_untouched(r, &x->a, "a");
    expect_untouched(r, &x->b, "b");
    expect_untouched(r, &x->gu, "g and u");
}

/* The float64 reference over the output's row-major elements. */
static void reference(pw_ctx *x)
{
    const case_t *c = x->c;
    const int64_t cols = x->shape[x->nd - 1], rows = x->shape[x->nd - 2];
    double *G = NULL, *U = NULL;
    if (c->op == CASE_ACT_MUL)
        G = to_f64(x->hg), U = to_f64(x->hu);
    for (int64_t i = 0; i < x->n; i++) {
        const int64_t j = i % cols, row = i / cols % rows;
        const double a = G ? G[i] : x->a.v[i];
        double b = 0;
        if (c->op == CASE_ADD || c->op == CASE_MUL)
            b = x->b.v[c->lb == LAY_BCAST_ROW ? j : c->lb == LAY_BCAST_COL ? row : i];
        switch (c->op) {
        case CASE_ADD:
            x->ref[i] = a + b, x->mag[i] = fabs(a) + fabs(b);
            break;
        case CASE_MUL:
            x->ref[i] = a * b, x->mag[i] = fabs(a * b);
            break;
        case CASE_ACT_MUL:
            x->ref[i] = lf_act_ref(c->act, a) * U[i], x->mag[i] = fabs(x->ref[i]);
            break;
        default:
            x->ref[i] = lf_act_ref(c->act, a), x->mag[i] = 1e-3 * fabs(a);
            break; /* test_ops' measure */
        }
    }
    free(G), free(U);
}

/* g and u: views of the device's copy of one (R, 2C) buffer, its two halves */
static int upload_halves(case_run *r, pw_ctx *x, lf_device dev)
{
    if (!operand_upload(r, &x->gu, dev))
        return 0;
    const lf_tensor *v = x->gu.dview;
    lf_status s = lf_tensor_as_strided(&x->dg, x->gu.dbuf, 2, x->shape, v->stride, v->offset);
    if (s == LF_OK)
        s = lf_tensor_as_strided(&x->du, x->gu.dbuf, 2, x->shape, v->stride, v->offset + x->c->n);
    EXPECT(r, s == LF_OK, "the halves' views: %s", s == LF_OK ? "" : lf_last_error());
    return s == LF_OK;
}

void run_pointwise_case(case_run *proto, lf_rng *rng)
{
    const case_t *c = proto->c;
    pw_ctx x = {.c = c, .nd = c->nd};
    if (c->nd == 3)
        x.shape[0] = c->batch, x.shape[1] = c->m, x.shape[2] = c->n;
    else
        x.shape[0] = c->m, x.shape[1] = c->n;
    x.n = c->batch * c->m * c->n;
    int up = 1;
    if (c->op == CASE_ACT_MUL && c->la == LAY_HALF) { /* the two halves of one (R, 2C) product */
        operand_rand(&x.gu, rng, c->dt, 2, (int64_t[]){c->m, 2 * c->n}, LAY_ROW);
        const lf_tensor *v = x.gu.hview;
        OK(lf_tensor_as_strided(&x.hg, x.gu.hbuf, 2, x.shape, v->stride, v->offset));
        OK(lf_tensor_as_strided(&x.hu, x.gu.hbuf, 2, x.shape, v->stride, v->offset + c->n));
        up = upload_halves(proto, &x, proto->dev);
    } else {
        operand_rand(&x.a, rng, c->dt, x.nd, x.shape, c->la);
        if (c->op == CASE_ADD || c->op == CASE_MUL || c->op == CASE_ACT_MUL) {
            const int64_t col[2] = {c->m, 1};
            if (c->lb == LAY_BCAST_ROW)
                operand_rand(&x.b, rng, c->dt, 1, &c->n, LAY_ROW);
            else if (c->lb == LAY_BCAST_COL)
                operand_rand(&x.b, rng, c->dt, 2, col, LAY_ROW);
            else
                operand_rand(&x.b, rng, c->dt, x.nd, x.shape, c->lb);
        }
        up = operand_upload(proto, &x.a, proto->dev) && (!x.b.hbuf || operand_upload(proto, &x.b, proto->dev));
        if (c->op == CASE_ACT_MUL) { /* g and u: handles of a and b's views */
            x.hg = x.a.hview, x.hu = x.b.hview, x.dg = x.a.dview, x.du = x.b.dview;
        }
    }
    x.ref = malloc((size_t)x.n * sizeof *x.ref);
    x.mag = malloc((size_t)x.n * sizeof *x.mag);
    reference(&x);
    if (up)
        case_each_variant(proto, pw_run, &x);
    else
        case_record(proto);
    if (c->op == CASE_ACT_MUL && c->la == LAY_HALF)
        lf_tensor_free(x.hg), lf_tensor_free(x.hu), lf_tensor_free(x.dg), lf_tensor_free(x.du);
    operand_free(&x.a), operand_free(&x.b), operand_free(&x.gu);
    free(x.ref), free(x.mag);
}
