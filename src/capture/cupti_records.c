/* CUPTI's activity records as the collector's lfc_rec, with Kineto's names: a copy is "Memcpy
 * HtoD (Pageable -> Device)", a set "Memset (Device)", a call its name without CUPTI's version
 * suffix, CUPTI's own cost "Activity Buffer Request" and the like (docs/gpu_notes.md, "CUPTI").
 * Layer: capture/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture/cupti_records.h"

/* callback ids of either kind of call: room for the larger count */
enum {
    API_NAMES = (int)CUPTI_DRIVER_TRACE_CBID_SIZE > (int)CUPTI_RUNTIME_TRACE_CBID_SIZE
                    ? (int)CUPTI_DRIVER_TRACE_CBID_SIZE
                    : (int)CUPTI_RUNTIME_TRACE_CBID_SIZE
};

static const char *api_names[2][API_NAMES];

/* "cudaLaunchKernel_v7000" -> "cudaLaunchKernel", kept per callback id. */
const char *lfc_api_name(int driver, uint32_t cbid)
{
    const size_t cap = sizeof api_names[0] / sizeof api_names[0][0];
    if (cbid >= cap)
        return NULL;
    const char *n = api_names[driver][cbid];
    if (n)
        return n;
    const char *raw = NULL;
    if (cuptiGetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &raw) !=
            CUPTI_SUCCESS ||
        !raw)
        return NULL;
    char *copy = strdup(raw);
    char *v = copy ? strstr(copy, "_v") : NULL;
    if (v && v != copy && v[2] >= '0' && v[2] <= '9')
        *v = '\0';
    api_names[driver][cbid] = copy; /* a race writes the same text twice; one copy leaks */
    return copy;
}

static const char *copy_kind(uint8_t k)
{
    static const char *const names[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                        "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
    return k < sizeof names / sizeof names[0] ? names[k] : "Unknown";
}

static const char *memory_kind(unsigned k)
{
    static const char *const names[] = {"Unknown", "Pageable", "Pinned",        "Device",
                                        "Array",   "Managed",  "Device Static", "Managed Static"};
    return k < sizeof names / sizeof names[0] ? names[k] : "Unknown";
}

static const char *overhead_name(CUpti_ActivityOverheadKind k)
{
    switch (k) {
    case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER:
        return "Driver Compiler";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH:
        return "Buffer Flush";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION:
        return "Instrumentation";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE:
        return "Resource";
    case CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING:
        return "Runtime Triggered Module Loading";
    case CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING:
        return "Lazy Function Loading";
    case CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL:
        return "Command Buffer Full";
    case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST:
        return "Activity Buffer Request";
    case CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT:
        return "UVM Activity Init";
    default:
        return "Unknown";
    }
}

static void from_kernel(const CUpti_ActivityKernel10 *k, lfc_rec *o)
{
    *o = (lfc_rec){.kind = LFC_KERNEL,
                   .name = k->name ? k->name : "kernel",
                   .start = (int64_t)k->start,
                   .end = (int64_t)k->end,
                   .corr = k->correlationId,
                   .device = k->deviceId,
                   .context = k->contextId,
                   .stream = k->streamId,
                   .grid = {k->gridX, k->gridY, k->gridZ},
                   .block = {k->blockX, k->blockY, k->blockZ},
                   .regs = k->registersPerThread,
                   .static_smem = k->staticSharedMemory,
                   .dyn_smem = k->dynamicSharedMemory,
                   .graph_id = k->graphId,
                   .graph_node_id = k->graphNodeId};
}

/* One CUPTI record as an lfc_rec (name may point into buf); 0 for the kinds not kept. Over 80
 * lines: one case per CUPTI record kind, each its struct's fields copied over, read best whole
 * (and unchanged since the H200 runs of bench/RESULTS.md). */
int lfc_convert(const CUpti_Activity *r, lfc_rec *o, char *buf, size_t cap)
{
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL:
        from_kernel((const void *)r, o);
        return 1;
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *c = (const void *)r;
        snprintf(buf, cap, "Memcpy %s (%s -> %s)", copy_kind(c->copyKind), memory_kind(c->srcKind),
                 memory_kind(c->dstKind));
        *o = (lfc_rec){.kind = LFC_MEMCPY,
                       .name = buf,
                       .start = (int64_t)c->start,
                       .end = (int64_t)c->end,
                       .corr = c->correlationId,
                       .device = c->deviceId,
                       .context = c->contextId,
                       .stream = c->streamId,
                       .bytes = c->bytes,
                       .graph_id = c->graphId,
                       .graph_node_id = c->graphNodeId};
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const void *)r;
        snprintf(buf, cap, "Memset (%s)", memory_kind(m->memoryKind));
        *o = (lfc_rec){.kind = LFC_MEMSET,
                       .name = buf,
                       .start = (int64_t)m->start,
                       .end = (int64_t)m->end,
                       .corr = m->correlationId,
                       .device = m->deviceId,
                       .context = m->contextId,
                       .stream = m->streamId,
                       .bytes = m->bytes,
                       .graph_id = m->graphId,
                       .graph_node_id = m->graphNodeId};
        return 1;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
        const CUpti_ActivityAPI *a = (const void *)r;
        const int driver = r->kind == CUPTI_ACTIVITY_KIND_DRIVER;
        *o = (lfc_rec){.kind = driver ? LFC_DRIVER : LFC_RUNTIME,
                       .name = lfc_api_name(driver, a->cbid),
                       .start = (int64_t)a->start,
                       .end = (int64_t)a->end,
                       .corr = a->correlationId,
                       .pid = a->processId,
                       .tid = a->threadId,
                       .cbid = (int32_t)a->cbid};
        return o->name != NULL;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
        const CUpti_ActivityMarker2 *m = (const void *)r;
        const int mark = m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START ? LFC_MARK_START
                         : m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END ? LFC_MARK_END
                                                                     : LFC_MARK_INSTANT;
        const int thread = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD;
        *o = (lfc_rec){.kind = LFC_MARKER,
                       .name = m->name,
                       .domain = m->domain,
                       .start = (int64_t)m->timestamp,
                       .end = (int64_t)m->timestamp,
                       .corr = m->id,
                       .pid = thread ? m->objectId.pt.processId : 0,
                       .tid = thread ? m->objectId.pt.threadId : 0,
                       .mark = (int8_t)mark};
        return m->timestamp != 0;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: {
        const CUpti_ActivityMemory4 *m = (const void *)r;
        const int op = m->memoryOperationType;
        *o = (lfc_rec){.kind = LFC_MEMORY,
                       .start = (int64_t)m->timestamp,
                       .end = (int64_t)m->timestamp,
                       .corr = m->correlationId,
                       .pid = m->processId,
                       .device = m->deviceId,
                       .bytes = m->bytes,
                       .addr = m->address,
                       .alloc = (int8_t)(op == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION ? 1 : -1)};
        return op == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION ||
               op == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
    }
    case CUPTI_ACTIVITY_KIND_OVERHEAD: {
        CUpti_ActivityOverhead3 *v = (void *)r;
        free(v->overheadData); /* ours to free, says cupti_activity.h */
        v->overheadData = NULL;
        const int thread = v->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD;
        *o = (lfc_rec){.kind = LFC_OVERHEAD,
                       .name = overhead_name(v->overheadKind),
                       .start = (int64_t)v->start,
                       .end = (int64_t)v->end,
                       .tid = thread ? v->objectId.pt.threadId : 0};
        return v->start || v->end;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const CUpti_ActivityExternalCorrelation *x = (const void *)r;
        *o = (lfc_rec){.kind = LFC_EXTERNAL, .corr = x->correlationId, .addr = x->externalId};
        return x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
    }
    default:
        return 0;
    }
}
