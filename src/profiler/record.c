/* Recording: the hooks the dispatcher and the allocator call while a session records, and
 * record_function ranges. This is the hot path: a thread-local lookup, two stamps, stores into
 * a preallocated chunk; no lock, no allocation but a chunk every 8192 events, no formatting.
 * Layer: profiler/. */
#include <string.h>

#include "profiler/prof_impl.h"

_Atomic(lf_profiler *) lf_prof_active;

lf_rec *lf_prof_open_rec(lf_profiler *p, int kind, const char *name, int op)
{
    lf_tbuf *b = lf_prof_thread_buf(p);
    if (!b)
        return NULL;
    if (b->depth >= LF_MAX_DEPTH) { /* deeper than we track: counted, and kept balanced */
        b->lost++;
        b->depth++;
        return NULL;
    }
    lf_rec *r = lf_prof_rec_new(b);
    if (!r) {
        b->open[b->depth++] = NULL;
        return NULL;
    }
    r->kind = (uint8_t)kind; /* every field an op or range uses, set once (no memset) */
    r->n_args = 0;
    r->device = 0;
    r->op = op;
    r->name = name;
    r->ext_id = lf_prof_next_id(b);
    r->flops = 0;
    r->u.args = NULL;
    r->t1 = -1;
    r->t0 = lf_prof_ticks();
    b->open[b->depth++] = r;
    lf_prof_publish(b);
    return r;
}

void lf_prof_close_rec(lf_profiler *p)
{
    lf_tbuf *b = lf_prof_thread_buf(p);
    if (!b || b->depth == 0)
        return;
    b->depth--;
    if (b->depth < LF_MAX_DEPTH && b->open[b->depth])
        b->open[b->depth]->t1 = lf_prof_ticks();
}

static void on_op_begin(void *user, lf_op_id op, int n_args, const lf_op_arg *args)
{
    lf_profiler *p = user;
    lf_rec *r = lf_prof_open_rec(p, REC_OP, lf_op_name(op), (int)op);
    if (p->source) /* device records will carry this op's id */
        p->source->push(r ? r->ext_id : 0);
    if (!r || !p->o.record_shapes)
        return;
    int n = n_args < LF_MAX_ARGS ? n_args : LF_MAX_ARGS;
    lf_rec_arg *a = lf_prof_arena_alloc(lf_prof_tls_buf, (size_t)n * sizeof *a);
    if (!a) {
        lf_prof_tls_buf->lost++;
        return;
    }
    for (int i = 0; i < n; i++) {
        const lf_tensor *t = args[i].t;
        a[i].kind = args[i].is_scalar ? 2 : t ? 1 : 0;
        a[i].ndim = t ? (int8_t)t->ndim : 0;
        a[i].dtype = t ? (int8_t)t->dtype : 0;
        for (int d = 0; t && d < t->ndim; d++)
            a[i].shape[d] = t->shape[d], a[i].stride[d] = t->stride[d];
    }
    r->u.args = a;
    r->n_args = (uint8_t)n;
}

static void on_op_end(void *user, lf_op_id op, lf_status s)
{
    (void)op, (void)s;
    lf_profiler *p = user;
    if (p->source)
        p->source->pop();
    lf_prof_close_rec(p);
}

static void on_kernel_begin(void *user, lf_device dev)
{
    (void)dev;
    lf_tbuf *b = lf_prof_thread_buf(user);
    if (b)
        b->kernel_t0 = lf_prof_ticks();
}

static void on_kernel_end(void *user, lf_device dev, const lf_kernel_info *info)
{
    lf_profiler *p = user;
    int64_t t1 = lf_prof_ticks();
    lf_tbuf *b = lf_prof_thread_buf(p);
    if (!b || !info)
        return;
    lf_rec *r = lf_prof_rec_new(b);
    const char *name = info->name; /* interned by the backend: kept by pointer */
    if (!r || !name) {
        b->lost++;
        return;
    }
    memset(r, 0, sizeof *r);
    r->kind = REC_KERNEL;
    r->name = name;
    r->t0 = b->kernel_t0;
    r->t1 = t1;
    r->u.k.corr = lf_prof_next_id(b); /* flow ids share the id space: unique either way */
    r->flops = info->flops;
    r->u.k.bytes = info->bytes;
    r->u.k.timing = info->timing;
    r->u.k.resolve = info->resolve;
    r->stream = (uint8_t)info->stream;
    r->device = (uint8_t)dev;
    lf_rec *owner = b->depth > 0 && b->depth <= LF_MAX_DEPTH ? b->open[b->depth - 1] : NULL;
    if (owner) {
        r->ext_id = owner->ext_id;
        if (p->o.with_flops)
            owner->flops += info->flops;
    }
    lf_prof_publish(b);
}

static void on_alloc(void *user, lf_device dev, const void *addr, int64_t bytes, int64_t total, int64_t reserved)
{
    lf_profiler *p = user;
    lf_tbuf *b = lf_prof_thread_buf(p);
    lf_rec *r = b ? lf_prof_rec_new(b) : NULL;
    if (!r) {
        if (b)
            b->lost++;
        return;
    }
    memset(r, 0, sizeof *r);
    r->kind = REC_MEM;
    r->device = (uint8_t)dev;
    r->name = "[memory]";
    r->t0 = r->t1 = lf_prof_ticks();
    r->u.m.bytes = bytes;
    r->u.m.total = total;
    r->u.m.reserved = reserved;
    r->u.m.addr = (int64_t)(intptr_t)addr;
    lf_prof_publish(b);
}

/* A note from the dispatcher (a fallback and its reason) is a user range in the trace. */
static void on_note_begin(void *user, const char *text)
{
    (void)user;
    (void)lf_prof_range_push(text);
}

static void on_note_end(void *user)
{
    (void)user;
    (void)lf_prof_range_pop();
}

static lf_op_observer observer; /* filled at start, points at the session */

void lf_prof_set_recording(lf_profiler *p, int on)
{
    if (on) {
        observer = (lf_op_observer){on_op_begin, on_op_end, on_kernel_begin, on_kernel_end, p, on_note_begin, on_note_end};
        lf_ops_set_observer(&observer);
        if (p->o.profile_memory)
            lf_tensor_set_alloc_observer(on_alloc, p);
    } else {
        lf_ops_set_observer(NULL);
        lf_tensor_set_alloc_observer(NULL, NULL);
    }
}

lf_status lf_prof_range_push(const char *name)
{
    lf_profiler *p = atomic_load_explicit(&lf_prof_active, memory_order_acquire);
    if (__builtin_expect(!p || p->state == ST_NONE, 1))
        return LF_OK;
    LF_CHECK_PTR(name, "lf_prof_range_push", "name");
    lf_tbuf *b = lf_prof_thread_buf(p);
    const char *copy = b ? lf_prof_arena_str(b, name) : NULL;
    if (!copy) {
        if (b)
            b->lost++;
        return LF_OK;
    }
    lf_prof_open_rec(p, REC_RANGE, copy, -1);
    return LF_OK;
}

lf_status lf_prof_range_pop(void)
{
    lf_profiler *p = atomic_load_explicit(&lf_prof_active, memory_order_acquire);
    if (__builtin_expect(!p || p->state == ST_NONE, 1))
        return LF_OK;
    lf_tbuf *b = lf_prof_thread_buf(p);
    if (b && b->depth > 0 && b->depth <= LF_MAX_DEPTH && b->open[b->depth - 1] &&
        b->open[b->depth - 1]->kind != REC_RANGE)
        return lf_fail(LF_EINVAL, "lf_prof_range_pop: the innermost open event is op %s, not a range",
                       b->open[b->depth - 1]->name);
    lf_prof_close_rec(p);
    return LF_OK;
}
