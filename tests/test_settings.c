/* Settings (linfuse/settings.h): every LINFUSE_* variable declared once and read through one set
 * of functions; unset, valid and invalid values of each kind; the invalid ones refused with the
 * variable, its value and what it takes, and the `_or` forms falling back to their default. The
 * `settings_one_list` test (tests/CMakeLists.txt) checks that no other source reads one. */
#include <stdlib.h>
#include <string.h>

#include "linfuse/settings.h"
#include "testutil.h"

static void test_table(void)
{
    int n = 0;
    for (int s = 0; s < LF_SET_COUNT; s++) {
        const lf_setting_info *i = lf_setting_describe((lf_setting)s);
        CHECK(i && !strncmp(i->name, "LINFUSE_", 8) && i->meaning[0] && i->default_value[0], "setting %d declared", s);
        if (i && (i->kind == LF_SETTING_INT || i->kind == LF_SETTING_NUMBER))
            CHECK(i->min <= i->max, "%s: a range", i->name);
        if (i && i->kind == LF_SETTING_CHOICE)
            CHECK(strchr(i->values, '|') != NULL, "%s: choices", i->name);
        for (int t = 0; i && t < s; t++)
            CHECK(strcmp(i->name, lf_setting_describe((lf_setting)t)->name), "%s declared twice", i->name);
        n++;
    }
    CHECK(n == LF_SET_COUNT && !lf_setting_describe(LF_SET_COUNT), "the table ends at LF_SET_COUNT");
}

static void test_values(void)
{
    int64_t v = 7;
    unsetenv("LINFUSE_GATED_BAND");
    OK(lf_setting_int(LF_SET_GATED_BAND, &v));
    CHECK(v == 7 && !lf_setting_get(LF_SET_GATED_BAND), "unset leaves the value alone");
    setenv("LINFUSE_GATED_BAND", "", 1);
    OK(lf_setting_int(LF_SET_GATED_BAND, &v));
    CHECK(v == 7, "empty is unset");
    setenv("LINFUSE_GATED_BAND", "64", 1);
    OK(lf_setting_int(LF_SET_GATED_BAND, &v));
    CHECK(v == 64, "64 read: %lld", (long long)v);
    const char *bad[] = {"0", "1025", "12x", "x", "1e3", " 5", "99999999999999999999"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        setenv("LINFUSE_GATED_BAND", bad[k], 1);
        FAILS(LF_EINVAL, "is not an integer from 1 to 1024", lf_setting_int(LF_SET_GATED_BAND, &v));
        CHECK(strstr(lf_last_error(), "LINFUSE_GATED_BAND=") != NULL, "the message names the variable: %s",
              lf_last_error());
    }
    CHECK(lf_setting_int_or(LF_SET_GATED_BAND, 16) == 16, "an invalid value falls back to the default");
    unsetenv("LINFUSE_GATED_BAND");

    double d = 0;
    setenv("LINFUSE_DIST_TIMEOUT", "2.5", 1);
    OK(lf_setting_number(LF_SET_DIST_TIMEOUT, &d));
    CHECK(d == 2.5, "2.5 s read");
    setenv("LINFUSE_DIST_TIMEOUT", "nan", 1);
    FAILS(LF_EINVAL, "LINFUSE_DIST_TIMEOUT=nan is not a number from", lf_setting_number(LF_SET_DIST_TIMEOUT, &d));
    setenv("LINFUSE_DIST_TIMEOUT", "-1", 1);
    CHECK(lf_setting_number_or(LF_SET_DIST_TIMEOUT, 300) == 300, "a negative timeout falls back");
    unsetenv("LINFUSE_DIST_TIMEOUT");

    int c = -1;
    setenv("LINFUSE_GATED_SCHEDULE", "offload", 1);
    OK(lf_setting_choice(LF_SET_GATED_SCHEDULE, &c));
    CHECK(c == 3, "offload is the fourth choice: %d", c);
    setenv("LINFUSE_GATED_SCHEDULE", "off", 1);
    FAILS(LF_EINVAL, "one of auto|cooperative|pingpong|offload", lf_setting_choice(LF_SET_GATED_SCHEDULE, &c));
    setenv("LINFUSE_GATED_SCHEDULE", "offloadX", 1);
    CHECK(lf_setting_choice_or(LF_SET_GATED_SCHEDULE, 0) == 0, "a prefix or a longer word is no choice");
    unsetenv("LINFUSE_GATED_SCHEDULE");

    FAILS(LF_EINVAL, "not an integer setting", lf_setting_int(LF_SET_GATED_SCHEDULE, &v));
    FAILS(LF_EINVAL, "'out'", lf_setting_int(LF_SET_GATED_BAND, NULL));
    CHECK(lf_setting_get(LF_SET_COUNT) == NULL, "past the end: NULL");
}

int main(void)
{
    test_table();
    test_values();
    return lf_test_finish("test_settings");
}
