/* The `linfuse trace` verbs that draw or serve a trace (trace_views.c): svg, report, serve.
 * Layer: cli/. */
#ifndef LF_CLI_TRACE_VIEWS_H
#define LF_CLI_TRACE_VIEWS_H

int lf_tcmd_svg(int argc, char **argv);
int lf_tcmd_report(int argc, char **argv);
int lf_tcmd_serve(int argc, char **argv);

#endif
