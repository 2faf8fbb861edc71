/* safetensors files: what the writer writes the reader reads back exactly (every dtype, views
 * written contiguous, sharded checkpoints through their index); every malformed file a clear
 * error naming what is wrong; config.json's activation; a Hugging Face MLP loaded by its names
 * and run in every variant against float64. */
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
    lf_test_write_text(lf_test_path("sharded/model.safetensors.index.json"),
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
    lf_test_write_text(lf_test_path("sharded/model.safetensors.index.json"), "{\"weight_map\": {\"layer.a\": \"missing.safetensors\"}}");
    FAILS(LF_EINVAL, "missing.safetensors: No such file", lf_st_open(&st, lf_test_path("sharded/model.safetensors.index.json")));
    OK(lf_st_write(lf_test_path("sharded/model-00002-of-00002.safetensors"), e1, 1)); /* now layer.a is in both */
    lf_test_write_text(lf_test_path("sharded/model.safetensors.index.json"),
               "{\"weight_map\": {\"layer.a\": \"model-00001-of-00002.safetensors\", \"x\": "
               "\"model-00002-of-00002.safetensors\"}}");
    FAILS(LF_EINVAL, "\"layer.a\" is in", lf_st_open(&st, lf_test_path("sharded")));
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
    FAILS(LF_EINVAL, "duplicate", open_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                                             8, 0, &st));
    FAILS(LF_EINVAL, "header:", open_bytes("{\"\xff\xfe\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0,
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
    lf_test_write_text(lf_test_path("gemma/config.json"), "{\"hidden_act\": \"gelu\", \"hidden_activation\": \"gelu_pytorch_tanh\"}");
    lf_test_write_text(lf_test_path("other/config.json"), "{\"hidden_act\": \"relu\"}");
    OK(lf_hf_config_act(lf_test_path("llama"), &a));
    CHECK(a == LF_ACT_SILU, "llama: silu");
    OK(lf_hf_config_act(lf_test_path("gemma/model.safetensors"), &a)); /* the config beside the weights */
    CHECK(a == LF_ACT_GELU_TANH, "gemma: hidden_activation wins: gelu_tanh");
    FAILS(LF_EINVAL, "\"relu\" is not silu", lf_hf_config_act(lf_test_path("other/config.json"), &a));
    FAILS(LF_EINVAL, NULL, lf_hf_config_act(lf_test_path("sharded"), &a)); /* no config there */
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
            CHECK(m.dim == D && m.hidden == H && m.act == act && m.gate_up->dtype == (dt ? LF_DTYPE_F32 : LF_DTYPE_BF16),
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
        FAILS(LF_EINVAL, "no \"model.layers.4.mlp.gate_proj.weight\"", lf_nn_gated_mlp_load(&m, st, "model.layers.4.mlp", act,
                                                                                            LF_DTYPE_COUNT));
        lf_st_close(st);
        /* weights that do not fit together */
        lf_st_entry bad[] = {{"p.gate_proj.weight", g}, {"p.up_proj.weight", u}, {"p.down_proj.weight", g}};
        OK(lf_st_write(lf_test_path("bad_mlp.safetensors"), bad, 3));
        OK(lf_st_open(&st, lf_test_path("bad_mlp.safetensors")));
        FAILS(LF_ESHAPE, "expected (H, D), (H, D), (D, H)", lf_nn_gated_mlp_load(&m, st, "p", act, LF_DTYPE_COUNT));
        lf_st_close(st);
        lf_tensor_free(g), lf_tensor_free(u), lf_tensor_free(dn), lf_tensor_free(x);
    }
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
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", lf_test_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", lf_test_dir);
    return lf_test_finish("test_safetensors");
}
