/* The linfuse command-line tool's shared pieces. Layer: cli/, the top: it uses the library's
 * public headers (include/linfuse) alone and links the shared library, as any program does. */
#ifndef LF_CLI_H
#define LF_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "linfuse/nn.h"
#include "linfuse/profiler.h"

/* Exit statuses: 0 done, 1 the work failed, 2 the command line was wrong. */
enum { LF_EXIT_OK = 0, LF_EXIT_FAIL = 1, LF_EXIT_USAGE = 2 };

int lf_cli_demo(int argc, char **argv);
int lf_cli_mlp(int argc, char **argv);
int lf_cli_bench(int argc, char **argv);
int lf_cli_bench_profiler(int reps);
/* What `linfuse bench cuda` runs. only: the built-in cases whose names contain it (NULL: all);
 * mlp_shapes: instead, the MLP's forms at each "TxDxH" of a comma-separated list, in activation
 * act: those form_words names (comma-separated: eager, fused, gated, fp8, compiled,
 * compiled_gated; NULL: all), taking turns sample by sample, or with settle_ms > 0 each alone after
 * that long with the GPU idle. flush_l2: each sample one forward, after 256 MiB copied on the GPU
 * (twice any L2 there is): the forward reads its weights from memory, as a model's next layer
 * does, not from what the last sample left in L2. */
typedef struct lf_cli_bench_cuda_opts {
    int reps;
    const char *only, *mlp_shapes, *form_words;
    int settle_ms, flush_l2;
    lf_act act;
} lf_cli_bench_cuda_opts;
int lf_cli_bench_cuda(const lf_cli_bench_cuda_opts *o);
int lf_cli_bench_tp(int reps, const char *only, int tp); /* tp: GPUs (0: all) */
int lf_cli_trace(int argc, char **argv);
/* Serve one trace file to ui.perfetto.dev from 127.0.0.1:port (0: any free port), until stopped
 * or, with once, until it has been sent; serve.c. */
int lf_cli_trace_serve(const char *file, int port, int once, int64_t max_bytes);

/* mkdir -p dir, then prove it takes a file; 0 with err filled (cap bytes) when not. made gets
 * the first directory this call created ("" when dir existed), for lf_cli_unmake_dir. */
int lf_cli_prepare_dir(const char *dir, char *made, int made_cap, char *err, int cap);
/* Remove dir and its parents up to made (what lf_cli_prepare_dir created), where empty. */
void lf_cli_unmake_dir(const char *dir, const char *made);
/* Whether a file can be written at path before any work is done: not a directory, in a directory
 * that exists and takes a file (a link's target's directory); 0 with err filled when not. */
int lf_cli_check_output(const char *path, char *err, int cap);
/* Where a command says what it wrote: standard error when its output went to standard output
 * ("-"), so the file there stays what was written, else standard output. */
FILE *lf_cli_note_stream(const char *out);
/* Whether a and b name the same existing file (device and inode, through links). */
int lf_cli_same_file(const char *a, const char *b);
/* s as one word of a file name: letters, digits, '.', '-' and '_' kept, anything else '_'. */
void lf_cli_file_word(char *dst, size_t cap, const char *s);
/* Ignore SIGXFSZ for the rest of the process: a write past `ulimit -f` then fails with EFBIG and
 * is cleaned up like a full disk, instead of killing the tool mid-write. Every writer of the CLI
 * calls it (lf_cli_prepare_dir, lf_cli_check_output, lf_cli_write_text). */
void lf_cli_ignore_sigxfsz(void);
/* --act's words: silu, gelu_tanh (gelu_pytorch_tanh), gelu (gelu_erf); LF_EXIT_USAGE with the
 * message printed otherwise. */
int lf_cli_act(const char *cmd, const char *v, lf_act *act);
/* The sizes of checkpoint `weights`' MLP at prefix (from gate_proj's shape); LF_EXIT_USAGE with the
 * message printed (naming the MLP layers the checkpoint has) when it cannot be read. */
int lf_cli_mlp_shape(const char *cmd, const char *weights, const char *prefix, int64_t *dim, int64_t *hidden);
/* --prefix as the checkpoint's names use it: without trailing dots ("model.layers.0.mlp." is
 * "model.layers.0.mlp"). Every user of --prefix reads it through this. */
void lf_cli_mlp_prefix(char *dst, size_t cap, const char *prefix);

/* Standard input whole (a file piped from another machine: ssh host cat t.json | ...), at most
 * max_bytes (what: what it holds, for the message past them), counted as the bytes come; NULL with
 * a message when it cannot be had. The caller frees it. */
char *lf_cli_read_stdin(const char *cmd, const char *what, int64_t max_bytes, size_t *size);

/* Standard output flushed and closed, every write to it checked (its error flag is sticky): rc
 * when all went out; else the reason said on standard error and LF_EXIT_FAIL (rc where that is a
 * failure already). */
int lf_cli_close_stdout(int rc);

/* An lf_file_write_fn (linfuse/io.h) for a NUL-terminated text (ctx). */
int lf_cli_put_text(FILE *f, void *ctx);

/* Write text to path through a temporary file and a rename; 1 on success. */
int lf_cli_write_text(const char *path, const char *text);

/* Seconds on the monotonic clock. */
double lf_cli_now(void);

/* Median of n doubles (sorts v). */
double lf_cli_median(double *v, int n);

#endif
