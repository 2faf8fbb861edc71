// CUDA pointwise kernels: copy, add, mul and activations over strided, broadcasting operands,
// math in fp32, one thread per element of the (up to 4-D) output, grid-stride. Contiguous
// operands take the same path (the index math is cheap next to memory). Layer: backend/cuda.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/cuda_impl.h"

namespace {

struct view4 {
    const char *p;
    int dtype;
    long long stride[4];
};

__device__ __forceinline__ float load(const view4 &v, long long off)
{
    switch (v.dtype) {
    case LF_DTYPE_BF16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(v.p)[off]);
    case LF_DTYPE_F16: return __half2float(reinterpret_cast<const __half *>(v.p)[off]);
    default: return reinterpret_cast<const float *>(v.p)[off];
    }
}

__device__ __forceinline__ void store(char *p, int dtype, long long off, float x)
{
    switch (dtype) {
    case LF_DTYPE_BF16: reinterpret_cast<__nv_bfloat16 *>(p)[off] = __float2bfloat16_rn(x); break;
    case LF_DTYPE_F16: reinterpret_cast<__half *>(p)[off] = __float2half_rn(x); break;
    default: reinterpret_cast<float *>(p)[off] = x; break;
    }
}

// gelu_tanh as x * sigmoid(2u): one exp, no cancellation for negative x (as the CPU's).
__device__ __forceinline__ float act(int a, float x)
{
    switch (a) {
    case LF_ACT_RELU: return x < 0.f ? 0.f : x; // NaN stays NaN, as torch.relu keeps it
    case LF_ACT_GELU_TANH: {
        float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        return x / (1.f + __expf(-2.f * u));
    }
    case LF_ACT_GELU_ERF: return 0.5f * x * erfcf(-x * 0.7071067811865476f);
    case LF_ACT_SILU: return x / (1.f + __expf(-x));
    default: return x;
    }
}

// x rounded to dtype and widened back, as a store and a reload would.
__device__ __forceinline__ float round_to(int dtype, float x)
{
    switch (dtype) {
    case LF_DTYPE_BF16: return __bfloat162float(__float2bfloat16_rn(x));
    case LF_DTYPE_F16: return __half2float(__float2half_rn(x));
    default: return x;
    }
}

struct pw_args {
    int op, act, ndim;
    long long shape[4];
    long long n;
    view4 in0, in1;
    char *out;
    int out_dtype;
    long long out_stride[4];
};

__global__ void pointwise_kernel(pw_args a)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.n; i += (long long)gridDim.x * blockDim.x) {
        long long rem = i, o = 0, x0 = 0, x1 = 0;
        for (int d = a.ndim - 1; d >= 0; d--) {
            long long idx = rem % a.shape[d];
            rem /= a.shape[d];
            o += idx * a.out_stride[d];
            x0 += idx * a.in0.stride[d];
            x1 += idx * a.in1.stride[d];
        }
        float v = load(a.in0, x0), r;
        switch (a.op) {
        case LF_PW_ADD: r = v + load(a.in1, x1); break;
        case LF_PW_MUL: r = v * load(a.in1, x1); break;
        case LF_PW_ACT: r = act(a.act, v); break;
        case LF_PW_ACT_MUL: r = round_to(a.out_dtype, act(a.act, v)) * load(a.in1, x1); break;
        default: r = v; break;
        }
        store(a.out, a.out_dtype, o, r);
    }
}

// The common case, fast: every operand contiguous (or the second a row broadcast over
// leading dims, as a bias), one dtype. No index math; 8 elements per thread, in 16-byte
// loads when the type is 2 bytes wide.
template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }

} // namespace

// Kernels are named by what they do (a functor type in the template), so a profiler shows
// lf::flat_kernel<__nv_bfloat16, lf::mul_op> and lf::flat_kernel<__nv_bfloat16, lf::gelu_tanh_op>:
// same name, same work.
namespace lf {
struct copy_op {
    static __device__ __forceinline__ float f(float x, float) { return x; }
};
struct add_op {
    static __device__ __forceinline__ float f(float x, float y) { return x + y; }
};
struct mul_op {
    static __device__ __forceinline__ float f(float x, float y) { return x * y; }
};
struct relu_op {
    static __device__ __forceinline__ float f(float x, float) { return act(LF_ACT_RELU, x); }
};
struct gelu_tanh_op {
    static __device__ __forceinline__ float f(float x, float) { return act(LF_ACT_GELU_TANH, x); }
};
struct gelu_erf_op {
    static __device__ __forceinline__ float f(float x, float) { return act(LF_ACT_GELU_ERF, x); }
};
struct silu_op {
    static __device__ __forceinline__ float f(float x, float) { return act(LF_ACT_SILU, x); }
};

template <typename T, typename Op>
__global__ void flat_kernel(const T *__restrict__ x, const T *__restrict__ y, long long row, T *__restrict__ out,
                            long long n, int binary)
{
    constexpr int V = 16 / sizeof(T);
    const long long nv = n / V;
    for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < nv; v += (long long)gridDim.x * blockDim.x) {
        T xs[V], ys[V], os[V];
        *reinterpret_cast<uint4 *>(xs) = reinterpret_cast<const uint4 *>(x)[v];
        if (binary) {
            if (row == 0)
                *reinterpret_cast<uint4 *>(ys) = reinterpret_cast<const uint4 *>(y)[v];
            else
                *reinterpret_cast<uint4 *>(ys) = reinterpret_cast<const uint4 *>(y)[(v * V % row) / V];
        }
#pragma unroll
        for (int k = 0; k < V; k++)
            os[k] = from_f<T>(Op::f(to_f(xs[k]), binary ? to_f(ys[k]) : 0.f));
        reinterpret_cast<uint4 *>(out)[v] = *reinterpret_cast<uint4 *>(os);
    }
}

// out = act(g) * u over rows, one block per row: the GeGLU middle of kernels-mlp. The
// activation is rounded to T before the product, so the result equals gelu-then-mul bit for
// bit. vec: 16-byte vectors (every row aligned, cols a multiple of the vector width), else
// one element per thread-step. Launch shape: see act_mul_threads.
template <typename T, typename Op>
__global__ void act_mul_kernel(const T *__restrict__ g, long long gs, const T *__restrict__ u, long long us,
                               T *__restrict__ out, long long os, long long cols, int vec)
{
    const long long r = blockIdx.x;
    g += r * gs, u += r * us, out += r * os;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        for (long long c = threadIdx.x * (long long)V; c < cols; c += (long long)blockDim.x * V) {
            T gv[V], uv[V], ov[V];
            *reinterpret_cast<uint4 *>(gv) = *reinterpret_cast<const uint4 *>(g + c);
            *reinterpret_cast<uint4 *>(uv) = *reinterpret_cast<const uint4 *>(u + c);
#pragma unroll
            for (int k = 0; k < V; k++)
                ov[k] = from_f<T>(to_f(from_f<T>(Op::f(to_f(gv[k]), 0.f))) * to_f(uv[k]));
            *reinterpret_cast<uint4 *>(out + c) = *reinterpret_cast<uint4 *>(ov);
        }
    } else {
        for (long long c = threadIdx.x; c < cols; c += blockDim.x)
            out[c] = from_f<T>(to_f(from_f<T>(Op::f(to_f(g[c]), 0.f))) * to_f(u[c]));
    }
}

// Threads per row from the row length alone, as Liger's calculate_settings does for its
// Triton GeGLU: the row padded to a power of two picks 4, 8, 16 or 32 warps (>= 2048, 8192,
// 32768 elements). One compiled kernel then serves every shape: nothing to tune or recompile.
static unsigned act_mul_threads(long long cols)
{
    long long block = 1;
    while (block < cols)
        block <<= 1;
    const int warps = block >= 32768 ? 32 : block >= 8192 ? 16 : block >= 2048 ? 8 : 4;
    return (unsigned)warps * 32u;
}

template <typename T>
static void launch_act_mul(const lf_pointwise *p, long long rows, long long cols, const long long *rs, int vec,
                           cudaStream_t stream)
{
    const T *g = (const T *)p->in[0].data, *u = (const T *)p->in[1].data;
    T *o = (T *)p->out.data;
    const unsigned threads = act_mul_threads(cols);
    switch (p->act) {
    case LF_ACT_RELU:
        act_mul_kernel<T, relu_op><<<(unsigned)rows, threads, 0, stream>>>(g, rs[1], u, rs[2], o, rs[0], cols, vec);
        break;
    case LF_ACT_GELU_ERF:
        act_mul_kernel<T, gelu_erf_op><<<(unsigned)rows, threads, 0, stream>>>(g, rs[1], u, rs[2], o, rs[0], cols, vec);
        break;
    case LF_ACT_GELU_TANH:
        act_mul_kernel<T, gelu_tanh_op><<<(unsigned)rows, threads, 0, stream>>>(g, rs[1], u, rs[2], o, rs[0], cols, vec);
        break;
    case LF_ACT_SILU:
        act_mul_kernel<T, silu_op><<<(unsigned)rows, threads, 0, stream>>>(g, rs[1], u, rs[2], o, rs[0], cols, vec);
        break;
    default:
        act_mul_kernel<T, copy_op><<<(unsigned)rows, threads, 0, stream>>>(g, rs[1], u, rs[2], o, rs[0], cols, vec);
        break;
    }
}

template <typename T>
static void launch_flat(const lf_pointwise *p, const void *y, long long row, long long n, unsigned blocks,
                        cudaStream_t stream)
{
    const T *x = (const T *)p->in[0].data, *yy = (const T *)y;
    T *o = (T *)p->out.data;
    switch (p->op) {
    case LF_PW_ADD: flat_kernel<T, add_op><<<blocks, 256, 0, stream>>>(x, yy, row, o, n, 1); break;
    case LF_PW_MUL: flat_kernel<T, mul_op><<<blocks, 256, 0, stream>>>(x, yy, row, o, n, 1); break;
    case LF_PW_ACT:
        if (p->act == LF_ACT_RELU)
            flat_kernel<T, relu_op><<<blocks, 256, 0, stream>>>(x, yy, row, o, n, 0);
        else if (p->act == LF_ACT_GELU_TANH)
            flat_kernel<T, gelu_tanh_op><<<blocks, 256, 0, stream>>>(x, yy, row, o, n, 0);
        else if (p->act == LF_ACT_GELU_ERF)
            flat_kernel<T, gelu_erf_op><<<blocks, 256, 0, stream>>>(x, yy, row, o, n, 0);
        else if (p->act == LF_ACT_SILU)
            flat_kernel<T, silu_op><<<blocks, 256, 0, stream>>>(x, yy, row, o, n, 0);
        else
            flat_kernel<T, copy_op><<<blocks, 256, 0, stream>>>(x, yy, row, o, n, 0);
        break;
    default: flat_kernel<T, copy_op><<<blocks, 256, 0, stream>>>(x, yy, row, o, n, 0); break;
    }
}
} // namespace lf

namespace {

// Whether p is the fast case; *row = 0 (second operand full) or its row length (broadcast).
static bool flat_case(const lf_pointwise *p, long long *row)
{
    const int nin = lf_pw_arity((lf_pw_op)p->op);
    const size_t es = lf_dtype_size(p->out.dtype);
    long long n = 1;
    for (int d = p->ndim - 1; d >= 0; d--) {
        if (p->out.stride[d] != n && p->shape[d] != 1)
            return false;
        if (p->in[0].stride[d] != n && p->shape[d] != 1)
            return false;
        n *= p->shape[d];
    }
    if (p->in[0].dtype != p->out.dtype || (n * (long long)es) % 16 || (uintptr_t)p->out.data % 16 ||
        (uintptr_t)p->in[0].data % 16)
        return false;
    *row = 0;
    if (nin == 2) {
        if (p->in[1].dtype != p->out.dtype || (uintptr_t)p->in[1].data % 16)
            return false;
        long long m = 1;
        bool full = true, bcast = true;
        for (int d = p->ndim - 1; d >= 0; d--) {
            full &= p->in[1].stride[d] == m || p->shape[d] == 1;
            bcast &= d == p->ndim - 1 ? p->in[1].stride[d] == 1 : p->in[1].stride[d] == 0;
            m *= p->shape[d];
        }
        if (!full) {
            long long r = p->shape[p->ndim - 1];
            if (!bcast || (r * (long long)es) % 16)
                return false;
            *row = r;
        }
    }
    return true;
}

// Whether an act_mul is rows of contiguous elements: the last dim of every operand has
// stride 1 and the leading dims fold into one row index with one stride per operand (rs[0]
// out, rs[1] g, rs[2] u). *vec: 16-byte vectors can be used throughout.
static bool rows_case(const lf_pointwise *p, long long *rows, long long *cols, long long rs[3], int *vec)
{
    const lf_strided *ops[3] = {&p->out, &p->in[0], &p->in[1]};
    const int nd = p->ndim;
    *cols = p->shape[nd - 1];
    *rows = 1;
    for (int d = 0; d < nd - 1; d++)
        *rows *= p->shape[d];
    if (*rows > 0x7fffffffLL)
        return false;
    int aligned = 1;
    const size_t es = lf_dtype_size(p->out.dtype);
    for (int q = 0; q < 3; q++) {
        if (ops[q]->dtype != p->out.dtype || (ops[q]->stride[nd - 1] != 1 && *cols > 1))
            return false;
        long long step = 0; // the row stride: that of the innermost leading dim longer than 1
        for (int d = nd - 2; d >= 0; d--)
            if (p->shape[d] > 1) {
                if (step == 0)
                    step = ops[q]->stride[d];
                long long inner = 1; // elements between consecutive indices of dim d, in rows
                for (int e = d + 1; e < nd - 1; e++)
                    inner *= p->shape[e];
                if (ops[q]->stride[d] != step * inner)
                    return false;
            }
        rs[q] = step;
        aligned &= (uintptr_t)ops[q]->data % 16 == 0 && (step * (long long)es) % 16 == 0;
    }
    *vec = aligned && (*cols * (long long)es) % 16 == 0;
    return true;
}

} // namespace

extern "C" cudaError_t lf_cuda_pointwise_launch(const lf_pointwise *p, cudaStream_t stream)
{
    long long rows, cols, rs[3];
    int vec;
    if (p->op == LF_PW_ACT_MUL && rows_case(p, &rows, &cols, rs, &vec)) {
        switch (p->out.dtype) {
        case LF_DTYPE_BF16: lf::launch_act_mul<__nv_bfloat16>(p, rows, cols, rs, vec, stream); break;
        case LF_DTYPE_F16: lf::launch_act_mul<__half>(p, rows, cols, rs, vec, stream); break;
        default: lf::launch_act_mul<float>(p, rows, cols, rs, vec, stream); break;
        }
        return cudaGetLastError();
    }
    long long row = 0;
    if (p->op != LF_PW_ACT_MUL && flat_case(p, &row)) {
        long long n = 1;
        for (int d = 0; d < p->ndim; d++)
            n *= p->shape[d];
        long long nv = n * (long long)lf_dtype_size(p->out.dtype) / 16, blocks = (nv + 255) / 256;
        if (blocks > 132 * 16)
            blocks = 132 * 16;
        const void *y = p->in[1].data ? p->in[1].data : p->in[0].data;
        switch (p->out.dtype) {
        case LF_DTYPE_BF16: lf::launch_flat<__nv_bfloat16>(p, y, row, n, (unsigned)blocks, stream); break;
        case LF_DTYPE_F16: lf::launch_flat<__half>(p, y, row, n, (unsigned)blocks, stream); break;
        default: lf::launch_flat<float>(p, y, row, n, (unsigned)blocks, stream); break;
        }
        return cudaGetLastError();
    }

    pw_args a = {};
    a.op = p->op;
    a.act = p->act;
    a.ndim = p->ndim;
    a.n = 1;
    for (int d = 0; d < p->ndim; d++) {
        a.shape[d] = p->shape[d];
        a.n *= p->shape[d];
        a.out_stride[d] = p->out.stride[d];
        a.in0.stride[d] = p->in[0].stride[d];
        a.in1.stride[d] = p->in[1].stride[d];
    }
    a.in0.p = static_cast<const char *>(p->in[0].data);
    a.in0.dtype = p->in[0].dtype;
    a.in1.p = static_cast<const char *>(p->in[1].data ? p->in[1].data : p->in[0].data);
    a.in1.dtype = p->in[1].data ? p->in[1].dtype : p->in[0].dtype;
    a.out = static_cast<char *>(p->out.data);
    a.out_dtype = p->out.dtype;
    long long blocks = (a.n + 255) / 256;
    if (blocks > 132 * 32) // a grid-stride loop: a few waves of the H200's 132 SMs
        blocks = 132 * 32;
    pointwise_kernel<<<(unsigned)blocks, 256, 0, stream>>>(a);
    return cudaGetLastError();
}
