/* Inside the safetensors room: a mapped file and its checked header, a checkpoint of one or
 * more of them. Layer: safetensors/. */
#ifndef LF_ST_IMPL_H
#define LF_ST_IMPL_H

#include <jansson.h>
#include <stdatomic.h>

#include "core/core.h"
#include "linfuse/safetensors.h"

/* The file's bytes (mapped, or a copy for lf_st_open_buffer), freed when the checkpoint and every
 * tensor viewing it are gone. */
typedef struct st_map {
    atomic_int refs;
    void *base;
    size_t size;
    int mapped;
} st_map;

typedef struct st_tensor {
    char *name;
    int dtype; /* lf_dtype, or -1 for a dtype linfuse neither computes in nor stores */
    int esize;
    const char *dtype_name;
    int ndim;
    int64_t shape[8];
    uint64_t begin, end; /* within the data section */
} st_tensor;

typedef struct st_file {
    char *path;
    st_map *map;
    const unsigned char *data; /* the data section */
    size_t data_size;
    st_tensor *t;
    size_t n;
    json_t *metadata;
} st_file;

typedef struct st_ref {
    const char *name;
    size_t file, index;
} st_ref;

struct lf_safetensors {
    st_file *files;
    size_t n_files;
    st_ref *refs; /* every tensor, sorted by name */
    size_t n_refs;
};

/* The tensor called name and its file (*file set), or NULL. */
const st_tensor *st_find(const lf_safetensors *st, const char *name, const st_file **file);

#endif
