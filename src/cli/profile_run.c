/* Running the program `linfuse profile` traces: the injection library found, the CUDA driver
 * looked for, CMD forked and exec'd with the injection's variables, signals sent to the tool passed
 * on, and CMD's exit status returned as a shell returns it. Layer: cli/. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/profile.h"
#include "linfuse/settings.h"
#include "linfuse/trace.h"

static const char INJECT_NAME[] = "liblinfuse_inject.so";

int lf_profile_no_driver(char *why, size_t cap)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (h)
        dlclose(h);
    const int kernel = access("/proc/driver/nvidia", F_OK) == 0 || access("/dev/dxg", F_OK) == 0; /* dxg: WSL */
    if (h && kernel)
        return 0;
    if (!h && !kernel)
        snprintf(why, cap, "no CUDA driver on this machine (/proc/driver/nvidia is absent, libcuda.so.1 not found)");
    else if (!h)
        snprintf(why, cap, "no CUDA driver library (libcuda.so.1 not found, though the kernel driver is loaded)");
    else
        snprintf(why, cap, "no NVIDIA kernel driver loaded (/proc/driver/nvidia is absent)");
    return 1;
}

/* dir/name, made absolute, when it is a file that can be read. */
static int try_dir(const char *dir, const char *rel, char *path, size_t cap)
{
    char p[PATH_MAX + 64];
    if (snprintf(p, sizeof p, "%s%s%s", dir, rel, INJECT_NAME) >= (int)sizeof p)
        return 0;
    char real[PATH_MAX];
    if (access(p, R_OK) != 0 || !realpath(p, real) || strlen(real) >= cap)
        return 0;
    snprintf(path, cap, "%s", real);
    return 1;
}

/* The directory of path, into dir (with its '/'). */
static void dir_of(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    snprintf(dir, cap, "%.*s", slash ? (int)(slash - path + 1) : 0, path);
}

int lf_profile_find_library(char *path, size_t cap, char *why, size_t why_cap)
{
    const char *set = lf_setting_get(LF_SET_PROFILE_LIBRARY);
    if (set) {
        char real[PATH_MAX];
        if (access(set, R_OK) == 0 && realpath(set, real) && strlen(real) < cap) {
            snprintf(path, cap, "%s", real);
            return 1;
        }
        snprintf(why, why_cap, "LINFUSE_PROFILE_LIBRARY=%s: %s", set, strerror(errno ? errno : ENOENT));
        return 0;
    }
    char dirs[2][PATH_MAX];
    int n = 0;
    Dl_info info; /* where liblinfuse.so is (the tool itself, linked statically) */
    if (dladdr((void *)(uintptr_t)lf_trace_create, &info) && info.dli_fname && strchr(info.dli_fname, '/'))
        dir_of(info.dli_fname, dirs[n++], sizeof dirs[0]);
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        dir_of(exe, dirs[n++], sizeof dirs[0]);
    }
    static const char *const rel[] = {"", "../lib/", "../lib64/"};
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof rel / sizeof rel[0]; k++)
            if (try_dir(dirs[i], rel[k], path, cap))
                return 1;
    snprintf(why, why_cap, "%s not found beside liblinfuse.so or the tool (%s%s): this build has no CUDA support",
             INJECT_NAME, n ? dirs[0] : "?", n ? "" : "");
    return 0;
}

/* --- CMD, run --- */

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
static volatile pid_t child_pid;

/* A signal sent to the tool goes on to CMD. One the terminal sent (Ctrl-C, Ctrl-\, a hang-up)
 * reached CMD's process group, CMD's own, already: it is not sent twice. */
static void pass_on(int sig, siginfo_t *info, void *uc)
{
    (void)uc;
    const int saved = errno;
    if (child_pid > 0 && !(info && (info->si_code == SI_KERNEL || (info->si_code <= 0 && info->si_pid == child_pid))))
        kill(child_pid, sig);
    errno = saved;
}

/* The dispositions CMD gets: the tool's as they were when it started (ignored ones stay ignored,
 * as a shell's background job has SIGINT ignored), whatever the tool changed since. */
static const int kept[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGXFSZ, SIGPIPE};
static struct sigaction initial[sizeof kept / sizeof kept[0]];
static int noted;

void lf_profile_note_signals(void)
{
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        sigaction(kept[i], NULL, &initial[i]);
    noted = 1;
}

/* In the child: the dispositions and mask put back, the variables set, CMD run. On failure errno
 * goes up the pipe. */
static void start_child(const lf_profile_run *r, int report)
{
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        if (noted && initial[i].sa_handler == SIG_IGN && !(initial[i].sa_flags & SA_SIGINFO))
            signal(kept[i], SIG_IGN);
        else
            signal(kept[i], SIG_DFL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int i = 0; i < r->n_set; i++) {
        if (r->set_values[i])
            setenv(r->set_names[i], r->set_values[i], 1);
        else
            unsetenv(r->set_names[i]);
    }
    execvp(r->argv[0], r->argv);
    int e = errno;
    ssize_t w = write(report, &e, sizeof e);
    (void)w;
    _exit(e == ENOENT ? 127 : 126);
}

int lf_profile_exec(lf_profile_run *r)
{
    int report[2];
    if (pipe(report) != 0) {
        fprintf(stderr, "linfuse profile: pipe: %s\n", strerror(errno));
        return 126;
    }
    fcntl(report[0], F_SETFD, FD_CLOEXEC), fcntl(report[1], F_SETFD, FD_CLOEXEC);
    struct sigaction sa, old[sizeof forwarded / sizeof forwarded[0]];
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = pass_on;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        sigaction(forwarded[i], &sa, &old[i]);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        start_child(r, report[1]);
    close(report[1]);
    int status = 126, e = 0;
    if (pid < 0) {
        fprintf(stderr, "linfuse profile: fork: %s\n", strerror(errno));
    } else {
        child_pid = pid;
        r->pid = (int)pid;
        ssize_t got;
        while ((got = read(report[0], &e, sizeof e)) < 0 && errno == EINTR)
            ;
        int ws = 0;
        while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
            ;
        child_pid = 0;
        if (got == (ssize_t)sizeof e) {
            fprintf(stderr, "linfuse profile: cannot run '%s': %s\n", r->argv[0], strerror(e));
            status = e == ENOENT ? 127 : 126;
        } else if (WIFEXITED(ws)) {
            status = WEXITSTATUS(ws);
        } else if (WIFSIGNALED(ws)) {
            status = 128 + WTERMSIG(ws);
        }
    }
    close(report[0]);
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        sigaction(forwarded[i], &old[i], NULL);
    return status;
}
