// The gated GEMM for Hopper (sm_90a): m = act(x . Wg^T) * (x . Wu^T) in one kernel, act gelu_tanh
// (GeGLU) or silu (SwiGLU).
// g and u live only in registers: each output tile's accumulators hold 128 gate columns next
// to their 128 up columns, and the epilogue writes act(g) * u, half the columns a GEMM over
// [Wg; Wu] would write and none of them read again.
//
// Shape of the kernel (docs/gpu_notes.md, "The Hopper gated GEMM"; docs/design.md, "The gated GEMM"):
//   - tiles of 128 tokens x 256 product columns (128 gates + their 128 ups), K in steps of 64;
//   - three warpgroups: one producer issues TMA bulk-tensor copies (128-byte swizzle) into a
//     4-stage shared-memory ring, two consumers each run wgmma m64n256k16 on 64 of the rows;
//     full/empty mbarriers with phase parity hand stages back and forth; setmaxnreg gives the
//     consumers the registers (240 each) the producer does not need (24);
//   - persistent: one CTA per SM walks tiles in bands of 16 row-tiles so the weights a band
//     reads stay in L2.
// The weight is the module's [Wg; Wu] in blocks of `gate_group` rows (lf_gate, LF_GATE_PAIRED):
// gate rows j of block b at 2*G*b + j, their partners G rows later. A tile's gate half and up
// half are two TMA copies from those rows, so any G that is a multiple of 128 works, from the
// "(h two)"-style interleave in 128-row blocks to G = H (the weights simply stacked).
//
// Written against the PTX ISA; the pieces are the ones pranjalssh/fast.cu and CUTLASS use
// (cuBLASLt has no epilogue that pairs columns, and CUTLASS's dual GEMM is an SM80 kernel).
// Layer: backend/cuda.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include <atomic>
#include <mutex>

#include "backend/cuda/cuda_impl.h"

namespace lf {
namespace gated {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4;
constexpr int A_BYTES = BM * BK * 2, HALF_B_BYTES = (BN / 2) * BK * 2, B_BYTES = 2 * HALF_B_BYTES;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;         // 48 KiB
constexpr int OUT_BYTES = BM * (BN / 2) * 2;            // the output tile staged for TMA stores: 32 KiB
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + OUT_BYTES + 1024; // + room to align to 1024 B
constexpr int BAND = 16;                               // row-tiles per band of the tile order

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Wait until the phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}" ::"r"(smem_addr(bar)),
                 "r"(parity)
                 : "memory");
}

// One box of a 2-D tensor map into shared memory; completion is counted on bar.
__device__ __forceinline__ void tma_load(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(dst)),
                 "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
                 : "memory");
}

// A box of shared memory out to a 2-D tensor map (rows past the map's end are not written).
__device__ __forceinline__ void tma_store(const CUtensorMap *map, const void *src, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map),
                 "r"(smem_addr(src)), "r"(c0), "r"(c1)
                 : "memory");
}

// A barrier for the 128 threads of one warpgroup (ids 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void wg_barrier(int id)
{
    asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

// A wgmma shared-memory descriptor for a K-major tile written by TMA with the 128-byte
// swizzle: rows of 128 bytes, 8-row groups 1024 bytes apart (stride byte offset), the
// leading byte offset unused in this mode (1), swizzle mode 1 in bits 62-63.
__device__ __forceinline__ uint64_t smem_desc(const void *p)
{
    uint64_t a = smem_addr(p);
    return ((a & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}

// d (64 x 256 per warpgroup, fp32) [+]= A (64 x 16) . B (16 x 256); both operands K-major
// in shared memory. scale_d = 0 overwrites d.
__device__ __forceinline__ void wgmma_256(float (&d)[128], uint64_t da, uint64_t db, int scale_d)
{
#define LF_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                 "+f"(d[i + 6]), "+f"(d[i + 7])
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 0;\n"
        "}\n"
        : LF_D8(0), LF_D8(8), LF_D8(16), LF_D8(24), LF_D8(32), LF_D8(40), LF_D8(48), LF_D8(56), LF_D8(64), LF_D8(72),
          LF_D8(80), LF_D8(88), LF_D8(96), LF_D8(104), LF_D8(112), LF_D8(120)
        : "l"(da), "l"(db), "r"(scale_d));
#undef LF_D8
}

// Keep the compiler from moving accumulator reads or writes across wgmma's asynchrony.
__device__ __forceinline__ void fence_acc(float (&d)[128])
{
#pragma unroll
    for (int i = 0; i < 128; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

// 0.5 x (1 + tanh(u)) with the hardware tanh (one MUFU op; relative error about 2^-11, under
// the 2^-9 of the bf16 result it feeds), so the epilogue's math stays short.
__device__ __forceinline__ float gelu_tanh(float x)
{
    float u = 0.7978845608028654f * x * (1.f + 0.044715f * x * x), t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
    return 0.5f * x * (1.f + t);
}

// x sigmoid(x) with the fast exp and divide (relative error about 2^-21), for SwiGLU.
__device__ __forceinline__ float silu(float x)
{
    return __fdividef(x, 1.f + __expf(-x));
}

template <int ACT> __device__ __forceinline__ float act_of(float x)
{
    return ACT == LF_ACT_SILU ? silu(x) : gelu_tanh(x);
}

// Tile t of the persistent walk -> (row-tile, column-tile of m): row-tiles vary fastest
// within bands of BAND, so CTAs running together share the weight tiles they load.
__device__ __forceinline__ void tile_of(int t, int m_tiles, int n_tiles, int &mb, int &nb)
{
    const int band = t / (BAND * n_tiles), rem = t % (BAND * n_tiles);
    const int first = band * BAND, rows = min(BAND, m_tiles - first);
    mb = first + rem % rows;
    nb = rem / rows;
}
#endif

// x: tensor map over (M, K) bf16 row-major; w: over (2H, K) bf16, [Wg; Wu] in blocks of G
// rows; out: over (M, H) bf16, written in 64 x 64 boxes; act(g) * u with ACT one of
// LF_ACT_GELU_TANH, LF_ACT_SILU. The maps stay in the kernel's parameter space (references to
// its __grid_constant__ parameters), as TMA wants them.
template <int ACT>
__device__ __forceinline__ void gated_body(const CUtensorMap &x, const CUtensorMap &w, const CUtensorMap &out, int M,
                                           int H, int K, int G)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    unsigned char *ring = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    unsigned char *out_tile = ring + STAGES * STAGE_BYTES;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int m_tiles = (M + BM - 1) / BM, n_tiles = H / (BN / 2), tiles = m_tiles * n_tiles;
    const int kb = (K + BK - 1) / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);  // the producer's expect_tx arrival (+ the copies' bytes)
            mbar_init(&empty[s], 2); // one arrival per consumer warpgroup
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) { // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (tid == 0) {
            int stage = 0, phase = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                int mb, nb;
                tile_of(t, m_tiles, n_tiles, mb, nb);
                const int j0 = nb * (BN / 2), gate_row = j0 / G * 2 * G + j0 % G;
                for (int k = 0; k < kb; k++) {
                    mbar_wait(&empty[stage], phase ^ 1);
                    unsigned char *a = ring + stage * STAGE_BYTES, *b = a + A_BYTES;
                    mbar_expect_tx(&full[stage], STAGE_BYTES);
                    tma_load(a, &x, &full[stage], k * BK, mb * BM);
                    tma_load(b, &w, &full[stage], k * BK, gate_row);
                    tma_load(b + HALF_B_BYTES, &w, &full[stage], k * BK, gate_row + G);
                    if (++stage == STAGES)
                        stage = 0, phase ^= 1;
                }
            }
        }
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
            tile_of(t, m_tiles, n_tiles, mb, nb);
            int prev = -1;
            for (int k = 0; k < kb; k++) {
                mbar_wait(&full[stage], phase);
                const unsigned char *a = ring + stage * STAGE_BYTES, *b = a + A_BYTES;
                const uint64_t da = smem_desc(a + half * (BM / 2) * BK * 2), db = smem_desc(b);
                fence_acc(d);
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
                for (int kk = 0; kk < BK / 16; kk++) // 16 k = 32 bytes = 2 descriptor units
                    wgmma_256(d, da + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                // keep this step's group in flight; the previous step's is done, so its
                // stage goes back to the producer
                asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
                if (prev >= 0 && tid == 0)
                    mbar_arrive(&empty[prev]);
                prev = stage;
                if (++stage == STAGES)
                    stage = 0, phase ^= 1;
            }
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            fence_acc(d);
            if (prev >= 0 && tid == 0)
                mbar_arrive(&empty[prev]);
            // Epilogue. wgmma's D fragment: register 4i + 2h + e holds row 16*warp + lane/4 + 8h,
            // column 8i + 2*(lane%4) + e; columns 0-127 are gates, 128-255 their ups, so gate
            // register r pairs with up register r + 64 in the same thread. The results go to
            // this warpgroup's 64 x 128 staging tile (two 64 x 64 boxes in the 128-byte swizzle,
            // so the 8 rows a warp writes at once fall in 8 different bank groups), and one
            // thread hands them to the TMA engine: the consumers go back to their tensor cores
            // without waiting for global memory.
            unsigned char *stage_out = out_tile + half * (OUT_BYTES / 2);
            if (tid == 0) // the previous tile's stores have finished reading the staging tile
                asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            wg_barrier(1 + half);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = warp * 16 + lane / 4 + 8 * h; // row within this warpgroup's 64
#pragma unroll
                for (int i = 0; i < 16; i++) {
                    const int q = 4 * i + 2 * h;
                    __nv_bfloat162 v =
                        __floats2bfloat162_rn(act_of<ACT>(d[q]) * d[q + 64], act_of<ACT>(d[q + 1]) * d[q + 65]);
                    const int box = i / 8, chunk = (i % 8) ^ (r % 8); // 16-byte chunk after the swizzle
                    *reinterpret_cast<__nv_bfloat162 *>(stage_out + box * 8192 + r * 128 + chunk * 16 +
                                                        (lane % 4) * 4) = v;
                }
            }
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); // visible to the TMA engine
            wg_barrier(1 + half);
            if (tid == 0) {
                const int row = mb * BM + half * (BM / 2), col = nb * (BN / 2);
                tma_store(&out, stage_out, col, row);
                tma_store(&out, stage_out + 8192, col + 64, row);
                asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            }
        }
        if (tid == 0) // the last stores must have read shared memory before the CTA leaves
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
#else
    __trap(); // built only for sm_90a; the host checks the device before launching
#endif
}

// One kernel per activation, each named for what it computes (the names traces show).
__global__ void __launch_bounds__(384, 1)
    gated_gemm_bf16_gelu_tanh_128x256(const __grid_constant__ CUtensorMap x, const __grid_constant__ CUtensorMap w,
                                      const __grid_constant__ CUtensorMap out, int M, int H, int K, int G)
{
    gated_body<LF_ACT_GELU_TANH>(x, w, out, M, H, K, G);
}

__global__ void __launch_bounds__(384, 1)
    gated_gemm_bf16_silu_128x256(const __grid_constant__ CUtensorMap x, const __grid_constant__ CUtensorMap w,
                                 const __grid_constant__ CUtensorMap out, int M, int H, int K, int G)
{
    gated_body<LF_ACT_SILU>(x, w, out, M, H, K, G);
}

} // namespace gated
} // namespace lf

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled;
// Per GPU (a kernel's shared-memory limit is set per device): 0 not checked, 1 can run, -1 cannot.
std::atomic<int> dev_ok[LF_CUDA_MAX_DEVICES];
int sm_count[LF_CUDA_MAX_DEVICES];
char why_not[LF_CUDA_MAX_DEVICES][160];
std::mutex init_lock;

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
    if (cudaFuncGetAttributes(&fa, lf::gated::gated_gemm_bf16_gelu_tanh_128x256) != cudaSuccess ||
        cudaFuncSetAttribute(lf::gated::gated_gemm_bf16_gelu_tanh_128x256,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, lf::gated::SMEM_BYTES) != cudaSuccess ||
        cudaFuncSetAttribute(lf::gated::gated_gemm_bf16_silu_128x256, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             lf::gated::SMEM_BYTES) != cudaSuccess) {
        cudaGetLastError();
        snprintf(why_not[dev], sizeof why_not[dev], "the gated kernel cannot be loaded on this GPU");
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

// The calling thread's GPU, checked once; -1 (why in that GPU's why_not) when it cannot run.
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

// A (rows, cols) bf16 row-major matrix with row stride ld elements, in boxes of box_rows x 64
// columns with the 128-byte swizzle; reads past the end give zeros, writes there are dropped.
bool make_map(CUtensorMap *map, const void *p, long long rows, long long cols, long long ld, int box_rows)
{
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
    cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
    cuuint32_t elem[2] = {1, 1};
    return encode_tiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(p), dims, strides, box, elem,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

} // namespace

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
    if (A->dtype != LF_DTYPE_BF16 || B->dtype != LF_DTYPE_BF16 || D->dtype != LF_DTYPE_BF16)
        NO("the gated kernel is bf16 only (x %s, w %s, out %s)", lf_dtype_name(A->dtype), lf_dtype_name(B->dtype),
           lf_dtype_name(D->dtype));
    if (g->c.data || g->ep.bias || g->ep.alpha != 1.0f)
        NO("the gated kernel takes no bias, no C input and alpha 1");
    if (g->ep.gate_group % 128)
        NO("gate_group %lld is not a multiple of 128 (the kernel's half tile)", (long long)g->ep.gate_group);
    if (A->cs != 1 || A->rs % 8 || (uintptr_t)A->data % 16 || A->cols % 8)
        NO("x must be row-major with rows a multiple of 8 elements and 16-byte aligned (dim %lld, row stride %lld)",
           (long long)A->cols, (long long)A->rs);
    if (B->rs != 1 || B->cs % 8 || (uintptr_t)B->data % 16)
        NO("the weight must be a (2H, dim) row-major matrix seen transposed, rows a multiple of 8 elements");
    if (D->cs != 1 || D->rs % 8 || (uintptr_t)D->data % 16)
        NO("out must be row-major with rows a multiple of 8 elements and 16-byte aligned (row stride %lld)",
           (long long)D->rs);
    if (A->rows > 0x7fffffffLL || B->cols > 0x7fffffffLL || A->cols > 0x7fffffffLL)
        NO("dimensions beyond 2^31");
    return 1;
#undef NO
}

extern "C" cudaError_t lf_cuda_gated_launch(const lf_gemm *g, cudaStream_t stream)
{
    const lf_matrix *A = &g->a, *B = &g->b, *D = &g->d;
    CUtensorMap xm, wm, om;
    if (!make_map(&xm, A->data, A->rows, A->cols, A->rs, lf::gated::BM) ||
        !make_map(&wm, B->data, B->cols, B->rows, B->cs, lf::gated::BN / 2) ||
        !make_map(&om, D->data, D->rows, D->cols, D->rs, lf::gated::BM / 2))
        return cudaErrorInvalidValue;
    const int M = (int)A->rows, H = (int)D->cols, K = (int)A->cols, G = (int)g->ep.gate_group;
    const long long tiles = (long long)((M + lf::gated::BM - 1) / lf::gated::BM) * (H / (lf::gated::BN / 2));
    int dev = ready_device();
    if (dev < 0)
        return cudaErrorInvalidDevice;
    const int grid = (int)(tiles < sm_count[dev] ? tiles : sm_count[dev]);
    if (g->ep.act == LF_ACT_SILU)
        lf::gated::gated_gemm_bf16_silu_128x256<<<grid, 384, lf::gated::SMEM_BYTES, stream>>>(xm, wm, om, M, H, K, G);
    else
        lf::gated::gated_gemm_bf16_gelu_tanh_128x256<<<grid, 384, lf::gated::SMEM_BYTES, stream>>>(xm, wm, om, M, H,
                                                                                                 K, G);
    return cudaGetLastError();
}
