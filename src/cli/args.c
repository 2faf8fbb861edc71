/* getopt_long behind every command's flags (args.h). Layer: cli/. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

enum { ID_BASE = 1000 };

/* Each name twice where it has a dash: "in-dim" and "in_dim". The underscore spellings live in
 * a static pool: names are short, commands few. */
static char spellings[2 * LF_CLI_MAX_OPTS][32];

void lf_cli_args_init(lf_cli_args *a, const char *cmd, int argc, char **argv, const lf_cli_opt *opts, int n)
{
    int k = 0;
    size_t ns = 0;
    a->cmd = cmd, a->argc = argc, a->argv = argv, a->opts = opts, a->n = n;
    /* "-" first: positional words come back in order (as 1); ":" next: a missing value is ':' */
    a->shortopts[ns++] = '-', a->shortopts[ns++] = ':', a->shortopts[ns++] = 'h';
    for (int i = 0; i < n && i < LF_CLI_MAX_OPTS; i++) {
        int has = opts[i].takes_value ? required_argument : no_argument;
        if (opts[i].short_name) {
            a->shortopts[ns++] = (char)opts[i].short_name;
            if (opts[i].takes_value)
                a->shortopts[ns++] = ':';
        }
        a->longopts[k++] = (struct option){opts[i].name, has, NULL, ID_BASE + i};
        if (strchr(opts[i].name, '-') && strlen(opts[i].name) < sizeof spellings[0]) {
            char *u = spellings[i];
            snprintf(u, sizeof spellings[0], "%s", opts[i].name);
            for (char *c = u; *c; c++)
                if (*c == '-')
                    *c = '_';
            a->longopts[k++] = (struct option){u, has, NULL, ID_BASE + i};
        }
    }
    a->longopts[k++] = (struct option){"help", no_argument, NULL, 'h'};
    a->longopts[k] = (struct option){NULL, 0, NULL, 0};
    a->shortopts[ns] = '\0';
    optind = 0; /* glibc: start afresh (a command may parse more than once in a process) */
    opterr = 0;
}

int lf_cli_next(lf_cli_args *a, const char **value)
{
    int c = getopt_long(a->argc, a->argv, a->shortopts, a->longopts, NULL);
    *value = optarg;
    if (c == -1)
        return LF_CLI_END;
    if (c == 1)
        return LF_CLI_WORD;
    if (c == 'h')
        return LF_CLI_HELP;
    for (int i = 0; i < a->n; i++)
        if (a->opts[i].short_name && c == a->opts[i].short_name)
            return a->opts[i].id;
    const char *seen = optind > 0 && optind <= a->argc ? a->argv[optind - 1] : "?";
    if (c == ':') {
        fprintf(stderr, "%s: %s needs a value\n", a->cmd, seen);
        return LF_CLI_BAD;
    }
    if (c == '?') {
        if (optopt && optopt < ID_BASE)
            fprintf(stderr, "%s: unknown flag '-%c'\n", a->cmd, optopt);
        else if (optopt >= ID_BASE)
            fprintf(stderr, "%s: '%s' takes no value\n", a->cmd, seen);
        else
            fprintf(stderr, "%s: unknown flag '%s'\n", a->cmd, seen);
        return LF_CLI_BAD;
    }
    return a->opts[c - ID_BASE].id;
}

int lf_cli_int(const char *cmd, const char *flag, const char *val, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = val ? strtoll(val, &end, 10) : 0;
    if (!val || errno || end == val || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s must be an integer from %lld to %lld, got '%s'\n", cmd, flag, (long long)lo,
                (long long)hi, val ? val : "");
        return 0;
    }
    *out = v;
    return 1;
}
