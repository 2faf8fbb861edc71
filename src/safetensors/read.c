/* Reading safetensors checkpoints: one file (file.c reads and maps it) or the shards of an index,
 * tensors looked up by name and handed out as views of the mapping or copies. Layer: safetensors/. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors/st_impl.h"

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
        st_file_free(f);
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
    json_t *j = NULL;
    LF_TRY(st_load_json(index, JSON_REJECT_DUPLICATES, &j));
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
        /* a shard named twice, or under two names (links), is read once: eight links to one file
         * with a 99 MB header cost 4.2 GB and 77 s when each name was parsed again */
        int have = 0;
        struct stat a;
        const int known = stat(path, &a) == 0;
        for (size_t i = 0; i < st->n_files && !have; i++)
            have = !strcmp(st->files[i].path, path) ||
                   (known && st->files[i].dev == (uint64_t)a.st_dev && st->files[i].ino == (uint64_t)a.st_ino);
        if (!have) {
            st_file f;
            s = st_file_open(&f, path);
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
                s = st_file_open(&f, buf);
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
        s = st_file_open(&f, path);
        if (s == LF_OK)
            s = add_file(st, &f);
        if (s == LF_OK)
            s = build_index(st, path);
    }
    if (s == LF_OK && !(st->what = strdup(path)))
        s = lf_fail(LF_ENOMEM, "lf_st_open: out of memory");
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
    f.fd = -1;
    f.map = m;
    f.path = strdup(name);
    uint64_t n = 0;
    lf_status s = f.path ? st_header_len(copy, size, name, &n) : lf_fail(LF_ENOMEM, "out of memory");
    if (s == LF_OK)
        s = st_parse(&f, name, (const unsigned char *)copy + 8, n, size);
    if (s != LF_OK)
        st_file_free(&f);
    else
        s = add_file(st, &f);
    if (s == LF_OK)
        s = build_index(st, name);
    if (s == LF_OK && !(st->what = strdup(name)))
        s = lf_fail(LF_ENOMEM, "lf_st_open_buffer: out of memory");
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
        st_file_free(&st->files[i]);
    free(st->files);
    free(st->refs);
    free(st->what);
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

lf_status st_missing(const lf_safetensors *st, const char *name)
{
    char list[640] = "";
    size_t at = 0;
    for (size_t i = 0; i < st->n_refs && i < 10 && at < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s\"%.40s\"", i ? ", " : "", st->refs[i].name);
    if (at >= sizeof list)
        at = sizeof list - 1;
    if (st->n_refs > 10)
        snprintf(list + at, sizeof list - at, ", ...");
    return lf_fail(LF_EINVAL, "%s: no tensor \"%.200s\"; it holds %zu%s%s", st->what ? st->what : "the checkpoint",
                   name, st->n_refs, st->n_refs ? ": " : "", list);
}

/* Whether tensor t of f is one lf_st_get and lf_st_get_as hand out as it is stored. */
static lf_status gettable(const st_file *f, const st_tensor *t, const char *name)
{
    if (t->dtype < 0)
        return lf_fail(LF_EDTYPE, "%s: tensor \"%.200s\" is %s; linfuse holds BF16, F16, F32 and F8_E4M3%s", f->path,
                       name, t->dtype_name,
                       !strncmp(t->dtype_name, "F8_", 3) ? " (lf_st_get_as reads FP8 weights dequantized)" : "");
    if (t->ndim < 1 || t->ndim > LF_MAX_DIMS)
        return lf_fail(LF_ESHAPE, "%s: tensor \"%.200s\" has %d dims; linfuse tensors have 1 to %d", f->path, name,
                       t->ndim, LF_MAX_DIMS);
    return LF_OK;
}

lf_status st_copy(const lf_safetensors *st, const char *name, lf_tensor **out)
{
    const st_file *f = NULL;
    const st_tensor *t = st_find(st, name, &f);
    if (!t)
        return st_missing(st, name);
    LF_TRY(gettable(f, t, name));
    LF_TRY(lf_tensor_empty(out, (lf_dtype)t->dtype, t->ndim, t->shape, LF_DEVICE_CPU));
    lf_status s = st_read(f, t->begin, (size_t)(t->end - t->begin), lf_tensor_data(*out), name);
    if (s != LF_OK) {
        lf_tensor_free(*out);
        *out = NULL;
    }
    return s;
}

lf_status lf_st_get(const lf_safetensors *st, const char *name, lf_tensor **out)
{
    LF_CHECK_PTR(out, "lf_st_get", "out");
    *out = NULL;
    LF_CHECK_PTR(st, "lf_st_get", "st");
    LF_CHECK_PTR(name, "lf_st_get", "name");
    const st_ref *r = find(st, name);
    if (!r)
        return st_missing(st, name);
    const st_file *f = &st->files[r->file];
    const st_tensor *t = &f->t[r->index];
    LF_TRY(gettable(f, t, name));
    const unsigned char *bytes = f->data + t->begin;
    if ((uintptr_t)bytes % lf_dtype_size((lf_dtype)t->dtype))
        /* the format does not promise aligned data (a header whose length is not padded to 8
         * leaves every tensor off its alignment): such a tensor is copied, not viewed */
        return st_copy(st, name, out);
    atomic_fetch_add_explicit(&f->map->refs, 1, memory_order_relaxed);
    lf_status s = lf_tensor_from_memory(out, (lf_dtype)t->dtype, t->ndim, t->shape, (void *)bytes,
                                        (size_t)(t->end - t->begin), st_map_unref, f->map);
    if (s != LF_OK)
        st_map_unref(f->map);
    return s;
}

int64_t lf_st_file_count(const lf_safetensors *st)
{
    return st ? (int64_t)st->n_files : 0;
}

const char *lf_st_file(const lf_safetensors *st, int64_t i)
{
    return st && i >= 0 && (size_t)i < st->n_files ? st->files[i].path : NULL;
}

const char *lf_st_metadata(const lf_safetensors *st, const char *key)
{
    if (!st || !key || !st->n_files)
        return NULL;
    return json_string_value(json_object_get(st->files[0].metadata, key));
}
