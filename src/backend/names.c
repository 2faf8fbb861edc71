/* Kernel names, interned: the text of each distinct kernel's name is formatted once, from its
 * key, and kept for the life of the process; activation names. Layer: backend/. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "backend/names.h"

static const char *const act_names[LF_ACT_COUNT] = {"none", "relu", "gelu_tanh", "gelu_erf", "silu"};

const char *lf_act_name(lf_act act)
{
    return (unsigned)act < LF_ACT_COUNT ? act_names[act] : "?";
}

static const char *const pw_op_names[LF_PW_COUNT] = {"copy", "add", "mul", "act", "act_mul"};

/* "tn_rowwise_c_bias_gelu_tanh_gated": layout, then what the epilogue does, in order. */
static void gemm_suffix(const lf_kernel_key *k, char *buf, size_t cap)
{
    const char *scaled = !(k->flags & LF_KEY_SCALED) ? "" : k->flags & LF_KEY_BLOCKS ? "_blockwise" : "_rowwise";
    snprintf(buf, cap, "%c%c%s%s%s%s%s%s", k->lay_b, k->lay_a, scaled,
             k->flags & LF_KEY_C ? "_c" : "", k->flags & LF_KEY_BIAS ? "_bias" : "",
             k->act != LF_ACT_NONE ? "_" : "", k->act != LF_ACT_NONE ? lf_act_name((lf_act)k->act) : "",
             k->flags & LF_KEY_GATED ? "_gated" : "");
}

static void format_name(const lf_kernel_key *k, char *buf, size_t cap)
{
    char sfx[64];
    const char *dt = lf_dtype_name((lf_dtype)k->dtype);
    switch ((lf_kernel_family)k->family) {
    case LF_KF_CPU_GEMM:
        gemm_suffix(k, sfx, sizeof sfx);
        snprintf(buf, cap, "lf_cpu_gemm_%s_%ux%u_%s", dt, k->tile_m, k->tile_n, sfx);
        break;
    case LF_KF_CUBLASLT_GEMM:
        gemm_suffix(k, sfx, sizeof sfx);
        snprintf(buf, cap, "lf_cublaslt_gemm_%s_%s", dt, sfx);
        break;
    case LF_KF_CUDA_GATED:
        snprintf(buf, cap, "lf::gated::gated_gemm_%s_%s_%ux%u%s", dt, lf_act_name((lf_act)k->act), k->tile_m, k->tile_n,
                 k->out_dtype == LF_DTYPE_F8E4M3 ? "_to_f8e4m3" : "");
        break;
    case LF_KF_CUDA_GATED_PINGPONG:
    case LF_KF_CUDA_GATED_OFFLOAD:
        snprintf(buf, cap, "lf::gated::gated_gemm_%s_%s_%ux%u_%s", dt, lf_act_name((lf_act)k->act), k->tile_m,
                 k->tile_n, k->family == LF_KF_CUDA_GATED_PINGPONG ? "pingpong" : "offload");
        break;
    case LF_KF_CUDA_GEMV:
        snprintf(buf, cap, "lf::gemv::gated_gemv_%s_%s", dt, lf_act_name((lf_act)k->act));
        break;
    case LF_KF_CPU_QUANT:
    case LF_KF_CUDA_QUANT:
        snprintf(buf, cap, "lf_%s_quantize_fp8_%s_%s", k->family == LF_KF_CPU_QUANT ? "cpu" : "cuda", dt,
                 k->op == LF_SCALE_1X128 ? "1x128" : k->op == LF_SCALE_128X128 ? "128x128" : "rowwise");
        break;
    case LF_KF_CPU_POINTWISE:
    case LF_KF_CUDA_POINTWISE: {
        int act = k->op == LF_PW_ACT || k->op == LF_PW_ACT_MUL;
        char conv[16] = ""; /* a converting copy names both types: copy_f32_to_bf16 */
        if (k->dtype != k->out_dtype)
            snprintf(conv, sizeof conv, "%s_to_", dt);
        snprintf(buf, cap, "lf_%s_%s%s_%s%s%s", k->family == LF_KF_CPU_POINTWISE ? "cpu" : "cuda",
                 act ? lf_act_name((lf_act)k->act) : pw_op_names[k->op], k->op == LF_PW_ACT_MUL ? "_mul" : "", conv,
                 lf_dtype_name((lf_dtype)k->out_dtype), k->flags & LF_KEY_STRIDED ? "_strided" : "");
        break;
    }
    default:
        snprintf(buf, cap, "lf_kernel");
        break;
    }
}

/* --- the interned names --- */

typedef struct name_entry {
    lf_kernel_key key;
    const char *name;
} name_entry;

enum { NAME_TABLE = 4096, NAME_CACHE = 64 };
static name_entry name_table[NAME_TABLE]; /* global, so leak checkers see the strings as reachable */
static int name_count;
static pthread_mutex_t name_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local name_entry name_cache[NAME_CACHE];

/* The entry matching key (and, for LF_KF_NAMED, text), added when missing; call with the lock. */
static const char *find_or_add(const lf_kernel_key *key, const char *text)
{
    for (int i = 0; i < name_count; i++)
        if (!memcmp(&name_table[i].key, key, sizeof *key) && (!text || !strcmp(name_table[i].name, text)))
            return name_table[i].name;
    char buf[160];
    if (!text)
        format_name(key, buf, sizeof buf);
    char *copy = name_count < NAME_TABLE ? strdup(text ? text : buf) : NULL;
    if (!copy)
        return "lf_kernel_name_table_full";
    name_table[name_count++] = (name_entry){*key, copy};
    return copy;
}

const char *lf_kernel_name(const lf_kernel_key *key)
{
    const uint64_t h = lf_fnv1a(key, sizeof *key, LF_FNV_START);
    name_entry *c = &name_cache[h >> 58];
    if (c->name && !memcmp(&c->key, key, sizeof *key))
        return c->name;
    pthread_mutex_lock(&name_lock);
    const char *found = find_or_add(key, NULL);
    pthread_mutex_unlock(&name_lock);
    *c = (name_entry){*key, found};
    return found;
}

const char *lf_kernel_name_intern(const char *name)
{
    lf_kernel_key key = {.family = LF_KF_NAMED};
    pthread_mutex_lock(&name_lock);
    const char *found = find_or_add(&key, name);
    pthread_mutex_unlock(&name_lock);
    return found;
}

