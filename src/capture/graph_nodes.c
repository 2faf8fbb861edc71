/* What the collector's callbacks record when CUDA graph nodes are made and copied, in plain C:
 * cupti_collect.c hands over the ids it reads from CUPTI's callback data, and the CPU tests hand
 * over recorded sequences. A node is made inside a call (cudaLaunchKernel on a capturing stream,
 * cudaGraphAddKernelNode): the thread's outermost open call is what the node records, with the
 * Python frames read when that call began. Frames are read at a call's start, before CUDA takes
 * any lock of its own, and only while some stream captures (or for every launch, asked with
 * --python-stack): a launch outside a capture costs a thread-local store. Layer: capture/. */
#define _GNU_SOURCE /* gettid */
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "capture/capture.h"

enum { FRAMES = 16, FRAME_BYTES = 4096 };

static struct {
    _Atomic(lfc_sink) sink;
    void *ctx;
    int python_stack;     /* asked for: every launch's frames */
    atomic_int recording; /* and the collector records now (lfc_enable): taken only then */
    atomic_int captures;  /* stream captures open in the process (begun, not yet ended) */
    atomic_int session;   /* lfc_nodes_to's count: a thread's call state from before it is stale */
} nodes;

/* The thread's open calls: the outermost one's name, id and frames (the runtime's call wraps the
 * driver's: cudaLaunchKernel inside, cuLaunchKernel inside). A call whose end the collector never
 * saw (it stopped in between) is forgotten at the thread's next call of a later session. */
static _Thread_local struct {
    int depth, capture, session;
    const char *name;
    uint32_t corr;
    int frames; /* frames read, -1: not read */
    char stack[FRAME_BYTES];
} open_call;

void lfc_nodes_recording(int on)
{
    atomic_store(&nodes.recording, on);
}

void lfc_nodes_to(lfc_sink sink, void *ctx, int python_stack)
{
    nodes.ctx = ctx;
    nodes.python_stack = python_stack;
    atomic_store(&nodes.recording, 0); /* until lfc_enable */
    atomic_store(&nodes.captures, 0);
    atomic_fetch_add(&nodes.session, 1);
    atomic_store(&nodes.sink, sink);
}

int lfc_captures_open(void)
{
    return atomic_load(&nodes.captures);
}

uint32_t lfc_tid(void)
{
    return (uint32_t)gettid();
}

uint32_t lfc_pid(void)
{
    return (uint32_t)getpid();
}

void lfc_call_enter(const char *name, uint32_t corr, int capture)
{
    const int session = atomic_load(&nodes.session);
    if (open_call.session != session)
        open_call.depth = 0, open_call.session = session;
    if (open_call.depth++ > 0)
        return;
    open_call.capture = capture;
    open_call.name = name;
    open_call.corr = corr;
    open_call.frames = -1;
    lfc_sink sink = atomic_load(&nodes.sink);
    if (!sink || !name)
        return;
    const int building = strstr(name, "GraphAdd") != NULL; /* a graph built node by node */
    const int stack = nodes.python_stack && atomic_load(&nodes.recording) && lfc_call_launches(name);
    if (!stack && !building && atomic_load(&nodes.captures) <= 0)
        return;
    open_call.frames = lfc_python_frames(open_call.stack, sizeof open_call.stack, FRAMES);
    if (stack && open_call.frames > 0) {
        lfc_rec r = {.kind = LFC_STACK,
                     .name = name,
                     .stack = open_call.stack,
                     .corr = corr,
                     .pid = lfc_pid(),
                     .tid = lfc_tid()};
        sink(nodes.ctx, &r);
    }
}

void lfc_call_exit(int ok)
{
    if (open_call.session != atomic_load(&nodes.session)) { /* entered in an earlier session */
        open_call.depth = 0;
        return;
    }
    if (open_call.depth == 0 || --open_call.depth > 0)
        return;
    if (open_call.capture > 0 && ok) /* a failed begin opened no capture */
        atomic_fetch_add(&nodes.captures, 1);
    if (open_call.capture < 0) { /* an end ends it, returned well or not; never below none */
        int open = atomic_load(&nodes.captures);
        while (open > 0 && !atomic_compare_exchange_weak(&nodes.captures, &open, open - 1))
            ;
    }
    open_call.name = NULL;
    open_call.frames = -1;
}

void lfc_node_made(uint64_t node, uint32_t graph, int64_t now)
{
    lfc_sink sink = atomic_load(&nodes.sink);
    if (!sink)
        return;
    const int in_call = open_call.depth > 0;
    lfc_rec r = {.kind = LFC_NODE,
                 .name = in_call ? open_call.name : NULL,
                 .stack = in_call && open_call.frames > 0 ? open_call.stack : NULL,
                 .start = now,
                 .end = now,
                 .corr = in_call ? open_call.corr : 0,
                 .pid = lfc_pid(),
                 .tid = lfc_tid(),
                 .graph_id = graph,
                 .graph_node_id = node};
    sink(nodes.ctx, &r);
}

void lfc_node_copied(uint64_t node, uint64_t from, int64_t now)
{
    lfc_sink sink = atomic_load(&nodes.sink);
    if (!sink || !node || !from || node == from)
        return;
    lfc_rec r = {.kind = LFC_NODE_COPY, .start = now, .end = now, .graph_node_id = node, .from_node_id = from};
    sink(nodes.ctx, &r);
}
