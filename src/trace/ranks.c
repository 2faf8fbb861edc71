/* Traces of a group of ranks: one rank's part of a process that drove several GPUs, the ranks'
 * traces merged into one file Perfetto opens (one process per rank), and one rank of such a
 * merged trace again. Layer: trace/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"

/* Copy t's facts into out (not its distributedInfo: that is the rank's). */
static void copy_meta(lf_trace *out, const lf_trace *t)
{
    const lf_trace_meta *m = &t->meta;
    lf_trace_meta *o = &out->meta;
    o->base_ns = m->base_ns;
    o->device_label = m->device_label;
    o->process_name = m->process_name ? lf_trace_intern(out, m->process_name) : NULL;
    o->record_shapes = m->record_shapes, o->profile_memory = m->profile_memory, o->with_flops = m->with_flops;
    o->dropped_events = m->dropped_events;
    o->negative_durations = m->negative_durations;
    o->cpu_device_pid = m->cpu_device_pid;
    o->device_properties = m->device_properties ? lf_trace_intern(out, m->device_properties) : NULL;
}

lf_status lf_trace_select_rank(const lf_trace *t, int64_t host_pid, int64_t host_tid, int64_t step_tid, int64_t device,
                               lf_trace **out)
{
    LF_CHECK_PTR(t, "lf_trace_select_rank", "t");
    LF_CHECK_PTR(out, "lf_trace_select_rank", "out");
    *out = NULL;
    lf_trace *r;
    LF_TRY(lf_trace_create(&r));
    copy_meta(r, t);
    lf_status s = LF_OK;
    for (int64_t i = 0; i < t->n && s == LF_OK; i++) {
        lf_trace_event e = t->ev[i];
        int keep;
        if (e.cat == LF_TC_OVERHEAD || e.cat == LF_TC_OTHER)
            keep = 0;
        else if (lf_trace_cat_is_device(e.cat))
            keep = e.device == device || (e.device < 0 && e.pid == device);
        else if (e.pid == host_pid && e.tid == host_tid)
            keep = 1;
        else if (e.pid == host_pid && e.tid == step_tid &&
                 lf_trace_is_step(&e)) /* the process's steps, on this rank's thread */
            keep = 1, e.tid = host_tid;
        else
            keep = 0;
        if (keep)
            s = lf_trace_add(r, &e);
    }
    for (int64_t i = 0; i < t->n_tracks && s == LF_OK; i++) {
        const lf_track_name *k = &t->tracks[i];
        if ((k->pid == host_pid && k->tid == host_tid) || k->pid == device || k->tid == LF_TRACK_PROCESS)
            s = lf_trace_name_track(r, k->pid, k->tid, k->name);
    }
    if (s != LF_OK) {
        lf_trace_free(r);
        return s;
    }
    *out = r;
    return LF_OK;
}

/* The pid of t's host events (its process), or -1. */
static int64_t host_pid_of(const lf_trace *t)
{
    for (int64_t i = 0; i < t->n; i++)
        if (!lf_trace_cat_is_device(t->ev[i].cat) && t->ev[i].cat != LF_TC_OVERHEAD && t->ev[i].cat != LF_TC_OTHER)
            return t->ev[i].pid;
    return -1;
}

/* A rank's non-host track (a GPU stream, linfuse's CPU-kernel lane, CUPTI's overhead) as a
 * thread of the rank's process: its own tid above any OS thread id, in order of first sight. */
typedef struct lane_map {
    int64_t pid[256], tid[256];
    int n;
} lane_map;

static int64_t lane_of(lane_map *l, int64_t pid, int64_t tid)
{
    for (int i = 0; i < l->n; i++)
        if (l->pid[i] == pid && l->tid[i] == tid)
            return LF_TRACE_LANE_TID0 + i;
    if (l->n == 256)
        return LF_TRACE_LANE_TID0 + 255; /* more than 256 device lanes share the last one */
    l->pid[l->n] = pid, l->tid[l->n] = tid;
    return LF_TRACE_LANE_TID0 + l->n++;
}

static const char *track_name_of(const lf_trace *t, int64_t pid, int64_t tid)
{
    for (int64_t i = 0; i < t->n_tracks; i++)
        if (t->tracks[i].pid == pid && t->tracks[i].tid == tid)
            return t->tracks[i].name;
    return NULL;
}

/* Each rank's External ids and correlations are offset by rank << ID_BITS so two ranks' never meet:
 * ids below 2^40 and ranks below 2^22 keep the sum in 63 bits. Times past LF_TRACE_MAX_NS (the
 * reader's bound) would make a file linfuse itself refuses. */
enum { ID_BITS = 40 };
#define MAX_RANK ((int64_t)1 << 22)

lf_status lf_trace_merge_begin(lf_trace **out)
{
    LF_CHECK_PTR(out, "lf_trace_merge_begin", "out");
    *out = NULL;
    lf_trace *m;
    LF_TRY(lf_trace_create(&m));
    m->merging = 1;
    m->meta.cpu_device_pid = -1;
    *out = m;
    return LF_OK;
}

/* Whether m holds rank's process already. */
static int has_rank(const lf_trace *m, int64_t rank)
{
    for (int64_t i = 0; i < m->n_tracks; i++)
        if (m->tracks[i].pid == rank && m->tracks[i].tid == LF_TRACK_PROCESS)
            return 1;
    return 0;
}

/* t's events into m as rank `rank`, on m's clock base plus shift; its tracks named. */
static lf_status add_events(lf_trace *m, const lf_trace *t, int i, int64_t rank, int64_t shift)
{
    const int64_t ids = rank << ID_BITS, host = host_pid_of(t);
    lf_status s = LF_OK;
    lane_map lanes = {0};
    for (int64_t k = 0; k < t->n && s == LF_OK; k++) {
        lf_trace_event e = t->ev[k];
        const int bad_ext = e.ext_id < 0 || e.ext_id >= ((int64_t)1 << ID_BITS);
        if (bad_ext || e.correlation < 0 || e.correlation >= ((int64_t)1 << ID_BITS))
            return lf_fail(LF_EINVAL,
                           "lf_trace_merge: input %d, event %lld (\"%s\"): its %s %lld is outside 0 to 2^%d, where "
                           "ranks' ids would meet",
                           i, (long long)k, e.name ? e.name : "", bad_ext ? "External id" : "correlation",
                           (long long)(bad_ext ? e.ext_id : e.correlation), ID_BITS);
        e.ts_ns += shift; /* clocks aligned: every rank's times on the earliest rank's base */
        if (e.flow_ts >= 0)
            e.flow_ts += shift;
        if (e.ts_ns > LF_TRACE_MAX_NS)
            return lf_fail(LF_EINVAL,
                           "lf_trace_merge: input %d, event %lld: on the earliest input's clock it is more than 115 "
                           "days on (the inputs' clock bases disagree)",
                           i, (long long)k);
        char *args = NULL; /* a GPU event's stream, kept as an arg now that its tid is a lane's */
        if (e.pid != host) {
            if (lf_trace_cat_is_device(e.cat) && e.cat != LF_TC_GPU_ANNOTATION && !lf_trace_args_lead_with_stream(&e)) {
                const char *rest = e.extra_args && *e.extra_args ? e.extra_args : NULL;
                const size_t len = 48 + (rest ? strlen(rest) : 0);
                if (!(args = malloc(len)))
                    return lf_fail(LF_ENOMEM, "lf_trace_merge: out of memory");
                snprintf(args, len, "\"stream\": %lld%s%s", (long long)e.tid, rest ? ", " : "", rest ? rest : "");
                e.extra_args = args;
            }
            e.tid = lane_of(&lanes, e.pid, e.tid);
        }
        e.pid = rank; /* one process per rank */
        if (e.flow_pid >= 0) {
            e.flow_tid = e.flow_pid == host ? e.flow_tid : lane_of(&lanes, e.flow_pid, e.flow_tid);
            e.flow_pid = rank;
        }
        e.ext_id = e.ext_id ? e.ext_id + ids : 0; /* ids of two ranks never meet */
        e.correlation = e.correlation ? e.correlation + ids : 0;
        s = lf_trace_add(m, &e);
        free(args);
    }
    char nm[320];
    snprintf(nm, sizeof nm, "rank %lld", (long long)rank);
    if (s == LF_OK)
        s = lf_trace_name_track(m, rank, LF_TRACK_PROCESS, nm);
    for (int64_t k = 0; k < t->n_tracks && s == LF_OK; k++)
        if (t->tracks[k].pid == host && t->tracks[k].tid != LF_TRACK_PROCESS)
            s = lf_trace_name_track(m, rank, t->tracks[k].tid, t->tracks[k].name);
    for (int l = 0; l < lanes.n && s == LF_OK; l++) {
        const char *tn = track_name_of(t, lanes.pid[l], lanes.tid[l]);
        if (lanes.pid[l] >= 0 && lanes.pid[l] == t->meta.cpu_device_pid)
            snprintf(nm, sizeof nm, "cpu kernels %s", tn ? tn : "");
        else if (lanes.pid[l] < 0) /* CUPTI's overhead, Kineto's other spans */
            snprintf(nm, sizeof nm, "%s", tn ? tn : "spans");
        else
            snprintf(nm, sizeof nm, "GPU %lld %s", (long long)lanes.pid[l], tn ? tn : "stream");
        s = lf_trace_name_track(m, rank, LF_TRACE_LANE_TID0 + l, nm);
    }
    return s;
}

lf_status lf_trace_merge_add(lf_trace *m, const lf_trace *t)
{
    LF_CHECK_PTR(m, "lf_trace_merge_add", "m");
    LF_CHECK_PTR(t, "lf_trace_merge_add", "t");
    if (!m->merging)
        return lf_fail(LF_EINVAL, "lf_trace_merge_add: the trace was not made by lf_trace_merge_begin");
    const int i = (int)m->meta.merged_ranks; /* this input's place */
    if (i >= 4096)
        return lf_fail(LF_EINVAL, "lf_trace_merge: input %d: 4096 traces are merged at most", i);
    if (t->meta.merged_ranks || t->merging)
        return lf_fail(LF_EINVAL, "lf_trace_merge: input %d is already a merged trace", i);
    if (t->meta.rank >= MAX_RANK)
        return lf_fail(LF_EINVAL, "lf_trace_merge: input %d is rank %lld: ranks 0 to %lld are merged", i,
                       (long long)t->meta.rank, (long long)MAX_RANK - 1);
    const int64_t rank = t->meta.rank >= 0 ? t->meta.rank : i;
    if (has_rank(m, rank))
        return lf_fail(LF_EINVAL, "lf_trace_merge: input %d is rank %lld, as an earlier input is: both rank %lld", i,
                       (long long)rank, (long long)rank);
    /* the earliest clock base is the merged trace's: an input before it moves what is there on
     * by the difference, checked first and done last, so a failed add leaves m as it was */
    const int64_t base = i == 0 || t->meta.base_ns < m->meta.base_ns ? t->meta.base_ns : m->meta.base_ns;
    const int64_t latest = i == 0 || t->meta.base_ns > m->merge_latest ? t->meta.base_ns : m->merge_latest;
    int64_t shift, back, span; /* every input's base within 115 days of the earliest, an empty one's too */
    if (__builtin_sub_overflow(latest, base, &span) || span > LF_TRACE_MAX_NS ||
        __builtin_sub_overflow(t->meta.base_ns, base, &shift) ||
        (i > 0 && __builtin_sub_overflow(m->meta.base_ns, base, &back)))
        return lf_fail(LF_EINVAL,
                       "lf_trace_merge: input %d's clock base (baseTimeNanoseconds %lld) is more than 115 days from "
                       "the other inputs' (%lld): one of them has none or a wrong one",
                       i, (long long)t->meta.base_ns, (long long)m->meta.base_ns);
    back = i > 0 ? m->meta.base_ns - base : 0;
    for (int64_t k = 0; k < m->n && back; k++)
        if (m->ev[k].ts_ns > LF_TRACE_MAX_NS - back)
            return lf_fail(LF_EINVAL,
                           "lf_trace_merge: input %d: on its clock, earlier than the other inputs', event %lld of "
                           "theirs is more than 115 days on (the inputs' clock bases disagree)",
                           i, (long long)k);
    const int64_t n0 = m->n, tracks0 = m->n_tracks;
    lf_status s = add_events(m, t, i, rank, shift);
    if (s != LF_OK) {
        m->n = n0, m->n_tracks = tracks0; /* what this input added, taken back */
        return s;
    }
    for (int64_t k = 0; k < n0 && back; k++) {
        m->ev[k].ts_ns += back;
        if (m->ev[k].flow_ts >= 0)
            m->ev[k].flow_ts += back;
    }
    if (i == 0) {
        copy_meta(m, t);
        m->meta.cpu_device_pid = -1;
    } else {
        /* FLOPs per op only when every rank counted them: with it set, a reader of the merged
         * file would count from shapes the ops of a rank that did not (their FLOPs are not written) */
        m->meta.with_flops &= t->meta.with_flops;
        /* what could not be trusted: every rank's, together (the merged file keeps one count) */
        m->meta.dropped_events += t->meta.dropped_events;
        m->meta.negative_durations += t->meta.negative_durations;
    }
    m->meta.base_ns = base;
    m->merge_latest = latest;
    m->meta.merged_ranks = i + 1;
    return LF_OK;
}

lf_status lf_trace_merge(const lf_trace *const *in, int n, lf_trace **out)
{
    LF_CHECK_PTR(in, "lf_trace_merge", "in");
    LF_CHECK_PTR(out, "lf_trace_merge", "out");
    *out = NULL;
    if (n < 1 || n > 4096)
        return lf_fail(LF_EINVAL, "lf_trace_merge: %d traces, expected 1 to 4096", n);
    for (int i = 0; i < n; i++)
        LF_CHECK_PTR(in[i], "lf_trace_merge", "in[i]");
    lf_trace *m;
    LF_TRY(lf_trace_merge_begin(&m));
    lf_status s = LF_OK;
    for (int i = 0; i < n && s == LF_OK; i++)
        s = lf_trace_merge_add(m, in[i]);
    if (s != LF_OK) {
        lf_trace_free(m);
        return s;
    }
    *out = m;
    return LF_OK;
}

static int by_value(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t lf_trace_ranks(const lf_trace *merged, int64_t *ranks, int64_t cap)
{
    if (!merged || !merged->meta.merged_ranks)
        return 0;
    int64_t n = 0;
    for (int64_t i = 0; i < merged->n_tracks; i++)
        n += merged->tracks[i].tid == LF_TRACK_PROCESS && merged->tracks[i].pid >= 0;
    /* every rank's name, sorted, each once (a merged file read back may name a rank twice) */
    int64_t *all = malloc((size_t)(n + 1) * sizeof *all);
    if (!all) {
        lf_fail(LF_ENOMEM, "lf_trace_ranks: out of memory for %lld ranks", (long long)n);
        return -1;
    }
    n = 0;
    for (int64_t i = 0; i < merged->n_tracks; i++)
        if (merged->tracks[i].tid == LF_TRACK_PROCESS && merged->tracks[i].pid >= 0)
            all[n++] = merged->tracks[i].pid;
    qsort(all, (size_t)n, sizeof *all, by_value);
    int64_t distinct = 0;
    for (int64_t i = 0; i < n; i++)
        if (!distinct || all[i] != all[distinct - 1])
            all[distinct++] = all[i];
    for (int64_t k = 0; ranks && k < cap && k < distinct; k++)
        ranks[k] = all[k];
    free(all);
    return distinct;
}

lf_status lf_trace_of_rank(const lf_trace *merged, int64_t rank, lf_trace **out)
{
    LF_CHECK_PTR(merged, "lf_trace_of_rank", "merged");
    LF_CHECK_PTR(out, "lf_trace_of_rank", "out");
    *out = NULL;
    if (!merged->meta.merged_ranks)
        return lf_fail(LF_EINVAL, "lf_trace_of_rank: the trace is no merged one (lf_trace_merge makes them)");
    if (rank < 0 || !has_rank(merged, rank))
        return lf_fail(LF_EINVAL, "lf_trace_of_rank: no rank %lld in the merged trace (lf_trace_ranks lists its %lld)",
                       (long long)rank, (long long)lf_trace_ranks(merged, NULL, 0));
    lf_trace *r;
    LF_TRY(lf_trace_create(&r));
    copy_meta(r, merged);
    lf_status s = LF_OK;
    for (int64_t i = 0; i < merged->n && s == LF_OK; i++)
        if (merged->ev[i].pid == rank)
            s = lf_trace_add(r, &merged->ev[i]);
    for (int64_t i = 0; i < merged->n_tracks && s == LF_OK; i++)
        if (merged->tracks[i].pid == rank)
            s = lf_trace_name_track(r, rank, merged->tracks[i].tid, merged->tracks[i].name);
    if (s != LF_OK) {
        lf_trace_free(r);
        return s;
    }
    *out = r;
    return LF_OK;
}
