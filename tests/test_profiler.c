/* The profiler end to end: the schedule's steps, the blog's dispatch facts read from the
 * written trace (parsed independently with jansson), Kineto-schema invariants (keys, nesting,
 * flows), the table built from the file equal to the one built in memory, shapes, memory
 * events, dropped-event accounting, bad paths. */
#include <jansson.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linfuse/profiler.h"
#include "testutil.h"

static char tmpdir[] = "/tmp/lf_test_profiler_XXXXXX";

typedef enum { M_LINEAR, M_LINEAR_NOBIAS, M_MATMUL_ADD, M_MLP } which;

/* Run `which` for 5 steps under schedule(wait=1, warmup=1, active=3) and write the trace. */
static lf_profiler *profile(which w, const char *path, const lf_prof_opts *extra)
{
    lf_rng rng;
    lf_rng_seed(&rng, 21);
    lf_nn_linear lin = {0};
    lf_nn_gated_mlp mlp = {0};
    lf_tensor *x = NULL, *wm = NULL, *b = NULL;
    if (w == M_LINEAR || w == M_LINEAR_NOBIAS) {
        lf_nn_linear_opts o = {32, 64, w == M_LINEAR, LF_DTYPE_BF16, LF_DEVICE_CPU};
        int64_t xs[2] = {1024, 32};
        if (lf_nn_linear_init(&lin, &o, &rng))
            abort();
        x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs);
    } else if (w == M_MATMUL_ADD) {
        int64_t s[2] = {64, 64};
        x = rand_tensor(&rng, LF_DTYPE_BF16, 2, s), wm = rand_tensor(&rng, LF_DTYPE_BF16, 2, s);
        b = rand_tensor(&rng, LF_DTYPE_BF16, 2, s);
    } else {
        lf_nn_gated_mlp_opts o = {64, 160, LF_DTYPE_BF16, LF_DEVICE_CPU, LF_ACT_GELU_TANH};
        int64_t xs[3] = {2, 8, 64};
        if (lf_nn_gated_mlp_init(&mlp, &o, &rng))
            abort();
        x = rand_tensor(&rng, LF_DTYPE_BF16, 3, xs);
    }
    lf_prof_opts o = extra ? *extra : (lf_prof_opts){0};
    o.use_schedule = 1;
    o.schedule = (lf_prof_schedule){.wait = 1, .warmup = 1, .active = 3, .repeat = 1};
    o.record_shapes = 1;
    lf_profiler *p = NULL;
    if (lf_prof_start(&p, &o) != LF_OK)
        abort();
    for (int step = 0; step < 5; step++) {
        lf_prof_range_push("fwd");
        lf_tensor *y = NULL, *t = NULL;
        lf_status s = w == M_MATMUL_ADD ? lf_matmul(&t, x, wm)
                      : w == M_MLP      ? lf_nn_gated_mlp_forward(&mlp, x, &y)
                                        : lf_nn_linear_forward(&lin, x, &y);
        if (s == LF_OK && w == M_MATMUL_ADD)
            s = lf_add(&y, t, b);
        CHECK(s == LF_OK, "forward: %s", lf_last_error());
        lf_tensor_free(t), lf_tensor_free(y);
        CHECK(lf_prof_range_pop() == LF_OK, "pop: %s", lf_last_error());
        CHECK(lf_prof_step(p) == LF_OK, "step: %s", lf_last_error());
    }
    CHECK(lf_prof_stop(p) == LF_OK, "stop: %s", lf_last_error());
    CHECK(lf_prof_export(p, path) == LF_OK, "export: %s", lf_last_error());
    lf_tensor_free(x), lf_tensor_free(wm), lf_tensor_free(b);
    lf_nn_linear_free(&lin);
    lf_nn_gated_mlp_free(&mlp);
    return p;
}

/* --- reading the file with jansson, independently of linfuse's reader --- */

typedef struct xev {
    const char *cat, *name;
    double ts, dur;
    json_int_t pid, tid, ext, corr;
    json_t *args;
} xev;

static int load_x(json_t *root, xev *out, int cap)
{
    json_t *evs = json_object_get(root, "traceEvents");
    int n = 0;
    for (size_t i = 0; i < json_array_size(evs) && n < cap; i++) {
        json_t *e = json_array_get(evs, i);
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X"))
            continue;
        json_t *a = json_object_get(e, "args");
        out[n++] = (xev){json_string_value(json_object_get(e, "cat")),
                         json_string_value(json_object_get(e, "name")),
                         json_number_value(json_object_get(e, "ts")),
                         json_number_value(json_object_get(e, "dur")),
                         json_integer_value(json_object_get(e, "pid")),
                         json_integer_value(json_object_get(e, "tid")),
                         json_integer_value(json_object_get(a, "External id")),
                         json_integer_value(json_object_get(a, "correlation")),
                         a};
    }
    return n;
}

static int by_ts(const void *a, const void *b)
{
    const double x = ((const xev *)a)->ts, y = ((const xev *)b)->ts;
    return (x > y) - (x < y);
}

static int inside(const xev *a, const xev *outer)
{
    return a->ts >= outer->ts && a->ts <= outer->ts + outer->dur;
}

/* Per ProfilerStep: count kernels (optionally with a name containing `needle`) and ops named `op`. */
static void per_step(const xev *ev, int n, const char *needle, const char *op, int *steps, int *kernels, int *ops)
{
    *steps = *kernels = *ops = 0;
    for (int s = 0; s < n; s++) {
        if (strncmp(ev[s].name, "ProfilerStep#", 13))
            continue;
        (*steps)++;
        for (int i = 0; i < n; i++) {
            if (!strcmp(ev[i].cat, "kernel") && inside(&ev[i], &ev[s]) && (!needle || strstr(ev[i].name, needle)))
                (*kernels)++;
            if (op && !strcmp(ev[i].cat, "cpu_op") && !strcmp(ev[i].name, op) && inside(&ev[i], &ev[s]))
                (*ops)++;
        }
    }
}

static json_t *load(const char *path)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    CHECK(root != NULL, "%s does not parse: %s at %d:%d", path, err.text, err.line, err.column);
    return root;
}

/* Kineto-schema invariants every linfuse trace keeps. */
static void check_schema(json_t *root, const char *what)
{
    static const char *const keys[] = {"schemaVersion",       "deviceProperties", "displayTimeUnit",
                                       "baseTimeNanoseconds", "traceEvents",      "traceName"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        CHECK(json_object_get(root, keys[k]) != NULL, "%s: top-level key %s", what, keys[k]);
    CHECK(json_integer_value(json_object_get(root, "linfuse_dropped_events")) == 0, "%s: no dropped events", what);
    json_t *evs = json_object_get(root, "traceEvents");
    json_t *last = json_array_get(evs, json_array_size(evs) - 1);
    CHECK(!strcmp(json_string_value(json_object_get(last, "name")), "Record Window End"), "%s: last event", what);
    static xev ev[4096];
    int n = load_x(root, ev, 4096);
    /* X events on one track nest strictly: no partial overlaps */
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j || ev[i].pid != ev[j].pid || ev[i].tid != ev[j].tid)
                continue;
            double a0 = ev[i].ts, a1 = ev[i].ts + ev[i].dur, b0 = ev[j].ts, b1 = ev[j].ts + ev[j].dur;
            if (a0 < b0 && b0 < a1 && a1 < b1)
                bad++;
        }
    CHECK(bad == 0, "%s: %d partially overlapping slices", what, bad);
    /* every kernel has an f flow (bp e) at its start and an s flow on the launching thread */
    int kernels = 0, matched = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(ev[i].cat, "kernel"))
            continue;
        kernels++;
        int s_ok = 0, f_ok = 0;
        for (size_t k = 0; k < json_array_size(evs); k++) {
            json_t *e = json_array_get(evs, k);
            const char *ph = json_string_value(json_object_get(e, "ph"));
            if (json_integer_value(json_object_get(e, "id")) != ev[i].corr ||
                strcmp(json_string_value(json_object_get(e, "cat")) ? json_string_value(json_object_get(e, "cat")) : "",
                       "ac2g"))
                continue;
            if (!strcmp(ph, "f") && json_integer_value(json_object_get(e, "pid")) == ev[i].pid &&
                !strcmp(json_string_value(json_object_get(e, "bp")), "e"))
                f_ok = 1;
            if (!strcmp(ph, "s")) {
                /* the start lies inside a cpu_op on the host thread */
                double ts = json_number_value(json_object_get(e, "ts"));
                for (int j = 0; j < n && !s_ok; j++)
                    s_ok = !strcmp(ev[j].cat, "cpu_op") && ev[j].pid == json_integer_value(json_object_get(e, "pid")) &&
                           ts >= ev[j].ts && ts <= ev[j].ts + ev[j].dur;
            }
        }
        matched += s_ok && f_ok;
    }
    CHECK(kernels > 0 && matched == kernels, "%s: %d of %d kernels have both flow ends", what, matched, kernels);
}

static void test_linear(void)
{
    char path[256];
    snprintf(path, sizeof path, "%s/linear.json", tmpdir);
    lf_profiler *p = profile(M_LINEAR, path, NULL);
    json_t *root = load(path);
    if (!root)
        return;
    check_schema(root, "linear");
    static xev ev[4096];
    int n = load_x(root, ev, 4096);
    /* the schedule: ProfilerStep#2..#4 only */
    int seen[8] = {0};
    for (int i = 0; i < n; i++)
        if (!strncmp(ev[i].name, "ProfilerStep#", 13))
            seen[atoi(ev[i].name + 13) & 7]++;
    CHECK(!seen[0] && !seen[1] && seen[2] == 1 && seen[3] == 1 && seen[4] == 1 && !seen[5], "steps #2..#4");
    int steps, kernels, ops;
    per_step(ev, n, NULL, "lf::addmm", &steps, &kernels, &ops);
    CHECK(steps == 3 && kernels == 3 && ops == 3, "one kernel and one addmm per step: %d %d %d", steps, kernels, ops);
    per_step(ev, n, "_bias", "lf::t", &steps, &kernels, &ops);
    CHECK(kernels == 3 && ops == 3, "the kernel carries the bias; t is there: %d %d", kernels, ops);
    per_step(ev, n, "add", NULL, &steps, &kernels, &ops);
    CHECK(kernels == 0, "no add kernel");
    /* t and addmm nest inside linear; the kernel's External id is addmm's */
    int nested = 0, linked = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(ev[i].name, "lf::linear"))
            continue;
        for (int j = 0; j < n; j++)
            if ((!strcmp(ev[j].name, "lf::t") || !strcmp(ev[j].name, "lf::addmm")) && inside(&ev[j], &ev[i]))
                nested++;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n && !strcmp(ev[i].cat, "kernel"); j++)
            linked += !strcmp(ev[j].name, "lf::addmm") && ev[j].ext == ev[i].ext;
    CHECK(nested == 6 && linked == 3, "linear{t, addmm}: %d nested, %d kernels linked to addmm", nested, linked);
    /* record_shapes: addmm(bias, x, w.t(), beta, alpha) */
    for (int i = 0; i < n; i++)
        if (!strcmp(ev[i].name, "lf::addmm")) {
            char *dims = json_dumps(json_object_get(ev[i].args, "Input Dims"), JSON_COMPACT);
            char *types = json_dumps(json_object_get(ev[i].args, "Input type"), JSON_COMPACT);
            char *strides = json_dumps(json_object_get(ev[i].args, "Input Strides"), JSON_COMPACT);
            CHECK(dims && !strcmp(dims, "[[64],[1024,32],[32,64],[],[]]"), "Input Dims %s", dims);
            CHECK(types &&
                      !strcmp(types, "[\"c10::BFloat16\",\"c10::BFloat16\",\"c10::BFloat16\",\"Scalar\",\"Scalar\"]"),
                  "Input type %s", types);
            CHECK(strides && !strcmp(strides, "[[1],[32,1],[1,32],[],[]]"), "Input Strides %s (w.t() is a stride swap)",
                  strides);
            free(dims), free(types), free(strides);
            break;
        }
    /* the table from the file equals the table built in memory */
    char *mem_text = NULL, *file_text = NULL;
    lf_table_opts to = {.sort_by = LF_SORT_DEVICE_TIME_TOTAL, .row_limit = 25};
    CHECK(lf_prof_table(p, &to, &mem_text) == LF_OK, "in-memory table");
    lf_trace *t = NULL;
    lf_table tab;
    CHECK(lf_trace_read_json(&t, path) == LF_OK, "read back: %s", lf_last_error());
    if (t && lf_table_build(t, LF_SORT_DEVICE_TIME_TOTAL, &tab) == LF_OK) {
        lf_table_format(&tab, &to, &file_text);
        lf_table_free(&tab);
    }
    CHECK(mem_text && file_text && !strcmp(mem_text, file_text), "table from file == table in memory\n%s\n%s", mem_text,
          file_text);
    CHECK(mem_text && strstr(mem_text, "ProfilerStep*") && strstr(mem_text, "Self CPU-dev"), "table text");
    /* ProfilerStep* has 3 calls */
    lf_table tb;
    if (t && lf_table_build(t, LF_SORT_NONE, &tb) == LF_OK) {
        int ok = 0;
        for (int64_t i = 0; i < tb.n_rows; i++)
            ok += !strcmp(tb.rows[i].name, "ProfilerStep*") && tb.rows[i].count == 3;
        CHECK(ok == 1, "ProfilerStep* with 3 calls");
        lf_table_free(&tb);
    }
    free(mem_text), free(file_text);
    lf_trace_free(t);
    json_decref(root);
    lf_prof_free(p);
}

static void test_other_models(void)
{
    char path[256];
    static xev ev[8192];
    int steps, kernels, ops;
    snprintf(path, sizeof path, "%s/nobias.json", tmpdir);
    lf_prof_free(profile(M_LINEAR_NOBIAS, path, NULL));
    json_t *root = load(path);
    int n = root ? load_x(root, ev, 8192) : 0;
    per_step(ev, n, NULL, "lf::mm", &steps, &kernels, &ops);
    CHECK(kernels == 3 && ops == 3, "no bias: mm and one kernel per step");
    per_step(ev, n, "bias", NULL, &steps, &kernels, &ops);
    CHECK(kernels == 0, "no bias in the kernel name");
    json_decref(root);

    snprintf(path, sizeof path, "%s/matmul_add.json", tmpdir);
    lf_prof_free(profile(M_MATMUL_ADD, path, NULL));
    root = load(path);
    n = root ? load_x(root, ev, 8192) : 0;
    per_step(ev, n, NULL, NULL, &steps, &kernels, &ops);
    CHECK(steps == 3 && kernels == 6, "matmul-add: two kernels per step (%d in %d steps)", kernels, steps);
    per_step(ev, n, "lf_cpu_add", NULL, &steps, &kernels, &ops);
    CHECK(kernels == 3, "one add kernel per step");
    json_decref(root);

    snprintf(path, sizeof path, "%s/mlp.json", tmpdir);
    lf_prof_free(profile(M_MLP, path, NULL));
    root = load(path);
    if (root)
        check_schema(root, "mlp");
    n = root ? load_x(root, ev, 8192) : 0;
    per_step(ev, n, NULL, NULL, &steps, &kernels, &ops);
    CHECK(steps == 3 && kernels == 15, "simple-mlp: five kernels per step (%d in %d steps)", kernels, steps);
    per_step(ev, n, "lf_cpu_gemm", NULL, &steps, &kernels, &ops);
    CHECK(kernels == 9, "three GEMMs per step");
    /* in PyTorch's order, as its traces of the same module show: gate, gelu, up, mul, down */
    qsort(ev, (size_t)n, sizeof *ev, by_ts);
    static const char *const order[5] = {"lf_cpu_gemm", "gelu", "lf_cpu_gemm", "mul", "lf_cpu_gemm"};
    int seen = 0;
    for (int i = 0; i < n && seen < 5; i++)
        if (!strcmp(ev[i].cat, "kernel") && strstr(ev[i].name, order[seen]))
            seen++;
        else if (!strcmp(ev[i].cat, "kernel"))
            break;
    CHECK(seen == 5, "simple-mlp's kernels in PyTorch's order (gate, gelu, up, mul, down): %d matched", seen);
    /* view ops launch nothing: no kernel's External id belongs to t, view or reshape */
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n && !strcmp(ev[i].cat, "kernel"); j++)
            bad += ev[j].ext == ev[i].ext && (!strcmp(ev[j].name, "lf::t") || !strcmp(ev[j].name, "lf::view") ||
                                              !strcmp(ev[j].name, "lf::reshape"));
    CHECK(bad == 0, "%d kernels launched by view ops", bad);
    json_decref(root);
}

static void scoped(void)
{
    LF_PROF_SCOPE("outer");
    {
        LF_PROF_SCOPE("inner");
    }
}

static void test_scope_macro(void)
{
    lf_profiler *p = NULL;
    lf_prof_opts o = {0};
    CHECK(lf_prof_start(&p, &o) == LF_OK, "start");
    scoped();
    CHECK(lf_prof_stop(p) == LF_OK, "stop");
    const lf_trace *t = NULL;
    CHECK(lf_prof_trace(p, &t) == LF_OK && lf_trace_count(t) == 2, "two ranges");
    if (t && lf_trace_count(t) == 2) {
        const lf_trace_event *a = lf_trace_get(t, 0), *b = lf_trace_get(t, 1);
        CHECK(!strcmp(a->name, "outer") && !strcmp(b->name, "inner") && b->ts_ns >= a->ts_ns &&
                  b->ts_ns + b->dur_ns <= a->ts_ns + a->dur_ns && a->cat == LF_TC_USER_ANNOTATION,
              "inner nests in outer");
    }
    lf_prof_free(p);
}

/* Durations in the trace are real time: a 30 ms sleep inside a range reads as 30 ms (the
 * stamps' clock, the TSC where there is one, is mapped to CLOCK_MONOTONIC at export). */
static void test_clock(void)
{
    lf_profiler *p = NULL;
    lf_prof_opts o = {0};
    CHECK(lf_prof_start(&p, &o) == LF_OK, "start");
    int64_t t0 = lf_prof_now_ns();
    lf_prof_range_push("sleep");
    struct timespec ts = {0, 30000000};
    nanosleep(&ts, NULL);
    lf_prof_range_pop();
    int64_t wall = lf_prof_now_ns() - t0;
    CHECK(lf_prof_stop(p) == LF_OK, "stop");
    const lf_trace *t = NULL;
    CHECK(lf_prof_trace(p, &t) == LF_OK && lf_trace_count(t) == 1, "one range");
    if (t && lf_trace_count(t) == 1) {
        int64_t d = lf_trace_get(t, 0)->dur_ns;
        CHECK(d >= 29000000 && d <= wall + 100000, "the range lasted %.3f ms on the trace, %.3f ms on the wall",
              d / 1e6, wall / 1e6);
    }
    lf_prof_free(p);
}

static void test_memory_and_drops(void)
{
    char path[256];
    snprintf(path, sizeof path, "%s/mem.json", tmpdir);
    lf_prof_opts o = {.profile_memory = 1, .with_flops = 1};
    lf_profiler *p = profile(M_LINEAR, path, &o);
    json_t *root = load(path);
    json_t *evs = root ? json_object_get(root, "traceEvents") : NULL;
    int mem = 0, freed = 0, events = 0, reserved_covers = 0, kept = 0;
    json_int_t out_reserved[3] = {0};
    for (size_t i = 0; i < json_array_size(evs); i++) {
        json_t *e = json_array_get(evs, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        if (name && !strcmp(name, "[memory]")) {
            json_t *a = json_object_get(e, "args");
            json_int_t bytes = json_integer_value(json_object_get(a, "Bytes")),
                       reserved = json_integer_value(json_object_get(a, "Total Reserved")),
                       allocated = json_integer_value(json_object_get(a, "Total Allocated"));
            if (bytes == 1024 * 64 * 2 && mem < 3) /* the linear's bf16 output */
                out_reserved[mem] = reserved;
            mem += bytes == 1024 * 64 * 2;
            freed += bytes == -(1024 * 64 * 2);
            kept += bytes == -(1024 * 64 * 2) && reserved - allocated >= 1024 * 64 * 2;
            events++;
            reserved_covers += reserved >= allocated && allocated > 0; /* in use, plus what is cached */
        }
    }
    CHECK(mem == 3 && freed == 3, "[memory] events: %d allocations and %d frees of the output", mem, freed);
    CHECK(reserved_covers == events, "CPU: Total Reserved >= Total Allocated (%d of %d events)", reserved_covers,
          events);
    /* the output (128 KiB: the host allocator caches blocks from 128 KiB) stays held when freed,
     * and is the block the next step's output takes: what the allocator holds does not grow */
    CHECK(kept == 3, "CPU: the freed output stays reserved (cached) at %d of 3 frees", kept);
    CHECK(out_reserved[1] == out_reserved[2] && out_reserved[1] > 0,
          "CPU: Total Reserved at the output's allocations %lld, %lld, %lld: flat after the first",
          (long long)out_reserved[0], (long long)out_reserved[1], (long long)out_reserved[2]);
    char *text = NULL;
    lf_table_opts to = {.sort_by = LF_SORT_CPU_TIME_TOTAL, .row_limit = -1};
    CHECK(lf_prof_table(p, &to, &text) == LF_OK && strstr(text, "CPU Mem") && strstr(text, "384.00 KB"),
          "memory columns:\n%s", text ? text : "");
    free(text);
    json_decref(root);
    lf_prof_free(p);

    /* ranges nested deeper than the profiler tracks are counted, and shown, not lost silently */
    lf_prof_opts plain = {0};
    CHECK(lf_prof_start(&p, &plain) == LF_OK, "start");
    lf_profiler *q = NULL;
    FAILS(LF_EINVAL, "another profiler", lf_prof_start(&q, &plain));
    for (int i = 0; i < 70; i++)
        lf_prof_range_push("deep");
    for (int i = 0; i < 70; i++)
        lf_prof_range_pop();
    CHECK(lf_prof_stop(p) == LF_OK, "stop");
    CHECK(lf_prof_dropped(p) == 6, "dropped %lld, expected 6", (long long)lf_prof_dropped(p));
    to.sort_by = LF_SORT_NONE;
    CHECK(lf_prof_table(p, &to, &text) == LF_OK && strstr(text, "not trusted: 6 records the profiler dropped"), "drops shown");
    free(text);
    /* a trace that cannot be written leaves nothing behind */
    FAILS(LF_EIO, "cannot write /nonexistent-dir/x.json", lf_prof_export(p, "/nonexistent-dir/x.json"));
    lf_prof_free(p);
    FAILS(LF_EINVAL, "active >= 1", lf_prof_start(&p, &(lf_prof_opts){.use_schedule = 1}));
    FAILS(LF_EINVAL, "activities 0x80", lf_prof_start(&p, &(lf_prof_opts){.activities = 0x80}));
    /* wait + warmup past INT_MAX: the steps after wait are warmup, with no overflow (UBSan) */
    lf_prof_opts huge = {.use_schedule = 1, .schedule = {.wait = 1, .warmup = INT32_MAX, .active = 1, .repeat = 1}};
    OK(lf_prof_start(&p, &huge));
    OK(lf_prof_step(p));
    OK(lf_prof_step(p));
    OK(lf_prof_stop(p));
    lf_prof_free(p);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_linear();
    test_other_models();
    test_memory_and_drops();
    test_scope_macro();
    test_clock();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return lf_test_finish("test_profiler");
}
