/* Kernel names, interned: the text of each distinct kernel's name is formatted once, by the namer
 * of the backend that owns it, and kept for the life of the process; activation names, and the
 * pieces namers share. Layer: backend/. */
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

const char *lf_kernel_pw_op_name(int op)
{
    return (unsigned)op < LF_PW_COUNT ? pw_op_names[op] : "?";
}

void lf_kernel_gemm_suffix(const lf_kernel_key *k, char *buf, size_t cap)
{
    const char *scaled = !(k->flags & LF_KEY_SCALED) ? "" : k->flags & LF_KEY_BLOCKS ? "_blockwise" : "_rowwise";
    snprintf(buf, cap, "%c%c%s%s%s%s%s%s", k->lay_b, k->lay_a, scaled, k->flags & LF_KEY_C ? "_c" : "",
             k->flags & LF_KEY_BIAS ? "_bias" : "", k->act != LF_ACT_NONE ? "_" : "",
             k->act != LF_ACT_NONE ? lf_act_name((lf_act)k->act) : "", k->flags & LF_KEY_GATED ? "_gated" : "");
}

/* --- the interned names --- */

/* A name's identity: its namer (which backend spells it; NULL for a name given whole) and key. */
typedef struct name_entry {
    lf_kernel_namer namer;
    lf_kernel_key key;
    const char *name;
} name_entry;

enum { NAME_TABLE = 4096, NAME_CACHE = 64 };
static name_entry name_table[NAME_TABLE]; /* global, so leak checkers see the strings as reachable */
static int name_count;
static pthread_mutex_t name_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local name_entry name_cache[NAME_CACHE];

/* The entry matching namer and key (and, with no namer, text), added when missing; call with the
 * lock. */
static const char *find_or_add(lf_kernel_namer namer, const lf_kernel_key *key, const char *text)
{
    for (int i = 0; i < name_count; i++)
        if (name_table[i].namer == namer && !memcmp(&name_table[i].key, key, sizeof *key) &&
            (namer || !strcmp(name_table[i].name, text)))
            return name_table[i].name;
    char buf[160];
    if (namer)
        namer(key, buf, sizeof buf);
    char *copy = name_count < NAME_TABLE ? strdup(namer ? buf : text) : NULL;
    if (!copy)
        return "lf_kernel_name_table_full";
    name_table[name_count++] = (name_entry){namer, *key, copy};
    return copy;
}

const char *lf_kernel_name(lf_kernel_namer namer, const lf_kernel_key *key)
{
    const uint64_t h = lf_fnv1a(key, sizeof *key, lf_fnv1a(&namer, sizeof namer, LF_FNV_START));
    name_entry *c = &name_cache[h >> 58];
    if (c->name && c->namer == namer && !memcmp(&c->key, key, sizeof *key))
        return c->name;
    pthread_mutex_lock(&name_lock);
    const char *found = find_or_add(namer, key, NULL);
    pthread_mutex_unlock(&name_lock);
    *c = (name_entry){namer, *key, found};
    return found;
}

const char *lf_kernel_name_intern(const char *name)
{
    lf_kernel_key key = {0};
    pthread_mutex_lock(&name_lock);
    const char *found = find_or_add(NULL, &key, name);
    pthread_mutex_unlock(&name_lock);
    return found;
}
