/* The injection library's entry points and the profiled process's life. The CUDA driver calls
 * InitializeInjection when the process starts CUDA (CUDA_INJECTION64_PATH); NVTX calls
 * InitializeInjectionNvtx2 at the first NVTX call (NVTX_INJECTION64_PATH), which goes to CUPTI's own
 * NVTX support. Then a helper thread turns CUPTI's buffers into records as they come and keeps the
 * time window; and whatever way the process ends that can be seen (exit from any thread, Python's
 * exit, a signal that can be caught) the records are flushed and written as one trace, once.
 * Layer: inject/. */
#define _GNU_SOURCE /* dladdr, RTLD_NOLOAD */
#include <cupti.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "inject/inject.h"
#include "linfuse/settings.h"

#define LFI_EXPORT __attribute__((visibility("default")))

LFI_EXPORT int InitializeInjection(void);
LFI_EXPORT int InitializeInjectionNvtx(void *get_export_table);
LFI_EXPORT int InitializeInjectionNvtx2(void *get_export_table);
LFI_EXPORT int InitializeInjectionNvtxExtension(void *module_info);

enum { SIGNAL_WAIT_MS = 60000, N_SIGNALS = 65 };

static const int hooked[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};

static struct {
    atomic_int started;
    pid_t pid; /* the process that started: a child forked from it never writes its trace */
    lfi_session *s;
    lfi_opts o;
    int gzip, enable_at_lo, python_stack, graphs;
    char out_dir[2048], list[2048], name[256];
    int64_t to_epoch; /* CUPTI's clock -> the epoch */
    pthread_t helper;
    int have_helper;
    int req[2], done[2]; /* a signal's request to the helper, and its answer */
    pthread_mutex_t finish_lock;
    int finished;
    atomic_int deferred; /* a termination signal put off until the trace is written */
    struct sigaction old[N_SIGNALS];
} g = {.finish_lock = PTHREAD_MUTEX_INITIALIZER, .req = {-1, -1}, .done = {-1, -1}};

static int64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* How long ago the process started (its start time in /proc, on the boot clock); 0 if unknown. */
static int64_t since_start_ns(void)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long long ticks = 0;
    for (int field = 2; p && *p && field < 22; p++)
        field += *p == ' ';
    if (!p || sscanf(p, "%llu", &ticks) != 1)
        return 0;
    const int64_t start = (int64_t)ticks * (1000000000 / sysconf(_SC_CLK_TCK));
    const int64_t ago = clock_ns(CLOCK_BOOTTIME) - start;
    return ago > 0 ? ago : 0;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "linfuse profile: pid %d: %s\n", (int)getpid(), msg);
}

/* The settings `linfuse profile` passes (docs/profile.md); a value the setting does not take is
 * said once and the default used. */
static void read_settings(void)
{
    const char *out = lf_setting_get(LF_SET_PROFILE_OUT), *list = lf_setting_get(LF_SET_PROFILE_LIST);
    snprintf(g.out_dir, sizeof g.out_dir, "%s", out ? out : ".");
    snprintf(g.list, sizeof g.list, "%s", list ? list : "");
    g.gzip = lf_setting_choice_or(LF_SET_PROFILE_GZIP, 0);
    g.o.kernels_only = lf_setting_choice_or(LF_SET_PROFILE_KERNELS_ONLY, 0);
    g.python_stack = lf_setting_choice_or(LF_SET_PROFILE_PYTHON_STACK, 0);
    g.graphs = lf_setting_choice_or(LF_SET_PROFILE_GRAPHS, 1);
    g.o.capture_range = lf_setting_get(LF_SET_PROFILE_CAPTURE_RANGE);
    g.o.step_lo = g.o.step_hi = -1;
    const char *steps = lf_setting_get(LF_SET_PROFILE_STEPS);
    if (steps && !lfi_parse_steps(steps, &g.o.step_lo, &g.o.step_hi)) {
        say("LINFUSE_PROFILE_STEPS=%s is not A:B, A:, :B or N; every step is kept", steps);
        g.o.step_lo = g.o.step_hi = -1;
    }
    const double delay = lf_setting_number_or(LF_SET_PROFILE_DELAY, 0);
    const double duration = lf_setting_number_or(LF_SET_PROFILE_DURATION, 0);
    /* the window on CUPTI's clock: from --delay after the process started (it may start CUDA
     * later, after its imports: then from then on), for --duration */
    const int64_t now = lfc_now();
    const int64_t start = now - since_start_ns();
    g.o.lo = delay > 0 ? start + (int64_t)(delay * 1e9) : INT64_MIN;
    g.o.hi = duration > 0 ? (g.o.lo > now ? g.o.lo : now) + (int64_t)(duration * 1e9) : -1;
    g.enable_at_lo = delay > 0 && g.o.lo > now;
    g.to_epoch = clock_ns(CLOCK_REALTIME) - lfc_now();
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    const char *base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe[0] ? exe : "program";
    snprintf(g.name, sizeof g.name, "%.200s", base);
}

/* Kineto's distributedInfo from torchrun's RANK and WORLD_SIZE, into buf; NULL when not a rank. */
static const char *rank_info(char *buf, size_t cap, long *rank)
{
    const char *r = getenv("RANK"), *w = getenv("WORLD_SIZE");
    char *e1 = NULL, *e2 = NULL;
    long rk = r ? strtol(r, &e1, 10) : -1, ws = w ? strtol(w, &e2, 10) : -1;
    if (!r || !w || *e1 || *e2 || !*r || !*w || rk < 0 || ws <= rk)
        return NULL;
    snprintf(buf, cap, "{\"rank\": %ld, \"world_size\": %ld}", rk, ws);
    *rank = rk;
    return buf;
}

/* <out>/<program>_<pid>[_rank<R>].json[.gz], the program's name as one word of a file name. */
static void trace_path(char *path, size_t cap, long rank)
{
    char word[256];
    size_t k = 0;
    for (const char *p = g.name; *p && k < sizeof word - 1; p++)
        word[k++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                                   *p == '.' || *p == '-' || *p == '_'
                               ? *p
                               : '_');
    word[k] = '\0';
    char rk[32] = "";
    if (rank >= 0)
        snprintf(rk, sizeof rk, "_rank%ld", rank);
    snprintf(path, cap, "%s/%s_%d%s.json%s", g.out_dir, word, (int)g.pid, rk, g.gzip ? ".gz" : "");
}

/* Build the trace of everything kept and write it; its path goes on the list `linfuse profile`
 * reads. */
static void write_trace(void)
{
    char dist[128], path[2400];
    long rank = -1;
    const char *info = rank_info(dist, sizeof dist, &rank);
    trace_path(path, sizeof path, rank);
    int n_dev = 0;
    const int *sms = lfc_sms(&n_dev);
    lfi_meta m = {.to_epoch = g.to_epoch,
                  .pid = g.pid,
                  .process_name = g.name,
                  .trace_name = path,
                  .device_properties = lfc_properties(),
                  .distributed_info = info,
                  .sms = sms,
                  .n_devices = n_dev,
                  .dropped = lfc_dropped(),
                  .occupancy = lfc_occupancy,
                  .demangle = lfc_demangle};
    lf_trace *t = NULL;
    mkdir(g.out_dir, 0777); /* `linfuse profile` made it; a run by hand may not have */
    lf_status st = lfi_build(g.s, &m, &t, NULL);
    if (st == LF_OK)
        st = lf_trace_write_json(t, path);
    lf_trace_free(t);
    if (st != LF_OK) {
        say("could not write its trace %s: %s", path, st == LF_ENOMEM ? "out of memory" : lf_last_error());
        return;
    }
    if (!g.list[0])
        return;
    int fd = open(g.list, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    char line[2500];
    int len = snprintf(line, sizeof line, "%d %s\n", (int)g.pid, path);
    if (fd < 0 || write(fd, line, (size_t)len) != len) /* one write: lines of processes never mix */
        say("could not list its trace %s in %s", path, g.list);
    if (fd >= 0)
        close(fd);
}

/* Flush CUPTI and write the trace, once, in the process that started (a forked child has a copy
 * of the records it must not write). */
static void finish(void)
{
    if (getpid() != g.pid || !g.s)
        return;
    pthread_mutex_lock(&g.finish_lock);
    if (!g.finished) {
        g.finished = 1;
        lfc_stop(); /* recording, NVTX markers and the callbacks off: the program may run on */
        lfc_flush();
        const int64_t taken = lfc_buffers_taken();
        if (taken > 0)
            say("%lld of linfuse's CUPTI buffers went to another CUPTI client in this process (torch.profiler, "
                "Nsight): their records are missing from this trace, and what ran after that client stopped may be "
                "too. CUPTI takes one client per process (docs/profile.md, Limits): profile a program that does not "
                "start its own",
                (long long)taken);
        lfc_devices();
        write_trace();
    }
    pthread_mutex_unlock(&g.finish_lock);
}

static void at_exit(void)
{
    finish();
}

static void answer_signal(int sig);

/* The helper thread: buffers into records as they come, the GPUs' properties once the driver is
 * up, the window's start and end, and the trace when a signal asks for it. Signals that can be
 * blocked are, so that none is handled here. Over 80 lines: one loop that waits on everything,
 * read whole. */
static void *helper(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    int devices = 0, wait_ms = 1, waited = 0;
    for (;;) {
        const int64_t now = lfc_now();
        int64_t timeout = -1;
        if (!devices)
            timeout = wait_ms;
        if (g.enable_at_lo) {
            int64_t ms = (g.o.lo - now) / 1000000 + 1;
            timeout = timeout < 0 || ms < timeout ? ms : timeout;
        }
        if (g.o.hi >= 0 && !g.finished) {
            int64_t ms = (g.o.hi - now) / 1000000 + 1;
            timeout = timeout < 0 || ms < timeout ? ms : timeout;
        }
        struct pollfd p[2] = {{lfc_ready_fd(), POLLIN, 0}, {g.req[0], POLLIN, 0}};
        int r = poll(p, 2, timeout < 0 ? -1 : timeout > 1000000 ? 1000000 : (int)(timeout > 0 ? timeout : 0));
        char b[256];
        if (r > 0 && (p[0].revents & POLLIN)) {
            while (read(p[0].fd, b, sizeof b) > 0)
                ;
            lfc_drain();
        }
        if (r > 0 && (p[1].revents & POLLIN) && read(p[1].fd, b, 1) == 1)
            answer_signal((unsigned char)b[0]);
        if (!devices) { /* every 1, 2, 4 ... 500 ms, for a minute at most */
            devices = lfc_devices();
            waited += wait_ms;
            wait_ms = wait_ms < 500 ? 2 * wait_ms : 500;
            devices |= waited > 60000;
        }
        const int64_t t = lfc_now();
        if (g.enable_at_lo && t >= g.o.lo) {
            g.enable_at_lo = 0;
            lfc_enable(1);
        }
        if (g.o.hi >= 0 && t >= g.o.hi && !g.finished) /* --duration: the trace now, the program runs on */
            finish();
    }
    return NULL;
}

/* The program's own disposition of sig, as it was before ours. */
static void chain(int sig, siginfo_t *info, void *uc)
{
    struct sigaction *o = &g.old[sig];
    if (o->sa_flags & SA_SIGINFO) {
        if (o->sa_sigaction)
            o->sa_sigaction(sig, info, uc);
        return;
    }
    if (o->sa_handler == SIG_IGN)
        return;
    if (o->sa_handler != SIG_DFL) {
        o->sa_handler(sig);
        return;
    }
    /* the default: restored, and the signal delivered again once this handler returns (a fault
     * the kernel raised recurs by itself when the instruction runs again) */
    sigaction(sig, o, NULL);
    if (info && info->si_code <= 0)
        raise(sig);
    else if (sig != SIGSEGV && sig != SIGBUS && sig != SIGFPE && sig != SIGILL)
        raise(sig);
}

/* A signal that would end the process. A termination signal (TERM, INT, HUP, QUIT) the program
 * leaves at its default is put off: the handler only asks the helper thread, and returns, so the
 * thread it interrupted goes on and lets go of what it holds (a CUDA call's locks, which CUPTI's
 * flush needs); the helper writes the trace and then delivers the signal again, to the default
 * disposition. A second one meanwhile ends the process at once. A fault (SEGV, BUS, FPE, ILL,
 * ABRT) cannot be put off: its thread waits for the trace, a minute at most, then the program's
 * handler or the default runs. A termination signal the program handles itself is only passed
 * on: it may go on running, and its exit writes the trace. */
static void on_signal(int sig, siginfo_t *info, void *uc)
{
    const int saved = errno;
    const struct sigaction *o = &g.old[sig];
    const int handled =
        o->sa_flags & SA_SIGINFO ? o->sa_sigaction != NULL : o->sa_handler != SIG_DFL && o->sa_handler != SIG_IGN;
    const int fault = sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGABRT;
    const int helper_ok = g.have_helper && !pthread_equal(pthread_self(), g.helper) && g.req[1] >= 0;
    if (getpid() == g.pid && (fault || !handled) && !g.finished) {
        if (!fault && helper_ok && !atomic_exchange(&g.deferred, sig)) {
            const char b = (char)sig;
            if (write(g.req[1], &b, 1) == 1) {
                errno = saved;
                return; /* the helper raises it again once the trace is written */
            }
        } else if (fault && helper_ok) {
            ssize_t w = write(g.req[1], "", 1);
            struct pollfd p = {g.done[0], POLLIN, 0};
            for (int64_t end = clock_ns(CLOCK_MONOTONIC) + (int64_t)SIGNAL_WAIT_MS * 1000000, left;
                 w == 1 && (left = (end - clock_ns(CLOCK_MONOTONIC)) / 1000000) > 0;)
                if (poll(&p, 1, (int)left) >= 0 || errno != EINTR)
                    break;
        } else if (!g.have_helper) {
            finish(); /* no helper to ask: here, and hope no lock is held */
        }
    }
    chain(sig, info, uc);
    errno = saved;
}

/* The helper's side of a signal's request: the trace, then the signal put off delivered again to
 * the program's disposition of it (the default), or the faulting thread told it may go on. */
static void answer_signal(int sig)
{
    finish();
    if (sig > 0 && sig < N_SIGNALS) {
        sigaction(sig, &g.old[sig], NULL);
        kill(getpid(), sig);
        return;
    }
    ssize_t w = write(g.done[1], "d", 1);
    (void)w;
}

static void hook_signals(void)
{
    for (size_t i = 0; i < sizeof hooked / sizeof hooked[0]; i++) {
        const int sig = hooked[i];
        struct sigaction cur, sa;
        if (sigaction(sig, NULL, &cur) != 0 || (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN))
            continue; /* ignored: it ends nothing */
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        g.old[sig] = cur;
        sigaction(sig, &sa, NULL);
    }
}

/* Python ends a run stopped by Ctrl-C by killing itself with SIGINT after finalizing, past every
 * handler and atexit function; Py_AtExit's functions run just before that. */
static void hook_python_exit(void)
{
    int (*py_at_exit)(void (*)(void)) = (int (*)(void (*)(void)))dlsym(RTLD_DEFAULT, "Py_AtExit");
    if (py_at_exit)
        py_at_exit(at_exit);
}

static int open_pipe(int fd[2])
{
    if (pipe(fd) != 0)
        return 0;
    for (int i = 0; i < 2; i++)
        fcntl(fd[i], F_SETFD, FD_CLOEXEC);
    return 1;
}

int InitializeInjection(void)
{
    if (atomic_exchange(&g.started, 1))
        return 1;
    g.pid = getpid();
    read_settings();
    char why[256];
    lf_status made = lfi_create(&g.s, &g.o);
    const lfc_opts co = {.sink = lfi_add,
                         .ctx = g.s,
                         .nvtx = 1,
                         .kernels_only = g.o.kernels_only,
                         .python_stack = g.python_stack,
                         .calls_by_name = 1,
                         .no_graphs = !g.graphs};
    if (made != LF_OK || lfc_start(&co, why, sizeof why) != 0) {
        say("not profiled: %s", g.s ? why : "out of memory");
        lfi_free(g.s);
        g.s = NULL;
        return 1; /* the program runs on, untraced */
    }
    if (!g.enable_at_lo)
        lfc_enable(1);
    atexit(at_exit);
    hook_python_exit();
    if (open_pipe(g.req) && open_pipe(g.done))
        g.have_helper = pthread_create(&g.helper, NULL, helper, NULL) == 0;
    if (g.have_helper)
        pthread_detach(g.helper);
    hook_signals();
    return 1;
}

/* NVTX's entry points go to CUPTI's NVTX support (which turns ranges into CUPTI's marker records):
 * `linfuse profile` points NVTX_INJECTION64_PATH here, where CUPTI is found. */
static int nvtx_forward(const char *entry, void *arg)
{
    Dl_info info;
    if (!dladdr((void *)(uintptr_t)cuptiGetVersion, &info) || !info.dli_fname)
        return 0;
    void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    int (*fn)(void *) = h ? (int (*)(void *))dlsym(h, entry) : NULL;
    int r = fn ? fn(arg) : 0;
    if (h)
        dlclose(h);
    return r;
}

int InitializeInjectionNvtx(void *get_export_table)
{
    return nvtx_forward("InitializeInjectionNvtx", get_export_table);
}

int InitializeInjectionNvtx2(void *get_export_table)
{
    return nvtx_forward("InitializeInjectionNvtx2", get_export_table);
}

int InitializeInjectionNvtxExtension(void *module_info)
{
    return nvtx_forward("InitializeInjectionNvtxExtension", module_info);
}
