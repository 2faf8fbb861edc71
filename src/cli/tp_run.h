/* The MLP experiments over several GPUs, tensor parallel (tp_run.c): one thread per rank, each
 * writing its own trace and table. Layer: cli/. */
#ifndef LF_CLI_TP_RUN_H
#define LF_CLI_TP_RUN_H

#include "cli/exp_cfg.h"

/* An MLP experiment over several GPUs (tp_run.c): what experiments.c hands it. */
typedef struct exp_tp_job {
    const exp_cfg *c;
    const char *name, *label; /* "simple-mlp", "mlp_fwd" */
    const char *base;         /* <dir>/<shape>_<dtype>_<cold|warm>_<mode>; _rank<R> is added */
    lf_mlp_variant variant;
    void *run; /* tp_run.c's own state */
} exp_tp_job;
int lf_exp_run_tp(exp_tp_job *j, exp_result *r, int print);

#endif
