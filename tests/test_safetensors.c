/* safetensors files: what the writer writes the reader reads back exactly (every dtype, views
 * written contiguous, sharded checkpoints through their index); every malformed file a clear
 * error naming what is wrong; config.json's activation; a Hugging Face MLP loaded by its names
 * and run in every variant against float64. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "linfuse/safetensors.h"
#include "testutil.h"

static int same_bytes(const lf_tensor *a, const lf_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim || memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]))
        return 0;
    lf_tensor *ca = NULL, *cb = NULL;
    if (lf_contiguous(&ca, a) != LF_OK || lf_contiguous(&cb, b) != LF_OK)
        return 0;
    int same = !memcmp(lf_tensor_data(ca), lf_tensor_data(cb), (size_t)lf_tensor_numel(a) * lf_dtype_size(a->dtype));
    lf_tensor_free(ca), lf_tensor_free(cb);
    return same;
}

static void test_round_trip(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 4);
    int64_t s1[1] = {7}, s2[2] = {5, 3}, s3[3] = {2, 3, 4}, s4[4] = {1, 2, 1, 3};
    lf_tensor *a = rand_tensor(&rng, LF_DTYPE_BF16, 2, s2), *b = rand_tensor(&rng, LF_DTYPE_F16, 1, s1),
              *c = rand_tensor(&rng, LF_DTYPE_F32, 3, s3), *d = rand_tensor(&rng, LF_DTYPE_F32, 4, s4), *at_ = NULL;
    OK(lf_t(&at_, a)); /* a transposed view: written contiguous */
    lf_st_entry e[] = {{"b.weight", b}, {"a", a}, {"z.transposed", at_}, {"c", c}, {"model.layers.0.d", d}};
    OK(lf_st_write(lf_test_path("one.safetensors"), e, 5));
    lf_safetensors *st = NULL;
    OK(lf_st_open(&st, lf_test_path("one.safetensors")));
    CHECK(lf_st_count(st) == 5, "5 tensors, got %lld", (long long)lf_st_count(st));
    CHECK(!strcmp(lf_st_name(st, 0), "a") && lf_st_name(st, 5) == NULL, "names sorted, NULL past the end");
    CHECK(lf_st_metadata(st, "format") && !strcmp(lf_st_metadata(st, "format"), "pt"), "__metadata__ format pt");
    for (int i = 0; i < 5; i++) {
        lf_tensor *t = NULL;
        OK(lf_st_get(st, e[i].name, &t));
        CHECK(t && same_bytes(t, e[i].t), "%s read back exactly", e[i].name);
        CHECK(t && lf_tensor_device(t) == LF_DEVICE_CPU && lf_tensor_is_contiguous(t), "%s: a contiguous CPU view",
              e[i].name);
        lf_tensor_free(t);
    }
    /* a tensor outlives its checkpoint (it holds the mapping); writing it never changes the file */
    lf_tensor *keep = NULL;
    OK(lf_st_get(st, "c", &keep));
    lf_st_close(st);
    OK(lf_tensor_fill(keep, 42.0f));
    OK(lf_st_open(&st, lf_test_path("one.safetensors")));
    lf_tensor *again = NULL;
    OK(lf_st_get(st, "c", &again));
    CHECK(same_bytes(again, c), "the file is unchanged by writing a tensor read from it");
    lf_tensor_free(again), lf_tensor_free(keep);
    FAILS(LF_EINVAL, "no tensor \"nope\"", lf_st_get(st, "nope", &again));
    lf_st_close(st);
    /* the writer's refusals: a name twice; nothing is left behind */
    lf_st_entry dup[] = {{"x", a}, {"x", b}};
    FAILS(LF_EINVAL, "given twice", lf_st_write(lf_test_path("dup.safetensors"), dup, 2));
    CHECK(access(lf_test_path("dup.safetensors"), F_OK) != 0, "no file after a refused write");
    /* a tensor named as the header's metadata key: refused, and a good file there kept as it was */
    lf_st_entry meta[] = {{"w", b}, {"__metadata__", a}};
    FAILS(LF_EINVAL, "__metadata__", lf_st_write(lf_test_path("one.safetensors"), meta, 2));
    OK(lf_st_open(&st, lf_test_path("one.safetensors")));
    OK(lf_st_get(st, "c", &again));
    CHECK(same_bytes(again, c), "a refused write leaves the file there as it was");
    lf_tensor_free(again);
    lf_st_close(st);
    lf_tensor_free(at_);
    lf_tensor_free(a), lf_tensor_free(b), lf_tensor_free(c), lf_tensor_free(d);
}

static void test_sharded(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 5);
    mkdir(lf_test_path("sharded"), 0755);
    int64_t s[2] = {4, 6};
    lf_tensor *a = rand_tensor(&rng, LF_DTYPE_BF16, 2, s), *b = rand_tensor(&rng, LF_DTYPE_BF16, 2, s);
    lf_st_entry e1[] = {{"layer.a", a}}, e2[] = {{"layer.b", b}};
    OK(lf_st_write(lf_test_path("sharded/model-00001-of-00002.safetensors"), e1, 1));
    OK(lf_st_write(lf_test_path("sharded/model-00002-of-00002.safetensors"), e2, 1));
    lf_test_write_text(
        lf_test_path("sharded/model.safetensors.index.json"),
        "{\"metadata\": {\"total_size\": 96}, \"weight_map\": {\"layer.a\": \"model-00001-of-00002.safetensors\","
        " \"layer.b\": \"model-00002-of-00002.safetensors\"}}");
    lf_safetensors *st = NULL;
    OK(lf_st_open(&st, lf_test_path("sharded"))); /* the directory: its index */
    lf_tensor *t = NULL;
    CHECK(lf_st_count(st) == 2, "two tensors over two shards");
    OK(lf_st_get(st, "layer.b", &t));
    CHECK(t && same_bytes(t, b), "layer.b from the second shard");
    lf_tensor_free(t);
    lf_st_close(st);
    /* a name the index lists that no shard holds; a shard that is missing; one name in two shards */
    lf_test_write_text(lf_test_path("sharded/model.safetensors.index.json"),
                       "{\"weight_map\": {\"layer.a\": \"model-00001-of-00002.safetensors\", \"layer.c\": "
                       "\"model-00002-of-00002.safetensors\"}}");
    FAILS(LF_EINVAL, "\"layer.c\" is listed but no shard holds it", lf_st_open(&st, lf_test_path("sharded")));
    lf_test_write_text(lf_test_path("sharded/model.safetensors.index.json"),
                       "{\"weight_map\": {\"layer.a\": \"missing.safetensors\"}}");
    FAILS(LF_EINVAL, "missing.safetensors: No such file",
          lf_st_open(&st, lf_test_path("sharded/model.safetensors.index.json")));
    OK(lf_st_write(lf_test_path("sharded/model-00002-of-00002.safetensors"), e1, 1)); /* now layer.a is in both */
    lf_test_write_text(lf_test_path("sharded/model.safetensors.index.json"),
                       "{\"weight_map\": {\"layer.a\": \"model-00001-of-00002.safetensors\", \"x\": "
                       "\"model-00002-of-00002.safetensors\"}}");
    FAILS(LF_EINVAL, "\"layer.a\" is in", lf_st_open(&st, lf_test_path("sharded")));
    /* one shard under two names (a link): read once, not refused as two shards with one name */
    unlink(lf_test_path("sharded/link.safetensors"));
    CHECK(symlink("model-00001-of-00002.safetensors", lf_test_path("sharded/link.safetensors")) == 0, "symlink");
    lf_test_write_text(lf_test_path("sharded/model.safetensors.index.json"),
                       "{\"weight_map\": {\"layer.a\": \"model-00001-of-00002.safetensors\", \"layer.a2\": "
                       "\"link.safetensors\"}}");
    FAILS(LF_EINVAL, "\"layer.a2\" is listed but no shard holds it", lf_st_open(&st, lf_test_path("sharded")));
    lf_test_write_text(lf_test_path("sharded/model.safetensors.index.json"),
                       "{\"weight_map\": {\"layer.a\": \"link.safetensors\"}}");
    OK(lf_st_open(&st, lf_test_path("sharded")));
    lf_test_write_text(lf_test_path("sharded/model.safetensors.index.json"),
                       "{\"weight_map\": {\"layer.a\": \"model-00001-of-00002.safetensors\", \"layer.z\": "
                       "\"link.safetensors\"}}");
    lf_st_close(st);
    FAILS(LF_EINVAL, "\"layer.z\" is listed but no shard holds it", lf_st_open(&st, lf_test_path("sharded")));
    FAILS(LF_EINVAL, "holds neither", lf_st_open(&st, lf_test_dir));
    lf_tensor_free(a), lf_tensor_free(b);
}

/* A file from its header text and a data section of n bytes. */
static lf_status open_bytes(const char *header, size_t data, uint64_t claim, lf_safetensors **st)
{
    size_t hl = strlen(header);
    unsigned char *buf = calloc(1, 8 + hl + data + 1);
    uint64_t n = claim ? claim : hl;
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, header, hl);
    lf_status s = lf_st_open_buffer(st, buf, 8 + hl + data, "bad.safetensors");
    free(buf);
    return s;
}

static void test_bad_files(void)
{
    lf_safetensors *st = NULL;
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    OK(open_bytes(ok, 8, 0, &st));
    lf_st_close(st);
    FAILS(LF_EINVAL, "an 8-byte header length", lf_st_open_buffer(&st, "abc", 3, "tiny"));
    FAILS(LF_EINVAL, "reaches past the end of the file", open_bytes(ok, 8, 1000, &st));
    FAILS(LF_EINVAL, "out of the 4 data bytes", open_bytes(ok, 4, 0, &st)); /* truncated data */
    FAILS(LF_EINVAL, "header:", open_bytes("{\"a\":{\"dtype\":\"F32\",", 8, 0, &st));
    FAILS(LF_EINVAL, "not a JSON object", open_bytes("[1, 2]", 0, 0, &st));
    FAILS(LF_EINVAL, "unknown dtype \"Q7\"",
          open_bytes("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0, &st));
    FAILS(LF_EINVAL, "its shape of F32 is 12 bytes, its offsets hold 8",
          open_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, 0, &st));
    FAILS(LF_EINVAL, "\"a\" and \"b\" overlap",
          open_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                     8, 0, &st));
    FAILS(LF_EINVAL, "bytes 4 to 8 belong to no tensor",
          open_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                     12, 0, &st));
    FAILS(LF_EINVAL, "4 bytes after the last tensor", open_bytes(ok, 12, 0, &st));
    FAILS(LF_EINVAL, "duplicate",
          open_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                     8, 0, &st));
    FAILS(LF_EINVAL, "header:",
          open_bytes("{\"\xff\xfe\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0,
                     &st)); /* a name that is not UTF-8 */
    FAILS(LF_EINVAL, "lacks a dtype string", open_bytes("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, &st));
    FAILS(LF_EINVAL, "shape dim 0 is not a size",
          open_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, 0, &st));
    /* readable files with tensors linfuse cannot compute in: refused when asked for, by name */
    OK(open_bytes("{\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                  "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]},"
                  "\"big\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[12,16]}}",
                  16, 0, &st));
    lf_tensor *t = NULL;
    FAILS(LF_EDTYPE, "\"i\" is I64", lf_st_get(st, "i", &t));
    FAILS(LF_ESHAPE, "\"s\" has 0 dims", lf_st_get(st, "s", &t));
    FAILS(LF_ESHAPE, "\"big\" has 5 dims", lf_st_get(st, "big", &t));
    CHECK(t == NULL, "no tensor after a refusal");
    lf_st_close(st);
    /* on disk: a file cut short, a directory, a missing file */
    lf_rng rng;
    lf_rng_seed(&rng, 6);
    int64_t sh[2] = {8, 8};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, 2, sh);
    lf_st_entry e = {"x", x};
    OK(lf_st_write(lf_test_path("cut.safetensors"), &e, 1));
    struct stat sb;
    stat(lf_test_path("cut.safetensors"), &sb);
    CHECK(truncate(lf_test_path("cut.safetensors"), sb.st_size - 100) == 0, "truncate");
    FAILS(LF_EINVAL, "cut.safetensors: tensor \"x\": data_offsets [0, 256] out of the 156 data bytes",
          lf_st_open(&st, lf_test_path("cut.safetensors")));
    FAILS(LF_EINVAL, "No such file", lf_st_open(&st, lf_test_path("none.safetensors")));
    lf_tensor_free(x);
}

/* A header whose length is not padded (the format allows it) leaves the data off its alignment:
 * such tensors are read by copy, with the same values (UBSan would catch a misaligned view). */
static void test_unaligned(void)
{
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[12,16]}}";
    const size_t hl = strlen(h);
    CHECK((8 + hl) % 2 == 1, "the header leaves the data at an odd offset (%zu)", 8 + hl);
    const float a[3] = {1.5f, -2.25f, 1e-3f};
    const uint16_t b[2] = {0x3f80, 0xc000}; /* bf16 1 and -2 */
    FILE *f = fopen(lf_test_path("odd.safetensors"), "wb");
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    if (f) {
        fwrite(len, 1, 8, f), fwrite(h, 1, hl, f), fwrite(a, 1, sizeof a, f), fwrite(b, 1, sizeof b, f);
        fclose(f);
    }
    lf_safetensors *st = NULL;
    OK(lf_st_open(&st, lf_test_path("odd.safetensors")));
    lf_tensor *ta = NULL, *tb = NULL;
    if (st) {
        OK(lf_st_get(st, "a", &ta));
        OK(lf_st_get(st, "b", &tb));
        lf_st_close(st);
    }
    CHECK(ta && !memcmp(lf_tensor_data(ta), a, sizeof a) && (uintptr_t)lf_tensor_data(ta) % 4 == 0,
          "an unaligned F32 tensor reads back exactly, aligned");
    CHECK(tb && !memcmp(lf_tensor_data(tb), b, sizeof b) && (uintptr_t)lf_tensor_data(tb) % 2 == 0,
          "an unaligned BF16 tensor reads back exactly, aligned");
    lf_tensor_free(ta), lf_tensor_free(tb);
    unlink(lf_test_path("odd.safetensors"));
}

static void test_config(void)
{
    lf_act a = LF_ACT_NONE;
    mkdir(lf_test_path("llama"), 0755), mkdir(lf_test_path("gemma"), 0755), mkdir(lf_test_path("other"), 0755);
    lf_test_write_text(lf_test_path("llama/config.json"), "{\"model_type\": \"llama\", \"hidden_act\": \"silu\"}");
    lf_test_write_text(lf_test_path("gemma/config.json"),
                       "{\"hidden_act\": \"gelu\", \"hidden_activation\": \"gelu_pytorch_tanh\"}");
    lf_test_write_text(lf_test_path("other/config.json"), "{\"hidden_act\": \"relu\"}");
    OK(lf_hf_config_act(lf_test_path("llama"), &a));
    CHECK(a == LF_ACT_SILU, "llama: silu");
    lf_test_write_text(lf_test_path("gemma/model.safetensors"), "");   /* only its place is read */
    OK(lf_hf_config_act(lf_test_path("gemma/model.safetensors"), &a)); /* the config beside the weights */
    CHECK(a == LF_ACT_GELU_TANH, "gemma: hidden_activation wins: gelu_tanh");
    mkdir(lf_test_path("gemma1"), 0755); /* Gemma-1's first config: hidden_act "gelu" alone, run as tanh */
    lf_test_write_text(lf_test_path("gemma1/config.json"),
                       "{\"model_type\": \"gemma\", \"hidden_act\": \"gelu\", \"hidden_activation\": null}");
    a = LF_ACT_NONE;
    OK(lf_hf_config_act(lf_test_path("gemma1"), &a));
    CHECK(a == LF_ACT_GELU_TANH, "gemma-1 with hidden_act gelu alone: gelu_tanh, as transformers runs it");
    FAILS(LF_EINVAL, "\"relu\" is not silu", lf_hf_config_act(lf_test_path("other/config.json"), &a));
    FAILS(LF_EINVAL, NULL, lf_hf_config_act(lf_test_path("sharded"), &a)); /* no config there */
    /* weights that are not there: said of them, not of a config.json in the folder above */
    FAILS(LF_EINVAL, "Meta-Llama-3-8B: No such file or directory (the checkpoint",
          lf_hf_config_act(lf_test_path("llama/Meta-Llama-3-8B"), &a));
    /* an activation there but not as a name: said so, not called missing */
    lf_test_write_text(lf_test_path("other/config.json"), "{\"hidden_act\": [\"silu\"]}");
    FAILS(LF_EINVAL, "hidden_act is [\"silu\"], not a string", lf_hf_config_act(lf_test_path("other"), &a));
    lf_test_write_text(lf_test_path("other/config.json"), "{\"hidden_act\": null}");
    FAILS(LF_EINVAL, "no hidden_act or hidden_activation", lf_hf_config_act(lf_test_path("other"), &a));
}

static void test_mlp_load(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 9);
    const int64_t D = 24, H = 40;
    for (int k = 0; k < 2; k++) {
        const lf_act act = k ? LF_ACT_GELU_TANH : LF_ACT_SILU;
        int64_t gs[2] = {H, D}, ds[2] = {D, H}, xs[2] = {13, D};
        lf_tensor *g = rand_tensor(&rng, LF_DTYPE_BF16, 2, gs), *u = rand_tensor(&rng, LF_DTYPE_BF16, 2, gs),
                  *dn = rand_tensor(&rng, LF_DTYPE_BF16, 2, ds), *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs);
        lf_st_entry e[] = {{"model.layers.3.mlp.gate_proj.weight", g},
                           {"model.layers.3.mlp.up_proj.weight", u},
                           {"model.layers.3.mlp.down_proj.weight", dn},
                           {"model.norm.weight", x}};
        OK(lf_st_write(lf_test_path("mlp.safetensors"), e, 4));
        lf_safetensors *st = NULL;
        OK(lf_st_open(&st, lf_test_path("mlp.safetensors")));
        for (int dt = 0; dt < 2; dt++) { /* the file's bf16, and converted to f32 */
            lf_nn_gated_mlp m;
            OK(lf_nn_gated_mlp_load(&m, st, "model.layers.3.mlp", act, dt ? LF_DTYPE_F32 : LF_DTYPE_COUNT));
            CHECK(m.dim == D && m.hidden == H && m.act == act &&
                      m.gate_up->dtype == (dt ? LF_DTYPE_F32 : LF_DTYPE_BF16),
                  "loaded: %lld -> %lld, %s", (long long)m.dim, (long long)m.hidden, lf_act_name(m.act));
            CHECK(same_bytes(m.gate.weight, dt ? m.gate.weight : g) && (dt || same_bytes(m.up.weight, u)),
                  "gate and up are the file's, stacked");
            lf_tensor *xx = NULL;
            OK(lf_tensor_to_device(&xx, x, LF_DEVICE_CPU));
            if (dt) { /* x in f32 too */
                float *f = malloc((size_t)(13 * D) * sizeof *f);
                OK(lf_tensor_to_f32(x, f, 13 * D));
                lf_tensor_free(xx);
                OK(lf_tensor_from_f32(&xx, LF_DTYPE_F32, 2, xs, f, LF_DEVICE_CPU));
                free(f);
            }
            for (int v = 0; v < LF_MLP_VARIANT_COUNT; v++) {
                lf_tensor *y = NULL;
                OK(lf_nn_gated_mlp_forward_variant(&m, (lf_mlp_variant)v, xx, &y));
                double err = gated_mlp_err(&m, xx, y, 1);
                CHECK(err < tol_for(m.gate_up->dtype), "loaded %s %s %s: err %.3g", lf_act_name(act),
                      lf_mlp_variant_name((lf_mlp_variant)v), lf_dtype_name(m.gate_up->dtype), err);
                lf_tensor_free(y);
            }
            lf_tensor_free(xx);
            lf_nn_gated_mlp_free(&m);
        }
        lf_nn_gated_mlp m;
        FAILS(LF_EINVAL, "no \"model.layers.4.mlp.gate_proj.weight\"",
              lf_nn_gated_mlp_load(&m, st, "model.layers.4.mlp", act, LF_DTYPE_COUNT));
        lf_st_close(st);
        /* weights that do not fit together */
        lf_st_entry bad[] = {{"p.gate_proj.weight", g}, {"p.up_proj.weight", u}, {"p.down_proj.weight", g}};
        OK(lf_st_write(lf_test_path("bad_mlp.safetensors"), bad, 3));
        OK(lf_st_open(&st, lf_test_path("bad_mlp.safetensors")));
        FAILS(LF_ESHAPE, "expected (H, D), (H, D), (D, H)", lf_nn_gated_mlp_load(&m, st, "p", act, LF_DTYPE_COUNT));
        lf_st_close(st);
        /* the same MLP named as Phi-3 names it (one gate_up_proj, [gate; up]) and as Meta does (w1
         * gate, w3 up, w2 down): the same module; a projection with a bias: refused by name, not run
         * without it */
        lf_tensor *gu = NULL;
        int64_t gus[2] = {2 * H, D};
        OK(lf_tensor_empty(&gu, LF_DTYPE_BF16, 2, gus, LF_DEVICE_CPU));
        memcpy(lf_tensor_data(gu), lf_tensor_data(g), (size_t)(H * D) * 2);
        memcpy((char *)lf_tensor_data(gu) + H * D * 2, lf_tensor_data(u), (size_t)(H * D) * 2);
        int64_t bs[1] = {H};
        lf_tensor *bias = rand_tensor(&rng, LF_DTYPE_BF16, 1, bs);
        lf_st_entry names[] = {
            {"phi.gate_up_proj.weight", gu}, {"phi.down_proj.weight", dn}, {"meta.w1.weight", g},
            {"meta.w3.weight", u},           {"meta.w2.weight", dn},       {"b.gate_proj.weight", g},
            {"b.up_proj.weight", u},         {"b.up_proj.bias", bias},     {"b.down_proj.weight", dn}};
        OK(lf_st_write(lf_test_path("names.safetensors"), names, 9));
        OK(lf_st_open(&st, lf_test_path("names.safetensors")));
        for (int l = 0; l < 2; l++) {
            OK(lf_nn_gated_mlp_load(&m, st, l ? "meta" : "phi", act, LF_DTYPE_COUNT));
            CHECK(m.gate_up && same_bytes(m.gate_up, gu) && same_bytes(m.down.weight, dn) && m.hidden == H &&
                      m.dim == D,
                  "%s's names: the same gate_up and down", l ? "Meta" : "Phi-3");
            lf_nn_gated_mlp_free(&m);
        }
        FAILS(LF_EUNSUPPORTED, "\"b.up_proj.bias\" is there", lf_nn_gated_mlp_load(&m, st, "b", act, LF_DTYPE_COUNT));
        /* the same lookup from the header alone: the gate's name and the sizes, the fused one's H
         * half its rows; a prefix with no MLP lists the layers there */
        char gname[64];
        int64_t fd = 0, fh = 0;
        OK(lf_nn_gated_mlp_find(st, "phi", gname, sizeof gname, &fd, &fh));
        CHECK(!strcmp(gname, "phi.gate_up_proj.weight") && fd == D && fh == H, "find phi: %s %lld %lld", gname,
              (long long)fd, (long long)fh);
        OK(lf_nn_gated_mlp_find(st, "meta", gname, sizeof gname, &fd, &fh));
        CHECK(!strcmp(gname, "meta.w1.weight") && fd == D && fh == H, "find meta: %s", gname);
        FAILS(LF_EINVAL, "the MLP layers there: ", lf_nn_gated_mlp_find(st, "nope", gname, sizeof gname, &fd, &fh));
        lf_st_close(st);
        /* two namings of one layer: gate_up_proj beside gate_proj/up_proj (here of zeros: the first
         * found ran, all zeros out), or w1/w3/w2 beside gate_proj/up_proj/down_proj: refused naming
         * both, by the lookup and the load alike; the listing names such a layer once */
        lf_tensor *zeros = NULL;
        OK(lf_tensor_empty(&zeros, LF_DTYPE_BF16, 2, gus, LF_DEVICE_CPU));
        memset(lf_tensor_data(zeros), 0, (size_t)(2 * H * D) * 2);
        lf_st_entry two[] = {{"t.gate_proj.weight", g},  {"t.up_proj.weight", u},
                             {"t.down_proj.weight", dn}, {"t.gate_up_proj.weight", zeros},
                             {"m.gate_proj.weight", g},  {"m.up_proj.weight", u},
                             {"m.down_proj.weight", dn}, {"m.w1.weight", g},
                             {"m.w3.weight", u},         {"m.w2.weight", dn}};
        OK(lf_st_write(lf_test_path("two_names.safetensors"), two, 10));
        OK(lf_st_open(&st, lf_test_path("two_names.safetensors")));
        FAILS(LF_EINVAL, "\"t\" holds two namings of one MLP, gate_proj/up_proj/down_proj and gate_up_proj/down_proj",
              lf_nn_gated_mlp_load(&m, st, "t", act, LF_DTYPE_COUNT));
        FAILS(LF_EINVAL, "two namings of one MLP, gate_proj/up_proj/down_proj and w1/w3/w2",
              lf_nn_gated_mlp_find(st, "m", gname, sizeof gname, &fd, &fh));
        FAILS(LF_EINVAL, "the MLP layers there: m, t", lf_nn_gated_mlp_find(st, "nope", gname, sizeof gname, &fd, &fh));
        lf_st_close(st);
        lf_tensor_free(zeros);
        lf_tensor_free(gu), lf_tensor_free(bias);
        lf_tensor_free(g), lf_tensor_free(u), lf_tensor_free(dn), lf_tensor_free(x);
    }
}

/* A checkpoint cut short by another program while it is open (a download rewritten, a disk
 * cleaned): what lf_st_get_as and lf_nn_gated_mlp_load read is read from the file, so the cut is
 * an error naming the file, never SIGBUS; a tensor read before the cut is the caller's own.
 * Before they copied, the module's down_proj and the input stayed views of the mapping and the
 * first GEMM after the cut died of SIGBUS. */
static void test_cut_while_open(void)
{
    lf_rng rng;
    lf_rng_seed(&rng, 21);
    const int64_t D = 64, H = 96;
    int64_t gs[2] = {H, D}, ds[2] = {D, H};
    lf_tensor *g = rand_tensor(&rng, LF_DTYPE_F32, 2, gs), *u = rand_tensor(&rng, LF_DTYPE_F32, 2, gs),
              *dn = rand_tensor(&rng, LF_DTYPE_F32, 2, ds);
    lf_st_entry e[] = {{"p.gate_proj.weight", g}, {"p.up_proj.weight", u}, {"p.down_proj.weight", dn}};
    const char *path = lf_test_path("cut_open.safetensors");
    OK(lf_st_write(path, e, 3));
    lf_safetensors *st = NULL;
    OK(lf_st_open(&st, path));
    lf_tensor *early = NULL;
    lf_nn_gated_mlp m;
    OK(lf_nn_gated_mlp_load(&m, st, "p", LF_ACT_SILU, LF_DTYPE_COUNT)); /* loaded, then the file is cut */
    OK(lf_st_get_as(st, "p.down_proj.weight", LF_DTYPE_COUNT, &early));
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && truncate(path, sb.st_size - (off_t)(3 * H * D * 4) + 100) == 0, "truncate");
    /* what was read before the cut is whole: the forward reads every weight */
    int64_t xs[2] = {5, D};
    lf_tensor *x = rand_tensor(&rng, LF_DTYPE_F32, 2, xs), *y = NULL;
    OK(lf_nn_gated_mlp_forward(&m, x, &y));
    CHECK(y && gated_mlp_err(&m, x, y, 1) < tol_for(LF_DTYPE_F32), "the forward after the cut is right");
    CHECK(early && same_bytes(early, dn), "a tensor read before the cut keeps its values");
    /* what is read after it: an error naming the file and the tensor */
    lf_tensor *t = NULL;
    FAILS(LF_EINVAL, "cut_open.safetensors: the file ended at byte",
          lf_st_get_as(st, "p.up_proj.weight", LF_DTYPE_COUNT, &t));
    FAILS(LF_EINVAL, "while reading tensor \"p.down_proj.weight\"",
          lf_st_get_as(st, "p.down_proj.weight", LF_DTYPE_BF16, &t));
    lf_nn_gated_mlp m2;
    FAILS(LF_EINVAL, "cut short since", lf_nn_gated_mlp_load(&m2, st, "p", LF_ACT_SILU, LF_DTYPE_COUNT));
    CHECK(t == NULL, "nothing handed out after a short read");
    lf_st_close(st);
    lf_tensor_free(y), lf_tensor_free(x), lf_tensor_free(early);
    lf_nn_gated_mlp_free(&m);
    lf_tensor_free(g), lf_tensor_free(u), lf_tensor_free(dn);
}

/* Paths that are no safetensors file: a FIFO (its open() would block until a writer came) as the
 * file, as DIR/model.safetensors, as a shard, as the index, as config.json; a directory given as a
 * shard; a text file linked in as a shard. Each refused at once, by name. The alarm turns a hang
 * into a failure. */
static void test_not_files(void)
{
    alarm(30);
    lf_safetensors *st = NULL;
    lf_act act;
    CHECK(mkfifo(lf_test_path("fifo.safetensors"), 0644) == 0, "mkfifo");
    FAILS(LF_EINVAL, "fifo.safetensors: a FIFO, not a regular file", lf_st_open(&st, lf_test_path("fifo.safetensors")));
    mkdir(lf_test_path("fifodir"), 0755);
    CHECK(mkfifo(lf_test_path("fifodir/model.safetensors"), 0644) == 0, "mkfifo");
    FAILS(LF_EINVAL, "model.safetensors: a FIFO", lf_st_open(&st, lf_test_path("fifodir")));
    CHECK(mkfifo(lf_test_path("fifodir/config.json"), 0644) == 0, "mkfifo");
    FAILS(LF_EINVAL, "config.json: a FIFO", lf_hf_config_act(lf_test_path("fifodir"), &act));
    CHECK(mkfifo(lf_test_path("fifo.index.json"), 0644) == 0, "mkfifo");
    FAILS(LF_EINVAL, "fifo.index.json: a FIFO", lf_st_open(&st, lf_test_path("fifo.index.json")));
    mkdir(lf_test_path("odd"), 0755);
    mkdir(lf_test_path("odd/sub.safetensors"), 0755);
    lf_test_write_text(lf_test_path("odd/README.md"), "# A model card, not a checkpoint\n");
    CHECK(symlink("README.md", lf_test_path("odd/text.safetensors")) == 0, "symlink");
    CHECK(symlink("../fifo.safetensors", lf_test_path("odd/fifo.safetensors")) == 0, "symlink");
    const char *shard[3] = {"fifo.safetensors", "sub.safetensors", "text.safetensors"};
    const char *why[3] = {"fifo.safetensors: a FIFO, not a regular file", "sub.safetensors: a directory",
                          "text.safetensors: not a safetensors file: it starts with the text \"# A mode\""};
    for (int i = 0; i < 3; i++) {
        char idx[200];
        snprintf(idx, sizeof idx, "{\"weight_map\": {\"a\": \"%s\"}}", shard[i]);
        lf_test_write_text(lf_test_path("odd/model.safetensors.index.json"), idx);
        FAILS(LF_EINVAL, why[i], lf_st_open(&st, lf_test_path("odd")));
    }
    /* an index given where a file goes: JSON, so text */
    FAILS(LF_EINVAL, "index.json: not a safetensors file: it starts with the text \"{\"weight\"",
          lf_st_open_buffer(&st, "{\"weight_map\": {}}", 18, "index.json"));
    alarm(0);
}

/* FP8 values: the anchors of the OCP spec, every E5M2 code against f16 (E5M2 is f16's top byte),
 * every E4M3 code ordered and sign-symmetric, the NaN and infinity patterns. */
static void test_fp8_decode(void)
{
    static const struct {
        uint8_t b;
        float v;
    } e4[] = {{0x00, 0.f},    {0x38, 1.f},     {0x3c, 1.5f},        {0x40, 2.f},     {0x7e, 448.f},
              {0xfe, -448.f}, {0x01, 0x1p-9f}, {0x07, 7 * 0x1p-9f}, {0x08, 0x1p-6f}, {0x30, 0.5f}},
      e5[] = {{0x3c, 1.f}, {0x40, 2.f}, {0x7b, 57344.f}, {0x01, 0x1p-16f}, {0x04, 0x1p-14f}, {0xbc, -1.f}};
    for (size_t i = 0; i < sizeof e4 / sizeof e4[0]; i++)
        CHECK(lf_f32_from_f8e4m3(e4[i].b) == e4[i].v, "e4m3 0x%02x = %g, got %g", e4[i].b, (double)e4[i].v,
              (double)lf_f32_from_f8e4m3(e4[i].b));
    for (size_t i = 0; i < sizeof e5 / sizeof e5[0]; i++)
        CHECK(lf_f32_from_f8e5m2(e5[i].b) == e5[i].v, "e5m2 0x%02x = %g", e5[i].b, (double)e5[i].v);
    CHECK(isnan(lf_f32_from_f8e4m3(0x7f)) && isnan(lf_f32_from_f8e4m3(0xff)), "e4m3 S.1111.111 is NaN");
    CHECK(isinf(lf_f32_from_f8e5m2(0x7c)) && lf_f32_from_f8e5m2(0xfc) < 0 && isnan(lf_f32_from_f8e5m2(0x7d)),
          "e5m2 infinities and NaNs");
    CHECK(signbit(lf_f32_from_f8e4m3(0x80)) && lf_f32_from_f8e4m3(0x80) == 0, "e4m3 0x80 is -0");
    int bad5 = 0, bad4 = 0;
    for (int b = 0; b < 256; b++) {
        float f16 = lf_f32_from_f16((uint16_t)(b << 8)), v = lf_f32_from_f8e5m2((uint8_t)b);
        bad5 += !(v == f16 || (isnan(v) && isnan(f16)));
        if ((b & 0x7f) < 0x7f)
            bad4 += lf_f32_from_f8e4m3((uint8_t)(b | 0x80)) != -lf_f32_from_f8e4m3((uint8_t)(b & 0x7f)) ||
                    ((b & 0x7f) > 0 &&
                     !(lf_f32_from_f8e4m3((uint8_t)(b & 0x7f)) > lf_f32_from_f8e4m3((uint8_t)((b & 0x7f) - 1))));
    }
    CHECK(!bad5, "every e5m2 code equals the f16 with it as its top byte (%d differ)", bad5);
    CHECK(!bad4, "e4m3 codes increase with the code and flip with the sign (%d do not)", bad4);
}

/* A file from its header and data bytes, opened from memory. */
static lf_status open_data(const char *header, const void *data, size_t n, lf_safetensors **st)
{
    size_t hl = strlen(header);
    unsigned char *buf = malloc(8 + hl + n + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    memcpy(buf + 8 + hl, data, n);
    lf_status s = lf_st_open_buffer(st, buf, 8 + hl + n, "fp8.safetensors");
    free(buf);
    return s;
}

/* Element i of t, read through f32. */
static float at(const lf_tensor *t, int64_t i)
{
    float v[64];
    return lf_tensor_to_f32(t, v, 64) == LF_OK ? v[i] : -12345.f;
}

/* A 100 x 8 E4M3 weight of ones in 64-row blocks (the last cut short: scales 1 and 2) written to
 * dir/model.safetensors beside a config.json holding cfg (NULL: none); then read as f32 into v. */
static lf_status read_blk64(const char *dir, const char *cfg, float v[800])
{
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", lf_test_path(dir));
    mkdir(lf_test_path(dir), 0755);
    unlink(path);
    if (cfg)
        lf_test_write_text(path, cfg);
    lf_tensor *w = NULL, *sc = NULL, *t = NULL;
    const float two[2] = {1.f, 2.f};
    lf_status s = lf_tensor_empty(&w, LF_DTYPE_F8E4M3, 2, (int64_t[]){100, 8}, LF_DEVICE_CPU);
    if (s == LF_OK)
        memset(lf_tensor_data(w), 0x38, 800); /* every weight 1.0 */
    if (s == LF_OK)
        s = lf_tensor_from_f32(&sc, LF_DTYPE_F32, 2, (int64_t[]){2, 1}, two, LF_DEVICE_CPU);
    lf_st_entry e[] = {{"w", w}, {"w_scale_inv", sc}};
    snprintf(path, sizeof path, "%s/model.safetensors", lf_test_path(dir));
    if (s == LF_OK)
        s = lf_st_write(path, e, 2);
    lf_tensor_free(w), lf_tensor_free(sc);
    CHECK(s == LF_OK, "the 64-row block file written: %s", s == LF_OK ? "" : lf_last_error());
    lf_safetensors *st = NULL;
    if (s == LF_OK)
        s = lf_st_open(&st, path);
    if (s == LF_OK)
        s = lf_st_get_as(st, "w", LF_DTYPE_F32, &t);
    if (s == LF_OK)
        s = lf_tensor_to_f32(t, v, 800);
    lf_tensor_free(t);
    lf_st_close(st);
    return s;
}

/* The block size of FP8 block scales is the checkpoint's to state (config.json), never guessed
 * from the grid: 64-row blocks over 100 rows read right from weight_block_size or from
 * compressed-tensors' block_structure (an even split read blocks of 50: 31% off); no config, or a
 * value that is no [rows, cols] of two positive integers, refused naming the key; a config that
 * does not fit the grid refused. */
static void test_fp8_block_config(void)
{
    float v[800];
    OK(read_blk64("blk64", "{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [64, 128]}}",
                  v));
    CHECK(v[63 * 8] == 1.f && v[64 * 8] == 2.f && v[50 * 8] == 1.f,
          "64-row blocks from config.json: rows 50 and 63 at 1, 64 at 2 (got %g %g %g)", (double)v[50 * 8],
          (double)v[63 * 8], (double)v[64 * 8]);
    memset(v, 0, sizeof v);
    OK(read_blk64("blk64",
                  "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"config_groups\": "
                  "{\"group_0\": {\"weights\": {\"strategy\": \"block\", \"block_structure\": [64, 64]}}}}}",
                  v));
    CHECK(v[63 * 8] == 1.f && v[64 * 8] == 2.f, "64-row blocks from compressed-tensors' block_structure");
    FAILS(LF_ESHAPE, "does not fit the 32 x 128 blocks",
          read_blk64("blk64", "{\"quantization_config\": {\"weight_block_size\": [32, 128]}}", v));
    FAILS(LF_ESHAPE, "the checkpoint does not state; add \"quantization_config\"", read_blk64("blk64", NULL, v));
    FAILS(LF_ESHAPE, "does not state",
          read_blk64("blk64", "{\"quantization_config\": {\"quant_method\": \"fp8\"}}", v));
    FAILS(LF_ESHAPE, "does not state",
          read_blk64("blk64", "{\"quantization_config\": {\"weight_block_size\": null}}", v));
    static const char *const unusable[] = {"[64.0, 64.0]", "[\"64\", \"64\"]", "[0, 0]",
                                           "[-64, 64]",    "[128.5, 128]",     "[128]",
                                           "\"64x64\"",    "[64, 64, 64]"};
    for (size_t i = 0; i < sizeof unusable / sizeof *unusable; i++) {
        char cfg[200];
        snprintf(cfg, sizeof cfg, "{\"quantization_config\": {\"weight_block_size\": %s}}", unusable[i]);
        FAILS(LF_EINVAL, "quantization_config.weight_block_size is", read_blk64("blk64", cfg, v));
    }
    FAILS(LF_EINVAL, "block_structure is [0,64]",
          read_blk64("blk64",
                     "{\"quantization_config\": {\"config_groups\": {\"g\": {\"weights\": {\"block_structure\": "
                     "[0, 64]}}}}}",
                     v));
    FAILS(LF_EINVAL, "(line", read_blk64("blk64", "{\"quantization_config\": ", v)); /* a config that is no JSON */
}

/* FP8 weights dequantized with their scales: per tensor (a 0-dim scale), per row, per block,
 * E5M2 with a bf16 scale; the wrong scale shape or dtype, or none, a clear error; the dtypes
 * linfuse computes in converted by the same call. */
static void test_fp8_load(void)
{
    lf_safetensors *st = NULL;
    lf_tensor *t = NULL;
    { /* per tensor, scale 0.5: 1, 2, -1, 448, 2^-9, NaN */
        unsigned char d[6 + 4] = {0x38, 0x40, 0xb8, 0x7e, 0x01, 0x7f};
        const float half = 0.5f;
        memcpy(d + 6, &half, 4);
        OK(open_data("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,3],\"data_offsets\":[0,6]},"
                     "\"w_scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[6,10]}}",
                     d, sizeof d, &st));
        OK(lf_st_get(st, "w", &t)); /* as stored: the codes, no scale */
        CHECK(t && t->dtype == LF_DTYPE_F8E4M3 && at(t, 0) == 1.f && at(t, 3) == 448.f && isnan(at(t, 5)),
              "lf_st_get hands out E4M3 as an f8e4m3 tensor");
        lf_tensor_free(t), t = NULL;
        CHECK(lf_st_dtype(st, "w") && !strcmp(lf_st_dtype(st, "w"), "F8_E4M3") &&
                  !strcmp(lf_st_dtype(st, "w_scale"), "F32") && !lf_st_dtype(st, "nope"),
              "the file's dtype names");
        int64_t sh[8];
        CHECK(lf_st_shape(st, "w", sh) == 2 && sh[0] == 2 && sh[1] == 3 && lf_st_shape(st, "w_scale", sh) == 0 &&
                  lf_st_shape(st, "nope", sh) == -1,
              "shapes from the header");
        OK(lf_st_get_as(st, "w", LF_DTYPE_F32, &t));
        if (t) {
            CHECK(t->dtype == LF_DTYPE_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3, "shape kept");
            CHECK(at(t, 0) == 0.5f && at(t, 1) == 1.f && at(t, 2) == -0.5f && at(t, 3) == 224.f &&
                      at(t, 4) == 0x1p-10f && isnan(at(t, 5)),
                  "per-tensor scale: %g %g %g %g %g %g", (double)at(t, 0), (double)at(t, 1), (double)at(t, 2),
                  (double)at(t, 3), (double)at(t, 4), (double)at(t, 5));
        }
        lf_tensor_free(t), t = NULL;
        OK(lf_st_get_as(st, "w", LF_DTYPE_COUNT, &t)); /* FP8 comes out bf16 unless asked */
        CHECK(t && t->dtype == LF_DTYPE_BF16 && at(t, 3) == 224.f, "FP8 defaults to bf16");
        lf_tensor_free(t), t = NULL;
        lf_st_close(st);
    }
    { /* per row through _scale_inv [2, 1]; blocks of 2 x 2 in a 4 x 4 weight ([2, 2] scales), whose
       * size the grid does not tell (2 or 3 rows each): refused from a buffer, which has no config */
        unsigned char d[16 + 8 + 16 + 16];
        memset(d, 0x38, 16); /* every weight 1.0 */
        const float rows[2] = {0.25f, 4.f}, blocks[4] = {1.f, 2.f, 3.f, 4.f};
        memcpy(d + 16, rows, 8);
        memset(d + 24, 0x40, 16); /* every value 2.0 */
        memcpy(d + 40, blocks, 16);
        OK(open_data("{\"r\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,8],\"data_offsets\":[0,16]},"
                     "\"r_scale_inv\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[16,24]},"
                     "\"b\":{\"dtype\":\"F8_E4M3\",\"shape\":[4,4],\"data_offsets\":[24,40]},"
                     "\"b_scale_inv\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[40,56]}}",
                     d, sizeof d, &st));
        OK(lf_st_get_as(st, "r", LF_DTYPE_F32, &t));
        CHECK(t && at(t, 0) == 0.25f && at(t, 7) == 0.25f && at(t, 8) == 4.f && at(t, 15) == 4.f, "per-row scales");
        lf_tensor_free(t), t = NULL;
        FAILS(LF_ESHAPE, "add \"quantization_config\": {\"weight_block_size\": [rows, cols]}",
              lf_st_get_as(st, "b", LF_DTYPE_F16, &t));
        lf_st_close(st);
        /* the same weight in a file whose config.json states the blocks */
        mkdir(lf_test_path("blk2"), 0755);
        lf_tensor *w = NULL, *sc = NULL;
        OK(lf_tensor_empty(&w, LF_DTYPE_F8E4M3, 2, (int64_t[]){4, 4}, LF_DEVICE_CPU));
        if (w)
            memset(lf_tensor_data(w), 0x40, 16);
        OK(lf_tensor_from_f32(&sc, LF_DTYPE_F32, 2, (int64_t[]){2, 2}, blocks, LF_DEVICE_CPU));
        lf_st_entry e[] = {{"b", w}, {"b_scale_inv", sc}};
        OK(lf_st_write(lf_test_path("blk2/model.safetensors"), e, 2));
        lf_test_write_text(lf_test_path("blk2/config.json"),
                           "{\"quantization_config\": {\"weight_block_size\": [2, 2]}}");
        OK(lf_st_open(&st, lf_test_path("blk2/model.safetensors")));
        OK(lf_st_get_as(st, "b", LF_DTYPE_F16, &t));
        int bad = 0;
        for (int i = 0; t && i < 16; i++)
            bad += at(t, i) != 2.f * blocks[(i / 4 / 2) * 2 + (i % 4) / 2];
        CHECK(t && t->dtype == LF_DTYPE_F16 && !bad, "block scales: %d of 16 wrong", bad);
        lf_tensor_free(t), t = NULL;
        lf_st_close(st);
        lf_tensor_free(w), lf_tensor_free(sc);
    }
    { /* DeepSeek-V3's 128 x 128 blocks on a weight 128 does not divide, as its config.json states
       * them: 200 x 130 under a [2, 2] grid is blocks of 128 and 72 rows, 128 and 2 columns (an even
       * split, 100 x 65, gave rows 100-127 and columns 65-127 their neighbour's scale); a [3, 2]
       * grid over 200 rows does not fit those blocks and is refused */
        enum { R = 200, C = 130 };
        mkdir(lf_test_path("ds"), 0755);
        lf_tensor *w = NULL, *ws_ = NULL, *v = NULL, *vs = NULL;
        const float blocks[4] = {0.01f, 0.02f, 0.03f, 0.04f}, three[3] = {1, 1, 1};
        OK(lf_tensor_empty(&w, LF_DTYPE_F8E4M3, 2, (int64_t[]){R, C}, LF_DEVICE_CPU));
        OK(lf_tensor_empty(&v, LF_DTYPE_F8E4M3, 2, (int64_t[]){R, 2}, LF_DEVICE_CPU));
        if (w && v)
            memset(lf_tensor_data(w), 0x38, R * C), memset(lf_tensor_data(v), 0x38, R * 2); /* every weight 1.0 */
        OK(lf_tensor_from_f32(&ws_, LF_DTYPE_F32, 2, (int64_t[]){2, 2}, blocks, LF_DEVICE_CPU));
        OK(lf_tensor_from_f32(&vs, LF_DTYPE_F32, 2, (int64_t[]){3, 1}, three, LF_DEVICE_CPU));
        lf_st_entry e[] = {{"w", w}, {"w_scale_inv", ws_}, {"v", v}, {"v_scale_inv", vs}};
        OK(lf_st_write(lf_test_path("ds/model.safetensors"), e, 4));
        lf_test_write_text(lf_test_path("ds/config.json"),
                           "{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}");
        OK(lf_st_open(&st, lf_test_path("ds/model.safetensors")));
        OK(lf_st_get_as(st, "w", LF_DTYPE_F32, &t));
        float *got = malloc((size_t)R * C * sizeof *got);
        int bad = !t || !got || lf_tensor_to_f32(t, got, (int64_t)R * C) != LF_OK;
        for (int i = 0; !bad && i < R * C; i++)
            bad += got[i] != blocks[(i / C >= 128) * 2 + (i % C >= 128)];
        CHECK(!bad && got[127 * C + 127] == 0.01f && got[128 * C] == 0.03f && got[128] == 0.02f,
              "128 x 128 blocks, the last ones cut short: %d of %d wrong", bad, R * C);
        free(got);
        lf_tensor_free(t), t = NULL;
        FAILS(LF_ESHAPE, "does not fit the 128 x 128 blocks", lf_st_get_as(st, "v", LF_DTYPE_F32, &t));
        lf_st_close(st);
        lf_tensor_free(w), lf_tensor_free(ws_), lf_tensor_free(v), lf_tensor_free(vs);
    }
    test_fp8_block_config();
    { /* E5M2 with a bf16 scale per row, shape [rows] */
        unsigned char d[4 + 4] = {0x3c, 0x40, 0xbc, 0x7c};
        const uint16_t sc[2] = {lf_bf16_from_f32(3.f), lf_bf16_from_f32(-1.f)};
        memcpy(d + 4, sc, 4);
        OK(open_data("{\"e\":{\"dtype\":\"F8_E5M2\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                     "\"e_scale\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
                     d, sizeof d, &st));
        FAILS(LF_EDTYPE, "lf_st_get_as reads FP8", lf_st_get(st, "e", &t)); /* E5M2 is not a dtype of ours */
        OK(lf_st_get_as(st, "e", LF_DTYPE_F32, &t));
        CHECK(t && at(t, 0) == 3.f && at(t, 1) == 6.f && at(t, 2) == 1.f && isinf(at(t, 3)) && at(t, 3) < 0,
              "e5m2 per row: %g %g %g %g", t ? (double)at(t, 0) : 0, t ? (double)at(t, 1) : 0, t ? (double)at(t, 2) : 0,
              t ? (double)at(t, 3) : 0);
        lf_tensor_free(t), t = NULL;
        lf_st_close(st);
    }
    { /* errors: no scale, a scale that fits nothing, a scale in an integer dtype, a 3-D weight by rows */
        unsigned char d[24] = {0};
        OK(open_data("{\"n\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                     "\"s\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[4,8]},"
                     "\"s_scale\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]},"
                     "\"i\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,2],\"data_offsets\":[20,22]},"
                     "\"i_scale\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[22,24]}}",
                     d, sizeof d, &st));
        FAILS(LF_EINVAL, "no \"n_scale\" or \"n_scale_inv\"", lf_st_get_as(st, "n", LF_DTYPE_F32, &t));
        FAILS(LF_ESHAPE, "does not fit weight", lf_st_get_as(st, "s", LF_DTYPE_F32, &t));
        FAILS(LF_EDTYPE, "is I16; expected F32, BF16 or F16", lf_st_get_as(st, "i", LF_DTYPE_F32, &t));
        FAILS(LF_EINVAL, "no tensor \"missing\"", lf_st_get_as(st, "missing", LF_DTYPE_F32, &t));
        CHECK(!t, "nothing handed out on failure");
        lf_st_close(st);
        unsigned char d3[8 + 8] = {0};
        OK(open_data("{\"c\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2,2],\"data_offsets\":[0,8]},"
                     "\"c_scale\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                     d3, sizeof d3, &st));
        FAILS(LF_ESHAPE, "does not fit weight", lf_st_get_as(st, "c", LF_DTYPE_F32, &t));
        lf_st_close(st);
    }
    { /* an f8e4m3 tensor and its scale written, then read back as stored and dequantized */
        const float v[4] = {1.f, -3.f, 0.25f, 448.f}, sc[2] = {2.f, 0.5f};
        lf_tensor *q = NULL, *s2 = NULL, *back = NULL;
        OK(lf_tensor_from_f32(&q, LF_DTYPE_F8E4M3, 2, (int64_t[]){2, 2}, v, LF_DEVICE_CPU));
        OK(lf_tensor_from_f32(&s2, LF_DTYPE_F32, 2, (int64_t[]){2, 1}, sc, LF_DEVICE_CPU));
        lf_st_entry e[] = {{"q.weight", q}, {"q.weight_scale", s2}};
        OK(lf_st_write(lf_test_path("fp8.safetensors"), e, 2));
        OK(lf_st_open(&st, lf_test_path("fp8.safetensors")));
        CHECK(st && !strcmp(lf_st_dtype(st, "q.weight"), "F8_E4M3"), "written as F8_E4M3");
        OK(lf_st_get(st, "q.weight", &back));
        CHECK(back && q && back->dtype == LF_DTYPE_F8E4M3 && !memcmp(lf_tensor_data(back), lf_tensor_data(q), 4),
              "the codes read back as written");
        lf_tensor_free(back), back = NULL;
        OK(lf_st_get_as(st, "q.weight", LF_DTYPE_F32, &back));
        CHECK(back && at(back, 0) == 2.f && at(back, 1) == -6.f && at(back, 2) == 0.125f && at(back, 3) == 224.f,
              "and dequantized with its scale");
        lf_tensor_free(back), lf_tensor_free(q), lf_tensor_free(s2);
        lf_st_close(st);
    }
    { /* the dtypes linfuse computes in: converted, or the file's own bytes */
        const float v[3] = {1.5f, -2.25f, 1e-3f};
        OK(open_data("{\"f\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", v, sizeof v, &st));
        OK(lf_st_get_as(st, "f", LF_DTYPE_BF16, &t));
        CHECK(t && t->dtype == LF_DTYPE_BF16 && at(t, 0) == 1.5f && at(t, 1) == -2.25f &&
                  at(t, 2) == lf_f32_from_bf16(lf_bf16_from_f32(1e-3f)),
              "f32 to bf16");
        lf_tensor_free(t), t = NULL;
        OK(lf_st_get_as(st, "f", LF_DTYPE_COUNT, &t));
        CHECK(t && t->dtype == LF_DTYPE_F32 && at(t, 2) == 1e-3f, "kept as the file's");
        lf_tensor_free(t), t = NULL;
        lf_st_close(st);
    }
}

/* FP8 weights a hostile file could hold: a zero dimension beside a huge one (their product is 0
 * bytes, so the header is valid) in the weight or its scale, and scales that are NaN or
 * infinite. Refused by name; before, the block arithmetic overflowed (UBSan: signed overflow in
 * fp8.c's cdiv) and a NaN scale turned the whole layer into NaNs. */
static void test_fp8_hostile(void)
{
    lf_safetensors *st = NULL;
    lf_tensor *t = NULL;
    unsigned char d[8 + 4 + 4] = {0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38}; /* 1.0 each */
    const float one = 1.f, nan = NAN;
    memcpy(d + 8, &one, 4), memcpy(d + 12, &nan, 4);
    /* one file per case: offsets that tile the data exactly */
    OK(open_data("{\"z\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,4],\"data_offsets\":[0,8]},"
                 "\"z_scale\":{\"dtype\":\"F32\",\"shape\":[0,9223372036854775807],\"data_offsets\":[8,8]}}",
                 d, 8, &st));
    FAILS(LF_ESHAPE, "\"z\" [2, 4] with scale \"z_scale\" [0, 9223372036854775807]: a zero dimension",
          lf_st_get_as(st, "z", LF_DTYPE_F32, &t));
    lf_st_close(st), st = NULL;
    OK(open_data("{\"h\":{\"dtype\":\"F8_E4M3\",\"shape\":[9223372036854775807,0],\"data_offsets\":[0,0]},"
                 "\"h_scale\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                 d + 8, 4, &st));
    FAILS(LF_ESHAPE, "\"h\" [9223372036854775807, 0] with scale", lf_st_get_as(st, "h", LF_DTYPE_F32, &t));
    lf_st_close(st), st = NULL;
    OK(open_data("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,4],\"data_offsets\":[0,8]},"
                 "\"w_scale_inv\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                 d, 16, &st));
    FAILS(LF_EINVAL, "scale \"w_scale_inv\" of FP8 tensor \"w\" holds nan at element 1",
          lf_st_get_as(st, "w", LF_DTYPE_BF16, &t));
    lf_st_close(st), st = NULL;
    OK(open_data("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,4],\"data_offsets\":[0,8]},"
                 "\"w_scale\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[8,16]}}",
                 (unsigned char[]){0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0, 0, 0x80, 0x3f, 0, 0, 0x80, 0xff},
                 16, &st));
    FAILS(LF_EINVAL, "holds -inf at element 1", lf_st_get_as(st, "w", LF_DTYPE_F32, &t));
    CHECK(t == NULL, "nothing handed out");
    lf_st_close(st);
}

/* A Hugging Face MLP stored in FP8 (E4M3, one F32 scale per row, as llm-compressor writes):
 * loaded dequantized to bf16, the stacked weight equal to decode x scale rounded once, and every
 * variant against float64 over the dequantized weights. */
static void test_fp8_mlp_load(void)
{
    const int64_t D = 24, H = 40;
    const char *part[3] = {"gate_proj", "up_proj", "down_proj"};
    const int64_t rows[3] = {H, H, D}, cols[3] = {D, D, H};
    size_t off = 0, at_w[3], at_s[3];
    for (int i = 0; i < 3; i++)
        at_w[i] = off, off += (size_t)(rows[i] * cols[i]);
    for (int i = 0; i < 3; i++)
        at_s[i] = off, off += (size_t)rows[i] * 4;
    unsigned char *d = malloc(off);
    char header[2048];
    int hl = snprintf(header, sizeof header, "{");
    lf_rng rng;
    lf_rng_seed(&rng, 17);
    for (int i = 0; i < 3; i++) {
        for (int64_t k = 0; k < rows[i] * cols[i]; k++) { /* 0.125 to 30 (as a quantizer fills the range), both signs */
            const uint64_t r = lf_rng_next(&rng);
            d[at_w[i] + (size_t)k] = (uint8_t)(0x20 + r % 64 + (r >> 32 & 1) * 0x80);
        }
        for (int64_t r = 0; r < rows[i]; r++) {
            const float s = 0x1p-8f * (float)(1 + r % 7); /* weights of 2^-11 to 0.8 */
            memcpy(d + at_s[i] + (size_t)r * 4, &s, 4);
        }
        hl += snprintf(header + hl, sizeof header - (size_t)hl,
                       "%s\"m.%s.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[%lld,%lld],\"data_offsets\":[%zu,%zu]},"
                       "\"m.%s.weight_scale\":{\"dtype\":\"F32\",\"shape\":[%lld,1],\"data_offsets\":[%zu,%zu]}",
                       i ? "," : "", part[i], (long long)rows[i], (long long)cols[i], at_w[i],
                       at_w[i] + (size_t)(rows[i] * cols[i]), part[i], (long long)rows[i], at_s[i],
                       at_s[i] + (size_t)rows[i] * 4);
    }
    snprintf(header + hl, sizeof header - (size_t)hl, "}");
    lf_safetensors *st = NULL;
    OK(open_data(header, d, off, &st));
    lf_nn_gated_mlp m;
    if (st && lf_nn_gated_mlp_load(&m, st, "m", LF_ACT_SILU, LF_DTYPE_COUNT) == LF_OK) {
        CHECK(m.gate_up->dtype == LF_DTYPE_BF16 && m.dim == D && m.hidden == H, "FP8 MLP loaded as bf16 %lld -> %lld",
              (long long)m.dim, (long long)m.hidden);
        const uint16_t *gu = lf_tensor_data(m.gate_up);
        int bad = 0;
        for (int64_t r = 0; r < 2 * H; r++)
            for (int64_t c = 0; c < D; c++) {
                const int i = r < H ? 0 : 1;
                const int64_t rr = r % H;
                float s;
                memcpy(&s, d + at_s[i] + (size_t)rr * 4, 4);
                bad += gu[r * D + c] != lf_bf16_from_f32(lf_f32_from_f8e4m3(d[at_w[i] + (size_t)(rr * D + c)]) * s);
            }
        CHECK(!bad, "[Wg; Wu] is decode x scale rounded once to bf16 (%d of %lld differ)", bad, (long long)(2 * H * D));
        int64_t xs[2] = {7, D};
        lf_tensor *x = rand_tensor(&rng, LF_DTYPE_BF16, 2, xs);
        for (int v = 0; v < LF_MLP_VARIANT_COUNT; v++) {
            lf_tensor *y = NULL;
            OK(lf_nn_gated_mlp_forward_variant(&m, (lf_mlp_variant)v, x, &y));
            double err = y ? gated_mlp_err(&m, x, y, 1) : 1;
            CHECK(err < tol_for(LF_DTYPE_BF16), "FP8-loaded MLP %s: err %.3g", lf_mlp_variant_name((lf_mlp_variant)v),
                  err);
            lf_tensor_free(y);
        }
        lf_tensor_free(x);
        lf_nn_gated_mlp_free(&m);
    } else {
        CHECK(0, "FP8 MLP load: %s", lf_last_error());
    }
    lf_st_close(st);
    free(d);
}

int main(void)
{
    if (!lf_test_tmpdir("lf_st_"))
        return 1;
    test_round_trip();
    test_sharded();
    test_bad_files();
    test_unaligned();
    test_config();
    test_mlp_load();
    test_cut_while_open();
    test_not_files();
    test_fp8_decode();
    test_fp8_load();
    test_fp8_hostile();
    test_fp8_mlp_load();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", lf_test_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", lf_test_dir);
    return lf_test_finish("test_safetensors");
}
