/* linfuse compile: linfuse's torch.compile. A forward function runs once in capture mode; the
 * dispatcher reports every op and kernel launch, which become a graph of kernels over values;
 * passes fuse it; the result is a plan whose buffers are allocated once and whose kernels and
 * arguments are resolved, so a run does no dispatch (on CUDA, by default, one graph launch).
 * Each call checks its inputs against guards (dtype, device, shape, strides).
 * Layer: compile/ sits on ops/ (capture) and backend/ (the plan's launches). */
#ifndef LINFUSE_COMPILE_H
#define LINFUSE_COMPILE_H

#include "linfuse/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The forward to compile: computes *out from in[0..n_in-1] with linfuse ops. Tensors it reads
 * that are not inputs (parameters) are taken as constants: they must outlive the compiled
 * forward, and their values are read at each run, their addresses fixed at compile time
 * (LF_PASS_FP8 and LF_PASS_PACK_WEIGHTS read the weights they change once, at compile time). */
typedef lf_status (*lf_forward_fn)(void *ctx, int n_in, lf_tensor *const *in, lf_tensor **out);

/* The passes, in the order they run (each can be left out to compare fused with unfused). */
enum {
    LF_PASS_FOLD_VIEWS = 1u << 0,       /* t/transpose/view/reshape become strides: no view op at run time */
    LF_PASS_BIAS_EPILOGUE = 1u << 1,    /* mm + add(bias) -> one GEMM; a 2-D bias is read as its C input */
    LF_PASS_GATED_GEMM = 1u << 2,       /* two GEMMs of one input meeting in act(a) * b -> a gated GEMM */
    LF_PASS_POINTWISE_FUSION = 1u << 3, /* chains of pointwise ops -> one generated kernel */
    LF_PASS_ACT_EPILOGUE = 1u << 4,     /* GEMM + activation (nothing else reads the GEMM) -> epilogue */
    /* with LF_PASS_GATED_GEMM: the gated GEMM in FP8 where the device has one (x quantized per
     * token at run time, [Wg; Wu] per output channel once, at compile time; h and down stay in
     * the forward's dtype). It changes the numbers (about 5e-2 relative error), so it is never a
     * default: ask for it. */
    LF_PASS_FP8 = 1u << 5,
    /* CPU: every GEMM that reads a parameter as its B (a Linear's weight) reads a copy packed once,
     * at compile time (lf_cpu_pack_b, linfuse/cpu.h), instead of packing it again at every run;
     * the results are the same to the bit. The copy does not follow the parameter: change no
     * parameter after compiling with it (compile again), so it is never a default: ask for it.
     * Runs last; a GEMM on another device, one the packing refuses, and one of up to
     * LF_CPU_DIRECT_ROWS rows against a Linear weight (which reads the weight itself, packed or
     * not) are left as they were. */
    LF_PASS_PACK_WEIGHTS = 1u << 6,
    /* what torch.compile does for these forwards; the gated GEMM goes beyond it, so it is asked for */
    LF_PASSES_DEFAULT = LF_PASS_FOLD_VIEWS | LF_PASS_BIAS_EPILOGUE | LF_PASS_POINTWISE_FUSION | LF_PASS_ACT_EPILOGUE,
    LF_PASSES_ALL = LF_PASSES_DEFAULT | LF_PASS_GATED_GEMM
};

typedef struct lf_compile_opts {
    const char *name;      /* traces show "Compiled Region: <name>" */
    unsigned passes;       /* LF_PASS_* bits to run (0: none, a plain replay of the captured kernels) */
    int no_cuda_graph;     /* CUDA: launch the plan's kernels one by one instead of one graph */
    int recompile_limit;   /* 0: an input the guards reject is an LF_EGUARD error; N > 0: capture
                              again for it, up to N times (a "Recompile" range in the trace) */
    int verbose;           /* print the graph, what each pass did and generated kernels' paths */
    const char *cache_dir; /* generated kernels; NULL: $XDG_CACHE_HOME/linfuse or ~/.cache/linfuse */
} lf_compile_opts;

/* name "forward", LF_PASSES_DEFAULT, graphs on, recompile_limit 0. */
LF_API lf_compile_opts lf_compile_opts_default(void);

typedef struct lf_compiled lf_compiled;

/* Capture fn on the example inputs (it runs once, eagerly), run the passes, build the plan.
 * o may be NULL (the defaults). fn and ctx are kept for recompiles. */
LF_API lf_status lf_compile(lf_compiled **out, lf_forward_fn fn, void *ctx, int n_in, lf_tensor *const *example,
                            const lf_compile_opts *o);

/* Run the plan on in (guards first). *out views the plan's output buffer: the next run
 * overwrites it (as PyTorch's CUDA-graph outputs are); copy it to keep it. Free the handle.
 * One compiled forward runs one call at a time (its plan holds the inputs' addresses while it
 * runs); compile once per thread to run from several. */
LF_API lf_status lf_compiled_run(lf_compiled *c, int n_in, lf_tensor *const *in, lf_tensor **out);

typedef struct lf_compiled_stats {
    int kernels;       /* kernels one run launches (the current plan) */
    int views;         /* view ops a run still dispatches (LF_PASS_FOLD_VIEWS off) */
    int graph;         /* runs replay one CUDA graph */
    int plans;         /* plans held: 1 + recompiles */
    double compile_ms; /* capture + passes + kernel builds, all plans */
} lf_compiled_stats;
LF_API lf_compiled_stats lf_compiled_get_stats(const lf_compiled *c);

/* The current plan in words: each step, what it reads and writes, what each pass did.
 * The caller frees *text. */
LF_API lf_status lf_compiled_describe(const lf_compiled *c, char **text);

LF_API void lf_compiled_free(lf_compiled *c);

#ifdef __cplusplus
}
#endif
#endif
