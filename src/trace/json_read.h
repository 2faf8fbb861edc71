/* The trace parser (json_read.c): Kineto-schema JSON into an lf_trace, from a whole text or from
 * a source that brings the text in as the parse goes (json_source.h). The entry points that open
 * files and standard input are json_open.c's. Private to src/trace. Layer: trace/. */
#ifndef LF_TRACE_JSON_READ_H
#define LF_TRACE_JSON_READ_H

#include <jansson.h>

#include "trace/json_source.h"

/* The args of ev that no field holds and the writer does not make from fields (json_args.c), as
 * JSON members for extra_args, a "stream" first; NULL when there are none, or out of memory
 * (*oom set). The caller frees. */
char *lf_json_other_args(json_t *args, const lf_trace_event *ev, int *oom);

/* Parse a trace from data/size: the whole text, or with src the text so far (the parse brings in
 * the rest). releasable: data is a mapping of the reader's own, whose parsed pages it may give
 * back. opts: lf_trace_read_opts (NULL: the defaults). */
lf_status lf_json_parse(lf_trace **out, const char *data, size_t size, const char *name, int releasable, lazy_src *src,
                        const lf_trace_read_opts *opts);

#endif
