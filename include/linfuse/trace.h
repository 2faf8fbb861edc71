/* linfuse traces: one in-memory form for a Kineto-schema trace (PyTorch's or linfuse's), a
 * writer for the Chrome trace JSON Perfetto opens, a reader, and the builder of PyTorch's
 * key_averages() table. The profiler turns its buffers into an lf_trace and uses the same
 * writer and table, so a table built from a trace read back from disk equals the one built in
 * memory. Layer: trace/ knows tensors and ops by name only. */
#ifndef LINFUSE_TRACE_H
#define LINFUSE_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "linfuse/io.h"
#include "linfuse/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Event categories (docs/trace_format.md, "Events"), by their "cat" strings. */
typedef enum lf_trace_cat {
    LF_TC_CPU_OP,          /* "cpu_op" */
    LF_TC_USER_ANNOTATION, /* "user_annotation": ProfilerStep#N, record_function ranges */
    LF_TC_RUNTIME,         /* "cuda_runtime" */
    LF_TC_DRIVER,          /* "cuda_driver" */
    LF_TC_KERNEL,          /* "kernel": on a device track */
    LF_TC_MEMCPY,          /* "gpu_memcpy" */
    LF_TC_MEMSET,          /* "gpu_memset" */
    LF_TC_GPU_ANNOTATION,  /* "gpu_user_annotation" */
    LF_TC_OVERHEAD,        /* "overhead" */
    LF_TC_MEMORY,          /* "cpu_instant_event" [memory] */
    LF_TC_PYTHON,          /* "python_function" */
    LF_TC_OTHER,           /* anything else ("Trace", unknown categories): kept, not tabled */
    LF_TC_COUNT
} lf_trace_cat;

LF_API const char *lf_trace_cat_name(lf_trace_cat c);
/* Host-side categories (a CPU lane) versus device-side ones (a device lane). */
LF_API int lf_trace_cat_is_device(lf_trace_cat c);

typedef struct lf_trace_event {
    lf_trace_cat cat;
    const char *name; /* owned by the trace */
    int64_t pid, tid;
    int64_t ts_ns;       /* since the trace's base time */
    int64_t dur_ns;      /* -1 for instant events */
    int64_t ext_id;      /* "External id", 0 when none */
    int64_t correlation; /* flow id (ac2g), 0 when none */
    int64_t device;      /* device index of device events, -1 otherwise */
    double flops, bytes; /* kernels: work and traffic, 0 when unknown */
    int64_t mem_bytes;   /* [memory]: bytes allocated (negative: freed) */
    int64_t mem_total_allocated;
    int64_t mem_total_reserved; /* held by the allocator: in use plus cached */
    int64_t mem_device_type;    /* 0 cpu, 1 cuda */
    int64_t mem_addr;
    const char *input_dims;  /* "Input Dims" as JSON text, or NULL */
    const char *input_types; /* "Input type" as JSON text, or NULL */
    const char *input_strides;
    const char *extra_args;     /* further args as JSON members ("\"grid\": [1, 1, 1], ..."), or NULL */
    int64_t flow_ts;            /* device events: when the launch happened (flow start), -1: ts */
    int64_t flow_pid, flow_tid; /* device events: the host track that launched them (ac2g flow
                                 * start), -1 when unknown */
    /* The Python frames of the line that made it, innermost first, one a line ("model.py(42):
     * forward"), or NULL: `linfuse profile`'s for a kernel a CUDA graph replays (read when its node
     * was captured) and, with --python-stack, for every launch and its work. Written as args
     * "Python stack": [frames]. */
    const char *stack;
} lf_trace_event;

typedef struct lf_trace lf_trace;

LF_API lf_status lf_trace_create(lf_trace **out);
LF_API void lf_trace_free(lf_trace *t);

/* Append an event; strings are copied into the trace. */
LF_API lf_status lf_trace_add(lf_trace *t, const lf_trace_event *e);
LF_API int64_t lf_trace_count(const lf_trace *t);
LF_API const lf_trace_event *lf_trace_get(const lf_trace *t, int64_t i);
/* A copy of s owned by the trace (NULL stays NULL). */
LF_API const char *lf_trace_intern(lf_trace *t, const char *s);

/* Facts about the whole trace (the header and M events). */
typedef struct lf_trace_meta {
    int64_t base_ns;          /* baseTimeNanoseconds (epoch ns) */
    const char *device_label; /* "CUDA" for GPU traces, "CPU-dev" for linfuse CPU kernels */
    const char *process_name; /* for process_name M events */
    const char *trace_name;
    int record_shapes, profile_memory, with_flops;
    int64_t dropped_events;        /* events the profiler could not keep (0 is the goal) */
    int64_t cpu_device_pid;        /* pid of linfuse's CPU-kernel track, or -1 */
    const char *device_properties; /* Kineto's deviceProperties array as JSON text, or NULL ([]) */
    /* A rank's trace: Kineto's distributedInfo object as JSON text ({"backend": "nccl", "rank":
     * 0, "world_size": 2, ...}), or NULL; and the rank and world size it names (-1, 0 when none). */
    const char *distributed_info;
    int64_t rank, world_size;
    /* A merged trace (lf_trace_merge): the number of ranks in it, whose events have pid = rank
     * (lf_trace_ranks lists them: any ranks, not only 0 to n - 1); 0 for any other trace. */
    int64_t merged_ranks;
    /* Events whose duration was negative, read as 0 (as Kineto clamps them): counted by the reader. */
    int64_t negative_durations;
} lf_trace_meta;

LF_API lf_trace_meta *lf_trace_meta_of(lf_trace *t);
LF_API const lf_trace_meta *lf_trace_meta_get(const lf_trace *t);
/* Set distributedInfo from JSON text (an object with Kineto's keys: at least "rank" and
 * "world_size"), and the rank and world size from it; LF_EINVAL when it is not such an object. */
LF_API lf_status lf_trace_set_distributed_info(lf_trace *t, const char *json);
/* Name a (pid, tid) track for the M events ("thread 12 (linfuse)", "stream 7 "). */
LF_API lf_status lf_trace_name_thread(lf_trace *t, int64_t pid, int64_t tid, const char *name);

/* --- the traces of a group of ranks (tensor parallel) --- */

/* One rank's part of a trace of a process that drove several GPUs, one thread each: the host
 * events of thread host_tid of process host_pid, the stepping thread's ProfilerStep ranges
 * (step_tid) placed on it when that is another thread, and the work of GPU device. */
LF_API lf_status lf_trace_select_rank(const lf_trace *t, int64_t host_pid, int64_t host_tid, int64_t step_tid,
                                      int64_t device, lf_trace **out);
/* One trace of n ranks' traces, for Perfetto: one process per rank (pid = rank, named "rank R"),
 * each rank's GPU streams as threads of it, times aligned on the ranks' own clocks (their
 * baseTimeNanoseconds: one machine's clock, or NTP's across machines), External ids and flow
 * ids kept apart per rank, every complete event and [memory] instant kept with all its args, and
 * each kernel's, copy's and set's launch arrow (ac2g). Other flows (the forward-to-backward
 * arrows of a training step, "fwdbwd") and other instants are not carried over. A rank is its
 * distributedInfo's, else its place. */
LF_API lf_status lf_trace_merge(const lf_trace *const *in, int n, lf_trace **out);
/* The same one input at a time, so that only the merged trace and the input being added need be
 * held (each input may be freed once added): begin, then add each input in rank order of places
 * (a trace without distributedInfo is the rank of its place). An add that fails leaves the merged
 * trace as it was. lf_trace_merge is begin and n adds. */
LF_API lf_status lf_trace_merge_begin(lf_trace **out);
LF_API lf_status lf_trace_merge_add(lf_trace *merged, const lf_trace *t);
/* The ranks of a merged trace, ascending: the smallest cap of them into ranks (NULL, or cap <= 0,
 * to count them); returns how many there are, 0 for a trace that is no merged one, -1 when out of
 * memory (lf_last_error says so). Two ranks of an eight-GPU job merged are ranks 3 and 5, say,
 * not 0 and 1. */
LF_API int64_t lf_trace_ranks(const lf_trace *merged, int64_t *ranks, int64_t cap);
/* Rank `rank` of a merged trace (one lf_trace_ranks lists), as a trace of its own. */
LF_API lf_status lf_trace_of_rank(const lf_trace *merged, int64_t rank, lf_trace **out);

/* Write Kineto-schema Chrome trace JSON to path, atomically: a temporary file in the same
 * directory, flushed, then renamed over path. On error nothing is left behind. A path ending in
 * ".gz" is written gzip-compressed (what tensorboard_trace_handler(use_gzip=True) writes; Perfetto
 * and chrome://tracing open it as it is). */
LF_API lf_status lf_trace_write_json(const lf_trace *t, const char *path);
/* A trace's JSON as one file of a set written all or none (lf_write_files_atomic, linfuse/io.h):
 * a trace and its table, say, so that neither is left without the other. The job's path is the
 * file's (a name ending in ".gz" is written gzip-compressed, as lf_trace_write_json writes it) and
 * its traceName; the trace and the path are the caller's and only read while the files are
 * written. Use {path, lf_trace_json_write_cb, &job} as the lf_file_job. */
typedef struct lf_trace_json_job {
    const lf_trace *t;
    const char *path;
} lf_trace_json_job;
/* The lf_file_write_fn of an lf_trace_json_job (ctx); 0 when the whole JSON was written. */
LF_API int lf_trace_json_write_cb(FILE *f, void *ctx);

/* What in a trace could not be trusted, counted rather than summed in silently; every verb says
 * it (lf_trace_trust_line) where any is not 0. */
typedef struct lf_trace_trust {
    int64_t dropped;            /* records the profiler says it dropped (linfuse_dropped_events) */
    int64_t outside_steps;      /* kernels, copies and sets launched outside every step of their rank, in a
                                 * trace with steps */
    int64_t stream_overlaps;    /* kernels, copies and sets that start before the last one on their stream ended */
    int64_t negative_durations; /* events whose duration was negative (read as 0) */
    /* events longer than a day: no measurement (a garbage or unset timestamp) */
    int64_t absurd_durations;
} lf_trace_trust;
LF_API lf_status lf_trace_trust_count(const lf_trace *t, lf_trace_trust *out);
/* "not trusted: 3 kernels overlapping on their stream, ..." (no newline), "" where all are 0. */
LF_API void lf_trace_trust_line(const lf_trace_trust *tr, char *buf, size_t cap);
/* The counts as a JSON object ({"dropped": 0, ...}). */
LF_API void lf_trace_trust_json(const lf_trace_trust *tr, char *buf, size_t cap);

/* nsys stats' reports over any Kineto trace (PyTorch's, linfuse's, linfuse profile's, merged or
 * not), by nsys's names, columns, units and column order (docs/traces.md defines each column, and
 * says where a Kineto trace cannot give one): cuda_api_sum, cuda_gpu_kern_sum,
 * cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum, cuda_kern_exec_sum, cuda_gpu_trace, nvtx_sum,
 * nvtx_gpu_proj_sum. As nsys prints them (a titled column table; what could not be trusted after
 * it), as CSV (a header of the column names, then the rows) or as JSON (an array of objects
 * keyed by the column names). cuda_gpu_trace's grids, blocks and registers come from the events'
 * args: read the trace with keep_args. The caller frees *text. */
typedef enum lf_stats_format { LF_STATS_TEXT, LF_STATS_CSV, LF_STATS_JSON } lf_stats_format;
LF_API lf_status lf_trace_stats(const lf_trace *t, const char *report, lf_stats_format format, char **text);
/* The reports lf_trace_stats knows, NULL-terminated. */
LF_API const char *const *lf_trace_stats_reports(void);

/* The trace at trace_path as a SQLite database at db_path (a new file, put in place whole: a
 * failed export leaves none), inserted as the trace is read, so memory stays bounded whatever the
 * trace's size. Tables that join by ids: kernels, memops, calls, ops, memory, strings, steps,
 * ranks, devices, threads, meta; views flows and kernels_named, memops_named, calls_named,
 * ops_named (docs/traces.md gives the schema and example queries). *events (may be NULL): the
 * events written. */
LF_API lf_status lf_trace_export_sqlite(const char *trace_path, const char *db_path, int64_t *events);
/* The temporary file lf_trace_export_sqlite writes before its rename (db_path with this process's
 * id), for a program that removes it when a signal ends the export. */
LF_API void lf_trace_export_tmp_name(char *buf, size_t cap, const char *db_path);

/* Read a Kineto-schema JSON trace (PyTorch's or linfuse's), plain or gzip-compressed (told by
 * its first bytes, not its name; every member of a multi-member gzip file); "-" reads standard
 * input. Errors name the file and, for malformed JSON, the line and column. A file that starts
 * like neither JSON nor gzip is refused before it is read, and so is one larger than the read
 * limit, compressed or inflated. */
LF_API lf_status lf_trace_read_json(lf_trace **out, const char *path);

/* How lf_trace_read_json_opts reads; zeroed, as lf_trace_read_json. */
typedef struct lf_trace_read_opts {
    /* Keep every arg of an event that no field of lf_trace_event holds (a kernel's grid, block,
     * registers and occupancy, a CPU op's call stack and sequence number, NCCL's collective
     * fields) as its extra_args (JSON members: strings as read, numbers in their shortest exact
     * form), so the trace written back (lf_trace_write_json, `linfuse trace merge`) carries them.
     * They cost their size in memory; the tools that only count leave it off. An arg the writer
     * makes from the event's fields for its category is not kept twice (External id,
     * correlation, device, FLOPs/flops, bytes, the input shapes, Record function id, Ev Idx, a
     * [memory] event's sizes); a "stream" other than the event's track comes first. */
    int keep_args;
    /* Each event handed to each(each_ctx, event) as it is read, and not kept: the trace read
     * holds its metadata, thread names and flows alone, so a trace of any size is read in bounded
     * memory (`linfuse trace export`). The event's strings last until each returns; what each
     * returns other than LF_OK ends the read with it. Such events are seen as the file has them:
     * a legacy array's categories and FLOPs from shapes are not settled afterwards. */
    lf_status (*each)(void *ctx, const lf_trace_event *e);
    void *each_ctx;
} lf_trace_read_opts;
/* lf_trace_read_json with options (opts NULL: the defaults). */
LF_API lf_status lf_trace_read_json_opts(lf_trace **out, const char *path, const lf_trace_read_opts *opts);

/* The largest trace file lf_trace_read_json reads: bytes > 0 sets it for the process, 0 restores
 * the default ($LINFUSE_TRACE_MAX_BYTES, else LF_TRACE_DEFAULT_MAX_BYTES: Perfetto's browser UI
 * stops at about 2 GB, and reading takes about the JSON's size in memory, bench/RESULTS.md). */
#define LF_TRACE_DEFAULT_MAX_BYTES ((int64_t)4 << 30)
LF_API void lf_trace_set_read_limit(int64_t bytes);
LF_API int64_t lf_trace_read_limit(void);

/* Told how far a read has come: done of total bytes of the (inflated) JSON, about every 4 MB and
 * once more at the end (done == total). name is the file's. linfuse's CLI draws a line on a
 * terminal from it for files over 50 MB. fn NULL stops it. Set it before reading, from one thread:
 * it is the process's, not a session's. */
typedef void (*lf_trace_progress_fn)(void *ctx, const char *name, int64_t done, int64_t total);
LF_API void lf_trace_set_progress(lf_trace_progress_fn fn, void *ctx);

/* --- the key_averages() table (docs/trace_format.md, "The table") --- */

typedef enum lf_sort_key {
    LF_SORT_NONE, /* first-seen order */
    LF_SORT_SELF_CPU_TIME_TOTAL,
    LF_SORT_CPU_TIME_TOTAL,
    LF_SORT_SELF_DEVICE_TIME_TOTAL,
    LF_SORT_DEVICE_TIME_TOTAL,
    LF_SORT_CPU_TIME,    /* average */
    LF_SORT_DEVICE_TIME, /* average */
    LF_SORT_COUNT,
    LF_SORT_KEYS
} lf_sort_key;

/* PyTorch's spellings: "self_cpu_time_total", "cuda_time_total" (= "device_time_total"), ... */
LF_API lf_status lf_sort_key_parse(const char *s, lf_sort_key *out);

/* How lf_table_format writes a table: PyTorch's text, or every column with full names and
 * plain numbers (microseconds, bytes, FLOPs) as CSV (one header line) or JSON. */
typedef enum lf_table_style { LF_TABLE_TEXT, LF_TABLE_CSV, LF_TABLE_JSON } lf_table_style;

typedef struct lf_table_opts {
    lf_sort_key sort_by;
    int row_limit; /* rows shown; <= 0 shows all (PyTorch's -1); PyTorch's default is 100 */
    /* key_averages(group_by_input_shape=True): a row per name and input shapes, with PyTorch's
     * "Input Shapes" column */
    int group_by_input_shape;
    /* > 0: a row per name and its N innermost Python frames (the trace's python_function events
     * that enclose the op on its thread; built-ins skipped, as PyTorch's with_stack stacks have
     * none), with a "Source Location" column listing them. PyTorch's own table cannot do this
     * from a trace (its group_by_stack_n needs the live profiler's stacks). */
    int group_by_stack;
    lf_table_style style;
} lf_table_opts;

/* One aggregated row, for programs that want numbers rather than text. Times are microseconds
 * computed as PyTorch computes them (docs/trace_format.md, "The table"): each event's time is
 * the difference of its end and start in microseconds since the trace's start, as doubles, and
 * rows add them up in event order; so the printed digits are PyTorch's, and no sum overflows. */
typedef struct lf_table_row {
    const char *name;
    int is_device, is_annotation;
    int is_async; /* a c10d work span (nccl:all_reduce): no self time, outside the op tree */
    int64_t count;
    double self_cpu_us, cpu_total_us, self_device_us, device_total_us;
    int64_t cpu_mem, self_cpu_mem, device_mem, self_device_mem; /* bytes, profile_memory */
    double flops;             /* the trace's, or PyTorch's count from the op's shapes (with_flops) */
    const char *input_shapes; /* group_by_input_shape: "[[8, 4], [4, 2]]", "[]" for none; else NULL */
    const char *const *stack; /* group_by_stack: n_stack frames, innermost first */
    int n_stack;
} lf_table_row;

typedef struct lf_table {
    lf_table_row *rows;
    int64_t n_rows;
    double self_cpu_total_us, self_device_total_us;
    int has_device;
    /* PyTorch's columns: memory (profile_memory: CPU always, the device's when a row allocated
     * on it; without the flag, when the trace has memory events of that kind); "Total MFLOPs"
     * (with_flops and some FLOPs: the unit from the smallest row, values times flops_scale) */
    int has_cpu_mem, has_device_mem;
    int has_flops;
    double flops_scale;
    const char *flops_unit;  /* "MFLOPs", ... */
    int has_input_shapes;    /* grouped by input shape */
    int stack_depth;         /* grouped by this many frames (0: not) */
    const char **stack_data; /* the rows' frames (owned) */
    char *stack_text;        /* frames events carried themselves, as text (owned) */
    const char *device_label;
    int64_t dropped_events; /* shown under the table when not 0 */
    /* What makes numbers not what they seem, said under the table: a memory sum that reached
     * the int64 range and stopped there; host events whose children add up to more than they
     * last (siblings that overlap), which gives a negative self time. "" when none. */
    char warning[512];
    lf_trace_trust trust; /* said under the table where any is not 0 */
} lf_table;

LF_API lf_status lf_table_build(const lf_trace *t, lf_sort_key sort_by, lf_table *out);
/* The same with every option (sort_by and the groupings; row_limit is the format's). */
LF_API lf_status lf_table_build_opts(const lf_trace *t, const lf_table_opts *o, lf_table *out);
LF_API void lf_table_free(lf_table *tab);
/* The text PyTorch's table() prints, ending with the footers, or CSV or JSON (o->style); caller
 * frees *text. */
LF_API lf_status lf_table_format(const lf_table *tab, const lf_table_opts *o, char **text);

/* --- the one-line reading of a trace: what the blog reads off a timeline --- */

typedef struct lf_trace_summary {
    int64_t steps;                 /* ProfilerStep#N ranges (0: the whole trace counts as one step) */
    double kernels_per_step;       /* kernel events per step (memcpy and memset are not kernels) */
    double graph_kernels_per_step; /* of them, replayed by a cudaGraphLaunch (by correlation) */
    /* Of the replayed kernels' time, the share traced back to the range open where their CUDA
     * graph was captured (the kernel's External id is a gpu_user_annotation's) and the share that
     * carries the Python frames of that capture (0 when none was replayed). */
    double graph_ranged, graph_framed;
    double cpu_ops_per_step; /* cpu_op events per step (every level of the op tree) */
    /* The union of the device work launched in each step, per GPU, over the step's window from its
     * start to the later of its end and its work's end (a graph's kernels count in the step that
     * launched it; overlapping streams once), 0..1. */
    double device_busy;
    double step_ns;            /* mean wall time of a step */
    double device_ns_per_step; /* mean device time per step */
    int compute_bound;         /* device busy at least half the time */
    /* Communication (collective kernels: NCCL's), per step, on each GPU against that GPU's other
     * kernels, as HTA reads it: its time, the part no compute kernel overlaps (exposed), and the
     * share that overlaps compute (HTA's computation-communication overlap). */
    int has_comm;
    double comm_ns_per_step, exposed_comm_ns_per_step, overlap;
    int comm_bound;        /* exposed communication outweighs the compute kernels */
    int64_t device_events; /* kernels, copies and sets in the whole trace, in steps or not */
} lf_trace_summary;

/* One process's summary: a merged trace (lf_trace_merge) is refused with LF_EINVAL, as by
 * lf_step_profile_build and lf_trace_breakdown (its ranks' steps taken as one would average what
 * no rank ran): summarize lf_trace_of_rank's traces. */
LF_API lf_status lf_trace_summarize(const lf_trace *t, lf_trace_summary *out);
/* "kernels/step=5 cpu_ops/step=21 device_busy=97% verdict=compute-bound" (no newline); with
 * communication "... comm/step=58.752us exposed_comm/step=58.752us overlap=0% verdict=comm-bound".
 * The verdicts: compute-bound (device busy half the step or more), overhead-bound (less: it
 * waits on the host), comm-bound (exposed communication outweighs compute), no-device-work (no
 * kernel, copy or set anywhere in the trace: a CPU-only one). */
LF_API void lf_trace_summary_line(const lf_trace_summary *s, char *buf, size_t cap);
/* What `linfuse trace summary` prints for t: as text, the summary line and a line of its steps,
 * step and device time and events (each prefixed "rank=R " when rank >= 0); as JSON (json != 0)
 * one object with every field of lf_trace_summary (times in microseconds), the events and the
 * verdict, and "rank" first when rank >= 0, with no newline after it. Caller frees *text.
 * Errors: lf_trace_summarize's, LF_ENOMEM. */
LF_API lf_status lf_trace_summary_format(const lf_trace *t, int64_t rank, int json, char **text);

/* --- HTA's questions: where each step's device time went, kernel by kernel ---
 * Device work (kernels, copies, sets) belongs to the step whose ProfilerStep range holds its
 * launch (the runtime call by correlation), as in the summary; a trace without steps is one step.
 * A step's window on a GPU runs from its first device work's start to its last one's end; each
 * instant of it is compute (a compute kernel runs), else communication (only NCCL kernels run),
 * else memory (only copies and sets), else idle. Idle is split by why the GPU waited: on the host
 * (the work that ended the gap was launched after the gap began: nothing was queued) or other
 * (it was queued but waited: a dependency, a synchronization). */
typedef struct lf_breakdown_step {
    int64_t step;   /* the N of ProfilerStep#N, -1 for a trace without steps */
    int64_t device; /* the GPU (its device index, else its track's process) */
    /* The window split: compute, then communication no compute overlaps (exposed), then copies
     * and sets, then idle; they add up to the window. */
    double window_us, compute_us, comm_us, memory_us, idle_us, idle_host_us, idle_other_us;
    double comm_total_us;           /* NCCL kernels' whole time, the part compute hides included */
    double comm_hidden_us;          /* the time NCCL kernels ran while compute ran on the same GPU (HTA's overlap) */
    int64_t kernels, graph_kernels; /* kernels launched in the step; those replayed by a CUDA graph */
} lf_breakdown_step;

typedef struct lf_kernel_stats {
    const char *name;
    int64_t count;
    double total_us, min_us, median_us, p90_us, max_us; /* median and p90 interpolated, as numpy */
} lf_kernel_stats;

/* What each cudaGraphLaunch replayed (its kernels by correlation), by the op that launched it. */
typedef struct lf_graph_stats {
    const char *op; /* the op or range whose External id the launch carries, or "(no op)" */
    int64_t launches, kernels;
    double device_us;
} lf_graph_stats;

typedef struct lf_breakdown {
    lf_breakdown_step *steps;
    int64_t n_steps;
    lf_kernel_stats *kernels; /* device work by name, the most total time first */
    int64_t n_kernels;
    /* Launches (kernels launched one by one: graph replays are counted in graphs): kernels with
     * a launch call found, kernels shorter than that call (the host cannot keep up with them),
     * the delay from the call's start to the kernel's start, and HTA's outliers: launch calls
     * over runtime_cutoff_us and delays over delay_cutoff_us (its defaults, 50 and 100 us). */
    int64_t launched, short_kernels, slow_calls, late_kernels;
    double delay_median_us, delay_p90_us, delay_max_us, runtime_cutoff_us, delay_cutoff_us;
    lf_graph_stats *graphs;
    int64_t n_graphs;
    lf_trace_trust trust; /* said after the steps where any is not 0 */
} lf_breakdown;

/* One process's breakdown (a merged trace: LF_EINVAL, see lf_trace_summarize). */
LF_API lf_status lf_trace_breakdown(const lf_trace *t, lf_breakdown *out);
LF_API void lf_breakdown_free(lf_breakdown *b);
/* As text or JSON (one object); rank >= 0 names the rank it is. Caller frees *text. */
LF_API lf_status lf_breakdown_format(const lf_breakdown *b, int64_t rank, int json, char **text);

/* --- a report to look at: one self-contained HTML file --- */
/* Steps are named by their ProfilerStep#N number everywhere (the timeline, the breakdown, the
 * report); this asks for the trace's first step, whatever its number. */
enum { LF_TRACE_FIRST_STEP = -1 };

typedef struct lf_report_opts {
    int step; /* the ProfilerStep#N drawn on the timeline, or LF_TRACE_FIRST_STEP */
    /* The device's peaks for the roofline: dense bf16 TFLOP/s and memory GB/s; 0 takes the
     * datasheet's for a GPU deviceProperties names (H200, H100, A100), else draws no roof. */
    double peak_tflops, peak_gbps;
} lf_report_opts;

/* A step's timeline, the summary and breakdown, each kernel's achieved TFLOP/s and GB/s against
 * the peaks (a roofline plot; on a trace of CPU kernels GFLOP/s, and no GPU columns), PyTorch's
 * table, and with other (may be NULL) what changed from t to other, as lf_trace_diff(t, other):
 * HTML with its styles and drawings inline, no script, nothing loaded from the network. o may be
 * NULL (the first step, datasheet peaks). Written atomically to path, or returned in *text (caller
 * frees). A merged trace alone is reported rank by rank, a section each; a merged trace with
 * another is LF_EINVAL, as lf_trace_diff's step profiles refuse it. */
LF_API lf_status lf_trace_report(const lf_trace *t, const lf_trace *other, const lf_report_opts *o, const char *path);
LF_API lf_status lf_trace_report_html(const lf_trace *t, const lf_trace *other, const lf_report_opts *o, char **text);

/* --- per-step profile and the eager-versus-compiled diff --- */

typedef struct lf_name_count {
    const char *name;
    double per_step;    /* occurrences per step */
    double ns_per_step; /* their time per step */
} lf_name_count;

typedef struct lf_step_profile {
    int64_t steps;
    lf_name_count *kernels; /* device work (kernels, memcpy, memset) by name */
    /* kernels_per_step below counts kernels only */
    int64_t n_kernels;
    lf_name_count *ops; /* cpu_op events by name */
    int64_t n_ops;
    double launches_per_step;  /* runtime/driver calls that launch work (names with "Launch") */
    double occupancy_per_step; /* occupancy queries (names with "Occupancy") */
    double cpu_ns_per_step, device_ns_per_step;
    double kernels_per_step, ops_per_step;
    lf_trace_trust trust; /* of the trace it was built from: lf_trace_diff says both */
} lf_step_profile;

/* One process's steps (a merged trace: LF_EINVAL, see lf_trace_summarize). */
LF_API lf_status lf_step_profile_build(const lf_trace *t, lf_step_profile *out);
LF_API void lf_step_profile_free(lf_step_profile *p);

/* What changed from a to b, per step, as text (with a plain-language paragraph) or JSON. */
LF_API lf_status lf_trace_diff(const lf_step_profile *a, const lf_step_profile *b, int as_json, char **text);

/* --- a guess about a trace, checked (CI: "this forward launches 4 kernels, one of them fused") --- */

typedef enum lf_expect_rule {
    LF_EXPECT_PRESENT, /* some device work's name matches (`trace expect --kernel`) */
    LF_EXPECT_ABSENT   /* none does; each one that does is a difference (`--no-kernel`) */
} lf_expect_rule;

typedef struct lf_expect_pattern {
    const char *regex; /* POSIX extended regular expression, matched anywhere in a kernel's name */
    lf_expect_rule rule;
} lf_expect_pattern;

typedef struct lf_expect_opts {
    double kernels_per_step;           /* kernels per step, as lf_step_profile counts them, exactly; < 0: any */
    const lf_expect_pattern *patterns; /* n_patterns of them, checked and reported in this order */
    int n_patterns;
} lf_expect_opts;

/* A guess ready to check against traces: its patterns compiled. */
typedef struct lf_trace_expect lf_trace_expect;

/* Compile o's patterns (o and its strings are copied: the caller's may go). Errors: LF_EINVAL for
 * a guess of nothing (no kernels_per_step and no pattern), kernels_per_step not a finite number
 * up to 1e9, a NULL regex, or a pattern that is no regular expression (naming it and why);
 * LF_ENOMEM. */
LF_API lf_status lf_trace_expect_create(lf_trace_expect **out, const lf_expect_opts *o);
LF_API void lf_trace_expect_free(lf_trace_expect *e);
/* Check t against the guess: *differences gets how many things differ (0: the trace is as
 * guessed) and *text what `linfuse trace expect` prints (caller frees). As text: one line per
 * difference, names cut as PyTorch's table cuts them (wider where two would look alike) and made
 * safe for a terminal (lf_term_cut); after a pattern nothing matched, the trace's kernels with
 * their counts per step; then "N differences from the guess" or "as expected: ...". As JSON (json
 * != 0): one object, names whole, ending in a newline: {"matched", "steps", "kernels_per_step",
 * "differences": [...], "kernels": [{"name", "per_step"}, ...]}. Errors: lf_step_profile_build's,
 * LF_ENOMEM. */
LF_API lf_status lf_trace_expect_check(const lf_trace_expect *e, const lf_trace *t, int json, char **text,
                                       int *differences);

/* Draw one step (ProfilerStep#step, or LF_TRACE_FIRST_STEP; the whole trace when it has no steps
 * and step is LF_TRACE_FIRST_STEP) as an SVG timeline: host lanes with nested ops, device lanes
 * with kernels, flow arrows, a time axis. Written atomically to path; LF_EINVAL naming the steps
 * the trace has when it has no such step. */
LF_API lf_status lf_trace_svg(const lf_trace *t, int step, const char *path);

/* Read a trace held in memory, plain or gzip (name is used in messages): the fuzzer's entry point. */
LF_API lf_status lf_trace_read_json_buffer(lf_trace **out, const char *data, size_t size, const char *name);

#ifdef __cplusplus
}
#endif
#endif
