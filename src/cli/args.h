/* Command-line flags for every linfuse command: `--flag value` and `--flag=value`, a dashed name
 * also accepted with underscores (`--in_dim`, as the blog's scripts spell it), one-letter
 * spellings (`-o FILE`, `-oFILE`), `-h`/`--help`, positional words in their place and every word
 * after `--`. Only whole names are flags: a prefix (`--sort` for `--sort-by`) is refused, with the
 * closest name offered, so adding a flag never changes what an existing command line means.
 * Messages name the command and end with a newline. Layer: cli/. */
#ifndef LF_CLI_ARGS_H
#define LF_CLI_ARGS_H

#include <stdint.h>

typedef struct lf_cli_opt {
    const char *name; /* without the dashes: "in-dim" */
    int takes_value;
    int id;         /* what lf_cli_next returns when it is seen (>= 0) */
    int short_name; /* a one-letter spelling ('o' for -o), or 0 */
} lf_cli_opt;

enum { LF_CLI_MAX_OPTS = 64 };

enum {
    LF_CLI_END = -1,  /* no more arguments */
    LF_CLI_WORD = -2, /* a positional word, in *value */
    LF_CLI_BAD = -3,  /* an unknown flag or a missing value: the message is printed */
    LF_CLI_HELP = -4, /* -h or --help */
};

typedef struct lf_cli_args {
    const char *cmd; /* "linfuse simple-mlp", for messages */
    int argc;
    char **argv;
    const lf_cli_opt *opts;
    int n;
    int next;        /* the next argv index to read */
    int words_only;  /* past "--" */
    const char *bad; /* after LF_CLI_BAD for an unknown flag: the flag as given ("--gated"), else NULL */
} lf_cli_args;

/* Begin parsing argv[1..] (argv[0] is the command's name) against opts (n of them). */
void lf_cli_args_init(lf_cli_args *a, const char *cmd, int argc, char **argv, const lf_cli_opt *opts, int n);
/* The next option's id (its value, if it takes one, in *value), or one of LF_CLI_*. */
int lf_cli_next(lf_cli_args *a, const char **value);

/* Parse an integer flag value in [lo, hi]; on error print a message naming the command and the
 * flag (and what it accepts) and return 0. */
int lf_cli_int(const char *cmd, const char *flag, const char *val, int64_t lo, int64_t hi, int64_t *out);

/* Of n names, the one a mistyped word most likely meant: the name it begins (a prefix), or the
 * nearest by edit distance within about a third of its length; NULL when none is near. Dashes and
 * underscores count alike. */
const char *lf_cli_closest(const char *word, const char *const *names, int n);

#endif
