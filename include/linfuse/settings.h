/* linfuse's settings: every LINFUSE_* environment variable, declared once (linfuse/settings.def:
 * name, kind, default, range or choices, meaning) and read through these functions, so a value
 * that is not one the setting takes is reported the same way everywhere. A setting is read when
 * the code that uses it first runs (the process environment at that time).
 * Layer: core. */
#ifndef LINFUSE_SETTINGS_H
#define LINFUSE_SETTINGS_H

#include <stdint.h>

#include "linfuse/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LF_SETTING_TEXT: a word or two read as it is (a range's name), through lf_setting_get. */
typedef enum lf_setting_kind {
    LF_SETTING_PATH,
    LF_SETTING_INT,
    LF_SETTING_NUMBER,
    LF_SETTING_CHOICE,
    LF_SETTING_TEXT
} lf_setting_kind;

typedef enum lf_setting {
#define LF_SETTING(id, name, kind, def, lo, hi, values, meaning) LF_SET_##id,
#include "linfuse/settings.def"
#undef LF_SETTING
    LF_SET_COUNT
} lf_setting;

typedef struct lf_setting_info {
    const char *name; /* "LINFUSE_GATED_BAND" */
    lf_setting_kind kind;
    const char *default_value; /* what holds when it is unset, in words */
    double min, max;    /* LF_SETTING_INT and LF_SETTING_NUMBER: the range, both included (9.2e18: no upper bound) */
    const char *values; /* LF_SETTING_CHOICE: "auto|cooperative|pingpong|offload" */
    const char *meaning;
} lf_setting_info;

/* The declaration of s, or NULL past the end (iterate from 0 to LF_SET_COUNT). */
LF_API const lf_setting_info *lf_setting_describe(lf_setting s);

/* s's value in the environment, NULL when unset or empty. */
LF_API const char *lf_setting_get(lf_setting s);

/* s as an integer (LF_SETTING_INT), a number (LF_SETTING_NUMBER) or the index of its choice
 * (LF_SETTING_CHOICE, in the order settings.def lists them): LF_OK with *out set when it is set
 * and valid; LF_OK with *out untouched when it is unset; LF_EINVAL with a message naming the
 * variable, its value and what it takes when it is set to something else. */
LF_API lf_status lf_setting_int(lf_setting s, int64_t *out);
LF_API lf_status lf_setting_number(lf_setting s, double *out);
LF_API lf_status lf_setting_choice(lf_setting s, int *out);

/* The same, for code that goes on with a default: s's value, or def when it is unset or invalid
 * (an invalid value is said once per process on standard error: "linfuse: LINFUSE_GATED_BAND=abc
 * is not an integer from 1 to 1024; 16 is used"). */
LF_API int64_t lf_setting_int_or(lf_setting s, int64_t def);
LF_API double lf_setting_number_or(lf_setting s, double def);
LF_API int lf_setting_choice_or(lf_setting s, int def);

#ifdef __cplusplus
}
#endif
#endif
