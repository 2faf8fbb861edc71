/* test_cases: the case table (cases.c) on one device against float64.
 *   test_cases [cpu | cpu:scalar|avx2|avx512 | cuda] [-v] [--list] [--big] [FILTER...]
 * cpu runs the table once per instruction set this CPU has (lf_cpu_isa_force); cuda runs it on
 * the GPU, every gated GEMM case once per schedule (lf_gated_schedule_force), and fails at once
 * where there is no GPU. FILTERs are words every case name run must contain ("gemm bf16",
 * "group=", "scale=blocks"); -v prints every run with its kernel and error; --list prints the
 * table; --big also runs on the CPU the cases sized for a GPU. A case the device cannot run is
 * skipped with the device's own reason, and the skips are counted and listed, never passed. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cases.h"

int case_gated_here;

/* --- variants --- */

static lf_cpu_isa isas[LF_CPU_ISA_COUNT];
static int n_isas;
static const lf_gated_schedule schedules[3] = {LF_GATED_COOPERATIVE, LF_GATED_PINGPONG, LF_GATED_OFFLOAD};
static const char *const schedule_names[3] = {"cooperative", "pingpong", "offload"};

int case_variants(const case_t *c, lf_device dev)
{
    if (dev == LF_DEVICE_CPU)
        return n_isas;
    return c->op == CASE_GEMM && c->group ? 3 : 1;
}

void case_variant_set(case_run *r, int v)
{
    if (r->dev == LF_DEVICE_CPU) {
        if (lf_cpu_isa_force(isas[v]) != LF_OK)
            EXPECT(r, 0, "lf_cpu_isa_force(%s): %s", lf_cpu_isa_name(isas[v]), lf_last_error());
        snprintf(r->variant, sizeof r->variant, "%s", lf_cpu_isa_name(isas[v]));
    } else if (case_variants(r->c, r->dev) == 3) {
        r->schedule = schedules[v];
        lf_gated_schedule_force(r->schedule);
        snprintf(r->variant, sizeof r->variant, "%s", schedule_names[v]);
    }
}

void case_variant_reset(lf_device dev)
{
    if (dev == LF_DEVICE_CPU)
        lf_cpu_isa_force(lf_cpu_isa_detect());
    else
        lf_gated_schedule_force(LF_GATED_AUTO);
}

/* --- the tally --- */

typedef struct tally {
    int cases, runs, skipped, failed;
    double seconds;
} tally;
static tally per_op[CASE_OP_COUNT];
enum { MAX_REASONS = 64 };
static struct {
    char why[256];
    char example[192];
    int n;
} reasons[MAX_REASONS];
static int n_reasons, verbose;

void case_record(const case_run *r)
{
    tally *t = &per_op[r->c->op];
    t->runs++;
    t->failed += r->failed > 0;
    if (r->skipped) {
        t->skipped++;
        int i = 0;
        while (i < n_reasons && strcmp(reasons[i].why, r->skip_why))
            i++;
        if (i == n_reasons && n_reasons < MAX_REASONS) {
            snprintf(reasons[i].why, sizeof reasons[i].why, "%s", r->skip_why);
            snprintf(reasons[i].example, sizeof reasons[i].example, "%s", r->name);
            n_reasons++;
        }
        if (i < MAX_REASONS)
            reasons[i].n++;
    }
    if (verbose)
        printf("%-4s %s%s%s%s: %s\n",
               r->failed    ? "FAIL"
               : r->skipped ? "skip"
                            : "ok",
               r->name, r->variant[0] ? " [" : "", r->variant, r->variant[0] ? "]" : "",
               r->skipped ? r->skip_why : r->note);
}

/* --- the device --- */

/* Whether CUDA runs the Hopper gated kernel at all: asked of a shape it takes wherever it runs. */
static int gated_kernel_here(void)
{
    const int64_t M = 128, K = 256, H = 128;
    lf_tensor *x = NULL, *w = NULL, *d = NULL;
    lf_gated_choice ch = {0};
    lf_status s = lf_tensor_empty(&x, LF_DTYPE_BF16, 2, (int64_t[]){M, K}, LF_DEVICE_CUDA);
    if (s == LF_OK)
        s = lf_tensor_empty(&w, LF_DTYPE_BF16, 2, (int64_t[]){2 * H, K}, LF_DEVICE_CUDA);
    if (s == LF_OK)
        s = lf_tensor_empty(&d, LF_DTYPE_BF16, 2, (int64_t[]){M, H}, LF_DEVICE_CUDA);
    if (s == LF_OK) {
        lf_gemm g = {.ep = lf_epilogue_default()};
        g.a = (lf_matrix){lf_tensor_data(x), LF_DTYPE_BF16, M, K, K, 1};
        g.b = (lf_matrix){lf_tensor_data(w), LF_DTYPE_BF16, K, 2 * H, 1, K};
        g.d = (lf_matrix){lf_tensor_data(d), LF_DTYPE_BF16, M, H, H, 1};
        g.ep.act = LF_ACT_SILU, g.ep.gate = LF_GATE_PAIRED, g.ep.gate_group = H;
        s = lf_gated_choose(LF_DEVICE_CUDA, &g, &ch);
    }
    printf("gated kernel here: %s%s%s\n", s != LF_OK ? "?" : lf_gated_kernel_name(ch.kernel), ch.why[0] ? ": " : "",
           s != LF_OK ? lf_last_error() : ch.why);
    lf_tensor_free(x), lf_tensor_free(w), lf_tensor_free(d);
    return s == LF_OK && ch.kernel != LF_GATED_KERNEL_FALLBACK;
}

static int set_device(const char *arg, lf_device *dev)
{
    if (!strcmp(arg, "cuda")) {
        *dev = LF_DEVICE_CUDA;
        if (!lf_device_available(LF_DEVICE_CUDA)) {
            lf_device_require(LF_DEVICE_CUDA);
            fprintf(stderr, "test_cases cuda: %s: the CUDA cases run on a GPU machine\n", lf_last_error());
            return 0;
        }
        case_gated_here = gated_kernel_here();
        return 1;
    }
    *dev = LF_DEVICE_CPU;
    const lf_cpu_isa best = lf_cpu_isa_detect();
    if (!strcmp(arg, "cpu")) { /* every instruction set this CPU has */
        for (int i = 0; i <= (int)best; i++)
            isas[n_isas++] = (lf_cpu_isa)i;
        return 1;
    }
    for (int i = 0; i <= (int)best; i++)
        if (!strncmp(arg, "cpu:", 4) && !strcmp(arg + 4, lf_cpu_isa_name((lf_cpu_isa)i))) {
            isas[n_isas++] = (lf_cpu_isa)i;
            return 1;
        }
    fprintf(stderr, "test_cases: device '%s': expected cpu, cpu:ISA (this CPU: up to %s) or cuda\n", arg,
            lf_cpu_isa_name(best));
    return 0;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int matches(const char *name, int n_filters, char **filters)
{
    for (int i = 0; i < n_filters; i++)
        if (!strstr(name, filters[i]))
            return 0;
    return 1;
}

static void print_summary(lf_device dev, double seconds)
{
    printf("%-22s %6s %6s %8s %7s %8s\n", "op", "cases", "runs", "skipped", "failed", "seconds");
    tally all = {0};
    for (int op = 0; op < CASE_OP_COUNT; op++) {
        const tally *t = &per_op[op];
        if (!t->cases)
            continue;
        printf("%-22s %6d %6d %8d %7d %8.2f\n", case_op_name((case_op)op), t->cases, t->runs, t->skipped, t->failed,
               t->seconds);
        all.cases += t->cases, all.runs += t->runs, all.skipped += t->skipped, all.failed += t->failed;
    }
    printf("%-22s %6d %6d %8d %7d %8.2f\n", "all", all.cases, all.runs, all.skipped, all.failed, seconds);
    if (n_reasons)
        printf("skipped, by the device's reason:\n");
    for (int i = 0; i < n_reasons; i++)
        printf("  %5d x %s (e.g. %s)\n", reasons[i].n, reasons[i].why, reasons[i].example);
    printf("test_cases %s: %d runs of %d cases in %.1f s\n", lf_device_name(dev), all.runs, all.cases, seconds);
}

int main(int argc, char **argv)
{
    const char *device = "cpu";
    int list = 0, big = 0, n_filters = 0;
    char **filters = calloc((size_t)argc, sizeof *filters);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v"))
            verbose = 1;
        else if (!strcmp(argv[i], "--list"))
            list = 1;
        else if (!strcmp(argv[i], "--big"))
            big = 1;
        else if (i == 1 && (!strcmp(argv[i], "cuda") || !strncmp(argv[i], "cpu", 3)))
            device = argv[i];
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: test_cases [cpu|cpu:ISA|cuda] [-v] [--list] [--big] [FILTER...]\n");
            return 2;
        } else
            filters[n_filters++] = argv[i];
    }
    verbose |= getenv("LF_TEST_VERBOSE") != NULL;
    case_list l = {0};
    cases_build(&l);
    char name[192];
    if (list) {
        for (int i = 0; i < l.n; i++) {
            case_name(&l.v[i], name, sizeof name);
            if (matches(name, n_filters, filters))
                printf("%s  (tol %s)\n", name, case_tol_name(l.v[i].tol));
        }
        cases_free(&l), free(filters);
        return 0;
    }
    lf_device dev;
    if (!set_device(device, &dev)) {
        cases_free(&l), free(filters);
        return 1;
    }
    if (dev == LF_DEVICE_CPU) {
        printf("test_cases cpu: instruction sets");
        for (int i = 0; i < n_isas; i++)
            printf(" %s", lf_cpu_isa_name(isas[i]));
        printf("\n");
    }
    const double t0 = now();
    for (int i = 0; i < l.n; i++) {
        const case_t *c = &l.v[i];
        case_run r = {.c = c, .dev = dev, .verbose = verbose};
        case_name(c, r.name, sizeof r.name);
        if (!matches(r.name, n_filters, filters))
            continue;
        per_op[c->op].cases++;
        const int no_fp8 = c->dt == LF_DTYPE_F8E4M3 && lf_fp8_supported(dev) != LF_OK; /* skipped for that */
        if (dev == LF_DEVICE_CPU && c->big && !big && !no_fp8) {
            case_skip(&r, "big: sized for a GPU (test_cases cpu --big runs it)");
            case_record(&r);
            continue;
        }
        const double tc = now();
        lf_rng rng;
        lf_rng_seed(&rng, 1000 + (uint64_t)i); /* the same data whatever the filter */
        switch (c->op) {
        case CASE_GEMM:
            run_gemm_case(&r, &rng);
            break;
        case CASE_SCALED_MM:
        case CASE_SCALED_MM_GATED:
        case CASE_SCALED_MM_GATED_FP8:
        case CASE_QUANTIZE:
            run_fp8_case(&r, &rng);
            break;
        case CASE_ADD:
        case CASE_MUL:
        case CASE_GELU:
        case CASE_SILU:
        case CASE_ACT_MUL:
            run_pointwise_case(&r, &rng);
            break;
        default:
            run_op_gemm_case(&r, &rng);
            break;
        }
        per_op[c->op].seconds += now() - tc;
    }
    print_summary(dev, now() - t0);
    cases_free(&l), free(filters);
    return lf_test_finish("test_cases");
}
