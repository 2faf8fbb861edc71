/* `linfuse trace export FILE --sqlite OUT.db`: a trace as a SQLite database (Debian's libsqlite3),
 * inserted as the trace is read (lf_trace_read_opts.each: no event is kept in memory), so a trace
 * of any size exports in bounded memory. Tables that join by ids: kernels, memops (copies and
 * sets), calls (CUDA runtime and driver), ops (CPU ops, ranges, Python frames, device-side
 * ranges), memory ([memory] events), then from what was read: strings, steps, ranks, devices,
 * threads, meta; views flows (a call and the work it launched, by correlation within a rank) and
 * the *_named forms of the tables with names written out. docs/traces.md gives the schema and
 * queries. Written to a temporary file renamed into place: a failed export leaves nothing.
 * Layer: trace/. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <sys/stat.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace/stats_table.h"

static const char SCHEMA[] =
    "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -65536;\n"
    "CREATE TABLE strings (id INTEGER PRIMARY KEY, value TEXT NOT NULL);\n"
    "CREATE TABLE kernels (id INTEGER PRIMARY KEY, rank INTEGER, name_id INTEGER REFERENCES strings, device INTEGER,"
    " stream INTEGER, pid INTEGER, tid INTEGER, ts_ns INTEGER, dur_ns INTEGER, correlation INTEGER, ext_id INTEGER,"
    " grid_x INTEGER, grid_y INTEGER, grid_z INTEGER, block_x INTEGER, block_y INTEGER, block_z INTEGER,"
    " registers INTEGER, shared_memory INTEGER, flops REAL, bytes REAL, graph_id INTEGER, graph_node_id INTEGER,"
    " stack TEXT, args TEXT);\n"
    "CREATE TABLE memops (id INTEGER PRIMARY KEY, rank INTEGER, kind TEXT, name_id INTEGER REFERENCES strings,"
    " operation TEXT, src_kind TEXT, dst_kind TEXT, device INTEGER, stream INTEGER, pid INTEGER, tid INTEGER,"
    " ts_ns INTEGER, dur_ns INTEGER, bytes REAL, correlation INTEGER, ext_id INTEGER, args TEXT);\n"
    "CREATE TABLE calls (id INTEGER PRIMARY KEY, rank INTEGER, api TEXT, name_id INTEGER REFERENCES strings,"
    " pid INTEGER, tid INTEGER, ts_ns INTEGER, dur_ns INTEGER, correlation INTEGER, ext_id INTEGER, stack TEXT,"
    " args TEXT);\n"
    "CREATE TABLE ops (id INTEGER PRIMARY KEY, rank INTEGER, kind TEXT, name_id INTEGER REFERENCES strings,"
    " pid INTEGER, tid INTEGER, ts_ns INTEGER, dur_ns INTEGER, ext_id INTEGER, correlation INTEGER, flops REAL,"
    " input_dims TEXT, input_types TEXT, stack TEXT, args TEXT);\n"
    "CREATE TABLE memory (id INTEGER PRIMARY KEY, rank INTEGER, pid INTEGER, tid INTEGER, ts_ns INTEGER,"
    " bytes INTEGER, total_allocated INTEGER, total_reserved INTEGER, device_type INTEGER, device INTEGER,"
    " addr INTEGER);\n"
    "BEGIN;\n";

static const char FINISH[] =
    "CREATE TABLE steps (id INTEGER PRIMARY KEY, rank INTEGER, step INTEGER, op_id INTEGER REFERENCES ops,"
    " ts_ns INTEGER, dur_ns INTEGER);\n"
    "INSERT INTO steps (rank, step, op_id, ts_ns, dur_ns) SELECT o.rank, CAST(substr(s.value, 14) AS INTEGER), o.id,"
    " o.ts_ns, o.dur_ns FROM ops o JOIN strings s ON s.id = o.name_id WHERE o.kind = 'user_annotation' AND"
    " s.value GLOB 'ProfilerStep#[0-9]*' ORDER BY o.rank, o.ts_ns;\n"
    "CREATE INDEX kernels_corr ON kernels (rank, correlation); CREATE INDEX memops_corr ON memops (rank, "
    "correlation);\n"
    "CREATE INDEX calls_corr ON calls (rank, correlation); CREATE INDEX ops_ext ON ops (rank, ext_id);\n"
    "CREATE INDEX kernels_ext ON kernels (rank, ext_id); CREATE INDEX ops_time ON ops (rank, pid, tid, ts_ns);\n"
    "CREATE VIEW flows AS SELECT c.id AS call_id, 'kernel' AS work, k.id AS work_id, c.rank AS rank, c.correlation"
    " AS correlation FROM calls c JOIN kernels k ON k.rank IS c.rank AND k.correlation = c.correlation"
    " WHERE c.correlation != 0 UNION ALL SELECT c.id, m.kind, m.id, c.rank, c.correlation FROM calls c JOIN memops m"
    " ON m.rank IS c.rank AND m.correlation = c.correlation WHERE c.correlation != 0;\n"
    "CREATE VIEW kernels_named AS SELECT k.*, s.value AS name FROM kernels k JOIN strings s ON s.id = k.name_id;\n"
    "CREATE VIEW memops_named AS SELECT m.*, s.value AS name FROM memops m JOIN strings s ON s.id = m.name_id;\n"
    "CREATE VIEW calls_named AS SELECT c.*, s.value AS name FROM calls c JOIN strings s ON s.id = c.name_id;\n"
    "CREATE VIEW ops_named AS SELECT o.*, s.value AS name FROM ops o JOIN strings s ON s.id = o.name_id;\n"
    "COMMIT;\n";

enum { S_STRING, S_KERNEL, S_MEMOP, S_CALL, S_OP, S_MEMORY, N_STMT };
static const char *const INSERTS[N_STMT] = {
    "INSERT INTO strings (id, value) VALUES (?, ?)",
    "INSERT INTO kernels (rank, name_id, device, stream, pid, tid, ts_ns, dur_ns, correlation, ext_id, grid_x, grid_y,"
    " grid_z, block_x, block_y, block_z, registers, shared_memory, flops, bytes, graph_id, graph_node_id, stack, args)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO memops (rank, kind, name_id, operation, src_kind, dst_kind, device, stream, pid, tid, ts_ns, dur_ns,"
    " bytes, correlation, ext_id, args) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO calls (rank, api, name_id, pid, tid, ts_ns, dur_ns, correlation, ext_id, stack, args)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO ops (rank, kind, name_id, pid, tid, ts_ns, dur_ns, ext_id, correlation, flops, input_dims,"
    " input_types, stack, args) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO memory (rank, pid, tid, ts_ns, bytes, total_allocated, total_reserved, device_type, device, addr)"
    " VALUES (?,?,?,?,?,?,?,?,?,?)"};

typedef struct exporter {
    sqlite3 *db;
    sqlite3_stmt *st[N_STMT];
    lf_strmap names; /* name -> string id; keys owned (names[]) */
    char **owned;
    int64_t n_owned, cap_owned;
    lf_trace *meta_of;        /* the trace the reader returns at the end: its meta and thread names */
    int64_t events, with_cat; /* events; those with a category the reader knew */
    char *path;
} exporter;

static lf_status sql_fail(exporter *x, const char *what)
{
    return lf_fail(LF_EIO, "%s: SQLite: %s: %s", x->path, what, sqlite3_errmsg(x->db));
}

static int64_t string_id(exporter *x, const char *s)
{
    lf_strmap_entry *e = lf_strmap_find(&x->names, s, 0) ? lf_strmap_get(&x->names, s, 0) : NULL;
    if (e)
        return e->val;
    if (x->n_owned == x->cap_owned) {
        const int64_t cap = x->cap_owned ? 2 * x->cap_owned : 256;
        char **o = realloc(x->owned, (size_t)cap * sizeof *o);
        if (!o)
            return -1;
        x->owned = o, x->cap_owned = cap;
    }
    char *copy = strdup(s);
    if (!copy || !(e = lf_strmap_get(&x->names, copy, 0))) {
        free(copy);
        return -1;
    }
    x->owned[x->n_owned++] = copy;
    e->val = x->n_owned;
    sqlite3_stmt *q = x->st[S_STRING];
    sqlite3_bind_int64(q, 1, e->val);
    sqlite3_bind_text(q, 2, copy, -1, SQLITE_STATIC);
    const int rc = sqlite3_step(q);
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? e->val : -1;
}

static void bind_opt_text(sqlite3_stmt *q, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(q, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(q, i);
}

static void bind_opt_int(sqlite3_stmt *q, int i, json_t *v)
{
    if (json_is_integer(v))
        sqlite3_bind_int64(q, i, json_integer_value(v));
    else
        sqlite3_bind_null(q, i);
}

static lf_status add_event(void *ctx, const lf_trace_event *e)
{
    exporter *x = ctx;
    x->with_cat += e->cat != LF_TC_OTHER;
    const int64_t rank = -1; /* set at the end, when the trace's header is known (put_tables) */
    const int64_t name = string_id(x, e->name);
    if (name < 0)
        return lf_fail(LF_ENOMEM, "%s: out of memory for names", x->path);
    sqlite3_stmt *q;
    json_t *a = NULL;
    int i = 1;
    switch (e->cat) {
    case LF_TC_KERNEL: {
        q = x->st[S_KERNEL];
        a = stats_args(e);
        json_t *g = json_object_get(a, "grid"), *b = json_object_get(a, "block");
        sqlite3_bind_int64(q, i++, rank), sqlite3_bind_int64(q, i++, name), sqlite3_bind_int64(q, i++, e->device);
        bind_opt_int(q, i++, json_object_get(a, "stream"));
        sqlite3_bind_int64(q, i++, e->pid), sqlite3_bind_int64(q, i++, e->tid);
        sqlite3_bind_int64(q, i++, e->ts_ns), sqlite3_bind_int64(q, i++, e->dur_ns);
        sqlite3_bind_int64(q, i++, e->correlation), sqlite3_bind_int64(q, i++, e->ext_id);
        for (size_t k = 0; k < 3; k++)
            bind_opt_int(q, i++, json_array_get(g, k));
        for (size_t k = 0; k < 3; k++)
            bind_opt_int(q, i++, json_array_get(b, k));
        bind_opt_int(q, i++, json_object_get(a, "registers per thread"));
        bind_opt_int(q, i++, json_object_get(a, "shared memory"));
        sqlite3_bind_double(q, i++, e->flops), sqlite3_bind_double(q, i++, e->bytes);
        bind_opt_int(q, i++, json_object_get(a, "graph id"));
        bind_opt_int(q, i++, json_object_get(a, "graph node id"));
        bind_opt_text(q, i++, e->stack), bind_opt_text(q, i++, e->extra_args);
        break;
    }
    case LF_TC_MEMCPY:
    case LF_TC_MEMSET: {
        q = x->st[S_MEMOP];
        a = stats_args(e);
        char src[64], dst[64];
        stats_mem_kinds(e, src, dst, sizeof src);
        sqlite3_bind_int64(q, i++, rank);
        sqlite3_bind_text(q, i++, e->cat == LF_TC_MEMCPY ? "memcpy" : "memset", -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, i++, name);
        sqlite3_bind_text(q, i++, stats_mem_op_name(e), -1, SQLITE_STATIC);
        bind_opt_text(q, i++, src[0] ? src : NULL), bind_opt_text(q, i++, dst[0] ? dst : NULL);
        sqlite3_bind_int64(q, i++, e->device);
        bind_opt_int(q, i++, json_object_get(a, "stream"));
        sqlite3_bind_int64(q, i++, e->pid), sqlite3_bind_int64(q, i++, e->tid);
        sqlite3_bind_int64(q, i++, e->ts_ns), sqlite3_bind_int64(q, i++, e->dur_ns);
        sqlite3_bind_double(q, i++, e->bytes);
        sqlite3_bind_int64(q, i++, e->correlation), sqlite3_bind_int64(q, i++, e->ext_id);
        bind_opt_text(q, i++, e->extra_args);
        break;
    }
    case LF_TC_RUNTIME:
    case LF_TC_DRIVER:
        q = x->st[S_CALL];
        sqlite3_bind_int64(q, i++, rank);
        sqlite3_bind_text(q, i++, e->cat == LF_TC_RUNTIME ? "runtime" : "driver", -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, i++, name);
        sqlite3_bind_int64(q, i++, e->pid), sqlite3_bind_int64(q, i++, e->tid);
        sqlite3_bind_int64(q, i++, e->ts_ns), sqlite3_bind_int64(q, i++, e->dur_ns);
        sqlite3_bind_int64(q, i++, e->correlation), sqlite3_bind_int64(q, i++, e->ext_id);
        bind_opt_text(q, i++, e->stack), bind_opt_text(q, i++, e->extra_args);
        break;
    case LF_TC_MEMORY:
        q = x->st[S_MEMORY];
        sqlite3_bind_int64(q, i++, rank), sqlite3_bind_int64(q, i++, e->pid), sqlite3_bind_int64(q, i++, e->tid);
        sqlite3_bind_int64(q, i++, e->ts_ns), sqlite3_bind_int64(q, i++, e->mem_bytes);
        sqlite3_bind_int64(q, i++, e->mem_total_allocated), sqlite3_bind_int64(q, i++, e->mem_total_reserved);
        sqlite3_bind_int64(q, i++, e->mem_device_type), sqlite3_bind_int64(q, i++, e->device);
        sqlite3_bind_int64(q, i++, e->mem_addr);
        break;
    default: /* CPU ops, ranges on either side, Python frames, overhead, the rest */
        q = x->st[S_OP];
        sqlite3_bind_int64(q, i++, rank);
        sqlite3_bind_text(q, i++, lf_trace_cat_name(e->cat), -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, i++, name);
        sqlite3_bind_int64(q, i++, e->pid), sqlite3_bind_int64(q, i++, e->tid);
        sqlite3_bind_int64(q, i++, e->ts_ns), sqlite3_bind_int64(q, i++, e->dur_ns);
        sqlite3_bind_int64(q, i++, e->ext_id), sqlite3_bind_int64(q, i++, e->correlation);
        sqlite3_bind_double(q, i++, e->flops);
        bind_opt_text(q, i++, e->input_dims), bind_opt_text(q, i++, e->input_types);
        bind_opt_text(q, i++, e->stack), bind_opt_text(q, i++, e->extra_args);
        break;
    }
    const int rc = sqlite3_step(q);
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    json_decref(a);
    x->events++;
    return rc == SQLITE_DONE ? LF_OK : sql_fail(x, "an insert");
}

/* What only the end of the read knows: the trace's facts, its ranks, GPUs and named threads. */
static lf_status put_tables(exporter *x)
{
    const lf_trace *t = x->meta_of;
    const lf_trace_meta *m = &t->meta;
    sqlite3_str *s = sqlite3_str_new(x->db);
    sqlite3_str_appendall(s,
                          "CREATE TABLE meta (key TEXT PRIMARY KEY, value);\n"
                          "CREATE TABLE ranks (rank INTEGER PRIMARY KEY, world_size INTEGER, distributed_info TEXT);\n"
                          "CREATE TABLE devices (id INTEGER PRIMARY KEY, name TEXT, properties TEXT);\n"
                          "CREATE TABLE threads (pid INTEGER, tid INTEGER, name TEXT, PRIMARY KEY (pid, tid));\n");
    sqlite3_str_appendf(s,
                        "INSERT INTO meta VALUES ('schema_version', 1), ('base_ns', %lld), ('trace_name', %Q), "
                        "('dropped_events', %lld), ('negative_durations', %lld), ('record_shapes', %d), "
                        "('profile_memory', %d), ('with_flops', %d), ('rank', %lld), ('world_size', %lld), "
                        "('merged_ranks', %lld), ('events', %lld), ('written_by', 'linfuse %s');\n",
                        (long long)m->base_ns, m->trace_name, (long long)m->dropped_events,
                        (long long)m->negative_durations, m->record_shapes, m->profile_memory, m->with_flops,
                        (long long)m->rank, (long long)m->world_size, (long long)m->merged_ranks, (long long)x->events,
                        lf_version());
    /* every row's rank: a merged trace's is its pid, any other trace's the one it names (0 where it
     * names none: one process, one rank) */
    static const char *const tables[] = {"kernels", "memops", "calls", "ops", "memory"};
    for (size_t k = 0; k < sizeof tables / sizeof tables[0]; k++)
        if (m->merged_ranks)
            sqlite3_str_appendf(s, "UPDATE %s SET rank = pid;\n", tables[k]);
        else
            sqlite3_str_appendf(s, "UPDATE %s SET rank = %lld;\n", tables[k], (long long)(m->rank > 0 ? m->rank : 0));
    if (m->merged_ranks)
        sqlite3_str_appendall(s, "INSERT OR IGNORE INTO ranks (rank) SELECT DISTINCT rank FROM ops UNION SELECT "
                                 "DISTINCT rank FROM kernels;\n");
    else
        sqlite3_str_appendf(s, "INSERT INTO ranks VALUES (%lld, %lld, %Q);\n", (long long)(m->rank > 0 ? m->rank : 0),
                            (long long)(m->world_size > 0 ? m->world_size : 1), m->distributed_info);
    json_t *props = m->device_properties ? json_loads(m->device_properties, 0, NULL) : NULL;
    size_t i;
    json_t *d;
    json_array_foreach(props, i, d)
    {
        char *text = json_dumps(d, JSON_COMPACT);
        sqlite3_str_appendf(s, "INSERT OR IGNORE INTO devices VALUES (%lld, %Q, %Q);\n",
                            (long long)json_integer_value(json_object_get(d, "id")),
                            json_string_value(json_object_get(d, "name")), text);
        free(text);
    }
    json_decref(props);
    for (int64_t k = 0; k < t->n_tracks; k++)
        if (t->tracks[k].tid != LF_TRACK_PROCESS)
            sqlite3_str_appendf(s, "INSERT OR IGNORE INTO threads VALUES (%lld, %lld, %Q);\n",
                                (long long)t->tracks[k].pid, (long long)t->tracks[k].tid, t->tracks[k].name);
    /* torch 1.13's traces (no Kineto): events without categories are its ops, ProfilerStep#N its
     * steps, as the reader reads them when it keeps them */
    if (x->events && !x->with_cat)
        sqlite3_str_appendall(s, "UPDATE ops SET kind = CASE WHEN name_id IN (SELECT id FROM strings WHERE value "
                                 "GLOB 'ProfilerStep#*') THEN 'user_annotation' ELSE 'cpu_op' END WHERE kind = "
                                 "'other' AND dur_ns >= 0;\n");
    char *sql = sqlite3_str_finish(s);
    char *err = NULL;
    const int rc = sql ? sqlite3_exec(x->db, sql, NULL, NULL, &err) : SQLITE_NOMEM;
    sqlite3_free(sql);
    lf_status st = rc == SQLITE_OK ? LF_OK : lf_fail(LF_EIO, "%s: SQLite: %s", x->path, err ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    return st;
}

void lf_trace_export_tmp_name(char *buf, size_t cap, const char *db_path)
{
    snprintf(buf, cap, "%s.%d.tmp", db_path, (int)getpid());
}

lf_status lf_trace_export_sqlite(const char *trace_path, const char *db_path, int64_t *events)
{
    LF_CHECK_PTR(trace_path, "lf_trace_export_sqlite", "trace_path");
    LF_CHECK_PTR(db_path, "lf_trace_export_sqlite", "db_path");
    /* an existing database is replaced whole, through its links; anything but a regular file (a
     * device, a FIFO, a directory) is no database to replace */
    struct stat sb;
    char real[PATH_MAX];
    if (stat(db_path, &sb) == 0) {
        if (!S_ISREG(sb.st_mode))
            return lf_fail(LF_EINVAL, "%s: not a regular file: a database is written as a new file", db_path);
        if (access(db_path, W_OK) != 0 || !realpath(db_path, real))
            return lf_fail(LF_EIO, "%s: %s", db_path, strerror(errno));
        db_path = real;
    }
    exporter x = {0};
    const size_t n = strlen(db_path) + 32;
    x.path = malloc(n);
    if (!x.path || !lf_strmap_init(&x.names, 1024)) {
        free(x.path);
        return lf_fail(LF_ENOMEM, "lf_trace_export_sqlite: out of memory");
    }
    lf_trace_export_tmp_name(x.path, n, db_path);
    unlink(x.path);
    lf_status st = LF_OK;
    char *err = NULL;
    if (sqlite3_open_v2(x.path, &x.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK)
        st = lf_fail(LF_EIO, "%s: SQLite could not make it: %s", db_path, x.db ? sqlite3_errmsg(x.db) : "?");
    else if (sqlite3_exec(x.db, SCHEMA, NULL, NULL, &err) != SQLITE_OK)
        st = lf_fail(LF_EIO, "%s: SQLite: %s", db_path, err ? err : "?");
    for (int k = 0; k < N_STMT && st == LF_OK; k++)
        if (sqlite3_prepare_v3(x.db, INSERTS[k], -1, SQLITE_PREPARE_PERSISTENT, &x.st[k], NULL) != SQLITE_OK)
            st = sql_fail(&x, "a statement");
    if (st == LF_OK) {
        lf_trace_read_opts o = {.keep_args = 1, .each = add_event, .each_ctx = &x};
        st = lf_trace_read_json_opts(&x.meta_of, trace_path, &o); /* no events kept: its meta and threads */
        if (st == LF_OK)
            st = put_tables(&x);
        if (st == LF_OK && sqlite3_exec(x.db, FINISH, NULL, NULL, &err) != SQLITE_OK)
            st = lf_fail(LF_EIO, "%s: SQLite: %s", db_path, err ? err : "?");
        lf_trace_free(x.meta_of);
    }
    sqlite3_free(err);
    for (int k = 0; k < N_STMT; k++)
        sqlite3_finalize(x.st[k]);
    if (x.db && sqlite3_close(x.db) != SQLITE_OK && st == LF_OK)
        st = lf_fail(LF_EIO, "%s: SQLite could not close it", db_path);
    if (st == LF_OK && rename(x.path, db_path) != 0)
        st = lf_fail(LF_EIO, "%s: %s", db_path, strerror(errno));
    if (st != LF_OK)
        unlink(x.path);
    if (events && st == LF_OK)
        *events = x.events;
    for (int64_t k = 0; k < x.n_owned; k++)
        free(x.owned[k]);
    free(x.owned), free(x.path);
    lf_strmap_free(&x.names);
    return st;
}
