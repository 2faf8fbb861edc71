/* A safetensors file: its header read and checked whole with jansson, the file mapped for
 * lf_st_get's views (the mapping shared by the checkpoint and every tensor it handed out), and
 * tensors' bytes read with pread (a mapping faults with SIGBUS when another program truncates the
 * file; a read returns short, which is reported). read.c opens checkpoints of one or more of
 * them. Hand-written because no C library for the format is packaged in Debian (the reference one
 * is Rust); the JSON is jansson's. Layer: safetensors/. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors/st_impl.h"

/* --- a mapped file: shared by the checkpoint and every tensor it handed out --- */

void st_map_unref(void *ctx)
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
lf_status st_header_len(const unsigned char *p, size_t size, const char *name, uint64_t *n)
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
lf_status st_parse(st_file *f, const char *name, const unsigned char *hdr, uint64_t n, size_t size)
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

void st_file_free(st_file *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->t[i].name);
    free(f->t);
    json_decref(f->metadata);
    st_map_unref(f->map);
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
lf_status st_file_open(st_file *f, const char *path)
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
                          : st_header_len(len, (size_t)got < sizeof len ? (size_t)got : size, path, &n);
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
    s = f->path ? st_parse(f, path, hdr, n, size) : lf_fail(LF_ENOMEM, "out of memory");
    free(hdr);
    if (s != LF_OK)
        st_file_free(f);
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
