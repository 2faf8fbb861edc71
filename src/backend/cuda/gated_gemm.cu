// The gated GEMM for Hopper (sm_90a): m = act(x . Wg^T) * (x . Wu^T) in one kernel, act gelu_tanh
// (GeGLU) or silu (SwiGLU), x and W in bf16 or in FP8 e4m3 with row-wise scales (the FP8 form:
// gated_kernels.cuh, elem<FP8>; K steps of 128, wgmma k32, the scales applied before act).
// g and u live only in registers: each output tile's accumulators hold 128 gate columns next
// to their 128 up columns, and the epilogue writes act(g) * u, half the columns a GEMM over
// [Wg; Wu] would write and none of them read again.
//
// Shape of the kernel (docs/gpu_notes.md, "The Hopper gated GEMM"; docs/design.md, "The gated GEMM"):
//   - tiles of 128 tokens x 256 product columns (128 gates + their 128 ups), K in steps of 64
//     (128 in FP8: 128 bytes of every row either way);
//   - three warpgroups: one producer issues TMA bulk-tensor copies (128-byte swizzle) into a
//     4-stage shared-memory ring, two consumers each run wgmma m64n256k16 on 64 of the rows;
//     full/empty mbarriers with phase parity hand stages back and forth; setmaxnreg gives the
//     consumers the registers (240 each) the producer does not need (24);
//   - persistent: one CTA per SM walks tiles in bands of row-tiles so the weights a band
//     reads stay in L2.
// That is the cooperative schedule (this file): both consumers finish a tile together, so the
// tensor cores wait while they run its epilogue. gated_offload.cu keeps the tile and moves the
// epilogue's math to the producer warpgroup's idle warps; gated_pingpong.cu puts each consumer on
// a tile of its own, one's epilogue under the other's MMAs. The host code below picks one per
// shape (gated_schedule: the rule and the measurements behind it).
// The weight is the module's [Wg; Wu] in blocks of `gate_group` rows (lf_gate, LF_GATE_PAIRED):
// gate rows j of block b at 2*G*b + j, their partners G rows later. A tile's gate half and up
// half are two TMA copies from those rows, so any G that is a multiple of the half tile (128
// here, 64 in ping-pong) works, from the "(h two)"-style interleave in 128-row blocks to G = H
// (the weights simply stacked).
//
// Written against the PTX ISA; the pieces are the ones pranjalssh/fast.cu and CUTLASS use
// (cuBLASLt has no epilogue that pairs columns, and CUTLASS's dual GEMM is an SM80 kernel).
// Layer: backend/cuda.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <mutex>

#include "backend/backend_impl.h"
#include "backend/cuda/gated_rule.h"
#include "backend/cuda/gated_kernels.cuh"
#include "linfuse/settings.h"

namespace lf {
namespace gated {
using namespace coop;

// Long, and read best as one (as the ping-pong and offload bodies are): the producer's branch and
// the consumers' (mainloop, then the epilogue over their own accumulator registers) are the two
// sides of one pipeline, their barriers' phases and register budgets (setmaxnreg) set against
// each other; split, the 128-float accumulator would cross calls and the order of waits, fences
// and stores that the pipeline's correctness rests on would no longer be read in one place.
// x: tensor map over (M, K) bf16 row-major in 128-row boxes; w: over (2H, K) bf16, [Wg; Wu] in
// blocks of G rows, 128-row boxes; out: over (M, H) bf16, written in 64 x 64 boxes; act(g) * u
// with ACT one of LF_ACT_GELU_TANH, LF_ACT_SILU. The maps stay in the kernel's parameter space
// (references to its __grid_constant__ parameters), as TMA wants them.
template <int ACT, bool FP8, bool QOUT>
__device__ __forceinline__ void coop_body(const CUtensorMap &x, const CUtensorMap &w, const CUtensorMap &out,
                                          const float *sa, const float *sb, float *ds, int ds_ld, int M, int H, int K,
                                          int G, int band)
{
    static_assert(FP8 || !QOUT, "an e4m3 h comes from e4m3 operands");
    constexpr int BK = elem<FP8>::BK;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    unsigned char *ring = ring_start<STAGES>(smem_raw, full, empty, 2, [] {}); // both consumers read a stage
    unsigned char *out_tile = ring + STAGES * STAGE_BYTES;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int m_tiles = (M + BM - 1) / BM, n_tiles = H / (BN / 2), tiles = m_tiles * n_tiles;
    const int kb = (K + BK - 1) / BK;

    if (wg == 0) { // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (tid == 0)
            produce<BM, BN, BK, STAGES>(x, w, ring, full, empty, M, H, K, G, band);
    } else { // consumers: warpgroup 1 takes rows 0-63 of each tile, warpgroup 2 rows 64-127
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
        const int half = wg - 1, warp = tid / 32, lane = tid % 32;
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; i++)
            d[i] = 0.f;
        int stage = 0, phase = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int mb, nb;
            tile_of(t, m_tiles, n_tiles, band, mb, nb);
            mainloop_256<FP8, STAGES, STAGE_BYTES, A_BYTES>(d, ring, full, empty, kb, half, tid, stage, phase);
            // Epilogue. wgmma's D fragment: register 4i + 2h + e holds row 16*warp + lane/4 + 8h,
            // column 8i + 2*(lane%4) + e; columns 0-127 are gates, 128-255 their ups, so gate
            // register r pairs with up register r + 64 in the same thread. The results go to
            // this warpgroup's 64 x 128 staging tile (two 64 x 64 boxes in the 128-byte swizzle,
            // so the 8 rows of each 8 x 8 block fall in 8 different bank groups; stage_rows16), and one
            // thread hands them to the TMA engine: the consumers go back to their tensor cores
            // without waiting for global memory.
            // FP8: each product times its row's and its column's scales first (gate column c of
            // the tile is w's row gate_row + c, its up G rows later).
            unsigned char *stage_out = out_tile + half * (OUT_BYTES / 2);
            const int j0 = nb * (BN / 2), gate_row = j0 / G * 2 * G + j0 % G;
            if (tid == 0) // the previous tile's stores have finished reading the staging tile
                asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            wg_barrier(1 + half);
            if constexpr (QOUT) {
                // e4m3 h: a tile's 128 columns are one scale block of each row. Each product is
                // rounded to bf16 first (the bytes lf_quantize_fp8_1x128 writes from bf16 h); the
                // row's amax is its quad's (lanes 4q..4q+3 hold its 128 columns), its codes go to
                // one 64-row x 128-byte box of the staging tile, 128-byte swizzled, its scale to
                // ds (rows past M are zeros: scale 1, as the padding rows want).
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = warp * 16 + lane / 4 + 8 * h, row = mb * BM + half * (BM / 2) + r;
                    const float rs = row < M ? sa[row] : 1.f;
                    __nv_bfloat162 v[16];
                    float amax = 0.f;
#pragma unroll
                    for (int i = 0; i < 16; i++) {
                        const int q = 4 * i + 2 * h;
                        float g0 = d[q], g1 = d[q + 1], u0 = d[q + 64], u1 = d[q + 65];
                        scale_pair<FP8>(g0, g1, u0, u1, rs, sb, gate_row, G, 8 * i + 2 * (lane % 4));
                        v[i] = act_pair<ACT>(g0, g1, u0, u1);
                        const float2 f = __bfloat1622float2(v[i]);
                        amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
                    }
                    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
                    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
                    const float sc = fp8_scale(amax), inv = __frcp_rn(sc);
                    if (lane % 4 == 0 && row < ds_ld)
                        ds[row + (long long)nb * ds_ld] = sc;
#pragma unroll
                    for (int i = 0; i < 16; i++) { // column 8i + 2(lane % 4): 16-byte chunk i / 2
                        const float2 f = __bfloat1622float2(v[i]);
                        *reinterpret_cast<unsigned short *>(stage_out + r * 128 + ((i / 2) ^ (r % 8)) * 16 +
                                                            (i % 2) * 8 + (lane % 4) * 2) = fp8_codes(f.x, f.y, inv);
                    }
                }
                store_out(out, stage_out, tid, 1 + half, nb * (BN / 2), mb * BM + half * (BM / 2), 0, 0, 1);
            } else {
                uint32_t v[32];
                fragment_pairs<FP8, 16>(d, mb * BM + half * (BM / 2) + warp * 16 + lane / 4, M, sa, sb, gate_row, G,
                                        lane, [&](int p, float g0, float g1, float u0, float u1) {
                                            v[p] = bf16x2_bits(act_pair<ACT>(g0, g1, u0, u1));
                                        });
                stage_rows16<16>(stage_out, warp * 16, v, lane);
                // columns 0-63, then 64-127
                store_out(out, stage_out, tid, 1 + half, nb * (BN / 2), mb * BM + half * (BM / 2), 64, 0);
            }
        }
        if (tid == 0) // the last stores must have read shared memory before the CTA leaves
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
#else
    __trap(); // built only for sm_90a; the host checks the device before launching
#endif
}

LF_GATED_KERNELS(coop_body, 128x256)
LF_GATED_KERNEL_ONE(coop_body, gated_gemm_f8e4m3_gelu_tanh_128x256_to_f8e4m3, LF_ACT_GELU_TANH, true, true)
LF_GATED_KERNEL_ONE(coop_body, gated_gemm_f8e4m3_silu_128x256_to_f8e4m3, LF_ACT_SILU, true, true)

} // namespace gated
} // namespace lf

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled;
// Per GPU (a kernel's shared-memory limit is set per device): 0 not checked, 1 can run, -1 cannot.
std::atomic<int> dev_ok[LF_CUDA_MAX_DEVICES];
int sm_count[LF_CUDA_MAX_DEVICES];
char why_not[LF_CUDA_MAX_DEVICES][160];
std::mutex init_lock;

typedef void (*gated_kernel)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const float *, const float *,
                             float *, int, int, int, int, int, int);

// Every gated kernel built, by what it is: its schedule, its operands (bf16, or e4m3 with row-wise
// scales), its output (bf16, or e4m3 in 1 x 128 blocks) and its activation. A launch finds its
// kernel by that tuple; the instantiations (LF_GATED_KERNELS) are the same tuples.
struct gated_entry {
    lf_gated_kernel sched;
    bool fp8_in, fp8_out;
    lf_act act;
    gated_kernel fn;
    int smem;
};
#define LF_GATED_ENTRY(sched, in, out, act, name, space)                                                               \
    {LF_GATED_KERNEL_##sched, in, out, LF_ACT_##act, lf::gated::name, lf::gated::space::SMEM_BYTES}
const gated_entry kernels[] = {
    LF_GATED_ENTRY(COOPERATIVE, false, false, GELU_TANH, gated_gemm_bf16_gelu_tanh_128x256, coop),
    LF_GATED_ENTRY(COOPERATIVE, false, false, SILU, gated_gemm_bf16_silu_128x256, coop),
    LF_GATED_ENTRY(COOPERATIVE, true, false, GELU_TANH, gated_gemm_f8e4m3_gelu_tanh_128x256, coop),
    LF_GATED_ENTRY(COOPERATIVE, true, false, SILU, gated_gemm_f8e4m3_silu_128x256, coop),
    LF_GATED_ENTRY(COOPERATIVE, true, true, GELU_TANH, gated_gemm_f8e4m3_gelu_tanh_128x256_to_f8e4m3, coop),
    LF_GATED_ENTRY(COOPERATIVE, true, true, SILU, gated_gemm_f8e4m3_silu_128x256_to_f8e4m3, coop),
    LF_GATED_ENTRY(PINGPONG, false, false, GELU_TANH, gated_gemm_bf16_gelu_tanh_128x128_pingpong, pp),
    LF_GATED_ENTRY(PINGPONG, false, false, SILU, gated_gemm_bf16_silu_128x128_pingpong, pp),
    LF_GATED_ENTRY(PINGPONG, true, false, GELU_TANH, gated_gemm_f8e4m3_gelu_tanh_128x128_pingpong, pp),
    LF_GATED_ENTRY(PINGPONG, true, false, SILU, gated_gemm_f8e4m3_silu_128x128_pingpong, pp),
    LF_GATED_ENTRY(OFFLOAD, false, false, GELU_TANH, gated_gemm_bf16_gelu_tanh_128x256_offload, offload),
    LF_GATED_ENTRY(OFFLOAD, false, false, SILU, gated_gemm_bf16_silu_128x256_offload, offload),
    LF_GATED_ENTRY(OFFLOAD, true, false, GELU_TANH, gated_gemm_f8e4m3_gelu_tanh_128x256_offload, offload),
    LF_GATED_ENTRY(OFFLOAD, true, false, SILU, gated_gemm_f8e4m3_silu_128x256_offload, offload),
};
#undef LF_GATED_ENTRY

// The kernel for a tuple, or NULL where none was built (lf_cuda_gated_supported and the rule keep
// launches away from those: an e4m3 output is cooperative only).
const gated_entry *find_kernel(lf_gated_kernel sched, bool fp8_in, bool fp8_out, lf_act act)
{
    for (const gated_entry &e : kernels)
        if (e.sched == sched && e.fp8_in == fp8_in && e.fp8_out == fp8_out && e.act == act)
            return &e;
    return nullptr;
}

// Once per GPU: the device can run the kernel, its shared-memory limit is raised, the driver's
// tensor-map encoder is found (once per process).
bool init_device(int dev)
{
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        cudaGetLastError();
        snprintf(why_not[dev], sizeof why_not[dev], "cuda:%d's properties cannot be read", dev);
        return false;
    }
    if (prop.major != 9 || prop.minor != 0) {
        snprintf(why_not[dev], sizeof why_not[dev],
                 "the gated kernel is built for sm_90a (Hopper); this GPU is sm_%d%d", prop.major, prop.minor);
        return false;
    }
    cudaFuncAttributes fa;
    bool loads = cudaFuncGetAttributes(&fa, lf::gated::gated_gemm_bf16_gelu_tanh_128x256) == cudaSuccess;
    for (const gated_entry &e : kernels)
        loads = loads && cudaFuncSetAttribute(e.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, e.smem) == cudaSuccess;
    if (!loads || !lf::gated::gemv_init(dev)) {
        cudaGetLastError();
        snprintf(why_not[dev], sizeof why_not[dev], "the gated kernels cannot be loaded on this GPU");
        return false;
    }
    if (!encode_tiled) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !fn) {
            cudaGetLastError();
            snprintf(why_not[dev], sizeof why_not[dev], "the driver has no cuTensorMapEncodeTiled");
            return false;
        }
        encode_tiled = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }
    sm_count[dev] = prop.multiProcessorCount;
    return true;
}

} // namespace

namespace lf {
namespace gated {

int ready_device()
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= LF_CUDA_MAX_DEVICES) {
        cudaGetLastError();
        snprintf(why_not[0], sizeof why_not[0], "no CUDA device");
        return -1;
    }
    int st = dev_ok[dev].load(std::memory_order_acquire);
    if (st == 0) {
        std::lock_guard<std::mutex> g(init_lock);
        st = dev_ok[dev].load(std::memory_order_relaxed);
        if (st == 0) {
            st = init_device(dev) ? 1 : -1;
            dev_ok[dev].store(st, std::memory_order_release);
        }
    }
    return st > 0 ? dev : -1;
}

int device_sms(int dev)
{
    return sm_count[dev];
}

bool make_map(CUtensorMap *map, const void *p, long long rows, long long cols, long long ld, int box_rows, bool fp8)
{
    const int eb = fp8 ? 1 : 2;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)ld * eb};
    cuuint32_t box[2] = {(cuuint32_t)(128 / eb), (cuuint32_t)box_rows};
    cuuint32_t elem[2] = {1, 1};
    return encode_tiled(map, fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                        const_cast<void *>(p), dims, strides, box, elem,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

} // namespace gated
} // namespace lf

using lf::gated::make_map;
using lf::gated::ready_device;

extern "C" int lf_cuda_gated_supported(const lf_gemm *g, char *why, size_t cap)
{
#define NO(...) return snprintf(why, cap, __VA_ARGS__), 0
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= LF_CUDA_MAX_DEVICES) {
        cudaGetLastError();
        NO("no CUDA device");
    }
    if (ready_device() < 0)
        NO("%s", why_not[dev]);
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    if (g->ep.gate != LF_GATE_PAIRED || (g->ep.act != LF_ACT_GELU_TANH && g->ep.act != LF_ACT_SILU))
        NO("the gated kernel computes gelu_tanh(g) * u or silu(g) * u only (act %s)", lf_act_name(g->ep.act));
    const bool fp8 = A->dtype == LF_DTYPE_F8E4M3, qout = D->dtype == LF_DTYPE_F8E4M3;
    if ((A->dtype != LF_DTYPE_BF16 && !fp8) || B->dtype != A->dtype || (D->dtype != LF_DTYPE_BF16 && !(fp8 && qout)))
        NO("the gated kernel takes bf16 or scaled f8e4m3 operands and writes bf16 (or, from f8e4m3, f8e4m3) "
           "(x %s, w %s, out %s)",
           lf_dtype_name(A->dtype), lf_dtype_name(B->dtype), lf_dtype_name(D->dtype));
    if (g->ep.blockwise)
        NO("the gated kernel takes row-wise scales (one per token, one per weight row), not blocks");
    if (qout && g->ep.gate_group % 128)
        NO("an f8e4m3 h needs gate_group a multiple of 128 (one 1 x 128 scale block per tile row; %lld)",
           (long long)g->ep.gate_group);
    const long long per16 = fp8 ? 16 : 8; // elements in the 16 bytes TMA aligns rows to
    if (g->c.data || g->ep.bias || g->ep.alpha != 1.0f)
        NO("the gated kernel takes no bias, no C input and alpha 1");
    if (g->ep.gate_group % 64)
        NO("gate_group %lld is not a multiple of 64 (the ping-pong kernel's half tile; 128 for the cooperative one)",
           (long long)g->ep.gate_group);
    if (A->cs != 1 || A->rs % per16 || (uintptr_t)A->data % 16 || A->cols % per16 || A->rs < A->cols)
        NO("x must be row-major with rows a multiple of 16 bytes, 16-byte aligned and not overlapping (dim %lld, row "
           "stride %lld)",
           (long long)A->cols, (long long)A->rs);
    if (B->rs != 1 || B->cs % per16 || (uintptr_t)B->data % 16 || B->cs < B->rows)
        NO("the weight must be a (2H, dim) row-major matrix seen transposed, rows a multiple of 16 bytes that do "
           "not overlap");
    if (fp8 && ((uintptr_t)g->ep.b_scale % 8 || g->ep.gate_group % 2))
        NO("the weight's scales must be 8-byte aligned");
    if (D->cs != 1 || (D->rs * (qout ? 1 : 2)) % 16 || (uintptr_t)D->data % 16 || (uintptr_t)g->ep.d_scale % 4)
        NO("out must be row-major with rows a multiple of 16 bytes and 16-byte aligned (row stride %lld)",
           (long long)D->rs);
    if (A->rows > 0x7fffffffLL || B->cols > 0x7fffffffLL || A->cols > 0x7fffffffLL)
        NO("dimensions beyond 2^31");
    return 1;
#undef NO
}

// Which schedule runs g: lf_gated_rule (gated_rule.h, where the measurements behind it are), or
// the one forced by lf_gated_schedule_force or LINFUSE_GATED_SCHEDULE to measure one against the
// other.
static_assert(lf::gated::coop::BM == LF_GATED_COOP_ROWS && lf::gated::coop::BN / 2 == LF_GATED_COOP_COLS &&
                  lf::gated::pp::BN * 2 == lf::gated::coop::BN && lf::gated::offload::BM == lf::gated::coop::BM &&
                  lf::gated::offload::BN == lf::gated::coop::BN,
              "gated_rule.h's tile sizes are the kernels'");
static lf_gated_schedule gated_schedule(const lf_gemm *g, int sms)
{
    return lf_gated_rule(g->a.rows, g->a.cols, g->d.cols, g->ep.gate_group, g->a.dtype == LF_DTYPE_F8E4M3,
                         g->d.dtype == LF_DTYPE_F8E4M3, sms, lf_gated_schedule_forced());
}

// Row-tiles per band of the tile order: 16 (2048 tokens share each weight tile they read while it
// is in L2), or LINFUSE_GATED_BAND (1-1024) to measure another order.
static int gated_band()
{
    static std::atomic<int> band{0};
    int b = band.load(std::memory_order_relaxed);
    if (b == 0) {
        b = (int)lf_setting_int_or(LF_SET_GATED_BAND, 16);
        band.store(b, std::memory_order_relaxed);
    }
    return b;
}

// The one decision (lf_gated_choose): the GEMV for a few tokens, else the Hopper kernel in the
// schedule the rule picks, else the reason neither can run g.
extern "C" void lf_cuda_gated_choose(const lf_gemm *g, lf_gated_choice *c)
{
    memset(c, 0, sizeof *c);
    if (lf_cuda_gemv_tma_supported(g)) { // its tile: 8 or 16 tokens x 64 gates and their 64 ups
        c->kernel = LF_GATED_KERNEL_GEMV;
        c->tile_m = g->a.rows <= 8 ? 8 : 16;
        c->tile_n = 128;
        return;
    }
    if (lf_cuda_gemv_supported(g)) {
        c->kernel = LF_GATED_KERNEL_GEMV;
        return;
    }
    if (!lf_cuda_gated_supported(g, c->why, sizeof c->why)) {
        c->kernel = LF_GATED_KERNEL_FALLBACK;
        return;
    }
    const int dev = ready_device();
    const lf_gated_schedule s = gated_schedule(g, dev < 0 ? 0 : sm_count[dev]);
    const bool pp = s == LF_GATED_PINGPONG;
    c->kernel = pp                        ? LF_GATED_KERNEL_PINGPONG
                : s == LF_GATED_OFFLOAD ? LF_GATED_KERNEL_OFFLOAD
                                        : LF_GATED_KERNEL_COOPERATIVE;
    c->tile_m = pp ? lf::gated::pp::BM : lf::gated::coop::BM;
    c->tile_n = pp ? lf::gated::pp::BN : lf::gated::coop::BN;
}

extern "C" cudaError_t lf_cuda_gated_launch(const lf_gemm *g, lf_gated_kernel sched, cudaStream_t stream)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    const int dev = ready_device();
    if (dev < 0)
        return cudaErrorInvalidDevice;
    const bool pp = sched == LF_GATED_KERNEL_PINGPONG;
    const int BM = pp ? lf::gated::pp::BM : lf::gated::coop::BM, BN = pp ? lf::gated::pp::BN : lf::gated::coop::BN;
    const bool fp8 = A->dtype == LF_DTYPE_F8E4M3, qout = D->dtype == LF_DTYPE_F8E4M3;
    CUtensorMap xm, wm, om;
    if (!make_map(&xm, A->data, A->rows, A->cols, A->rs, lf::gated::x_box_rows((int)A->rows, BM), fp8) ||
        !make_map(&wm, B->data, B->cols, B->rows, B->cs, BN / 2, fp8) ||
        !make_map(&om, D->data, D->rows, D->cols, D->rs, 64, qout))
        return cudaErrorInvalidValue;
    const int M = (int)A->rows, H = (int)D->cols, K = (int)A->cols, G = (int)g->ep.gate_group;
    const long long tiles = (long long)((M + BM - 1) / BM) * (H / (BN / 2));
    // A CTA runs two ping-pong tiles at once: half as many CTAs as tiles are enough.
    const long long busy = pp ? (tiles + 1) / 2 : tiles;
    const int grid = (int)(busy < sm_count[dev] ? busy : sm_count[dev]);
    const int band = gated_band();
    const gated_entry *k = find_kernel(sched, fp8, qout, g->ep.act);
    if (!k)
        return cudaErrorInvalidValue;
    k->fn<<<grid, 384, k->smem, stream>>>(xm, wm, om, g->ep.a_scale, g->ep.b_scale, g->ep.d_scale,
                                          (int)LF_SCALE_LD((long long)M), M, H, K, G, band);
    return cudaGetLastError();
}
