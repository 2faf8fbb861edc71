/* `linfuse profile [flags] -- CMD ARGS...`: any CUDA program traced from the outside (profile.c),
 * and the running of it (profile_run.c: the injection library found, the driver looked for, CMD
 * started with the injection set up, signals passed on, its exit status). Layer: cli/. */
#ifndef LF_CLI_PROFILE_H
#define LF_CLI_PROFILE_H

#include <stddef.h>

int lf_cli_profile(int argc, char **argv);

/* Why CUDA cannot be traced here ("no CUDA driver: ..."), into why; 0 when a driver is there. */
int lf_profile_no_driver(char *why, size_t cap);
/* The injection library's absolute path (LINFUSE_PROFILE_LIBRARY, else liblinfuse_inject.so
 * beside liblinfuse.so or the tool, else in ../lib); 0 with the places looked in said in why. */
int lf_profile_find_library(char *path, size_t cap, char *why, size_t why_cap);

/* One run of CMD: argv (NULL-terminated), and the variables to set (name=value strings, n of
 * them; a value NULL unsets the name). */
typedef struct lf_profile_run {
    char *const *argv;
    const char *const *set_names;
    const char *const *set_values;
    int n_set;
    int pid; /* set by lf_profile_exec: CMD's process id */
} lf_profile_run;

/* Note the signal dispositions the tool started with, which CMD gets (call first). */
void lf_profile_note_signals(void);
/* Run CMD and wait for it, passing on SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent
 * to the tool (a terminal's reach CMD directly). Returns its exit status as a shell gives it:
 * 128 + N when signal N ended it, 127 when it could not be found, 126 when it could not run. */
int lf_profile_exec(lf_profile_run *r);

#endif
