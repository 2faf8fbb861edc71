/* The lf_trace container: events, a string arena, track names and header facts.
 * Layer: trace/. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"

static const char *const cat_names[LF_TC_COUNT] = {
    "cpu_op",     "user_annotation",     "cuda_runtime", "cuda_driver",       "kernel",          "gpu_memcpy",
    "gpu_memset", "gpu_user_annotation", "overhead",     "cpu_instant_event", "python_function", "other",
};

const char *lf_trace_cat_name(lf_trace_cat c)
{
    return (unsigned)c < LF_TC_COUNT ? cat_names[c] : "other";
}

int lf_trace_cat_is_device(lf_trace_cat c)
{
    return c == LF_TC_KERNEL || c == LF_TC_MEMCPY || c == LF_TC_MEMSET || c == LF_TC_GPU_ANNOTATION;
}

lf_status lf_trace_create(lf_trace **out)
{
    LF_CHECK_PTR(out, "lf_trace_create", "out");
    lf_trace *t = calloc(1, sizeof *t);
    if (!t)
        return lf_fail(LF_ENOMEM, "lf_trace_create: out of memory");
    t->meta.device_label = "CUDA";
    t->meta.process_name = "linfuse";
    t->meta.cpu_device_pid = -1;
    t->meta.rank = -1;
    *out = t;
    return LF_OK;
}

void lf_trace_free(lf_trace *t)
{
    if (!t)
        return;
    for (lf_arena_chunk *c = t->arena, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(t->ev);
    free(t->tracks);
    free(t);
}

const char *lf_trace_intern(lf_trace *t, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    lf_arena_chunk *c = t->arena;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 60000 ? n : 60000;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = t->arena;
        t->arena = c;
    }
    char *p = c->data + c->used;
    memcpy(p, s, n);
    c->used += n;
    return p;
}

/* Interned strings are compared by pointer; a NULL from a failed copy is an error. */
#define INTERN_OR_FAIL(dst, src)                                                  \
    do {                                                                          \
        if ((src) && !((dst) = lf_trace_intern(t, (src))))                        \
            return lf_fail(LF_ENOMEM, "lf_trace_add: out of memory for strings"); \
    } while (0)

lf_status lf_trace_add(lf_trace *t, const lf_trace_event *e)
{
    LF_CHECK_PTR(t, "lf_trace_add", "t");
    LF_CHECK_PTR(e, "lf_trace_add", "e");
    if (t->n == t->cap) {
        int64_t cap = t->cap ? 2 * t->cap : 1024;
        lf_trace_event *ev = realloc(t->ev, (size_t)cap * sizeof *ev);
        if (!ev)
            return lf_fail(LF_ENOMEM, "lf_trace_add: out of memory for %lld events", (long long)cap);
        t->ev = ev;
        t->cap = cap;
    }
    lf_trace_event c = *e;
    c.name = "";
    c.input_dims = c.input_types = c.input_strides = c.extra_args = c.stack = NULL;
    INTERN_OR_FAIL(c.name, e->name ? e->name : "");
    INTERN_OR_FAIL(c.input_dims, e->input_dims);
    INTERN_OR_FAIL(c.input_types, e->input_types);
    INTERN_OR_FAIL(c.input_strides, e->input_strides);
    INTERN_OR_FAIL(c.extra_args, e->extra_args);
    INTERN_OR_FAIL(c.stack, e->stack);
    t->ev[t->n++] = c;
    return LF_OK;
}

int64_t lf_trace_count(const lf_trace *t)
{
    return t ? t->n : 0;
}

const lf_trace_event *lf_trace_get(const lf_trace *t, int64_t i)
{
    return t && i >= 0 && i < t->n ? &t->ev[i] : NULL;
}

lf_trace_meta *lf_trace_meta_of(lf_trace *t)
{
    LF_PRECOND(t, "lf_trace_meta_of", "argument 't' is NULL");
    return &t->meta;
}
const lf_trace_meta *lf_trace_meta_get(const lf_trace *t)
{
    LF_PRECOND(t, "lf_trace_meta_get", "argument 't' is NULL");
    return &t->meta;
}

lf_status lf_trace_name_thread(lf_trace *t, int64_t pid, int64_t tid, const char *name)
{
    LF_CHECK_PTR(t, "lf_trace_name_thread", "t");
    LF_CHECK_PTR(name, "lf_trace_name_thread", "name");
    if (tid == LF_TRACK_PROCESS)
        return lf_fail(LF_EINVAL, "lf_trace_name_thread: tid %lld is reserved", (long long)tid);
    return lf_trace_name_track(t, pid, tid, name);
}

lf_status lf_trace_name_track(lf_trace *t, int64_t pid, int64_t tid, const char *name)
{
    if (t->n_tracks == t->cap_tracks) {
        int64_t cap = t->cap_tracks ? 2 * t->cap_tracks : 16;
        lf_track_name *tr = realloc(t->tracks, (size_t)cap * sizeof *tr);
        if (!tr)
            return lf_fail(LF_ENOMEM, "lf_trace_name_thread: out of memory");
        t->tracks = tr;
        t->cap_tracks = cap;
    }
    const char *n = lf_trace_intern(t, name);
    if (!n)
        return lf_fail(LF_ENOMEM, "lf_trace_name_thread: out of memory");
    t->tracks[t->n_tracks++] = (lf_track_name){pid, tid, n};
    return LF_OK;
}

/* --- launch times --- */

typedef struct ikey {
    int64_t key, val;
} ikey;

/* Open addressing over int64 keys (0 is "empty": ids are never 0). */
static int64_t *islot(ikey *tab, int64_t cap, int64_t key)
{
    uint64_t i = ((uint64_t)key * 0x9e3779b97f4a7c15ull) & (uint64_t)(cap - 1);
    while (tab[i].key && tab[i].key != key)
        i = (i + 1) & (uint64_t)(cap - 1);
    if (!tab[i].key) {
        tab[i].key = key;
        tab[i].val = INT64_MIN;
    }
    return &tab[i].val;
}

int64_t *lf_trace_launch_times(const lf_trace *t)
{
    int64_t cap = 16;
    while (cap < 2 * t->n + 16)
        cap *= 2;
    int64_t *ts = malloc((size_t)(t->n + 1) * sizeof *ts);
    ikey *by_corr = calloc((size_t)cap, sizeof *by_corr), *by_ext = calloc((size_t)cap, sizeof *by_ext);
    if (!ts || !by_corr || !by_ext) {
        free(ts), free(by_corr), free(by_ext);
        return NULL;
    }
    /* in a merged trace each rank counts its ids from 1: an id is its rank's (the event's pid) */
    const int merged = t->meta.merged_ranks > 0;
#define RANKED(e, id) (merged ? (int64_t)(((uint64_t)(e)->pid + 1) << 40 ^ (uint64_t)(id)) : (id))
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        if ((e->cat == LF_TC_RUNTIME || e->cat == LF_TC_DRIVER) && e->correlation)
            *islot(by_corr, cap, RANKED(e, e->correlation)) = e->ts_ns;
        if (e->cat == LF_TC_CPU_OP && e->ext_id) {
            int64_t *v = islot(by_ext, cap, RANKED(e, e->ext_id));
            if (*v == INT64_MIN)
                *v = e->ts_ns;
        }
    }
    for (int64_t i = 0; i < t->n; i++) {
        const lf_trace_event *e = &t->ev[i];
        ts[i] = e->ts_ns;
        if (!lf_trace_cat_is_device(e->cat))
            continue;
        int64_t v = e->correlation ? *islot(by_corr, cap, RANKED(e, e->correlation)) : INT64_MIN;
        if (v == INT64_MIN && e->ext_id)
            v = *islot(by_ext, cap, RANKED(e, e->ext_id));
#undef RANKED
        if (v != INT64_MIN)
            ts[i] = v;
    }
    free(by_corr), free(by_ext);
    return ts;
}

/* --- steps --- */

int lf_trace_is_step(const lf_trace_event *e)
{
    return e->cat == LF_TC_USER_ANNOTATION && !strncmp(e->name, "ProfilerStep#", 13);
}

int64_t lf_trace_step_number(const lf_trace_event *e)
{
    if (!lf_trace_is_step(e))
        return -1;
    char *end;
    const long long n = strtoll(e->name + 13, &end, 10);
    return end != e->name + 13 && !*end && n >= 0 ? n : -1;
}

static int by_lo(const void *a, const void *b)
{
    int64_t x = ((const lf_span *)a)->lo, y = ((const lf_span *)b)->lo;
    return (x > y) - (x < y);
}

lf_status lf_trace_step_spans(const lf_trace *t, lf_span **spans, int64_t *n, int64_t *total_ns)
{
    int64_t k = 0, total = 0;
    for (int64_t i = 0; i < t->n; i++)
        k += lf_trace_is_step(&t->ev[i]);
    lf_span *sp = malloc((size_t)(k + 1) * sizeof *sp);
    if (!sp)
        return lf_fail(LF_ENOMEM, "out of memory for %lld steps", (long long)k);
    k = 0;
    for (int64_t i = 0; i < t->n; i++)
        if (lf_trace_is_step(&t->ev[i])) {
            sp[k++] = (lf_span){t->ev[i].ts_ns, t->ev[i].ts_ns + t->ev[i].dur_ns};
            if (__builtin_add_overflow(total, t->ev[i].dur_ns, &total)) /* hostile durations: stop there */
                total = INT64_MAX;
        }
    qsort(sp, (size_t)k, sizeof *sp, by_lo);
    *spans = sp;
    *n = k;
    *total_ns = total;
    return LF_OK;
}

int lf_span_contains(const lf_span *s, int64_t n, int64_t ts)
{
    int64_t a = 0, b = n; /* the last span starting at or before ts */
    while (a < b) {
        int64_t mid = (a + b) / 2;
        if (s[mid].lo <= ts)
            a = mid + 1;
        else
            b = mid;
    }
    return a > 0 && ts <= s[a - 1].hi;
}

/* distributedInfo as Kineto writes it: JSON text, kept compact, with its rank and world size. */
lf_status lf_trace_set_distributed_info(lf_trace *t, const char *text)
{
    LF_CHECK_PTR(t, "lf_trace_set_distributed_info", "t");
    LF_CHECK_PTR(text, "lf_trace_set_distributed_info", "json");
    json_error_t err;
    json_t *v = json_loads(text, 0, &err);
    json_t *rk = json_object_get(v, "rank"), *ws_ = json_object_get(v, "world_size");
    lf_status s = LF_OK;
    if (!json_is_object(v) || !json_is_integer(rk) || !json_is_integer(ws_) || json_integer_value(rk) < 0 ||
        json_integer_value(ws_) <= json_integer_value(rk))
        s = lf_fail(LF_EINVAL, "lf_trace_set_distributed_info: not an object with a rank below its world_size: %.80s",
                    text);
    char *dumped = s == LF_OK ? json_dumps(v, 0) : NULL;
    if (s == LF_OK && !dumped)
        s = lf_fail(LF_ENOMEM, "lf_trace_set_distributed_info: out of memory");
    if (s == LF_OK) {
        lf_trace_meta *m = lf_trace_meta_of(t);
        m->distributed_info = lf_trace_intern(t, dumped);
        m->rank = json_integer_value(rk);
        m->world_size = json_integer_value(ws_);
    }
    free(dumped);
    json_decref(v);
    return s;
}

lf_status lf_trace_one_process(const lf_trace *t, const char *fn)
{
    if (!t->meta.merged_ranks)
        return LF_OK;
    return lf_fail(LF_EINVAL,
                   "%s: a merged trace of %lld ranks: its steps are each rank's, and taken as one they would "
                   "average what no rank ran; take one rank (lf_trace_of_rank) or the ranks' own traces",
                   fn, (long long)t->meta.merged_ranks);
}
