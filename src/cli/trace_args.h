/* What every `linfuse trace` verb shares (trace_args.c): the verbs' usage lines, their common
 * flags and file words, reading a trace with a progress line, and error messages safe for a
 * terminal. The verbs themselves are in trace_cmd.c (table, diff, expect, summary, breakdown,
 * merge), trace_views.c (svg, report, serve) and trace_stats.c (stats). Layer: cli/. */
#ifndef LF_CLI_TRACE_ARGS_H
#define LF_CLI_TRACE_ARGS_H

#include <stdio.h>

#include "cli/args.h"
#include "linfuse/trace.h"

enum { MAX_BYTES = 100 }; /* every verb's --max-bytes */
#define MAX_BYTES_OPT                \
    {                                \
        "max-bytes", 1, MAX_BYTES, 0 \
    }

/* Every verb's usage line, then the sort keys and the exit statuses. */
void lf_tcmd_usage(FILE *f);
/* The verb a mistyped word most likely meant (lf_cli_closest over the verbs), or NULL. */
const char *lf_tcmd_closest(const char *word);
/* The verb's flags (args.h); LF_CLI_HELP prints the verb's usage, LF_CLI_BAD has printed its
 * message (and the usage). */
int lf_tcmd_next_arg(lf_cli_args *a, const char *verb, const char **v);
/* "cmd: " and lf_last_error() on standard error, made safe for a terminal (a message may quote a
 * name from the trace). */
void lf_tcmd_error(const char *cmd);
/* A trace read (a progress line on a terminal for a large one); NULL with the message printed. */
lf_trace *lf_tcmd_load(const char *path);
/* The same, keeping every event's args the reader does not read (for a trace written back). */
lf_trace *lf_tcmd_load_all(const char *path);
/* What every verb does with the arguments that are not its own flags: a word fills the next of
 * its max file slots, --help (already printed) ends it with 0, anything else is a usage error.
 * Returns -1 to go on, else the exit status. */
int lf_tcmd_common_arg(int id, const char *v, const char *cmd, const char **files, int *nf, int max);
/* Whether out is none of the nf input files (a link or a second name for one counts): else says
 * so on stderr, for cmd, and returns 0 (the verb exits LF_EXIT_USAGE; the input is untouched). */
int lf_tcmd_output_apart(const char *cmd, const char *out, const char *const *files, int nf);
/* `linfuse trace stats` and `linfuse trace export` (trace_stats.c). */
int lf_tcmd_stats(int argc, char **argv);
int lf_tcmd_export(int argc, char **argv);

#endif
