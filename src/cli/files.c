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

/* mkdir -p, noting the first directory made, then prove the directory takes a file. */
int lf_cli_prepare_dir(const char *dir, char *made, int made_cap, char *err, int cap)
{
    char path[4096];
    made[0] = '\0';
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path || (int)strlen(dir) >= made_cap) {
        snprintf(err, (size_t)cap, "path too long");
        return 0;
    }
    for (char *p = path + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = '\0';
            if (mkdir(path, 0777) == 0) {
                if (!made[0])
                    snprintf(made, (size_t)made_cap, "%s", path);
            } else if (errno != EEXIST) {
                snprintf(err, (size_t)cap, "cannot create %.*s: %s", cap / 2, path, strerror(errno));
                lf_cli_unmake_dir(dir, made);
                return 0;
            }
            *p = c;
            if (!c)
                break;
        }
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, (size_t)cap, "%.*s is not a directory", cap / 2, dir);
        lf_cli_unmake_dir(dir, made);
        return 0;
    }
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.linfuse-write-test-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0) {
        snprintf(err, (size_t)cap, "cannot write in %.*s: %s", cap / 2, dir, strerror(errno));
        lf_cli_unmake_dir(dir, made);
        return 0;
    }
    close(fd);
    unlink(probe);
    return 1;
}

void lf_cli_unmake_dir(const char *dir, const char *made)
{
    size_t stop = strlen(made);
    char path[4096];
    if (!stop || snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return;
    while (strlen(path) >= stop && rmdir(path) == 0) { /* rmdir leaves a directory with anything in it */
        char *slash = strrchr(path, '/');
        if (!slash || slash == path)
            break;
        *slash = '\0';
    }
}

int lf_cli_put_text(FILE *f, void *ctx)
{
    return fputs(ctx, f) < 0 ? -1 : 0;
}

int lf_cli_write_text(const char *path, const char *text)
{
    return lf_write_file_atomic(path, lf_cli_put_text, (void *)text) == LF_OK;
}

