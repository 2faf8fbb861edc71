/* The case table: every op case linfuse is held to, on every device, written once. Each section
 * says what it covers and where its cases came from; test_cases runs the list (cases.h). Sizes
 * are odd (1, 7, 33, 257, the prime 1031), data random in [-1, 1), views strided and offset.
 * Cases marked big are work for a GPU: the CPU skips them in CI (run `test_cases cpu --big`). */
#include <stdlib.h>
#include <string.h>

#include "cases.h"

static const char *const op_names[CASE_OP_COUNT] = {"gemm",
                                                    "mm",
                                                    "mm_out",
                                                    "addmm",
                                                    "addmm_act",
                                                    "linear",
                                                    "matmul",
                                                    "mm_gated",
                                                    "scaled_mm",
                                                    "scaled_mm_gated",
                                                    "scaled_mm_gated_fp8",
                                                    "add",
                                                    "mul",
                                                    "gelu",
                                                    "silu",
                                                    "act_mul",
                                                    "quantize"};
static const char *const layout_names[LAY_COUNT] = {"row",  "col",       "pad",       "pad16",
                                                    "half", "bcast_row", "bcast_col", "perm"};
static const char *const tol_names[TOL_COUNT] = {"dtype", "fp8", "fp8-codes", "bits"};

const char *case_op_name(case_op op)
{
    return (unsigned)op < CASE_OP_COUNT ? op_names[op] : "?";
}
const char *case_layout_name(case_layout l)
{
    return (unsigned)l < LAY_COUNT ? layout_names[l] : "?";
}
const char *case_tol_name(case_tol t)
{
    return (unsigned)t < TOL_COUNT ? tol_names[t] : "?";
}

static int is_gemm_like(case_op op)
{
    return op <= CASE_SCALED_MM_GATED_FP8;
}

void case_name(const case_t *c, char *buf, size_t cap)
{
    static const char *const bias_names[] = {"", "bias=vec", "bias=mat", "bias=col"};
    int n = snprintf(buf, cap, "%s %s %lldx%lld", case_op_name(c->op), lf_dtype_name(c->dt), (long long)c->m,
                     (long long)c->n);
#define MORE(...)                                                 \
    do {                                                          \
        if (n >= 0 && (size_t)n < cap)                            \
            n += snprintf(buf + n, cap - (size_t)n, __VA_ARGS__); \
    } while (0)
    if (is_gemm_like(c->op))
        MORE("x%lld", (long long)c->k);
    if (c->batch > 1)
        MORE(" batch=%lld", (long long)c->batch);
    if (c->op == CASE_LINEAR || (c->nd == 3 && !is_gemm_like(c->op)))
        MORE(" nd=%d", c->nd);
    if (c->op == CASE_QUANTIZE || c->op == CASE_GELU || c->op == CASE_SILU)
        MORE(" %s", case_layout_name(c->la));
    else
        MORE(" %s/%s", case_layout_name(c->la), case_layout_name(c->lb));
    if (c->bias)
        MORE(" %s", c->op == CASE_ADDMM ? bias_names[c->bias] : c->bias_f32 ? "bias=f32" : "bias");
    if (c->c_input)
        MORE(" c");
    if (c->alpha != 1.0f)
        MORE(" alpha=%g", (double)c->alpha);
    if ((c->op == CASE_ADDMM || c->c_input) && c->beta != 1.0f)
        MORE(" beta=%g", (double)c->beta);
    if (c->act != LF_ACT_NONE)
        MORE(" act=%s", lf_act_name(c->act));
    if (c->group)
        MORE(" group=%lld", (long long)c->group);
    if (c->op == CASE_QUANTIZE)
        MORE(" scale=%s", c->scale == LF_SCALE_ROWS ? "rows" : c->scale == LF_SCALE_1X128 ? "1x128" : "128x128");
    else if (c->dt == LF_DTYPE_F8E4M3)
        MORE(" scale=%s", c->scale == LF_SCALE_ROWS ? "rows" : "blocks");
    if (c->out_fp8)
        MORE(" out=f8e4m3");
    if (c->pad_rows)
        MORE(" pad_rows=%lld", (long long)c->pad_rows);
    if (c->special)
        MORE(" special");
    if (c->big)
        MORE(" big");
#undef MORE
}

static void add(case_list *l, case_t c)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
        if (!l->v)
            abort();
    }
    l->v[l->n++] = c;
}

void cases_free(case_list *l)
{
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* A case of op on (m, k) x (k, n) (or (m, n) for the rest): row-major, no epilogue, its dtype's
 * tolerance. */
static case_t mk(case_op op, lf_dtype dt, int64_t m, int64_t n, int64_t k)
{
    return (case_t){.op = op,
                    .dt = dt,
                    .m = m,
                    .n = n,
                    .k = k,
                    .batch = 1,
                    .nd = 2,
                    .la = LAY_ROW,
                    .lb = LAY_ROW,
                    .alpha = 1.0f,
                    .beta = 1.0f,
                    .tol = TOL_DTYPE};
}

static const lf_dtype dtypes[3] = {LF_DTYPE_F32, LF_DTYPE_BF16, LF_DTYPE_F16};
static const case_layout lays[3] = {LAY_ROW, LAY_COL, LAY_PAD};

/* lf_backend_gemm with every epilogue, each output in a NaN-poisoned buffer. */
static void gemm_cases(case_list *l)
{
    /* Every layout pair (nn, tn, nt, tt, padded and offset) at odd sizes, one large dim at a time,
     * in each dtype, the bias and activation rotating (test_backend_cpu's). */
    static const int64_t odd[][3] = {{1, 1, 1},     {7, 33, 257},  {33, 7, 1031}, {257, 33, 7},
                                     {1031, 9, 33}, {13, 1031, 5}, {33, 257, 1},  {40, 64, 400}};
    for (int si = 0; si < 8; si++)
        for (int d = 0; d < 3; d++)
            for (int la = 0; la < 3; la++)
                for (int lb = 0; lb < 3; lb++) {
                    case_t c = mk(CASE_GEMM, dtypes[d], odd[si][0], odd[si][1], odd[si][2]);
                    c.la = lays[la], c.lb = lays[lb];
                    c.bias = (la + lb + si) % 2;
                    c.act = (lf_act)((la + 2 * lb + si) % LF_ACT_COUNT);
                    add(l, c);
                }
    /* Every epilogue combination (bias, C, alpha and beta, each activation) at one odd shape. */
    for (int d = 0; d < 3; d++)
        for (int act = 0; act < LF_ACT_COUNT; act++)
            for (int bias = 0; bias < 2; bias++)
                for (int ci = 0; ci < 2; ci++)
                    for (int ab = 0; ab < 2; ab++) {
                        case_t c = mk(CASE_GEMM, dtypes[d], 37, 45, 70);
                        c.lb = LAY_COL, c.bias = bias, c.c_input = ci, c.act = (lf_act)act;
                        c.alpha = ab ? -0.75f : 1.0f, c.beta = ab ? 2.5f : 1.0f;
                        add(l, c);
                    }
    /* The paired gate in any layout and activation, with a bias: interleaved (group 1), blocks and
     * [gate | up] halves, odd token counts (the CPU's epilogue; CUDA's kernels take bf16 only). */
    static const int64_t gsh[][4] = {
        {33, 64, 47, 1}, {7, 96, 33, 4}, {129, 100, 65, 50}, {1, 2, 3, 1}, {257, 96, 31, 16}};
    for (int i = 0; i < 5; i++)
        for (int d = 0; d < 3; d++)
            for (int act = 0; act < LF_ACT_COUNT; act++) {
                case_t c = mk(CASE_GEMM, dtypes[d], gsh[i][0], gsh[i][1], gsh[i][2]);
                c.la = lays[i % 3], c.lb = i % 2 ? LAY_COL : LAY_ROW, c.bias = (i + act) % 2;
                c.act = (lf_act)act, c.group = gsh[i][3];
                add(l, c);
            }
    /* The gated kernels' shapes, GeGLU's and SwiGLU's activation (test_cuda_gated's): odd token
     * counts, K not a multiple of the kernels' 64-step, stacked weights (group = H), 128- and
     * 64-row blocks (64: ping-pong only), a tile count that leaves a ping-pong consumer idle; x
     * row-major, the (2H, K) weight seen transposed, d a padded view. On CUDA every schedule. */
    static const int64_t gk[][4] = {/* M, K, H, group */
                                    {1, 64, 128, 128},     {5, 776, 384, 128},    {16, 4096, 256, 256},
                                    {9, 520, 100, 100},    {77, 768, 384, 384},   {300, 136, 256, 128},
                                    {1000, 256, 512, 256}, {129, 4096, 128, 128}, {8192, 768, 3072, 3072},
                                    {200, 192, 320, 64},   {100, 64, 192, 64},    {1100, 704, 1152, 384}};
    for (int i = 0; i < 12; i++)
        for (int s = 0; s < 2; s++) {
            case_t c = mk(CASE_GEMM, LF_DTYPE_BF16, gk[i][0], 2 * gk[i][2], gk[i][1]);
            c.lb = LAY_COL, c.act = s ? LF_ACT_SILU : LF_ACT_GELU_TANH, c.group = gk[i][3];
            add(l, c);
        }
    /* Every token count from 1 to 17: the GEMV (1 to 16, gelu_erf too), then the Hopper kernel;
     * x in padded rows at a 16-byte offset. */
    for (int64_t m = 1; m <= 17; m++)
        for (int s = 0; s < 3; s++) {
            if (s == 2 && m != 1 && m != 16 && m != 17)
                continue;
            case_t c = mk(CASE_GEMM, LF_DTYPE_BF16, m, 256, 136);
            c.la = m % 2 ? LAY_PAD16 : LAY_ROW, c.lb = LAY_COL, c.group = 128;
            c.act = s == 0 ? LF_ACT_SILU : s == 1 ? LF_ACT_GELU_TANH : LF_ACT_GELU_ERF;
            add(l, c);
        }
    /* A Linear at every token count from 1 to 17 (a decode step's, where cuBLASLt splits k), with
     * and without a bias, x in padded rows; a K of 14336 (the down projection of Llama-3-8B's
     * MLP), K = 8 and 132, and an activation, in every dtype. */
    for (int64_t m = 1; m <= 17; m++) {
        case_t c = mk(CASE_GEMM, LF_DTYPE_BF16, m, 257, 136);
        c.la = m % 2 ? LAY_PAD16 : LAY_ROW, c.lb = LAY_COL, c.bias = (m / 2) % 2;
        add(l, c);
    }
    static const int64_t lin[][4] = {/* M, N, K, act */
                                     {16, 96, 14336, LF_ACT_NONE},
                                     {1, 1031, 4096, LF_ACT_NONE},
                                     {5, 40, 8, LF_ACT_NONE},
                                     {3, 64, 132, LF_ACT_NONE},
                                     {4, 64, 136, LF_ACT_GELU_TANH}};
    for (int i = 0; i < 5; i++)
        for (int d = 0; d < 3; d++) {
            case_t c = mk(CASE_GEMM, dtypes[d], lin[i][0], lin[i][1], lin[i][2]);
            c.lb = LAY_COL, c.bias = i % 2, c.act = (lf_act)lin[i][3];
            add(l, c);
        }
    /* FP8 through the backend (test_cuda_fp8's): cuBLASLt's scaled GEMM, row-wise and in blocks, and
     * the gated kernel's e4m3 form in every schedule, into poisoned outputs; then h written in
     * e4m3 with its 1 x 128 scales. */
    static const int64_t f8[][3] = {{77, 384, 768}, {80, 384, 784}};
    for (int i = 0; i < 2; i++) {
        case_t c = mk(CASE_GEMM, LF_DTYPE_F8E4M3, f8[i][0], f8[i][1], f8[i][2]);
        c.lb = LAY_COL, c.scale = i ? LF_SCALE_1X128 : LF_SCALE_ROWS, c.tol = TOL_FP8;
        add(l, c);
    }
    static const int64_t f8g[][4] = {/* M, K, H, group */
                                     {5, 784, 384, 128},     {129, 4096, 128, 128}, {300, 144, 256, 128},
                                     {1000, 256, 512, 256},  {200, 192, 320, 64},   {1100, 704, 1152, 384},
                                     {8192, 768, 3072, 3072}};
    for (int i = 0; i < 7; i++)
        for (int s = 0; s < 2; s++) {
            case_t c = mk(CASE_GEMM, LF_DTYPE_F8E4M3, f8g[i][0], 2 * f8g[i][2], f8g[i][1]);
            c.lb = LAY_COL, c.act = s ? LF_ACT_SILU : LF_ACT_GELU_TANH, c.group = f8g[i][3], c.tol = TOL_FP8;
            add(l, c);
        }
    static const int64_t f8o[][4] = {
        {5, 784, 384, 128}, {300, 144, 256, 128}, {1000, 256, 512, 256}, {256, 512, 1536, 1536}};
    for (int i = 0; i < 4; i++)
        for (int s = 0; s < 2; s++) {
            case_t c = mk(CASE_GEMM, LF_DTYPE_F8E4M3, f8o[i][0], 2 * f8o[i][2], f8o[i][1]);
            c.lb = LAY_COL, c.act = s ? LF_ACT_SILU : LF_ACT_GELU_TANH, c.group = f8o[i][3];
            c.out_fp8 = 1, c.tol = TOL_FP8_CODES;
            add(l, c);
        }
}

/* The GEMM ops as users call them, on new outputs (and mm_out into a poisoned view). */
static void op_gemm_cases(case_list *l)
{
    /* mm and addmm_act with every activation, in every dtype and three x by two w layouts
     * (test_cuda's GEMMs; the two larger shapes on the GPU only). */
    static const int64_t sh[][3] = {{1, 8, 8}, {7, 33, 257}, {257, 64, 33}, {1031, 128, 64}, {64, 1031, 96}};
    for (int si = 0; si < 5; si++)
        for (int d = 0; d < 3; d++)
            for (int la = 0; la < 3; la++)
                for (int lb = 0; lb < 2; lb++)
                    for (int act = -1; act < LF_ACT_COUNT; act++) {
                        case_t c = mk(act < 0 ? CASE_MM : CASE_ADDMM_ACT, dtypes[d], sh[si][0], sh[si][1], sh[si][2]);
                        c.la = lays[la], c.lb = lays[lb], c.bias = act >= 0, c.big = si >= 3;
                        c.act = act < 0 ? LF_ACT_NONE : (lf_act)act;
                        add(l, c);
                    }
    /* mm_out into a block of a wider, poisoned buffer. */
    static const int64_t so[][3] = {{7, 33, 257}, {33, 1031, 7}, {257, 64, 33}};
    for (int si = 0; si < 3; si++)
        for (int d = 0; d < 3; d++) {
            case_t c = mk(CASE_MM_OUT, dtypes[d], so[si][0], so[si][1], so[si][2]);
            c.la = lays[si], c.lb = LAY_COL;
            add(l, c);
        }
    /* addmm's bias forms: (N) rides in the epilogue when beta is 1, anything else is read as C
     * (test_ops'). */
    for (int d = 0; d < 2; d++)
        for (int form = BIAS_VEC; form <= BIAS_COL; form++)
            for (int be = 0; be < 3; be++)
                for (int al = 0; al < 2; al++) {
                    case_t c = mk(CASE_ADDMM, dtypes[d], 33, 45, 70);
                    c.lb = LAY_COL, c.bias = form, c.beta = be == 0 ? 1.0f : be == 1 ? 0.5f : 0.0f;
                    c.alpha = al ? -2.0f : 1.0f;
                    add(l, c);
                }
    /* linear with x of 1, 2 and 3 dims, with and without bias (test_ops'). */
    static const int64_t ls[][3] = {{1, 1, 1}, {7, 33, 257}, {257, 7, 33}, {33, 1031, 7}};
    for (int si = 0; si < 4; si++)
        for (int d = 0; d < 3; d++)
            for (int bias = 0; bias < 2; bias++)
                for (int nd = 1; nd <= 3; nd++) {
                    if (d == 2 && (nd != 2 || si == 0))
                        continue; /* f16: the 2-D forms */
                    case_t c = mk(CASE_LINEAR, dtypes[d], nd == 1 ? 1 : ls[si][0], ls[si][1], ls[si][2]);
                    c.nd = nd, c.bias = bias, c.batch = nd == 3 ? 2 : 1;
                    add(l, c);
                }
    /* matmul of a 3-D x that no view flattens: reshape copies (test_ops'). */
    for (int d = 0; d < 2; d++) {
        case_t c = mk(CASE_MATMUL, dtypes[d], 3, 9, 7);
        c.batch = 33, c.nd = 3, c.la = LAY_PERM;
        add(l, c);
    }
    /* mm_gated: the device's gated kernel where it has one, else one GEMM and act_mul; on CUDA the
     * refusals named (test_cuda_gated's) and their fallbacks computed right. */
    static const struct {
        lf_dtype dt;
        int64_t m, k, h, group;
        case_layout la, lb;
        const char *cuda_refuses;
    } mg[] = {{LF_DTYPE_F32, 65, 96, 80, 8, LAY_ROW, LAY_COL, "takes bf16 or scaled f8e4m3"},
              {LF_DTYPE_BF16, 65, 96, 80, 8, LAY_ROW, LAY_COL, "gate_group 8"},
              {LF_DTYPE_F16, 33, 64, 128, 128, LAY_ROW, LAY_COL, "takes bf16 or scaled f8e4m3"},
              {LF_DTYPE_BF16, 33, 64, 100, 100, LAY_ROW, LAY_COL, "gate_group 100"},
              {LF_DTYPE_BF16, 33, 60, 128, 128, LAY_ROW, LAY_COL, "multiple of 16 bytes"},
              {LF_DTYPE_BF16, 45, 64, 256, 32, LAY_ROW, LAY_COL, "gate_group 32"},
              {LF_DTYPE_BF16, 33, 64, 128, 64, LAY_ROW, LAY_ROW, "seen transposed"},
              {LF_DTYPE_BF16, 33, 64, 128, 128, LAY_PAD, LAY_COL, "row-major with rows a multiple of 16 bytes"},
              {LF_DTYPE_BF16, 7, 776, 384, 128, LAY_ROW, LAY_COL, NULL},
              {LF_DTYPE_BF16, 300, 136, 256, 128, LAY_ROW, LAY_COL, NULL}};
    for (size_t i = 0; i < sizeof mg / sizeof mg[0]; i++) {
        case_t c = mk(CASE_MM_GATED, mg[i].dt, mg[i].m, 2 * mg[i].h, mg[i].k);
        c.la = mg[i].la, c.lb = mg[i].lb, c.group = mg[i].group, c.cuda_refuses = mg[i].cuda_refuses;
        c.act = i % 2 ? LF_ACT_SILU : LF_ACT_GELU_TANH;
        add(l, c);
    }
}

/* FP8: the quantizers on every device, the scaled ops where the device has an FP8 GEMM. */
static void fp8_cases(case_list *l)
{
    /* The quantizers' bytes in each form, against their definition (test_fp8's and
     * test_cuda_fp8's): odd row lengths, a row of zeros, a row near 1e-38 (its scale held at
     * 2^-126), an outlier and a value far below its row's subnormals; f32 and f16; transposed
     * views; rows of 4096 and 14336 (CUDA's vectorized kernel), of 16392 (past it), and of 768,
     * 1032 and 2056 (a warp a row, some lanes idle). */
    static const struct {
        lf_dtype dt;
        int64_t r, c;
        case_layout lay;
    } q[] = {{LF_DTYPE_BF16, 37, 65, LAY_ROW},   {LF_DTYPE_F32, 37, 65, LAY_ROW},   {LF_DTYPE_F16, 37, 65, LAY_COL},
             {LF_DTYPE_BF16, 37, 777, LAY_ROW},  {LF_DTYPE_F32, 5, 4096, LAY_ROW},  {LF_DTYPE_F16, 65, 37, LAY_COL},
             {LF_DTYPE_BF16, 3, 14336, LAY_ROW}, {LF_DTYPE_BF16, 300, 64, LAY_COL}, {LF_DTYPE_BF16, 257, 4096, LAY_ROW},
             {LF_DTYPE_BF16, 2, 16392, LAY_ROW}, {LF_DTYPE_BF16, 33, 768, LAY_ROW}, {LF_DTYPE_BF16, 6, 1032, LAY_ROW},
             {LF_DTYPE_BF16, 5, 2056, LAY_ROW},  {LF_DTYPE_BF16, 300, 300, LAY_ROW}};
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        for (int form = 0; form < 4; form++) {
            case_t c = mk(CASE_QUANTIZE, q[i].dt, q[i].r, q[i].c, 0);
            c.la = q[i].lay, c.special = q[i].lay == LAY_ROW, c.tol = TOL_BITS;
            c.scale = form == 2 ? LF_SCALE_1X128 : form == 3 ? LF_SCALE_128X128 : LF_SCALE_ROWS;
            c.pad_rows = form == 1 ? 3 : 0;
            add(l, c);
        }
    /* lf_scaled_mm, row-wise and block-scaled (K 784 ends in a partial block, N 304 too). */
    static const int64_t rows[][3] = {{1, 128, 64}, {77, 384, 768}, {300, 1008, 4096}, {8192, 3072, 768}};
    static const int64_t blocks[][3] = {{4, 128, 128}, {80, 384, 784}, {64, 304, 256}, {8192, 3072, 768}};
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 4; i++) {
            const int64_t *s = b ? blocks[i] : rows[i];
            case_t c = mk(CASE_SCALED_MM, LF_DTYPE_F8E4M3, s[0], s[1], s[2]);
            c.lb = LAY_COL, c.scale = b ? LF_SCALE_1X128 : LF_SCALE_ROWS, c.tol = TOL_FP8;
            add(l, c);
        }
    /* lf_scaled_mm_gated: the kernel, a few tokens (no e4m3 GEMV: the Hopper kernel), and a group
     * it cannot tile (a scaled GEMM, then act(g) * u). */
    static const int64_t sg[][4] = {{33, 256, 256, 128}, {7, 256, 256, 128}, {70, 256, 96, 48}};
    for (int i = 0; i < 3; i++) {
        case_t c = mk(CASE_SCALED_MM_GATED, LF_DTYPE_F8E4M3, sg[i][0], 2 * sg[i][2], sg[i][1]);
        c.lb = LAY_COL, c.group = sg[i][3], c.act = i % 2 ? LF_ACT_SILU : LF_ACT_GELU_TANH, c.tol = TOL_FP8;
        add(l, c);
    }
    /* lf_scaled_mm_gated_fp8: the kernel's fused quantization, and the two steps where it cannot
     * tile the group. */
    static const int64_t sf[][4] = {{33, 256, 256, 128}, {200, 192, 320, 64}};
    for (int i = 0; i < 2; i++) {
        case_t c = mk(CASE_SCALED_MM_GATED_FP8, LF_DTYPE_F8E4M3, sf[i][0], 2 * sf[i][2], sf[i][1]);
        c.lb = LAY_COL, c.group = sf[i][3], c.act = i ? LF_ACT_SILU : LF_ACT_GELU_TANH, c.tol = TOL_FP8_CODES;
        add(l, c);
    }
}

/* Pointwise ops, strided and broadcast, in every dtype. */
static void pointwise_cases(case_list *l)
{
    for (int d = 0; d < 3; d++) {
        const lf_dtype dt = dtypes[d];
        /* add and mul: (3, 5, 1031) + (1031), transposed and padded operands, a column broadcast
         * (test_backend_cpu's and test_cuda's) */
        case_t c = mk(CASE_ADD, dt, 5, 1031, 0);
        c.nd = 3, c.batch = 3, c.lb = LAY_BCAST_ROW;
        add(l, c);
        c = mk(CASE_ADD, dt, 257, 33, 0), c.la = LAY_PAD, c.lb = LAY_COL;
        add(l, c);
        c = mk(CASE_ADD, dt, 33, 257, 0), c.la = LAY_COL, c.lb = LAY_BCAST_COL;
        add(l, c);
        c = mk(CASE_MUL, dt, 257, 33, 0), c.lb = LAY_COL;
        add(l, c);
        c = mk(CASE_MUL, dt, 64, 1031, 0), c.la = LAY_PAD, c.lb = LAY_BCAST_ROW;
        add(l, c);
        c = mk(CASE_MUL, dt, 7, 33, 0), c.nd = 3, c.batch = 5, c.la = LAY_COL, c.lb = LAY_BCAST_COL;
        add(l, c);
        /* gelu both ways and silu on strided inputs (test_ops') */
        for (int a = 0; a < 3; a++) {
            const lf_act act = a == 0 ? LF_ACT_GELU_TANH : a == 1 ? LF_ACT_GELU_ERF : LF_ACT_SILU;
            const case_op op = a == 2 ? CASE_SILU : CASE_GELU;
            c = mk(op, dt, 33, 257, 0), c.la = LAY_COL, c.act = act;
            add(l, c);
            c = mk(op, dt, 1, 1, 0), c.act = act;
            add(l, c);
            c = mk(op, dt, 65, 3072, 0), c.la = a == 1 ? LAY_PAD : LAY_ROW, c.act = act;
            add(l, c);
        }
        /* gelu_mul and silu_mul: odd rows, rows that take CUDA's 16-byte path and rows that
         * cannot, the two halves of one (R, 2C) product, transposed inputs (test_ops' and
         * test_cuda_gated's) */
        static const int64_t am[][2] = {{1, 1}, {3, 7}, {1, 8}, {17, 257}, {64, 3072}, {5, 40000}, {513, 3072}};
        static const case_layout al[3] = {LAY_ROW, LAY_HALF, LAY_COL};
        for (int si = 0; si < 7; si++)
            for (int li = 0; li < 3; li++)
                for (int a = 0; a < 3; a++) {
                    if (a == 2 && si % 3)
                        continue; /* gelu_erf on a few */
                    c = mk(CASE_ACT_MUL, dt, am[si][0], am[si][1], 0);
                    c.la = c.lb = al[li], c.tol = TOL_BITS;
                    c.act = a == 0 ? LF_ACT_GELU_TANH : a == 1 ? LF_ACT_SILU : LF_ACT_GELU_ERF;
                    add(l, c);
                }
    }
}

/* Cases added after the table above settled, last so that every earlier case keeps its index,
 * and so its seed (test_cases.c: data by index). */
static void later_gemm_cases(case_list *l)
{
    /* The Hopper GEMV's tiling (GPU-sized): more 64-output tiles than SMs (no split), 16 tiles with
     * K split over a cluster of 8, and 3 tiles of a 64-row gate group with a K past its last
     * 64-step split over 8; then a K under one 64-step (the copy box wider than the tensor) and
     * 33 K steps split over 8 (four each, one rank five). `make test-gpu` runs the bf16 GEMMs again
     * with LINFUSE_GEMV_KERNEL=mma and =tma. */
    static const int64_t gv[][4] = {/* M, K, H, group */ {11, 1536, 9216, 128},
                                    {4, 2048, 1024, 1024},
                                    {1, 4104, 192, 64},
                                    {1, 8, 64, 64},
                                    {3, 2056, 1024, 1024}};
    for (int i = 0; i < 5; i++) {
        case_t c = mk(CASE_GEMM, LF_DTYPE_BF16, gv[i][0], 2 * gv[i][2], gv[i][1]);
        c.lb = LAY_COL, c.group = gv[i][3], c.big = i < 3;
        c.act = i % 3 == 0 ? LF_ACT_SILU : i % 3 == 1 ? LF_ACT_GELU_ERF : LF_ACT_GELU_TANH;
        add(l, c);
    }
    /* Plain GEMMs of a few tokens reading a weight (cuBLASLt's split-K plans; the Hopper GEMV's
     * plain form under LINFUSE_GEMV_KERNEL=tma): odd token and output counts (a last tile past the
     * weight's rows), K past a 64-step and split over a cluster, x in padded rows, a bias. */
    static const int64_t pg[][3] = {/* M, N, K */ {1, 200, 520}, {9, 64, 4104}, {16, 1100, 768}, {3, 4096, 2048}};
    for (int i = 0; i < 4; i++) {
        case_t c = mk(CASE_GEMM, LF_DTYPE_BF16, pg[i][0], pg[i][1], pg[i][2]);
        c.la = i == 2 ? LAY_PAD16 : LAY_ROW, c.lb = LAY_COL, c.bias = i % 2, c.big = i == 3;
        add(l, c);
    }
    /* An odd count of 64-wide K steps, the last one partial (the Hopper GEMV's plain form takes
     * two a stage, the second past K), with and without a bias, in every dtype. */
    static const int64_t oddk[][3] = {/* M, N, K */ {7, 200, 4104}, {13, 72, 264}};
    for (int i = 0; i < 2; i++)
        for (int d = 0; d < 3; d++) {
            case_t c = mk(CASE_GEMM, dtypes[d], oddk[i][0], oddk[i][1], oddk[i][2]);
            c.lb = LAY_COL, c.bias = i % 2;
            add(l, c);
        }
    /* An f32 bias on 16-bit operands (lf_epilogue's default bias dtype; cuBLASLt's epilogue takes
     * only d's, so CUDA adds it after), with no activation, relu and gelu_tanh (cuBLASLt's own
     * epilogues, which the bias then may not ride), one token and nine; then with a C input, beta
     * and alpha. */
    for (int d = 1; d < 3; d++)
        for (int act = 0; act < 3; act++)
            for (int m = 1; m <= 9; m += 8) {
                case_t c = mk(CASE_GEMM, dtypes[d], m, 136, 300);
                c.lb = LAY_COL, c.bias = 1, c.bias_f32 = 1;
                c.act = act == 0 ? LF_ACT_NONE : act == 1 ? LF_ACT_RELU : LF_ACT_GELU_TANH;
                add(l, c);
            }
    case_t cb = mk(CASE_GEMM, LF_DTYPE_BF16, 37, 136, 300);
    cb.lb = LAY_COL, cb.bias = 1, cb.bias_f32 = 1, cb.c_input = 1, cb.beta = 0.5f, cb.alpha = 0.75f;
    cb.act = LF_ACT_GELU_TANH;
    add(l, cb);
    /* More 32-output tiles of the Hopper GEMV's plain form than an H200 has SMs (132): 282 tiles,
     * three CTAs an SM; 532, four an SM and four past them. Both rings go round (17 and 9 stages
     * of two K steps, the last step partial), one with a bias, one with x in padded rows; under
     * LINFUSE_GEMV_KERNEL=tma the plain form must be what ran them. */
    static const int64_t wide[][3] = {/* M, N, K */ {5, 9000, 2120}, {14, 17000, 1096}};
    for (int i = 0; i < 2; i++) {
        case_t c = mk(CASE_GEMM, LF_DTYPE_BF16, wide[i][0], wide[i][1], wide[i][2]);
        c.la = i ? LAY_PAD16 : LAY_ROW, c.lb = LAY_COL, c.bias = !i, c.big = 1, c.gemv_tma = 1;
        add(l, c);
    }
}

/* Work a case does, in multiply-adds or elements. */
static double work_of(const case_t *c)
{
    if (is_gemm_like(c->op))
        return (double)c->batch * (double)c->m * (double)c->n * (double)c->k;
    return (double)c->batch * (double)c->m * (double)c->n;
}

void cases_build(case_list *l)
{
    gemm_cases(l);
    op_gemm_cases(l);
    fp8_cases(l);
    pointwise_cases(l);
    later_gemm_cases(l);
    /* More than the CPU does in CI under ASan in a few seconds: 1e7 multiply-adds, 1e5 elements. */
    for (int i = 0; i < l->n; i++)
        l->v[i].big |= work_of(&l->v[i]) > (is_gemm_like(l->v[i].op) ? 1e7 : 1e5);
}
