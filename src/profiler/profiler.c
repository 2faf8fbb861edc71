/* The profiler's session: start, the schedule of torch.profiler.schedule (docs/trace_format.md,
 * "Schedule"), ProfilerStep#N ranges, windows saved as traces, stop; and what a finished window
 * gives: the trace, its JSON, its table. Recording itself is record.c's; a window becomes a
 * trace in window.c. Layer: profiler/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "profiler/prof_impl.h"

static int sched_state(const lf_prof_opts *o, int64_t step)
{
    if (!o->use_schedule)
        return ST_RECORD;
    const lf_prof_schedule *s = &o->schedule;
    if (step < s->skip_first)
        return ST_NONE;
    step -= s->skip_first;
    int64_t c = (int64_t)s->wait + s->warmup + s->active;
    if (s->repeat > 0 && step / c >= s->repeat)
        return ST_NONE;
    int64_t m = step % c;
    if (m < s->wait)
        return ST_NONE;
    if (m < (int64_t)s->wait + s->warmup)
        return ST_WARMUP;
    return m < c - 1 ? ST_RECORD : ST_RECORD_AND_SAVE;
}

/* Open ProfilerStep#N on the calling thread's stack, when the schedule records this step. */
static void begin_step_range(lf_profiler *p)
{
    if (!p->o.use_schedule || !lf_prof_recording(p))
        return;
    char name[48];
    snprintf(name, sizeof name, "ProfilerStep#%lld", (long long)p->step);
    if (lf_prof_enter() != p)
        return;
    lf_prof_push(p, OPEN_STEP, name, -1, 1);
    lf_prof_leave();
}

/* Close the step's range wherever it sits on this thread's stack (a user range still open
 * above it stays open), so a step() called inside a range cannot close the wrong one. */
static void end_step_range(lf_profiler *p)
{
    if (lf_prof_enter() != p)
        return;
    lf_tls *t = &lf_prof_tls;
    int top = t->depth < LF_MAX_DEPTH ? t->depth : LF_MAX_DEPTH;
    for (int i = top - 1; i >= 0; i--)
        if (t->open[i].kind == OPEN_STEP) {
            if (t->open[i].rec && lf_prof_thread_buf(p) && t->open[i].gen == t->gen)
                t->open[i].rec->t1 = lf_prof_ticks();
            memmove(&t->open[i], &t->open[i + 1], (size_t)(top - 1 - i) * sizeof t->open[0]);
            t->depth--;
            break;
        }
    lf_prof_leave();
}

/* Saving a window, as torch.profiler's step does it (stop the trace, hand it to on_trace_ready,
 * then start the next): recording pauses first, so the threads that go on running ops while the
 * window is built and handed out record nothing. The next window begins when that is done. Were
 * they to record meanwhile, the next window would hold everything they did during this save, and
 * with threads that record faster than one thread builds, each save would be longer than the
 * last. The buffers are taken (a new generation begins: a thread's next event goes to a new
 * buffer), every thread that may still be writing an old one is waited for, and the old buffers
 * become the trace over [start, now]. */
static lf_status save_window(lf_profiler *p, int64_t start)
{
    atomic_store(&p->state, ST_NONE);
    pthread_mutex_lock(&p->mu);
    lf_tbuf *old = p->bufs;
    p->bufs = NULL;
    atomic_store(&p->gen, lf_prof_new_generation());
    pthread_mutex_unlock(&p->mu);
    int64_t end = lf_prof_ticks();
    lf_prof_quiesce();
    lf_trace *t = NULL;
    lf_status st = lf_prof_build_trace(p, old, start, end, &t);
    lf_prof_free_bufs(old);
    if (st != LF_OK)
        return st;
    lf_trace_free(p->trace);
    p->trace = t;
    return LF_OK;
}

/* A saved window's trace goes to on_trace_ready, which may read it but not step or stop. */
static void trace_ready(lf_profiler *p)
{
    if (!p->o.on_trace_ready)
        return;
    p->in_callback = 1;
    p->o.on_trace_ready(p, p->o.user);
    p->in_callback = 0;
}

/* prev is the state the last step ran in; after a save it is ST_NONE (nothing is carried on). */
static void enter_state(lf_profiler *p, int prev, int cur)
{
    int rec_prev = prev == ST_RECORD || prev == ST_RECORD_AND_SAVE;
    int rec_cur = cur == ST_RECORD || cur == ST_RECORD_AND_SAVE;
    if (rec_cur && !rec_prev)
        p->window_start = lf_prof_ticks(); /* warm-up events before this are dropped */
    atomic_store(&p->state, cur);
}

/* The first available device that reports its own events, started; NULL when none (a CPU-only
 * machine) or when its tracer cannot start (its kernels are then timed with device events
 * around each launch, and the run says so). The profiler asks the backend; a device never
 * registers itself with the profiler. */
static const lf_device_events *start_device_source(void)
{
    for (int d = 0; d < LF_DEVICE_COUNT; d++) {
        if (d == LF_DEVICE_CPU || !lf_device_available((lf_device)d))
            continue;
        const lf_device_events *ev = lf_backend_events((lf_device)d);
        if (!ev)
            continue;
        if (ev->start() == 0)
            return ev;
        fprintf(stderr,
                "linfuse profiler: %s could not start (%s); %s kernels are timed with events around each launch "
                "instead\n",
                ev->name, lf_last_error(), lf_device_name((lf_device)d));
    }
    return NULL;
}

lf_status lf_prof_start(lf_profiler **out, const lf_prof_opts *o)
{
    LF_CHECK_PTR(out, "lf_prof_start", "out");
    *out = NULL;
    LF_CHECK_PTR(o, "lf_prof_start", "opts");
    if (o->activities & ~(unsigned)(LF_PROF_CPU | LF_PROF_DEVICE))
        return lf_fail(LF_EINVAL, "lf_prof_start: activities 0x%x: expected LF_PROF_CPU, LF_PROF_DEVICE, both or 0",
                       o->activities);
    if (o->use_schedule) {
        const lf_prof_schedule *s = &o->schedule;
        if (s->wait < 0 || s->warmup < 0 || s->active < 1 || s->repeat < 0 || s->skip_first < 0)
            return lf_fail(LF_EINVAL,
                           "lf_prof_start: schedule wait=%d warmup=%d active=%d repeat=%d skip_first=%d: "
                           "expected active >= 1 and the others >= 0",
                           s->wait, s->warmup, s->active, s->repeat, s->skip_first);
    }
    if (o->distributed_info) { /* checked now, not at the first window */
        lf_trace *probe = NULL;
        LF_TRY(lf_trace_create(&probe));
        lf_status s = lf_trace_set_distributed_info(probe, o->distributed_info);
        lf_trace_free(probe);
        if (s != LF_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", lf_last_error());
            return lf_fail(s, "lf_prof_start: distributed_info: %s", why);
        }
    }
    lf_profiler *p = calloc(1, sizeof *p);
    if (!p)
        return lf_fail(LF_ENOMEM, "lf_prof_start: out of memory");
    p->o = *o;
    p->o.distributed_info = NULL;
    if (o->distributed_info && !(p->dist_info = strdup(o->distributed_info))) {
        free(p);
        return lf_fail(LF_ENOMEM, "lf_prof_start: out of memory");
    }
    if (!p->o.activities)
        p->o.activities = LF_PROF_CPU | LF_PROF_DEVICE;
    pthread_mutex_init(&p->mu, NULL);
    static _Atomic uint64_t sessions;
    p->serial = atomic_fetch_add(&sessions, 1) + 1;
    atomic_init(&p->gen, lf_prof_new_generation());
    atomic_init(&p->state, ST_NONE);
    lf_prof_clock_init();
    struct timespec rt;
    p->tick0 = lf_prof_ticks();
    p->mono0 = lf_prof_now_ns();
    clock_gettime(CLOCK_REALTIME, &rt);
    p->real0 = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec;
    lf_profiler *none = NULL; /* published only once set up: hooks on other threads may see it at once */
    if (!atomic_compare_exchange_strong(&lf_prof_active, &none, p)) {
        pthread_mutex_destroy(&p->mu);
        free(p->dist_info);
        free(p);
        return lf_fail(LF_EINVAL, "lf_prof_start: another profiler is running; stop it first");
    }
    if (p->o.activities & LF_PROF_DEVICE)
        p->source = start_device_source();
    enter_state(p, ST_NONE, sched_state(&p->o, 0));
    lf_prof_set_hooks(p, 1); /* for the whole session: every op's end meets its begin */
    begin_step_range(p);
    *out = p;
    return LF_OK;
}

lf_status lf_prof_step(lf_profiler *p)
{
    LF_CHECK_PTR(p, "lf_prof_step", "p");
    if (p->in_callback)
        return lf_fail(LF_EINVAL, "lf_prof_step: called from on_trace_ready; step after the callback returns");
    if (p->stopped)
        return lf_fail(LF_EINVAL, "lf_prof_step: the profiler was stopped");
    end_step_range(p);
    int prev = atomic_load(&p->state);
    p->step++;
    int cur = sched_state(&p->o, p->step);
    lf_status st = LF_OK;
    if (prev == ST_RECORD_AND_SAVE) {
        st = save_window(p, p->window_start);
        if (st == LF_OK)
            trace_ready(p);
        prev = ST_NONE; /* the next window, if this step begins one, starts now */
    }
    enter_state(p, prev, cur);
    begin_step_range(p);
    return st;
}

lf_status lf_prof_stop(lf_profiler *p)
{
    LF_CHECK_PTR(p, "lf_prof_stop", "p");
    if (p->in_callback)
        return lf_fail(LF_EINVAL, "lf_prof_stop: called from on_trace_ready; stop after the callback returns");
    if (p->stopped)
        return LF_OK;
    end_step_range(p);
    int prev = atomic_load(&p->state);
    atomic_store(&p->state, ST_NONE);
    lf_status st = LF_OK;
    if (prev == ST_RECORD || prev == ST_RECORD_AND_SAVE) {
        st = save_window(p, p->window_start);
        if (st == LF_OK && p->o.use_schedule)
            trace_ready(p);
    }
    /* no hook may hold the session once this returns: threads still running ops find none */
    lf_prof_set_hooks(p, 0);
    lf_profiler *self = p;
    atomic_compare_exchange_strong(&lf_prof_active, &self, NULL);
    lf_prof_quiesce();
    if (p->source) {
        p->source->stop();
        p->source = NULL;
    }
    p->stopped = 1;
    return st;
}

void lf_prof_free(lf_profiler *p)
{
    if (!p)
        return;
    if (p->in_callback) { /* from on_trace_ready: refused, as step and stop are */
        lf_fail(LF_EINVAL, "lf_prof_free: called from on_trace_ready");
        return;
    }
    lf_prof_stop(p);
    lf_prof_free_bufs(p->bufs);
    lf_trace_free(p->trace);
    pthread_mutex_destroy(&p->mu);
    free(p->dist_info);
    free(p);
}

int64_t lf_prof_dropped(const lf_profiler *p)
{
    return p && p->trace ? lf_trace_meta_get(p->trace)->dropped_events : 0;
}

lf_status lf_prof_trace(lf_profiler *p, const lf_trace **out)
{
    LF_CHECK_PTR(p, "lf_prof_trace", "p");
    LF_CHECK_PTR(out, "lf_prof_trace", "out");
    if (!p->trace)
        return lf_fail(LF_EINVAL, "lf_prof_trace: no window was recorded (stop the profiler after its active steps)");
    *out = p->trace;
    return LF_OK;
}

lf_status lf_prof_export(lf_profiler *p, const char *path)
{
    const lf_trace *t;
    LF_TRY(lf_prof_trace(p, &t));
    return lf_trace_write_json(t, path);
}

lf_status lf_prof_table(lf_profiler *p, const lf_table_opts *o, char **text)
{
    const lf_trace *t;
    LF_TRY(lf_prof_trace(p, &t));
    lf_table tab;
    LF_TRY(lf_table_build(t, o ? o->sort_by : LF_SORT_NONE, &tab));
    lf_status st = lf_table_format(&tab, o, text);
    lf_table_free(&tab);
    return st;
}
