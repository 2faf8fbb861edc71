/* `--tp N`: an MLP experiment split over N GPUs as Megatron-LM splits it. Two ways to run:
 *   under torchrun's variables (RANK, WORLD_SIZE, ...), this process is one rank: it joins the
 *   others over TCP and NCCL and writes its own trace;
 *   otherwise one process drives N GPUs, one thread each (rank r on cuda:r), in lockstep: the
 *   main thread (rank 0) steps the profiler between forwards, and each rank's part of the
 *   process's trace is written as that rank's file.
 * Either way each rank's files are <base>_rank<R>.json and .txt, with distributedInfo as Kineto
 * writes it, so `linfuse trace merge` and PyTorch's tools read them as PyTorch's. Layer: cli/. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/exp_models.h"
#include "cli/tp_run.h"
#include "linfuse/dist.h"
#include "linfuse/io.h"
#include "linfuse/trace.h"

typedef struct rank_ctx {
    const exp_tp_job *j;
    int rank;
    lf_comm *comm;
    const lf_nn_gated_mlp *full; /* on the host, shared */
    const lf_tensor *x_host;
    lf_nn_tp_mlp m;
    lf_tensor *x;
    lf_compiled *compiled;
    int64_t tid;
    lf_status st;
    char err[512];
    pthread_t th;
} rank_ctx;

typedef struct tp_run {
    const exp_tp_job *j;
    exp_result *r;
    rank_ctx *ranks;
    int n;     /* ranks in this process */
    int world; /* ranks in all */
    pthread_barrier_t go, done;
    int quit;
    int print, write_failed;
    lf_status st;
} tp_run;

static void keep_error(rank_ctx *k, lf_status s)
{
    if (s != LF_OK && k->st == LF_OK) {
        k->st = s;
        snprintf(k->err, sizeof k->err, "%s", lf_last_error());
    }
}

static lf_status compiled_forward(void *ctx, int n_in, lf_tensor *const *in, lf_tensor **out)
{
    const rank_ctx *k = ctx;
    (void)n_in;
    return lf_nn_tp_mlp_forward(&k->m, k->j->variant, in[0], out);
}

/* On the rank's own thread: its GPU, its shard, its input, its compiled plan. */
static lf_status rank_setup(rank_ctx *k)
{
    const exp_cfg *c = k->j->c;
    k->tid = (int64_t)syscall(SYS_gettid);
    lf_status s = lf_device_select(LF_DEVICE_CUDA, lf_comm_device_index(k->comm));
    if (s == LF_OK)
        s = lf_nn_tp_mlp_shard(&k->m, k->full, k->rank, lf_comm_size(k->comm), k->comm, LF_DEVICE_CUDA);
    k->m.chunks = c->compile ? 1 : c->chunks; /* a compiled forward is one graph: no chunks to overlap */
    if (s == LF_OK)
        s = lf_tensor_to_device(&k->x, k->x_host, LF_DEVICE_CUDA);
    if (s == LF_OK && c->compile) {
        lf_compile_opts co = lf_compile_opts_default();
        co.name = k->j->label;
        co.passes = c->passes;
        co.no_cuda_graph = c->no_cuda_graph;
        co.verbose = c->compile_verbose && k->rank == 0;
        s = lf_compile(&k->compiled, compiled_forward, k, 1, &k->x, &co);
    }
    return s;
}

static lf_status rank_forward(rank_ctx *k)
{
    lf_tensor *y = NULL;
    lf_prof_range_push(k->j->label);
    lf_status s =
        k->compiled ? lf_compiled_run(k->compiled, 1, &k->x, &y) : lf_nn_tp_mlp_forward(&k->m, k->j->variant, k->x, &y);
    lf_prof_range_pop();
    lf_tensor_free(y);
    return s;
}

/* Ranks 1..n-1 of this process: set up, then one forward per step in lockstep with rank 0. */
static void *rank_main(void *arg)
{
    rank_ctx *k = arg;
    tp_run *run = (tp_run *)k->j->run;
    keep_error(k, rank_setup(k));
    pthread_barrier_wait(&run->done); /* set up */
    for (;;) {
        pthread_barrier_wait(&run->go);
        if (run->quit)
            break;
        if (k->st == LF_OK)
            keep_error(k, rank_forward(k));
        pthread_barrier_wait(&run->done);
    }
    return NULL;
}

/* Every rank's error after a step, as one message; 1 when there was one. */
static int failed(tp_run *run)
{
    for (int i = 0; i < run->n; i++)
        if (run->ranks[i].st != LF_OK) {
            fprintf(stderr, "linfuse %s --tp: rank %d: %s\n", run->j->name, run->ranks[i].rank, run->ranks[i].err);
            return 1;
        }
    return 0;
}

/* One step on every rank of this process. */
static void step_all(tp_run *run)
{
    pthread_barrier_wait(&run->go);
    rank_ctx *k = &run->ranks[0];
    if (k->st == LF_OK)
        keep_error(k, rank_forward(k));
    pthread_barrier_wait(&run->done);
}

/* Rank rk's part of window k of t: its trace (with its identity), table and summary, written as
 * its two files, both or neither, then printed. LF_OK with run->write_failed set (the message
 * printed) when the files could not be written; another status (its message in lf_last_error)
 * when the rank's part could not be made. */
static lf_status write_rank(tp_run *run, const lf_trace *t, int i, int k)
{
    const rank_ctx *rk = &run->ranks[i];
    const exp_cfg *c = run->j->c;
    exp_result *r = run->r;
    lf_trace *mine = NULL;
    char info[2048], *table = NULL, sfx[48], json[4500], txt[4500], line[320];
    lf_table tab = {0};
    lf_table_opts to = {.sort_by = LF_SORT_DEVICE_TIME_TOTAL, .row_limit = c->row_limit};
    lf_trace_summary sum;
    lf_status s =
        lf_trace_select_rank(t, (int64_t)getpid(), rk->tid, run->ranks[0].tid, lf_comm_device_index(rk->comm), &mine);
    if (s == LF_OK)
        s = lf_comm_describe(rk->comm, info, sizeof info);
    if (s == LF_OK)
        s = lf_trace_set_distributed_info(mine, info);
    if (s == LF_OK)
        s = lf_table_build(mine, LF_SORT_DEVICE_TIME_TOTAL, &tab);
    if (s == LF_OK)
        s = lf_table_format(&tab, &to, &table);
    lf_table_free(&tab);
    if (s == LF_OK)
        s = lf_trace_summarize(mine, &sum);
    if (c->sched.repeat > 1)
        snprintf(sfx, sizeof sfx, "_rank%d_window%d", rk->rank, k);
    else
        snprintf(sfx, sizeof sfx, "_rank%d", rk->rank);
    if (s == LF_OK && (snprintf(json, sizeof json, "%s%s.json", run->j->base, sfx) >= (int)sizeof json ||
                       snprintf(txt, sizeof txt, "%s%s.txt", run->j->base, sfx) >= (int)sizeof txt)) {
        fprintf(stderr, "linfuse %s: --out: path too long\n", run->j->name);
        run->write_failed = 1;
    }
    if (s == LF_OK && !run->write_failed) {
        lf_trace_json_job jj = {mine, json};
        lf_file_job jobs[2] = {{json, lf_trace_json_write_cb, &jj}, {txt, lf_cli_put_text, table}};
        if (lf_write_files_atomic(jobs, 2) != LF_OK) {
            fprintf(stderr, "linfuse %s: %s\n", run->j->name, lf_last_error());
            run->write_failed = 1;
        }
    }
    if (s == LF_OK && !run->write_failed) {
        lf_trace_summary_line(&sum, line, sizeof line);
        if (i == 0) { /* the run's result: this process's first rank */
            r->sum = sum;
            snprintf(r->summary, sizeof r->summary, "%s", line);
            snprintf(r->json_path, sizeof r->json_path, "%s", json);
            snprintf(r->txt_path, sizeof r->txt_path, "%s", txt);
        }
        if (run->print) {
            if (c->sched.repeat > 1 && i == 0)
                printf("window %d of %d:\n", k, c->sched.repeat);
            printf("rank %d of %d (cuda:%d):\n", rk->rank, run->world, lf_comm_device_index(rk->comm));
            fputs(table, stdout);
            printf("trace: %s\ntable: %s\nrank=%d %s\n", json, txt, rk->rank, line);
        }
    }
    free(table);
    lf_trace_free(mine);
    return s;
}

/* The schedule's on_trace_ready: each rank's part of the window, with its identity, as its files. */
static void window_ready(lf_profiler *p, void *user)
{
    tp_run *run = user;
    if (run->st != LF_OK || run->write_failed)
        return;
    const lf_trace *t = NULL;
    lf_status s = lf_prof_trace(p, &t);
    const int k = run->r->windows + 1;
    for (int i = 0; i < run->n && s == LF_OK && !run->write_failed; i++)
        s = write_rank(run, t, i, k);
    if (s != LF_OK)
        run->st = s;
    else if (!run->write_failed)
        run->r->windows = k;
}

/* The ranks of this process: torchrun's one, or n threads' */
static int make_comms(const exp_tp_job *j, lf_comm **comms, int *n, int *world)
{
    const char *name = j->name;
    int under_torchrun = 0;
    lf_dist_env env;
    lf_status es = lf_dist_env_read(&env, &under_torchrun);
    if (under_torchrun) {
        if (es != LF_OK) {
            fprintf(stderr, "linfuse %s --tp: %s\n", name, lf_last_error());
            return LF_EXIT_USAGE;
        }
        if (j->c->tp > 1 && j->c->tp != env.world_size) {
            fprintf(stderr, "linfuse %s: --tp %d under torchrun's WORLD_SIZE=%d: they must agree\n", name, j->c->tp,
                    env.world_size);
            return LF_EXIT_USAGE;
        }
        lf_dist_opts o = {LF_DEVICE_CUDA, 0};
        if (lf_comm_init_env(&comms[0], &o) != LF_OK) {
            fprintf(stderr, "linfuse %s --tp: rank %d: %s\n", name, env.rank, lf_last_error());
            return LF_EXIT_FAIL;
        }
        *n = 1, *world = env.world_size;
        return LF_EXIT_OK;
    }
    int have = lf_device_count(LF_DEVICE_CUDA);
    if (j->c->tp > have) {
        fprintf(stderr, "linfuse %s: --tp %d needs %d GPUs; this machine has %d\n", name, j->c->tp, j->c->tp, have);
        return LF_EXIT_USAGE;
    }
    if (lf_comm_init_local(comms, j->c->tp, LF_DEVICE_CUDA) != LF_OK) {
        fprintf(stderr, "linfuse %s --tp: %s\n", name, lf_last_error());
        return LF_EXIT_FAIL;
    }
    *n = *world = j->c->tp;
    return LF_EXIT_OK;
}

/* Ranks 1.. on threads of their own, rank 0 (or torchrun's one) set up here, all met; how many
 * threads started. */
static int start_ranks(tp_run *run)
{
    int started = 0;
    for (int i = 1; i < run->n; i++, started++)
        if (pthread_create(&run->ranks[i].th, NULL, rank_main, &run->ranks[i]) != 0) {
            fprintf(stderr, "linfuse %s --tp: cannot start rank %d's thread\n", run->j->name, i);
            _exit(LF_EXIT_FAIL); /* the others wait for it at a barrier; nothing ran on a GPU yet */
        }
    keep_error(&run->ranks[0], rank_setup(&run->ranks[0]));
    pthread_barrier_wait(&run->done);
    return started;
}

/* The warm-up steps, then the profiled ones with the schedule stepped between them (bad: the set
 * up failed, nothing runs); the exit status so far, the session in *p (stopped). A failure once a
 * step has begun ends the process. */
static int run_steps(tp_run *run, int bad, lf_profiler **p)
{
    const exp_cfg *c = run->j->c;
    const char *name = run->j->name;
    const int warm = c->warm ? 3 : 0;
    const int steps = c->sched.skip_first + (c->sched.wait + c->sched.warmup + c->sched.active) * c->sched.repeat;
    int begun = 0;
    for (int i = 0; i < warm && !bad; i++, begun = 1) {
        step_all(run);
        bad = failed(run);
    }
    lf_prof_opts po = lf_exp_prof_opts(c, window_ready, run);
    if (!bad && lf_prof_start(p, &po) != LF_OK) {
        fprintf(stderr, "linfuse %s: %s\n", name, lf_last_error());
        bad = 1;
    }
    for (int i = 0; i < steps && !bad && run->st == LF_OK && !run->write_failed; i++, begun = 1) {
        step_all(run);
        bad = failed(run);
        if (!bad && lf_prof_step(*p) != LF_OK) {
            fprintf(stderr, "linfuse %s: %s\n", name, lf_last_error());
            bad = 1;
        }
    }
    if (bad && begun) {
        /* a rank that failed may leave the others' collectives waiting on the GPU forever:
         * nothing below could finish (waiting for the device would hang), so the process ends */
        fflush(stdout);
        _exit(LF_EXIT_FAIL);
    }
    int code = bad ? LF_EXIT_FAIL : LF_EXIT_OK;
    if (*p && lf_prof_stop(*p) != LF_OK) {
        fprintf(stderr, "linfuse %s: %s\n", name, lf_last_error());
        code = LF_EXIT_FAIL;
    }
    return code;
}

/* The run's exit status once the ranks are done: code, else what the windows' writing says. */
static int run_result(const tp_run *run, int code)
{
    if (code != LF_EXIT_OK)
        return code; /* said already */
    if (run->st != LF_OK) {
        fprintf(stderr, "linfuse %s: %s\n", run->j->name, lf_last_error());
        return LF_EXIT_FAIL;
    }
    if (run->write_failed)
        return LF_EXIT_FAIL;
    if (run->r->windows == 0) {
        fprintf(stderr, "linfuse %s: the schedule recorded no window\n", run->j->name);
        return LF_EXIT_FAIL;
    }
    return LF_EXIT_OK;
}

int lf_exp_run_tp(exp_tp_job *j, exp_result *r, int print)
{
    const exp_cfg *c = j->c;
    lf_comm *comms[LF_MAX_DEVICE_INDEX] = {0};
    int n = 0, world = 0;
    int code = make_comms(j, comms, &n, &world);
    if (code != LF_EXIT_OK)
        return code;
    if (c->hidden % world) {
        fprintf(stderr, "linfuse %s: --hidden %lld is not divisible by %d ranks\n", j->name, (long long)c->hidden,
                world);
        for (int i = 0; i < n; i++)
            lf_comm_free(comms[i]);
        return LF_EXIT_USAGE;
    }
    /* the full MLP and input on the host, the same on every rank (seeded), as one GPU's run */
    lf_rng rng;
    lf_rng_seed(&rng, 0);
    lf_nn_gated_mlp full = {0};
    lf_tensor *x_host = NULL;
    int64_t xs[3] = {c->batch, c->seq, c->dim};
    lf_status s = lf_exp_build_mlp(c, &rng, &full);
    if (s == LF_OK)
        s = lf_tensor_empty(&x_host, c->dtype, 3, xs, LF_DEVICE_CPU);
    if (s == LF_OK)
        s = lf_tensor_fill_uniform(x_host, &rng, -1, 1);
    tp_run run = {j, r, NULL, n, world, .print = print};
    rank_ctx ranks[LF_MAX_DEVICE_INDEX];
    memset(ranks, 0, sizeof ranks);
    run.ranks = ranks;
    j->run = &run;
    pthread_barrier_init(&run.go, NULL, (unsigned)n);
    pthread_barrier_init(&run.done, NULL, (unsigned)n);
    for (int i = 0; i < n; i++)
        ranks[i] = (rank_ctx){j, lf_comm_rank(comms[i]), comms[i], &full, x_host, .st = s};
    const int started = s == LF_OK ? start_ranks(&run) : 0;
    if (s != LF_OK)
        fprintf(stderr, "linfuse %s: cannot set up: %s\n", j->name, lf_last_error());
    lf_profiler *p = NULL;
    code = run_steps(&run, s != LF_OK || failed(&run) || started != n - 1, &p);
    run.quit = 1;
    if (started == n - 1 && s == LF_OK)
        pthread_barrier_wait(&run.go);
    for (int i = 1; i < n && s == LF_OK; i++)
        pthread_join(ranks[i].th, NULL);
    code = run_result(&run, code);
    lf_prof_free(p);
    for (int i = 0; i < n; i++) {
        lf_compiled_free(ranks[i].compiled);
        lf_tensor_free(ranks[i].x);
        lf_nn_tp_mlp_free(&ranks[i].m);
        lf_comm_free(comms[i]);
    }
    pthread_barrier_destroy(&run.go);
    pthread_barrier_destroy(&run.done);
    lf_nn_gated_mlp_free(&full);
    lf_tensor_free(x_host);
    return code;
}
