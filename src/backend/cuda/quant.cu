// Row-wise FP8 quantization on CUDA (lf_quant): one block per row, the row's largest magnitude
// by a block reduction, then every element times the reciprocal of the row's scale (each rounded to
// nearest, as the CPU's: a multiply where an IEEE divide costs some 20 instructions, which showed in
// the kernel's time) and converted by the hardware's e4m3 conversion (nearest even, saturating),
// so the codes equal the CPU backend's byte for byte: a product never passes 448 by more than the
// roundings, which both take back to 448. A NaN element becomes a
// NaN code (fmaxf skips it in the scale); an infinite one makes its row's scale infinite. Both
// reach the GEMM's result as NaN. Layer: backend/cuda.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_impl.h"

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

// The block's largest of every thread's amax (part: THREADS / 32 floats of shared memory), and the
// row's scale by the CPU's rule: amax / 448, 1 for a row of zeros, at least 2^-126.
__device__ __forceinline__ float row_scale(float amax, float *part)
{
    for (int o = 16; o > 0; o /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (threadIdx.x % 32 == 0)
        part[threadIdx.x / 32] = amax;
    __syncthreads();
    amax = part[0];
    for (int w = 1; w < THREADS / 32; w++)
        amax = fmaxf(amax, part[w]);
    const float s0 = __fdiv_rn(amax, 448.f);
    return amax == 0.f ? 1.f : s0 < 0x1p-126f ? 0x1p-126f : s0;
}

__global__ void __launch_bounds__(THREADS) quantize_fp8_rowwise(const void *in, int dtype, long long rs, long long cs,
                                                                 long long cols, unsigned char *q, float *scale)
{
    __shared__ float part[THREADS / 32];
    const long long r = blockIdx.x;
    float amax = 0.f;
    for (long long c = threadIdx.x; c < cols; c += THREADS)
        amax = fmaxf(amax, fabsf(load_any(in, dtype, r * rs + c * cs)));
    const float sc = row_scale(amax, part), inv = __frcp_rn(sc);
    if (threadIdx.x == 0)
        scale[r] = sc;
    unsigned char *out = q + r * cols;
    for (long long c = threadIdx.x; c < cols; c += THREADS)
        out[c] = (unsigned char)__nv_cvt_float_to_fp8(__fmul_rn(load_any(in, dtype, r * rs + c * cs), inv),
                                                      __NV_SATFINITE, __NV_E4M3);
}

// The common case, a contiguous bf16 row of up to THREADS * 8 * VECS elements (16384: Llama's
// hidden and every model dim), read once: each thread keeps its 16-byte pieces in registers between
// the reduction and the conversion, and writes 8 codes at a time. The rounding is the generic
// kernel's, two values per conversion.
constexpr int VECS = 8, VEC_MAX_COLS = THREADS * 8 * VECS;

__global__ void __launch_bounds__(THREADS) quantize_fp8_rowwise_bf16x8(const __nv_bfloat16 *in, long long rs,
                                                                        int cols, unsigned char *q, float *scale)
{
    __shared__ float part[THREADS / 32];
    const long long r = blockIdx.x;
    const uint4 *row = reinterpret_cast<const uint4 *>(in + r * rs);
    const int nv = cols / 8;
    uint4 v[VECS];
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < VECS; j++) {
        const int i = threadIdx.x + j * THREADS;
        if (i < nv) {
            v[j] = row[i];
            const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v[j]);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float2 f = __bfloat1622float2(h[e]);
                amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
            }
        }
    }
    const float sc = row_scale(amax, part), inv = __frcp_rn(sc);
    if (threadIdx.x == 0)
        scale[r] = sc;
    uint2 *out = reinterpret_cast<uint2 *>(q + r * cols);
#pragma unroll
    for (int j = 0; j < VECS; j++) {
        const int i = threadIdx.x + j * THREADS;
        if (i < nv) {
            const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v[j]);
            unsigned short c[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float2 f = __bfloat1622float2(h[e]);
                c[e] = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(f.x, inv), __fmul_rn(f.y, inv)), __NV_SATFINITE,
                                                __NV_E4M3); // .x in the low byte: element order kept
            }
            out[i] = make_uint2(c[0] | (unsigned)c[1] << 16, c[2] | (unsigned)c[3] << 16);
        }
    }
}

} // namespace

extern "C" cudaError_t lf_cuda_quantize_launch(const lf_quant *q, cudaStream_t stream)
{
    if (q->rows > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    const lf_strided *in = &q->in;
    if (in->dtype == LF_DTYPE_BF16 && in->stride[1] == 1 && in->stride[0] % 8 == 0 && q->cols % 8 == 0 &&
        q->cols <= VEC_MAX_COLS && (uintptr_t)in->data % 16 == 0 && (uintptr_t)q->q % 8 == 0)
        quantize_fp8_rowwise_bf16x8<<<(unsigned)q->rows, THREADS, 0, stream>>>(
            static_cast<const __nv_bfloat16 *>(in->data), in->stride[0], (int)q->cols, q->q, q->scale);
    else
        quantize_fp8_rowwise<<<(unsigned)q->rows, THREADS, 0, stream>>>(in->data, (int)in->dtype, in->stride[0],
                                                                          in->stride[1], q->cols, q->q, q->scale);
    return cudaGetLastError();
}
