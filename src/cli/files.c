/* Where the tool writes: output directories made and proved writable before a run, and text
 * files written whole or not at all. Layer: cli/. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/core.h"

/* mkdir -p, then prove the directory takes a file. */
int lf_cli_prepare_dir(const char *dir, char *err, int cap)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        snprintf(err, (size_t)cap, "path too long");
        return 0;
    }
    for (char *p = path + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = '\0';
            if (mkdir(path, 0777) != 0 && errno != EEXIST) {
                snprintf(err, (size_t)cap, "cannot create %.*s: %s", cap / 2, path, strerror(errno));
                return 0;
            }
            *p = c;
            if (!c)
                break;
        }
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.linfuse-write-test-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0) {
        snprintf(err, (size_t)cap, "cannot write in %.*s: %s", cap / 2, dir, strerror(errno));
        return 0;
    }
    close(fd);
    unlink(probe);
    return 1;
}

static int put_text(FILE *f, void *ctx)
{
    return fputs(ctx, f) < 0 ? -1 : 0;
}

int lf_cli_write_text(const char *path, const char *text)
{
    return lf_write_file_atomic(path, put_text, (void *)text) == LF_OK;
}

