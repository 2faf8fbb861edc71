/* Reading safetensors checkpoints: the file mapped, its header checked whole with jansson, its
 * tensors handed out as views of the mapping, and sharded checkpoints through their index.
 * Hand-written because no C library for the format is packaged in Debian (the reference one is
 * Rust); the JSON is jansson's. Layer: safetensors/. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors/st_impl.h"

/* --- a mapped file: shared by the checkpoint and every tensor it handed out --- */

static void map_unref(void *ctx)
{
    st_map *m = ctx;
    if (m && atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1) {
        if (m->mapped)
            munmap(m->base, m->size);
        else
            free(m->base);
        free(m);
    }
}

static const struct {
    const char *name;
    int size; /* bytes per element */
    int lf;   /* lf_dtype, or -1: a dtype linfuse neither computes in nor stores */
} dtypes[] = {{"BF16", 2, LF_DTYPE_BF16}, {"F16", 2, LF_DTYPE_F16}, {"F32", 4, LF_DTYPE_F32}, {"F64", 8, -1},
              {"I64", 8, -1},  {"I32", 4, -1},  {"I16", 2, -1},  {"I8", 1, -1},  {"U64", 8, -1},
              {"U32", 4, -1},  {"U16", 2, -1},  {"U8", 1, -1},   {"BOOL", 1, -1}, {"F8_E4M3", 1, LF_DTYPE_F8E4M3},
              {"F8_E5M2", 1, -1}};

static int by_begin(const void *a, const void *b)
{
    const st_tensor *x = *(st_tensor *const *)a, *y = *(st_tensor *const *)b;
    return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1) : (x->end < y->end ? -1 : x->end > y->end);
}

/* Check and index the header of a file in memory. */
static lf_status parse(st_file *f, const char *name)
{
    const unsigned char *p = f->map->base;
    const size_t size = f->map->size;
    if (size < 8)
        return lf_fail(LF_EINVAL, "%s: %zu bytes: a safetensors file starts with an 8-byte header length", name, size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | p[i];
    if (n > size - 8)
        return lf_fail(LF_EINVAL, "%s: the header length %llu reaches past the end of the file (%zu bytes): truncated?",
                       name, (unsigned long long)n, size);
    if (n < 2)
        return lf_fail(LF_EINVAL, "%s: a header of %llu bytes cannot be a JSON object", name, (unsigned long long)n);
    json_error_t err;
    json_t *h = json_loadb((const char *)p + 8, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    if (!h) /* jansson refuses bytes that are not UTF-8, and names given twice */
        return lf_fail(LF_EINVAL, "%s: header: %s (at byte %d of the header)", name, err.text, err.position);
    lf_status s = LF_OK;
    if (!json_is_object(h))
        s = lf_fail(LF_EINVAL, "%s: the header is not a JSON object", name);
    f->data = p + 8 + n;
    f->data_size = size - 8 - (size_t)n;
    size_t cap = s == LF_OK ? json_object_size(h) : 0;
    f->t = calloc(cap ? cap : 1, sizeof *f->t);
    if (!f->t && s == LF_OK)
        s = lf_fail(LF_ENOMEM, "%s: out of memory", name);
    const char *key;
    json_t *v;
    json_object_foreach(h, key, v)
    {
        if (s != LF_OK)
            break;
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(v)) {
                s = lf_fail(LF_EINVAL, "%s: __metadata__ is not an object", name);
            } else {
                f->metadata = json_incref(v);
            }
            continue;
        }
        st_tensor *t = &f->t[f->n];
        json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
               *off = json_object_get(v, "data_offsets");
        if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) || !json_is_array(off) ||
            json_array_size(off) != 2) {
            s = lf_fail(LF_EINVAL, "%s: tensor \"%.200s\" lacks a dtype string, a shape array or data_offsets [begin, end]",
                        name, key);
            break;
        }
        t->dtype = -2;
        for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
            if (!strcmp(json_string_value(dt), dtypes[k].name))
                t->dtype = dtypes[k].lf, t->esize = dtypes[k].size, t->dtype_name = dtypes[k].name;
        if (t->dtype == -2) {
            s = lf_fail(LF_EINVAL, "%s: tensor \"%.200s\" has an unknown dtype \"%.40s\"", name, key,
                        json_string_value(dt));
            break;
        }
        if (json_array_size(shape) > 8) {
            s = lf_fail(LF_EINVAL, "%s: tensor \"%.200s\" has %zu dims", name, key, json_array_size(shape));
            break;
        }
        t->ndim = (int)json_array_size(shape);
        uint64_t elems = 1;
        for (int d = 0; d < t->ndim && s == LF_OK; d++) {
            json_t *e = json_array_get(shape, (size_t)d);
            if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                __builtin_mul_overflow(elems, (uint64_t)json_integer_value(e), &elems))
                s = lf_fail(LF_EINVAL, "%s: tensor \"%.200s\": shape dim %d is not a size", name, key, d);
            else
                t->shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
        }
        json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
        if (s == LF_OK && (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
                           json_integer_value(e) < json_integer_value(b) ||
                           (uint64_t)json_integer_value(e) > f->data_size))
            s = lf_fail(LF_EINVAL, "%s: tensor \"%.200s\": data_offsets [%lld, %lld] out of the %zu data bytes", name, key,
                        json_is_integer(b) ? (long long)json_integer_value(b) : -1LL,
                        json_is_integer(e) ? (long long)json_integer_value(e) : -1LL, f->data_size);
        if (s != LF_OK)
            break;
        t->begin = (uint64_t)json_integer_value(b), t->end = (uint64_t)json_integer_value(e);
        uint64_t bytes;
        if (__builtin_mul_overflow(elems, (uint64_t)t->esize, &bytes) || bytes != t->end - t->begin) {
            s = lf_fail(LF_EINVAL, "%s: tensor \"%.200s\": its shape of %s is %llu bytes, its offsets hold %llu", name,
                        key, t->dtype_name, (unsigned long long)elems * (unsigned long long)t->esize,
                        (unsigned long long)(t->end - t->begin));
            break;
        }
        if (!(t->name = strdup(key)))
            s = lf_fail(LF_ENOMEM, "%s: out of memory", name);
        else
            f->n++;
    }
    json_decref(h);
    /* the data: every byte some tensor's, no two tensors sharing one */
    st_tensor **order = s == LF_OK ? malloc((f->n ? f->n : 1) * sizeof *order) : NULL;
    if (s == LF_OK && !order)
        s = lf_fail(LF_ENOMEM, "%s: out of memory", name);
    for (size_t i = 0; s == LF_OK && i < f->n; i++)
        order[i] = &f->t[i];
    if (s == LF_OK)
        qsort(order, f->n, sizeof *order, by_begin);
    uint64_t at = 0;
    for (size_t i = 0; s == LF_OK && i < f->n; i++) {
        if (order[i]->begin < at)
            s = lf_fail(LF_EINVAL, "%s: tensors \"%.200s\" and \"%.200s\" overlap", name, order[i - 1]->name,
                        order[i]->name);
        else if (order[i]->begin > at)
            s = lf_fail(LF_EINVAL, "%s: data bytes %llu to %llu belong to no tensor", name, (unsigned long long)at,
                        (unsigned long long)order[i]->begin);
        at = order[i]->end > at ? order[i]->end : at;
    }
    if (s == LF_OK && at != f->data_size)
        s = lf_fail(LF_EINVAL, "%s: the file has %llu bytes after the last tensor's data", name,
                    (unsigned long long)(f->data_size - at));
    free(order);
    return s;
}

static void file_free(st_file *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->t[i].name);
    free(f->t);
    json_decref(f->metadata);
    map_unref(f->map);
    free(f->path);
}

/* Map path and check it. */
static lf_status file_open(st_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return lf_fail(LF_EINVAL, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return lf_fail(LF_EINVAL, "%s: not a regular file", path);
    }
    st_map *m = calloc(1, sizeof *m);
    if (!m) {
        close(fd);
        return lf_fail(LF_ENOMEM, "%s: out of memory", path);
    }
    atomic_init(&m->refs, 1);
    m->size = (size_t)sb.st_size;
    /* private and writable: a tensor written to changes this process's page, never the file */
    m->base = m->size ? mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) : NULL;
    int err = errno;
    close(fd);
    if (m->size && m->base == MAP_FAILED) {
        free(m);
        return lf_fail(LF_EINVAL, "%s: cannot map it: %s", path, strerror(err));
    }
    m->mapped = m->size != 0;
    f->map = m;
    f->path = strdup(path);
    lf_status s = f->path ? parse(f, path) : lf_fail(LF_ENOMEM, "out of memory");
    if (s != LF_OK)
        file_free(f);
    return s;
}

/* --- a checkpoint: one file or the shards of an index --- */

static lf_safetensors *new_st(void)
{
    lf_safetensors *st = calloc(1, sizeof *st);
    return st;
}

static lf_status add_file(lf_safetensors *st, st_file *f)
{
    st_file *nf = realloc(st->files, (st->n_files + 1) * sizeof *nf);
    if (!nf) {
        file_free(f);
        return lf_fail(LF_ENOMEM, "safetensors: out of memory");
    }
    st->files = nf;
    st->files[st->n_files++] = *f;
    return LF_OK;
}

/* The index: one entry per tensor (file, position), by name; duplicates across shards refused. */
static int by_name(const void *a, const void *b)
{
    return strcmp(((const st_ref *)a)->name, ((const st_ref *)b)->name);
}

static lf_status build_index(lf_safetensors *st, const char *what)
{
    size_t n = 0;
    for (size_t i = 0; i < st->n_files; i++)
        n += st->files[i].n;
    st->refs = calloc(n ? n : 1, sizeof *st->refs);
    if (!st->refs)
        return lf_fail(LF_ENOMEM, "%s: out of memory", what);
    for (size_t i = 0; i < st->n_files; i++)
        for (size_t k = 0; k < st->files[i].n; k++)
            st->refs[st->n_refs++] = (st_ref){st->files[i].t[k].name, i, k};
    qsort(st->refs, st->n_refs, sizeof *st->refs, by_name);
    for (size_t i = 1; i < st->n_refs; i++)
        if (!strcmp(st->refs[i].name, st->refs[i - 1].name))
            return lf_fail(LF_EINVAL, "%s: tensor \"%.200s\" is in %s and in %s", what, st->refs[i].name,
                           st->files[st->refs[i - 1].file].path, st->files[st->refs[i].file].path);
    return LF_OK;
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* A sharded checkpoint's index: {"weight_map": {"name": "model-00001-of-00002.safetensors"}} */
static lf_status open_index(lf_safetensors *st, const char *index)
{
    json_error_t err;
    json_t *j = json_load_file(index, JSON_REJECT_DUPLICATES, &err);
    if (!j)
        return lf_fail(LF_EINVAL, "%s: %s (line %d)", index, err.text, err.line);
    json_t *wm = json_object_get(j, "weight_map");
    lf_status s = json_is_object(wm) ? LF_OK : lf_fail(LF_EINVAL, "%s: no \"weight_map\" object", index);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", index);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = '\0';
    else
        dir[0] = '\0';
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v)
    {
        if (s != LF_OK)
            break;
        if (!json_is_string(v) || strchr(json_string_value(v), '/')) {
            s = lf_fail(LF_EINVAL, "%s: \"%.200s\" maps to no shard file name in the index's directory", index, name);
            break;
        }
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s%s", dir, json_string_value(v)) >= (int)sizeof path) {
            s = lf_fail(LF_EINVAL, "%s: a shard's path is too long", index);
            break;
        }
        int have = 0;
        for (size_t i = 0; i < st->n_files && !have; i++)
            have = !strcmp(st->files[i].path, path);
        if (!have) {
            st_file f;
            s = file_open(&f, path);
            if (s == LF_OK)
                s = add_file(st, &f);
        }
    }
    if (s == LF_OK)
        s = build_index(st, index);
    /* every name the index lists is where it says */
    json_object_foreach(wm, name, v)
    {
        if (s != LF_OK)
            break;
        if (!lf_st_has(st, name))
            s = lf_fail(LF_EINVAL, "%s: \"%.200s\" is listed but no shard holds it", index, name);
    }
    json_decref(j);
    return s;
}

lf_status lf_st_open(lf_safetensors **out, const char *path)
{
    LF_CHECK_PTR(out, "lf_st_open", "out");
    *out = NULL;
    LF_CHECK_PTR(path, "lf_st_open", "path");
    lf_safetensors *st = new_st();
    if (!st)
        return lf_fail(LF_ENOMEM, "lf_st_open: out of memory");
    struct stat sb;
    char buf[PATH_MAX];
    lf_status s;
    if (stat(path, &sb) != 0) {
        s = lf_fail(LF_EINVAL, "%s: %s", path, strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) { /* a model directory: the index, else the one file */
        snprintf(buf, sizeof buf, "%s/model.safetensors.index.json", path);
        if (access(buf, R_OK) == 0) {
            s = open_index(st, buf);
        } else {
            snprintf(buf, sizeof buf, "%s/model.safetensors", path);
            if (access(buf, R_OK) != 0) {
                s = lf_fail(LF_EINVAL, "%s: holds neither model.safetensors nor model.safetensors.index.json", path);
            } else {
                st_file f;
                s = file_open(&f, buf);
                if (s == LF_OK)
                    s = add_file(st, &f);
                if (s == LF_OK)
                    s = build_index(st, buf);
            }
        }
    } else if (ends_with(path, ".json")) {
        s = open_index(st, path);
    } else {
        st_file f;
        s = file_open(&f, path);
        if (s == LF_OK)
            s = add_file(st, &f);
        if (s == LF_OK)
            s = build_index(st, path);
    }
    if (s != LF_OK) {
        lf_st_close(st);
        return s;
    }
    *out = st;
    return LF_OK;
}

lf_status lf_st_open_buffer(lf_safetensors **out, const void *data, size_t size, const char *name)
{
    LF_CHECK_PTR(out, "lf_st_open_buffer", "out");
    *out = NULL;
    LF_CHECK_PTR(data, "lf_st_open_buffer", "data");
    if (!name)
        name = "(buffer)";
    lf_safetensors *st = new_st();
    st_map *m = calloc(1, sizeof *m);
    void *copy = malloc(size ? size : 1);
    if (!st || !m || !copy) {
        free(st), free(m), free(copy);
        return lf_fail(LF_ENOMEM, "lf_st_open_buffer: out of memory");
    }
    memcpy(copy, data, size);
    atomic_init(&m->refs, 1);
    m->base = copy, m->size = size;
    st_file f = {0};
    f.map = m;
    f.path = strdup(name);
    lf_status s = f.path ? parse(&f, name) : lf_fail(LF_ENOMEM, "out of memory");
    if (s != LF_OK)
        file_free(&f);
    else
        s = add_file(st, &f);
    if (s == LF_OK)
        s = build_index(st, name);
    if (s != LF_OK) {
        lf_st_close(st);
        return s;
    }
    *out = st;
    return LF_OK;
}

void lf_st_close(lf_safetensors *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n_files; i++)
        file_free(&st->files[i]);
    free(st->files);
    free(st->refs);
    free(st);
}

static const st_ref *find(const lf_safetensors *st, const char *name)
{
    st_ref key = {name, 0, 0};
    return st && name ? bsearch(&key, st->refs, st->n_refs, sizeof key, by_name) : NULL;
}

const st_tensor *st_find(const lf_safetensors *st, const char *name, const st_file **file)
{
    const st_ref *r = find(st, name);
    if (!r)
        return NULL;
    *file = &st->files[r->file];
    return &st->files[r->file].t[r->index];
}

int64_t lf_st_count(const lf_safetensors *st)
{
    return st ? (int64_t)st->n_refs : 0;
}

const char *lf_st_name(const lf_safetensors *st, int64_t i)
{
    return st && i >= 0 && (size_t)i < st->n_refs ? st->refs[i].name : NULL;
}

int lf_st_has(const lf_safetensors *st, const char *name)
{
    return find(st, name) != NULL;
}

const char *lf_st_dtype(const lf_safetensors *st, const char *name)
{
    const st_ref *r = find(st, name);
    return r ? st->files[r->file].t[r->index].dtype_name : NULL;
}

int lf_st_shape(const lf_safetensors *st, const char *name, int64_t shape[8])
{
    const st_ref *r = find(st, name);
    if (!r || !shape)
        return -1;
    const st_tensor *t = &st->files[r->file].t[r->index];
    memcpy(shape, t->shape, sizeof t->shape);
    return t->ndim;
}

lf_status lf_st_get(const lf_safetensors *st, const char *name, lf_tensor **out)
{
    LF_CHECK_PTR(out, "lf_st_get", "out");
    *out = NULL;
    LF_CHECK_PTR(st, "lf_st_get", "st");
    LF_CHECK_PTR(name, "lf_st_get", "name");
    const st_ref *r = find(st, name);
    if (!r)
        return lf_fail(LF_EINVAL, "lf_st_get: the checkpoint has no tensor \"%.200s\"", name);
    const st_file *f = &st->files[r->file];
    const st_tensor *t = &f->t[r->index];
    if (t->dtype < 0)
        return lf_fail(LF_EDTYPE, "%s: tensor \"%.200s\" is %s; linfuse holds BF16, F16, F32 and F8_E4M3%s", f->path,
                       name, t->dtype_name,
                       !strncmp(t->dtype_name, "F8_", 3) ? " (lf_st_get_as reads FP8 weights dequantized)" : "");
    if (t->ndim < 1 || t->ndim > LF_MAX_DIMS)
        return lf_fail(LF_ESHAPE, "%s: tensor \"%.200s\" has %d dims; linfuse tensors have 1 to %d", f->path, name,
                       t->ndim, LF_MAX_DIMS);
    const unsigned char *bytes = f->data + t->begin;
    if ((uintptr_t)bytes % lf_dtype_size((lf_dtype)t->dtype)) {
        /* the format does not promise aligned data (a header whose length is not padded to 8
         * leaves every tensor off its alignment): such a tensor is copied, not viewed */
        LF_TRY(lf_tensor_empty(out, (lf_dtype)t->dtype, t->ndim, t->shape, LF_DEVICE_CPU));
        memcpy(lf_tensor_data(*out), bytes, (size_t)(t->end - t->begin));
        return LF_OK;
    }
    atomic_fetch_add_explicit(&f->map->refs, 1, memory_order_relaxed);
    lf_status s = lf_tensor_from_memory(out, (lf_dtype)t->dtype, t->ndim, t->shape, (void *)bytes,
                                        (size_t)(t->end - t->begin), map_unref, f->map);
    if (s != LF_OK)
        map_unref(f->map);
    return s;
}

const char *lf_st_metadata(const lf_safetensors *st, const char *key)
{
    if (!st || !key || !st->n_files)
        return NULL;
    return json_string_value(json_object_get(st->files[0].metadata, key));
}
