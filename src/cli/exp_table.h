/* The experiments' table (exp_table.c): one row an experiment, read by the command-line parser
 * (experiments.c) and by a run (exp_run.c). Layer: cli/. */
#ifndef LF_CLI_EXP_TABLE_H
#define LF_CLI_EXP_TABLE_H

#include "cli/exp_models.h"

/* What an experiment's row says it takes (common flags are taken by all). */
enum {
    T_SIZE = 1 << 0,    /* matmul-add: --size --batched --warmup */
    T_LINEAR = 1 << 1,  /* --batch --in-dim --out-dim --no-bias */
    T_MLP = 1 << 2,     /* --batch --seq --dim --hidden */
    T_VARIANT = 1 << 3, /* --variant fused|gated|fp8 */
    T_COMPILE = 1 << 4, /* --compile and its flags */
    T_GATE = 1 << 5,    /* --compile's --gated and --fp8: two GEMMs meeting in act(a)*b, an MLP's */
};

typedef struct exp_def {
    const char *name, *alias; /* the command, and the blog's spelling */
    const char *label;        /* the record_function range around each forward */
    const char *what;         /* one line for help */
    unsigned takes;           /* T_* */
    int64_t batch;            /* default --batch */
    void (*shape)(const exp_cfg *c, char *buf, size_t cap);
    void (*memory)(const exp_cfg *c, exp_memory *e);
    lf_status (*build)(const exp_cfg *c, lf_rng *rng, model *m);
    lf_status (*forward)(const exp_cfg *c, const model *m, const lf_tensor *x, lf_tensor **y);
} exp_def;

extern const exp_def lf_exp_defs[EXP_COUNT];

#endif
