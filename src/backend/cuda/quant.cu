// FP8 quantization on CUDA (lf_quant), per row, per 1 x 128 or per 128 x 128 block: the span's largest magnitude
// by a reduction, then every element times the reciprocal of its scale (each rounded to nearest, as
// the CPU's: a multiply where an IEEE divide costs some 20 instructions, which showed in the
// kernel's time) and converted by the hardware's e4m3 conversion (nearest even, saturating), so
// the codes equal the CPU backend's byte for byte (fp8.cuh): a product never passes 448 by more
// than the roundings, which both take back to 448. A NaN element becomes a NaN code (fmaxf skips
// it in the scale); an infinite one makes its span's scale infinite. Both reach the GEMM's result
// as NaN. Layer: backend/cuda.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/fp8.cuh"

namespace {

constexpr int THREADS = 256;

__device__ __forceinline__ float load_any(const void *p, int dtype, long long off)
{
    switch (dtype) {
    case LF_DTYPE_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[off]);
    case LF_DTYPE_F16: return __half2float(static_cast<const __half *>(p)[off]);
    default: return static_cast<const float *>(p)[off];
    }
}

// The CTA's largest of every thread's amax (part: THREADS / 32 floats of shared memory), and the
// scale of the span it covers (a row, or a 128 x 128 block) by the CPU's rule (fp8.cuh).
__device__ __forceinline__ float cta_scale(float amax, float *part)
{
    for (int o = 16; o > 0; o /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (threadIdx.x % 32 == 0)
        part[threadIdx.x / 32] = amax;
    __syncthreads();
    amax = part[0];
    for (int w = 1; w < THREADS / 32; w++)
        amax = fmaxf(amax, part[w]);
    return lf::fp8_scale(amax);
}

// A padding row (r >= rows): zero codes, scale 1.
__device__ __forceinline__ void pad_row(long long r, long long cols, unsigned char *q, float *scale)
{
    for (long long c = threadIdx.x; c < cols; c += THREADS)
        q[r * cols + c] = 0;
    if (threadIdx.x == 0)
        scale[r] = 1.f;
}

__global__ void __launch_bounds__(THREADS) quantize_fp8_rowwise(const void *in, int dtype, long long rs, long long cs,
                                                                 long long rows, long long cols, unsigned char *q,
                                                                 float *scale)
{
    __shared__ float part[THREADS / 32];
    const long long r = blockIdx.x;
    if (r >= rows)
        return pad_row(r, cols, q, scale);
    float amax = 0.f;
    for (long long c = threadIdx.x; c < cols; c += THREADS)
        amax = fmaxf(amax, fabsf(load_any(in, dtype, r * rs + c * cs)));
    const float sc = cta_scale(amax, part), inv = __frcp_rn(sc);
    if (threadIdx.x == 0)
        scale[r] = sc;
    unsigned char *out = q + r * cols;
    for (long long c = threadIdx.x; c < cols; c += THREADS)
        out[c] = (unsigned char)__nv_cvt_float_to_fp8(__fmul_rn(load_any(in, dtype, r * rs + c * cs), inv),
                                                      __NV_SATFINITE, __NV_E4M3);
}

// Eight bf16 values (one 16-byte piece) folded into a largest magnitude, and the same eight as
// codes (the generic kernel's rounding, two values per conversion; element order kept).
__device__ __forceinline__ float amax8(const uint4 &v, float amax)
{
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float2 f = __bfloat1622float2(h[e]);
        amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
    return amax;
}

__device__ __forceinline__ uint2 codes8(const uint4 &v, float inv)
{
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v);
    unsigned short c[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float2 f = __bfloat1622float2(h[e]);
        c[e] = lf::fp8_codes(f.x, f.y, inv); // .x in the low byte
    }
    return make_uint2(c[0] | (unsigned)c[1] << 16, c[2] | (unsigned)c[3] << 16);
}

// Contiguous bf16 rows, read once: each thread keeps its 16-byte pieces in registers between the
// reduction and the conversion, and writes 8 codes at a time. Two shapes:
// - rows of up to WARP_MAX_COLS (4096: every model dim up to Llama-3-8B's), a warp each and
//   ROW_WARPS rows a CTA, NV pieces a lane: the reduction is shuffles alone, and small CTAs let
//   an SM hold a dozen rows' loads in flight where registers (VECS pieces a thread) let it hold
//   three of the CTA-per-row kernel's. On an H200 it quantizes 8192 x 4096 in 30.4 us against
//   that kernel's 39.7 (3.3 TB/s against 2.5), and takes the blog-shape fp8 MLP from 152 us to
//   128-133, where 768-element rows left most of the CTA-per-row kernel's threads idle
//   (bench/RESULTS.md);
// - longer rows (up to THREADS * 8 * VECS, 16384), a CTA each.
constexpr int VECS = 8, VEC_MAX_COLS = THREADS * 8 * VECS, ROW_WARPS = 4, WARP_MAX_COLS = 32 * 8 * 16;

template <int NV>
__global__ void __launch_bounds__(ROW_WARPS * 32)
    quantize_fp8_rowwise_bf16_warp(const __nv_bfloat16 *in, long long rs, long long rows, long long all_rows, int cols,
                                   unsigned char *q, float *scale)
{
    const long long r = (long long)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32, nv = cols / 8;
    if (r >= all_rows) // a whole warp leaves together
        return;
    uint2 *out = reinterpret_cast<uint2 *>(q + r * cols);
    if (r >= rows) { // padding: zero codes, scale 1
        for (int i = lane; i < nv; i += 32)
            out[i] = make_uint2(0u, 0u);
        if (lane == 0)
            scale[r] = 1.f;
        return;
    }
    const uint4 *row = reinterpret_cast<const uint4 *>(in + r * rs);
    uint4 v[NV];
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < NV; j++)
        if (lane + j * 32 < nv)
            v[j] = row[lane + j * 32], amax = amax8(v[j], amax);
    for (int o = 16; o > 0; o /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float sc = lf::fp8_scale(amax), inv = __frcp_rn(sc);
    if (lane == 0)
        scale[r] = sc;
#pragma unroll
    for (int j = 0; j < NV; j++)
        if (lane + j * 32 < nv)
            out[lane + j * 32] = codes8(v[j], inv);
}

__global__ void __launch_bounds__(THREADS)
    quantize_fp8_rowwise_bf16x8(const __nv_bfloat16 *in, long long rs, long long rows, int cols, unsigned char *q,
                                float *scale)
{
    __shared__ float part[THREADS / 32];
    const long long r = blockIdx.x;
    if (r >= rows)
        return pad_row(r, cols, q, scale);
    const uint4 *row = reinterpret_cast<const uint4 *>(in + r * rs);
    const int nv = cols / 8;
    uint4 v[VECS];
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < VECS; j++)
        if (threadIdx.x + j * THREADS < nv)
            v[j] = row[threadIdx.x + j * THREADS], amax = amax8(v[j], amax);
    const float sc = cta_scale(amax, part), inv = __frcp_rn(sc);
    if (threadIdx.x == 0)
        scale[r] = sc;
    uint2 *out = reinterpret_cast<uint2 *>(q + r * cols);
#pragma unroll
    for (int j = 0; j < VECS; j++)
        if (threadIdx.x + j * THREADS < nv)
            out[threadIdx.x + j * THREADS] = codes8(v[j], inv);
}

// 1 x 128 blocks: one warp per block of a row (warps along a row read it in order), four elements
// a lane; warps past the last row write their block's padding scale, 1. scale is block-major:
// scale[r + b * ld], ld the rows rounded up to 4.
__global__ void __launch_bounds__(THREADS) quantize_fp8_1x128(const void *in, int dtype, long long rs, long long cs,
                                                                long long rows, long long cols, long long ld,
                                                                unsigned char *q, float *scale)
{
    const long long nb = (cols + 127) / 128, wid = (long long)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (wid >= ld * nb) // a whole warp leaves together
        return;
    const long long r = wid / nb, b = wid % nb;
    if (r >= rows) {
        if (lane == 0)
            scale[r + b * ld] = 1.f;
        return;
    }
    float v[4], amax = 0.f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const long long c = b * 128 + j * 32 + lane;
        v[j] = c < cols ? load_any(in, dtype, r * rs + c * cs) : 0.f;
        amax = fmaxf(amax, fabsf(v[j]));
    }
    for (int o = 16; o > 0; o /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float sc = lf::fp8_scale(amax), inv = __frcp_rn(sc);
    if (lane == 0)
        scale[r + b * ld] = sc;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const long long c = b * 128 + j * 32 + lane;
        if (c < cols)
            q[r * cols + c] = (unsigned char)__nv_cvt_float_to_fp8(__fmul_rn(v[j], inv), __NV_SATFINITE, __NV_E4M3);
    }
}

// 128 x 128 blocks (weights, once): one CTA per block, its largest magnitude by the block reduction,
// then the block read again for the codes; CTAs past the last column block (the scale's padding to
// 4 blocks) write 1. scale is row-block-major: scale[rb * ld + cb].
__global__ void __launch_bounds__(THREADS) quantize_fp8_128x128(const void *in, int dtype, long long rs, long long cs,
                                                                 long long rows, long long cols, long long ld,
                                                                 unsigned char *q, float *scale)
{
    __shared__ float part[THREADS / 32];
    const long long rb = blockIdx.y, cb = blockIdx.x, r0 = rb * 128, c0 = cb * 128;
    if (c0 >= cols) {
        if (threadIdx.x == 0)
            scale[rb * ld + cb] = 1.f;
        return;
    }
    const int tc = threadIdx.x % 128, tr = threadIdx.x / 128; // a column each, every other row
    const long long c = c0 + tc;
    float amax = 0.f;
    for (long long r = r0 + tr; r < r0 + 128 && r < rows; r += THREADS / 128)
        if (c < cols)
            amax = fmaxf(amax, fabsf(load_any(in, dtype, r * rs + c * cs)));
    const float sc = cta_scale(amax, part), inv = __frcp_rn(sc);
    if (threadIdx.x == 0)
        scale[rb * ld + cb] = sc;
    for (long long r = r0 + tr; r < r0 + 128 && r < rows; r += THREADS / 128)
        if (c < cols)
            q[r * cols + c] =
                (unsigned char)__nv_cvt_float_to_fp8(__fmul_rn(load_any(in, dtype, r * rs + c * cs), inv), __NV_SATFINITE,
                                                     __NV_E4M3);
}

} // namespace

extern "C" cudaError_t lf_cuda_quantize_launch(const lf_quant *q, cudaStream_t stream)
{
    const long long grid = q->pad_rows > q->rows ? q->pad_rows : q->rows;
    if (grid > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    const lf_strided *in = &q->in;
    if (q->mode == LF_SCALE_128X128) {
        const long long rb = LF_SCALE_BLOCKS(q->rows), ld = LF_SCALE_LD(LF_SCALE_BLOCKS(q->cols));
        if (rb > 65535 || ld > 0x7fffffffLL)
            return cudaErrorInvalidValue;
        quantize_fp8_128x128<<<dim3((unsigned)ld, (unsigned)rb), THREADS, 0, stream>>>(
            in->data, (int)in->dtype, in->stride[0], in->stride[1], q->rows, q->cols, ld, q->q, q->scale);
    } else if (q->mode == LF_SCALE_1X128) {
        const long long ld = LF_SCALE_LD(q->rows), warps = ld * LF_SCALE_BLOCKS(q->cols),
                        blocks = (warps + THREADS / 32 - 1) / (THREADS / 32);
        if (blocks > 0x7fffffffLL)
            return cudaErrorInvalidValue;
        quantize_fp8_1x128<<<(unsigned)blocks, THREADS, 0, stream>>>(in->data, (int)in->dtype, in->stride[0],
                                                                       in->stride[1], q->rows, q->cols, ld, q->q,
                                                                       q->scale);
    } else if (in->dtype == LF_DTYPE_BF16 && in->stride[1] == 1 && in->stride[0] % 8 == 0 && q->cols % 8 == 0 &&
               q->cols <= VEC_MAX_COLS && (uintptr_t)in->data % 16 == 0 && (uintptr_t)q->q % 8 == 0) {
        const __nv_bfloat16 *x = static_cast<const __nv_bfloat16 *>(in->data);
        const unsigned ctas = (unsigned)((grid + ROW_WARPS - 1) / ROW_WARPS);
        const int nv = (int)q->cols / 8, c = (int)q->cols;
        if (q->cols <= WARP_MAX_COLS) { // the fewest pieces a lane that hold the row
            const auto warp_kernel = nv <= 32 * 4   ? quantize_fp8_rowwise_bf16_warp<4>
                                     : nv <= 32 * 8 ? quantize_fp8_rowwise_bf16_warp<8>
                                                    : quantize_fp8_rowwise_bf16_warp<16>;
            warp_kernel<<<ctas, ROW_WARPS * 32, 0, stream>>>(x, in->stride[0], q->rows, grid, c, q->q, q->scale);
        } else {
            quantize_fp8_rowwise_bf16x8<<<(unsigned)grid, THREADS, 0, stream>>>(x, in->stride[0], q->rows, c, q->q,
                                                                                q->scale);
        }
    } else {
        quantize_fp8_rowwise<<<(unsigned)grid, THREADS, 0, stream>>>(in->data, (int)in->dtype, in->stride[0],
                                                                     in->stride[1], q->rows, q->cols, q->q, q->scale);
    }
    return cudaGetLastError();
}
