/* The trace layer against PyTorch itself: for each reference trace made by torch.profiler on
 * an H200, the table linfuse builds from the JSON agrees with PyTorch's own table of the same
 * run, row by row (calls, every time and percentage, to the printed precision +-0.001) and in
 * both footers. Then bad files: each a clear error, none a crash. Usage: test_trace REF_DIR */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "linfuse/trace.h"
#include "testutil.h"

typedef struct trow {
    char name[128];
    double v[9]; /* the nine numeric columns, times in us, percentages in % */
    long calls;
    int used;
} trow;

/* "2.314ms" -> 2314.0 us; "NaN" -> -1 */
static double parse_cell(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (!strcmp(end, "ms"))
        v *= 1e3;
    else if (!strcmp(end, "s"))
        v *= 1e6;
    return v;
}

/* Parse table text into rows and the two footers. Returns the row count. */
static int parse_table(const char *text, trow *rows, int cap, double *cpu_total, double *dev_total)
{
    char *copy = strdup(text), *save = NULL;
    int n = 0, seps = 0;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "---", 3)) {
            seps++;
            continue;
        }
        if (!strncmp(line, "Self CPU time total: ", 21)) {
            *cpu_total = parse_cell(line + 21);
            continue;
        }
        if (!strncmp(line, "Self ", 5) && strstr(line, "time total: ")) {
            *dev_total = parse_cell(strstr(line, "time total: ") + 12);
            continue;
        }
        if (seps != 2 || n == cap)
            continue;
        /* the name is right-aligned in its column and may contain spaces: the last 10 cells
         * are the numbers, separated by two or more spaces */
        char *cells[16];
        int nc = 0;
        char *p = line + strlen(line);
        while (p > line && nc < 10) {
            while (p > line && p[-1] == ' ')
                *--p = '\0';
            char *q = p;
            while (q > line && !(q[-1] == ' ' && q - 1 > line && q[-2] == ' '))
                q--;
            cells[nc++] = q;
            p = q;
        }
        while (p > line && p[-1] == ' ')
            *--p = '\0';
        char *name = line;
        while (*name == ' ')
            name++;
        trow *r = &rows[n++];
        memset(r, 0, sizeof *r);
        snprintf(r->name, sizeof r->name, "%s", name);
        r->calls = atol(cells[0]);
        for (int c = 1; c < 10; c++)
            r->v[9 - c] = parse_cell(cells[c]);
    }
    free(copy);
    return n;
}

static void compare_with_pytorch(const char *dir, const char *stem)
{
    char jpath[512], tpath[512];
    snprintf(jpath, sizeof jpath, "%s/%s.json", dir, stem);
    snprintf(tpath, sizeof tpath, "%s/%s.txt", dir, stem);
    FILE *f = fopen(tpath, "r");
    CHECK(f != NULL, "cannot open %s", tpath);
    if (!f)
        return;
    static char want[1 << 16];
    size_t len = fread(want, 1, sizeof want - 1, f);
    want[len] = '\0';
    fclose(f);
    lf_trace *t = NULL;
    OK(lf_trace_read_json(&t, jpath));
    lf_table tab;
    OK(lf_table_build(t, LF_SORT_DEVICE_TIME_TOTAL, &tab));
    char *got = NULL;
    lf_table_opts o = {.sort_by = LF_SORT_DEVICE_TIME_TOTAL, .row_limit = 25};
    OK(lf_table_format(&tab, &o, &got));
    static trow a[64], b[64];
    double ac = -2, ad = -2, bc = -3, bd = -3;
    int na = parse_table(got, a, 64, &ac, &ad), nb = parse_table(want, b, 64, &bc, &bd);
    CHECK(na == nb && nb > 0, "%s: %d rows, PyTorch has %d", stem, na, nb);
    CHECK(fabs(ac - bc) <= 0.0015 && fabs(ad - bd) <= 0.0015, "%s: footers %.3f/%.3f vs PyTorch %.3f/%.3f", stem, ac,
          ad, bc, bd);
    /* each PyTorch row matches one of ours with the same name and numbers (order of ties may differ) */
    for (int i = 0; i < nb; i++) {
        int found = 0;
        for (int j = 0; j < na && !found; j++) {
            if (a[j].used || strcmp(a[j].name, b[i].name) || a[j].calls != b[i].calls)
                continue;
            int same = 1;
            for (int c = 0; c < 9; c++)
                same &= fabs(a[j].v[c] - b[i].v[c]) <= 0.0015 * (b[i].v[c] >= 1000 ? 1000 : 1);
            if (same)
                a[j].used = found = 1;
        }
        CHECK(found, "%s: PyTorch's row '%s' (%ld calls, self CPU %.3f, self device %.3f) has no match in:\n%s", stem,
              b[i].name, b[i].calls, b[i].v[1], b[i].v[5], got);
    }
    free(got);
    lf_table_free(&tab);
    lf_trace_free(t);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_bad_files(void)
{
    char dir[] = "/tmp/lf_test_trace_XXXXXX", path[256];
    if (!mkdtemp(dir))
        return;
    lf_trace *t = (lf_trace *)1;
    FAILS(LF_EIO, "is a directory", lf_trace_read_json(&t, dir));
    CHECK(t == NULL, "no trace on failure");
    snprintf(path, sizeof path, "%s/missing.json", dir);
    FAILS(LF_EIO, "No such file", lf_trace_read_json(&t, path));
    static const struct {
        const char *text, *needle;
    } cases[] = {
        {"", "is empty"},
        {"{\"traceEvents\": [ {\"ph\": \"X\", ", ":1:"}, /* truncated: a position */
        {"{\"traceEvents\": 5}", "no \"traceEvents\" array"},
        {"[1, 2]", "is not an object"},
        {"{\"traceEvents\": [{\"name\": \"a\"}]}", "no \"ph\""},
        {"{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": \"soon\", \"dur\": 1}]}", "absurd"},
        {"{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": 1e300, \"dur\": 1}]}", "absurd"},
        {"{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1, \"dur\": 1}]}", "no \"name\""},
        {"{\"a\": 1, \"a\": 2}", "no \"traceEvents\""},
        {"{\"traceEvents\": [{\"ph\": \"X\", \"ph\": \"i\"}]}", "duplicate"},
        {"{\"traceEvents\": [], \"traceEvents\": []}", "two \"traceEvents\""},
        {"{\"traceEvents\": []} trailing", ":1:21: not valid JSON: text after"},
        {"{\"traceEvents\": [{\"ph\": \"i\", \"name\": \"a\"} {\"ph\": \"i\", \"name\": \"b\"}]}",
         "expected ',' or ']'"},
        {"{\"traceEvents\": [], \"x\": [1, 2, }", "not valid JSON"},
        {"{\"traceEvents\": [], \"x\": tru}", "unexpected word"},
        /* numbers JSON does not have, which strtod would take */
        {"{\"schemaVersion\": 0x10, \"traceEvents\": []}", "unexpected word"},
        {"{\"schemaVersion\": -Infinity, \"traceEvents\": []}", "unexpected word"},
        {"{\"traceEvents\": [], \"x\": [01]}", "unexpected word"},
        {"{\"traceEvents\": [], \"x\": 1.}", "unexpected word"},
        /* not JSON at all: refused from its first byte, before the file is read */
        {"\x01\x02 not a trace", "does not start like a JSON trace"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/bad%zu.json", dir, i);
        write_file(path, cases[i].text);
        FAILS(i ? LF_EINVAL : LF_EINVAL, cases[i].needle, lf_trace_read_json(&t, path));
        unlink(path);
    }
    /* unknown categories and missing args are fine: kept, not tabled */
    snprintf(path, sizeof path, "%s/odd.json", dir);
    write_file(
        path,
        "[{\"ph\": \"X\", \"cat\": \"mystery\", \"name\": \"m\", \"pid\": 1, \"tid\": 1, \"ts\": 1, \"dur\": 2},"
        " {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"op\", \"pid\": 1, \"tid\": 1, \"ts\": 5, \"dur\": 3}]");
    t = NULL;
    OK(lf_trace_read_json(&t, path));
    lf_table tab;
    OK(lf_table_build(t, LF_SORT_NONE, &tab));
    CHECK(tab.n_rows == 1 && !strcmp(tab.rows[0].name, "op") && tab.rows[0].self_cpu_us == 3.0, "odd trace table");
    lf_table_free(&tab);
    /* write it back and read it again: the same events */
    snprintf(path, sizeof path, "%s/again.json", dir);
    OK(lf_trace_write_json(t, path));
    lf_trace *t2 = NULL;
    OK(lf_trace_read_json(&t2, path));
    CHECK(lf_trace_count(t2) == 2 && lf_trace_get(t2, 1)->dur_ns == 3000, "round trip");
    lf_trace_free(t2);
    lf_trace_free(t);
    unlink(path);
    snprintf(path, sizeof path, "%s/odd.json", dir);
    unlink(path);
    rmdir(dir);
}

/* CUPTI's overhead records go to Kineto's pid -1, named "CUPTI Overhead", and are not taken
 * for the host process nor tabled. */
static void test_overhead_written(void)
{
    char dir[] = "/tmp/lf_trace_ovXXXXXX", path[256];
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    lf_trace *t = NULL;
    OK(lf_trace_create(&t));
    lf_trace_event ov = {.name = "Activity Buffer Request",
                         .cat = LF_TC_OVERHEAD,
                         .pid = -1,
                         .tid = 41,
                         .ts_ns = 1000,
                         .dur_ns = 2500,
                         .device = -1,
                         .flow_ts = -1,
                         .flow_pid = -1,
                         .flow_tid = -1};
    lf_trace_event op = {.name = "lf::addmm",
                         .cat = LF_TC_CPU_OP,
                         .pid = 7,
                         .tid = 41,
                         .ts_ns = 5000,
                         .dur_ns = 3000,
                         .device = -1,
                         .flow_ts = -1,
                         .flow_pid = -1,
                         .flow_tid = -1};
    OK(lf_trace_add(t, &ov));
    OK(lf_trace_add(t, &op));
    snprintf(path, sizeof path, "%s/ov.json", dir);
    OK(lf_trace_write_json(t, path));
    lf_trace_free(t);
    char text[8192] = {0};
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    CHECK(n > 0 && strstr(text, "\"pid\": -1, \"tid\": 0, \"args\": {\"name\": \"CUPTI Overhead\"}"),
          "overhead process named");
    CHECK(strstr(text, "\"process_labels\", \"ph\": \"M\", \"ts\": 0.000, \"pid\": 7,") != NULL,
          "host process is the op's, not the overhead's");
    t = NULL;
    OK(lf_trace_read_json(&t, path));
    CHECK(t && lf_trace_count(t) >= 2 && lf_trace_get(t, 0)->cat == LF_TC_OVERHEAD && lf_trace_get(t, 0)->pid == -1,
          "overhead read back");
    lf_table tab;
    OK(lf_table_build(t, LF_SORT_NONE, &tab));
    CHECK(tab.n_rows == 1 && !strcmp(tab.rows[0].name, "lf::addmm"), "overhead not tabled");
    lf_table_free(&tab);
    lf_trace_free(t);
    unlink(path);
    rmdir(dir);
}

/* A trace written from text, read back (NULL when it does not read). */
static lf_trace *read_text(const char *dir, const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return NULL;
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    lf_trace *t = NULL;
    lf_status s = lf_trace_read_json(&t, path);
    unlink(path);
    return s == LF_OK ? t : NULL;
}

static char *table_of(lf_trace *t, lf_table *tab)
{
    char *text = NULL;
    lf_table_opts o = {.sort_by = LF_SORT_NONE, .row_limit = -1};
    if (lf_table_build(t, LF_SORT_NONE, tab) != LF_OK || lf_table_format(tab, &o, &text) != LF_OK)
        return NULL;
    return text;
}

/* Hostile but well-formed traces: sums past 64 bits, a NUL byte after a number, overlapping
 * siblings, long names in a script of three-byte characters, the size limit. */
static void test_hostile(void)
{
    char dir[] = "/tmp/lf_trace_hostXXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    /* two [memory] events of 2^63 - 1 bytes inside one op: the sum saturates and says so */
    const char *mem =
        "[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"op\", \"pid\": 1, \"tid\": 1, \"ts\": 0, \"dur\": 10},"
        " {\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"name\": \"[memory]\", \"pid\": 1, \"tid\": 1, \"ts\": 1,"
        "  \"args\": {\"Bytes\": 9223372036854775807, \"Device Type\": 0}},"
        " {\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"name\": \"[memory]\", \"pid\": 1, \"tid\": 1, \"ts\": 2,"
        "  \"args\": {\"Bytes\": 9223372036854775807, \"Device Type\": 0}}]";
    lf_trace *t = read_text(dir, "mem.json", mem);
    CHECK(t != NULL, "memory trace: %s", lf_last_error());
    lf_table tab;
    char *text = t ? table_of(t, &tab) : NULL;
    CHECK(text && strstr(text, "a memory total passed the 64-bit range"), "saturated memory said: %s",
          text ? text : "");
    CHECK(t && tab.n_rows == 1 && tab.rows[0].cpu_mem == INT64_MAX, "memory total stops at INT64_MAX");
    free(text);
    if (t)
        lf_table_free(&tab);
    lf_trace_free(t);
    /* 2000 ops of 9e12 us each: 1.8e16 us of CPU time, no overflow, a positive total, a note */
    size_t cap = 2000 * 128 + 64, len = 0;
    char *big = malloc(cap);
    len += (size_t)snprintf(big + len, cap - len, "[");
    for (int i = 0; i < 2000; i++)
        len += (size_t)snprintf(big + len, cap - len,
                                "%s{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"op\", \"pid\": 1, \"tid\": %d, "
                                "\"ts\": 0, \"dur\": 9e12}",
                                i ? ", " : "", i);
    snprintf(big + len, cap - len, "]");
    t = read_text(dir, "long.json", big);
    free(big);
    CHECK(t != NULL, "long durations: %s", lf_last_error());
    text = t ? table_of(t, &tab) : NULL;
    CHECK(t && tab.self_cpu_total_us > 1.7e16 && tab.rows[0].self_cpu_us > 1.7e16, "self CPU total %.6g us",
          t ? tab.self_cpu_total_us : 0);
    CHECK(text && strstr(text, "not exact to the nanosecond"), "rounded totals said");
    CHECK(text && strstr(text, "Self CPU time total: 18000000000.000s"), "total printed: %s",
          text ? strstr(text, "Self CPU time total") : "");
    free(text);
    if (t)
        lf_table_free(&tab);
    lf_trace_free(t);
    /* a NUL byte after a number is not JSON */
    char path[256];
    snprintf(path, sizeof path, "%s/nul.json", dir);
    FILE *f = fopen(path, "wb");
    static const char nul_doc[] = "{\"schemaVersion\": 1\0, \"traceEvents\": []}";
    fwrite(nul_doc, 1, sizeof nul_doc - 1, f);
    fclose(f);
    FAILS(LF_EINVAL, "not valid JSON", lf_trace_read_json(&t, path));
    unlink(path);
    /* siblings that overlap inside their parent: a negative self time, said with the names */
    t = read_text(
        dir, "overlap.json",
        "[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"parent\", \"pid\": 1, \"tid\": 1, \"ts\": 0, \"dur\": 12},"
        " {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"first\", \"pid\": 1, \"tid\": 1, \"ts\": 0, \"dur\": 10},"
        " {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"second\", \"pid\": 1, \"tid\": 1, \"ts\": 5, \"dur\": 7}]");
    text = t ? table_of(t, &tab) : NULL;
    CHECK(text && strstr(text, "self CPU time is negative; first: \"parent\" holding \"second\""), "overlap warned: %s",
          text ? text : "");
    free(text);
    if (t)
        lf_table_free(&tab);
    lf_trace_free(t);
    /* a name of 60 three-byte characters: cut after 52 characters, not inside one */
    char name[256] = "", doc[512];
    for (int i = 0; i < 60; i++)
        strcat(name, "\xe5\x87\xa6"); /* U+51E6 */
    snprintf(doc, sizeof doc,
             "[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"%s\", \"pid\": 1, \"tid\": 1, \"ts\": 0, "
             "\"dur\": 1}]",
             name);
    t = read_text(dir, "wide.json", doc);
    text = t ? table_of(t, &tab) : NULL;
    char want[256];
    snprintf(want, sizeof want, "%.*s...  ", 52 * 3, name);
    CHECK(text && strstr(text, want), "a long name cut at 52 characters: %s", text ? text : "");
    size_t chars = 0, bad = 0;
    for (const char *p = text ? text : ""; *p;) {
        int k = lf_utf8_char(p);
        bad += k == 0;
        p += k ? k : 1;
        chars++;
    }
    CHECK(text && bad == 0, "the table is valid UTF-8 (%zu bad bytes)", bad);
    free(text);
    if (t)
        lf_table_free(&tab);
    lf_trace_free(t);
    /* the size limit: refused before reading, with the numbers, and the way to raise it */
    snprintf(path, sizeof path, "%s/ok.json", dir);
    f = fopen(path, "wb");
    fputs("{\"traceEvents\": []}", f);
    fclose(f);
    lf_trace_set_read_limit(10);
    FAILS(LF_EINVAL, "19 bytes (0.0 GB) is over the 10 bytes", lf_trace_read_json(&t, path));
    lf_trace_set_read_limit(0);
    t = NULL;
    OK(lf_trace_read_json(&t, path));
    lf_trace_free(t);
    unlink(path);
    rmdir(dir);
}

/* Names that would drive a terminal (retitle it, clear it, split a row) are printed escaped in
 * every text output, cut as PyTorch's table cuts names, and never cut into two alike. */
static void test_terminal_text(void)
{
    char buf[256];
    /* C0, DEL and C1 as Python's repr writes them; a byte that is not UTF-8 as U+FFFD */
    lf_term_cut(buf, sizeof buf, "a\x1b]0;t\x07\n\r\tb\x7f\xc2\x9b\xc2\x85\xff\xc3\xa9", 0);
    CHECK(!strcmp(buf, "a\\x1b]0;t\\x07\\n\\r\\tb\\x7f\\x9b\\x85\xef\xbf\xbd\xc3\xa9"), "escaped: %s", buf);
    CHECK(lf_term_width("a\x1b"
                        "b",
                        SIZE_MAX) == 6 &&
              lf_term_width("\xc3\xa9\xc3\xa9", 3) == 1,
          "widths");
    /* cut at 5 characters: "..." after them, never inside an escape */
    lf_term_cut(buf, sizeof buf, "abcdefgh", 5);
    CHECK(!strcmp(buf, "abcde..."), "cut: %s", buf);
    lf_term_cut(buf, sizeof buf,
                "abc\x1b"
                "defgh",
                5);
    CHECK(!strcmp(buf, "abc..."), "an escape is not split: %s", buf);
    lf_term_cut(buf, sizeof buf, "abcde", 5);
    CHECK(!strcmp(buf, "abcde"), "no cut at the width: %s", buf);
    /* two names alike for their first 60 characters keep 16 past them; the others the width */
    char a[128], b[128];
    memset(a, 'x', 60), memset(b, 'x', 60);
    snprintf(a + 60, sizeof a - 60, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    snprintf(b + 60, sizeof b - 60, "BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB");
    const char *names[] = {a, "short", b};
    size_t keep[3];
    CHECK(lf_term_keeps(names, 3, LF_TERM_NAME_KEEP, keep), "keeps");
    CHECK(keep[0] == 76 && keep[1] == LF_TERM_NAME_KEEP && keep[2] == 76, "keeps %zu %zu %zu", keep[0], keep[1],
          keep[2]);
    /* the table: an escaped name, its row whole (one line), as wide as the separator */
    char dir[] = "/tmp/lf_trace_termXXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    lf_trace *t =
        read_text(dir, "esc.json",
                  "[{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"x\\u001b]0;pwned\\u0007\\u001b[2Jy\\nz\\u009b\","
                  " \"pid\": 1, \"tid\": 1, \"ts\": 0, \"dur\": 10}]");
    lf_table tab;
    char *text = t ? table_of(t, &tab) : NULL;
    CHECK(text && strstr(text, "x\\x1b]0;pwned\\x07\\x1b[2Jy\\nz\\x9b  "), "escaped row: %s", text ? text : "");
    int lines = 0, raw = 0;
    for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p; p++) {
        lines += *p == '\n';
        raw += (*p < 0x20 && *p != '\n') || *p == 0x7f || (*p == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0);
    }
    CHECK(text && lines == 6 && raw == 0, "the row is one line (%d lines), no raw control (%d)", lines, raw);
    const char *row = text ? strchr(strchr(strchr(text, '\n') + 1, '\n') + 1, '\n') + 1 : NULL;
    CHECK(row && strchr(row, '\n') - row == strchr(text, '\n') - text, "the row as wide as the separator");
    free(text);
    if (t)
        lf_table_free(&tab);
    lf_trace_free(t);
    rmdir(dir);
}

/* FLOPs from input shapes under with_flops, PyTorch's formulas, one op of each kind; none
 * without the flag, and a trace's own FLOPs win over the shapes. */
static void test_shape_flops(void)
{
    static const struct {
        const char *name, *dims, *types, *concrete;
        double want;
    } ops[] = {
        {"aten::mm", "[[8, 4], [4, 3]]", "[\"float\", \"float\"]", NULL, 2.0 * 8 * 4 * 3},
        {"aten::addmm", "[[3], [8, 4], [4, 3], [], []]", "[\"float\", \"float\", \"float\", \"Scalar\", \"Scalar\"]",
         NULL, 2.0 * 8 * 4 * 3},
        {"aten::bmm", "[[5, 8, 4], [5, 4, 3]]", "[\"c10::BFloat16\", \"c10::BFloat16\"]", NULL, 2.0 * 5 * 8 * 4 * 3},
        {"aten::baddbmm", "[[5, 8, 3], [5, 8, 4], [5, 4, 3]]", "[\"float\", \"float\", \"float\"]", NULL,
         2.0 * 5 * 8 * 4 * 3},
        {"aten::mul", "[[6, 7], [6, 7]]", "[\"float\", \"float\"]", NULL, 42},
        {"aten::add", "[[6, 7], [], []]", "[\"float\", \"Scalar\", \"Scalar\"]", NULL, 42},
        {"aten::mul", "[[], [6, 7]]", "[\"Scalar\", \"float\"]", NULL, 0}, /* a Scalar first: none, as PyTorch */
        /* 2 x N x OH x OW x KH x KW x C x K / groups: 2 x 2 x 8 x 8 x 3 x 3 x 4 x 6 / 2 */
        {"aten::conv2d", "[[2, 4, 16, 16], [6, 2, 3, 3], [6], [], [], [], []]",
         "[\"float\", \"float\", \"float\", \"ScalarList\", \"ScalarList\", \"ScalarList\", \"Int\"]",
         "[\"\", \"\", \"\", \"[2, 2]\", \"[1, 1]\", \"[1, 1]\", \"2\"]", 2.0 * 2 * 8 * 8 * 3 * 3 * 4 * 6 / 2},
        {"aten::gelu", "[[6, 7], []]", "[\"float\", \"\"]", NULL, 0},
    };
    for (int with = 0; with < 2; with++)
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
            char doc[1024];
            snprintf(doc, sizeof doc,
                     "{\"with_flops\": %d, \"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"%s\", "
                     "\"pid\": 1, \"tid\": 1, \"ts\": 0, \"dur\": 5, \"args\": {\"Input Dims\": %s, \"Input type\": "
                     "%s%s%s}}]}",
                     with, ops[i].name, ops[i].dims, ops[i].types, ops[i].concrete ? ", \"Concrete Inputs\": " : "",
                     ops[i].concrete ? ops[i].concrete : "");
            lf_trace *t = NULL;
            lf_status s = lf_trace_read_json_buffer(&t, doc, strlen(doc), "flops");
            CHECK(s == LF_OK, "%s: %s", ops[i].name, lf_last_error());
            if (s != LF_OK)
                continue;
            const double got = lf_trace_get(t, 0)->flops, want = with ? ops[i].want : 0;
            CHECK(got == want, "%s with_flops %d: %.0f FLOPs, expected %.0f", ops[i].name, with, got, want);
            lf_trace_free(t);
        }
    const char *own = "{\"with_flops\": 1, \"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": "
                      "\"aten::mm\", \"pid\": 1, \"tid\": 1, \"ts\": 0, \"dur\": 5, \"args\": {\"flops\": 7, "
                      "\"Input Dims\": [[8, 4], [4, 3]], \"Input type\": [\"float\", \"float\"]}}]}";
    lf_trace *t = NULL;
    CHECK(lf_trace_read_json_buffer(&t, own, strlen(own), "own") == LF_OK && lf_trace_get(t, 0)->flops == 7,
          "a trace's own FLOPs are kept");
    lf_trace_free(t);
}

/* A trace written to a .gz name is gzip and reads back to the same table; the same bytes in a
 * buffer read too. */
static void test_gzip_round_trip(const char *ref)
{
    char in[512], dir[] = "/tmp/lf_trace_gzXXXXXX", out[600];
    snprintf(in, sizeof in, "%s/mlp_64x128x768x3072_eager.json", ref);
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    snprintf(out, sizeof out, "%s/copy.json.gz", dir);
    lf_trace *a = NULL, *b = NULL;
    CHECK(lf_trace_read_json(&a, in) == LF_OK, "read %s: %s", in, lf_last_error());
    CHECK(a && lf_trace_write_json(a, out) == LF_OK, "write %s: %s", out, lf_last_error());
    FILE *f = fopen(out, "rb");
    unsigned char magic[2] = {0, 0};
    CHECK(f && fread(magic, 1, 2, f) == 2 && magic[0] == 0x1f && magic[1] == 0x8b, "%s starts with gzip's magic", out);
    if (f)
        fclose(f);
    CHECK(lf_trace_read_json(&b, out) == LF_OK, "read back %s: %s", out, lf_last_error());
    if (a && b) {
        lf_table ta, tb;
        char *xa = table_of(a, &ta), *xb = table_of(b, &tb);
        CHECK(xa && xb && !strcmp(xa, xb), "the gzip copy's table equals the original's");
        free(xa), free(xb);
        lf_table_free(&ta), lf_table_free(&tb);
        CHECK(lf_trace_count(a) == lf_trace_count(b), "events: %lld vs %lld", (long long)lf_trace_count(a),
              (long long)lf_trace_count(b));
    }
    lf_trace_free(a), lf_trace_free(b);
    unlink(out);
    rmdir(dir);
}

/* A file cut short by another program while it is read (a profiler rewriting it in place): the
 * reader says so. Read through a mapping, this killed the process with SIGBUS. The progress
 * callback, called between events, does the cutting at a known point. */
static const char *shrink_path;
static void shrink_midway(void *ctx, const char *name, int64_t done, int64_t total)
{
    (void)name, (void)total;
    int *cut = ctx;
    if (!*cut && done > 0) {
        *cut = truncate(shrink_path, 1 << 20) == 0 ? 1 : -1;
    }
}

static void test_file_shrinks_while_read(void)
{
    char path[] = "/tmp/lf_test_shrink_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f)
        return;
    fputs("{\"traceEvents\": [\n", f);
    for (int i = 0; i < 120000; i++) /* ~12 MB */
        fprintf(f,
                "  {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 1, \"tid\": 1, \"ts\": %d, "
                "\"dur\": 1, \"args\": {\"External id\": %d}},\n",
                2 * i, i + 1);
    fputs("  {\"ph\": \"i\", \"name\": \"end\", \"pid\": 1, \"tid\": 1, \"ts\": 0, \"s\": \"t\"}\n]}\n", f);
    fclose(f);
    lf_trace *t = NULL;
    CHECK(lf_trace_read_json(&t, path) == LF_OK && t, "the whole file reads");
    lf_trace_free(t);
    int cut = 0;
    shrink_path = path;
    lf_trace_set_progress(shrink_midway, &cut);
    t = (lf_trace *)1;
    FAILS(LF_EIO, "was it being rewritten", lf_trace_read_json(&t, path));
    lf_trace_set_progress(NULL, NULL);
    CHECK(cut == 1 && t == NULL, "cut to 1 MB while read (cut %d), no trace", cut);
    unlink(path);
}

/* A file of head, then n bytes of c, then tail. */
static int write_padded(const char *path, const char *head, char c, size_t n, const char *tail)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    static char pad[1 << 20];
    memset(pad, c, sizeof pad);
    fputs(head, f);
    for (size_t k = 0; k < n; k += sizeof pad)
        fwrite(pad, 1, n - k < sizeof pad ? n - k : sizeof pad, f);
    fputs(tail, f);
    return fclose(f) == 0;
}

/* Read "-" with standard input the n bytes of text through a pipe (a child writes them). */
static lf_status read_piped(lf_trace **t, const char *text, size_t n)
{
    int p[2], saved = dup(STDIN_FILENO);
    if (saved < 0 || pipe(p) != 0)
        return lf_fail(LF_EIO, "test: pipe");
    pid_t w = fork();
    if (w == 0) {
        close(p[0]);
        for (size_t k = 0; k < n;) {
            ssize_t r = write(p[1], text + k, n - k);
            if (r <= 0)
                _exit(0);
            k += (size_t)r;
        }
        _exit(0);
    }
    close(p[1]);
    dup2(p[0], STDIN_FILENO);
    close(p[0]);
    lf_status st = lf_trace_read_json(t, "-");
    dup2(saved, STDIN_FILENO);
    close(saved);
    kill(w, SIGKILL);
    waitpid(w, NULL, 0);
    return st;
}

/* What the reader must not block on or hold: a named pipe is refused at once (open() blocked for
 * ever on one); standard input counts each byte against --max-bytes as it comes (50 KB passed a
 * limit of 1000, checked only when the buffer doubled) and is read as the parse goes (gzip too);
 * an event or a top-level value longer than 64 MB is refused (jansson held it whole: a 3 MB gzip
 * of one name cost 3 GB); positions stay right after pages of white space are given back. */
static void test_reader_limits(void)
{
    char dir[] = "/tmp/lf_trace_limXXXXXX", path[256];
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    lf_trace *t = (lf_trace *)1;
    snprintf(path, sizeof path, "%s/fifo.json", dir);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo");
    alarm(20); /* blocked in open(), the test dies here instead of hanging */
    FAILS(LF_EIO, "is a named pipe (FIFO), expected a trace file", lf_trace_read_json(&t, path));
    alarm(0);
    unlink(path);
    /* standard input: refused at byte 1001, read as it comes; gzip through the pipe too */
    char *doc = malloc(50100);
    int k = snprintf(doc, 50100, "{\"traceEvents\": [");
    memset(doc + k, ' ', 50000);
    strcpy(doc + k + 50000, "{\"ph\": \"X\", \"name\": \"a\", \"ts\": 1, \"dur\": 2}]}");
    lf_trace_set_read_limit(1000);
    FAILS(LF_EINVAL, "standard input: more than the 1000 bytes", read_piped(&t, doc, strlen(doc)));
    lf_trace_set_read_limit(0);
    t = NULL;
    CHECK(read_piped(&t, doc, strlen(doc)) == LF_OK && t && lf_trace_count(t) == 1, "standard input read: %s",
          lf_last_error());
    snprintf(path, sizeof path, "%s/piped.json.gz", dir);
    CHECK(t && lf_trace_write_json(t, path) == LF_OK, "gzip written");
    lf_trace_free(t);
    FILE *f = fopen(path, "rb");
    size_t gz_n = 0;
    char *gz = malloc(1 << 20);
    if (f && gz)
        gz_n = fread(gz, 1, 1 << 20, f);
    if (f)
        fclose(f);
    t = NULL;
    CHECK(gz_n > 2 && read_piped(&t, gz, gz_n) == LF_OK && t && lf_trace_count(t) == 1, "gzip on standard input: %s",
          lf_last_error());
    lf_trace_free(t);
    lf_trace_set_read_limit(20);
    FAILS(LF_EINVAL, "standard input: more than the 20 bytes", read_piped(&t, gz, gz_n));
    lf_trace_set_read_limit(0);
    free(gz);
    free(doc);
    unlink(path);
    /* 65 MB of white space inside one event, and inside a top-level value: refused, with where */
    snprintf(path, sizeof path, "%s/wide_event.json", dir);
    CHECK(write_padded(path, "{\"traceEvents\": [{\"ph\": \"X\",", ' ', 65 << 20,
                       "\"name\": \"a\", \"ts\": 1, \"dur\": 1}]}"),
          "written");
    FAILS(LF_EINVAL, "traceEvents[0] is longer than 64 MB", lf_trace_read_json(&t, path));
    CHECK(write_padded(path, "{\"deviceProperties\": [", '\n', 65 << 20, "], \"traceEvents\": []}"), "written");
    FAILS(LF_EINVAL, ":1:22: a top-level value is longer than 64 MB", lf_trace_read_json(&t, path));
    /* 40 M lines of nothing between events (given back as read): an error after them at its line */
    CHECK(write_padded(path, "{\"traceEvents\": [{\"ph\": \"i\", \"name\": \"a\", \"ts\": 1},", '\n', 40000000,
                       "  {\"ph\": \"X\" \"name\": \"b\"}]}"),
          "written");
    FAILS(LF_EINVAL, ":40000001:19: not valid JSON: '}' expected near '\"name\"'", lf_trace_read_json(&t, path));
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_trace REF_DIR\n");
        return 2;
    }
    static const char *const stems[] = {"linear_1024x32x64_eager", "linear_1024x32x64_compile", "matmul_add_64_eager",
                                        "mlp_64x128x768x3072_eager", "mlp_64x128x768x3072_compile"};
    for (size_t i = 0; i < sizeof stems / sizeof stems[0]; i++)
        compare_with_pytorch(argv[1], stems[i]);
    test_bad_files();
    test_overhead_written();
    test_hostile();
    test_terminal_text();
    test_shape_flops();
    test_gzip_round_trip(argv[1]);
    test_file_shrinks_while_read();
    test_reader_limits();
    return lf_test_finish("test_trace");
}
