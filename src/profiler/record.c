/* Recording: the hooks the dispatcher and the allocator call while a session runs, and
 * record_function ranges. This is the hot path: a thread-local stack, a slot count to say the
 * thread is inside (buffers.c), two stamps, stores into a preallocated chunk; no lock, no
 * allocation but a chunk every 8192 events, no formatting. The hooks stay installed for the
 * whole session, so every op's end meets its begin even when the schedule stops recording in
 * between; while it does not record they only keep the stack. Layer: profiler/. */
#include <string.h>

#include "profiler/prof_impl.h"

_Atomic(lf_profiler *) lf_prof_active;

lf_open *lf_prof_push(lf_profiler *p, uint8_t kind, const char *name, int op, int copy_name)
{
    lf_tls *t = &lf_prof_tls;
    if (t->depth >= LF_MAX_DEPTH) { /* deeper than we track: counted, and kept balanced */
        t->depth++;
        atomic_fetch_add(&p->lost, 1);
        return NULL;
    }
    lf_open *e = &t->open[t->depth++];
    *e = (lf_open){.kind = kind};
    if (!name || !lf_prof_recording(p))
        return e;
    lf_tbuf *b = lf_prof_thread_buf(p);
    lf_rec *r = b ? lf_prof_rec_new(b) : NULL;
    if (r && copy_name && !(name = lf_prof_arena_str(b, name))) {
        b->lost++;
        r = NULL;
    }
    if (!r)
        return e;
    r->kind = kind == OPEN_OP ? REC_OP : REC_RANGE; /* every field an op or range uses, set once */
    r->n_args = 0;
    r->device = 0;
    r->op = op;
    r->name = name;
    r->ext_id = lf_prof_next_id();
    r->flops = 0;
    r->u.args = NULL;
    r->t1 = -1;
    r->t0 = lf_prof_ticks();
    e->rec = r;
    e->gen = t->gen;
    e->ext_id = r->ext_id;
    lf_prof_publish(b);
    return e;
}

/* The entry's record when it lives in this thread's current buffer (an older one belongs to a
 * saved window), else NULL. */
static lf_rec *live(lf_profiler *p, const lf_open *e)
{
    return e->rec && lf_prof_thread_buf(p) && e->gen == lf_prof_tls.gen ? e->rec : NULL;
}

/* Pop the innermost entry, stamping its end. */
static void pop(lf_profiler *p)
{
    lf_tls *t = &lf_prof_tls;
    if (t->depth == 0)
        return;
    if (--t->depth >= LF_MAX_DEPTH)
        return;
    lf_rec *r = live(p, &t->open[t->depth]);
    if (r)
        r->t1 = lf_prof_ticks();
}

/* The innermost open op, dispatched or replayed (its id names the kernels it launches), or NULL. */
static lf_open *owner(void)
{
    lf_tls *t = &lf_prof_tls;
    for (int i = (t->depth < LF_MAX_DEPTH ? t->depth : LF_MAX_DEPTH) - 1; i >= 0; i--)
        if (t->open[i].kind == OPEN_OP || t->open[i].kind == OPEN_REPLAY)
            return &t->open[i];
    return NULL;
}

static void on_op_begin(void *user, lf_op_id op, int n_args, const lf_op_arg *args)
{
    (void)user;
    lf_profiler *p = lf_prof_enter();
    if (!p)
        return;
    lf_open *e = lf_prof_push(p, OPEN_OP, lf_op_name(op), (int)op, 0);
    if (e && e->rec && p->source) { /* device records will carry this op's id */
        p->source->push(e->ext_id);
        e->pushed = 1;
    }
    /* a collective's arguments are its description (Kineto writes them whatever record_shapes says) */
    if (e && e->rec && (p->o.record_shapes || op == LF_OP_RECORD_PARAM_COMMS)) {
        int n = n_args < LF_MAX_ARGS ? n_args : LF_MAX_ARGS;
        lf_rec_arg *a = lf_prof_arena_alloc(lf_prof_tls.buf, (size_t)n * sizeof *a);
        if (a) {
            for (int i = 0; i < n; i++) {
                const lf_tensor *t = args[i].t;
                a[i].kind = args[i].is_scalar ? 2 : t ? 1 : 0;
                a[i].ndim = t ? (int8_t)t->ndim : 0;
                a[i].dtype = t ? (int8_t)t->dtype : 0;
                for (int d = 0; t && d < t->ndim; d++)
                    a[i].shape[d] = t->shape[d], a[i].stride[d] = t->stride[d];
                if (args[i].is_scalar) /* its value, for the args that name a collective */
                    a[i].shape[0] = (int64_t)args[i].scalar;
            }
            e->rec->u.args = a;
            e->rec->n_args = (uint8_t)n;
        } else {
            lf_prof_tls.buf->lost++;
        }
    }
    lf_prof_leave();
}

static void on_op_end(void *user, lf_op_id op, lf_status s)
{
    (void)user, (void)op, (void)s;
    lf_profiler *p = lf_prof_enter();
    if (!p)
        return;
    lf_tls *t = &lf_prof_tls;
    if (t->depth > 0 && t->depth <= LF_MAX_DEPTH && t->open[t->depth - 1].pushed)
        p->source->pop();
    pop(p);
    lf_prof_leave();
}

static void on_kernel_begin(void *user, lf_device dev, lf_kernel_info *info)
{
    (void)user, (void)dev;
    lf_profiler *p = lf_prof_enter();
    if (!p)
        return;
    if (lf_prof_recording(p)) {
        lf_prof_tls.kernel_t0 = lf_prof_ticks();
        info->time_on_device = !p->source; /* a device that reports its own work needs no events */
    }
    lf_prof_leave();
}

static void on_kernel_end(void *user, lf_device dev, const lf_kernel_info *info)
{
    (void)user;
    int64_t t1 = lf_prof_ticks();
    lf_profiler *p = lf_prof_enter();
    if (!p)
        return;
    lf_tbuf *b = info && lf_prof_recording(p) ? lf_prof_thread_buf(p) : NULL;
    lf_rec *r = b ? lf_prof_rec_new(b) : NULL;
    if (b && (!r || !info->name)) {
        b->lost++;
        r = NULL;
    }
    if (r) {
        memset(r, 0, sizeof *r);
        r->kind = REC_KERNEL;
        r->name = info->name; /* interned by the backend: kept by pointer */
        r->t0 = lf_prof_tls.kernel_t0;
        r->t1 = t1;
        r->u.k.corr = lf_prof_next_id(); /* flow ids share the id space: unique either way */
        r->flops = info->flops;
        r->u.k.bytes = info->bytes;
        r->u.k.timing = info->timing;
        r->u.k.resolve = info->resolve;
        r->stream = (uint8_t)info->stream;
        r->unit = (uint8_t)info->device_index;
        r->device = (uint8_t)dev;
        lf_open *o = owner();
        if (o) {
            r->ext_id = o->ext_id;
            lf_rec *orec = p->o.with_flops ? live(p, o) : NULL;
            if (orec)
                orec->flops += info->flops;
        }
        lf_prof_publish(b);
    }
    lf_prof_leave();
}

static void on_alloc(void *user, lf_device dev, int index, const void *addr, int64_t bytes, int64_t total,
                     int64_t reserved)
{
    (void)user;
    lf_profiler *p = lf_prof_enter();
    if (!p)
        return;
    lf_tbuf *b = lf_prof_recording(p) ? lf_prof_thread_buf(p) : NULL;
    lf_rec *r = b ? lf_prof_rec_new(b) : NULL;
    if (r) {
        memset(r, 0, sizeof *r);
        r->kind = REC_MEM;
        r->device = (uint8_t)dev;
        r->unit = (uint8_t)index; /* the GPU the memory is on */
        r->name = "[memory]";
        r->t0 = r->t1 = lf_prof_ticks();
        r->u.m.bytes = bytes;
        r->u.m.total = total;
        r->u.m.reserved = reserved;
        r->u.m.addr = (int64_t)(intptr_t)addr;
        lf_prof_publish(b);
    }
    lf_prof_leave();
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

/* A compiled plan's step entering (op) or leaving (LF_OP_COUNT) the op that made it: a range of
 * the op's name that owns the kernels inside, as the op would. */
static void on_replay_op(void *user, lf_op_id op)
{
    (void)user;
    lf_profiler *p = lf_prof_enter();
    if (!p)
        return;
    lf_tls *t = &lf_prof_tls;
    if (op != LF_OP_COUNT) {
        lf_open *e = lf_prof_push(p, OPEN_REPLAY, lf_op_name(op), (int)op, 0);
        if (e && e->rec && p->source) {
            p->source->push(e->ext_id);
            e->pushed = 1;
        }
    } else if (t->depth > 0) {
        if (t->depth <= LF_MAX_DEPTH && t->open[t->depth - 1].pushed)
            p->source->pop();
        pop(p);
    }
    lf_prof_leave();
}

/* A graph launch's steps, kept beside its op (the open lf::cuda_graph_replay) for the window to
 * put its kernels under the ops that made them. */
static void on_graph_steps(void *user, int n, const lf_replay_step *steps)
{
    (void)user;
    lf_profiler *p = lf_prof_enter();
    if (!p)
        return;
    lf_open *o = owner();
    lf_tbuf *b = o && o->rec && lf_prof_recording(p) ? lf_prof_thread_buf(p) : NULL;
    lf_replay_step *copy = b ? lf_prof_arena_alloc(b, (size_t)n * sizeof *copy) : NULL;
    lf_rec *r = copy ? lf_prof_rec_new(b) : NULL;
    if (b && !copy)
        b->lost++;
    if (r) {
        memcpy(copy, steps, (size_t)n * sizeof *copy);
        memset(r, 0, sizeof *r);
        r->kind = REC_STEPS;
        r->ext_id = o->ext_id;
        r->t0 = r->t1 = lf_prof_ticks();
        r->u.s.steps = copy, r->u.s.n = n;
        lf_prof_publish(b);
    }
    lf_prof_leave();
}

/* One observer for every session: it never changes, so a thread holding it can always call it;
 * the hooks find the session through lf_prof_active, inside lf_prof_enter. */
static const lf_op_observer observer = {on_op_begin,   on_op_end,   on_kernel_begin, on_kernel_end, NULL,
                                        on_note_begin, on_note_end, on_replay_op,    on_graph_steps};

void lf_prof_set_hooks(const lf_profiler *p, int on)
{
    lf_ops_set_observer(on ? &observer : NULL);
    lf_tensor_set_alloc_observer(on && p->o.profile_memory ? on_alloc : NULL, NULL);
}

lf_status lf_prof_range_push(const char *name)
{
    if (__builtin_expect(!atomic_load_explicit(&lf_prof_active, memory_order_relaxed), 1))
        return LF_OK;
    LF_CHECK_PTR(name, "lf_prof_range_push", "name");
    lf_profiler *p = lf_prof_enter();
    if (!p)
        return LF_OK;
    /* the name is copied into the arena of the buffer its record goes into: a window's save
     * frees both together, whichever generation the record lands in */
    lf_prof_push(p, OPEN_RANGE, name, -1, 1);
    lf_prof_leave();
    return LF_OK;
}

lf_status lf_prof_range_pop(void)
{
    if (__builtin_expect(!atomic_load_explicit(&lf_prof_active, memory_order_relaxed), 1))
        return LF_OK;
    lf_profiler *p = lf_prof_enter();
    if (!p)
        return LF_OK;
    lf_tls *t = &lf_prof_tls;
    lf_status s = LF_OK;
    const lf_open *top = t->depth > 0 && t->depth <= LF_MAX_DEPTH ? &t->open[t->depth - 1] : NULL;
    if (t->depth == 0)
        s = lf_fail(LF_EINVAL, "lf_prof_range_pop: no range is open on this thread");
    else if (top && top->kind == OPEN_STEP)
        s = lf_fail(LF_EINVAL, "lf_prof_range_pop: no range is open on this thread (the innermost is the step's range, "
                               "which lf_prof_step closes)");
    else if (top && top->kind == OPEN_OP)
        s = lf_fail(LF_EINVAL, "lf_prof_range_pop: the innermost open event is an op, not a range");
    else
        pop(p);
    lf_prof_leave();
    return s;
}
