/* FLOPs from an op's recorded sizes, as PyTorch's table computes them (shape_flops.c): for the
 * reader (traces without FLOPs) and the report. Private to src/trace. Layer: trace/. */
#ifndef LF_TRACE_SHAPE_FLOPS_H
#define LF_TRACE_SHAPE_FLOPS_H

#include <jansson.h>

/* The FLOPs PyTorch's table gives an op from its recorded sizes (args: the event's "args"), 0
 * for an op it counts none for. */
double lf_trace_shape_flops(const char *op, json_t *args);

#endif
