/* What a program that writes linfuse's files or prints what they hold needs, and what the
 * library's own writers use: files written whole or not at all, a set of them all or none, and
 * text from a file (a trace's names) made safe for a terminal. Layer: base (src/core/). */
#ifndef LINFUSE_IO_H
#define LINFUSE_IO_H

#include <stddef.h>
#include <stdio.h>

#include "linfuse/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- files written whole or not at all --- */

/* Writes a file's contents to f, which the writer owns (never close it); returns 0 on success,
 * nonzero to give up (nothing is then replaced). Errors of f itself (a full disk) are seen by
 * the writer whatever this returns. */
typedef int (*lf_file_write_fn)(FILE *f, void *ctx);

/* One file of a set: where it goes and what writes it. The strings and ctx are the caller's and
 * only read during the call. */
typedef struct lf_file_job {
    const char *path;
    lf_file_write_fn write;
    void *ctx;
} lf_file_job;

enum { LF_FILE_JOBS_MAX = 8 }; /* the most files one lf_write_files_atomic call writes */

/* Write n files (1 <= n <= LF_FILE_JOBS_MAX) so that each appears complete or not at all, and
 * the set all or none: every file goes to a temporary beside its target (symbolic links followed
 * to the file they name, so a link stays a link), all are written, flushed and synced, and only
 * then renamed over their targets; on any failure no target has changed and no temporary is
 * left. "-" is standard output, and a special file (a device, a FIFO) is written in place, never
 * replaced: those are written after every temporary is complete, and cannot be taken back. A new
 * file gets 0666 less the umask, a replaced one keeps its mode; a file the caller may not write
 * (access W_OK) is not replaced, though the rename could. Signals are left alone: a program
 * that wants a write past `ulimit -f` to fail with EFBIG (rather than be killed) ignores SIGXFSZ.
 * Errors: LF_EINVAL (jobs, a path or a writer NULL; n out of range), LF_EIO naming the path and
 * the system's reason (a directory, no space, a writer that gave up), LF_ENOMEM. */
LF_API lf_status lf_write_files_atomic(const lf_file_job *jobs, int n);
/* One file so: lf_write_files_atomic of {path, write, ctx}. */
LF_API lf_status lf_write_file_atomic(const char *path, lf_file_write_fn write, void *ctx);

/* --- text from a file, printed on a terminal --- */

/* s as a terminal is safely shown it, into buf (cap >= 4 bytes; always terminated, and what does
 * not fit is left out between characters): each control character -- C0 (U+0000-U+001F), DEL
 * (U+007F) and C1 (U+0080-U+009F) -- written as Python's repr writes it (\t, \n, \r, else \x1b),
 * each byte that is not well-formed UTF-8 as U+FFFD, the rest as it is; so a name from a trace
 * can neither move the cursor, retitle or clear the terminal, nor split a line. With keep > 0, s
 * wider than keep characters as printed (an escape counts its four) is cut to its first keep
 * (never inside a character or an escape) and "..." follows, as PyTorch's table cuts names; 0
 * keeps it whole. 4 x strlen(s) + 4 bytes always hold it whole. s NULL is "". Returns buf. */
LF_API char *lf_term_cut(char *buf, size_t cap, const char *s, size_t keep);
/* The keep for names in linfuse's text outputs: PyTorch's table's name column, 55 characters
 * with the "...". */
enum { LF_TERM_NAME_KEEP = 52 };

#ifdef __cplusplus
}
#endif
#endif
