/* `linfuse profile`'s collector (src/inject/) without a GPU: records shaped as the injection
 * library fills them from CUPTI, made up and recorded (PyTorch's own H200 trace of the blog's MLP
 * turned back into CUPTI's records), through the same lfi_add/lfi_build path. Checked: kernels under
 * the call that launched them (correlation, ac2g flow, External id of the innermost NVTX range);
 * NVTX push/pop and start/end ranges, domains, ranges that do not nest; ProfilerStep#N ranges as
 * steps; --steps, --capture-range, the time window and --kernels-only; CUDA graph kernels tied to
 * their launch; memory events; the dropped count kept through a file; demangling and occupancy. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inject/inject.h"
#include "testutil.h"

enum { PID = 4242, TID = 4242, TID2 = 4250 };

static lfi_session *session(const lfi_opts *o)
{
    lfi_opts none = {.lo = INT64_MIN, .hi = -1, .step_lo = -1, .step_hi = -1};
    lfi_session *s = NULL;
    if (lfi_create(&s, o ? o : &none) != LF_OK)
        abort();
    return s;
}

static void mark_of(lfi_session *s, int m, uint32_t id, const char *name, const char *domain, uint32_t pid,
                    uint32_t tid, int64_t t)
{
    lfc_rec r = {.kind = LFC_MARKER,
                 .name = name,
                 .domain = domain,
                 .start = t,
                 .end = t,
                 .corr = id,
                 .pid = pid,
                 .tid = tid,
                 .mark = (int8_t)m};
    lfi_add(s, &r);
}

static void mark(lfi_session *s, int m, uint32_t id, const char *name, const char *domain, uint32_t tid, int64_t t)
{
    mark_of(s, m, id, name, domain, PID, tid, t);
}

static void call(lfi_session *s, const char *name, uint32_t corr, uint32_t tid, int64_t t0, int64_t t1)
{
    lfc_rec r = {
        .kind = LFC_RUNTIME, .name = name, .start = t0, .end = t1, .corr = corr, .pid = PID, .tid = tid, .cbid = 211};
    lfi_add(s, &r);
}

static void kernel(lfi_session *s, const char *name, uint32_t corr, int64_t t0, int64_t t1)
{
    lfc_rec r = {.kind = LFC_KERNEL,
                 .name = name,
                 .start = t0,
                 .end = t1,
                 .corr = corr,
                 .device = 0,
                 .context = 1,
                 .stream = 7,
                 .grid = {264, 1, 1},
                 .block = {128, 1, 1},
                 .regs = 32,
                 .static_smem = 0,
                 .dyn_smem = 1024};
    lfi_add(s, &r);
}

static const int sms[1] = {132};

static lf_trace *build(lfi_session *s, lfi_stats *st)
{
    lfi_meta m = {.to_epoch = 1700000000000000000, .pid = PID, .process_name = "prog", .sms = sms, .n_devices = 1};
    lf_trace *t = NULL;
    lf_status r = lfi_build(s, &m, &t, st);
    CHECK(r == LF_OK, "lfi_build: %d", (int)r);
    return t;
}

static const lf_trace_event *find(const lf_trace *t, lf_trace_cat cat, const char *name, int nth)
{
    for (int64_t i = 0; i < lf_trace_count(t); i++) {
        const lf_trace_event *e = lf_trace_get(t, i);
        if (e->cat == cat && (!name || !strcmp(e->name, name)) && nth-- == 0)
            return e;
    }
    return NULL;
}

static int count(const lf_trace *t, lf_trace_cat cat)
{
    int n = 0;
    for (int64_t i = 0; i < lf_trace_count(t); i++)
        n += lf_trace_get(t, i)->cat == cat;
    return n;
}

/* A kernel launched inside an NVTX range: tied to its launch, counted under the range. */
static void test_launch(void)
{
    lfi_session *s = session(NULL);
    mark(s, LFC_MARK_START, 1, "forward", NULL, TID, 900);
    call(s, "cudaLaunchKernel", 5, TID, 1000, 1010);
    call(s, "cudaGetDevice", 6, TID, 1011, 1012); /* not worth a row */
    mark(s, LFC_MARK_END, 1, NULL, NULL, TID, 2000);
    kernel(s, "_Z6squarePfi", 5, 1500, 1600);
    lfi_stats st;
    lf_trace *t = build(s, &st);
    const lf_trace_event *r = find(t, LF_TC_USER_ANNOTATION, "forward", 0), *c = find(t, LF_TC_RUNTIME, NULL, 0),
                         *k = find(t, LF_TC_KERNEL, NULL, 0);
    CHECK(r && c && k, "range, call and kernel kept");
    CHECK(!find(t, LF_TC_RUNTIME, "cudaGetDevice", 0), "cudaGetDevice left out");
    if (r && c && k) {
        CHECK(r->dur_ns == 1100 && r->pid == PID && r->tid == TID, "range: %lld ns on its thread",
              (long long)r->dur_ns);
        CHECK(c->ext_id == r->ext_id && k->ext_id == r->ext_id && r->ext_id, "External ids: %lld %lld %lld",
              (long long)r->ext_id, (long long)c->ext_id, (long long)k->ext_id);
        CHECK(k->correlation == 5 && c->correlation == 5, "correlation");
        CHECK(k->flow_pid == PID && k->flow_tid == TID && k->flow_ts == c->ts_ns, "ac2g flow from the launch");
        CHECK(k->pid == 0 && k->tid == 7 && k->device == 0 && k->dur_ns == 100, "kernel on device 0 stream 7");
        CHECK(k->ts_ns - c->ts_ns == 500, "times kept: %lld", (long long)(k->ts_ns - c->ts_ns));
        CHECK(strstr(k->extra_args, "\"grid\": [264, 1, 1]") && strstr(k->extra_args, "\"blocks per SM\": 2.000000") &&
                  strstr(k->extra_args, "\"shared memory\": 1024"),
              "Kineto's kernel args: %s", k->extra_args);
        CHECK(!strcmp(k->name, "_Z6squarePfi"), "no demangler given: the name as it came");
    }
    const lf_trace_meta *m = lf_trace_meta_get(t);
    CHECK(m->base_ns % (INT64_C(7889238) * 1000000000) == 0 && m->base_ns <= 1700000000000000900, "Kineto's base");
    lf_table tab;
    OK(lf_table_build(t, LF_SORT_DEVICE_TIME_TOTAL, &tab));
    int seen = 0;
    for (int64_t i = 0; i < tab.n_rows; i++)
        if (!strcmp(tab.rows[i].name, "forward")) {
            seen = 1;
            CHECK(tab.rows[i].device_total_us > 0.099 && tab.rows[i].device_total_us < 0.101,
                  "the range's device time is its kernel's: %f us", tab.rows[i].device_total_us);
        }
    CHECK(seen, "the range has a row");
    lf_table_free(&tab);
    CHECK(st.ranges == 1 && st.kernels == 1 && st.calls == 1, "stats");
    lf_trace_free(t);
    lfi_free(s);
}

/* Push/pop, start/end across threads, domains, an end of unknown id, a range that does not nest. */
static void test_ranges(void)
{
    lfi_session *s = session(NULL);
    mark(s, LFC_MARK_START, 10, "outer", NULL, TID, 100);
    mark(s, LFC_MARK_START, 11, "inner", "mylib", TID, 200);
    mark(s, LFC_MARK_END, 0, NULL, "mylib", TID, 300);    /* a pop whose id CUPTI did not give */
    mark(s, LFC_MARK_START, 12, "async", "io", TID, 250); /* started here, ended on another thread */
    mark(s, LFC_MARK_END, 12, NULL, "io", TID2, 900);
    mark(s, LFC_MARK_END, 10, NULL, NULL, TID, 500);
    mark(s, LFC_MARK_INSTANT, 13, "tick", NULL, TID, 260);
    lf_trace *t = build(s, NULL);
    const lf_trace_event *outer = find(t, LF_TC_USER_ANNOTATION, "outer", 0),
                         *inner = find(t, LF_TC_USER_ANNOTATION, "inner", 0),
                         *async = find(t, LF_TC_USER_ANNOTATION, "async", 0);
    CHECK(outer && inner && async, "three ranges");
    CHECK(!find(t, LF_TC_USER_ANNOTATION, "tick", 0), "instant markers are not ranges");
    if (outer && inner && async) {
        CHECK(outer->dur_ns == 400 && inner->dur_ns == 100, "push/pop ends");
        CHECK(inner->extra_args && strstr(inner->extra_args, "\"domain\": \"mylib\""), "domain: %s",
              inner->extra_args ? inner->extra_args : "(none)");
        CHECK(!outer->extra_args, "the default domain says nothing");
        CHECK(async->dur_ns == 650 && async->pid == PID, "start/end ends on another thread: %lld",
              (long long)async->dur_ns);
        CHECK(async->tid != TID && outer->tid == TID && inner->tid == TID,
              "a range that overhangs its thread's ranges gets a lane of its own (tid %lld)", (long long)async->tid);
    }
    lf_trace_free(t);
    lfi_free(s);
}

/* n steps of one launch and kernel each; the kernel of step i runs after its step ends. */
static void steps(lfi_session *s, int n)
{
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "ProfilerStep#%d", i);
        const int64_t t = 10000 * (i + 1);
        mark(s, LFC_MARK_START, 100 + (uint32_t)i, name, NULL, TID, t);
        call(s, "cudaLaunchKernel", 500 + (uint32_t)i, TID, t + 100, t + 200);
        mark(s, LFC_MARK_END, 100 + (uint32_t)i, NULL, NULL, TID, t + 1000);
        kernel(s, "step_kernel", 500 + (uint32_t)i, t + 1500, t + 4000);
    }
}

static void test_steps(void)
{
    lfi_session *s = session(NULL);
    steps(s, 5);
    lf_trace *t = build(s, NULL);
    lf_trace_summary sum;
    OK(lf_trace_summarize(t, &sum));
    CHECK(sum.steps == 5 && sum.kernels_per_step == 1, "5 steps of 1 kernel: %lld, %f", (long long)sum.steps,
          sum.kernels_per_step);
    lf_trace_free(t);
    lfi_free(s);

    lfi_opts o = {.lo = INT64_MIN, .hi = -1, .step_lo = 2, .step_hi = 3};
    s = session(&o);
    steps(s, 5);
    lfi_stats st;
    t = build(s, &st);
    OK(lf_trace_summarize(t, &sum));
    CHECK(sum.steps == 2 && count(t, LF_TC_KERNEL) == 2 && count(t, LF_TC_RUNTIME) == 2,
          "--steps 2:3: %lld steps, %d kernels (each kept by its launch, though it ran after its step)",
          (long long)sum.steps, count(t, LF_TC_KERNEL));
    CHECK(find(t, LF_TC_USER_ANNOTATION, "ProfilerStep#2", 0) && find(t, LF_TC_USER_ANNOTATION, "ProfilerStep#3", 0) &&
              !find(t, LF_TC_USER_ANNOTATION, "ProfilerStep#4", 0),
          "steps 2 and 3");
    CHECK(st.windows == 2 && st.steps == 2, "two stretches kept: %lld", (long long)st.windows);
    lf_trace_free(t);
    lfi_free(s);

    int64_t lo, hi;
    CHECK(lfi_parse_steps("2:4", &lo, &hi) && lo == 2 && hi == 4, "2:4");
    CHECK(lfi_parse_steps("3", &lo, &hi) && lo == 3 && hi == 3, "3");
    CHECK(lfi_parse_steps("5:", &lo, &hi) && lo == 5 && hi == INT64_MAX, "5:");
    CHECK(lfi_parse_steps(":7", &lo, &hi) && lo == 0 && hi == 7, ":7");
    const char *bad[] = {"", ":", "4:2", "-1:3", "a", "1:b", "1:2:3", " 1", "1 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(!lfi_parse_steps(bad[i], &lo, &hi), "'%s' refused", bad[i]);
}

static void test_capture(void)
{
    for (int with_domain = 0; with_domain < 2; with_domain++) {
        lfi_opts o = {.lo = INT64_MIN,
                      .hi = -1,
                      .step_lo = -1,
                      .step_hi = -1,
                      .capture_range = with_domain ? "region@app" : "region"};
        lfi_session *s = session(&o);
        call(s, "cudaLaunchKernel", 1, TID, 100, 110);
        kernel(s, "before", 1, 150, 160);
        mark(s, LFC_MARK_START, 2, "region", "app", TID, 1000);
        call(s, "cudaLaunchKernel", 3, TID, 1100, 1110);
        kernel(s, "inside", 3, 1150, 1160);
        mark(s, LFC_MARK_END, 2, NULL, "app", TID, 2000);
        mark(s, LFC_MARK_START, 4, "region", "other", TID, 3000); /* same name, another domain */
        call(s, "cudaLaunchKernel", 5, TID, 3100, 3110);
        kernel(s, "other_domain", 5, 3150, 3160);
        mark(s, LFC_MARK_END, 4, NULL, "other", TID, 4000);
        lf_trace *t = build(s, NULL);
        CHECK(find(t, LF_TC_KERNEL, "inside", 0) && !find(t, LF_TC_KERNEL, "before", 0), "only inside the range");
        CHECK((find(t, LF_TC_KERNEL, "other_domain", 0) == NULL) == with_domain,
              "NAME@DOMAIN keeps that domain's only (%d)", with_domain);
        lf_trace_free(t);
        lfi_free(s);
    }
    lfi_opts o = {.lo = INT64_MIN, .hi = -1, .step_lo = -1, .step_hi = -1, .capture_range = "never"};
    lfi_session *s = session(&o);
    steps(s, 2);
    lfi_stats st;
    lf_trace *t = build(s, &st);
    CHECK(lf_trace_count(t) == 0 && st.windows == 0, "a range never seen keeps nothing");
    lf_trace_free(t);
    lfi_free(s);
}

/* --delay/--duration, and --kernels-only. */
static void test_window(void)
{
    lfi_opts o = {.lo = 15000, .hi = 35000, .step_lo = -1, .step_hi = -1};
    lfi_session *s = session(&o);
    steps(s, 5); /* steps at 10000, 20000, ... */
    lf_trace *t = build(s, NULL);
    CHECK(count(t, LF_TC_KERNEL) == 2 && count(t, LF_TC_USER_ANNOTATION) == 2, "the window keeps steps 1 and 2: %d",
          count(t, LF_TC_KERNEL));
    lf_trace_free(t);
    lfi_free(s);

    lfi_opts k = {.lo = INT64_MIN, .hi = -1, .step_lo = -1, .step_hi = -1, .kernels_only = 1};
    s = session(&k);
    steps(s, 3);
    lfc_rec mem = {.kind = LFC_MEMORY, .start = 5, .bytes = 100, .alloc = 1};
    lfi_add(s, &mem);
    t = build(s, NULL);
    const lf_trace_event *e = find(t, LF_TC_KERNEL, NULL, 0);
    CHECK(count(t, LF_TC_RUNTIME) == 0 && count(t, LF_TC_MEMORY) == 0 && count(t, LF_TC_KERNEL) == 3 &&
              count(t, LF_TC_USER_ANNOTATION) == 3,
          "--kernels-only: kernels and ranges, no calls");
    CHECK(e && e->flow_pid == -1 && e->ext_id == 0, "no launch to tie a kernel to");
    lf_trace_free(t);
    lfi_free(s);
}

/* A graph replay: one cudaGraphLaunch, three node kernels with its correlation. */
static void test_graph(void)
{
    lfi_session *s = session(NULL);
    mark(s, LFC_MARK_START, 1, "ProfilerStep#0", NULL, TID, 0);
    call(s, "cudaGraphLaunch", 77, TID, 100, 120);
    mark(s, LFC_MARK_END, 1, NULL, NULL, TID, 1000);
    for (int i = 0; i < 3; i++) {
        lfc_rec k = {.kind = LFC_KERNEL,
                     .name = i == 1 ? "node_b" : "node_a",
                     .start = 200 + 100 * i,
                     .end = 250 + 100 * i,
                     .corr = 77,
                     .stream = 13,
                     .grid = {1, 1, 1},
                     .block = {32, 1, 1},
                     .graph_id = 5,
                     .graph_node_id = 40 + (uint64_t)i};
        lfi_add(s, &k);
    }
    lf_trace *t = build(s, NULL);
    lf_trace_summary sum;
    OK(lf_trace_summarize(t, &sum));
    CHECK(sum.kernels_per_step == 3 && sum.graph_kernels_per_step == 3, "3 graph kernels per step: %f",
          sum.graph_kernels_per_step);
    const lf_trace_event *c = find(t, LF_TC_RUNTIME, "cudaGraphLaunch", 0);
    for (int i = 0; i < 3; i++) {
        const lf_trace_event *k = find(t, LF_TC_KERNEL, NULL, i);
        CHECK(k && c && k->correlation == 77 && k->flow_ts == c->ts_ns && k->ext_id == c->ext_id,
              "node kernel %d tied to its graph launch", i);
        CHECK(k && strstr(k->extra_args, "\"graph id\": 5, \"graph node id\": "), "graph ids: %s",
              k ? k->extra_args : "");
    }
    lf_breakdown b;
    OK(lf_trace_breakdown(t, &b));
    CHECK(b.n_graphs == 1 && b.graphs[0].kernels == 3 && b.graphs[0].launches == 1, "the breakdown's graph replays");
    lf_breakdown_free(&b);
    lf_trace_free(t);
    lfi_free(s);
}

/* Allocations with running totals; the dropped count through a file and back. */
static void test_memory_and_dropped(void)
{
    lfi_session *s = session(NULL);
    mark(s, LFC_MARK_START, 1, "alloc", NULL, TID, 0);
    lfc_rec c1 = {.kind = LFC_RUNTIME, .name = "cudaMalloc", .start = 10, .end = 20, .corr = 8, .pid = PID, .tid = TID};
    lfc_rec c2 = {.kind = LFC_RUNTIME, .name = "cudaFree", .start = 30, .end = 40, .corr = 9, .pid = PID, .tid = TID};
    lfc_rec a = {.kind = LFC_MEMORY, .start = 15, .corr = 8, .device = 0, .bytes = 1 << 20, .addr = 0x1000, .alloc = 1};
    lfc_rec f = {
        .kind = LFC_MEMORY, .start = 35, .corr = 9, .device = 0, .bytes = 1 << 20, .addr = 0x1000, .alloc = -1};
    lfi_add(s, &c1), lfi_add(s, &c2), lfi_add(s, &a), lfi_add(s, &f);
    mark(s, LFC_MARK_END, 1, NULL, NULL, TID, 100);
    lfi_meta m = {.to_epoch = 1700000000000000000, .pid = PID, .process_name = "prog", .dropped = 17};
    lf_trace *t = NULL;
    OK(lfi_build(s, &m, &t, NULL));
    const lf_trace_event *m1 = find(t, LF_TC_MEMORY, NULL, 0), *m2 = find(t, LF_TC_MEMORY, NULL, 1);
    CHECK(m1 && m2 && m1->mem_bytes == 1 << 20 && m2->mem_bytes == -(1 << 20) && m1->mem_total_allocated == 1 << 20 &&
              m2->mem_total_allocated == 0 && m1->tid == TID && m1->mem_device_type == 1,
          "an allocation and its release, on the thread that called");
    char path[] = "/tmp/test_inject_XXXXXX.json";
    int fd = mkstemps(path, 5);
    CHECK(fd >= 0, "temporary file");
    if (fd >= 0)
        close(fd);
    OK(lf_trace_write_json(t, path));
    lf_trace *back = NULL;
    OK(lf_trace_read_json(&back, path));
    unlink(path);
    CHECK(lf_trace_meta_get(back)->dropped_events == 17, "dropped count through the file: %lld",
          (long long)lf_trace_meta_get(back)->dropped_events);
    lf_table tab;
    OK(lf_table_build(back, LF_SORT_NONE, &tab));
    CHECK(tab.has_device_mem && tab.dropped_events == 17, "the table's memory columns and its dropped count");
    lf_table_free(&tab);
    lf_trace_free(back);
    lf_trace_free(t);
    lfi_free(s);
}

static char *shout(const char *name)
{
    char *d = strdup(name);
    for (char *p = d; p && *p; p++)
        *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
    return d;
}

static int calls_to_occupancy;

static int occ42(void *ctx, const lfc_rec *k, double bps)
{
    (void)ctx, (void)k, (void)bps;
    calls_to_occupancy++;
    return 42;
}

typedef struct adder {
    lfi_session *s;
    int id;
} adder;

static void *add_many(void *arg)
{
    adder *a = arg;
    for (int i = 0; i < 20000; i++)
        kernel(a->s, i % 2 ? "k_odd" : "k_even", (uint32_t)(a->id * 100000 + i + 1), i, i + 1);
    return NULL;
}

/* The hooks, and records handed over from several threads at once, as CUPTI's do. */
static void test_hooks_and_threads(void)
{
    lfi_session *s = session(NULL);
    pthread_t th[4];
    adder ad[4];
    for (int i = 0; i < 4; i++) {
        ad[i] = (adder){s, i};
        pthread_create(&th[i], NULL, add_many, &ad[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(lfi_count(s) == 80000 && lfi_lost(s) == 0, "80000 records from 4 threads: %lld", (long long)lfi_count(s));
    lfi_meta m = {.to_epoch = 0, .pid = PID, .sms = sms, .n_devices = 1, .occupancy = occ42, .demangle = shout};
    lf_trace *t = NULL;
    OK(lfi_build(s, &m, &t, NULL));
    const lf_trace_event *k = find(t, LF_TC_KERNEL, NULL, 0);
    CHECK(k && (!strcmp(k->name, "K_ODD") || !strcmp(k->name, "K_EVEN")), "names through the demangler");
    CHECK(k && strstr(k->extra_args, "\"est. achieved occupancy %\": 42"), "occupancy through its hook");
    CHECK(calls_to_occupancy == 80000 && count(t, LF_TC_KERNEL) == 80000, "every kernel kept");
    lf_trace_free(t);
    lfi_free(s);
}

/* PyTorch's own trace of the blog's MLP on an H200, turned back into the records CUPTI gave
 * (calls, kernels, copies; its ops and ranges as NVTX ranges), through the collector: the same
 * kernels per step, by name and count, the same device time per step. */
static lfi_session *replay(const lf_trace *t)
{
    lfi_session *s = session(NULL);
    uint32_t id = 1;
    for (int64_t i = 0; i < lf_trace_count(t); i++) {
        const lf_trace_event *e = lf_trace_get(t, i);
        lfc_rec r = {.name = e->name,
                     .start = e->ts_ns,
                     .end = e->ts_ns + e->dur_ns,
                     .corr = (uint32_t)e->correlation,
                     .pid = (uint32_t)e->pid,
                     .tid = (uint32_t)e->tid,
                     .device = (uint32_t)e->device,
                     .stream = (uint32_t)e->tid,
                     .bytes = (uint64_t)e->bytes,
                     .grid = {1, 1, 1},
                     .block = {1, 1, 1}};
        switch (e->cat) {
        case LF_TC_CPU_OP:
        case LF_TC_USER_ANNOTATION:
            mark_of(s, LFC_MARK_START, id, e->name, NULL, (uint32_t)e->pid, (uint32_t)e->tid, e->ts_ns);
            mark_of(s, LFC_MARK_END, id++, NULL, NULL, (uint32_t)e->pid, (uint32_t)e->tid, e->ts_ns + e->dur_ns);
            continue;
        case LF_TC_RUNTIME:
            r.kind = LFC_RUNTIME;
            break;
        case LF_TC_DRIVER:
            r.kind = LFC_DRIVER;
            break;
        case LF_TC_KERNEL:
            r.kind = LFC_KERNEL;
            break;
        case LF_TC_MEMCPY:
            r.kind = LFC_MEMCPY;
            break;
        case LF_TC_MEMSET:
            r.kind = LFC_MEMSET;
            break;
        default:
            continue;
        }
        lfi_add(s, &r);
    }
    return s;
}

/* Each op's and range's device time (PyTorch's table) is the same from the replay: its kernels
 * found their way under it through the innermost range open at their launch. */
static void same_op_device_time(const lf_trace *orig, const lf_trace *ours, const char *what)
{
    lf_table ta, tb;
    OK(lf_table_build(orig, LF_SORT_NONE, &ta));
    OK(lf_table_build(ours, LF_SORT_NONE, &tb));
    int compared = 0;
    for (int64_t i = 0; i < ta.n_rows; i++) {
        const lf_table_row *a = &ta.rows[i];
        if (a->is_device || a->device_total_us <= 0)
            continue;
        for (int64_t j = 0; j < tb.n_rows; j++)
            if (!tb.rows[j].is_device && !strcmp(tb.rows[j].name, a->name)) {
                compared++;
                CHECK(fabs(tb.rows[j].device_total_us - a->device_total_us) < 0.01 && tb.rows[j].count == a->count,
                      "%s: %s: device time %f/%f us, calls %lld/%lld", what, a->name, a->device_total_us,
                      tb.rows[j].device_total_us, (long long)a->count, (long long)tb.rows[j].count);
            }
    }
    CHECK(compared >= 3, "%s: %d rows with device time compared", what, compared);
    lf_table_free(&ta);
    lf_table_free(&tb);
}

static void test_recorded(const char *ref)
{
    static const char *const stems[] = {"mlp_64x128x768x3072_eager", "mlp_64x128x768x3072_compile"};
    for (size_t k = 0; k < sizeof stems / sizeof stems[0]; k++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s.json", ref, stems[k]);
        lf_trace *orig = NULL;
        if (access(path, R_OK) != 0) {
            printf("test_inject: %s not found: the recorded case is skipped\n", path);
            return;
        }
        OK(lf_trace_read_json(&orig, path));
        lfi_session *s = replay(orig);
        lfi_meta m = {.to_epoch = lf_trace_meta_get(orig)->base_ns, .pid = PID, .process_name = "python3"};
        lf_trace *ours = NULL;
        OK(lfi_build(s, &m, &ours, NULL));
        lf_step_profile a, b;
        OK(lf_step_profile_build(orig, &a));
        OK(lf_step_profile_build(ours, &b));
        CHECK(a.steps == b.steps && a.steps > 0 && a.kernels_per_step == b.kernels_per_step,
              "%s: steps %lld/%lld, kernels per step %f/%f", stems[k], (long long)a.steps, (long long)b.steps,
              a.kernels_per_step, b.kernels_per_step);
        CHECK(a.n_kernels == b.n_kernels, "%s: kernels by name %lld/%lld", stems[k], (long long)a.n_kernels,
              (long long)b.n_kernels);
        for (int64_t i = 0; i < a.n_kernels; i++) {
            int found = 0;
            for (int64_t j = 0; j < b.n_kernels; j++)
                if (!strcmp(a.kernels[i].name, b.kernels[j].name)) {
                    found = 1;
                    CHECK(a.kernels[i].per_step == b.kernels[j].per_step &&
                              a.kernels[i].ns_per_step == b.kernels[j].ns_per_step,
                          "%s: %.60s per step", stems[k], a.kernels[i].name);
                }
            CHECK(found, "%s: %.60s kept", stems[k], a.kernels[i].name);
        }
        CHECK(a.device_ns_per_step == b.device_ns_per_step, "%s: device time per step %f/%f", stems[k],
              a.device_ns_per_step, b.device_ns_per_step);
        same_op_device_time(orig, ours, stems[k]);
        printf("test_inject: %s replayed: %lld steps, %g kernels and %.3f us of device time per step\n", stems[k],
               (long long)b.steps, b.kernels_per_step, b.device_ns_per_step / 1e3);
        lf_step_profile_free(&a);
        lf_step_profile_free(&b);
        lf_trace_free(ours);
        lf_trace_free(orig);
        lfi_free(s);
    }
}

int main(int argc, char **argv)
{
    test_launch();
    test_ranges();
    test_steps();
    test_capture();
    test_window();
    test_graph();
    test_memory_and_dropped();
    test_hooks_and_threads();
    test_recorded(argc > 1 ? argv[1] : "../shared/ref/torch-h200");
    return lf_test_finish("test_inject");
}
