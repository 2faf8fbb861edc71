/* Internal helpers shared by every layer: error reporting, invariant checks, checked integer
 * arithmetic. Layer: base; included by tensor/, ops/, backend/, nn/. */
#ifndef LF_CORE_H
#define LF_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "linfuse/io.h"
#include "linfuse/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Record a message for lf_last_error() and return s, so callers can write
 * `return lf_fail(LF_ESHAPE, "lf_mm: ...", ...);`. */
lf_status lf_fail(lf_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
lf_status lf_failv(lf_status s, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Broken invariants are bugs, not user errors: report expression, file and line, then abort. */
void lf_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define LF_ASSERT(e) ((e) ? (void)0 : lf_assert_fail(#e, __FILE__, __LINE__))

/* A public function's precondition (a valid pointer where the function cannot return a status):
 * broken, it is the caller's bug; report the function and the argument, then abort. Checked in
 * every build. */
void lf_precondition_fail(const char *fn, const char *what) __attribute__((noreturn));
#define LF_PRECOND(e, fn, what) ((e) ? (void)0 : lf_precondition_fail((fn), (what)))

/* Propagate a failing status unchanged (its message is already set). */
#define LF_TRY(call)                  \
    do {                              \
        lf_status lf_try_s_ = (call); \
        if (lf_try_s_ != LF_OK)       \
            return lf_try_s_;         \
    } while (0)

/* a*b and a+b for non-negative sizes; false when the result would not fit in int64_t. */
static inline int lf_mul_ok(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline int lf_add_ok(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* Format a shape as "[2, 3, 4]" into buf (always terminated); returns buf. */
char *lf_fmt_shape(char *buf, int cap, int ndim, const int64_t *shape);

#define LF_SHAPE_STR_CAP 96

/* A NULL pointer argument is a user error naming the function and the argument. */
#define LF_CHECK_PTR(p, fn, name)                                                 \
    do {                                                                          \
        if (!(p))                                                                 \
            return lf_fail(LF_EINVAL, "%s: argument '%s' is NULL", (fn), (name)); \
    } while (0)

/* A growing text buffer for tables and reports. Printing never fails midway: running out of
 * memory is remembered in oom and reported once by the caller. */
typedef struct lf_sbuf {
    char *p;
    size_t n, cap;
    int oom;
} lf_sbuf;

void lf_sbuf_printf(lf_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* n bytes of s as they are. */
void lf_sbuf_put(lf_sbuf *b, const char *s, size_t n);
/* s as a JSON string, quotes included: quotes and backslashes escaped, control characters as
 * six-character escapes, each byte that is not well-formed UTF-8 as the escape of U+FFFD, so any
 * name makes valid JSON. */
void lf_sbuf_json_str(lf_sbuf *b, const char *s);
/* The same for n bytes of s, a NUL among them escaped too (a JSON string may hold one); s[n] is
 * a NUL (a character is not read past it). */
void lf_sbuf_json_strn(lf_sbuf *b, const char *s, size_t n);
/* s as one CSV field (RFC 4180): quoted, with its quotes doubled, when it holds a comma, a quote
 * or a line break. */
void lf_sbuf_csv_field(lf_sbuf *b, const char *s);

/* FNV-1a over n bytes, continuing from h (start with LF_FNV_START): cache keys and file names,
 * not security. */
#define LF_FNV_START 1469598103934665603ull
uint64_t lf_fnv1a(const void *p, size_t n, uint64_t h);

/* UTF-8: the length of the well-formed character that starts s (1 to 4 bytes), or 0 when s
 * starts with a byte that begins none (a stray continuation byte, an overlong form, a
 * surrogate, a sequence cut short) or with the terminating NUL. */
int lf_utf8_char(const char *s);
/* The bytes of s's first max_chars characters (an invalid byte counting as one), so text is
 * cut between characters, never inside one; *chars (may be NULL) gets how many there were. */
size_t lf_utf8_prefix(const char *s, size_t max_chars, size_t *chars);

/* Text from a file (a trace's names) made safe for a terminal: each control character -- C0
 * (U+0000-U+001F), DEL (U+007F) and C1 (U+0080-U+009F) -- written as Python's repr writes it
 * (\t, \n, \r, else \x1b), each byte that is not well-formed UTF-8 as U+FFFD, the rest as it
 * is; so a name can neither move the cursor, retitle or clear the terminal, nor split a line.
 * Widths count characters as printed (an escape counts its four). */
/* The printed width of s's first n bytes (SIZE_MAX: all of s); a character cut by n is left out. */
size_t lf_term_width(const char *s, size_t n);
/* s as printed, appended to b; with keep > 0, s wider than keep is cut to its first keep
 * characters (never inside a character or an escape) and "..." follows, as PyTorch's table cuts
 * names. */
void lf_sbuf_term_str(lf_sbuf *b, const char *s, size_t keep);
/* lf_term_cut, the same into a buffer, and LF_TERM_NAME_KEEP, the keep for names in text
 * outputs, are public: linfuse/io.h. */
/* For n names listed together, how wide each is kept (keeps[i] for names[i]) so that no two
 * different names look alike once cut: keep, or 16 characters past the start a name shares with
 * another where that is wider. 0 when memory ran out. */
int lf_term_keeps(const char *const *names, int64_t n, size_t keep, size_t *keeps);

/* lf_write_files_atomic and lf_write_file_atomic, the whole-or-nothing writer, are public:
 * linfuse/io.h. */

#ifdef __cplusplus
}
#endif
#endif
