/* FLOPs from an op's recorded sizes, as PyTorch's table computes them (shape_flops.h).
 * Layer: trace/. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trace/shape_flops.h"

/* --- FLOPs from input shapes, as PyTorch's profiler computes them under with_flops ---
 * PyTorch's traces carry no FLOPs: its table computes them from each op's recorded sizes, for
 * aten::mm, addmm, bmm, baddbmm (2 x the product's multiply-adds), mul and add (one per element
 * of the first input) and conv2d (2 x output pixels x kernel x channels / groups, its stride,
 * padding, dilation and groups read from "Concrete Inputs"); every other op has none. The
 * arithmetic is PyTorch's, in unsigned 64 bits and in its order, so the sums print its digits;
 * conv2d's, whose sizes come from a trace's Concrete Inputs, is checked: values that overflow (a
 * hostile trace's, never a real run's) count no FLOPs rather than PyTorch's wrapped ones. */

/* Input k's sizes when it is a tensor (its type a dtype name, which starts in lower case; a
 * Scalar, list or missing input does not); n = -1 otherwise. */
static int dims_of(json_t *dims, json_t *types, size_t k, int64_t out[8])
{
    const char *ty = json_string_value(json_array_get(types, k));
    json_t *d = json_array_get(dims, k);
    if (!ty || !islower((unsigned char)ty[0]) || !json_is_array(d) || json_array_size(d) > 8)
        return -1;
    for (size_t i = 0; i < json_array_size(d); i++) {
        json_t *v = json_array_get(d, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return -1;
        out[i] = (int64_t)json_integer_value(v);
    }
    return (int)json_array_size(d);
}

/* A concrete input ("[1, 1]" or "1", as strings) as up to 2 integers; its count, or -1. */
static int concrete_ints(json_t *concrete, size_t k, int64_t out[2])
{
    const char *s = json_string_value(json_array_get(concrete, k));
    if (!s)
        return -1;
    int n = 0;
    while (*s && n <= 2) {
        while (*s == '[' || *s == ' ' || *s == ',')
            s++;
        if (*s == ']' || !*s)
            break;
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || n == 2)
            return -1;
        out[n++] = v;
        s = end;
    }
    return n;
}

double lf_trace_shape_flops(const char *op, json_t *args)
{
    json_t *dims = json_object_get(args, "Input Dims"), *types = json_object_get(args, "Input type");
    int64_t a[8], b[8];
    int na, nb;
    int mm = !strcmp(op, "aten::mm"), addmm = !strcmp(op, "aten::addmm"), bmm = !strcmp(op, "aten::bmm"),
        baddbmm = !strcmp(op, "aten::baddbmm");
    if (mm || addmm || bmm || baddbmm) {
        const size_t first = addmm || baddbmm ? 1 : 0; /* addmm(self, mat1, mat2) */
        if ((addmm || baddbmm) && dims_of(dims, types, 0, a) < 0)
            return 0;
        if ((na = dims_of(dims, types, first, a)) < 0 || (nb = dims_of(dims, types, first + 1, b)) < 0 || na == 0)
            return 0;
        const uint64_t k = (uint64_t)a[na - 1], batch = (uint64_t)a[0];
        if (k == 0 || ((bmm || baddbmm) && batch == 0))
            return 0;
        uint64_t f = 1;
        for (int i = 0; i < na; i++)
            f *= (uint64_t)a[i];
        f /= k;
        if (bmm || baddbmm)
            f /= batch;
        for (int i = 0; i < nb; i++)
            f *= (uint64_t)b[i];
        return (double)(f * 2);
    }
    if (!strcmp(op, "aten::mul") || !strcmp(op, "aten::add")) {
        if ((na = dims_of(dims, types, 0, a)) < 0)
            return 0;
        uint64_t f = 1;
        for (int i = 0; i < na; i++)
            f *= (uint64_t)a[i];
        return (double)f;
    }
    if (!strcmp(op, "aten::conv2d")) {
        json_t *conc = json_object_get(args, "Concrete Inputs");
        int64_t stride[2], pad[2], dil[2], groups[2];
        if (dims_of(dims, types, 0, a) != 4 || dims_of(dims, types, 1, b) != 4 || concrete_ints(conc, 3, stride) != 2 ||
            concrete_ints(conc, 4, pad) != 2 || concrete_ints(conc, 5, dil) != 2 ||
            concrete_ints(conc, 6, groups) != 1 || groups[0] <= 0)
            return 0;
        /* a trace is a file: its numbers are checked, and sizes that overflow count no FLOPs */
        int64_t out[2];
        for (int d = 0; d < 2; d++) {
            int64_t t, span;
            if (stride[d] <= 0 || pad[d] < 0 || dil[d] <= 0 || __builtin_mul_overflow(pad[d], 2, &t) ||
                __builtin_add_overflow(a[2 + d], t, &t) || __builtin_mul_overflow(dil[d], b[2 + d] - 1, &span) ||
                __builtin_sub_overflow(t, span, &t) || t - 1 < 0)
                return 0;
            out[d] = (t - 1) / stride[d] + 1;
        }
        const int64_t factors[7] = {a[0], out[0], out[1], b[2], b[3], a[1], b[0]};
        int64_t f = 2;
        for (int i = 0; i < 7; i++)
            if (factors[i] < 0 || __builtin_mul_overflow(f, factors[i], &f))
                return 0;
        return (double)(f / groups[0]);
    }
    return 0;
}
