/* Reading safetensors checkpoints: the file's header read and checked whole with jansson, the
 * file mapped for lf_st_get's views, tensors copied out with pread for everything else (a mapping
 * faults with SIGBUS when another program truncates the file; a read returns short, which is
 * reported), and sharded checkpoints through their index.
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
} dtypes[] = {{"BF16", 2, LF_DTYPE_BF16},
              {"F16", 2, LF_DTYPE_F16},
              {"F32", 4, LF_DTYPE_F32},
              {"F64", 8, -1},
              {"I64", 8, -1},
              {"I32", 4, -1},
              {"I16", 2, -1},
              {"I8", 1, -1},
              {"U64", 8, -1},
              {"U32", 4, -1},
              {"U16", 2, -1},
              {"U8", 1, -1},
              {"BOOL", 1, -1},
              {"F8_E4M3", 1, LF_DTYPE_F8E4M3},
              {"F8_E5M2", 1, -1}};

static int by_begin(const void *a, const void *b)
{
    const st_tensor *x = *(st_tensor *const *)a, *y = *(st_tensor *const *)b;
    return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1) : (x->end < y->end ? -1 : x->end > y->end);
}

/* The format's limit on a header (the reference reader's): a length past it is no safetensors
 * header, and no header is read whole on a hostile file's word. */
enum { ST_MAX_HEADER = 100000000 };

/* Whether the 8 bytes that should be the header's length are text: a file that is no safetensors
 * file at all (a JSON index, a config, a README linked in as a shard). */
static int is_text(const unsigned char *p)
{
    for (int i = 0; i < 8; i++)
        if ((p[i] < 0x20 || p[i] > 0x7e) && p[i] != '\t' && p[i] != '\n' && p[i] != '\r')
            return 0;
    return 1;
}

/* The header length *n from a file's first 8 bytes (of size), checked against the file. */
static lf_status header_len(const unsigned char *p, size_t size, const char *name, uint64_t *n)
{
    if (size < 8)
        return lf_fail(LF_EINVAL, "%s: %zu bytes: not a safetensors file, which starts with an 8-byte header length",
                       name, size);
    *n = 0;
    for (int i = 7; i >= 0; i--)
        *n = *n << 8 | p[i];
    if (*n <= size - 8 && *n <= ST_MAX_HEADER)
        return LF_OK;
    if (is_text(p))
        return lf_fail(LF_EINVAL,
                       "%s: not a safetensors file: it starts with the text \"%.8s\", where a safetensors file starts "
                       "with the 8-byte length of its header",
                       name, (const char *)p);
    if (*n > size - 8)
        return lf_fail(LF_EINVAL,
                       "%s: not a safetensors file, or one cut short: the header length %llu reaches past the end of "
                       "the file (%zu bytes)",
                       name, (unsigned long long)*n, size);
    return lf_fail(LF_EINVAL,
                   "%s: not a safetensors file: a header length of %llu bytes, over the format's limit of %d", name,
                   (unsigned long long)*n, ST_MAX_HEADER);
}

/* One tensor's entry of the header (key: its name, v: its dtype, shape and data_offsets) into t:
 * a known dtype, at most 8 dims that are sizes, offsets inside the data that hold exactly its
 * bytes. */
static lf_status parse_tensor(const st_file *f, const char *name, const char *key, json_t *v, st_tensor *t)
{
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) || !json_is_array(off) ||
        json_array_size(off) != 2)
        return lf_fail(LF_EINVAL,
                       "%s: tensor \"%.200s\" lacks a dtype string, a shape array or data_offsets [begin, end]", name,
                       key);
    t->dtype = -2;
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
        if (!strcmp(json_string_value(dt), dtypes[k].name))
            t->dtype = dtypes[k].lf, t->esize = dtypes[k].size, t->dtype_name = dtypes[k].name;
    if (t->dtype == -2)
        return lf_fail(LF_EINVAL, "%s: tensor \"%.200s\" has an unknown dtype \"%.40s\"", name, key,
                       json_string_value(dt));
    if (json_array_size(shape) > 8)
        return lf_fail(LF_EINVAL, "%s: tensor \"%.200s\" has %zu dims", name, key, json_array_size(shape));
    t->ndim = (int)json_array_size(shape);
    uint64_t elems = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *e = json_array_get(shape, (size_t)d);
        if (!json_is_integer(e) || json_integer_value(e) < 0 ||
            __builtin_mul_overflow(elems, (uint64_t)json_integer_value(e), &elems))
            return lf_fail(LF_EINVAL, "%s: tensor \"%.200s\": shape dim %d is not a size", name, key, d);
        t->shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
    }
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b) || (uint64_t)json_integer_value(e) > f->data_size)
        return lf_fail(LF_EINVAL, "%s: tensor \"%.200s\": data_offsets [%lld, %lld] out of the %zu data bytes", name,
                       key, json_is_integer(b) ? (long long)json_integer_value(b) : -1LL,
                       json_is_integer(e) ? (long long)json_integer_value(e) : -1LL, f->data_size);
    t->begin = (uint64_t)json_integer_value(b), t->end = (uint64_t)json_integer_value(e);
    uint64_t bytes;
    if (__builtin_mul_overflow(elems, (uint64_t)t->esize, &bytes) || bytes != t->end - t->begin)
        return lf_fail(LF_EINVAL, "%s: tensor \"%.200s\": its shape of %s is %llu bytes, its offsets hold %llu", name,
                       key, t->dtype_name, (unsigned long long)elems * (unsigned long long)t->esize,
                       (unsigned long long)(t->end - t->begin));
    if (!(t->name = strdup(key)))
        return lf_fail(LF_ENOMEM, "%s: out of memory", name);
    return LF_OK;
}

/* The data: every byte some tensor's, no two tensors sharing one. */
static lf_status check_coverage(const st_file *f, const char *name)
{
    st_tensor **order = malloc((f->n ? f->n : 1) * sizeof *order);
    if (!order)
        return lf_fail(LF_ENOMEM, "%s: out of memory", name);
    for (size_t i = 0; i < f->n; i++)
        order[i] = &f->t[i];
    qsort(order, f->n, sizeof *order, by_begin);
    lf_status s = LF_OK;
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

/* Check and index a file's header: hdr, its n bytes of JSON (a JSON object of tensors and
 * __metadata__), in a file of size bytes whose data its tensors cover exactly. */
static lf_status parse(st_file *f, const char *name, const unsigned char *hdr, uint64_t n, size_t size)
{
    if (n < 2)
        return lf_fail(LF_EINVAL, "%s: a header of %llu bytes cannot be a JSON object", name, (unsigned long long)n);
    size_t lead = 0;
    while (lead < n && (hdr[lead] == ' ' || hdr[lead] == '\t' || hdr[lead] == '\n' || hdr[lead] == '\r'))
        lead++;
    if (lead == n || hdr[lead] != '{')
        return lf_fail(LF_EINVAL, "%s: not a safetensors file: its header is not a JSON object", name);
    json_error_t err;
    json_t *h = json_loadb((const char *)hdr, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    if (!h) /* jansson refuses bytes that are not UTF-8, and names given twice */
        return lf_fail(LF_EINVAL, "%s: header: %s (at byte %d of the header)", name, err.text, err.position);
    lf_status s = LF_OK;
    if (!json_is_object(h))
        s = lf_fail(LF_EINVAL, "%s: the header is not a JSON object", name);
    f->data_at = 8 + n;
    f->data = f->map->base ? (const unsigned char *)f->map->base + 8 + n : NULL;
    f->data_size = size - 8 - (size_t)n;
    f->size = size;
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
        if (strcmp(key, "__metadata__")) {
            if ((s = parse_tensor(f, name, key, v, &f->t[f->n])) == LF_OK)
                f->n++;
        } else if (!json_is_object(v)) {
            s = lf_fail(LF_EINVAL, "%s: __metadata__ is not an object", name);
        } else {
            f->metadata = json_incref(v);
        }
    }
    json_decref(h);
    return s == LF_OK ? check_coverage(f, name) : s;
}

static void file_free(st_file *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->t[i].name);
    free(f->t);
    json_decref(f->metadata);
    map_unref(f->map);
    if (f->fd >= 0)
        close(f->fd);
    free(f->path);
}

static const char *file_kind(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "a special file";
}

lf_status st_open_regular(const char *path, int *fd, struct stat *sb)
{
    struct stat own;
    if (!sb)
        sb = &own;
    *fd = -1;
    /* stat first, so a FIFO is not even opened (opening one wakes a writer waiting on it); then
     * open without blocking and check again, in case the path changed between the two */
    if (stat(path, sb) == 0 && !S_ISREG(sb->st_mode))
        return lf_fail(LF_EINVAL, "%s: %s, not a regular file: refused", path, file_kind(sb->st_mode));
    *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0)
        return lf_fail(LF_EINVAL, "%s: %s", path, strerror(errno));
    lf_status s = LF_OK;
    if (fstat(*fd, sb) != 0)
        s = lf_fail(LF_EINVAL, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(sb->st_mode))
        s = lf_fail(LF_EINVAL, "%s: %s, not a regular file: refused", path, file_kind(sb->st_mode));
    if (s != LF_OK) {
        close(*fd);
        *fd = -1;
        return s;
    }
    const int fl = fcntl(*fd, F_GETFL); /* a regular file reads the same either way; blocking, as usual */
    if (fl >= 0)
        (void)fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK);
    return LF_OK;
}

/* n bytes at offset at of fd into dst; the number read (short at the end of the file), or -1. */
static ssize_t pread_all(int fd, void *dst, size_t n, uint64_t at)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)dst + got, n - got, (off_t)(at + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

lf_status st_read(const st_file *f, uint64_t begin, size_t n, void *dst, const char *what)
{
    if (!n)
        return LF_OK;
    if (f->fd < 0) { /* a buffer: the copy lf_st_open_buffer made */
        memcpy(dst, f->data + begin, n);
        return LF_OK;
    }
    const ssize_t got = pread_all(f->fd, dst, n, f->data_at + begin);
    if (got < 0)
        return lf_fail(LF_EINVAL, "%s: reading tensor \"%.200s\": %s", f->path, what, strerror(errno));
    if ((size_t)got < n)
        return lf_fail(LF_EINVAL,
                       "%s: the file ended at byte %llu while reading tensor \"%.200s\" (bytes %llu to %llu of the %zu "
                       "it had when opened): cut short since?",
                       f->path, (unsigned long long)(f->data_at + begin + (uint64_t)got), what,
                       (unsigned long long)(f->data_at + begin), (unsigned long long)(f->data_at + begin + n), f->size);
    return LF_OK;
}

/* Open path, check its header (read with pread) and map it for lf_st_get's views. The data is
 * never touched here: a file cut short later faults only through those views. */
static lf_status file_open(st_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    struct stat sb;
    int fd;
    LF_TRY(st_open_regular(path, &fd, &sb));
    const size_t size = (size_t)sb.st_size;
    f->dev = (uint64_t)sb.st_dev, f->ino = (uint64_t)sb.st_ino;
    unsigned char len[8];
    uint64_t n = 0;
    const ssize_t got = pread_all(fd, len, sizeof len, 0);
    lf_status s = got < 0 ? lf_fail(LF_EINVAL, "%s: %s", path, strerror(errno))
                          : header_len(len, (size_t)got < sizeof len ? (size_t)got : size, path, &n);
    unsigned char *hdr = s == LF_OK ? malloc(n ? (size_t)n : 1) : NULL;
    if (s == LF_OK && !hdr)
        s = lf_fail(LF_ENOMEM, "%s: out of memory for a header of %llu bytes", path, (unsigned long long)n);
    if (s == LF_OK && pread_all(fd, hdr, (size_t)n, 8) != (ssize_t)n)
        s = lf_fail(LF_EINVAL, "%s: the file ended inside its header: cut short while being opened?", path);
    st_map *m = s == LF_OK ? calloc(1, sizeof *m) : NULL;
    if (s == LF_OK && !m)
        s = lf_fail(LF_ENOMEM, "%s: out of memory", path);
    if (s != LF_OK) {
        free(hdr);
        close(fd);
        return s;
    }
    atomic_init(&m->refs, 1);
    m->size = size;
    /* private and writable: a tensor written to changes this process's page, never the file */
    m->base = m->size ? mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) : NULL;
    if (m->size && m->base == MAP_FAILED) {
        const int err = errno;
        free(m), free(hdr);
        close(fd);
        return lf_fail(LF_EINVAL, "%s: cannot map it: %s", path, strerror(err));
    }
    m->mapped = m->size != 0;
    f->map = m;
    f->fd = fd;
    f->path = strdup(path);
    s = f->path ? parse(f, path, hdr, n, size) : lf_fail(LF_ENOMEM, "out of memory");
    free(hdr);
    if (s != LF_OK)
        file_free(f);
    return s;
}

lf_status st_load_json(const char *path, size_t flags, json_t **out)
{
    int fd;
    LF_TRY(st_open_regular(path, &fd, NULL));
    json_error_t err;
    *out = json_loadfd(fd, flags, &err);
    close(fd);
    if (!*out)
        return lf_fail(LF_EINVAL, "%s: %s (line %d)", path, err.text, err.line);
    return LF_OK;
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
    lf_status s = f.path ? header_len(copy, size, name, &n) : lf_fail(LF_ENOMEM, "out of memory");
    if (s == LF_OK)
        s = parse(&f, name, (const unsigned char *)copy + 8, n, size);
    if (s != LF_OK)
        file_free(&f);
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
        file_free(&st->files[i]);
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
                                        (size_t)(t->end - t->begin), map_unref, f->map);
    if (s != LF_OK)
        map_unref(f->map);
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
