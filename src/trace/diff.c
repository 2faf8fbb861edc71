/* Per-step profiles of a trace and the diff of two: the blog's eager-versus-compiled reading
 * (which kernels vanished, which appeared, which stayed byte-identical, what the CPU stopped
 * doing) done by the program. Layer: trace/. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"

/* A list of names in first-seen order with an index over it, so adding is O(1). */
typedef struct name_list {
    lf_name_count **list;
    int64_t *n, cap;
    lf_strmap index;
} name_list;

/* Add one occurrence of name (time ns); 0 when memory ran out. */
static int count_name(name_list *l, const char *name, double ns)
{
    lf_strmap_entry *e = lf_strmap_get(&l->index, name, 0);
    if (!e)
        return 0;
    if (e->val >= 0) {
        (*l->list)[e->val].per_step += 1;
        (*l->list)[e->val].ns_per_step += ns;
        return 1;
    }
    if (*l->n == l->cap) {
        int64_t c = l->cap ? 2 * l->cap : 32;
        lf_name_count *g = realloc(*l->list, (size_t)c * sizeof *g);
        if (!g)
            return 0;
        *l->list = g;
        l->cap = c;
    }
    e->val = *l->n;
    (*l->list)[(*l->n)++] = (lf_name_count){name, 1, ns};
    return 1;
}

lf_status lf_step_profile_build(const lf_trace *t, lf_step_profile *out)
{
    LF_CHECK_PTR(t, "lf_step_profile_build", "t");
    LF_CHECK_PTR(out, "lf_step_profile_build", "out");
    memset(out, 0, sizeof *out);
    LF_TRY(lf_trace_one_process(t, "lf_step_profile_build"));
    LF_TRY(lf_trace_trust_count(t, &out->trust));
    lf_span *sp;
    int64_t steps, step_total;
    LF_TRY(lf_trace_step_spans(t, &sp, &steps, &step_total));
    double cpu_ns = (double)step_total;
    int64_t *when = lf_trace_launch_times(t);
    if (!when) {
        free(sp);
        return lf_fail(LF_ENOMEM, "lf_step_profile_build: out of memory");
    }
    name_list kl = {&out->kernels, &out->n_kernels, 0, {0}}, ol = {&out->ops, &out->n_ops, 0, {0}};
    if (!lf_strmap_init(&kl.index, 64) || !lf_strmap_init(&ol.index, 64)) {
        lf_strmap_free(&kl.index);
        free(sp), free(when);
        return lf_fail(LF_ENOMEM, "lf_step_profile_build: out of memory");
    }
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    double launches = 0, occupancy = 0, dev_ns = 0, nk = 0, no = 0;
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if (e->dur_ns < 0)
            continue;
        if (steps && !lf_span_contains(sp, steps, when[i]))
            continue; /* device work by its launch time, host events by their start */
        int ok = 1;
        if (e->cat == LF_TC_KERNEL || e->cat == LF_TC_MEMCPY || e->cat == LF_TC_MEMSET) {
            ok = count_name(&kl, e->name, (double)e->dur_ns);
            dev_ns += (double)e->dur_ns;
            nk += e->cat == LF_TC_KERNEL; /* memcpy and memset: device work, not kernels */
        } else if (e->cat == LF_TC_CPU_OP) {
            ok = count_name(&ol, e->name, (double)e->dur_ns);
            no++;
        } else if (e->cat == LF_TC_RUNTIME || e->cat == LF_TC_DRIVER) {
            launches += strstr(e->name, "Launch") != NULL;
            occupancy += strstr(e->name, "Occupancy") != NULL;
        }
        if (!ok) {
            free(sp), free(when);
            lf_strmap_free(&kl.index), lf_strmap_free(&ol.index);
            lf_step_profile_free(out);
            return lf_fail(LF_ENOMEM, "lf_step_profile_build: out of memory");
        }
        if (!steps && !lf_trace_cat_is_device(e->cat)) {
            lo = e->ts_ns < lo ? e->ts_ns : lo;
            hi = e->ts_ns + e->dur_ns > hi ? e->ts_ns + e->dur_ns : hi;
        }
    }
    free(sp), free(when);
    lf_strmap_free(&kl.index), lf_strmap_free(&ol.index);
    if (!steps) {
        steps = 1;
        cpu_ns = hi > lo ? (double)(hi - lo) : 0;
    }
    double s = (double)steps;
    for (int64_t i = 0; i < out->n_kernels; i++)
        out->kernels[i].per_step /= s, out->kernels[i].ns_per_step /= s;
    for (int64_t i = 0; i < out->n_ops; i++)
        out->ops[i].per_step /= s, out->ops[i].ns_per_step /= s;
    out->steps = steps;
    out->launches_per_step = launches / s;
    out->occupancy_per_step = occupancy / s;
    out->cpu_ns_per_step = cpu_ns / s;
    out->device_ns_per_step = dev_ns / s;
    out->kernels_per_step = nk / s;
    out->ops_per_step = no / s;
    return LF_OK;
}

void lf_step_profile_free(lf_step_profile *p)
{
    if (!p)
        return;
    free(p->kernels);
    free(p->ops);
    p->kernels = p->ops = NULL;
    p->n_kernels = p->n_ops = 0;
}

/* --- text --- */

#define put lf_sbuf_printf

/* One list's names indexed, for the other list's lookups. */
static int index_names(lf_strmap *m, const lf_name_count *l, int64_t n)
{
    if (!lf_strmap_init(m, n))
        return 0;
    for (int64_t i = 0; i < n; i++) {
        lf_strmap_entry *e = lf_strmap_get(m, l[i].name, 0);
        if (!e)
            return 0;
        if (e->val < 0)
            e->val = i;
    }
    return 1;
}

static const lf_name_count *find(const lf_strmap *m, const lf_name_count *l, const char *name)
{
    const lf_strmap_entry *e = lf_strmap_find(m, name, 0);
    return e ? &l[e->val] : NULL;
}

typedef enum { GONE, NEW, SAME } change;

/* A name of either profile: x its count in A, y in B (NULL where it has none). */
typedef struct change_item {
    const lf_name_count *x, *y;
    change ch;
} change_item;

/* The names of la not in lb (GONE) or in both (SAME), in la's order, then those of lb not in la
 * (NEW), in lb's; *n of them. NULL when memory ran out. */
static change_item *list_changes(const lf_name_count *la, int64_t na, const lf_name_count *lb, int64_t nb, int64_t *n)
{
    lf_strmap ia = {0}, ib = {0};
    change_item *c = malloc((size_t)(na + nb + 1) * sizeof *c);
    *n = 0;
    if (c && index_names(&ia, la, na) && index_names(&ib, lb, nb)) {
        for (int64_t i = 0; i < na; i++) {
            const lf_name_count *y = find(&ib, lb, la[i].name);
            c[(*n)++] = (change_item){&la[i], y, y ? SAME : GONE};
        }
        for (int64_t i = 0; i < nb; i++)
            if (!find(&ia, la, lb[i].name))
                c[(*n)++] = (change_item){NULL, &lb[i], NEW};
    } else {
        free(c);
        c = NULL;
    }
    lf_strmap_free(&ia), lf_strmap_free(&ib);
    return c;
}

static const char *const change_names[] = {"vanished", "appeared", "stayed"};

/* Two step profiles side by side: their device work's and CPU ops' changes, counted. */
typedef struct diff {
    const lf_step_profile *a, *b;
    change_item *k, *op; /* device work, CPU ops */
    int64_t nk, nop;
    int k_gone, k_new, k_same, o_gone, o_new;
} diff;

static const char *name_of(const change_item *c)
{
    return (c->x ? c->x : c->y)->name;
}

/* The diff as one JSON object (names whole). */
static void diff_json(const diff *d, lf_sbuf *o)
{
    const lf_step_profile *a = d->a, *b = d->b;
    put(o, "{\"steps\": [%lld, %lld], \"kernels_per_step\": [%g, %g], \"cpu_ops_per_step\": [%g, %g], ",
        (long long)a->steps, (long long)b->steps, a->kernels_per_step, b->kernels_per_step, a->ops_per_step,
        b->ops_per_step);
    put(o, "\"launches_per_step\": [%g, %g], \"occupancy_queries_per_step\": [%g, %g], ", a->launches_per_step,
        b->launches_per_step, a->occupancy_per_step, b->occupancy_per_step);
    put(o, "\"cpu_us_per_step\": [%.3f, %.3f], \"device_us_per_step\": [%.3f, %.3f],\n \"kernels\": [",
        a->cpu_ns_per_step / 1e3, b->cpu_ns_per_step / 1e3, a->device_ns_per_step / 1e3, b->device_ns_per_step / 1e3);
    for (int64_t i = 0; i < d->nk; i++) {
        const lf_name_count *x = d->k[i].x, *y = d->k[i].y;
        put(o, "%s\n  {\"name\": ", i ? "," : "");
        lf_sbuf_json_str(o, name_of(&d->k[i]));
        put(o, ", \"change\": \"%s\", \"per_step\": [%g, %g], \"us_per_step\": [%.3f, %.3f]%s}",
            change_names[d->k[i].ch], x ? x->per_step : 0, y ? y->per_step : 0, x ? x->ns_per_step / 1e3 : 0,
            y ? y->ns_per_step / 1e3 : 0,
            d->k[i].ch == SAME && x->per_step == y->per_step ? ", \"same_work\": true" : "");
    }
    put(o, "],\n \"cpu_ops\": [");
    for (int64_t i = 0; i < d->nop; i++) {
        const lf_name_count *x = d->op[i].x, *y = d->op[i].y;
        const change ch = d->op[i].ch;
        put(o, "%s\n  {\"name\": ", i ? "," : "");
        lf_sbuf_json_str(o, name_of(&d->op[i]));
        put(o, ", \"change\": \"%s\", \"per_step\": [%g, %g]}",
            ch == GONE  ? "removed"
            : ch == NEW ? "added"
                        : "stayed",
            x ? x->per_step : 0, y ? y->per_step : 0);
    }
    char ta[640], tb[640];
    lf_trace_trust_json(&a->trust, ta, sizeof ta);
    lf_trace_trust_json(&b->trust, tb, sizeof tb);
    put(o, "],\n \"trust\": [%s, %s]}\n", ta, tb);
}

/* The per-step numbers of A and B, a line each. */
static void put_per_step(const diff *d, lf_sbuf *o)
{
    const lf_step_profile *a = d->a, *b = d->b;
    char t1[32], t2[32];
    put(o, "%-30s %14s %14s\n", "per step", "A", "B");
    put(o, "%-30s %14g %14g\n", "kernels", a->kernels_per_step, b->kernels_per_step);
    put(o, "%-30s %14g %14g\n", "CPU ops", a->ops_per_step, b->ops_per_step);
    put(o, "%-30s %14g %14g\n", "launches", a->launches_per_step, b->launches_per_step);
    put(o, "%-30s %14g %14g\n", "occupancy queries", a->occupancy_per_step, b->occupancy_per_step);
    put(o, "%-30s %14s %14s\n", "CPU time (step wall time)", lf_fmt_time(t1, sizeof t1, a->cpu_ns_per_step),
        lf_fmt_time(t2, sizeof t2, b->cpu_ns_per_step));
    put(o, "%-30s %14s %14s\n", "device time", lf_fmt_time(t1, sizeof t1, a->device_ns_per_step),
        lf_fmt_time(t2, sizeof t2, b->device_ns_per_step));
}

/* Each piece of device work, then each CPU op whose count changed; names last, cut to keep (the
 * device work's, then the ops'), so two kernels that differ late in a long name are cut apart. */
static void put_changes(const diff *d, lf_sbuf *o, const size_t *keep)
{
    char t1[32], t2[32];
    put(o, "\ndevice work (kernels, copies, memsets) per step: count A -> B, time A -> B, name\n");
    for (int64_t i = 0; i < d->nk; i++) {
        const lf_name_count *x = d->k[i].x, *y = d->k[i].y;
        /* in both traces, launched as often (stayed) or not (changed): the same kernel, its
         * launches' sizes may differ */
        const int more_or_less = d->k[i].ch == SAME && x->per_step != y->per_step;
        put(o, "  %-9s %5g -> %-5g %12s -> %-12s ", more_or_less ? "changed" : change_names[d->k[i].ch],
            x ? x->per_step : 0, y ? y->per_step : 0, lf_fmt_time(t1, sizeof t1, x ? x->ns_per_step : 0),
            lf_fmt_time(t2, sizeof t2, y ? y->ns_per_step : 0));
        lf_sbuf_term_str(o, name_of(&d->k[i]), keep[i]);
        put(o, "%s\n", d->k[i].ch == SAME ? "  (same kernel)" : "");
    }
    put(o, "CPU ops per step: count A -> B, name\n");
    for (int64_t i = 0; i < d->nop; i++) {
        const lf_name_count *x = d->op[i].x, *y = d->op[i].y;
        const change ch = d->op[i].ch;
        if (ch == SAME && x->per_step == y->per_step)
            continue;
        put(o, "  %-9s %5g -> %-5g ",
            ch == GONE  ? "removed"
            : ch == NEW ? "added"
                        : "changed",
            x ? x->per_step : 0, y ? y->per_step : 0);
        lf_sbuf_term_str(o, name_of(&d->op[i]), keep[d->nk + i]);
        put(o, "\n");
    }
}

/* The paragraph a person would write. */
static void put_summary(const diff *d, lf_sbuf *o)
{
    const lf_step_profile *a = d->a, *b = d->b;
    put(o, "\nIn summary: B runs %g kernel%s per step where A ran %g", b->kernels_per_step,
        b->kernels_per_step == 1 ? "" : "s", a->kernels_per_step);
    if (d->k_gone || d->k_new)
        put(o, " (%d vanished, %d appeared)", d->k_gone, d->k_new);
    /* a kernel's name carries its work (docs/design.md): the same name is the same work a launch,
     * and the same work a step only where it is launched as often */
    int recounted = 0;
    for (int64_t i = 0; i < d->nk; i++)
        recounted += d->k[i].ch == SAME && d->k[i].x->per_step != d->k[i].y->per_step;
    const int same = d->k_same - recounted;
    put(o, "; %d piece%s of device work kept %s exact name%s and count, so %s the same work", same,
        same == 1 ? "" : "s", same == 1 ? "its" : "their", same == 1 ? "" : "s", same == 1 ? "it does" : "they do");
    if (recounted)
        put(o, "; %d kept %s name but ran another number of times per step", recounted,
            recounted == 1 ? "its" : "their");
    put(o, ". ");
    put(o, "The CPU side went from %g to %g ops per step", a->ops_per_step, b->ops_per_step);
    if (d->o_gone || d->o_new)
        put(o, " (%d kinds of op removed, %d added)", d->o_gone, d->o_new);
    put(o, " and from %g to %g launches. ", a->launches_per_step, b->launches_per_step);
    double dd = b->device_ns_per_step - a->device_ns_per_step, dc = b->cpu_ns_per_step - a->cpu_ns_per_step;
    char d1[32], d2[32], d3[32], c1[32], c2[32], c3[32];
    put(o, "Device time per step %s by %s (%s -> %s); CPU time per step %s by %s (%s -> %s).\n",
        dd <= 0 ? "fell" : "rose", lf_fmt_time(d1, sizeof d1, dd < 0 ? -dd : dd),
        lf_fmt_time(d2, sizeof d2, a->device_ns_per_step), lf_fmt_time(d3, sizeof d3, b->device_ns_per_step),
        dc <= 0 ? "fell" : "rose", lf_fmt_time(c1, sizeof c1, dc < 0 ? -dc : dc),
        lf_fmt_time(c2, sizeof c2, a->cpu_ns_per_step), lf_fmt_time(c3, sizeof c3, b->cpu_ns_per_step));
}

/* The diff as text: names as PyTorch's table cuts them (55 characters), wider where two would
 * look alike, made safe for a terminal (--json has them whole). 0 when memory ran out. */
static int diff_text(const diff *d, lf_sbuf *o)
{
    const char **names = malloc((size_t)(d->nk + d->nop + 1) * sizeof *names);
    size_t *keep = malloc((size_t)(d->nk + d->nop + 1) * sizeof *keep);
    if (!names || !keep) {
        free(names), free(keep);
        return 0;
    }
    for (int64_t i = 0; i < d->nk; i++)
        names[i] = name_of(&d->k[i]);
    for (int64_t i = 0; i < d->nop; i++)
        names[d->nk + i] = name_of(&d->op[i]);
    if (!lf_term_keeps(names, d->nk, LF_TERM_NAME_KEEP, keep) ||
        !lf_term_keeps(names + d->nk, d->nop, LF_TERM_NAME_KEEP, keep + d->nk))
        o->oom = 1;
    put_per_step(d, o);
    put_changes(d, o, keep);
    put_summary(d, o);
    free(names), free(keep);
    return 1;
}

lf_status lf_trace_diff(const lf_step_profile *a, const lf_step_profile *b, int as_json, char **text)
{
    LF_CHECK_PTR(a, "lf_trace_diff", "a");
    LF_CHECK_PTR(b, "lf_trace_diff", "b");
    LF_CHECK_PTR(text, "lf_trace_diff", "text");
    *text = NULL;
    diff d = {.a = a, .b = b};
    d.k = list_changes(a->kernels, a->n_kernels, b->kernels, b->n_kernels, &d.nk);
    d.op = list_changes(a->ops, a->n_ops, b->ops, b->n_ops, &d.nop);
    lf_sbuf o = {0};
    if (!d.k || !d.op) {
        o.oom = 1;
    } else {
        for (int64_t i = 0; i < d.nk; i++)
            d.k_gone += d.k[i].ch == GONE, d.k_new += d.k[i].ch == NEW, d.k_same += d.k[i].ch == SAME;
        for (int64_t i = 0; i < d.nop; i++)
            d.o_gone += d.op[i].ch == GONE, d.o_new += d.op[i].ch == NEW;
        if (as_json)
            diff_json(&d, &o);
        else if (!diff_text(&d, &o))
            o.oom = 1;
        char trust[640];
        for (int side = 0; side < 2 && !as_json; side++) { /* what of A or B could not be trusted */
            lf_trace_trust_line(side ? &b->trust : &a->trust, trust, sizeof trust);
            if (trust[0])
                lf_sbuf_printf(&o, "%s %s\n", side ? "B" : "A", trust);
        }
    }
    free(d.k), free(d.op);
    if (o.oom) {
        free(o.p);
        return lf_fail(LF_ENOMEM, "lf_trace_diff: out of memory");
    }
    *text = o.p;
    return LF_OK;
}
