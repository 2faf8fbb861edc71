/* Error messages and invariant failures. Layer: base. The message buffer is per thread so that
 * concurrent callers never read each other's errors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"

static _Thread_local char lf_err_msg[512];

static const char *const lf_status_names[LF_STATUS_COUNT] = {
    "LF_OK",     "LF_EINVAL",    "LF_ESHAPE",       "LF_EDTYPE", "LF_EDEVICE",
    "LF_ENOMEM", "LF_EOVERFLOW", "LF_EUNSUPPORTED", "LF_EIO",    "LF_EGUARD",
};
_Static_assert(sizeof lf_status_names / sizeof lf_status_names[0] == LF_STATUS_COUNT, "one name per status");

const char *lf_status_name(lf_status s)
{
    return (unsigned)s < LF_STATUS_COUNT ? lf_status_names[s] : "LF_E?";
}

const char *lf_version(void)
{
    return LF_VERSION;
}

const char *lf_last_error(void)
{
    return lf_err_msg;
}

void lf_clear_error(void)
{
    lf_err_msg[0] = '\0';
}

lf_status lf_failv(lf_status s, const char *fmt, va_list ap)
{
    vsnprintf(lf_err_msg, sizeof lf_err_msg, fmt, ap);
    return s;
}

lf_status lf_fail(lf_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lf_failv(s, fmt, ap);
    va_end(ap);
    return s;
}

void lf_precondition_fail(const char *fn, const char *what)
{
    fprintf(stderr, "linfuse: %s: %s (a precondition of the function; see its header)\n", fn, what);
    fflush(stderr);
    abort();
}

void lf_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "linfuse: internal error: assertion `%s' failed at %s:%d\n", expr, file, line);
    abort();
}

char *lf_fmt_shape(char *buf, int cap, int ndim, const int64_t *shape)
{
    int n = snprintf(buf, (size_t)cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += snprintf(buf + n, (size_t)(cap - n), i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < cap)
        snprintf(buf + n, (size_t)(cap - n), "]");
    return buf;
}
