/* Measured plans on disk, as bytes: the format the CUDA backend's GEMM plan cache writes
 * (gemm_tune.c), kept here, apart from CUDA, so that every CPU test and CI can try it with
 * truncated and flipped files. The file: an 8-byte magic, then per plan [key length: u32][key]
 * [plan length: u32][plan][FNV-1a of key and plan: u64], native byte order. A plan is opaque
 * bytes (cuBLASLt's cublasLtMatmulAlgo_t). Layer: backend/. */
#ifndef LF_BACKEND_PLAN_FILE_H
#define LF_BACKEND_PLAN_FILE_H

#include <stddef.h>

typedef struct lf_plan_rec {
    unsigned char *key, *plan;
    size_t key_n, plan_n;
} lf_plan_rec;

typedef struct lf_plan_file {
    lf_plan_rec *recs;
    size_t n, cap;
} lf_plan_file;

enum { LF_PLAN_MAX_BYTES = 4096 }; /* the longest key or plan a file may hold */

/* Read a file's bytes into f (which must be empty): NULL when they are whole, else what is wrong
 * (f is then empty again: a file is trusted whole or not at all). */
const char *lf_plan_file_parse(lf_plan_file *f, const void *bytes, size_t n);
/* Add one plan (copied); 0 when out of memory or a length is 0 or over LF_PLAN_MAX_BYTES. */
int lf_plan_file_add(lf_plan_file *f, const void *key, size_t key_n, const void *plan, size_t plan_n);
/* The plan of plan_n bytes kept for key, or NULL. */
const void *lf_plan_file_find(const lf_plan_file *f, const void *key, size_t key_n, size_t plan_n);
/* The whole file's bytes (caller frees), NULL when out of memory. */
void *lf_plan_file_bytes(const lf_plan_file *f, size_t *n);
void lf_plan_file_free(lf_plan_file *f);

#endif
