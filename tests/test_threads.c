/* The profiler across threads, as PyTorch's is used: worker threads run ops and ranges while
 * the main thread steps the schedule through wait/warmup/active/repeat windows, stops, and
 * frees the session while the workers still run. Run under ASan and under ThreadSanitizer
 * (the `tsan` build): no report, every window's trace valid, every thread's events in it, CPU
 * kernels of each thread on a lane of their own, slices nesting on every lane. Also the
 * profiler's misuse answers: re-entering step/stop from on_trace_ready, popping a range that
 * is not open, names that are not UTF-8. And host memory across threads: large tensors taken
 * from and given back to the allocator's cache by several threads at once, each block holding
 * only its owner's bytes. */
#include <jansson.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "linfuse/profiler.h"
#include "linfuse/tensor.h"
#include "testutil.h"

enum { WORKERS = 4, WINDOWS = 3 };

static char tmpdir[] = "/tmp/lf_test_threads_XXXXXX";
static atomic_int quit;
static atomic_int worker_forwards[WORKERS];

typedef struct worker {
    int id;
    pthread_t th;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    lf_rng rng;
    lf_rng_seed(&rng, 100 + (uint64_t)w->id);
    lf_nn_linear lin;
    lf_nn_gated_mlp mlp;
    lf_nn_linear_opts lo = {32, 48, 1, LF_DTYPE_BF16, LF_DEVICE_CPU};
    lf_nn_gated_mlp_opts mo = {32, 64, LF_DTYPE_F32, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
    int64_t xs[2] = {16, 32};
    if (lf_nn_linear_init(&lin, &lo, &rng) || lf_nn_gated_mlp_init(&mlp, &mo, &rng))
        abort();
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs), *xf = rand_tensor(&rng, LF_DTYPE_F32, 2, xs);
    char name[32];
    snprintf(name, sizeof name, "worker_%d", w->id);
    while (!atomic_load(&quit)) {
        lf_prof_range_push(name);
        lf_tensor *y = NULL, *z = NULL;
        if (lf_nn_linear_forward(&lin, x, &y) || lf_nn_gated_mlp_forward(&mlp, xf, &z))
            abort();
        lf_tensor_free(y), lf_tensor_free(z);
        lf_prof_range_pop();
        atomic_fetch_add(&worker_forwards[w->id], 1);
    }
    lf_tensor_free(x), lf_tensor_free(xf);
    lf_nn_linear_free(&lin);
    lf_nn_gated_mlp_free(&mlp);
    return NULL;
}

typedef struct windows {
    int n;
    char path[WINDOWS + 2][128];
} windows;

static void saved(lf_profiler *p, void *user)
{
    windows *w = user;
    if (w->n >= WINDOWS + 2)
        return;
    snprintf(w->path[w->n], sizeof w->path[0], "%s/window%d.json", tmpdir, w->n);
    CHECK(lf_prof_export(p, w->path[w->n]) == LF_OK, "export window %d: %s", w->n, lf_last_error());
    w->n++;
}

static const char *str(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

typedef struct slice {
    int64_t pid, tid;
    double t0, t1;
    const char *name;
} slice;

static int slice_cmp(const void *pa, const void *pb)
{
    const slice *a = pa, *b = pb;
    if (a->pid != b->pid)
        return a->pid < b->pid ? -1 : 1;
    if (a->tid != b->tid)
        return a->tid < b->tid ? -1 : 1;
    if (a->t0 != b->t0)
        return a->t0 < b->t0 ? -1 : 1;
    return a->t1 > b->t1 ? -1 : a->t1 < b->t1;
}

/* One window's trace: valid JSON (jansson), read back by linfuse, every thread present with
 * ops, CPU kernels one lane per thread, slices on each lane nesting. */
static void check_window(const char *path, int window)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    CHECK(root != NULL, "window %d: %s is not JSON: %s (line %d)", window, path, err.text, err.line);
    if (!root)
        return;
    lf_trace *t = NULL;
    CHECK(lf_trace_read_json(&t, path) == LF_OK, "window %d: read back: %s", window, lf_last_error());
    json_t *ev = json_object_get(root, "traceEvents");
    size_t n = json_array_size(ev);
    /* threads with ops, and the kernel lanes */
    int64_t tids[64], lanes[64];
    int ntid = 0, nlane = 0, kernels = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(ev, i);
        const char *cat = json_string_value(json_object_get(e, "cat"));
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!cat || !ph || strcmp(ph, "X"))
            continue;
        int64_t tid = json_integer_value(json_object_get(e, "tid"));
        int64_t *list = !strcmp(cat, "kernel") ? lanes : !strcmp(cat, "cpu_op") ? tids : NULL;
        int *cnt = list == lanes ? &nlane : &ntid;
        kernels += list == lanes;
        if (!list)
            continue;
        int seen = 0;
        for (int k = 0; k < *cnt; k++)
            seen |= list[k] == tid;
        if (!seen && *cnt < 64)
            list[(*cnt)++] = tid;
    }
    CHECK(ntid == WORKERS + 1, "window %d: ops of %d threads, expected %d (every worker and main)", window, ntid,
          WORKERS + 1);
    CHECK(nlane == ntid, "window %d: CPU kernels on %d lanes for %d threads (one lane per thread)", window, nlane,
          ntid);
    CHECK(kernels > 0, "window %d: no kernels", window);
    /* complete events on one (pid, tid) nest: no partial overlap. Sorted by lane, then start
     * (the longer first), each event must end inside the innermost still open before it. */
    slice *sl = calloc(n ? n : 1, sizeof *sl);
    size_t ns = 0;
    for (size_t i = 0; sl && i < n; i++) {
        json_t *a = json_array_get(ev, i);
        if (strcmp(str(a, "ph"), "X"))
            continue;
        double t0 = json_number_value(json_object_get(a, "ts"));
        sl[ns++] = (slice){json_integer_value(json_object_get(a, "pid")), json_integer_value(json_object_get(a, "tid")),
                           t0, t0 + json_number_value(json_object_get(a, "dur")), str(a, "name")};
    }
    qsort(sl, ns, sizeof *sl, slice_cmp);
    int bad = 0;
    size_t *open = calloc(ns ? ns : 1, sizeof *open), depth = 0;
    /* times of ~5e12 us read as doubles are exact to about 1 ns, not 0.001 us: a 2 ns slack */
    const double e = 0.002;
    for (size_t k = 0; open && k < ns; k++) {
        while (depth && (sl[open[depth - 1]].pid != sl[k].pid || sl[open[depth - 1]].tid != sl[k].tid ||
                         sl[open[depth - 1]].t1 <= sl[k].t0 + e))
            depth--;
        if (depth && sl[k].t1 > sl[open[depth - 1]].t1 + e && bad++ < 3) {
            const slice *o = &sl[open[depth - 1]];
            fprintf(stderr, "window %d: %s [%.3f, %.3f] and %s [%.3f, %.3f] overlap on one lane\n", window, o->name,
                    o->t0, o->t1, sl[k].name, sl[k].t0, sl[k].t1);
        }
        open[depth++] = k;
    }
    free(open);
    free(sl);
    CHECK(bad == 0, "window %d: %d partial overlaps on a lane", window, bad);
    lf_trace_free(t);
    json_decref(root);
}

static void test_threads(void)
{
    worker w[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        w[i].id = i;
        if (pthread_create(&w[i].th, NULL, work, &w[i]))
            abort();
    }
    windows win = {0};
    lf_prof_opts o = {.use_schedule = 1,
                      .schedule = {.wait = 1, .warmup = 1, .active = 2, .repeat = WINDOWS},
                      .record_shapes = 1,
                      .profile_memory = 1,
                      .with_flops = 1,
                      .on_trace_ready = saved,
                      .user = &win};
    lf_profiler *p = NULL;
    OK(lf_prof_start(&p, &o));
    lf_rng rng;
    lf_rng_seed(&rng, 7);
    int64_t xs[2] = {8, 32};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, 2, xs);
    lf_nn_linear lin;
    lf_nn_linear_opts lo = {32, 32, 1, LF_DTYPE_F32, LF_DEVICE_CPU};
    OK(lf_nn_linear_init(&lin, &lo, &rng));
    /* every step lasts long enough for each worker to run forwards in it */
    for (int step = 0; step < 4 * WINDOWS + 2; step++) {
        int before[WORKERS];
        for (int i = 0; i < WORKERS; i++)
            before[i] = atomic_load(&worker_forwards[i]);
        lf_prof_range_push("main_fwd");
        lf_tensor *y = NULL;
        OK(lf_nn_linear_forward(&lin, x, &y));
        lf_tensor_free(y);
        CHECK(lf_prof_range_pop() == LF_OK, "main pop: %s", lf_last_error());
        for (int i = 0; i < WORKERS; i++)
            while (atomic_load(&worker_forwards[i]) < before[i] + 2)
                sched_yield();
        CHECK(lf_prof_step(p) == LF_OK, "step %d: %s", step, lf_last_error());
    }
    /* stop and free while the workers still record */
    CHECK(lf_prof_stop(p) == LF_OK, "stop: %s", lf_last_error());
    lf_prof_free(p);
    struct timespec nap = {0, 2000000};
    nanosleep(&nap, NULL);
    atomic_store(&quit, 1);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(w[i].th, NULL);
    CHECK(win.n == WINDOWS, "%d windows saved, expected %d", win.n, WINDOWS);
    for (int k = 0; k < win.n; k++)
        check_window(win.path[k], k);
    lf_tensor_free(x);
    lf_nn_linear_free(&lin);
}

/* Stepping while threads record (issue: a range's name copied into one window's buffer while its
 * record went into the next one's, read after that window was saved and freed; and without
 * ranges, windows that grew without end because threads recorded during each save). Workers
 * push ranges with names of their own and run ops; the main thread steps as fast as it can,
 * then with a slow on_trace_ready. Every window must hold intact names, and recording pauses
 * while a window is saved and handed out, as torch.profiler's step does: no event of the next
 * window starts before on_trace_ready returned. */
static atomic_int stepping_quit;

static void *ranger(void *arg)
{
    const int id = (int)(intptr_t)arg;
    lf_rng rng;
    lf_rng_seed(&rng, 300 + (uint64_t)id);
    lf_nn_linear lin;
    lf_nn_linear_opts lo = {16, 16, 1, LF_DTYPE_F32, LF_DEVICE_CPU};
    int64_t xs[2] = {4, 16};
    if (lf_nn_linear_init(&lin, &lo, &rng))
        abort();
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, 2, xs);
    char name[48];
    for (long i = 0; !atomic_load(&stepping_quit); i++) {
        snprintf(name, sizeof name, "ranger_%d_%ld", id, i % 97);
        lf_prof_range_push(name);
        lf_tensor *y = NULL;
        if (lf_nn_linear_forward(&lin, x, &y))
            abort();
        lf_tensor_free(y);
        lf_prof_range_pop();
    }
    lf_tensor_free(x);
    lf_nn_linear_free(&lin);
    return NULL;
}

typedef struct stepping {
    int windows, bad_names, slow;
    int64_t events, max_events;
    int64_t ready_end_ns; /* when the last on_trace_ready returned (CLOCK_MONOTONIC) */
    int64_t mono_to_real; /* CLOCK_REALTIME - CLOCK_MONOTONIC, ns */
    int early;            /* windows with an event that began before the previous callback returned */
} stepping;

static void stepped(lf_profiler *p, void *user)
{
    stepping *s = user;
    const lf_trace *t = NULL;
    if (lf_prof_trace(p, &t) != LF_OK)
        return;
    const lf_trace_meta *m = lf_trace_meta_get(t);
    int64_t first = INT64_MAX;
    const int64_t n = lf_trace_count(t);
    for (int64_t i = 0; i < n; i++) {
        const lf_trace_event *e = lf_trace_get(t, i);
        if (e->cat != LF_TC_USER_ANNOTATION && e->cat != LF_TC_CPU_OP)
            continue;
        int ok = !strncmp(e->name, "lf::", 4) || !strncmp(e->name, "ProfilerStep#", 13);
        int id = -1, k = -1, used = 0;
        if (!ok && sscanf(e->name, "ranger_%d_%d%n", &id, &k, &used) == 2)
            ok = id >= 0 && id < WORKERS && k >= 0 && k < 97 && e->name[used] == 0;
        if (!ok && s->bad_names++ < 3)
            fprintf(stderr, "window %d: an event named \"%.40s\"\n", s->windows, e->name);
        if (e->cat == LF_TC_USER_ANNOTATION && strncmp(e->name, "ProfilerStep#", 13) && e->ts_ns < first)
            first = e->ts_ns;
    }
    /* the trace's times are ns since base_ns on the real-time clock */
    if (s->ready_end_ns && first != INT64_MAX &&
        m->base_ns + first - s->mono_to_real < s->ready_end_ns - 1000000) /* 1 ms for the clocks' mapping */
        s->early++;
    s->windows++;
    s->events += n;
    s->max_events = n > s->max_events ? n : s->max_events;
    if (s->slow) { /* an export that takes a while, with the workers still running */
        struct timespec nap = {0, 20000000};
        nanosleep(&nap, NULL);
    }
    s->ready_end_ns = lf_prof_now_ns();
}

static void test_step_while_recording(int active)
{
    atomic_store(&stepping_quit, 0);
    pthread_t th[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        CHECK(pthread_create(&th[i], NULL, ranger, (void *)(intptr_t)i) == 0, "worker %d started", i);
    stepping s = {0};
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    s.mono_to_real = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec - lf_prof_now_ns();
    lf_prof_opts o = {.use_schedule = 1,
                      .schedule = {.active = active, .repeat = 0},
                      .record_shapes = 1,
                      .on_trace_ready = stepped,
                      .user = &s};
    lf_profiler *p = NULL;
    OK(lf_prof_start(&p, &o));
    /* as fast as the main thread can step, for a second: before the fix, a use after free under
     * ASan within the first few hundred windows, or a window that never ends */
    const int64_t t0 = lf_prof_now_ns();
    int steps = 0;
    while (lf_prof_now_ns() - t0 < 1000000000 && steps < 200000) {
        CHECK(lf_prof_step(p) == LF_OK, "step %d: %s", steps, lf_last_error());
        steps++;
    }
    /* then with an on_trace_ready that takes 20 ms: the next window must not hold those 20 ms */
    s.slow = 1;
    s.ready_end_ns = 0;
    for (int i = 0; i < 6 * active; i++) {
        struct timespec nap = {0, 2000000};
        nanosleep(&nap, NULL);
        CHECK(lf_prof_step(p) == LF_OK, "slow step %d: %s", i, lf_last_error());
    }
    OK(lf_prof_stop(p));
    lf_prof_free(p);
    atomic_store(&stepping_quit, 1);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(th[i], NULL);
    CHECK(s.windows >= 6, "active=%d: %d windows saved in %d steps", active, s.windows, steps);
    CHECK(s.bad_names == 0, "active=%d: %d events with a name that is not one the program gave", active, s.bad_names);
    CHECK(s.early == 0, "active=%d: %d windows hold events from before the previous on_trace_ready returned", active,
          s.early);
    if (getenv("LF_TEST_VERBOSE"))
        fprintf(stderr, "active=%d: %d steps, %d windows, %lld events, at most %lld in one\n", active, steps, s.windows,
                (long long)s.events, (long long)s.max_events);
}

/* on_trace_ready may not step or stop the profiler it is called from */
static int reentry_seen;
static lf_status reentry_step, reentry_stop;

static void reenter(lf_profiler *p, void *user)
{
    (void)user;
    reentry_seen++;
    reentry_step = lf_prof_step(p);
    reentry_stop = lf_prof_stop(p);
}

static void test_misuse(void)
{
    lf_prof_opts o = {
        .use_schedule = 1, .schedule = {.wait = 0, .warmup = 0, .active = 1, .repeat = 1}, .on_trace_ready = reenter};
    lf_profiler *p = NULL;
    OK(lf_prof_start(&p, &o));
    /* a pop with no range open is an error, and the step's range stays open */
    FAILS(LF_EINVAL, "no range is open", lf_prof_range_pop());
    OK(lf_prof_range_push("a"));
    OK(lf_prof_range_pop());
    FAILS(LF_EINVAL, "no range is open", lf_prof_range_pop());
    /* a name that is not UTF-8 still makes valid JSON (invalid bytes become U+FFFD) */
    OK(lf_prof_range_push("bad \xff\xfe name \xc3"));
    OK(lf_prof_range_pop());
    OK(lf_prof_step(p)); /* saves the window: the callback tries to step and stop */
    CHECK(reentry_seen == 1, "on_trace_ready called %d times", reentry_seen);
    CHECK(reentry_step == LF_EINVAL && reentry_stop == LF_EINVAL, "step/stop from on_trace_ready: %s, %s",
          lf_status_name(reentry_step), lf_status_name(reentry_stop));
    OK(lf_prof_stop(p));
    char path[128];
    snprintf(path, sizeof path, "%s/utf8.json", tmpdir);
    OK(lf_prof_export(p, path));
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    CHECK(root != NULL, "a range name with invalid UTF-8 made invalid JSON: %s", err.text);
    lf_trace *t = NULL;
    CHECK(lf_trace_read_json(&t, path) == LF_OK, "linfuse's reader: %s", lf_last_error());
    int found = 0;
    for (int64_t i = 0; t && i < lf_trace_count(t); i++)
        found |= !strcmp(lf_trace_get(t, i)->name, "bad \xef\xbf\xbd\xef\xbf\xbd name \xef\xbf\xbd");
    CHECK(found, "the range's name with each bad byte replaced by U+FFFD");
    lf_trace_free(t);
    json_decref(root);
    lf_prof_free(p);
}

/* Each thread takes tensors of three sizes from 128 KiB up (the cached ones) in turn, fills each
 * with its own byte, checks every byte, gives it back: a block handed to two threads at once, or
 * one still poisoned when handed out (ASan), or an unlocked cache (TSan) shows here. */
static void *churn(void *arg)
{
    const unsigned char mark = (unsigned char)(uintptr_t)arg;
    static const int64_t sizes[3] = {(int64_t)1 << 17, 3 << 17, (int64_t)1 << 18};
    long bad = 0;
    for (int i = 0; i < 60; i++) {
        lf_tensor *t = NULL;
        if (lf_tensor_empty(&t, LF_DTYPE_F8E4M3, 1, &sizes[i % 3], LF_DEVICE_CPU) != LF_OK)
            return (void *)1;
        unsigned char *p = lf_tensor_data(t);
        memset(p, mark, (size_t)sizes[i % 3]);
        sched_yield(); /* let another thread take and free blocks meanwhile */
        for (int64_t j = 0; j < sizes[i % 3]; j++)
            bad += p[j] != mark;
        lf_tensor_free(t);
    }
    return (void *)(uintptr_t)(bad != 0);
}

static void test_host_memory_threads(void)
{
    pthread_t th[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        CHECK(pthread_create(&th[i], NULL, churn, (void *)(uintptr_t)(0x11 * (i + 1))) == 0, "thread %d started", i);
    for (int i = 0; i < WORKERS; i++) {
        void *r = NULL;
        pthread_join(th[i], &r);
        CHECK(r == NULL, "thread %d: its blocks held only its bytes", i);
    }
}

int main(void)
{
    if (!mkdtemp(tmpdir))
        return 1;
    test_host_memory_threads();
    test_misuse();
    test_threads();
    test_step_while_recording(1);
    test_step_while_recording(2);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return lf_test_finish("test_threads");
}
