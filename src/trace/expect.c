/* A guess about a trace, checked: kernels per step, kernels that must run and kernels that must
 * not, as a CI job states them (`linfuse trace expect`). Reads the per-step profile (diff.c) and
 * reports each difference as text for a terminal or as JSON. Layer: trace/. */
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"

struct lf_trace_expect {
    double kernels_per_step; /* < 0: any */
    int n;
    char **regex;         /* n copies */
    lf_expect_rule *rule; /* n */
    regex_t *re;          /* n compiled */
    int compiled;         /* how many of re are compiled (freed by lf_trace_expect_free) */
};

void lf_trace_expect_free(lf_trace_expect *e)
{
    if (!e)
        return;
    for (int k = 0; k < e->compiled; k++)
        regfree(&e->re[k]);
    for (int k = 0; e->regex && k < e->n; k++)
        free(e->regex[k]);
    free(e->regex), free(e->rule), free(e->re);
    free(e);
}

static lf_status check_opts(const lf_expect_opts *o)
{
    if (o->kernels_per_step < 0 && o->n_patterns == 0)
        return lf_fail(LF_EINVAL, "lf_trace_expect_create: a guess of nothing (no kernels per step, no pattern)");
    if (isnan(o->kernels_per_step) || o->kernels_per_step > 1e9)
        return lf_fail(LF_EINVAL, "lf_trace_expect_create: kernels per step must be a number from 0 to 1e9, not %g",
                       o->kernels_per_step);
    if (o->n_patterns < 0 || (o->n_patterns > 0 && !o->patterns))
        return lf_fail(LF_EINVAL, "lf_trace_expect_create: %d patterns at %p", o->n_patterns,
                       (const void *)o->patterns);
    for (int k = 0; k < o->n_patterns; k++) {
        if (!o->patterns[k].regex)
            return lf_fail(LF_EINVAL, "lf_trace_expect_create: pattern %d's regex is NULL", k);
        if (o->patterns[k].rule != LF_EXPECT_PRESENT && o->patterns[k].rule != LF_EXPECT_ABSENT)
            return lf_fail(LF_EINVAL, "lf_trace_expect_create: pattern %d's rule is %d", k, (int)o->patterns[k].rule);
    }
    return LF_OK;
}

lf_status lf_trace_expect_create(lf_trace_expect **out, const lf_expect_opts *o)
{
    LF_CHECK_PTR(out, "lf_trace_expect_create", "out");
    *out = NULL;
    LF_CHECK_PTR(o, "lf_trace_expect_create", "o");
    LF_TRY(check_opts(o));
    const size_t n = (size_t)o->n_patterns + 1; /* + 1: no zero-byte allocations */
    lf_trace_expect *e = calloc(1, sizeof *e);
    if (e) {
        e->kernels_per_step = o->kernels_per_step;
        e->n = o->n_patterns;
        e->regex = calloc(n, sizeof *e->regex);
        e->rule = calloc(n, sizeof *e->rule);
        e->re = calloc(n, sizeof *e->re);
    }
    if (!e || !e->regex || !e->rule || !e->re) {
        lf_trace_expect_free(e);
        return lf_fail(LF_ENOMEM, "lf_trace_expect_create: out of memory");
    }
    for (int k = 0; k < e->n; k++) {
        e->rule[k] = o->patterns[k].rule;
        if (!(e->regex[k] = strdup(o->patterns[k].regex))) {
            lf_trace_expect_free(e);
            return lf_fail(LF_ENOMEM, "lf_trace_expect_create: out of memory");
        }
        int err = regcomp(&e->re[k], e->regex[k], REG_EXTENDED | REG_NOSUB);
        if (err) {
            char msg[128];
            regerror(err, &e->re[k], msg, sizeof msg);
            lf_status st = lf_fail(LF_EINVAL, "bad regular expression '%.200s': %s", e->regex[k], msg);
            lf_trace_expect_free(e);
            return st;
        }
        e->compiled = k + 1;
    }
    *out = e;
    return LF_OK;
}

/* A check being written: the text (out) and, for JSON, the differences' list (diffs). */
typedef struct report {
    const lf_step_profile *p;
    int json;
    size_t *keep; /* text: how wide each kernel's name is kept */
    lf_sbuf out, diffs;
    int bad;
} report;

/* A name in a difference: whole for JSON (keep 0, escaped by the JSON writer), else cut at keep
 * and safe for a terminal. */
static void put_name(lf_sbuf *m, const char *name, size_t keep)
{
    if (keep)
        lf_sbuf_term_str(m, name, keep);
    else
        lf_sbuf_printf(m, "%s", name);
}

/* One difference (m, freed here): a line of the text, or a string of the JSON's list. */
static void put_difference(report *r, lf_sbuf *m)
{
    if (m->oom)
        r->out.oom = 1;
    if (r->json) {
        lf_sbuf_printf(&r->diffs, "%s", r->bad ? ", " : "");
        lf_sbuf_json_str(&r->diffs, m->p ? m->p : "");
    } else {
        lf_sbuf_printf(&r->out, "%s\n", m->p ? m->p : "");
    }
    r->bad++;
    free(m->p);
}

/* Pattern k against every kernel: each match of an absent one, or no match of a present one, is
 * a difference; after the latter the text lists the kernels there are. */
static void check_pattern(const lf_trace_expect *e, int k, report *r)
{
    const lf_step_profile *p = r->p;
    const char *pat = e->regex[k];
    int hits = 0;
    for (int64_t i = 0; i < p->n_kernels; i++) {
        if (regexec(&e->re[k], p->kernels[i].name, 0, NULL, 0) != 0)
            continue;
        hits++;
        if (e->rule[k] == LF_EXPECT_ABSENT) {
            lf_sbuf m = {0};
            lf_sbuf_printf(&m, "kernel '");
            put_name(&m, p->kernels[i].name, r->json ? 0 : r->keep[i]);
            lf_sbuf_printf(&m, "' matches --no-kernel '");
            put_name(&m, pat, r->json ? 0 : LF_TERM_NAME_KEEP);
            lf_sbuf_printf(&m, "'");
            put_difference(r, &m);
        }
    }
    if (e->rule[k] == LF_EXPECT_ABSENT || hits)
        return;
    lf_sbuf m = {0};
    lf_sbuf_printf(&m, "no kernel matches --kernel '");
    put_name(&m, pat, r->json ? 0 : LF_TERM_NAME_KEEP);
    lf_sbuf_printf(&m, "'");
    put_difference(r, &m);
    if (r->json)
        return;
    lf_sbuf_printf(&r->out, "the kernels are:\n");
    for (int64_t i = 0; i < p->n_kernels; i++) {
        lf_sbuf_printf(&r->out, "  ");
        lf_sbuf_term_str(&r->out, p->kernels[i].name, r->keep[i]);
        lf_sbuf_printf(&r->out, " (%g per step)\n", p->kernels[i].per_step);
    }
}

/* The report's last part: the JSON object around the differences, or the text's verdict. */
static void finish(report *r)
{
    const lf_step_profile *p = r->p;
    char trust[640];
    if (!r->json) {
        if (r->bad)
            lf_sbuf_printf(&r->out, "%d difference%s from the guess\n", r->bad, r->bad == 1 ? "" : "s");
        else
            lf_sbuf_printf(&r->out, "as expected: %g kernels per step over %lld steps\n", p->kernels_per_step,
                           (long long)p->steps);
        lf_trace_trust_line(&p->trust, trust, sizeof trust);
        if (trust[0])
            lf_sbuf_printf(&r->out, "%s\n", trust);
        return;
    }
    lf_sbuf_printf(&r->out,
                   "{\"matched\": %s, \"steps\": %lld, \"kernels_per_step\": %g, \"differences\": [%s], \"kernels\": [",
                   r->bad ? "false" : "true", (long long)p->steps, p->kernels_per_step, r->diffs.p ? r->diffs.p : "");
    for (int64_t i = 0; i < p->n_kernels; i++) {
        lf_sbuf_printf(&r->out, "%s{\"name\": ", i ? ", " : "");
        lf_sbuf_json_str(&r->out, p->kernels[i].name);
        lf_sbuf_printf(&r->out, ", \"per_step\": %g}", p->kernels[i].per_step);
    }
    lf_trace_trust_json(&p->trust, trust, sizeof trust);
    lf_sbuf_printf(&r->out, "], \"trust\": %s}\n", trust);
}

/* Each kernel's keep: names in text cut as PyTorch's table cuts them, wider where two would look
 * alike. 0 when memory ran out. */
static int name_keeps(const lf_step_profile *p, size_t *keep)
{
    const char **names = malloc((size_t)(p->n_kernels + 1) * sizeof *names);
    if (!names)
        return 0;
    for (int64_t i = 0; i < p->n_kernels; i++)
        names[i] = p->kernels[i].name;
    const int ok = lf_term_keeps(names, p->n_kernels, LF_TERM_NAME_KEEP, keep);
    free(names);
    return ok;
}

lf_status lf_trace_expect_check(const lf_trace_expect *e, const lf_trace *t, int json, char **text, int *differences)
{
    LF_CHECK_PTR(e, "lf_trace_expect_check", "e");
    LF_CHECK_PTR(t, "lf_trace_expect_check", "t");
    LF_CHECK_PTR(text, "lf_trace_expect_check", "text");
    LF_CHECK_PTR(differences, "lf_trace_expect_check", "differences");
    *text = NULL;
    *differences = 0;
    lf_step_profile p;
    LF_TRY(lf_step_profile_build(t, &p));
    report r = {.p = &p, .json = json};
    r.keep = malloc((size_t)(p.n_kernels + 1) * sizeof *r.keep);
    if (!r.keep || !name_keeps(&p, r.keep))
        r.out.oom = 1;
    if (e->kernels_per_step >= 0 && p.kernels_per_step != e->kernels_per_step) {
        lf_sbuf m = {0};
        lf_sbuf_printf(&m, "kernels per step: expected %g, the trace has %g over %lld steps", e->kernels_per_step,
                       p.kernels_per_step, (long long)p.steps);
        put_difference(&r, &m);
    }
    for (int k = 0; k < e->n && !r.out.oom; k++)
        check_pattern(e, k, &r);
    if (!r.out.oom)
        finish(&r);
    free(r.keep);
    free(r.diffs.p);
    lf_step_profile_free(&p);
    if (r.out.oom || r.diffs.oom) {
        free(r.out.p);
        return lf_fail(LF_ENOMEM, "lf_trace_expect_check: out of memory");
    }
    *text = r.out.p;
    *differences = r.bad;
    return LF_OK;
}
