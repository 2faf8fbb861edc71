/* The settings table (linfuse/settings.def) and the one place LINFUSE_* variables are read and
 * checked. Layer: core. */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "linfuse/settings.h"

static const lf_setting_info table[LF_SET_COUNT] = {
#define LF_SETTING(id, nm, k, def, lo, hi, vals, mean) \
    [LF_SET_##                                         \
        id] = {.name = nm, .kind = k, .default_value = def, .min = lo, .max = hi, .values = vals, .meaning = mean},
#include "linfuse/settings.def"
#undef LF_SETTING
};

const lf_setting_info *lf_setting_describe(lf_setting s)
{
    return (unsigned)s < LF_SET_COUNT ? &table[s] : NULL;
}

const char *lf_setting_get(lf_setting s)
{
    if ((unsigned)s >= LF_SET_COUNT)
        return NULL;
    const char *v = getenv(table[s].name);
    return v && *v ? v : NULL;
}

static lf_status bad_setting(lf_setting s, const char *what)
{
    const lf_setting_info *i = &table[s];
    char shown[4 * 64 + 8]; /* the environment's text, as a terminal may show it (escapes written out) */
    lf_term_cut(shown, sizeof shown, lf_setting_get(s), 64);
    return lf_fail(LF_EINVAL, "%s=%s is not %s", i->name, shown, what);
}

static lf_status range_error(lf_setting s, const char *noun)
{
    const lf_setting_info *i = &table[s];
    char what[128];
    if (i->max >= 9.2e18)
        snprintf(what, sizeof what, "%s from %.15g up", noun, i->min);
    else
        snprintf(what, sizeof what, "%s from %.15g to %.15g", noun, i->min, i->max);
    return bad_setting(s, what);
}

lf_status lf_setting_int(lf_setting s, int64_t *out)
{
    LF_CHECK_PTR(out, "lf_setting_int", "out");
    if ((unsigned)s >= LF_SET_COUNT || table[s].kind != LF_SETTING_INT)
        return lf_fail(LF_EINVAL, "lf_setting_int: setting %d is not an integer setting", (int)s);
    const char *v = lf_setting_get(s);
    if (!v)
        return LF_OK;
    char *end = NULL;
    errno = 0;
    const long long x = v[0] == ' ' || v[0] == '\t' ? 0 : strtoll(v, &end, 10); /* no blanks before */
    const double hi = table[s].max >= 9.2e18 ? (double)INT64_MAX : table[s].max;
    if (errno || !end || *end || end == v || (double)x < table[s].min || (double)x > hi)
        return range_error(s, "an integer");
    *out = x;
    return LF_OK;
}

lf_status lf_setting_number(lf_setting s, double *out)
{
    LF_CHECK_PTR(out, "lf_setting_number", "out");
    if ((unsigned)s >= LF_SET_COUNT || table[s].kind != LF_SETTING_NUMBER)
        return lf_fail(LF_EINVAL, "lf_setting_number: setting %d is not a number setting", (int)s);
    const char *v = lf_setting_get(s);
    if (!v)
        return LF_OK;
    char *end = NULL;
    errno = 0;
    const double x = v[0] == ' ' || v[0] == '\t' ? NAN : strtod(v, &end);
    if (errno || !end || *end || end == v || !isfinite(x) || x < table[s].min || x > table[s].max)
        return range_error(s, "a number");
    *out = x;
    return LF_OK;
}

lf_status lf_setting_choice(lf_setting s, int *out)
{
    LF_CHECK_PTR(out, "lf_setting_choice", "out");
    if ((unsigned)s >= LF_SET_COUNT || table[s].kind != LF_SETTING_CHOICE)
        return lf_fail(LF_EINVAL, "lf_setting_choice: setting %d is not a choice", (int)s);
    const char *v = lf_setting_get(s);
    if (!v)
        return LF_OK;
    const size_t n = strlen(v);
    int k = 0;
    for (const char *c = table[s].values; *c; k++) {
        const char *bar = strchr(c, '|');
        const size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && !strncmp(c, v, n)) {
            *out = k;
            return LF_OK;
        }
        c += len + (bar != NULL);
    }
    char what[160];
    snprintf(what, sizeof what, "one of %s", table[s].values);
    return bad_setting(s, what);
}

/* Each invalid setting is said once per process. */
_Static_assert(LF_SET_COUNT <= 32, "one bit per setting in warned");
static atomic_uint warned;

static void warn_once(lf_setting s, const char *used)
{
    const unsigned bit = 1u << (unsigned)s;
    if (atomic_fetch_or(&warned, bit) & bit)
        return;
    fprintf(stderr, "linfuse: %s; %s is used\n", lf_last_error(), used);
}

int64_t lf_setting_int_or(lf_setting s, int64_t def)
{
    int64_t v = def;
    if (lf_setting_int(s, &v) != LF_OK) {
        char used[32];
        snprintf(used, sizeof used, "%lld", (long long)def);
        warn_once(s, used);
        return def;
    }
    return v;
}

double lf_setting_number_or(lf_setting s, double def)
{
    double v = def;
    if (lf_setting_number(s, &v) != LF_OK) {
        char used[32];
        snprintf(used, sizeof used, "%g", def);
        warn_once(s, used);
        return def;
    }
    return v;
}

int lf_setting_choice_or(lf_setting s, int def)
{
    int v = def;
    if (lf_setting_choice(s, &v) != LF_OK) {
        const char *c = (unsigned)s < LF_SET_COUNT ? table[s].values : "";
        for (int k = 0; k < def && c; k++)
            c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL;
        char used[32];
        snprintf(used, sizeof used, "%.*s", c ? (int)strcspn(c, "|") : 1, c ? c : "?");
        warn_once(s, used);
        return def;
    }
    return v;
}
