/* Inside the safetensors room: a mapped file and its checked header, a checkpoint of one or
 * more of them. Layer: safetensors/. */
#ifndef LF_ST_IMPL_H
#define LF_ST_IMPL_H

#include <jansson.h>
#include <stdatomic.h>
#include <sys/stat.h>

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
    int fd;                    /* the file, read with pread; -1 for a buffer */
    const unsigned char *data; /* the data section (NULL for an empty file) */
    size_t data_size;
    uint64_t data_at;  /* the data section's first byte in the file */
    size_t size;       /* the file's bytes when it was opened */
    uint64_t dev, ino; /* which file it is, under any name (an index's shards are read once each) */
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
    char *what; /* the path it was opened from (or the buffer's name), for messages */
};

/* --- one file (file.c) --- */
/* Open path, check its header (read with pread) and map it for lf_st_get's views. */
lf_status st_file_open(st_file *f, const char *path);
/* The header length *n from a file's first 8 bytes (of size), checked against the file. */
lf_status st_header_len(const unsigned char *p, size_t size, const char *name, uint64_t *n);
/* Check and index a file's header: hdr, its n bytes of JSON, in a file of size bytes whose data
 * its tensors cover exactly. */
lf_status st_parse(st_file *f, const char *name, const unsigned char *hdr, uint64_t n, size_t size);
/* Its tensors' names and metadata freed, its reference on the mapping dropped. */
void st_file_free(st_file *f);
/* A reference on a mapping dropped (the last unmaps or frees it); a tensor's release callback. */
void st_map_unref(void *ctx);
/* Bytes [begin, begin + n) of f's data section copied into dst: read from the file (pread), never
 * through the mapping, so a file cut short since it was opened is an LF_EINVAL naming it and the
 * tensor (what), not a SIGBUS. */
lf_status st_read(const st_file *f, uint64_t begin, size_t n, void *dst, const char *what);

/* Open path for reading only if it is a regular file: opened without blocking (a FIFO with no
 * writer would block open() forever), then its type checked; anything else an LF_EINVAL that
 * names it and what it is. *fd is closed by the caller. sb may be NULL. */
lf_status st_open_regular(const char *path, int *fd, struct stat *sb);
/* A JSON file (an index, a config.json) read through st_open_regular; jansson's flags. */
lf_status st_load_json(const char *path, size_t flags, json_t **out);

/* --- a checkpoint (read.c) --- */
/* The tensor called name and its file (*file set), or NULL. */
const st_tensor *st_find(const lf_safetensors *st, const char *name, const st_file **file);

/* "<what>: no tensor "name"; it holds N: a few of its names": an LF_EINVAL. */
lf_status st_missing(const lf_safetensors *st, const char *name);
/* Tensor name as a CPU tensor of its own in its stored dtype, read with st_read. */
lf_status st_copy(const lf_safetensors *st, const char *name, lf_tensor **out);

#endif
