/* The trace tools as another program uses them: public headers only, linked to the shared
 * library. A guess checked (lf_trace_expect_*), the summary as text and JSON, a trace and its
 * table written together whole or not at all (lf_trace_json_write_cb, lf_write_files_atomic), the
 * args a reader keeps for a trace written back (keep_args), and names from a trace printed safely
 * (lf_term_cut). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "linfuse/io.h"
#include "linfuse/trace.h"
#include "testutil.h"

static char ref_dir[4096];

static lf_trace *read_ref(const char *stem)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.json", ref_dir, stem);
    lf_trace *t = NULL;
    lf_status s = lf_trace_read_json(&t, path);
    CHECK(s == LF_OK, "read %s: %s", path, lf_last_error());
    return t;
}

/* A trace of one step with kernels named names[0..n), each launched by a runtime call. */
static lf_trace *kernels_trace(const char *const *names, int n)
{
    lf_trace *t = NULL;
    if (lf_trace_create(&t) != LF_OK)
        return NULL;
    lf_trace_event step = {.cat = LF_TC_USER_ANNOTATION,
                           .name = "ProfilerStep#0",
                           .pid = 1,
                           .tid = 1,
                           .ts_ns = 0,
                           .dur_ns = 1000000,
                           .device = -1,
                           .flow_ts = -1,
                           .flow_pid = -1,
                           .flow_tid = -1};
    lf_trace_add(t, &step);
    for (int i = 0; i < n; i++) {
        lf_trace_event launch = step, k = step;
        launch.cat = LF_TC_RUNTIME, launch.name = "cudaLaunchKernel", launch.ts_ns = 1000 + 10000 * i;
        launch.dur_ns = 5000, launch.correlation = i + 1;
        k.cat = LF_TC_KERNEL, k.name = names[i], k.pid = 0, k.tid = 7, k.device = 0;
        k.ts_ns = 20000 + 10000 * i, k.dur_ns = 4000, k.correlation = i + 1;
        lf_trace_add(t, &launch);
        lf_trace_add(t, &k);
    }
    return t;
}

static void test_expect_ref(void)
{
    lf_trace *t = read_ref("mlp_64x128x768x3072_eager");
    if (!t)
        return;
    lf_step_profile p;
    OK(lf_step_profile_build(t, &p));
    const double kps = p.kernels_per_step;
    lf_step_profile_free(&p);
    /* the trace's own count and a kernel it has: as expected */
    lf_expect_pattern yes[] = {{"nvjet", LF_EXPECT_PRESENT}, {"triton", LF_EXPECT_ABSENT}};
    lf_expect_opts o = {kps, yes, 2};
    lf_trace_expect *e = NULL;
    char *text = NULL;
    int diffs = -1;
    OK(lf_trace_expect_create(&e, &o));
    OK(lf_trace_expect_check(e, t, 0, &text, &diffs));
    CHECK(diffs == 0 && !strncmp(text, "as expected: ", 13), "matched: %d %s", diffs, text);
    free(text);
    lf_trace_expect_free(e);
    /* a wrong count, a forbidden kernel (its name cut in text, whole in JSON), a missing one */
    lf_expect_pattern no[] = {{"zzz", LF_EXPECT_PRESENT}, {"Gelu", LF_EXPECT_ABSENT}};
    o = (lf_expect_opts){kps + 1, no, 2};
    OK(lf_trace_expect_create(&e, &o));
    OK(lf_trace_expect_check(e, t, 0, &text, &diffs));
    CHECK(diffs == 3, "three differences, got %d", diffs);
    CHECK(strstr(text, "kernels per step: expected ") && strstr(text, "no kernel matches --kernel 'zzz'") &&
              strstr(text, "the kernels are:\n") && strstr(text, "...' matches --no-kernel 'Gelu'") &&
              strstr(text, "3 differences from the guess\n"),
          "text: %s", text);
    free(text);
    OK(lf_trace_expect_check(e, t, 1, &text, &diffs));
    CHECK(diffs == 3 && !strncmp(text, "{\"matched\": false, ", 19) && strstr(text, "GeluCUDAKernelImpl") &&
              strstr(text, "std::array<char*, 2ul>)' matches --no-kernel 'Gelu'") && strstr(text, "\"kernels\": [{") &&
              text[strlen(text) - 1] == '\n',
          "json: %s", text);
    free(text);
    lf_trace_expect_free(e);
    lf_trace_free(t);
}

static void test_expect_refusals(void)
{
    lf_trace_expect *e = (lf_trace_expect *)&e; /* set to NULL on every failure */
    lf_expect_pattern bad[] = {{"(", LF_EXPECT_PRESENT}};
    lf_expect_opts o = {-1, bad, 1};
    FAILS(LF_EINVAL, "bad regular expression '('", lf_trace_expect_create(&e, &o));
    CHECK(e == NULL, "no guess made");
    o = (lf_expect_opts){-1, NULL, 0};
    FAILS(LF_EINVAL, "a guess of nothing", lf_trace_expect_create(&e, &o));
    o = (lf_expect_opts){NAN, NULL, 0};
    FAILS(LF_EINVAL, "kernels per step", lf_trace_expect_create(&e, &o));
    lf_expect_pattern null_re[] = {{NULL, LF_EXPECT_ABSENT}};
    o = (lf_expect_opts){-1, null_re, 1};
    FAILS(LF_EINVAL, "regex is NULL", lf_trace_expect_create(&e, &o));
    FAILS(LF_EINVAL, "'o' is NULL", lf_trace_expect_create(&e, NULL));
    /* the patterns are copied: the caller's may change after */
    char re[8] = "abc";
    lf_expect_pattern mine[] = {{re, LF_EXPECT_PRESENT}};
    o = (lf_expect_opts){-1, mine, 1};
    OK(lf_trace_expect_create(&e, &o));
    strcpy(re, "zzz");
    const char *names[] = {"k_abc"};
    lf_trace *t = kernels_trace(names, 1);
    char *text = NULL;
    int diffs = -1;
    OK(lf_trace_expect_check(e, t, 0, &text, &diffs));
    CHECK(diffs == 0, "the copy was checked: %s", text);
    free(text);
    FAILS(LF_EINVAL, "'text' is NULL", lf_trace_expect_check(e, t, 0, NULL, &diffs));
    lf_trace_expect_free(e);
    lf_trace_expect_free(NULL);
    lf_trace_free(t);
}

/* A kernel's name with terminal controls: escaped in text, a JSON escape in JSON. */
static void test_expect_hostile_names(void)
{
    const char *names[] = {"evil\x1b]0;pwned\x07kernel", "plain"};
    lf_trace *t = kernels_trace(names, 2);
    lf_expect_pattern p[] = {{"evil", LF_EXPECT_ABSENT}, {"nothing", LF_EXPECT_PRESENT}};
    lf_expect_opts o = {-1, p, 2};
    lf_trace_expect *e = NULL;
    char *text = NULL;
    int diffs = 0;
    OK(lf_trace_expect_create(&e, &o));
    OK(lf_trace_expect_check(e, t, 0, &text, &diffs));
    CHECK(diffs == 2 && strstr(text, "kernel 'evil\\x1b]0;pwned\\x07kernel' matches") && !strchr(text, '\x1b') &&
              strstr(text, "  plain (1 per step)\n"),
          "text: %s", text);
    free(text);
    OK(lf_trace_expect_check(e, t, 1, &text, &diffs));
    CHECK(strstr(text, "evil\\u001b]0;pwned\\u0007kernel") && !strchr(text, '\x1b'), "json: %s", text);
    free(text);
    lf_trace_expect_free(e);
    lf_trace_free(t);
}

static void test_summary_format(void)
{
    lf_trace *t = read_ref("linear_1024x32x64_eager");
    if (!t)
        return;
    lf_trace_summary s;
    char line[360], *text = NULL, want[512];
    OK(lf_trace_summarize(t, &s));
    lf_trace_summary_line(&s, line, sizeof line);
    OK(lf_trace_summary_format(t, -1, 0, &text));
    snprintf(want, sizeof want, "%s\nsteps=%lld ", line, (long long)s.steps);
    CHECK(!strncmp(text, want, strlen(want)) && strstr(text, " events=") && text[strlen(text) - 1] == '\n', "text: %s",
          text);
    free(text);
    OK(lf_trace_summary_format(t, 3, 0, &text));
    CHECK(!strncmp(text, "rank=3 kernels/step=", 20) && strstr(text, "\nrank=3 steps="), "rank text: %s", text);
    free(text);
    OK(lf_trace_summary_format(t, 1, 1, &text));
    CHECK(!strncmp(text, "{\"rank\": 1, \"steps\": ", 21) && strstr(text, "\"verdict\": \"") &&
              text[strlen(text) - 1] == '}',
          "json: %s", text);
    free(text);
    OK(lf_trace_summary_format(t, -1, 1, &text));
    CHECK(!strncmp(text, "{\"steps\": ", 10), "json without a rank: %s", text);
    free(text);
    FAILS(LF_EINVAL, "'text' is NULL", lf_trace_summary_format(t, -1, 0, NULL));
    lf_trace_free(t);
}

/* Add a step [lo, hi) (us) whose host launches one graph at lo + 1 replaying `kernels` kernels of
 * kdur us back to back on the device from kstart (us), on `streams` streams at once. */
static void graph_step(lf_trace *t, int64_t no, int64_t lo, int64_t hi, int64_t kstart, int kernels, int64_t kdur,
                       int streams)
{
    char name[48];
    snprintf(name, sizeof name, "ProfilerStep#%lld", (long long)no);
    lf_trace_event step = {.cat = LF_TC_USER_ANNOTATION,
                           .name = name,
                           .pid = 1,
                           .tid = 1,
                           .ts_ns = lo * 1000,
                           .dur_ns = (hi - lo) * 1000,
                           .device = -1,
                           .flow_ts = -1,
                           .flow_pid = -1,
                           .flow_tid = -1};
    OK(lf_trace_add(t, &step));
    lf_trace_event launch = step, k = step;
    launch.cat = LF_TC_RUNTIME, launch.name = "cudaGraphLaunch", launch.ts_ns = (lo + 1) * 1000;
    launch.dur_ns = 5000, launch.correlation = 100 + no;
    OK(lf_trace_add(t, &launch));
    for (int i = 0; i < kernels; i++)
        for (int st = 0; st < streams; st++) {
            k.cat = LF_TC_KERNEL, k.name = "gemm", k.pid = 0, k.tid = 7 + st, k.device = 0;
            k.ts_ns = (kstart + kdur * i) * 1000, k.dur_ns = kdur * 1000, k.correlation = 100 + no;
            OK(lf_trace_add(t, &k));
        }
}

/* How busy the device was, from the kernels' union and not from the launches: a graph launch
 * returns long before its kernels end, the host runs a step ahead, two streams overlap. */
static void test_busy_graphs(void)
{
    lf_trace *t = NULL;
    lf_trace_summary s;
    /* a decode of graph replays: each step's host part 10 us, its 20 kernels 200 us; the host runs
     * ahead, so step 1's kernels wait for step 0's: the device never rests */
    OK(lf_trace_create(&t));
    for (int64_t i = 0; i < 3; i++)
        graph_step(t, i, 20 * i, 20 * i + 10, 5 + 200 * i, 20, 10, 1);
    OK(lf_trace_summarize(t, &s));
    CHECK(s.device_busy > 0.99 && s.compute_bound && s.graph_kernels_per_step == 20, "graph decode busy %.3f",
          s.device_busy);
    lf_trace_free(t);
    /* the same on two streams at once: busy once, not twice (the sum of durations would say 2x) */
    OK(lf_trace_create(&t));
    for (int64_t i = 0; i < 3; i++)
        graph_step(t, i, 20 * i, 20 * i + 10, 5 + 200 * i, 20, 10, 2);
    OK(lf_trace_summarize(t, &s));
    CHECK(s.device_busy > 0.99 && s.device_busy <= 1, "two streams busy %.3f", s.device_busy);
    lf_trace_free(t);
    /* host-bound: steps of 100 us, each replaying one 10 us kernel right away: 10% busy */
    OK(lf_trace_create(&t));
    for (int64_t i = 0; i < 3; i++)
        graph_step(t, i, 100 * i, 100 * i + 100, 100 * i + 2, 1, 10, 1);
    OK(lf_trace_summarize(t, &s));
    CHECK(s.device_busy > 0.09 && s.device_busy < 0.11 && !s.compute_bound, "host-bound busy %.3f", s.device_busy);
    lf_trace_free(t);
    /* two streams each running 40 us at once in a 100 us step: 40% busy (the durations' sum said 80%) */
    OK(lf_trace_create(&t));
    for (int64_t i = 0; i < 3; i++)
        graph_step(t, i, 100 * i, 100 * i + 100, 100 * i + 2, 1, 40, 2);
    OK(lf_trace_summarize(t, &s));
    CHECK(s.device_busy > 0.39 && s.device_busy < 0.41 && !s.compute_bound, "overlapped busy %.3f", s.device_busy);
    lf_trace_free(t);
    /* a step whose work waits 1 ms after its launch for work the trace does not show (another
     * rank, a stream before recording): that wait is no host wait; its 200 us run busy */
    OK(lf_trace_create(&t));
    graph_step(t, 0, 0, 10, 1001, 20, 10, 1);
    OK(lf_trace_summarize(t, &s));
    CHECK(s.device_busy > 0.95, "a late start busy %.3f", s.device_busy);
    lf_trace_free(t);
}

static int put_text(FILE *f, void *ctx)
{
    return fputs(ctx, f) < 0 ? -1 : 0;
}

static int give_up(FILE *f, void *ctx)
{
    (void)f, (void)ctx;
    return -1;
}

static int64_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

/* A trace and its table as one set of files: both written, both read back; then a set whose
 * second file fails leaves the first as it was. */
static void test_trace_with_table(void)
{
    const char *names[] = {"k0", "k1"};
    lf_trace *t = kernels_trace(names, 2);
    if (!lf_test_tmpdir("lf_trace_api")) {
        CHECK(0, "tmpdir");
        lf_trace_free(t);
        return;
    }
    char json[256], gz[256], txt[256];
    snprintf(json, sizeof json, "%s", lf_test_path("t.json"));
    snprintf(gz, sizeof gz, "%s", lf_test_path("t.json.gz"));
    snprintf(txt, sizeof txt, "%s", lf_test_path("t.txt"));
    lf_trace_json_job jj = {t, json}, jz = {t, gz};
    lf_file_job jobs[3] = {
        {json, lf_trace_json_write_cb, &jj}, {gz, lf_trace_json_write_cb, &jz}, {txt, put_text, "the table\n"}};
    OK(lf_write_files_atomic(jobs, 3));
    for (int i = 0; i < 2; i++) {
        lf_trace *back = NULL;
        OK(lf_trace_read_json(&back, i ? gz : json));
        CHECK(lf_trace_count(back) == lf_trace_count(t), "%s read back: %lld events", i ? gz : json,
              (long long)lf_trace_count(back));
        lf_trace_free(back);
    }
    const int64_t before = file_size(json);
    lf_file_job failing[2] = {{json, lf_trace_json_write_cb, &jj}, {txt, give_up, NULL}};
    FAILS(LF_EIO, "t.txt", lf_write_files_atomic(failing, 2));
    CHECK(file_size(json) == before && file_size(txt) == 10, "a failed set changed nothing");
    lf_file_job no_writer = {json, NULL, NULL};
    FAILS(LF_EINVAL, "'write' is NULL", lf_write_files_atomic(&no_writer, 1));
    FAILS(LF_EINVAL, "expected 1 to 8", lf_write_files_atomic(jobs, LF_FILE_JOBS_MAX + 1));
    OK(lf_write_file_atomic(txt, put_text, "one\n"));
    CHECK(file_size(txt) == 4, "one file alone");
    unlink(json), unlink(gz), unlink(txt);
    rmdir(lf_test_dir);
    lf_trace_free(t);
}

/* The i-th event of t named name (i counts from 0), or NULL. */
static const lf_trace_event *named(const lf_trace *t, const char *name)
{
    for (int64_t i = 0; i < lf_trace_count(t); i++)
        if (!strcmp(lf_trace_get(t, i)->name, name))
            return lf_trace_get(t, i);
    return NULL;
}

/* The extra_args of the event of t named name ("(none)" when it has none, "(no event)"). */
static const char *extra_of(const lf_trace *t, const char *name)
{
    const lf_trace_event *e = named(t, name);
    return !e ? "(no event)" : e->extra_args ? e->extra_args : "(none)";
}

/* keep_args: the args no field holds kept as extra_args, in their own text, and written back once
 * each (the reader refuses an event with a key twice, so reading back checks that); off (the
 * default, lf_trace_read_json), none kept. Then a merge of two ranks of it. */
static void test_keep_args(void)
{
    if (!lf_test_tmpdir("lf_trace_keep")) {
        CHECK(0, "tmpdir");
        return;
    }
    char in[256], out[256], merged[256];
    snprintf(in, sizeof in, "%s", lf_test_path("in.json"));
    snprintf(out, sizeof out, "%s", lf_test_path("out.json"));
    snprintf(merged, sizeof merged, "%s", lf_test_path("merged.json"));
    lf_test_write_text(
        in,
        "{\"traceEvents\": [\n"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"pid\": 0, \"tid\": 7, \"ts\": 10, \"dur\": 2, "
        "\"args\": "
        "{\"External id\": 5, \"device\": 0, \"stream\": 7, \"correlation\": 9, \"grid\": [2, 1, 1], \"block\": [128, "
        "1, 1], \"na\\u00efve \\\"key\\\"\": \"x\\ny\\u0001\", \"blocks per SM\": 0.5, \"ratio\": 0.1, \"big\": 1e19, "
        "\"Input Dims\": [[1]]}},\n"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k2\", \"pid\": 0, \"tid\": 7, \"ts\": 13, \"dur\": 1, "
        "\"args\": "
        "{\"flops\": 2.5, \"bytes\": 1e19}},\n"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k3\", \"pid\": 0, \"tid\": 1000000007, \"ts\": 15, \"dur\": "
        "1, "
        "\"args\": {\"stream\": 7}},\n"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k4\", \"pid\": 0, \"tid\": 3, \"ts\": 17, \"dur\": 1},\n"
        "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 1, \"tid\": 1, \"ts\": 1, \"dur\": 20, "
        "\"args\": {\"External id\": 5, \"Record function id\": 3, \"Ev Idx\": 0, \"Input Dims\": [[2, 3], [3, 4]], "
        "\"Call stack\": \"a.py(1): f;b.py(2): g\", \"Sequence number\": 11, \"stream\": 0, \"device\": 1, \"bytes\": "
        "64}},\n"
        "{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 1, \"tid\": 1, \"ts\": 2, "
        "\"dur\": 3, \"args\": {\"correlation\": 9, \"External id\": 5, \"device\": 0, \"stream\": 7}},\n"
        "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"bare\", \"pid\": 1, \"tid\": 1, \"ts\": 0, \"dur\": "
        "30},\n"
        "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ann\", \"pid\": 1, \"tid\": 1, \"ts\": 0, \"dur\": "
        "29, "
        "\"args\": {\"External id\": 0, \"correlation\": 4}},\n"
        "{\"ph\": \"i\", \"s\": \"t\", \"cat\": \"cpu_instant_event\", \"name\": \"[memory]\", \"pid\": 1, \"tid\": 1, "
        "\"ts\": 4, \"args\": {\"Bytes\": 64, \"Total Allocated\": 64, \"Total Reserved\": 64, \"Addr\": 1, \"Device "
        "Type\": 0, \"Device Id\": -1, \"finished\": false}}\n"
        "]}\n");
    lf_trace *plain = NULL, *kept = NULL, *back = NULL, *m = NULL, *mback = NULL;
    OK(lf_trace_read_json(&plain, in));
    const lf_trace_read_opts keep = {.keep_args = 1};
    OK(lf_trace_read_json_opts(&kept, in, &keep));
    if (!plain || !kept)
        goto done;
    for (int64_t i = 0; i < lf_trace_count(plain); i++)
        CHECK(!lf_trace_get(plain, i)->extra_args, "by default no args are kept (%s)", lf_trace_get(plain, i)->name);
    /* a stream the track does not say, first; strings in UTF-8 as read (control characters as
     * \u00XX, as linfuse writes every JSON string); reals in their shortest form; what the writer
     * makes (device, correlation, External id) not kept; what it makes only for other categories
     * (a kernel's Input Dims, a CPU op's device, stream and bytes) kept */
    const struct {
        const char *name, *want;
    } cases[] = {
        {"k", "\"grid\":[2,1,1],\"block\":[128,1,1],\"na\xc3\xafve \\\"key\\\"\":\"x\\u000ay\\u0001\","
              "\"blocks per SM\":0.5,\"ratio\":0.1,\"big\":1e+19,\"Input Dims\":[[1]]"},
        {"k2", "\"flops\":2.5"},
        {"k3", "\"stream\":7"},
        {"k4", "(none)"},
        {"aten::mm", "\"stream\":0,\"Call stack\":\"a.py(1): f;b.py(2): g\",\"Sequence number\":11,\"device\":1,"
                     "\"bytes\":64"},
        {"cudaLaunchKernel", "\"stream\":7,\"device\":0"},
        {"bare", "(none)"},
        {"ann", "\"External id\":0,\"correlation\":4"},
        {"[memory]", "\"finished\":false"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        CHECK(!strcmp(extra_of(kept, cases[c].name), cases[c].want), "%s kept %s, expected %s", cases[c].name,
              extra_of(kept, cases[c].name), cases[c].want);
    CHECK(named(kept, "k")->correlation == 9 && named(kept, "k")->ext_id == 5 && named(kept, "k2")->flops == 2.5 &&
              named(kept, "k2")->bytes == 1e19,
          "the fields are read as before");
    /* written back and read again: the same args and fields */
    OK(lf_trace_write_json(kept, out));
    OK(lf_trace_read_json_opts(&back, out, &keep));
    if (!back)
        goto done;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        CHECK(!strcmp(extra_of(back, cases[c].name), cases[c].want), "%s read back: %s", cases[c].name,
              extra_of(back, cases[c].name));
    CHECK(named(back, "k2")->flops == 2.5 && named(back, "k2")->bytes == 1e19, "2.5 FLOPs and 1e19 bytes read back");
    /* two ranks of it merged: a kernel's stream stays its own, though its track becomes a lane */
    const lf_trace *two[2] = {kept, back};
    OK(lf_trace_merge(two, 2, &m));
    if (m)
        OK(lf_trace_write_json(m, merged));
    OK(lf_trace_read_json_opts(&mback, merged, &keep));
    if (!mback)
        goto done;
    CHECK(!strcmp(extra_of(mback, "k4"), "\"stream\":3"), "merged k4: %s", extra_of(mback, "k4"));
    CHECK(!strncmp(extra_of(mback, "k"), "\"stream\":7,", 11) && !strcmp(extra_of(mback, "k") + 11, cases[0].want),
          "merged k: %s", extra_of(mback, "k"));
    CHECK(!strcmp(extra_of(mback, "k3"), "\"stream\":7"), "merged k3: %s", extra_of(mback, "k3"));
    CHECK(!strcmp(extra_of(mback, "[memory]"), "\"finished\":false"), "merged [memory]: %s",
          extra_of(mback, "[memory]"));
    { /* what reads one process's steps refuses a merged trace (ranks' steps averaged say what no
       * rank ran), read back or as merged */
        lf_step_profile sp;
        lf_breakdown bd;
        lf_trace_summary sum;
        FAILS(LF_EINVAL, "a merged trace of 2 ranks", lf_step_profile_build(mback, &sp));
        FAILS(LF_EINVAL, "lf_trace_breakdown: a merged trace of 2 ranks", lf_trace_breakdown(m, &bd));
        FAILS(LF_EINVAL, "take one rank (lf_trace_of_rank)", lf_trace_summarize(m, &sum));
    }
    /* a bare array of events (PyTorch's export without Kineto): its events become CPU ops at the
     * end of the read, so what the writer makes for a CPU op is not kept */
    lf_trace_free(kept), lf_trace_free(back);
    kept = back = NULL;
    lf_test_write_text(in, "[{\"ph\": \"X\", \"name\": \"aten::mm\", \"pid\": 1, \"tid\": 1, \"ts\": 1, \"dur\": 2, "
                           "\"args\": {\"Input Dims\": [[2, 3], [3, 4]], \"Ev Idx\": 3, \"Call stack\": \"x\"}}]");
    OK(lf_trace_read_json_opts(&kept, in, &keep));
    if (kept)
        OK(lf_trace_write_json(kept, out));
    OK(lf_trace_read_json_opts(&back, out, &keep)); /* a key written twice would be refused here */
    CHECK(back && !strcmp(extra_of(back, "aten::mm"), "\"Call stack\":\"x\""), "bare array: %s",
          back ? extra_of(back, "aten::mm") : "(not read)");
done:
    lf_trace_free(plain), lf_trace_free(kept), lf_trace_free(back), lf_trace_free(m), lf_trace_free(mback);
    unlink(in), unlink(out), unlink(merged);
    rmdir(lf_test_dir);
}

/* lf_trace_merge_begin/add: the same merged trace as lf_trace_merge, an input with an earlier
 * clock moving what is there on; a refused add leaves the merged trace as it was. */
static void test_merge_incremental(void)
{
    const char *n0[] = {"a0", "a1"}, *n1[] = {"b0"};
    lf_trace *r0 = kernels_trace(n0, 2), *r1 = kernels_trace(n1, 1), *whole = NULL, *m = NULL, *other = NULL;
    if (!r0 || !r1)
        goto done;
    lf_trace_meta_of(r0)->base_ns = 5000000;
    lf_trace_meta_of(r0)->rank = 0;          /* its distributedInfo's; r1 has none: the rank of its place */
    lf_trace_meta_of(r1)->base_ns = 2000000; /* 3 ms before r0's */
    const lf_trace *in[2] = {r0, r1};
    OK(lf_trace_merge(in, 2, &whole));
    OK(lf_trace_merge_begin(&m));
    if (!whole || !m)
        goto done;
    FAILS(LF_EINVAL, "not made by lf_trace_merge_begin", lf_trace_merge_add(r0, r1));
    OK(lf_trace_merge_add(m, r0));
    const int64_t before = lf_trace_count(m);
    FAILS(LF_EINVAL, "both rank 0", lf_trace_merge_add(m, r0)); /* r0 again: rank 0 again */
    CHECK(lf_trace_count(m) == before && lf_trace_meta_get(m)->merged_ranks == 1, "a refused add changed nothing");
    FAILS(LF_EINVAL, "already a merged trace", lf_trace_merge_add(m, whole));
    OK(lf_trace_merge_add(m, r1));
    CHECK(lf_trace_count(m) == lf_trace_count(whole) && lf_trace_meta_get(m)->base_ns == 2000000 &&
              lf_trace_meta_get(m)->merged_ranks == 2,
          "merged one at a time: %lld events, base %lld", (long long)lf_trace_count(m),
          (long long)lf_trace_meta_get(m)->base_ns);
    for (int64_t i = 0; i < lf_trace_count(m) && i < lf_trace_count(whole); i++) {
        const lf_trace_event *a = lf_trace_get(m, i), *b = lf_trace_get(whole, i);
        CHECK(a->ts_ns == b->ts_ns && a->pid == b->pid && a->tid == b->tid && !strcmp(a->name, b->name),
              "event %lld: %s at %lld on %lld/%lld, merged whole: %s at %lld on %lld/%lld", (long long)i, a->name,
              (long long)a->ts_ns, (long long)a->pid, (long long)a->tid, b->name, (long long)b->ts_ns,
              (long long)b->pid, (long long)b->tid);
    }
    CHECK(lf_trace_get(m, 0)->ts_ns == 3000000, "r0's first event moved on by 3 ms: %lld",
          (long long)lf_trace_get(m, 0)->ts_ns);
    /* ranks that are not 0 to n - 1 (two of an eight-GPU job): listed as they are, each one's
     * events its own; a rank not there refused by name */
    {
        lf_trace *m35 = NULL, *r3 = NULL;
        lf_trace_meta_of(r0)->rank = 5, lf_trace_meta_of(r1)->rank = 3;
        const lf_trace *in35[2] = {r0, r1};
        OK(lf_trace_merge(in35, 2, &m35));
        int64_t ranks[4] = {-1, -1, -1, -1};
        CHECK(m35 && lf_trace_ranks(m35, ranks, 4) == 2 && ranks[0] == 3 && ranks[1] == 5,
              "ranks 3 and 5 listed: %lld, %lld", (long long)ranks[0], (long long)ranks[1]);
        CHECK(lf_trace_ranks(r0, ranks, 4) == 0, "a trace that is no merged one has no ranks");
        int64_t first[2] = {-1, -7};
        CHECK(m35 && lf_trace_ranks(m35, first, 1) == 2 && first[0] == 3 && first[1] == -7,
              "cap 1: the smallest rank (3, merged second), nothing past cap: %lld %lld", (long long)first[0],
              (long long)first[1]);
        first[0] = -9;
        CHECK(m35 && lf_trace_ranks(m35, first, -5) == 2 && first[0] == -9, "a negative cap writes nothing");
        if (m35) {
            OK(lf_trace_of_rank(m35, 3, &r3));
            CHECK(r3 && lf_trace_count(r3) == lf_trace_count(r1), "rank 3 holds r1's %lld events",
                  (long long)lf_trace_count(r1));
            lf_trace_free(r3), r3 = NULL;
            FAILS(LF_EINVAL, "no rank 1 in the merged trace", lf_trace_of_rank(m35, 1, &r3));
        }
        lf_trace_free(m35);
        lf_trace_meta_of(r0)->rank = 0, lf_trace_meta_of(r1)->rank = -1;
    }
    /* an input whose clock is 200 days before the others': refused, the merged trace unchanged */
    const char *n2[] = {"c0"};
    other = kernels_trace(n2, 1);
    if (other) {
        lf_trace_meta_of(other)->base_ns = 2000000 - (int64_t)200 * 86400 * 1000000000;
        const int64_t ts0 = lf_trace_get(m, 0)->ts_ns, count = lf_trace_count(m);
        FAILS(LF_EINVAL, "115 days", lf_trace_merge_add(m, other));
        CHECK(lf_trace_get(m, 0)->ts_ns == ts0 && lf_trace_count(m) == count &&
                  lf_trace_meta_get(m)->base_ns == 2000000,
              "a refused clock left the merged trace as it was");
        /* bases 0, 10^16 ns (the most a trace's times may span) and -1 ns: the second input has no
         * events, so no event is far from its own base, yet the three bases span more than the
         * bound: refused at the third */
        lf_trace *empty = NULL, *early = kernels_trace(n2, 1), *m3 = NULL, *first = kernels_trace(n0, 2);
        OK(lf_trace_create(&empty));
        OK(lf_trace_merge_begin(&m3));
        if (empty && early && m3 && first) {
            lf_trace_meta_of(first)->base_ns = 0;
            lf_trace_meta_of(empty)->base_ns = 10000000000000000;
            lf_trace_meta_of(early)->base_ns = -1;
            OK(lf_trace_merge_add(m3, first));
            OK(lf_trace_merge_add(m3, empty));
            FAILS(LF_EINVAL, "115 days", lf_trace_merge_add(m3, early));
        }
        lf_trace_free(empty), lf_trace_free(early), lf_trace_free(m3), lf_trace_free(first);
    }
done:
    lf_trace_free(r0), lf_trace_free(r1), lf_trace_free(whole), lf_trace_free(m), lf_trace_free(other);
}

static void test_term_cut(void)
{
    char buf[64], small[5];
    CHECK(!strcmp(lf_term_cut(buf, sizeof buf, "a\x1b[2J\n\xff", 0), "a\\x1b[2J\\n\xef\xbf\xbd"), "escaped: %s", buf);
    CHECK(!strcmp(lf_term_cut(buf, sizeof buf, "abcdefgh", 5), "abcde..."), "cut: %s", buf);
    CHECK(!strcmp(lf_term_cut(buf, sizeof buf, NULL, 0), ""), "NULL is empty");
    /* what does not fit is left out between characters, never inside an escape */
    CHECK(!strcmp(lf_term_cut(small, sizeof small,
                              "ab\x1b"
                              "cdef",
                              0),
                  "ab"),
          "fits: %s", small);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_trace_api REF_DIR\n");
        return 2;
    }
    snprintf(ref_dir, sizeof ref_dir, "%s", argv[1]);
    test_expect_ref();
    test_expect_refusals();
    test_expect_hostile_names();
    test_summary_format();
    test_busy_graphs();
    test_trace_with_table();
    test_keep_args();
    test_merge_incremental();
    test_term_cut();
    return lf_test_finish("test_trace_api");
}
