/* What each kernel, copy and set of a trace belongs to, and the ranges drawn over them on the
 * GPU, as PyTorch draws a record_function range there (gpu_user_annotation: from the range's first
 * device work to its last, on each stream, with the range's External id). Work launched directly
 * belongs to the NVTX ranges open on its thread when it was launched. Work a CUDA graph replayed
 * belongs to the ranges open on the thread that captured its node, when it did (graph_map.h leads
 * the node back there, through instantiation and updates), once per replay: each replay of a range
 * is an instance of its own, with an External id its work and its GPU spans share, and the work
 * carries the call that made its node and the Python frames read then. Work whose node leads to no
 * record stays a plain replayed kernel, counted. Layer: inject/. */
#include <stdlib.h>
#include <string.h>

#include "capture/graph_map.h"
#include "inject/inject_impl.h"

enum { MAX_CHAIN = 32 };

/* One piece of device work under one range instance (range, replay): where it ran, and when. */
typedef struct span_item {
    int64_t range;
    uint32_t replay; /* the replaying call's correlation id; 0: launched directly */
    uint32_t device, stream;
    int64_t start, end;
} span_item;

struct lfi_attr {
    const lfi_range *ranges;
    int64_t n_ranges;
    lfc_graph_map *map;
    const lfc_rec **stacks; /* LFC_STACK records by correlation */
    int64_t n_stacks;
    /* (range, replay) -> External id of that instance, open addressing */
    uint64_t *keys;
    int64_t *exts;
    int64_t cap, used, next_ext;
    span_item *items;
    int64_t n_items, cap_items;
    int oom;
    lfi_attr_stats stats;
};

static int by_corr_rec(const void *a, const void *b)
{
    const lfc_rec *x = *(const lfc_rec *const *)a, *y = *(const lfc_rec *const *)b;
    return (x->corr > y->corr) - (x->corr < y->corr);
}

lfi_attr *lfi_attr_create(const lfc_rec *all, int64_t n, const lfi_range *ranges, int64_t n_ranges)
{
    lfi_attr *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->ranges = ranges, a->n_ranges = n_ranges;
    a->next_ext = n_ranges + 1; /* past every kept range's */
    a->map = lfc_map_build(all, n);
    int64_t ns = 0;
    for (int64_t i = 0; i < n; i++)
        ns += all[i].kind == LFC_STACK;
    a->stacks = malloc((size_t)(ns ? ns : 1) * sizeof *a->stacks);
    a->cap = 1024;
    a->keys = calloc((size_t)a->cap, sizeof *a->keys);
    a->exts = calloc((size_t)a->cap, sizeof *a->exts);
    if (!a->map || !a->stacks || !a->keys || !a->exts) {
        lfi_attr_free(a);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        if (all[i].kind == LFC_STACK)
            a->stacks[a->n_stacks++] = &all[i];
    if (a->n_stacks) /* (qsort of NULL, even of none, is undefined) */
        qsort(a->stacks, (size_t)a->n_stacks, sizeof *a->stacks, by_corr_rec);
    return a;
}

void lfi_attr_free(lfi_attr *a)
{
    if (!a)
        return;
    lfc_map_free(a->map);
    free(a->stacks), free(a->keys), free(a->exts), free(a->items);
    free(a);
}

const char *lfi_attr_stack(const lfi_attr *a, uint32_t corr)
{
    int64_t lo = 0, hi = a->n_stacks;
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (a->stacks[mid]->corr < corr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return corr && lo < a->n_stacks && a->stacks[lo]->corr == corr ? a->stacks[lo]->stack : NULL;
}

static int grow_keys(lfi_attr *a)
{
    const int64_t cap = 2 * a->cap;
    uint64_t *keys = calloc((size_t)cap, sizeof *keys);
    int64_t *exts = calloc((size_t)cap, sizeof *exts);
    if (!keys || !exts) {
        free(keys), free(exts);
        return 0;
    }
    for (int64_t i = 0; i < a->cap; i++) {
        if (!a->keys[i])
            continue;
        int64_t j = (int64_t)(a->keys[i] * 0x9e3779b97f4a7c15ull % (uint64_t)cap);
        while (keys[j])
            j = (j + 1) % cap;
        keys[j] = a->keys[i], exts[j] = a->exts[i];
    }
    free(a->keys), free(a->exts);
    a->keys = keys, a->exts = exts, a->cap = cap;
    return 1;
}

/* The External id of range `range`'s instance in replay `replay` (made on first ask); 0 when out
 * of memory. */
static int64_t instance_ext(lfi_attr *a, int64_t range, uint32_t replay)
{
    if (2 * (a->used + 1) > a->cap && !grow_keys(a)) {
        a->oom = 1;
        return 0;
    }
    const uint64_t key = ((uint64_t)(range + 1) << 32) | replay; /* never 0: 0 marks a free slot */
    int64_t j = (int64_t)(key * 0x9e3779b97f4a7c15ull % (uint64_t)a->cap);
    while (a->keys[j] && a->keys[j] != key)
        j = (j + 1) % a->cap;
    if (!a->keys[j])
        a->keys[j] = key, a->exts[j] = a->next_ext++, a->used++;
    return a->exts[j];
}

static void add_item(lfi_attr *a, const span_item *it)
{
    if (a->n_items == a->cap_items) {
        const int64_t cap = a->cap_items ? 2 * a->cap_items : 1024;
        span_item *v = realloc(a->items, (size_t)cap * sizeof *v);
        if (!v) {
            a->oom = 1;
            return;
        }
        a->items = v, a->cap_items = cap;
    }
    a->items[a->n_items++] = *it;
}

/* Work d under range `inner` and every range it nests in (kept ones only for direct launches):
 * one span item each, for the GPU's spans. */
static void add_chain(lfi_attr *a, const lfc_rec *d, int64_t inner, uint32_t replay)
{
    for (int64_t r = inner, k = 0; r >= 0 && k < MAX_CHAIN; r = a->ranges[r].parent, k++)
        if (replay || a->ranges[r].ext)
            add_item(a, &(span_item){r, replay, d->device, d->stream, d->start, d->end});
}

void lfi_attr_work(lfi_attr *a, const lfc_rec *d, const lfc_rec *call, lfi_work_info *out)
{
    *out = (lfi_work_info){0};
    const int64_t launched = call ? call->start : d->start;
    /* the kept range its launch was made in (a replay's: the one its cudaGraphLaunch was made in) */
    const int64_t at = call ? lfi_range_at(a->ranges, a->n_ranges, call->pid, call->tid, call->start, 1) : -1;
    out->ext = at >= 0 ? a->ranges[at].ext : 0;
    if (!d->graph_node_id) { /* launched directly: its call's ranges */
        out->stack = call ? lfi_attr_stack(a, call->corr) : NULL;
        if (at >= 0)
            add_chain(a, d, at, 0);
        return;
    }
    const int64_t dur = d->end > d->start ? d->end - d->start : 0;
    a->stats.replayed++, a->stats.replayed_ns += dur;
    const lfc_rec *node = lfc_map_origin(a->map, d->graph_node_id, launched);
    if (!node) { /* made before the collector started, or its record lost: counted, tied to its launch */
        a->stats.unknown++;
        out->replayed_unknown = 1;
        return;
    }
    out->captured = node;
    out->stack = node->stack;
    a->stats.framed_ns += node->stack ? dur : 0;
    const int64_t r = lfi_range_at(a->ranges, a->n_ranges, node->pid, node->tid, node->start, 0);
    if (r < 0) /* captured outside any range: tied to its launch */
        return;
    const uint32_t replay = call ? call->corr : d->corr ? d->corr : 1;
    out->ext = instance_ext(a, r, replay);
    out->range = a->ranges[r].name;
    a->stats.ranged_ns += dur;
    add_chain(a, d, r, replay);
}

static int by_instance(const void *x, const void *y)
{
    const span_item *a = x, *b = y;
    if (a->range != b->range)
        return a->range < b->range ? -1 : 1;
    if (a->replay != b->replay)
        return a->replay < b->replay ? -1 : 1;
    if (a->device != b->device)
        return a->device < b->device ? -1 : 1;
    if (a->stream != b->stream)
        return a->stream < b->stream ? -1 : 1;
    return (a->start > b->start) - (a->start < b->start);
}

static int same_span(const span_item *a, const span_item *b)
{
    return a->range == b->range && a->replay == b->replay && a->device == b->device && a->stream == b->stream;
}

lf_status lfi_attr_spans(lfi_attr *a, void (*emit)(void *ctx, const lfi_gpu_span *s), void *ctx)
{
    if (a->oom)
        return LF_ENOMEM;
    if (a->n_items)
        qsort(a->items, (size_t)a->n_items, sizeof *a->items, by_instance);
    for (int64_t i = 0, j; i < a->n_items; i = j) {
        const span_item *f = &a->items[i];
        int64_t hi = f->end;
        for (j = i; j < a->n_items && same_span(&a->items[j], f); j++)
            hi = a->items[j].end > hi ? a->items[j].end : hi;
        const lfi_range *r = &a->ranges[f->range];
        const lfi_gpu_span s = {.name = r->name,
                                .device = f->device,
                                .stream = f->stream,
                                .start = f->start,
                                .end = hi,
                                .ext = f->replay ? instance_ext(a, f->range, f->replay) : r->ext,
                                .replay = f->replay};
        emit(ctx, &s);
    }
    return a->oom ? LF_ENOMEM : LF_OK;
}

lfi_attr_stats lfi_attr_get_stats(const lfi_attr *a)
{
    return a->stats;
}
