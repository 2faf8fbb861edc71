/* Small helpers of the command-line tool: the clock, integer flags, medians. Layer: cli/. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cli/cli.h"

double lf_cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int lf_cli_parse_pos(const char *flag, const char *val, int64_t max, int64_t *out)
{
    if (!val) {
        fprintf(stderr, "linfuse: %s needs a value\n", flag);
        return 0;
    }
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (errno || end == val || *end || v < 1 || v > max) {
        fprintf(stderr, "linfuse: %s must be an integer from 1 to %lld, got '%s'\n", flag, (long long)max, val);
        return 0;
    }
    *out = v;
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double lf_cli_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
