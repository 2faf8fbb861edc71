/* CUDA graph replays traced back to their captures, without a GPU: the collector's callback side
 * (capture/graph_nodes.c) is handed the sequences CUPTI's callbacks give it (a call entered, a node
 * made, the call left; nodes copied at instantiation, updated from another graph), into a
 * `linfuse profile` session beside recorded activity (NVTX markers, calls, kernels), and the trace
 * is built as the injection library builds it. Checked: each replayed kernel's External id is its
 * capture-time range's instance in that replay, and gpu_user_annotation spans cover the range's
 * kernels on their stream with the same id (nested ranges too, per replay); the call that made
 * the node and the thread that captured it; an update sends later replays to the other graph's
 * captures; a graph captured before the window still attributed; a capture on another thread
 * takes that thread's ranges; a node with no record stays a plain replayed kernel, counted; Python
 * frames carried to the kernel and written; the summary's shares of replayed time. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capture/capture.h"
#include "inject/inject.h"
#include "testutil.h"

static uint32_t PID_, TID_; /* this process and thread: what graph_nodes.c records for a capture */

static lfi_session *session(int64_t lo)
{
    lfi_opts o = {.lo = lo, .hi = -1, .step_lo = -1, .step_hi = -1};
    lfi_session *s = NULL;
    if (lfi_create(&s, &o) != LF_OK)
        abort();
    lfc_nodes_to(lfi_add, s, 0); /* the callbacks' records go to it */
    return s;
}

static void range(lfi_session *s, uint32_t id, const char *name, uint32_t tid, int64_t t0, int64_t t1)
{
    lfc_rec a = {.kind = LFC_MARKER,
                 .name = name,
                 .start = t0,
                 .end = t0,
                 .corr = id,
                 .pid = PID_,
                 .tid = tid,
                 .mark = LFC_MARK_START};
    lfc_rec b = {.kind = LFC_MARKER, .start = t1, .end = t1, .corr = id, .pid = PID_, .tid = tid, .mark = LFC_MARK_END};
    lfi_add(s, &a);
    lfi_add(s, &b);
}

static void call(lfi_session *s, const char *name, uint32_t corr, int64_t t0, int64_t t1)
{
    lfc_rec r = {.kind = LFC_RUNTIME, .name = name, .start = t0, .end = t1, .corr = corr, .pid = PID_, .tid = TID_};
    lfi_add(s, &r);
}

static void node_kernel(lfi_session *s, const char *name, uint32_t corr, uint64_t node, int64_t t0, int64_t t1)
{
    lfc_rec k = {.kind = LFC_KERNEL,
                 .name = name,
                 .start = t0,
                 .end = t1,
                 .corr = corr,
                 .stream = 7,
                 .grid = {1, 1, 1},
                 .block = {32, 1, 1},
                 .graph_id = 3,
                 .graph_node_id = node};
    lfi_add(s, &k);
}

/* What a stream capture's callbacks say for one kernel launched into it at time t. */
static void capture_launch(uint64_t node, uint32_t corr, int64_t t)
{
    lfc_call_enter("cudaLaunchKernel", corr, 0);
    lfc_call_enter("cuLaunchKernel", corr + 1000, 0); /* the driver's call inside: the outer one counts */
    lfc_node_made(node, 2, t);
    lfc_call_exit(1);
    lfc_call_exit(1);
}

static lf_trace *build(lfi_session *s, lfi_stats *st)
{
    lfi_meta m = {.to_epoch = 1700000000000000000, .pid = PID_, .process_name = "prog"};
    lf_trace *t = NULL;
    lf_status r = lfi_build(s, &m, &t, st);
    CHECK(r == LF_OK, "lfi_build: %d", (int)r);
    return t;
}

static const lf_trace_event *nth(const lf_trace *t, lf_trace_cat cat, const char *name, int k)
{
    for (int64_t i = 0; i < lf_trace_count(t); i++) {
        const lf_trace_event *e = lf_trace_get(t, i);
        if (e->cat == cat && (!name || !strcmp(e->name, name)) && k-- == 0)
            return e;
    }
    return NULL;
}

static int count(const lf_trace *t, lf_trace_cat cat, const char *name)
{
    int n = 0;
    for (int64_t i = 0; i < lf_trace_count(t); i++) {
        const lf_trace_event *e = lf_trace_get(t, i);
        n += e->cat == cat && (!name || !strcmp(e->name, name));
    }
    return n;
}

/* The GPU span of range `name` in the trace whose External id is ext, or NULL. */
static const lf_trace_event *span_of(const lf_trace *t, const char *name, int64_t ext)
{
    for (int64_t i = 0; i < lf_trace_count(t); i++) {
        const lf_trace_event *e = lf_trace_get(t, i);
        if (e->cat == LF_TC_GPU_ANNOTATION && !strcmp(e->name, name) && e->ext_id == ext)
            return e;
    }
    return NULL;
}

/* Capture (model > layer0, layer1), instantiate, replay twice inside "decode": each replayed kernel
 * under its layer's instance of that replay, the spans nested, the replay's call under decode. */
static void test_capture_replay(void)
{
    lfi_session *s = session(INT64_MIN);
    range(s, 1, "model", TID_, 100, 1000);
    range(s, 2, "layer0", TID_, 200, 400);
    range(s, 3, "layer1", TID_, 500, 800);
    lfc_call_enter("cudaStreamBeginCapture", 1, 1);
    lfc_call_exit(1);
    capture_launch(11, 5, 250);
    capture_launch(12, 6, 600);
    lfc_call_enter("cudaStreamEndCapture", 7, -1);
    lfc_call_exit(1);
    lfc_node_copied(111, 11, 900); /* cudaGraphInstantiate */
    lfc_node_copied(112, 12, 900);
    range(s, 4, "decode", TID_, 1900, 5000);
    for (int r = 0; r < 2; r++) {
        const int64_t t0 = 2000 + 1000 * r;
        call(s, "cudaGraphLaunch", 77 + r, t0, t0 + 10);
        node_kernel(s, "k_layer0", 77 + r, 111, t0 + 100, t0 + 200);
        node_kernel(s, "k_layer1", 77 + r, 112, t0 + 210, t0 + 300);
    }
    lfi_stats st;
    lf_trace *t = build(s, &st);
    const lf_trace_event *decode = nth(t, LF_TC_USER_ANNOTATION, "decode", 0);
    for (int r = 0; r < 2; r++) {
        const lf_trace_event *k0 = nth(t, LF_TC_KERNEL, "k_layer0", r), *k1 = nth(t, LF_TC_KERNEL, "k_layer1", r);
        const lf_trace_event *launch = nth(t, LF_TC_RUNTIME, "cudaGraphLaunch", r);
        if (!k0 || !k1 || !launch || !decode) {
            CHECK(0, "replay %d: its events", r);
            continue;
        }
        const lf_trace_event *l0 = span_of(t, "layer0", k0->ext_id), *l1 = span_of(t, "layer1", k1->ext_id);
        CHECK(l0 && l1 && k0->ext_id != k1->ext_id, "replay %d: each kernel under its layer's span (ext %lld, %lld)", r,
              (long long)k0->ext_id, (long long)k1->ext_id);
        CHECK(l0 && l0->ts_ns == k0->ts_ns && l0->dur_ns == k0->dur_ns && l0->tid == 7 && l0->pid == k0->pid,
              "replay %d: layer0's span is its kernel's, on its stream", r);
        const lf_trace_event *m = NULL;
        for (int i = 0; i < 4 && !m; i++) { /* model's span in this replay: over both kernels */
            const lf_trace_event *x = nth(t, LF_TC_GPU_ANNOTATION, "model", i);
            if (x && x->ts_ns == k0->ts_ns)
                m = x;
        }
        CHECK(m && m->ts_ns + m->dur_ns == k1->ts_ns + k1->dur_ns && m->ext_id != l0->ext_id,
              "replay %d: model's span covers both layers", r);
        CHECK(launch->ext_id == decode->ext_id, "replay %d: the launch stays under decode", r);
        CHECK(strstr(k0->extra_args, "\"captured by\": \"cudaLaunchKernel\"") &&
                  strstr(k0->extra_args, "\"captured in\": \"layer0\""),
              "replay %d: the call and the range that captured it: %s", r, k0->extra_args);
    }
    /* the table: decode (the replay's range) keeps its replays' device time; each layer a GPU row */
    lf_table tab;
    lf_table_opts to = {.row_limit = -1};
    OK(lf_table_build_opts(t, &to, &tab));
    const lf_table_row *dec = NULL, *gl0 = NULL;
    for (int64_t i = 0; i < tab.n_rows; i++) {
        if (!strcmp(tab.rows[i].name, "decode") && !tab.rows[i].is_device)
            dec = &tab.rows[i];
        if (!strcmp(tab.rows[i].name, "layer0") && tab.rows[i].is_device)
            gl0 = &tab.rows[i];
    }
    CHECK(dec && dec->device_total_us > 0.379 && dec->device_total_us < 0.381,
          "decode's device total is its replays' kernels: %.3f us", dec ? dec->device_total_us : -1);
    CHECK(gl0 && gl0->count == 2 && gl0->device_total_us > 0.199 && gl0->device_total_us < 0.201,
          "layer0 a GPU row of two replays: %lld, %.3f us", gl0 ? (long long)gl0->count : -1,
          gl0 ? gl0->device_total_us : -1);
    lf_table_free(&tab);
    CHECK(count(t, LF_TC_GPU_ANNOTATION, "layer0") == 2 && count(t, LF_TC_GPU_ANNOTATION, "model") == 2,
          "a span per range per replay: layer0 %d, model %d", count(t, LF_TC_GPU_ANNOTATION, "layer0"),
          count(t, LF_TC_GPU_ANNOTATION, "model"));
    CHECK(st.replayed == 4 && st.replayed_unknown == 0 && st.ranged_ns == 4 * 95 && st.replayed_ns == 4 * 95,
          "stats: %lld replayed, %lld unknown, %lld of %lld ns under a range", (long long)st.replayed,
          (long long)st.replayed_unknown, (long long)st.ranged_ns, (long long)st.replayed_ns);
    lf_trace_free(t);
    lfi_free(s);
}

/* An update from another graph (cudaGraphExecUpdate): later replays are the other graph's
 * captures; earlier ones stay where they were. A node with no record: plain, counted, said. */
static void test_update_and_unknown(void)
{
    lfi_session *s = session(INT64_MIN);
    range(s, 1, "first", TID_, 100, 300);
    capture_launch(21, 5, 200);
    range(s, 2, "second", TID_, 400, 600);
    capture_launch(31, 6, 500);
    lfc_call_enter("cudaGraphInstantiate", 8, 0); /* the copy reported made too: the copy counts */
    lfc_node_made(121, 4, 700);
    lfc_call_exit(1);
    lfc_node_copied(121, 21, 700);
    call(s, "cudaGraphLaunch", 80, 1000, 1010);
    node_kernel(s, "k", 80, 121, 1100, 1200);
    node_kernel(s, "k_unknown", 80, 999, 1200, 1250);
    lfc_node_copied(121, 31, 1500); /* updated from the second graph's node */
    call(s, "cudaGraphLaunch", 81, 2000, 2010);
    node_kernel(s, "k", 81, 121, 2100, 2200);
    lfi_stats st;
    lf_trace *t = build(s, &st);
    const lf_trace_event *a = nth(t, LF_TC_KERNEL, "k", 0), *b = nth(t, LF_TC_KERNEL, "k", 1);
    const lf_trace_event *u = nth(t, LF_TC_KERNEL, "k_unknown", 0);
    CHECK(a && span_of(t, "first", a->ext_id), "before the update: the first capture's range");
    CHECK(b && span_of(t, "second", b->ext_id), "after it: the second's");
    CHECK(u && u->ext_id == 0 && strstr(u->extra_args, "\"captured\": \"unknown") && !u->stack,
          "no record of its node: a plain replayed kernel, said: %s", u ? u->extra_args : "");
    CHECK(st.replayed == 3 && st.replayed_unknown == 1, "counted: %lld replayed, %lld unknown", (long long)st.replayed,
          (long long)st.replayed_unknown);
    lf_trace_free(t);
    lfi_free(s);
}

/* The window (--delay) opens after the capture: its ranges are no CPU events of the trace, but the
 * replays inside the window are attributed to them. */
static void test_captured_before_window(void)
{
    lfi_session *s = session(1500);
    range(s, 1, "warmup_capture", TID_, 100, 300);
    capture_launch(41, 5, 200);
    lfc_node_copied(141, 41, 400);
    call(s, "cudaGraphLaunch", 90, 2000, 2010);
    node_kernel(s, "k", 90, 141, 2100, 2200);
    lf_trace *t = build(s, NULL);
    const lf_trace_event *k = nth(t, LF_TC_KERNEL, "k", 0);
    CHECK(!nth(t, LF_TC_USER_ANNOTATION, "warmup_capture", 0), "the capture's range is outside the window");
    CHECK(k && k->ext_id && span_of(t, "warmup_capture", k->ext_id), "the replay is attributed to it all the same");
    lf_trace_free(t);
    lfi_free(s);
}

static void *capture_elsewhere(void *arg)
{
    (void)arg;
    capture_launch(51, 9, 250); /* inside no range of this thread's */
    capture_launch(52, 10, 350);
    return NULL;
}

/* A capture on another thread takes that thread's ranges, not the main thread's open at the
 * time; Python frames a node carries reach its kernel and the trace file. */
static void test_threads_and_frames(void)
{
    lfi_session *s = session(INT64_MIN);
    range(s, 1, "main_thread_range", TID_, 100, 500);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, capture_elsewhere, NULL) == 0 && pthread_join(th, NULL) == 0, "capture thread");
    lfc_rec py = {.kind = LFC_NODE,
                  .name = "cudaLaunchKernel",
                  .stack = "model.py(12): forward\nrun.py(3): <module>",
                  .start = 450,
                  .end = 450,
                  .corr = 11,
                  .pid = PID_,
                  .tid = TID_,
                  .graph_node_id = 53};
    lfi_add(s, &py);
    lfc_node_copied(151, 51, 600);
    lfc_node_copied(153, 53, 600);
    call(s, "cudaGraphLaunch", 95, 1000, 1010);
    node_kernel(s, "k_other", 95, 151, 1100, 1200);
    node_kernel(s, "k_py", 95, 153, 1200, 1300);
    lf_trace *t = build(s, NULL);
    const lf_trace_event *ko = nth(t, LF_TC_KERNEL, "k_other", 0), *kp = nth(t, LF_TC_KERNEL, "k_py", 0);
    CHECK(ko && ko->ext_id == 0 && !span_of(t, "main_thread_range", ko->ext_id) &&
              strstr(ko->extra_args, "\"captured by\": \"cudaLaunchKernel\""),
          "captured on a thread with no range: none of the main thread's: %s", ko ? ko->extra_args : "");
    CHECK(kp && span_of(t, "main_thread_range", kp->ext_id) && kp->stack &&
              !strcmp(kp->stack, "model.py(12): forward\nrun.py(3): <module>"),
          "the frames of its capture reach the kernel: %s", kp && kp->stack ? kp->stack : "(none)");
    /* through a file and back: "Python stack": [frames] */
    const int dir = lf_test_tmpdir("lf_replay_");
    char path[128];
    snprintf(path, sizeof path, "%s", lf_test_path("replay.json"));
    CHECK(dir, "a temporary directory");
    lf_trace *back = NULL;
    if (dir) {
        OK(lf_trace_write_json(t, path));
        OK(lf_trace_read_json(&back, path));
        unlink(path);
        rmdir(lf_test_dir);
    }
    const lf_trace_event *kb = back ? nth(back, LF_TC_KERNEL, "k_py", 0) : NULL;
    CHECK(kb && kb->stack && !strcmp(kb->stack, "model.py(12): forward\nrun.py(3): <module>"),
          "the frames read back: %s", kb && kb->stack ? kb->stack : "(none)");
    /* --group-by-stack: the replayed kernel's row by the frames of its capture */
    lf_table tab;
    lf_table_opts to = {.row_limit = -1, .group_by_stack = 2};
    OK(lf_table_build_opts(t, &to, &tab));
    int found = 0;
    for (int64_t i = 0; i < tab.n_rows; i++)
        found += !strcmp(tab.rows[i].name, "k_py") && tab.rows[i].n_stack == 2 &&
                 !strcmp(tab.rows[i].stack[0], "model.py(12): forward") &&
                 !strcmp(tab.rows[i].stack[1], "run.py(3): <module>");
    CHECK(found == 1, "k_py's row grouped by its capture's two frames");
    lf_table_free(&tab);
    lf_trace_summary sum;
    OK(lf_trace_summarize(t, &sum));
    CHECK(sum.graph_ranged > 0.49 && sum.graph_ranged < 0.51 && sum.graph_framed > 0.49 && sum.graph_framed < 0.51,
          "the summary's shares of replayed time: ranged %.3f, framed %.3f", sum.graph_ranged, sum.graph_framed);
    lf_trace_free(back);
    lf_trace_free(t);
    lfi_free(s);
}

/* --python-stack: a launch's frames (LFC_STACK, by its correlation id) on the call and its work;
 * no Python in this process: the reader gives none, and no stack record is made. */
static void test_python_stack(void)
{
    char buf[256] = "x";
    CHECK(lfc_python_frames(buf, sizeof buf, 8) == 0 && buf[0] == '\0', "no Python here: no frames");
    lfi_session *s = session(INT64_MIN);
    lfc_nodes_to(lfi_add, s, 1);
    lfc_call_enter("cudaLaunchKernel", 60, 0); /* no frames to read: nothing recorded */
    lfc_call_exit(1);
    CHECK(lfi_count(s) == 0, "no frames, no stack record: %lld", (long long)lfi_count(s));
    lfc_rec st = {.kind = LFC_STACK,
                  .name = "cudaLaunchKernel",
                  .stack = "train.py(7): step",
                  .corr = 61,
                  .pid = PID_,
                  .tid = TID_};
    lfi_add(s, &st);
    call(s, "cudaLaunchKernel", 61, 100, 110);
    lfc_rec k = {.kind = LFC_KERNEL, .name = "k", .start = 200, .end = 300, .corr = 61, .stream = 7};
    lfi_add(s, &k);
    lf_trace *t = build(s, NULL);
    const lf_trace_event *c = nth(t, LF_TC_RUNTIME, "cudaLaunchKernel", 0), *kk = nth(t, LF_TC_KERNEL, "k", 0);
    CHECK(c && c->stack && !strcmp(c->stack, "train.py(7): step") && kk && kk->stack && !strcmp(kk->stack, c->stack),
          "the launch's frames on the call and its kernel");
    lf_trace_free(t);
    lfi_free(s);
}

/* The last node record the callbacks gave (a sink of the test's own). */
static lfc_rec last_node;
static char last_name[64];

static void keep_node(void *ctx, const lfc_rec *r)
{
    (void)ctx;
    if (r->kind != LFC_NODE)
        return;
    last_node = *r;
    snprintf(last_name, sizeof last_name, "%s", r->name ? r->name : "");
}

/* Captures counted as they opened: a begin that failed opens none, an end without a begin (the
 * collector started mid-capture) leaves none open, not -1; a call the collector never saw end (it
 * stopped in between) is not the open call of a later session's node. */
static void test_capture_counts(void)
{
    lfc_nodes_to(keep_node, NULL, 0);
    lfc_call_enter("cudaStreamBeginCapture", 1, 1);
    lfc_call_exit(0); /* cudaErrorStreamCaptureUnsupported */
    CHECK(lfc_captures_open() == 0, "a failed begin opens no capture: %d", lfc_captures_open());
    lfc_call_enter("cudaStreamEndCapture", 2, -1);
    lfc_call_exit(1);
    CHECK(lfc_captures_open() == 0, "an end without its begin: %d open", lfc_captures_open());
    lfc_call_enter("cudaStreamBeginCapture", 3, 1);
    lfc_call_exit(1);
    CHECK(lfc_captures_open() == 1, "a capture open: %d", lfc_captures_open());
    lfc_call_enter("cudaMemcpyAsync", 7, 0); /* the collector stops and starts again inside this call */
    lfc_nodes_to(keep_node, NULL, 0);
    CHECK(lfc_captures_open() == 0, "a new session starts with none open");
    lfc_call_enter("cudaLaunchKernel", 31, 0);
    lfc_node_made(41, 2, 500);
    lfc_call_exit(1);
    CHECK(last_node.graph_node_id == 41 && last_node.corr == 31 && !strcmp(last_name, "cudaLaunchKernel"),
          "the node records its own call, not the one open before the restart: %s %u", last_name,
          (unsigned)last_node.corr);
    lfc_call_exit(1); /* the memcpy's end, seen after all: nothing to undo */
    lfc_call_enter("cudaLaunchKernel", 32, 0);
    lfc_node_made(42, 2, 600);
    lfc_call_exit(1);
    CHECK(last_node.graph_node_id == 42 && last_node.corr == 32, "and the next one too: %u", (unsigned)last_node.corr);
    lfc_nodes_to(NULL, NULL, 0);
}

int main(void)
{
    PID_ = lfc_pid(), TID_ = lfc_tid();
    test_capture_replay();
    test_update_and_unknown();
    test_captured_before_window();
    test_threads_and_frames();
    test_python_stack();
    test_capture_counts();
    lfc_nodes_to(NULL, NULL, 0);
    return lf_test_finish("test_replay");
}
