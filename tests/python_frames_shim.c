/* src/capture/python_frames.c in a module Python loads through ctypes (tests/python_frames_test.py):
 * lfc_python_frames called on a thread running Python, on one that let the GIL go, and on a thread
 * Python does not know (this file's own). */
#include <pthread.h>
#include <stddef.h>

#include "capture/capture.h"

int lf_test_frames(char *buf, size_t cap)
{
    return lfc_python_frames(buf, cap, 8);
}

typedef struct job {
    char *buf;
    size_t cap;
    int n;
} job;

static void *run(void *arg)
{
    job *j = arg;
    j->n = lfc_python_frames(j->buf, j->cap, 8);
    return NULL;
}

int lf_test_frames_foreign_thread(char *buf, size_t cap)
{
    job j = {buf, cap, -1};
    pthread_t t;
    if (pthread_create(&t, NULL, run, &j) != 0)
        return -2;
    pthread_join(t, NULL);
    return j.n;
}
