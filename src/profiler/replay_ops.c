/* A compiled plan replayed as one CUDA graph shown as the forward it stands for: the device source
 * reports every kernel of the launch under its op (lf::cuda_graph_replay); the plan told the
 * observer which op calls made each step (REC_STEPS), so its kernels, in the order they ran, are
 * put under those ops on the GPU, as PyTorch shows a record_function range there: a
 * gpu_user_annotation per op call over its kernels, whose External id the kernels carry. A launch
 * that ran other than one kernel a step (a library's split kernels) keeps its kernels as they are.
 * The kernels still lead to the launch by correlation, so the host's rows keep their device time.
 * Layer: profiler/. */
#include <stdlib.h>
#include <string.h>

#include "profiler/prof_impl.h"

typedef struct stashed {
    lf_trace_event e; /* name and extra_args copied: the source's are gone after its call */
    int64_t launch;   /* index into the launches */
} stashed;

struct lf_replay_stash {
    const lf_rec **launches; /* by ext_id */
    int64_t n;
    stashed *items;
    int64_t n_items, cap;
    int oom;
};

static int by_ext(const void *a, const void *b)
{
    const lf_rec *x = *(const lf_rec *const *)a, *y = *(const lf_rec *const *)b;
    return (x->ext_id > y->ext_id) - (x->ext_id < y->ext_id);
}

lf_replay_stash *lf_prof_replay_stash(const lf_rec *const *launches, int64_t n)
{
    if (n <= 0)
        return NULL;
    lf_replay_stash *s = calloc(1, sizeof *s);
    if (s && !(s->launches = malloc((size_t)n * sizeof *s->launches))) {
        free(s);
        s = NULL;
    }
    if (!s)
        return NULL;
    memcpy(s->launches, launches, (size_t)n * sizeof *s->launches);
    s->n = n;
    qsort(s->launches, (size_t)n, sizeof *s->launches, by_ext);
    return s;
}

static int64_t launch_of(const lf_replay_stash *s, int64_t ext)
{
    int64_t lo = 0, hi = s->n;
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (s->launches[mid]->ext_id < ext)
            lo = mid + 1;
        else
            hi = mid;
    }
    return ext && lo < s->n && s->launches[lo]->ext_id == ext ? lo : -1;
}

int lf_prof_replay_take(lf_replay_stash *s, const lf_trace_event *e)
{
    if (!s || s->oom || e->cat != LF_TC_KERNEL)
        return 0;
    const int64_t l = launch_of(s, e->ext_id);
    if (l < 0)
        return 0;
    if (s->n_items == s->cap) {
        const int64_t cap = s->cap ? 2 * s->cap : 256;
        stashed *v = realloc(s->items, (size_t)cap * sizeof *v);
        if (!v) {
            s->oom = 1;
            return 0;
        }
        s->items = v, s->cap = cap;
    }
    stashed *it = &s->items[s->n_items];
    it->e = *e;
    it->e.name = strdup(e->name ? e->name : "");
    it->e.extra_args = e->extra_args ? strdup(e->extra_args) : NULL;
    it->launch = l;
    if (!it->e.name || (e->extra_args && !it->e.extra_args)) {
        free((char *)it->e.name), free((char *)it->e.extra_args);
        s->oom = 1;
        return 0;
    }
    s->n_items++;
    return 1;
}

static int by_launch_time(const void *a, const void *b)
{
    const stashed *x = a, *y = b;
    if (x->launch != y->launch)
        return x->launch < y->launch ? -1 : 1;
    return (x->e.ts_ns > y->e.ts_ns) - (x->e.ts_ns < y->e.ts_ns);
}

/* One op call's span over its kernels, while its steps last. */
typedef struct open_call {
    lf_op_id op;
    int32_t call;
    int64_t ext, lo, hi, pid, tid;
} open_call;

static lf_status close_call(lf_trace *t, const open_call *c)
{
    lf_trace_event a = {.cat = LF_TC_GPU_ANNOTATION,
                        .name = lf_op_name(c->op),
                        .pid = c->pid,
                        .tid = c->tid,
                        .ts_ns = c->lo,
                        .dur_ns = c->hi - c->lo,
                        .ext_id = c->ext,
                        .device = c->pid,
                        .flow_ts = -1,
                        .flow_pid = -1,
                        .flow_tid = -1};
    return lf_trace_add(t, &a);
}

/* One launch's kernels (k of them, in the order they ran) under its steps' op calls. */
static lf_status under_ops(lf_trace *t, const lf_rec *launch, stashed *k, int64_t n)
{
    if (n != launch->u.s.n) { /* not one kernel a step: as they are */
        lf_status st = LF_OK;
        for (int64_t i = 0; i < n && st == LF_OK; i++)
            st = lf_trace_add(t, &k[i].e);
        return st;
    }
    open_call open[LF_REPLAY_DEPTH];
    int depth = 0;
    lf_status st = LF_OK;
    for (int64_t i = 0; i < n && st == LF_OK; i++) {
        const lf_replay_step *s = &launch->u.s.steps[i];
        lf_trace_event *e = &k[i].e;
        int same = 0;
        while (same < depth && same < s->n_ops && open[same].op == s->ops[same] && open[same].call == s->calls[same])
            same++;
        while (depth > same && st == LF_OK)
            st = close_call(t, &open[--depth]);
        for (; depth < s->n_ops; depth++)
            open[depth] =
                (open_call){s->ops[depth], s->calls[depth], lf_prof_next_id(), e->ts_ns, e->ts_ns, e->pid, e->tid};
        for (int d = 0; d < depth; d++)
            open[d].hi = e->ts_ns + e->dur_ns > open[d].hi ? e->ts_ns + e->dur_ns : open[d].hi;
        if (depth)
            e->ext_id = open[depth - 1].ext;
        if (st == LF_OK)
            st = lf_trace_add(t, e);
    }
    while (depth > 0 && st == LF_OK)
        st = close_call(t, &open[--depth]);
    return st;
}

lf_status lf_prof_replay_finish(lf_replay_stash *s, lf_trace *t)
{
    if (!s)
        return LF_OK;
    if (s->n_items)
        qsort(s->items, (size_t)s->n_items, sizeof *s->items, by_launch_time);
    lf_status st = s->oom ? lf_fail(LF_ENOMEM, "profiler: out of memory placing a graph's kernels") : LF_OK;
    for (int64_t i = 0, j; i < s->n_items && st == LF_OK; i = j) {
        for (j = i; j < s->n_items && s->items[j].launch == s->items[i].launch; j++)
            ;
        st = under_ops(t, s->launches[s->items[i].launch], s->items + i, j - i);
    }
    for (int64_t i = 0; i < s->n_items; i++)
        free((char *)s->items[i].e.name), free((char *)s->items[i].e.extra_args);
    free(s->items), free(s->launches);
    free(s);
    return st;
}
