/* Writing safetensors files (a forward's output, the tests' own checkpoints), and reading the
 * activation a Hugging Face config.json names. Layer: safetensors/. */
#define _GNU_SOURCE /* qsort_r */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors/st_impl.h"

static const char *st_dtype(lf_dtype dt)
{
    return dt == LF_DTYPE_BF16 ? "BF16" : dt == LF_DTYPE_F16 ? "F16" : dt == LF_DTYPE_F8E4M3 ? "F8_E4M3" : "F32";
}

typedef struct wjob {
    const lf_st_entry *e;
    int n;
    lf_tensor **host; /* each tensor contiguous on the host */
    int *order;       /* entries by name */
    char *header;
    size_t header_len; /* padded to 8 bytes with spaces, as the reference writer does */
} wjob;

static int put_file(FILE *f, void *ctx)
{
    const wjob *w = ctx;
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)w->header_len >> (8 * i));
    if (fwrite(len, 1, 8, f) != 8 || fwrite(w->header, 1, w->header_len, f) != w->header_len)
        return -1;
    for (int k = 0; k < w->n; k++) {
        const lf_tensor *t = w->host[w->order[k]];
        size_t bytes = (size_t)lf_tensor_numel(t) * lf_dtype_size(t->dtype);
        if (bytes && fwrite(lf_tensor_data(t), 1, bytes, f) != bytes)
            return -1;
    }
    return 0;
}

static int by_entry_name(const void *a, const void *b, void *ctx)
{
    const lf_st_entry *e = ctx;
    return strcmp(e[*(const int *)a].name, e[*(const int *)b].name);
}

lf_status lf_st_write(const char *path, const lf_st_entry *entries, int n)
{
    LF_CHECK_PTR(path, "lf_st_write", "path");
    LF_CHECK_PTR(entries, "lf_st_write", "entries");
    if (n < 1)
        return lf_fail(LF_EINVAL, "lf_st_write: %d tensors; a file holds at least one", n);
    wjob w = {entries, n, calloc((size_t)n, sizeof *w.host), malloc((size_t)n * sizeof *w.order), NULL, 0};
    json_t *h = json_object();
    lf_status s = w.host && w.order && h ? LF_OK : lf_fail(LF_ENOMEM, "lf_st_write: out of memory");
    for (int i = 0; i < n && s == LF_OK; i++) {
        if (!entries[i].name || !entries[i].t)
            s = lf_fail(LF_EINVAL, "lf_st_write: entry %d has no name or no tensor", i);
        else if (!strcmp(entries[i].name, "__metadata__")) /* the header's own key: the file would not read back */
            s = lf_fail(LF_EINVAL,
                        "lf_st_write: entry %d is named __metadata__, the key safetensors keeps for the "
                        "file's metadata; a tensor cannot have that name",
                        i);
        else
            s = lf_tensor_to_device(&w.host[i], entries[i].t, LF_DEVICE_CPU); /* contiguous, on the host */
        w.order[i] = i;
    }
    if (s == LF_OK) {
        qsort_r(w.order, (size_t)n, sizeof *w.order, by_entry_name, (void *)entries); /* names in order */
        for (int k = 1; k < n && s == LF_OK; k++)
            if (!strcmp(entries[w.order[k]].name, entries[w.order[k - 1]].name)) {
                char shown[256];
                s = lf_fail(LF_EINVAL, "lf_st_write: the name \"%s\" is given twice",
                            lf_term_cut(shown, sizeof shown, entries[w.order[k]].name, 200));
            }
    }
    uint64_t at = 0;
    for (int k = 0; k < n && s == LF_OK; k++) {
        const lf_tensor *t = w.host[w.order[k]];
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        uint64_t bytes = (uint64_t)lf_tensor_numel(t) * lf_dtype_size(t->dtype);
        json_t *off = json_pack("[II]", (json_int_t)at, (json_int_t)(at + bytes));
        json_t *o = json_pack("{s:s,s:o,s:o}", "dtype", st_dtype(t->dtype), "shape", shape, "data_offsets", off);
        if (!o || json_object_set_new(h, entries[w.order[k]].name, o) != 0) {
            char shown[256];
            s = lf_fail(LF_EINVAL, "lf_st_write: cannot describe \"%s\" (a name that is not UTF-8?)",
                        lf_term_cut(shown, sizeof shown, entries[w.order[k]].name, 200));
        }
        at += bytes;
    }
    if (s == LF_OK)
        json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *text = s == LF_OK ? json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (s == LF_OK && !text)
        s = lf_fail(LF_ENOMEM, "lf_st_write: out of memory");
    if (s == LF_OK) {
        size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
        w.header = malloc(padded);
        if (!w.header) {
            s = lf_fail(LF_ENOMEM, "lf_st_write: out of memory");
        } else {
            memcpy(w.header, text, len);
            memset(w.header + len, ' ', padded - len);
            w.header_len = padded;
            s = lf_write_file_atomic(path, put_file, &w);
        }
    }
    free(text);
    json_decref(h);
    for (int i = 0; w.host && i < n; i++)
        lf_tensor_free(w.host[i]);
    free(w.host), free(w.order), free(w.header);
    return s;
}

lf_status lf_hf_config_act(const char *path, lf_act *act)
{
    LF_CHECK_PTR(path, "lf_hf_config_act", "path");
    LF_CHECK_PTR(act, "lf_hf_config_act", "act");
    char cfg[PATH_MAX];
    struct stat sb;
    if (stat(path, &sb) != 0) /* the weights themselves: their parent's config would be the wrong one */
        return lf_fail(LF_EINVAL, "%.300s: %s (the checkpoint: a .safetensors file, its index, or their directory)",
                       path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        snprintf(cfg, sizeof cfg, "%s/config.json", path);
    } else if (strlen(path) >= 11 && !strcmp(path + strlen(path) - 11, "config.json")) {
        snprintf(cfg, sizeof cfg, "%s", path);
    } else { /* a weights file: the config beside it */
        snprintf(cfg, sizeof cfg, "%s", path);
        char *slash = strrchr(cfg, '/');
        if (slash)
            snprintf(slash + 1, sizeof cfg - (size_t)(slash + 1 - cfg), "config.json");
        else
            snprintf(cfg, sizeof cfg, "config.json");
    }
    json_t *j = NULL; /* a FIFO or a device at config.json is refused, not waited on */
    LF_TRY(st_load_json(cfg, 0, &j));
    /* Gemma writes hidden_act "gelu" and hidden_activation "gelu_pytorch_tanh", which is what runs.
     * Gemma-1's first configs have hidden_act "gelu" alone (or hidden_activation null), and
     * transformers runs them with gelu_pytorch_tanh all the same (its GemmaMLP says so in a
     * warning, since its pull request 29402): so does linfuse. */
    const char *key = "hidden_activation", *a = NULL;
    json_t *v = json_object_get(j, key);
    const char *type = json_string_value(json_object_get(j, "model_type"));
    if (json_is_null(v))
        v = NULL;
    if (!v && type && !strcmp(type, "gemma")) {
        a = "gelu_pytorch_tanh";
    } else {
        if (!v)
            key = "hidden_act", v = json_object_get(j, key);
        a = json_string_value(v);
    }
    lf_status s = LF_OK;
    if (!a && (!v || json_is_null(v))) {
        s = lf_fail(LF_EINVAL, "%s: no hidden_act or hidden_activation", cfg);
    } else if (!a) { /* ["silu"], {"name": ...}: there, but not the one name transformers reads */
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        s = lf_fail(LF_EINVAL, "%s: %s is %.80s, not a string naming the activation (as \"silu\")", cfg, key,
                    text ? text : "?");
        free(text);
    } else if (!strcmp(a, "silu") || !strcmp(a, "swish"))
        *act = LF_ACT_SILU;
    else if (!strcmp(a, "gelu_pytorch_tanh") || !strcmp(a, "gelu_new") || !strcmp(a, "gelu_fast"))
        *act = LF_ACT_GELU_TANH;
    else if (!strcmp(a, "gelu"))
        *act = LF_ACT_GELU_ERF;
    else
        s = lf_fail(LF_EINVAL, "%s: hidden activation \"%.60s\" is not silu, gelu_pytorch_tanh or gelu", cfg, a);
    json_decref(j);
    return s;
}
