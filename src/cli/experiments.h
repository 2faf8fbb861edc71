/* The experiments' commands, shared with the tour and main.c. Each experiment is one row of a
 * table in exp_table.c (its name, label, the flags it takes, its shape, model and forward), as
 * ops.def is for ops; its configuration and result are exp_cfg.h's. Layer: cli/. */
#ifndef LF_CLI_EXPERIMENTS_H
#define LF_CLI_EXPERIMENTS_H

#include "cli/exp_cfg.h"

const char *lf_exp_name(exp_kind k);
/* Find an experiment by its command name ("simple-mlp" or "simple_mlp"); -1 when none is. */
int lf_exp_find(const char *name);
void lf_exp_defaults(exp_cfg *c, exp_kind k);
/* "64", "1024x32x64", "64x128x768x3072" */
void lf_exp_shape(const exp_cfg *c, char *buf, size_t cap);
/* Run one experiment: files written, summary filled; prints the tables when print is set. */
int lf_exp_run(const exp_cfg *c, exp_result *r, int print);

/* `linfuse <experiment> [flags]` (argv[0] is its name). */
int lf_cli_experiment(exp_kind k, int argc, char **argv);
int lf_cli_tour(int argc, char **argv);

#endif
