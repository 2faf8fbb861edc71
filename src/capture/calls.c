/* Which CUDA calls the collector keeps as rows and which it watches for graph nodes, by name (one
 * list for both of its users). Layer: capture/. */
#include <string.h>

#include "capture/capture.h"

static int has_any(const char *name, const char *const *words, size_t n)
{
    for (size_t i = 0; name && i < n; i++)
        if (strstr(name, words[i]))
            return 1;
    return 0;
}

int lfc_call_wanted(const char *name)
{
    static const char *const words[] = {"Launch",    "Memcpy", "Memset",   "Synchronize", "StreamWaitEvent",
                                        "Occupancy", "Malloc", "MemAlloc", "Free",        "MemRelease"};
    return has_any(name, words, sizeof words / sizeof words[0]);
}

int lfc_call_launches(const char *name)
{
    static const char *const words[] = {"Launch", "Memcpy", "Memset"};
    return has_any(name, words, sizeof words / sizeof words[0]);
}

int lfc_call_watched(const char *name)
{
    static const char *const words[] = {"GraphAdd", "BeginCapture", "EndCapture"};
    return lfc_call_launches(name) || has_any(name, words, sizeof words / sizeof words[0]);
}
