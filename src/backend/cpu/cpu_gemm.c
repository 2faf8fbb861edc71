/* The CPU GEMM: cache-blocked in the manner of BLIS/GotoBLAS, with operands read through their
 * strides while packing (so nn, tn, nt and tt cost the same and nothing is transposed in
 * memory), bf16/f16 widened to f32 while packing (bf16 against a weight seen as W^T packed in
 * k-pairs instead, where the CPU has AVX512_BF16: plan.pairs), f32 accumulation in
 * registers, and the epilogue (alpha, C, bias, activation, gate) applied to each row-block of
 * results while it is still in L1. Threads split D into independent blocks; each packs its own
 * operands (the packers: cpu_pack.c), but B where the caller packed it once for many calls
 * (lf_cpu_pack_b: a weight). A few rows against an nn.Linear weight (decode) skip the packing:
 * dot products (few_rows).
 *
 * Per thread, over its block of D:
 *   for each panel of NC output columns:     pack B (K x NC) into slivers of nr columns
 *     for each block of MC rows:              pack A (MC x K) into slivers of mr rows
 *       for each B sliver:                    (a strip of MC x nr results)
 *         for each KC chunk of K:             the B sliver chunk (KC x nr) stays in L1
 *           for each A sliver: micro-kernel   mr x nr sums, accumulated over the chunks
 *         epilogue on the strip -> D
 * Layer: backend/cpu. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_gemm_impl.h"

enum { KC = 384 }; /* 384 x 32 floats of B (48 KB) per chunk: measured best on AVX-512 (bench/RESULTS.md) */

/* B packed once (linfuse/cpu.h): all of B's slivers as lf_cpu_pack_b_panel (or _pairs) lays out
 * a panel, one after the other, so a block's panel starts at sliver o / nro. What it was packed
 * from is kept to refuse a GEMM it does not fit. */
struct lf_cpu_packed_b {
    const lf_cpu_kernels *k; /* the kernel set (its nr) it was packed for */
    lf_matrix b;             /* B: data, shape, strides, dtype */
    lf_gate gate;
    int64_t gate_group;
    int pairs;  /* packed in bf16 k-pairs (uses_pairs) */
    void *data; /* (D's columns / nro rounded up) slivers of (K, nr) floats, or of ((K + 1) / 2, nr) pairs */
};

/* Whether g runs on the bf16 packed path with kernel set k: bf16 against bf16 along k, on a CPU
 * with bf16 dot products (lf_bf16_dots_apply). */
static int uses_pairs(const lf_gemm *g, const lf_cpu_kernels *k)
{
    return k->ukr_bf16 && lf_bf16_dots_apply(g) && lf_cpu_b_along_k(g);
}

typedef struct ws_layout {
    size_t bp, ap, strip, cols, bias, total; /* byte offsets in a thread's slot */
} ws_layout;

static ws_layout layout_for(const lf_cpu_plan *pl)
{
    const int64_t mr = pl->k->mr, nr = pl->k->nr, K = pl->K;
    const int64_t nsl = (pl->nco + pl->nro - 1) / pl->nro, mcp = (pl->mc + mr - 1) / mr * mr;
    ws_layout l;
    size_t off = 0;
#define TAKE(field, n) \
    l.field = off;     \
    off += ((size_t)(n) + 63) & ~(size_t)63;
    TAKE(bp, pl->bpk ? 0 : (size_t)nsl * K * nr * sizeof(float));
    TAKE(ap, (size_t)mcp * K * sizeof(float));
    TAKE(strip, (size_t)mcp * nr * sizeof(float));
    TAKE(cols, (size_t)nsl * nr * sizeof(int64_t));
    TAKE(bias, (size_t)nsl * nr * sizeof(float));
#undef TAKE
    l.total = off;
    return l;
}

/* Ask for the D lines a strip will write while its sums are being computed, so the epilogue's
 * stores do not wait on memory (D is written once; without this its misses cost ~10%). Rows of
 * contiguous columns only, and only the strip's real columns: with a column stride the span ran
 * over nro strides (a one-column D of stride 2^55 prefetched for ever). */
static void prefetch_d(const lf_cpu_plan *pl, int64_t i0, int64_t rows, int64_t o0)
{
    const lf_matrix *d = &pl->g->d;
    if (d->cs != 1)
        return;
    const int64_t es = (int64_t)lf_dtype_size(d->dtype), span = (pl->No - o0 < pl->nro ? pl->No - o0 : pl->nro) * es;
    const char *base = (const char *)d->data + (i0 * d->rs + o0 * d->cs) * es;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t off = 0; off < span; off += 64)
            __builtin_prefetch(base + r * d->rs * es + off, 1, 2);
}

/* D's block [m0, m1) x [o0, o1) on the plan's path, f32 words or bf16 k-pairs (pl->pairs): the
 * same loops over pl->steps words of k, in chunks of KC values of k (KC / 2 pairs: the f32 path's
 * k in half its bytes; 384 pairs measured the same, bench/RESULTS.md, 2026-12-03, 1480fd8). */
static void run_block(const lf_cpu_plan *pl, const ws_layout *l, char *slot, int64_t m0, int64_t m1, int64_t o0,
                      int64_t o1)
{
    const lf_cpu_kernels *k = pl->k;
    const int mr = k->mr, nr = k->nr, pairs = pl->pairs;
    const int64_t steps = pl->steps, chunk = pairs ? KC / 2 : KC;
    float *ap = (float *)(slot + l->ap), *strip = (float *)(slot + l->strip); /* ap: 4-byte words */
    int64_t *cols = (int64_t *)(slot + l->cols);
    float *bias = (float *)(slot + l->bias);
    for (int64_t oc = o0; oc < o1; oc += pl->nco) {
        const int64_t nco = o1 - oc < pl->nco ? o1 - oc : pl->nco, nsl = (nco + pl->nro - 1) / pl->nro;
        const float *bp; /* 4-byte words */
        if (pl->bpk) {   /* packed once: the panel is in place (oc is a whole number of slivers) */
            bp = (const float *)pl->bpk + oc / pl->nro * steps * nr;
            lf_cpu_panel_map(pl, oc, nsl, cols, bias);
        } else {
            float *own = (float *)(slot + l->bp);
            if (pairs)
                lf_cpu_pack_b_pairs(pl, oc, nco, (uint32_t *)own, cols, bias);
            else
                lf_cpu_pack_b_panel(pl, oc, nco, own, cols, bias);
            bp = own;
        }
        for (int64_t ic = m0; ic < m1; ic += pl->mc) {
            const int64_t mc = m1 - ic < pl->mc ? m1 - ic : pl->mc, nsa = (mc + mr - 1) / mr;
            if (pairs)
                lf_cpu_pack_a_pairs(pl, ic, mc, (uint32_t *)ap);
            else
                lf_cpu_pack_a_block(pl, ic, mc, ap);
            for (int64_t s = 0; s < nsl; s++) {
                const float *bs = bp + s * steps * nr;
                prefetch_d(pl, ic, mc, oc + s * pl->nro);
                for (int64_t pc = 0; pc < steps; pc += chunk) {
                    const int64_t kc = steps - pc < chunk ? steps - pc : chunk;
                    for (int64_t ia = 0; ia < nsa; ia++) {
                        const float *a = ap + ia * steps * mr + pc * mr, *b = bs + pc * nr;
                        float *c = strip + ia * mr * nr;
                        if (pairs)
                            k->ukr_bf16(kc, (const uint32_t *)a, (const uint32_t *)b, c, pc > 0);
                        else
                            k->ukr(kc, a, b, c, pc > 0);
                    }
                }
                const int64_t o = oc + s * pl->nro;
                lf_ep_strip es = {
                    .g = pl->g,
                    .nr = nr,
                    .i0 = ic,
                    .rows = mc,
                    .o0 = o,
                    .nout = (int)(o1 - o < pl->nro ? o1 - o : pl->nro),
                    .cols = cols + s * nr,
                    .bias = bias + s * nr,
                    .acc = strip,
                };
                k->ep_strip(&es);
            }
        }
    }
}

/* A GEMM of LF_CPU_DIRECT_ROWS (linfuse/cpu.h) rows or fewer whose B columns run along k (an nn.Linear weight seen
 * as W^T): each output a dot product read straight from B, the epilogue the tiled path's. At a
 * decode step's one token, packing B cost more than the product (a one-token MLP on the CPU spent
 * 25% of its time in pack_cols and 15% in a micro-kernel whose 12 rows were 11 of padding). The
 * threads take runs of slivers; each converts A's rows to f32 in its own slot. */
static lf_status few_rows(const lf_cpu_plan *pl, int T)
{
    const lf_gemm *g = pl->g;
    const lf_cpu_kernels *k = pl->k;
    const int nr = k->nr;
    const int64_t M = pl->M, K = pl->K, nsl = (pl->No + pl->nro - 1) / pl->nro;
    const lf_matrix *a = &g->a, *b = &g->b;
    const int f32 = b->dtype == LF_DTYPE_F32;
    /* bf16 against bf16, on a CPU with bf16 dot products: both read as they are (A's rows copied
     * together, B's columns in place) */
    const int bf = k->dots_bf16 && lf_bf16_dots_apply(g);
    if (nsl == 0 || M == 0)
        return LF_OK;
    if (T > nsl)
        T = (int)nsl;
    /* a thread's slot: A in f32 (M, K) (bf16 rounded up to whole floats where bf), four B columns
     * widened to f32 (4K, unless f32 or bf), the strip (M, nr), the tile's columns and biases (nr each) */
    const int64_t a_floats = bf ? (M * K + 1) / 2 : M * K;
    const size_t floats = (size_t)(a_floats + (f32 || bf ? 0 : 4 * K) + M * nr + nr);
    const size_t bytes = ((floats * sizeof(float) + (size_t)nr * sizeof(int64_t)) + 63) & ~(size_t)63;
    lf_cpu_ws *ws;
    LF_TRY(lf_cpu_ws_acquire(&ws, T, bytes));
#pragma omp parallel num_threads(T) if (T > 1)
    for (int t = omp_get_thread_num(); t < T; t += omp_get_num_threads()) { /* see lf_cpu_gemm */
        char *slot = lf_cpu_ws_slot(ws, t);
        int64_t *cols = (int64_t *)slot;
        float *af = (float *)(cols + nr), *cb = af + a_floats, *strip = cb + (f32 || bf ? 0 : 4 * K),
              *bias = strip + M * nr;
        uint16_t *abf = (uint16_t *)af;
        for (int64_t r = 0; r < M; r++) {
            if (!bf) {
                lf_cpu_gather(a->data, a->dtype, r * a->rs, a->cs, K, af + r * K, 1);
                continue;
            }
            const uint16_t *src = (const uint16_t *)a->data + r * a->rs;
            for (int64_t i = 0; i < K; i++)
                abf[r * K + i] = src[i * a->cs];
        }
        for (int64_t s = nsl * t / T; s < nsl * (t + 1) / T; s++) {
            const int64_t o = s * pl->nro;
            lf_cpu_sliver_map(pl, o, cols, bias);
            if (bf) {
                const uint16_t *w[LF_CPU_NR_MAX];
                for (int p = 0; p < nr; p++)
                    w[p] = cols[p] >= 0 ? (const uint16_t *)b->data + cols[p] * b->cs : NULL;
                k->dots_bf16(abf, M, K, w, nr, strip, nr);
            }
            for (int p = 0; p < nr && !bf; p += 4) { /* the kernels' blocks are two or four columns */
                const float *w[4] = {NULL, NULL, NULL, NULL};
                for (int j = 0; j < 4 && p + j < nr; j++) {
                    const int64_t c = cols[p + j];
                    if (c >= 0 && f32) {
                        w[j] = (const float *)b->data + c * b->cs;
                    } else if (c >= 0) {
                        lf_cpu_gather(b->data, b->dtype, c * b->cs, 1, K, cb + j * K, 1);
                        w[j] = cb + j * K;
                    }
                }
                k->dots(af, M, K, w, nr - p < 4 ? (int)(nr - p) : 4, strip + p, nr);
            }
            lf_ep_strip es = {.g = g,
                              .nr = nr,
                              .i0 = 0,
                              .rows = M,
                              .o0 = o,
                              .nout = (int)(pl->No - o < pl->nro ? pl->No - o : pl->nro),
                              .cols = cols,
                              .bias = bias,
                              .acc = strip};
            k->ep_strip(&es);
        }
    }
    lf_cpu_ws_release(ws);
    return LF_OK;
}

/* Split D among T threads as tm x tn blocks of whole micro-tiles: least work on the busiest
 * thread first, then the least packing (rows + columns per thread). */
static void split(const lf_cpu_plan *pl, int T, int *tm_out, int *tn_out)
{
    int64_t mt = (pl->M + pl->k->mr - 1) / pl->k->mr, nt = (pl->No + pl->nro - 1) / pl->nro;
    int best_tm = 1;
    int64_t best_work = INT64_MAX, best_pack = INT64_MAX;
    for (int tm = 1; tm <= T; tm++) {
        if (T % tm)
            continue;
        int tn = T / tm;
        int64_t rows = (mt + tm - 1) / tm, colsn = (nt + tn - 1) / tn;
        int64_t work = rows * colsn, pack = rows * pl->k->mr + colsn * pl->nro;
        if (work < best_work || (work == best_work && pack < best_pack))
            best_tm = tm, best_work = work, best_pack = pack;
    }
    *tm_out = best_tm;
    *tn_out = T / best_tm;
}

int lf_cpu_gemm_supports(const lf_gemm *g, char *why, size_t cap)
{
    if (g->a.dtype == LF_DTYPE_F8E4M3) {
        snprintf(why, cap, "no FP8 (f8e4m3) GEMM on the CPU; FP8 GEMMs run on Hopper GPUs");
        return 0;
    }
    return 1;
}

void lf_cpu_gated_choose(const lf_gemm *g, lf_gated_choice *c)
{
    if (lf_cpu_gemm_supports(g, c->why, sizeof c->why)) {
        const lf_cpu_kernels *k = lf_cpu_kernels_active();
        c->kernel = LF_GATED_KERNEL_EPILOGUE;
        c->tile_m = k->mr, c->tile_n = k->nr;
        c->why[0] = 0;
    } else {
        c->kernel = LF_GATED_KERNEL_FALLBACK;
    }
}

/* The plan's shape and blocks for g on kernel set k. */
static lf_cpu_plan plan_for(const lf_gemm *g, const lf_cpu_kernels *k)
{
    lf_cpu_plan pl = {.g = g, .k = k};
    pl.M = g->a.rows;
    pl.K = g->a.cols;
    pl.N = g->b.cols;
    pl.No = g->d.cols;
    pl.nro = g->ep.gate == LF_GATE_PAIRED ? pl.k->nr / 2 : pl.k->nr;
    /* Blocks: 8 micro-tiles of rows; B panels of up to 2048 output columns, fewer when K is so
     * long that the panel would pass 8 MB (A blocks shrink the same way past 2 MB). */
    const int64_t mr = k->mr, nr = k->nr;
    int64_t mc_cap = (2 << 20) / 4 / pl.K / mr * mr; /* divided in steps: 4 K nr may not fit */
    pl.mc = 8 * mr < mc_cap ? 8 * mr : (mc_cap > mr ? mc_cap : mr);
    int64_t nsl_cap = (8 << 20) / 4 / pl.K / nr;
    int64_t nsl = 2048 / pl.nro < nsl_cap ? 2048 / pl.nro : (nsl_cap > 1 ? nsl_cap : 1);
    pl.nco = nsl * pl.nro;
    /* bf16 against bf16 along k: packed in k-pairs as they are, not widened (the blocks keep the f32
     * sizes: a pair panel is half their bytes) */
    pl.pairs = uses_pairs(g, k);
    pl.steps = pl.pairs ? (pl.K + 1) / 2 : pl.K;
    return pl;
}

static lf_status gemm(const lf_gemm *g, const lf_cpu_packed_b *packed, lf_kernel_info *info)
{
    char why[128];
    if (!lf_cpu_gemm_supports(g, why, sizeof why))
        return lf_fail(LF_EUNSUPPORTED, "cpu gemm: %s", why);
    if (g->a.cols > LF_CPU_K_MAX) /* valid with broadcast strides, and past what a workspace indexes */
        return lf_fail(LF_EOVERFLOW, "cpu gemm: K = %lld is past the %lld the CPU GEMM's buffers index",
                       (long long)g->a.cols, (long long)LF_CPU_K_MAX);
    lf_cpu_plan pl = plan_for(g, packed ? packed->k : lf_cpu_kernels_active());
    const int64_t mr = pl.k->mr;
    double flops = 2.0 * (double)pl.M * (double)pl.N * (double)pl.K;
    int T = lf_cpu_threads();
    /* Below ~0.2 ms of single-thread work, waking OpenMP workers (tens of us to a ms once they
     * sleep) costs more than a second core gives: the blog's 1024x32x64 Linear stays on one. A
     * few rows against a weight of more than 4 MB are reads, not FLOPs: every core brings its own
     * loads (a one-token bf16 MLP of 1024 -> 2816 on two cores: 0.93-2.0 ms a forward with the
     * bf16 dots on one thread, 0.26-0.36 on two; bench/RESULTS.md, 2026-12-03, 9f03749). */
    const double b_bytes = (double)pl.N * (double)pl.K * (double)lf_dtype_size(g->b.dtype);
    if (flops < 3.2e7 && !(pl.M <= LF_CPU_DIRECT_ROWS && b_bytes > 4e6))
        T = 1;
    if (pl.M <= LF_CPU_DIRECT_ROWS && lf_cpu_b_along_k(g)) {
        LF_TRY(few_rows(&pl, T));
        if (info)
            lf_gemm_report(g, lf_cpu_kernel_namer, LF_CPU_KF_GEMM, 1, pl.k->nr, info);
        return LF_OK;
    }
    /* the few rows above read B itself, as valid as its packing; a packing is in the words this call
     * runs on (same B, so same dtypes, and the same kernel set: lf_cpu_gemm_packed), checked anyway */
    pl.bpk = packed && packed->pairs == pl.pairs ? packed->data : NULL;
    int tm, tn;
    split(&pl, T, &tm, &tn);
    int64_t mt = (pl.M + mr - 1) / mr, nt = (pl.No + pl.nro - 1) / pl.nro;
    int64_t rows_per = (mt + tm - 1) / tm * mr, cols_per = (nt + tn - 1) / tn * pl.nro;
    if (pl.mc > rows_per)
        pl.mc = rows_per;
    if (pl.nco > cols_per)
        pl.nco = cols_per;

    ws_layout l = layout_for(&pl);
    lf_cpu_ws *ws;
    LF_TRY(lf_cpu_ws_acquire(&ws, T, l.total));
    /* T parts of D; a team may get fewer threads than asked (called from inside the caller's own
     * parallel region, where OpenMP nests none), so each thread takes every n-th part: the parts
     * are the split, not the threads (with one per thread, half of D went unwritten there) */
#pragma omp parallel num_threads(T) if (T > 1)
    for (int t = omp_get_thread_num(); t < tm * tn; t += omp_get_num_threads()) {
        int ti = t / tn, tj = t % tn;
        int64_t m0 = ti * rows_per, o0 = tj * cols_per;
        int64_t m1 = m0 + rows_per < pl.M ? m0 + rows_per : pl.M;
        int64_t o1 = o0 + cols_per < pl.No ? o0 + cols_per : pl.No;
        if (m0 < m1 && o0 < o1)
            run_block(&pl, &l, lf_cpu_ws_slot(ws, t), m0, m1, o0, o1);
    }
    lf_cpu_ws_release(ws);

    if (info)
        lf_gemm_report(g, lf_cpu_kernel_namer, LF_CPU_KF_GEMM, pl.k->mr, pl.k->nr, info);
    return LF_OK;
}

lf_status lf_cpu_gemm(const lf_gemm *g, lf_kernel_info *info)
{
    return gemm(g, NULL, info);
}

/* --- B packed once (linfuse/cpu.h) --- */

lf_status lf_cpu_pack_b(const lf_gemm *g, lf_cpu_packed_b **out)
{
    LF_CHECK_PTR(out, "lf_cpu_pack_b", "out");
    *out = NULL;
    LF_CHECK_PTR(g, "lf_cpu_pack_b", "g");
    LF_TRY(lf_gemm_validate(g));
    char why[128];
    if (!lf_cpu_gemm_supports(g, why, sizeof why))
        return lf_fail(LF_EUNSUPPORTED, "lf_cpu_pack_b: %s", why);
    /* B alone is read: the bias is each call's own (the packer would gather it), and A, C and D may
     * already be gone (a compiled plan packs with its capture's addresses) */
    lf_gemm only_b = *g;
    only_b.ep.bias = NULL;
    const lf_cpu_plan pl = plan_for(&only_b, lf_cpu_kernels_active());
    const int nr = pl.k->nr, pairs = pl.pairs; /* in the words a call of g runs on (plan_for) */
    const int64_t K = pl.K, steps = pl.steps, nsl = (pl.No + pl.nro - 1) / pl.nro;
    int64_t n;
    if (K > LF_CPU_K_MAX)
        return lf_fail(LF_EOVERFLOW, "lf_cpu_pack_b: K = %lld is past the %lld the CPU GEMM's buffers index",
                       (long long)K, (long long)LF_CPU_K_MAX);
    if (__builtin_mul_overflow(nsl, steps * nr, &n) || n > (INT64_MAX - 63) / (int64_t)sizeof(float))
        return lf_fail(LF_EOVERFLOW, "lf_cpu_pack_b: B of %lld x %lld packed would not fit in 63 bits of bytes",
                       (long long)K, (long long)pl.N);
    const size_t bytes = ((size_t)n * sizeof(float) + 63) & ~(size_t)63;
    lf_cpu_packed_b *p = calloc(1, sizeof *p);
    char *data = p ? aligned_alloc(64, bytes) : NULL;
    /* the packer's column map and biases for one panel (the biases are the call's, not kept) */
    const int64_t per = LF_CPU_PANEL_MAX, panels = (nsl + per - 1) / per;
    int64_t *cols = malloc((size_t)per * (size_t)nr * sizeof *cols);
    float *bias = malloc((size_t)per * (size_t)nr * sizeof *bias);
    if (!p || !data || !cols || !bias) {
        free(p), free(data), free(cols), free(bias);
        return lf_fail(LF_ENOMEM, "lf_cpu_pack_b: out of memory for B packed (%zu bytes)", bytes);
    }
    for (int64_t q = 0; q < panels; q++) {
        const int64_t s0 = q * per, o0 = s0 * pl.nro, nco = pl.No - o0 < per * pl.nro ? pl.No - o0 : per * pl.nro;
        char *at = data + (size_t)(s0 * steps * nr) * sizeof(float);
        if (pairs)
            lf_cpu_pack_b_pairs(&pl, o0, nco, (uint32_t *)at, cols, bias);
        else
            lf_cpu_pack_b_panel(&pl, o0, nco, (float *)at, cols, bias);
    }
    free(cols), free(bias);
    *p = (lf_cpu_packed_b){
        .k = pl.k, .b = g->b, .gate = g->ep.gate, .gate_group = g->ep.gate_group, .pairs = pairs, .data = data};
    *out = p;
    return LF_OK;
}

lf_status lf_cpu_gemm_packed(const lf_gemm *g, const lf_cpu_packed_b *p, lf_kernel_info *info)
{
    LF_CHECK_PTR(g, "lf_cpu_gemm_packed", "g");
    LF_CHECK_PTR(p, "lf_cpu_gemm_packed", "packed");
    LF_TRY(lf_gemm_validate(g));
    const lf_matrix *b = &g->b;
    if (b->data != p->b.data || b->rows != p->b.rows || b->cols != p->b.cols || b->rs != p->b.rs || b->cs != p->b.cs ||
        b->dtype != p->b.dtype)
        return lf_fail(LF_EINVAL,
                       "lf_cpu_gemm_packed: B is not the one packed (%lld x %lld %s, strides (%lld, %lld), at %p; "
                       "packed: %lld x %lld %s, strides (%lld, %lld), at %p)",
                       (long long)b->rows, (long long)b->cols, lf_dtype_name(b->dtype), (long long)b->rs,
                       (long long)b->cs, b->data, (long long)p->b.rows, (long long)p->b.cols, lf_dtype_name(p->b.dtype),
                       (long long)p->b.rs, (long long)p->b.cs, p->b.data);
    /* with the same B and gate, lf_gemm_validate has held D's width to the packing's */
    const int paired = g->ep.gate == LF_GATE_PAIRED, was_paired = p->gate == LF_GATE_PAIRED;
    if (paired != was_paired || (paired && g->ep.gate_group != p->gate_group))
        return lf_fail(LF_EINVAL,
                       "lf_cpu_gemm_packed: B was packed for %s (gate group %lld); this GEMM has %s (gate group %lld)",
                       was_paired ? "a paired gate" : "no gate", was_paired ? (long long)p->gate_group : 0LL,
                       paired ? "a paired gate" : "no gate", paired ? (long long)g->ep.gate_group : 0LL);
    /* kernels forced to another instruction set since the packing (lf_cpu_isa_force): the copy
     * is laid out for the other kernels, so B is packed again for this call, as unpacked */
    return gemm(g, p->k == lf_cpu_kernels_active() ? p : NULL, info);
}

void lf_cpu_packed_b_free(lf_cpu_packed_b *p)
{
    if (!p)
        return;
    free(p->data);
    free(p);
}
