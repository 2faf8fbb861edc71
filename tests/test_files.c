/* Whole-or-nothing file writes (lf_write_files_atomic, public in linfuse/io.h, tested through the
 * shared library): what a user's files look like after a write that worked and after one that
 * failed. Modes, symbolic links, special files, standard output, directories, and a set of files
 * that changes together or not at all. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "linfuse/io.h"
#include "testutil.h"

static int put(FILE *f, void *ctx)
{
    return fputs(ctx, f) < 0 ? -1 : 0;
}

static int fail_midway(FILE *f, void *ctx)
{
    fputs(ctx, f); /* half a file, then the writer gives up */
    return -1;
}

static void make(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "create %s", path);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, mode);
}

/* The file's text (static buffer), "" when absent. */
static const char *slurp(const char *path)
{
    static char buf[256];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    return buf;
}

/* How many names in the scratch directory contain ".tmp.": temporaries left behind. */
static int temporaries(void)
{
    DIR *d = opendir(lf_test_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return n;
}

static lf_status write1(const char *path, const char *text)
{
    lf_file_job j = {path, put, (void *)text};
    return lf_write_files_atomic(&j, 1);
}

static void test_modes(void)
{
    struct stat sb;
    mode_t old = umask(027);
    OK(write1(lf_test_path("new.txt"), "fresh\n"));
    umask(old);
    CHECK(stat(lf_test_path("new.txt"), &sb) == 0 && (sb.st_mode & 0777) == 0640,
          "a new file has 0666 less the umask 027: %o", (unsigned)(sb.st_mode & 0777));
    CHECK(!strcmp(slurp(lf_test_path("new.txt")), "fresh\n"), "content: %s", slurp(lf_test_path("new.txt")));

    make(lf_test_path("private.txt"), "old\n", 0600);
    OK(write1(lf_test_path("private.txt"), "new\n"));
    CHECK(stat(lf_test_path("private.txt"), &sb) == 0 && (sb.st_mode & 0777) == 0600,
          "a replaced file keeps its mode: %o", (unsigned)(sb.st_mode & 0777));
    make(lf_test_path("shared.txt"), "old\n", 0664);
    OK(write1(lf_test_path("shared.txt"), "new\n"));
    CHECK(stat(lf_test_path("shared.txt"), &sb) == 0 && (sb.st_mode & 0777) == 0664, "mode 0664 kept: %o",
          (unsigned)(sb.st_mode & 0777));
    CHECK(!strcmp(slurp(lf_test_path("shared.txt")), "new\n"), "replaced: %s", slurp(lf_test_path("shared.txt")));
    CHECK(temporaries() == 0, "no temporaries left");
}

static void test_links(void)
{
    struct stat sb;
    make(lf_test_path("real.json"), "old\n", 0644);
    CHECK(symlink("real.json", lf_test_path("link.json")) == 0, "symlink");
    OK(write1(lf_test_path("link.json"), "through the link\n"));
    CHECK(lstat(lf_test_path("link.json"), &sb) == 0 && S_ISLNK(sb.st_mode), "the link is still a link");
    CHECK(!strcmp(slurp(lf_test_path("real.json")), "through the link\n"), "its target was written: %s",
          slurp(lf_test_path("real.json")));

    /* a link to a link, and a dangling link that names the file to create */
    CHECK(symlink("link.json", lf_test_path("link2.json")) == 0, "symlink");
    OK(write1(lf_test_path("link2.json"), "two hops\n"));
    CHECK(lstat(lf_test_path("link2.json"), &sb) == 0 && S_ISLNK(sb.st_mode), "still a link");
    CHECK(!strcmp(slurp(lf_test_path("real.json")), "two hops\n"), "target: %s", slurp(lf_test_path("real.json")));
    CHECK(symlink("dangling.json", lf_test_path("chain.json")) == 0, "symlink");
    CHECK(symlink("later.json", lf_test_path("dangling.json")) == 0, "symlink");
    OK(write1(lf_test_path("chain.json"), "chained\n")); /* a link to a dangling link: both stay links */
    CHECK(lstat(lf_test_path("chain.json"), &sb) == 0 && S_ISLNK(sb.st_mode), "the first link stays");
    CHECK(lstat(lf_test_path("dangling.json"), &sb) == 0 && S_ISLNK(sb.st_mode), "the dangling link stays a link");
    CHECK(!strcmp(slurp(lf_test_path("later.json")), "chained\n"), "the file at the chain's end was created: %s",
          slurp(lf_test_path("later.json")));
    OK(write1(lf_test_path("dangling.json"), "made\n"));
    CHECK(lstat(lf_test_path("dangling.json"), &sb) == 0 && S_ISLNK(sb.st_mode), "still a link");
    CHECK(!strcmp(slurp(lf_test_path("later.json")), "made\n"), "its target replaced: %s",
          slurp(lf_test_path("later.json")));
    CHECK(temporaries() == 0, "no temporaries left");
}

/* A device node for the test: its own copy of /dev/null or /dev/full where it may make one
 * (root; a writer that renamed over its target would otherwise replace the system's node, as
 * an older linfuse did), else the system's, which only root could replace. */
static const char *device_node(const char *name, unsigned minor, const char *system)
{
    const char *path = lf_test_path(name);
    return mknod(path, S_IFCHR | 0666, makedev(1, minor)) == 0 ? path : system;
}

static void test_special(void)
{
    struct stat sb;
    /* a device is written in place, never replaced */
    char null_path[256], full_path[256];
    snprintf(null_path, sizeof null_path, "%s", device_node("null", 3, "/dev/null"));
    snprintf(full_path, sizeof full_path, "%s", device_node("full", 7, "/dev/full"));
    OK(write1(null_path, "discarded\n"));
    CHECK(stat(null_path, &sb) == 0 && S_ISCHR(sb.st_mode), "%s is still a device", null_path);
    /* a full device fails with the system's reason, and the file written with it is untouched */
    make(lf_test_path("pair.json"), "old json\n", 0644);
    lf_file_job full[2] = {{lf_test_path("pair.json"), put, "new json\n"}, {full_path, put, "text\n"}};
    if (stat(full_path, &sb) == 0 && S_ISCHR(sb.st_mode)) {
        FAILS(LF_EIO, "No space left on device", lf_write_files_atomic(full, 2));
        CHECK(!strcmp(slurp(lf_test_path("pair.json")), "old json\n"), "its partner unchanged: %s",
              slurp(lf_test_path("pair.json")));
        CHECK(stat(full_path, &sb) == 0 && S_ISCHR(sb.st_mode), "%s is still a device", full_path);
    }
    /* "-" is standard output */
    fflush(stdout);
    int saved = dup(1), fd = open(lf_test_path("stdout.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(saved >= 0 && fd >= 0, "redirect");
    dup2(fd, 1);
    lf_status s = write1("-", "to stdout\n");
    fflush(stdout);
    dup2(saved, 1);
    close(fd);
    close(saved);
    CHECK(s == LF_OK && !strcmp(slurp(lf_test_path("stdout.txt")), "to stdout\n"), "'-' wrote standard output: %s",
          slurp(lf_test_path("stdout.txt")));
    /* a directory is refused, and left alone */
    CHECK(mkdir(lf_test_path("adir"), 0755) == 0, "mkdir");
    FAILS(LF_EIO, "is a directory", write1(lf_test_path("adir"), "x"));
    CHECK(stat(lf_test_path("adir"), &sb) == 0 && S_ISDIR(sb.st_mode), "still a directory");
    /* a missing directory: the system's reason */
    FAILS(LF_EIO, "No such file or directory", write1(lf_test_path("none/x.txt"), "x"));
    CHECK(temporaries() == 0, "no temporaries left");
}

static void test_all_or_nothing(void)
{
    make(lf_test_path("trace.json"), "old trace\n", 0644);
    make(lf_test_path("table.txt"), "old table\n", 0644);
    /* the second file's writer fails after the first was complete: neither target changes */
    lf_file_job jobs[2] = {{lf_test_path("trace.json"), put, "new trace\n"},
                           {lf_test_path("table.txt"), fail_midway, "half"}};
    FAILS(LF_EIO, "table.txt", lf_write_files_atomic(jobs, 2));
    CHECK(!strcmp(slurp(lf_test_path("trace.json")), "old trace\n"), "first unchanged: %s",
          slurp(lf_test_path("trace.json")));
    CHECK(!strcmp(slurp(lf_test_path("table.txt")), "old table\n"), "second unchanged: %s",
          slurp(lf_test_path("table.txt")));
    CHECK(temporaries() == 0, "no temporaries left: %d", temporaries());
    /* neither existed: neither appears */
    lf_file_job fresh[2] = {{lf_test_path("a.json"), put, "a\n"}, {lf_test_path("b.txt"), fail_midway, "half"}};
    FAILS(LF_EIO, NULL, lf_write_files_atomic(fresh, 2));
    CHECK(access(lf_test_path("a.json"), F_OK) != 0 && access(lf_test_path("b.txt"), F_OK) != 0,
          "neither file appeared");
    /* both work: both replaced */
    lf_file_job good[2] = {{lf_test_path("trace.json"), put, "new trace\n"},
                           {lf_test_path("table.txt"), put, "new table\n"}};
    OK(lf_write_files_atomic(good, 2));
    CHECK(!strcmp(slurp(lf_test_path("trace.json")), "new trace\n"), "trace: %s", slurp(lf_test_path("trace.json")));
    CHECK(!strcmp(slurp(lf_test_path("table.txt")), "new table\n"), "table: %s", slurp(lf_test_path("table.txt")));
    /* misuse */
    FAILS(LF_EINVAL, "expected 1 to 8", lf_write_files_atomic(good, 0));
    FAILS(LF_EINVAL, "'jobs' is NULL", lf_write_files_atomic(NULL, 1));
    CHECK(temporaries() == 0, "no temporaries left");
}

int main(void)
{
    if (!lf_test_tmpdir("lf_files_"))
        return 1;
    test_modes();
    test_links();
    test_special();
    test_all_or_nothing();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", lf_test_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", lf_test_dir);
    return lf_test_finish("test_files");
}
