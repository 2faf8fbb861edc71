/* The flags of every command (args.h): whole names only, and "did you mean" for the rest.
 * Layer: cli/. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

void lf_cli_args_init(lf_cli_args *a, const char *cmd, int argc, char **argv, const lf_cli_opt *opts, int n)
{
    *a = (lf_cli_args){.cmd = cmd, .argc = argc, .argv = argv, .opts = opts, .n = n, .next = 1};
}

static char fold(char c)
{
    return c == '_' ? '-' : c;
}

/* Whether the flag as typed (its first len bytes) is name exactly, an underscore standing for a
 * dash. */
static int same_name(const char *typed, size_t len, const char *name)
{
    if (strlen(name) != len)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (fold(typed[i]) != fold(name[i]))
            return 0;
    return 1;
}

/* Levenshtein's distance of two short words (64 characters or more: far), dashes and underscores
 * alike. */
static int distance(const char *a, const char *b)
{
    enum { CAP = 64 };
    const size_t na = strlen(a), nb = strlen(b);
    if (na >= CAP || nb >= CAP)
        return CAP;
    int row[CAP];
    for (size_t j = 0; j <= nb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            const int sub = diag + (fold(a[i - 1]) != fold(b[j - 1])), del = row[j] + 1, ins = row[j - 1] + 1;
            diag = row[j];
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    }
    return row[nb];
}

const char *lf_cli_closest(const char *word, const char *const *names, int n)
{
    const size_t len = strlen(word);
    const char *prefix_of = NULL, *best = NULL;
    int prefixes = 0, best_d = 0;
    for (int i = 0; i < n && len; i++) { /* a name that word begins */
        int is_prefix = strlen(names[i]) > len;
        for (size_t c = 0; c < len && is_prefix; c++)
            is_prefix = fold(word[c]) == fold(names[i][c]);
        if (is_prefix)
            prefixes++, prefix_of = names[i];
    }
    if (prefixes == 1)
        return prefix_of;
    const int limit = len <= 3 ? 1 : len <= 8 ? 2 : (int)len / 3;
    for (int i = 0; i < n; i++) {
        const int d = distance(word, names[i]);
        if (d <= limit && (!best || d < best_d))
            best = names[i], best_d = d;
    }
    return best;
}

/* "cmd: unknown flag 'flag' (cmd --help lists its flags)", and last, where the eye lands, the
 * nearest of the command's own flags when one is near: one line, no help text to scroll it away. */
static int unknown_flag(lf_cli_args *a, const char *arg, size_t len)
{
    a->bad = arg;
    fprintf(stderr, "%s: unknown flag '%.*s' (%s --help lists its flags)", a->cmd, (int)len, arg, a->cmd);
    if (arg[1] == '-' && len > 2) {
        const char *names[LF_CLI_MAX_OPTS + 1];
        char word[64];
        int n = 0;
        for (int i = 0; i < a->n && n < LF_CLI_MAX_OPTS; i++)
            names[n++] = a->opts[i].name;
        names[n++] = "help";
        snprintf(word, sizeof word, "%.*s", (int)len - 2, arg + 2);
        const char *near = len - 2 < sizeof word ? lf_cli_closest(word, names, n) : NULL;
        if (near)
            fprintf(stderr, "; did you mean --%s?", near);
    }
    fputc('\n', stderr);
    return LF_CLI_BAD;
}

/* The value of option o, seen as arg: after its '=' (eq), joined to a one-letter spelling
 * (joined), or the next word. */
static int take_value(lf_cli_args *a, const lf_cli_opt *o, const char *arg, size_t len, const char *attached,
                      const char **value)
{
    if (!o->takes_value) {
        if (!attached)
            return o->id;
        fprintf(stderr, "%s: '%.*s' takes no value\n", a->cmd, (int)len, arg);
        return LF_CLI_BAD;
    }
    if (attached) {
        *value = attached;
        return o->id;
    }
    if (a->next >= a->argc) {
        fprintf(stderr, "%s: %.*s needs a value\n", a->cmd, (int)len, arg);
        return LF_CLI_BAD;
    }
    *value = a->argv[a->next++]; /* whatever it is: "--row-limit -1" */
    return o->id;
}

int lf_cli_next(lf_cli_args *a, const char **value)
{
    *value = NULL;
    a->bad = NULL;
    while (a->next < a->argc) {
        const char *arg = a->argv[a->next++];
        if (a->words_only || arg[0] != '-' || !arg[1]) { /* "-" alone is a word: standard input */
            *value = arg;
            return LF_CLI_WORD;
        }
        if (!strcmp(arg, "--")) {
            a->words_only = 1;
            continue;
        }
        if (arg[1] == '-') { /* --name, --name=value */
            const char *eq = strchr(arg + 2, '=');
            const size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
            if (same_name(arg + 2, len - 2, "help") && !eq)
                return LF_CLI_HELP;
            for (int i = 0; i < a->n; i++)
                if (same_name(arg + 2, len - 2, a->opts[i].name))
                    return take_value(a, &a->opts[i], arg, len, eq ? eq + 1 : NULL, value);
            return unknown_flag(a, arg, len);
        }
        if (arg[1] == 'h' && !arg[2]) /* -x, -xVALUE */
            return LF_CLI_HELP;
        for (int i = 0; i < a->n; i++)
            if (a->opts[i].short_name == arg[1])
                return take_value(a, &a->opts[i], arg, 2, arg[2] ? arg + 2 : NULL, value);
        return unknown_flag(a, arg, strlen(arg));
    }
    return LF_CLI_END;
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
