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
    if (m < s->wait + s->warmup)
        return ST_WARMUP;
    return m < c - 1 ? ST_RECORD : ST_RECORD_AND_SAVE;
}

static void begin_step_range(lf_profiler *p)
{
    if (!p->o.use_schedule || p->state == ST_NONE)
        return;
    char name[48];
    snprintf(name, sizeof name, "ProfilerStep#%lld", (long long)p->step);
    lf_tbuf *b = lf_prof_thread_buf(p);
    const char *copy = b ? lf_prof_arena_str(b, name) : NULL;
    p->step_rec = copy ? lf_prof_open_rec(p, REC_RANGE, copy, -1) : NULL;
    p->step_range_open = 1;
}

/* Close the step's range wherever it sits on this thread's stack (a user range still open
 * above it stays open), so a step() called inside a range cannot close the wrong one. */
static void end_step_range(lf_profiler *p)
{
    if (!p->step_range_open)
        return;
    p->step_range_open = 0;
    lf_tbuf *b = lf_prof_thread_buf(p);
    if (!b || !p->step_rec)
        return;
    int top = b->depth < LF_MAX_DEPTH ? b->depth : LF_MAX_DEPTH;
    for (int i = top - 1; i >= 0; i--)
        if (b->open[i] == p->step_rec) {
            p->step_rec->t1 = lf_prof_ticks();
            memmove(&b->open[i], &b->open[i + 1], (size_t)(top - 1 - i) * sizeof b->open[0]);
            b->depth--;
            break;
        }
    p->step_rec = NULL;
}

/* Save [window_start, now] as the trace, and start over with empty buffers. */
static lf_status save_window(lf_profiler *p)
{
    lf_trace *t;
    LF_TRY(lf_prof_build_trace(p, p->window_start, lf_prof_ticks(), &t));
    lf_trace_free(p->trace);
    p->trace = t;
    pthread_mutex_lock(&p->mu);
    lf_prof_free_bufs(p->bufs);
    p->bufs = NULL;
    p->gen = lf_prof_new_generation(); /* every thread registers a fresh buffer */
    pthread_mutex_unlock(&p->mu);
    return LF_OK;
}

static void enter_state(lf_profiler *p, int prev, int cur)
{
    int rec_prev = prev == ST_RECORD || prev == ST_RECORD_AND_SAVE;
    int rec_cur = cur == ST_RECORD || cur == ST_RECORD_AND_SAVE;
    p->state = cur;
    lf_prof_set_recording(p, cur != ST_NONE);
    if (rec_cur && (!rec_prev || prev == ST_RECORD_AND_SAVE))
        p->window_start = lf_prof_ticks(); /* warm-up events before this are dropped */
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
    if (o->use_schedule) {
        const lf_prof_schedule *s = &o->schedule;
        if (s->wait < 0 || s->warmup < 0 || s->active < 1 || s->repeat < 0 || s->skip_first < 0)
            return lf_fail(LF_EINVAL,
                           "lf_prof_start: schedule wait=%d warmup=%d active=%d repeat=%d skip_first=%d: "
                           "expected active >= 1 and the others >= 0",
                           s->wait, s->warmup, s->active, s->repeat, s->skip_first);
    }
    lf_profiler *p = calloc(1, sizeof *p);
    if (!p)
        return lf_fail(LF_ENOMEM, "lf_prof_start: out of memory");
    lf_profiler *none = NULL;
    if (!atomic_compare_exchange_strong(&lf_prof_active, &none, p)) {
        free(p);
        return lf_fail(LF_EINVAL, "lf_prof_start: another profiler is running; stop it first");
    }
    p->o = *o;
    if (!p->o.activities)
        p->o.activities = LF_PROF_CPU | LF_PROF_DEVICE;
    pthread_mutex_init(&p->mu, NULL);
    p->gen = lf_prof_new_generation();
    lf_prof_clock_init();
    struct timespec rt;
    p->tick0 = lf_prof_ticks();
    p->mono0 = lf_prof_now_ns();
    clock_gettime(CLOCK_REALTIME, &rt);
    p->real0 = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec;
    if (p->o.activities & LF_PROF_DEVICE)
        p->source = start_device_source();
    enter_state(p, ST_NONE, sched_state(&p->o, 0));
    begin_step_range(p);
    *out = p;
    return LF_OK;
}

lf_status lf_prof_step(lf_profiler *p)
{
    LF_CHECK_PTR(p, "lf_prof_step", "p");
    if (p->stopped)
        return lf_fail(LF_EINVAL, "lf_prof_step: the profiler was stopped");
    end_step_range(p);
    int prev = p->state;
    p->step++;
    int cur = sched_state(&p->o, p->step);
    lf_status st = LF_OK;
    if (prev == ST_RECORD_AND_SAVE) {
        lf_prof_set_recording(p, 0);
        st = save_window(p);
        if (st == LF_OK && p->o.on_trace_ready)
            p->o.on_trace_ready(p, p->o.user);
    }
    enter_state(p, prev, cur);
    begin_step_range(p);
    return st;
}

lf_status lf_prof_stop(lf_profiler *p)
{
    LF_CHECK_PTR(p, "lf_prof_stop", "p");
    if (p->stopped)
        return LF_OK;
    end_step_range(p);
    lf_prof_set_recording(p, 0);
    lf_status st = LF_OK;
    if (p->state == ST_RECORD || p->state == ST_RECORD_AND_SAVE) {
        st = save_window(p);
        if (st == LF_OK && p->o.on_trace_ready && p->o.use_schedule)
            p->o.on_trace_ready(p, p->o.user);
    }
    if (p->source) {
        p->source->stop();
        p->source = NULL;
    }
    p->state = ST_NONE;
    p->stopped = 1;
    lf_profiler *self = p;
    atomic_compare_exchange_strong(&lf_prof_active, &self, NULL);
    return st;
}

void lf_prof_free(lf_profiler *p)
{
    if (!p)
        return;
    lf_prof_stop(p);
    lf_prof_free_bufs(p->bufs);
    lf_trace_free(p->trace);
    pthread_mutex_destroy(&p->mu);
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
