// The decode MLP's memory-bound kernels, variants timed side by side on one GPU (issue 36; the
// runs are in bench/RESULTS.md, "decode GEMV lab"). Llama-3-8B sizes (4096 -> 14336, bf16), four
// layers' weights rotated so every launch streams from memory, CUDA events around 24 launches,
// five repeats, median. What it holds:
//   - readall: the read ceiling, every byte once (ld.global.cs, or no_allocate with L2::256B, or
//     an evict-first policy);
//   - gated<WARPS, U, LOAD, ORDER, TRIGGER, PFD>: the gated GEMV of src/backend/cuda/gemv.cu with
//     its knobs: warps per block, 32-k chunks a warp has in flight, the load (0 ld.global.cs, 1
//     no_allocate + L2::256B, 2 that with an evict-first policy), the warps' k order (0 strided as
//     in gemv.cu, 1 a contiguous range each), a programmatic-dependent-launch trigger, and PFD
//     steps of cp.async.bulk.prefetch.L2 ahead;
//   - down<WARPS, U, LOAD, ORDER, PDL, PFD>: the same tensor-core GEMV for the down projection,
//     optionally launched as a PDL secondary (its first weights loaded before griddepcontrol.wait);
//   - gemv_bulk: a GEMV fed by 1-D cp.async.bulk copies into a shared-memory ring;
//   - the MLP pair (gated, then cuBLAS's or our down) eager and captured in a CUDA graph.
// Each variant's output is checked against today's kernel (gated) or cuBLAS (down): "WRONG" marks
// a relative error over 1e-2. The variant lists in main() are the last run's; earlier runs' lists
// (RESULTS) are the same templates with other arguments.
// Built on demand: cmake --build build --target decode_lab (sm_90a: the bulk copies).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                          \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

constexpr int MAXT = 16;

__device__ __forceinline__ void mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int LOAD> __device__ __forceinline__ uint4 wload(const void *p, uint64_t pol)
{
    uint4 v;
    if constexpr (LOAD == 0) {
        v = __ldcs(reinterpret_cast<const uint4 *>(p));
    } else if constexpr (LOAD == 1) {
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p));
    } else {
        asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p), "l"(pol));
    }
    return v;
}

__device__ __forceinline__ uint64_t evict_first_policy()
{
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

__device__ __forceinline__ float silu(float x)
{
    return x / (1.f + __expf(-x));
}

// ORDER 0: warp w takes chunks w, w + WARPS, ... (today's); 1: each warp a contiguous K range.
template <int WARPS, int U, int LOAD, int ORDER, bool TRIGGER, int PFD = 0>
__global__ void __launch_bounds__(WARPS * 32)
    gated(const __nv_bfloat16 *__restrict__ x, long long ldx, const __nv_bfloat16 *__restrict__ w,
          __nv_bfloat16 *__restrict__ out, long long ldo, int M, int K, int H, int G)
{
    if constexpr (TRIGGER)
        asm volatile("griddepcontrol.launch_dependents;");
    __shared__ float part[WARPS - 1][8][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    for (int blk = blockIdx.x; blk < (H + 7) / 8; blk += gridDim.x) {
    if (blk != (int)blockIdx.x)
        __syncthreads();
    const int j0 = blk * 8;
    const int j = j0 + g < H ? j0 + g : H - 1;
    const long long gr = (long long)(j / G) * 2 * G + j % G;
    const __nv_bfloat16 *wg = w + gr * K + t * 8, *wu = w + (gr + G) * K + t * 8;
    const __nv_bfloat16 *x0 = x + (long long)g * ldx + t * 8, *x1 = x + (long long)(g + 8) * ldx + t * 8;
    const bool row0 = g < M, row1 = g + 8 < M;
    float cg[4] = {0.f, 0.f, 0.f, 0.f}, cu[4] = {0.f, 0.f, 0.f, 0.f};
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const uint64_t pol = LOAD == 2 ? evict_first_policy() : 0;
    const int chunks = (K + 31) / 32, per = (chunks + WARPS - 1) / WARPS;
    const int steps = ORDER == 0 ? (chunks + WARPS * U - 1) / (WARPS * U) : (per + U - 1) / U;
    // L2 prefetch (ORDER 1): lane l < 16 prefetches its row (gates 0-7, ups 8-15) PFD steps ahead
    const int pj = j0 + (lane & 7) < H ? j0 + (lane & 7) : H - 1;
    const __nv_bfloat16 *prow = w + ((long long)(pj / G) * 2 * G + pj % G + (lane >= 8 ? G : 0)) * K;
    auto pf = [&](int ss) {
        const int c0 = warp * per + ss * U, n = min(U, per - ss * U);
        if (n > 0 && c0 * 32 < K) {
            const int bytes = min(n * 32, K - c0 * 32) * 2;
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(prow + c0 * 32), "r"(bytes) : "memory");
        }
    };
    if (PFD > 0 && lane < 16)
        for (int ss = 0; ss < PFD; ss++)
            pf(ss);
    for (int s = 0; s < steps; s++) {
        if (PFD > 0 && lane < 16)
            pf(s + PFD);
        uint4 vg[U], vu[U], va[U], vb[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = ORDER == 0 ? warp + WARPS * (u + U * s) : warp * per + s * U + u;
            const bool cin = ORDER == 0 ? true : s * U + u < per;
            const int k = c * 32;
            const bool in = cin && k + t * 8 < K;
            vg[u] = in ? wload<LOAD>(wg + k, pol) : zero;
            vu[u] = in ? wload<LOAD>(wu + k, pol) : zero;
            va[u] = in && row0 ? __ldg(reinterpret_cast<const uint4 *>(x0 + k)) : zero;
            vb[u] = in && row1 ? __ldg(reinterpret_cast<const uint4 *>(x1 + k)) : zero;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            mma(cg, va[u].x, vb[u].x, va[u].y, vb[u].y, vg[u].x, vg[u].y);
            mma(cg, va[u].z, vb[u].z, va[u].w, vb[u].w, vg[u].z, vg[u].w);
            mma(cu, va[u].x, vb[u].x, va[u].y, vb[u].y, vu[u].x, vu[u].y);
            mma(cu, va[u].z, vb[u].z, va[u].w, vb[u].w, vu[u].z, vu[u].w);
        }
    }
    if (warp > 0)
#pragma unroll
        for (int i = 0; i < 4; i++)
            part[warp - 1][i][lane] = cg[i], part[warp - 1][4 + i][lane] = cu[i];
    __syncthreads();
    if (warp == 0) {
#pragma unroll
    for (int p = 0; p < WARPS - 1; p++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            cg[i] += part[p][i][lane], cu[i] += part[p][4 + i][lane];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int m = g + (i >= 2 ? 8 : 0), col = j0 + 2 * t + (i & 1);
        if (m < M && col < H)
            out[m * ldo + col] = __float2bfloat16_rn(silu(cg[i]) * cu[i]);
    }
    }
    }
}

// out[m][n] = x[m] . w[n] (w: N rows of K). Block: 8 outputs, WARPS split K (ORDER as above).
// PDL: the first step's weights are loaded before waiting for the previous kernel (x is its output).
template <int WARPS, int U, int LOAD, int ORDER, bool PDL, int PFD = 0>
__global__ void __launch_bounds__(WARPS * 32)
    down(const __nv_bfloat16 *__restrict__ x, long long ldx, const __nv_bfloat16 *__restrict__ w,
         __nv_bfloat16 *__restrict__ out, long long ldo, int M, int K, int N)
{
    __shared__ float part[WARPS - 1][4][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    for (int blk = blockIdx.x; blk < (N + 7) / 8; blk += gridDim.x) {
    if (blk != (int)blockIdx.x)
        __syncthreads();
    const int j0 = blk * 8;
    const int j = j0 + g < N ? j0 + g : N - 1;
    const __nv_bfloat16 *wr = w + (long long)j * K + t * 8;
    const __nv_bfloat16 *x0 = x + (long long)g * ldx + t * 8, *x1 = x + (long long)(g + 8) * ldx + t * 8;
    const bool row0 = g < M, row1 = g + 8 < M;
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const uint64_t pol = LOAD == 2 ? evict_first_policy() : 0;
    const int chunks = (K + 31) / 32, per = (chunks + WARPS - 1) / WARPS;
    const int steps = ORDER == 0 ? (chunks + WARPS * U - 1) / (WARPS * U) : (per + U - 1) / U;
    uint4 vw[U], va[U], vb[U];
    auto chunk_of = [&](int s, int u, bool &cin) {
        const int c = ORDER == 0 ? warp + WARPS * (u + U * s) : warp * per + s * U + u;
        cin = (ORDER == 0 ? true : s * U + u < per) && c * 32 + t * 8 < K;
        return c * 32;
    };
    const int pj = j0 + (lane & 7) < N ? j0 + (lane & 7) : N - 1;
    const __nv_bfloat16 *prow = w + (long long)pj * K;
    auto pf = [&](int ss) {
        const int c0 = warp * per + ss * U, n = min(U, per - ss * U);
        if (n > 0 && c0 * 32 < K) {
            const int bytes = min(n * 32, K - c0 * 32) * 2;
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(prow + c0 * 32), "r"(bytes) : "memory");
        }
    };
    if (PFD > 0 && lane < 8)
        for (int ss = 0; ss <= PFD; ss++)
            pf(ss);
#pragma unroll
    for (int u = 0; u < U; u++) {
        bool in;
        const int k = chunk_of(0, u, in);
        vw[u] = in && steps > 0 ? wload<LOAD>(wr + k, pol) : zero;
    }
    if (PDL && blk == (int)blockIdx.x)
        asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int s = 0; s < steps; s++) {
        if (PFD > 0 && lane < 8)
            pf(s + PFD + 1);
#pragma unroll
        for (int u = 0; u < U; u++) {
            bool in;
            const int k = chunk_of(s, u, in);
            if (s > 0)
                vw[u] = in ? wload<LOAD>(wr + k, pol) : zero;
            va[u] = in && row0 ? *reinterpret_cast<const uint4 *>(x0 + k) : zero;
            vb[u] = in && row1 ? *reinterpret_cast<const uint4 *>(x1 + k) : zero;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            mma(c, va[u].x, vb[u].x, va[u].y, vb[u].y, vw[u].x, vw[u].y);
            mma(c, va[u].z, vb[u].z, va[u].w, vb[u].w, vw[u].z, vw[u].w);
        }
    }
    if (warp > 0)
#pragma unroll
        for (int i = 0; i < 4; i++)
            part[warp - 1][i][lane] = c[i];
    __syncthreads();
    if (warp == 0) {
#pragma unroll
    for (int p = 0; p < WARPS - 1; p++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            c[i] += part[p][i][lane];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int m = g + (i >= 2 ? 8 : 0), col = j0 + 2 * t + (i & 1);
        if (m < M && col < N)
            out[m * ldo + col] = __float2bfloat16_rn(c[i]);
    }
    }
    }
}

// GEMV fed by bulk copies: each stage brings CH elements of each of the block's weight rows (and of
// x's M rows) into shared memory with cp.async.bulk (1-D, contiguous, counted on an mbarrier), so
// memory sees CH * 2-byte requests instead of 64-byte pieces.
__device__ __forceinline__ uint32_t saddr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void b_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(saddr(bar)), "r"(count));
}
__device__ __forceinline__ void b_expect(uint64_t *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void b_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(saddr(bar)) : "memory");
}
__device__ __forceinline__ void b_wait(uint64_t *bar, unsigned parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}" ::"r"(saddr(bar)),
                 "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void b_copy(void *dst, const void *src, unsigned bytes, uint64_t *bar, uint64_t pol)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(saddr(dst)),
                 "l"(src), "r"(bytes), "r"(saddr(bar)), "l"(pol)
                 : "memory");
}

// GATED: 8 outputs' gate rows and up rows (16), act(g) * u out; else 8 outputs' rows, x . w out.
template <bool GATED, int STAGES, int CH, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    gemv_bulk(const __nv_bfloat16 *__restrict__ x, long long ldx, const __nv_bfloat16 *__restrict__ w,
              __nv_bfloat16 *__restrict__ out, long long ldo, int M, int K, int N, int G)
{
    constexpr int R = GATED ? 16 : 8, PITCH = CH * 2 + 64; // bytes a row takes in a stage (padded: no conflicts)
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    __shared__ float part[WARPS - 1][8][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int rows = R + M, stage_bytes = rows * PITCH;
    const int j0 = blockIdx.x * 8, steps = (K + CH - 1) / CH;
    uint64_t pol = 0;
    if (threadIdx.x == 0) {
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
        for (int s = 0; s < STAGES; s++)
            b_init(&full[s], 1), b_init(&empty[s], WARPS);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    // row r of a stage: weight row for r < R, x row r - R after
    auto src_row = [&](int r) -> const __nv_bfloat16 * {
        if (r >= R)
            return x + (long long)(r - R) * ldx;
        int j = j0 + (r & 7);
        j = j < N ? j : N - 1;
        const long long wr = GATED ? (long long)(j / G) * 2 * G + j % G + (r >= 8 ? G : 0) : j;
        return w + wr * K;
    };
    auto issue = [&](int step) { // thread 0
        const int s = step % STAGES, k0 = step * CH, n = min(CH, K - k0);
        b_expect(&full[s], (unsigned)(rows * n * 2));
        for (int r = 0; r < rows; r++)
            b_copy(smem + s * stage_bytes + r * PITCH, src_row(r) + k0, (unsigned)(n * 2), &full[s], pol);
    };
    if (threadIdx.x == 0)
        for (int i = 0; i < STAGES && i < steps; i++)
            issue(i);
    float cg[4] = {0.f, 0.f, 0.f, 0.f}, cu[4] = {0.f, 0.f, 0.f, 0.f};
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const bool row0 = g < M, row1 = g + 8 < M;
    constexpr int WK = CH / WARPS; // k a warp takes of a stage
    for (int i = 0; i < steps; i++) {
        const int s = i % STAGES, k0 = i * CH;
        b_wait(&full[s], (i / STAGES) & 1);
        const unsigned char *st = smem + s * stage_bytes;
#pragma unroll
        for (int c = 0; c < WK / 32; c++) {
            const int kk = warp * WK + c * 32 + t * 8; // within the stage
            const bool in = k0 + kk < K;
            const uint4 vg = in ? *reinterpret_cast<const uint4 *>(st + g * PITCH + kk * 2) : zero;
            const uint4 va = in && row0 ? *reinterpret_cast<const uint4 *>(st + (R + g) * PITCH + kk * 2) : zero;
            const uint4 vb = in && row1 ? *reinterpret_cast<const uint4 *>(st + (R + g + 8) * PITCH + kk * 2) : zero;
            mma(cg, va.x, vb.x, va.y, vb.y, vg.x, vg.y);
            mma(cg, va.z, vb.z, va.w, vb.w, vg.z, vg.w);
            if constexpr (GATED) {
                const uint4 vu = in ? *reinterpret_cast<const uint4 *>(st + (8 + g) * PITCH + kk * 2) : zero;
                mma(cu, va.x, vb.x, va.y, vb.y, vu.x, vu.y);
                mma(cu, va.z, vb.z, va.w, vb.w, vu.z, vu.w);
            }
        }
        __syncwarp();
        if (lane == 0)
            b_arrive(&empty[s]);
        if (threadIdx.x == 0 && i + STAGES < steps) {
            b_wait(&empty[s], (i / STAGES) & 1);
            issue(i + STAGES);
        }
    }
    if (warp > 0)
#pragma unroll
        for (int i = 0; i < 4; i++)
            part[warp - 1][i][lane] = cg[i], part[warp - 1][4 + i][lane] = cu[i];
    __syncthreads();
    if (warp > 0)
        return;
#pragma unroll
    for (int p = 0; p < WARPS - 1; p++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            cg[i] += part[p][i][lane], cu[i] += part[p][4 + i][lane];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int m = g + (i >= 2 ? 8 : 0), col = j0 + 2 * t + (i & 1);
        if (m < M && col < N)
            out[m * ldo + col] = __float2bfloat16_rn(GATED ? silu(cg[i]) * cu[i] : cg[i]);
    }
}

// The read ceiling: every byte once, 16 B per load, UNROLL loads in flight per thread.
template <int UNROLL, int LOAD> __global__ void readall(const uint4 *p, long long n, float *sink)
{
    const uint64_t pol = LOAD == 2 ? evict_first_policy() : 0;
    uint32_t acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride * UNROLL) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            v[u] = i + u * stride < n ? wload<LOAD>(p + i + u * stride, pol) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u)
        sink[0] = 1.f;
}

__global__ void fill(__nv_bfloat16 *p, long long n, unsigned seed, float scale)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
        p[i] = __float2bfloat16((h % 20001) / 10000.f - 1.f) * __float2bfloat16(scale);
    }
}

constexpr int L = 4; // layers' weights, rotated so each launch streams from memory
constexpr int KD = 4096, HD = 14336;
__nv_bfloat16 *wgu[L], *wd[L], *xin, *hbuf, *yout;
cudaStream_t st;
cublasHandle_t cb;

typedef void (*gated_fn)(const __nv_bfloat16 *, long long, const __nv_bfloat16 *, __nv_bfloat16 *, long long, int,
                         int, int, int);
typedef void (*down_fn)(const __nv_bfloat16 *, long long, const __nv_bfloat16 *, __nv_bfloat16 *, long long, int,
                        int, int);

struct GV {
    const char *name;
    gated_fn fn;
    int warps;
    int persist; // 0: a block per 8 outputs; 1: the resident blocks, equal shares
};
int sms;
// persist: as many blocks as fit at once, or fewer so each takes the same number of groups
unsigned grid_for(const void *fn, int warps, int groups, int persist)
{
    if (!persist)
        return groups;
    int per = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, fn, warps * 32, 0));
    const int slots = per * sms, rounds = (groups + slots - 1) / slots;
    return (unsigned)((groups + rounds - 1) / rounds);
}
struct DV {
    const char *name;
    down_fn fn;
    int warps;
    bool pdl;
    int persist;
};

void launch_gated(const GV &v, int l, int M, int G)
{
    v.fn<<<grid_for((const void *)v.fn, v.warps, (HD + 7) / 8, v.persist), v.warps * 32, 0, st>>>(xin, KD, wgu[l], hbuf, HD, M, KD, HD, G);
}
void launch_down(const DV &v, int l, int M, bool pdl)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid_for((const void *)v.fn, v.warps, (KD + 7) / 8, v.persist));
    cfg.blockDim = dim3(v.warps * 32);
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, v.fn, (const __nv_bfloat16 *)hbuf, (long long)HD, (const __nv_bfloat16 *)wd[l], yout,
                          (long long)KD, M, HD, KD));
}
void cublas_down(int l, int M)
{
    const float one = 1.f, zero = 0.f;
    // y^T (KD x M, col-major) = Wd (KD x HD row-major = HD x KD col-major)^T . h^T (HD x M col-major)
    if (cublasGemmEx(cb, CUBLAS_OP_T, CUBLAS_OP_N, KD, M, HD, &one, wd[l], CUDA_R_16BF, HD, hbuf, CUDA_R_16BF, HD,
                     &zero, yout, CUDA_R_16BF, KD, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublas failed\n");
        exit(1);
    }
}

typedef void (*bulk_fn)(const __nv_bfloat16 *, long long, const __nv_bfloat16 *, __nv_bfloat16 *, long long, int,
                        int, int, int);
struct BV {
    const char *name;
    bulk_fn fn;
    bool gated;
    int stages, ch;
    int warps;
};
void launch_bulk(const BV &v, int l, int M, int G)
{
    const int R = v.gated ? 16 : 8;
    const size_t smem = (size_t)v.stages * (R + M) * (v.ch * 2 + 64);
    CK(cudaFuncSetAttribute((const void *)v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (v.gated)
        v.fn<<<(HD + 7) / 8, v.warps * 32, smem, st>>>(xin, KD, wgu[l], hbuf, HD, M, KD, HD, G);
    else
        v.fn<<<(KD + 7) / 8, v.warps * 32, smem, st>>>(hbuf, HD, wd[l], yout, KD, M, HD, KD, 1);
}

template <class F> std::vector<float> timeit(F f, int iters = 24, int reps = 5)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 8; i++)
        f(i);
    std::vector<float> r;
    for (int rep = 0; rep < reps; rep++) {
        CK(cudaEventRecord(a, st));
        for (int i = 0; i < iters; i++)
            f(i);
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        r.push_back(ms * 1e3f / iters);
    }
    CK(cudaGetLastError());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return r;
}
float median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
void show(const char *what, const std::vector<float> &r, double bytes)
{
    float m = median(r);
    printf("%-44s median %7.2f us  %6.0f GB/s  runs", what, m, bytes / (m * 1e-6) / 1e9);
    for (float x : r)
        printf(" %.2f", x);
    printf("\n");
}

std::vector<float> host(const __nv_bfloat16 *d, size_t n)
{
    std::vector<__nv_bfloat16> h(n);
    CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++)
        f[i] = __bfloat162float(h[i]);
    return f;
}
double maxrel(const std::vector<float> &a, const std::vector<float> &b)
{
    double m = 0, s = 0;
    for (size_t i = 0; i < a.size(); i++)
        s = std::max(s, (double)fabsf(b[i]));
    for (size_t i = 0; i < a.size(); i++)
        m = std::max(m, (double)fabsf(a[i] - b[i]) / (s > 0 ? s : 1));
    return m;
}

int main()
{
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cublasCreate(&cb);
    cublasSetStream(cb, st);
    for (int l = 0; l < L; l++) {
        CK(cudaMalloc(&wgu[l], 2ull * HD * KD * 2));
        CK(cudaMalloc(&wd[l], 1ull * KD * HD * 2));
        fill<<<1024, 256>>>(wgu[l], 2ll * HD * KD, 17 + l, 0.05f);
        fill<<<1024, 256>>>(wd[l], 1ll * KD * HD, 91 + l, 0.02f);
    }
    CK(cudaMalloc(&xin, MAXT * KD * 2));
    CK(cudaMalloc(&hbuf, MAXT * HD * 2));
    CK(cudaMalloc(&yout, MAXT * KD * 2));
    fill<<<64, 256>>>(xin, MAXT * KD, 5, 1.f);
    CK(cudaDeviceSynchronize());
    float *sink;
    CK(cudaMalloc(&sink, 4));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const double gu_bytes = 2.0 * HD * KD * 2, d_bytes = 1.0 * KD * HD * 2;

    // read ceiling over the gated weights of one layer (rotating)
    {
        const long long n = (long long)(gu_bytes / 16);
        show("read 8 x 256 thr, unroll 4, ldcs", timeit([&](int i) {
                 readall<4, 0><<<sms * 8, 256, 0, st>>>((const uint4 *)wgu[i % L], n, sink);
             }),
             gu_bytes);
        show("read 8 x 256 thr, unroll 8, ldcs", timeit([&](int i) {
                 readall<8, 0><<<sms * 8, 256, 0, st>>>((const uint4 *)wgu[i % L], n, sink);
             }),
             gu_bytes);
        show("read 8 x 256 thr, unroll 8, no_alloc 256B", timeit([&](int i) {
                 readall<8, 1><<<sms * 8, 256, 0, st>>>((const uint4 *)wgu[i % L], n, sink);
             }),
             gu_bytes);
        show("read 8 x 256 thr, unroll 8, evict_first", timeit([&](int i) {
                 readall<8, 2><<<sms * 8, 256, 0, st>>>((const uint4 *)wgu[i % L], n, sink);
             }),
             gu_bytes);
        show("read 4 x 512 thr, unroll 16, no_alloc", timeit([&](int i) {
                 readall<16, 1><<<sms * 4, 512, 0, st>>>((const uint4 *)wgu[i % L], n, sink);
             }),
             gu_bytes);
    }

    const GV gv[] = {
        {"gated w4 u4 ldcs strided (today)", gated<4, 4, 0, 0, false>, 4, 0},
        {"gated w4 u4 no_alloc strided", gated<4, 4, 1, 0, false>, 4, 0},
        {"gated w4 u4 evict_first strided", gated<4, 4, 2, 0, false>, 4, 0},
        {"gated w4 u8 no_alloc strided", gated<4, 8, 1, 0, false>, 4, 0},
        {"gated w4 u8 no_alloc contiguous", gated<4, 8, 1, 1, false>, 4, 0},
        {"gated w4 u16 no_alloc contiguous", gated<4, 16, 1, 1, false>, 4, 0},
        {"gated w4 u4 ldcs strided +trigger", gated<4, 4, 0, 0, true>, 4, 0},
        {"gated w4 u4 no_alloc strided +trigger", gated<4, 4, 1, 0, true>, 4, 0},
        {"gated w4 u16 no_alloc contiguous +trigger", gated<4, 16, 1, 1, true>, 4, 0},
    };
    const DV dv[] = {
        {"down w4 u8 no_alloc strided", down<4, 8, 1, 0, false>, 4, false, 0},
        {"down w4 u8 no_alloc strided PDL", down<4, 8, 1, 0, true>, 4, true, 0},
    };
    const BV bg[] = {
        {"bulk gated s2 ch1024 w4", gemv_bulk<true, 2, 1024, 4>, true, 2, 1024, 4},
    };
    const BV bd[] = {
        {"bulk down s2 ch512 w4", gemv_bulk<false, 2, 512, 4>, false, 2, 512, 4},
    };
    const int Ms[] = {1, 16};
    for (int G : {128}) {
        for (int M : Ms) {
            printf("\n== M %d, gate group %d ==\n", M, G);
            launch_gated(gv[0], 0, M, G);
            CK(cudaStreamSynchronize(st));
            std::vector<float> ref = host(hbuf, (size_t)M * HD);
            for (const GV &v : gv) {
                CK(cudaMemsetAsync(hbuf, 0xff, MAXT * HD * 2, st));
                launch_gated(v, 0, M, G);
                CK(cudaStreamSynchronize(st));
                double e = maxrel(host(hbuf, (size_t)M * HD), ref);
                char nm[96];
                snprintf(nm, sizeof nm, "%s%s", v.name, e > 1e-2 ? " WRONG" : "");
                show(nm, timeit([&](int i) { launch_gated(v, i % L, M, G); }), gu_bytes);
            }
            for (const BV &v : bg) {
                CK(cudaMemsetAsync(hbuf, 0xff, MAXT * HD * 2, st));
                launch_bulk(v, 0, M, G);
                CK(cudaStreamSynchronize(st));
                double e = maxrel(host(hbuf, (size_t)M * HD), ref);
                char nm[96];
                snprintf(nm, sizeof nm, "%s%s", v.name, e > 1e-2 ? " WRONG" : "");
                show(nm, timeit([&](int i) { launch_bulk(v, i % L, M, G); }), gu_bytes);
            }
        }
    }
    for (int M : Ms) {
        printf("\n== down, M %d ==\n", M);
        cublas_down(0, M);
        CK(cudaStreamSynchronize(st));
        std::vector<float> ref = host(yout, (size_t)M * KD);
        show("down cublasGemmEx", timeit([&](int i) { cublas_down(i % L, M); }), d_bytes);
        for (const DV &v : dv) {
            CK(cudaMemsetAsync(yout, 0xff, MAXT * KD * 2, st));
            launch_down(v, 0, M, false);
            CK(cudaStreamSynchronize(st));
            double e = maxrel(host(yout, (size_t)M * KD), ref);
            char nm[96];
            snprintf(nm, sizeof nm, "%s%s", v.name, e > 1e-2 ? " WRONG" : "");
            show(nm, timeit([&](int i) { launch_down(v, i % L, M, false); }), d_bytes);
        }
        for (const BV &v : bd) {
            CK(cudaMemsetAsync(yout, 0xff, MAXT * KD * 2, st));
            launch_bulk(v, 0, M, 1);
            CK(cudaStreamSynchronize(st));
            double e = maxrel(host(yout, (size_t)M * KD), ref);
            char nm[96];
            snprintf(nm, sizeof nm, "%s%s", v.name, e > 1e-2 ? " WRONG" : "");
            show(nm, timeit([&](int i) { launch_bulk(v, i % L, M, 1); }), d_bytes);
        }
    }
    // the pair, as the MLP runs it: gated then down, with and without PDL, eager and in a graph
    for (int M : Ms) {
        const int G = 128;
        printf("\n== MLP pair, %d layers rotating, M %d, per layer (bytes: gated + down) ==\n", L, M);
        for (int gi = 0; gi < (int)(sizeof gv / sizeof gv[0]); gi++)
            for (int di = 0; di < 2; di++) {
                const GV &G1 = gv[gi];
                if (di == 1 && strstr(G1.name, "trigger") == NULL)
                    continue;
                auto layer = [&](int l) {
                    launch_gated(G1, l, M, G);
                    if (di == 0)
                        cublas_down(l, M);
                    else
                        launch_down(dv[1], l, M, true);
                };
                char nm[160];
                snprintf(nm, sizeof nm, "eager: %s + %s", G1.name, di ? "own down PDL" : "cublas");
                show(nm, timeit([&](int i) { layer(i % L); }), gu_bytes + d_bytes);
                layer(0);
                CK(cudaStreamSynchronize(st));
                cudaGraph_t gr;
                cudaGraphExec_t ge;
                CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                for (int l = 0; l < L; l++)
                    layer(l);
                CK(cudaStreamEndCapture(st, &gr));
                CK(cudaGraphInstantiate(&ge, gr, 0));
                std::vector<float> r = timeit([&](int) { CK(cudaGraphLaunch(ge, st)); }, 8, 5);
                for (float &v : r)
                    v /= L;
                snprintf(nm, sizeof nm, "graph: %s + %s", G1.name, di ? "own down PDL" : "cublas");
                show(nm, r, gu_bytes + d_bytes);
                cudaGraphExecDestroy(ge);
                cudaGraphDestroy(gr);
            }
    }
    return 0;
}
