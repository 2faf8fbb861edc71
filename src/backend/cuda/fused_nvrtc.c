/* Compile mode's fused pointwise kernels on CUDA: each lf_fused program is written out as CUDA C
 * with its shape and strides as constants (the compiled plan's guards keep them true), built with
 * NVRTC for this GPU, and cached on disk under a hash of the source, so a second run loads the
 * cubin instead of compiling (Inductor keeps its generated kernels the same way). Only the data
 * pointers are kernel arguments, so a plan can patch its inputs' addresses per call and a CUDA
 * graph can hold the launch. Loaded with cudaLibraryLoadData: no link against libcuda.
 * Layer: backend/cuda. */
#include <errno.h>
#include <nvrtc.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cuda/cuda_impl.h"

typedef struct prepared {
    cudaLibrary_t lib;
    cudaKernel_t kernel;
    long long n;   /* elements */
    int vec;       /* 8-wide path compiled in (taken when the pointers are 16-byte aligned) */
    unsigned grid; /* blocks of 256 threads */
} prepared;

/* --- writing the source --- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int overflow;
} sbuf;

__attribute__((format(printf, 2, 3))) static void put(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= b->cap - b->len)
        b->overflow = 1, b->len = b->cap - 1;
    else
        b->len += (size_t)n;
}

static const char *ctype(lf_dtype dt)
{
    return dt == LF_DTYPE_F32 ? "float" : "unsigned short";
}

static const char *load_fn(lf_dtype dt)
{
    return dt == LF_DTYPE_F32 ? "ld_f32" : dt == LF_DTYPE_BF16 ? "ld_bf16" : "ld_f16";
}

static const char *store_fn(lf_dtype dt)
{
    return dt == LF_DTYPE_F32 ? "st_f32" : dt == LF_DTYPE_BF16 ? "st_bf16" : "st_f16";
}

/* Whether operand s walks f's shape in row-major order (its offset is the flat index). */
static int flat(const lf_fused *f, const lf_strided *s)
{
    int64_t st = 1;
    for (int d = f->ndim - 1; d >= 0; d--) {
        if (f->shape[d] != 1 && s->stride[d] != st)
            return 0;
        st *= f->shape[d];
    }
    return 1;
}

static const char *prelude =
    "__device__ __forceinline__ float ld_f32(float v) { return v; }\n"
    "__device__ __forceinline__ float ld_bf16(unsigned short v) { return __uint_as_float((unsigned)v << 16); }\n"
    "__device__ __forceinline__ float ld_f16(unsigned short v) {\n"
    "  float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(v)); return f; }\n"
    "__device__ __forceinline__ float st_f32(float v) { return v; }\n"
    "__device__ __forceinline__ unsigned short st_bf16(float v) {\n"
    "  unsigned short h; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(v)); return h; }\n"
    "__device__ __forceinline__ unsigned short st_f16(float v) {\n"
    "  unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(v)); return h; }\n"
    "__device__ __forceinline__ float relu(float x) { return x > 0.f ? x : 0.f; }\n"
    "__device__ __forceinline__ float gelu_tanh(float x) {\n"
    "  float u = 0.7978845608028654f * (x + 0.044715f * x * x * x); return x / (1.f + __expf(-2.f * u)); }\n"
    "__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * erfcf(-x * 0.7071067811865476f); }\n"
    "__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }\n";

/* The program's steps on registers r0.. (inputs first), for element k of a vector or the scalar
 * path (suffix ""). */
static void put_steps(sbuf *b, const lf_fused *f, const char *sfx)
{
    for (int i = 0; i < f->n_ops; i++) {
        const lf_fused_op *o = &f->ops[i];
        int r = f->n_in + i;
        switch (o->op) {
        case LF_PW_ADD:
            put(b, "    float r%d%s = r%d%s + r%d%s;\n", r, sfx, o->src[0], sfx, o->src[1], sfx);
            break;
        case LF_PW_MUL:
            put(b, "    float r%d%s = r%d%s * r%d%s;\n", r, sfx, o->src[0], sfx, o->src[1], sfx);
            break;
        case LF_PW_ACT:
            if (o->act == LF_ACT_NONE)
                put(b, "    float r%d%s = r%d%s;\n", r, sfx, o->src[0], sfx);
            else
                put(b, "    float r%d%s = %s(r%d%s);\n", r, sfx, lf_act_name(o->act), o->src[0], sfx);
            break;
        default:
            put(b, "    float r%d%s = r%d%s;\n", r, sfx, o->src[0], sfx);
            break;
        }
    }
}

/* CUDA C for f. The vector path (8 elements a thread, 16-byte loads) is emitted when every
 * operand is flat, 2 bytes wide, and the count is a multiple of 8. */
static int gen_source(const lf_fused *f, long long n, int *vec, char *out, size_t cap)
{
    sbuf b = {out, 0, cap, 0};
    int all_flat = flat(f, &f->out) && lf_dtype_size(f->out.dtype) == 2;
    for (int q = 0; q < f->n_in; q++)
        all_flat &= flat(f, &f->in[q]) && f->in[q].dtype == f->out.dtype;
    *vec = all_flat && n % 8 == 0;
    put(&b, "// generated by linfuse for %s\n%s", f->name, prelude);
    put(&b, "extern \"C\" __global__ void __launch_bounds__(256) %s(", f->name);
    for (int q = 0; q < f->n_in; q++)
        put(&b, "const %s *__restrict__ in%d, ", ctype(f->in[q].dtype), q);
    put(&b, "%s *__restrict__ out)\n{\n  const long long n = %lldLL;\n", ctype(f->out.dtype), n);
    if (*vec) {
        put(&b, "  if (((unsigned long long)out");
        for (int q = 0; q < f->n_in; q++)
            put(&b, " | (unsigned long long)in%d", q);
        put(&b,
            ") %% 16 == 0) {\n"
            "    for (long long v = blockIdx.x * 256LL + threadIdx.x; v < n / 8; v += (long long)gridDim.x * 256) {\n");
        for (int q = 0; q < f->n_in; q++)
            put(&b,
                "      uint4 w%d = reinterpret_cast<const uint4 *>(in%d)[v];\n"
                "      const unsigned short *e%d = reinterpret_cast<const unsigned short *>(&w%d);\n",
                q, q, q, q);
        put(&b, "      uint4 wo; unsigned short *eo = reinterpret_cast<unsigned short *>(&wo);\n"
                "#pragma unroll\n      for (int k = 0; k < 8; k++) {\n");
        for (int q = 0; q < f->n_in; q++)
            put(&b, "    float r%d = %s(e%d[k]);\n", q, load_fn(f->in[q].dtype), q);
        put_steps(&b, f, "");
        put(&b,
            "    eo[k] = %s(r%d);\n      }\n      reinterpret_cast<uint4 *>(out)[v] = wo;\n    }\n    return;\n  }\n",
            store_fn(f->out.dtype), f->n_in + f->n_ops - 1);
    }
    put(&b, "  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {\n");
    /* offsets: the flat index for flat operands, else the strides folded over the index */
    const lf_strided *ops[1 + LF_FUSED_MAX_IN];
    ops[0] = &f->out;
    for (int q = 0; q < f->n_in; q++)
        ops[1 + q] = &f->in[q];
    int need_idx = 0;
    for (int q = 0; q <= f->n_in; q++)
        need_idx |= !flat(f, ops[q]);
    for (int q = 0; q <= f->n_in; q++)
        put(&b, "    long long o%d = %s;\n", q, flat(f, ops[q]) ? "i" : "0");
    if (need_idx) {
        put(&b, "    long long rem = i, idx;\n");
        for (int d = f->ndim - 1; d >= 0; d--) {
            put(&b, "    idx = rem %% %lldLL; rem /= %lldLL;\n", (long long)f->shape[d], (long long)f->shape[d]);
            for (int q = 0; q <= f->n_in; q++)
                if (!flat(f, ops[q]) && ops[q]->stride[d] != 0)
                    put(&b, "    o%d += idx * %lldLL;\n", q, (long long)ops[q]->stride[d]);
        }
    }
    for (int q = 0; q < f->n_in; q++)
        put(&b, "    float r%d = %s(in%d[o%d]);\n", q, load_fn(f->in[q].dtype), q, q + 1);
    put_steps(&b, f, "");
    put(&b, "    out[o0] = %s(r%d);\n  }\n}\n", store_fn(f->out.dtype), f->n_in + f->n_ops - 1);
    return !b.overflow;
}

/* --- the cache --- */

lf_status lf_cuda_cache_dir(const char *given, char *dir, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n = given           ? snprintf(dir, cap, "%s", given)
            : xdg && *xdg   ? snprintf(dir, cap, "%s/linfuse", xdg)
            : home && *home ? snprintf(dir, cap, "%s/.cache/linfuse", home)
                            : snprintf(dir, cap, "/tmp/linfuse-cache");
    if (n < 0 || (size_t)n >= cap)
        return lf_fail(LF_EINVAL, "compile cache: directory name too long");
    for (char *p = dir + 1;; p++) /* mkdir -p */
        if (*p == '/' || !*p) {
            char c = *p;
            *p = '\0';
            if (mkdir(dir, 0777) != 0 && errno != EEXIST)
                return lf_fail(LF_EIO, "compile cache: cannot create %s: %s", dir, strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    return LF_OK;
}

void *lf_cuda_read_file(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    void *buf = NULL;
    if (fseek(fp, 0, SEEK_END) == 0) {
        long len = ftell(fp);
        if (len > 0 && fseek(fp, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len)) &&
            fread(buf, 1, (size_t)len, fp) != (size_t)len) {
            free(buf);
            buf = NULL;
        }
        *n = len > 0 ? (size_t)len : 0;
    }
    fclose(fp);
    return buf;
}

int lf_cuda_write_file(const char *path, const void *p, size_t n)
{
    static _Atomic unsigned seq; /* threads of one process (one per GPU) write apart too */
    char tmp[4300];
    if (snprintf(tmp, sizeof tmp, "%s.%d.%u.tmp", path, (int)getpid(), atomic_fetch_add(&seq, 1)) >= (int)sizeof tmp)
        return 0;
    FILE *fp = fopen(tmp, "wb");
    if (!fp)
        return 0;
    int ok = fwrite(p, 1, n, fp) == n;
    ok &= fclose(fp) == 0;
    ok = ok && rename(tmp, path) == 0;
    if (!ok)
        unlink(tmp);
    return ok;
}

/* NVRTC: source -> cubin for this GPU, or an error with the compiler's log. */
static lf_status nvrtc_build(const char *src, const char *name, int major, int minor, void **cubin, size_t *n)
{
    nvrtcProgram prog;
    LF_CU_TRY(NVRTC, nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL));
    char arch[32];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", major, minor);
    const char *opts[] = {arch, "-default-device", "--std=c++17"};
    lf_status s = LF_CU_CHECK(NVRTC, nvrtcCompileProgram(prog, 3, opts));
    if (s != LF_OK) {
        size_t ln = 0;
        char log[1024] = "";
        if (nvrtcGetProgramLogSize(prog, &ln) == NVRTC_SUCCESS && ln > 0) {
            char *full = malloc(ln);
            if (full && nvrtcGetProgramLog(prog, full) == NVRTC_SUCCESS)
                snprintf(log, sizeof log, "%s", full);
            free(full);
        }
        s = lf_fail(LF_EDEVICE, "nvrtc: %s does not compile: %s", name, log);
    }
    if (s == LF_OK)
        s = LF_CU_CHECK(NVRTC, nvrtcGetCUBINSize(prog, n));
    if (s == LF_OK && !(*cubin = malloc(*n)))
        s = lf_fail(LF_ENOMEM, "nvrtc: no memory for %s's cubin (%zu bytes)", name, *n);
    if (s == LF_OK)
        s = LF_CU_CHECK(NVRTC, nvrtcGetCUBIN(prog, *cubin));
    if (s != LF_OK) {
        free(*cubin);
        *cubin = NULL;
    }
    nvrtcDestroyProgram(&prog);
    return s;
}

lf_status lf_cuda_fused_prepare(lf_fused *f, const char *cache_dir, int verbose)
{
    long long n = 1;
    for (int d = 0; d < f->ndim; d++)
        n *= f->shape[d];
    prepared *pr = calloc(1, sizeof *pr);
    char *src = malloc(16384);
    if (!pr || !src) {
        free(pr), free(src);
        return lf_fail(LF_ENOMEM, "compile: no memory for kernel %s", f->name);
    }
    lf_status s = LF_OK;
    if (!gen_source(f, n, &pr->vec, src, 16384))
        s = lf_fail(LF_EUNSUPPORTED, "compile: kernel %s's source is too long", f->name);
    int dev = 0, major = 0, minor = 0, nv_major = 0, nv_minor = 0;
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaGetDevice(&dev));
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (s == LF_OK)
        s = LF_CU_CHECK(NVRTC, nvrtcVersion(&nv_major, &nv_minor));
    char dir[4096], path[4200];
    if (s == LF_OK)
        s = lf_cuda_cache_dir(cache_dir, dir, sizeof dir);
    void *cubin = NULL;
    size_t len = 0;
    if (s == LF_OK) {
        char salt[64];
        snprintf(salt, sizeof salt, "sm_%d%d nvrtc %d.%d", major, minor, nv_major, nv_minor);
        uint64_t h = lf_fnv1a(src, strlen(src), lf_fnv1a(salt, strlen(salt), LF_FNV_START));
        snprintf(path, sizeof path, "%s/%s_%016llx.cubin", dir, f->name, (unsigned long long)h);
        cubin = lf_cuda_read_file(path, &len);
        int cached = cubin != NULL;
        if (!cached) {
            s = nvrtc_build(src, f->name, major, minor, &cubin, &len);
            if (s == LF_OK && !lf_cuda_write_file(path, cubin, len) && verbose)
                fprintf(stderr, "linfuse compile: could not write %s (kernel still used)\n", path);
        }
        if (s == LF_OK && verbose)
            fprintf(stderr, "linfuse compile: %s %s %s\n", f->name, cached ? "loaded from" : "compiled to", path);
    }
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaLibraryLoadData(&pr->lib, cubin, NULL, NULL, 0, NULL, NULL, 0));
    if (s == LF_OK)
        s = LF_CU_CHECK(RUNTIME, cudaLibraryGetKernel(&pr->kernel, pr->lib, f->name));
    free(cubin);
    free(src);
    if (s != LF_OK) {
        if (pr->lib)
            cudaLibraryUnload(pr->lib);
        free(pr);
        return s;
    }
    long long work = pr->vec ? n / 8 : n, blocks = (work + 255) / 256;
    const lf_cuda_dev *d = lf_cuda_cur();
    long long cap =
        16LL * (d && d->sm_count > 0 ? d->sm_count
                                     : 132); /* 16 blocks of 256 per SM at most; the loop strides over the rest */
    pr->grid = (unsigned)(blocks < cap ? blocks : cap);
    pr->n = n;
    f->prepared = pr;
    return LF_OK;
}

lf_status lf_cuda_fused_launch(const lf_fused *f, cudaStream_t stream)
{
    const prepared *pr = f->prepared;
    if (!pr)
        return lf_fail(LF_EINVAL, "compile: kernel %s was not prepared", f->name);
    void *ptrs[LF_FUSED_MAX_IN + 1], *args[LF_FUSED_MAX_IN + 1];
    for (int q = 0; q < f->n_in; q++)
        ptrs[q] = f->in[q].data;
    ptrs[f->n_in] = f->out.data;
    for (int q = 0; q <= f->n_in; q++)
        args[q] = &ptrs[q];
    return LF_CU_CHECK(RUNTIME, cudaLaunchKernel((const void *)pr->kernel, (dim3){pr->grid, 1, 1}, (dim3){256, 1, 1},
                                                 args, 0, stream));
}

void lf_cuda_fused_release(lf_fused *f)
{
    prepared *pr = f->prepared;
    if (pr && pr->lib)
        cudaLibraryUnload(pr->lib);
    free(pr);
    f->prepared = NULL;
}
