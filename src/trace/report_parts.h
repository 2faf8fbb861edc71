/* The parts of an HTML report (lf_trace_report, report.c) that stand on their own: text made
 * safe for HTML, and each kernel's rate against the device's peaks (report_kernels.c).
 * Layer: trace/. */
#ifndef LF_TRACE_REPORT_PARTS_H
#define LF_TRACE_REPORT_PARTS_H

#include "core/core.h"
#include "linfuse/trace.h"

/* Text into HTML, markup characters escaped. */
void lf_html_escaped(lf_sbuf *b, const char *s);
/* A name from a trace into HTML: control characters and bytes that are not UTF-8 as the text
 * outputs write them (lf_sbuf_term_str), then markup escaped. */
void lf_html_name(lf_sbuf *b, const char *name);
/* Each kernel of t, by name: calls, time, TFLOP/s (GFLOP/s for linfuse's CPU kernels: cpu) and
 * GB/s, against peak_tf and peak_gbps where they are over 0, with a roofline (on the CPU only
 * against peaks given). */
lf_status lf_report_kernels(lf_sbuf *b, const lf_trace *t, int cpu, double peak_tf, double peak_gbps);

#endif
