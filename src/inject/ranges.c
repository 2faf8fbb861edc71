/* NVTX ranges from CUPTI's markers, laid out on their threads' tracks, and the stretches of time
 * that --capture-range and --steps keep. Layer: inject/. */
#include <stdlib.h>
#include <string.h>

#include "inject/inject_impl.h"

static int by_start(const void *a, const void *b)
{
    const lfc_rec *x = a, *y = b;
    return x->start != y->start ? (x->start < y->start ? -1 : 1) : 0;
}

static int same_domain(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

/* Pair starts and ends into ranges, in time order (qsort is not stable: markers of one instant
 * keep their order through the index tie-break below). */
static lf_status pair(lfc_rec *marks, int64_t n, int64_t last, lfi_range **out, int64_t *n_out)
{
    lfi_range *r = malloc((size_t)(n ? n : 1) * sizeof *r);
    int64_t *open = malloc((size_t)(n ? n : 1) * sizeof *open), n_open = 0, k = 0;
    if (!r || !open) {
        free(r), free(open);
        return LF_ENOMEM;
    }
    for (int64_t i = 0; i < n; i++) {
        const lfc_rec *m = &marks[i];
        if (m->mark == LFC_MARK_START) {
            r[k] = (lfi_range){m->name ? m->name : "", m->domain, m->pid, m->tid, m->start, -1, 0, 0, -1};
            open[n_open++] = k;
            /* the id that pairs it: kept in ext until the ranges are laid out */
            r[k++].ext = m->corr;
            continue;
        }
        if (m->mark != LFC_MARK_END)
            continue;
        int64_t hit = -1; /* the open range with this id, else the thread's latest in the domain */
        for (int64_t j = n_open - 1; j >= 0 && hit < 0; j--)
            if (m->corr && r[open[j]].ext == (int64_t)m->corr)
                hit = j;
        for (int64_t j = n_open - 1; j >= 0 && hit < 0; j--)
            if (r[open[j]].pid == m->pid && r[open[j]].tid == m->tid && same_domain(r[open[j]].domain, m->domain))
                hit = j;
        if (hit < 0)
            continue; /* an end whose start came before recording began */
        r[open[hit]].end = m->start;
        memmove(open + hit, open + hit + 1, (size_t)(n_open - hit - 1) * sizeof *open);
        n_open--;
    }
    for (int64_t j = 0; j < n_open; j++)
        r[open[j]].end = last > r[open[j]].start ? last : r[open[j]].start;
    free(open);
    for (int64_t i = 0; i < k; i++)
        r[i].ext = 0;
    *out = r, *n_out = k;
    return LF_OK;
}

static int thread_order(const lfi_range *x, const lfi_range *y)
{
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return 0;
}

/* Parents first: by thread, start, then the longer first. */
static int by_thread_start(const void *a, const void *b)
{
    const lfi_range *x = a, *y = b;
    int c = thread_order(x, y);
    if (c)
        return c;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->end != y->end ? (x->end > y->end ? -1 : 1) : 0;
}

static int by_lane(const void *a, const void *b)
{
    const lfi_range *x = a, *y = b;
    int c = thread_order(x, y);
    if (c)
        return c;
    if (x->lane != y->lane)
        return x->lane < y->lane ? -1 : 1;
    return by_thread_start(a, b);
}

/* Each thread's ranges onto lanes: a range goes on the first lane where it nests inside what is
 * open there (ranges that overlap without nesting would be drawn wrongly on one track). */
static lf_status lay_out(lfi_range *r, int64_t n)
{
    qsort(r, (size_t)n, sizeof *r, by_thread_start);
    int64_t *stack = malloc((size_t)(n ? n : 1) * LFI_MAX_LANES * sizeof *stack);
    if (!stack)
        return LF_ENOMEM;
    int64_t depth[LFI_MAX_LANES] = {0};
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || thread_order(&r[i], &r[i - 1]))
            memset(depth, 0, sizeof depth);
        int lane = LFI_MAX_LANES - 1; /* the last lane takes what fits nowhere */
        for (int l = 0; l < LFI_MAX_LANES; l++) {
            int64_t *st = stack + (int64_t)l * n;
            while (depth[l] && r[st[depth[l] - 1]].end <= r[i].start)
                depth[l]--;
            if (!depth[l] || r[i].end <= r[st[depth[l] - 1]].end) {
                lane = l;
                break;
            }
        }
        r[i].lane = lane;
        stack[(int64_t)lane * n + depth[lane]++] = i;
    }
    free(stack);
    qsort(r, (size_t)n, sizeof *r, by_lane);
    int64_t *st = malloc((size_t)(n ? n : 1) * sizeof *st), d = 0;
    if (!st)
        return LF_ENOMEM;
    for (int64_t i = 0; i < n; i++) { /* parents, lane by lane */
        if (i == 0 || thread_order(&r[i], &r[i - 1]) || r[i].lane != r[i - 1].lane)
            d = 0;
        while (d && r[st[d - 1]].end < r[i].start)
            d--;
        r[i].parent = d ? st[d - 1] : -1;
        st[d++] = i;
    }
    free(st);
    return LF_OK;
}

lf_status lfi_ranges(lfc_rec *marks, int64_t n, int64_t last, lfi_range **out, int64_t *n_out)
{
    /* ties in time keep the order recorded: a stable sort through (start, index) */
    for (int64_t i = 0; i < n; i++)
        marks[i].graph_node_id = (uint64_t)i;
    qsort(marks, (size_t)n, sizeof *marks, by_start);
    for (int64_t i = 1; i < n; i++) /* insertion pass over equal starts only: usually none */
        for (int64_t j = i;
             j > 0 && marks[j].start == marks[j - 1].start && marks[j].graph_node_id < marks[j - 1].graph_node_id;
             j--) {
            lfc_rec t = marks[j];
            marks[j] = marks[j - 1], marks[j - 1] = t;
        }
    lf_status st = pair(marks, n, last, out, n_out);
    if (st == LF_OK && (st = lay_out(*out, *n_out)) != LF_OK) {
        free(*out);
        *out = NULL, *n_out = 0;
    }
    return st;
}

int64_t lfi_range_at(const lfi_range *r, int64_t n, uint32_t pid, uint32_t tid, int64_t t, int kept)
{
    int64_t best = -1;
    for (int lane = 0; lane < LFI_MAX_LANES; lane++) {
        lfi_range key = {.pid = pid, .tid = tid, .lane = lane, .start = t, .end = INT64_MIN};
        int64_t lo = 0, hi = n; /* the first range after (pid, tid, lane, t) */
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (by_lane(&r[mid], &key) <= 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        int64_t i = lo - 1;
        if (i < 0 || r[i].pid != pid || r[i].tid != tid || r[i].lane != lane)
            continue;
        while (i >= 0 && (r[i].end < t || (kept && !r[i].ext)))
            i = r[i].parent;
        if (i >= 0 && (best < 0 || r[i].start > r[best].start))
            best = i;
    }
    return best;
}

static int by_lo(const void *a, const void *b)
{
    const lfi_span *x = a, *y = b;
    return x->lo != y->lo ? (x->lo < y->lo ? -1 : 1) : 0;
}

int lfi_spans_of(const lfi_range *r, int64_t n, int (*keep)(const lfi_range *r, const void *ctx), const void *ctx,
                 lfi_spans *out)
{
    out->n = 0;
    if (!(out->v = malloc((size_t)(n ? n : 1) * sizeof *out->v)))
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (keep(&r[i], ctx))
            out->v[out->n++] = (lfi_span){r[i].start, r[i].end};
    qsort(out->v, (size_t)out->n, sizeof *out->v, by_lo);
    int64_t k = 0;
    for (int64_t i = 0; i < out->n; i++) {
        if (k && out->v[i].lo <= out->v[k - 1].hi) {
            if (out->v[i].hi > out->v[k - 1].hi)
                out->v[k - 1].hi = out->v[i].hi;
        } else {
            out->v[k++] = out->v[i];
        }
    }
    out->n = k;
    return 1;
}

int lfi_spans_meet(lfi_spans *a, const lfi_spans *b)
{
    lfi_span *v = malloc((size_t)(a->n + b->n + 1) * sizeof *v);
    if (!v)
        return 0;
    int64_t i = 0, j = 0, k = 0;
    while (i < a->n && j < b->n) {
        int64_t lo = a->v[i].lo > b->v[j].lo ? a->v[i].lo : b->v[j].lo;
        int64_t hi = a->v[i].hi < b->v[j].hi ? a->v[i].hi : b->v[j].hi;
        if (lo <= hi)
            v[k++] = (lfi_span){lo, hi};
        if (a->v[i].hi < b->v[j].hi)
            i++;
        else
            j++;
    }
    free(a->v);
    a->v = v, a->n = k;
    return 1;
}

int lfi_spans_has(const lfi_spans *s, int64_t t)
{
    int64_t lo = 0, hi = s->n; /* the first span starting after t */
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (s->v[mid].lo <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && t <= s->v[lo - 1].hi;
}
