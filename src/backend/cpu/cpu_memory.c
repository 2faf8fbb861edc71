/* How much memory the CPU device can still give: what the kernel says a new allocation can take
 * without swapping anything out (MemAvailable) plus free swap, lowered by the limits a process
 * may live under (a cgroup's memory.max, v2 or v1, on each level of its hierarchy; RLIMIT_AS).
 * No library reads these: they are files under /proc and /sys. Layer: backend/cpu. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backend/cpu/cpu_impl.h"

/* The kB value of key in /proc/meminfo, or -1. */
static double meminfo(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    double kb;
    return p && sscanf(p + strlen(key), " %lf", &kb) == 1 ? kb * 1024.0 : -1;
}

/* The number in a one-line file, or -1 (absent, or "max": no limit). */
static double file_number(const char *path)
{
    FILE *f = fopen(path, "r");
    double v = -1;
    if (f) {
        char buf[64];
        if (fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3) && sscanf(buf, "%lf", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* Lower *avail and *total by the limit at dir (memory.max and memory.current in cgroup v2,
 * memory.limit_in_bytes and memory.usage_in_bytes in v1). */
static void cgroup_limit(const char *dir, const char *max_name, const char *cur_name, double *avail, double *total)
{
    char path[4300];
    if (snprintf(path, sizeof path, "%s/%s", dir, max_name) >= (int)sizeof path)
        return;
    double max = file_number(path);
    if (max < 0 || max >= 0x1p62) /* v1 writes its "no limit" as a huge page-rounded number */
        return;
    if (snprintf(path, sizeof path, "%s/%s", dir, cur_name) >= (int)sizeof path)
        return;
    double cur = file_number(path);
    double left = cur >= 0 && cur < max ? max - cur : cur >= 0 ? 0 : max;
    if (max < *total)
        *total = max;
    if (left < *avail)
        *avail = left;
}

/* Each level of this process's cgroup, v2 ("0::/path") or v1's memory controller. */
static void cgroup_limits(double *avail, double *total)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *root = NULL, *rel = NULL, *max_name = "memory.max", *cur_name = "memory.current";
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        if (!strcmp(line, "0:")) {
            root = "/sys/fs/cgroup", rel = c2 + 1;
        } else if (strstr(c1 + 1, "memory")) {
            root = "/sys/fs/cgroup/memory", rel = c2 + 1;
            max_name = "memory.limit_in_bytes", cur_name = "memory.usage_in_bytes";
        } else {
            continue;
        }
        char dir[4200];
        if (snprintf(dir, sizeof dir, "%s%s", root, rel) >= (int)sizeof dir)
            continue;
        for (;;) { /* this level, then each parent up to the root */
            cgroup_limit(dir, max_name, cur_name, avail, total);
            char *slash = strrchr(dir, '/');
            if (!slash || (size_t)(slash - dir) < strlen(root))
                break;
            *slash = '\0';
        }
    }
    if (f)
        fclose(f);
}

lf_status lf_cpu_memory(int64_t *available, int64_t *total)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char text[8192];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    double mem_total = meminfo(text, "MemTotal:"), mem_avail = meminfo(text, "MemAvailable:");
    double swap_free = meminfo(text, "SwapFree:"), swap_total = meminfo(text, "SwapTotal:");
    if (mem_total < 0 || mem_avail < 0)
        return lf_fail(LF_EUNSUPPORTED, "cpu memory: /proc/meminfo does not say (no MemTotal or MemAvailable)");
    double avail = mem_avail + (swap_free > 0 ? swap_free : 0), tot = mem_total + (swap_total > 0 ? swap_total : 0);
    cgroup_limits(&avail, &tot);
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (double)rl.rlim_cur < avail)
        avail = (double)rl.rlim_cur; /* an upper bound: part of the address space is in use */
    *available = avail < 0x1p62 ? (int64_t)avail : INT64_C(1) << 62;
    *total = tot < 0x1p62 ? (int64_t)tot : INT64_C(1) << 62;
    return LF_OK;
}
