#!/usr/bin/env python3
"""DLPack between NumPy and linfuse, through NumPy's own exporter (ndarray.__dlpack__) and
importer (numpy.from_dlpack) and linfuse's C functions called with ctypes: arrays at odd strides
and offsets come in without a copy and compute the float64 answer, results go back out without a
copy, every deleter runs exactly once, nothing grows over 10,000 round trips, and what linfuse
cannot take is refused with its message. Where Debian's python3-torch is installed, the same
through torch tensors (bfloat16 among them).

usage: tests/dlpack_numpy.py BUILD/liblinfuse.so"""
import ctypes as C
import gc
import os
import resource
import sys

import numpy as np

failures = checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("check failed: " + what, file=sys.stderr)


PyCapsule_GetPointer = C.pythonapi.PyCapsule_GetPointer
PyCapsule_GetPointer.restype, PyCapsule_GetPointer.argtypes = C.c_void_p, [C.py_object, C.c_char_p]
PyCapsule_SetName = C.pythonapi.PyCapsule_SetName
PyCapsule_SetName.restype, PyCapsule_SetName.argtypes = C.c_int, [C.py_object, C.c_char_p]
DESTRUCTOR = C.CFUNCTYPE(None, C.c_void_p)
PyCapsule_New = C.pythonapi.PyCapsule_New
PyCapsule_New.restype, PyCapsule_New.argtypes = C.py_object, [C.c_void_p, C.c_char_p, DESTRUCTOR]


class DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device_type", C.c_int32), ("device_id", C.c_int32), ("ndim", C.c_int32),
                ("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16),
                ("shape", C.POINTER(C.c_int64)), ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


class DLManagedTensor(C.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", C.c_void_p),
                ("deleter", C.CFUNCTYPE(None, C.c_void_p))]


lib = C.CDLL(sys.argv[1] if len(sys.argv) > 1 else "liblinfuse.so")
lib.lf_last_error.restype = C.c_char_p
lib.lf_tensor_from_dlpack.argtypes = [C.POINTER(C.c_void_p), C.c_void_p]
lib.lf_tensor_to_dlpack.argtypes = [C.c_void_p, C.POINTER(C.c_void_p)]
lib.lf_tensor_free.argtypes = [C.c_void_p]
lib.lf_mm.argtypes = [C.POINTER(C.c_void_p), C.c_void_p, C.c_void_p]
lib.lf_add.argtypes = [C.POINTER(C.c_void_p), C.c_void_p, C.c_void_p]
RELEASE = C.CFUNCTYPE(None, C.c_void_p)
lib.lf_tensor_from_memory.argtypes = [C.POINTER(C.c_void_p), C.c_int, C.c_int, C.POINTER(C.c_int64), C.c_void_p,
                                      C.c_size_t, RELEASE, C.c_void_p]


def to_lf(obj):
    """obj's DLPack capsule taken by linfuse: the linfuse tensor, or the refusal's message."""
    cap = obj.__dlpack__()
    ptr = PyCapsule_GetPointer(cap, b"dltensor")
    t = C.c_void_p()
    if lib.lf_tensor_from_dlpack(C.byref(t), C.c_void_p(ptr)) != 0:
        return None, lib.lf_last_error().decode()
    PyCapsule_SetName(cap, b"used_dltensor")  # linfuse owns it now: the capsule must not delete it
    return t, None


class Exported:
    """A linfuse tensor handed out through DLPack, for numpy.from_dlpack (its capsule deletes the
    DLManagedTensor only when nobody consumed it, as the protocol says)."""

    def __init__(self, t, device=(1, 0)):
        out = C.c_void_p()
        rc = lib.lf_tensor_to_dlpack(t, C.byref(out))
        assert rc == 0, lib.lf_last_error()
        self.ptr, self.device = out.value, device

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        return PyCapsule_New(self.ptr, b"dltensor", capsule_destructor)


# In a capsule's destructor the capsule is a raw pointer on its way out: it is looked at through
# prototypes that take it as a pointer, so no reference is taken on it.
raw_is_valid = C.PYFUNCTYPE(C.c_int, C.c_void_p, C.c_char_p)(("PyCapsule_IsValid", C.pythonapi))
raw_get_pointer = C.PYFUNCTYPE(C.c_void_p, C.c_void_p, C.c_char_p)(("PyCapsule_GetPointer", C.pythonapi))


@DESTRUCTOR
def capsule_destructor(cap):
    if raw_is_valid(cap, b"dltensor"):  # never consumed (a consumer renames it "used_dltensor")
        mt = C.cast(raw_get_pointer(cap, b"dltensor"), C.POINTER(DLManagedTensor))
        mt.contents.deleter(C.cast(mt, C.c_void_p))


def lf_op(fn, *args):
    out = C.c_void_p()
    rc = fn(C.byref(out), *args)
    assert rc == 0, lib.lf_last_error().decode()
    return out


def from_lf(t):
    return np.from_dlpack(Exported(t))


def test_matmul_at_odd_strides():
    rng = np.random.default_rng(0)
    big = rng.uniform(-1, 1, (40, 60)).astype(np.float32)
    x = big[3:24:3, 5:48:2]  # (7, 22): row stride 180 elements, column stride 2, an offset
    w = rng.uniform(-1, 1, (9, 22)).astype(np.float32)
    wt = w.T  # (22, 9), strides (1, 22)
    before = sys.getrefcount(big), sys.getrefcount(w)
    tx, err = to_lf(x)
    tw, err2 = to_lf(wt)
    check(tx is not None and tw is not None, "odd strides taken: %s %s" % (err, err2))
    y = lf_op(lib.lf_mm, tx, tw)
    got = from_lf(y)
    ref = x.astype(np.float64) @ wt.astype(np.float64)
    check(got.shape == (7, 9) and np.abs(got - ref).max() < 1e-5, "x @ w^T through DLPack both ways")
    lib.lf_tensor_free(tx), lib.lf_tensor_free(tw), lib.lf_tensor_free(y)
    gc.collect()
    check((sys.getrefcount(big), sys.getrefcount(w)) == before,
          "numpy's deleters ran once linfuse let go (refcounts %s, were %s)" % ((sys.getrefcount(big), sys.getrefcount(w)), before))
    # f16, transposed, in and out; the result shares linfuse's memory
    h = rng.uniform(-4, 4, (6, 10)).astype(np.float16)[:, ::3].T  # (4, 6) at strides (3, 10)
    th, err = to_lf(h)
    check(th is not None, "f16 taken: %s" % err)
    s = lf_op(lib.lf_add, th, th)
    back = from_lf(s)
    check(back.dtype == np.float16 and np.array_equal(back, h + h), "f16 add through DLPack")
    back2 = from_lf(s)
    check(np.shares_memory(back, back2), "two exports of one tensor are the same memory (no copy)")
    lib.lf_tensor_free(th), lib.lf_tensor_free(s)


def test_round_trip_no_copy():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[1:, ::2]
    t, err = to_lf(a)
    check(t is not None, err)
    b = from_lf(t)
    check(np.shares_memory(a, b) and b.shape == a.shape and b.strides == a.strides,
          "numpy -> linfuse -> numpy is the same memory, shape and strides (%s %s)" % (b.shape, b.strides))
    lib.lf_tensor_free(t)
    a[0, 0] = 100
    check(b[0, 0] == 100, "a write through one is seen through the other")


def test_deleters_counted():
    released = []

    @RELEASE
    def release(ctx):
        released.append(ctx)

    buf = (C.c_float * 12)(*range(12))
    shape = (C.c_int64 * 2)(3, 4)
    t = C.c_void_p()
    rc = lib.lf_tensor_from_memory(C.byref(t), 0, 2, shape, C.cast(buf, C.c_void_p), 48, release, None)
    check(rc == 0, "from_memory")
    arr = from_lf(t)
    lib.lf_tensor_free(t)
    gc.collect()
    check(released == [], "linfuse's memory is held while numpy holds its export")
    check(arr[2, 3] == 11, "read through numpy")
    del arr
    gc.collect()
    check(len(released) == 1, "linfuse's deleter ran once when numpy let go (%d times)" % len(released))
    unused = Exported(lf_op(lambda o: lib.lf_tensor_from_memory(o, 0, 2, shape, C.cast(buf, C.c_void_p), 48,
                                                              release, None)))
    cap = unused.__dlpack__()
    del cap  # never consumed: the capsule deletes it
    gc.collect()
    check(len(released) == 1, "a capsule never consumed does not run the deleter of the tensor still held")


def test_no_growth():
    a = np.ones((33, 17), dtype=np.float32)[::2]
    rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    base = sys.getrefcount(a)
    for i in range(10000):
        if i == 1000:
            start = rss()
        t, _ = to_lf(a)
        b = from_lf(t)
        lib.lf_tensor_free(t)
        del b
    gc.collect()
    grew = rss() - start
    check(sys.getrefcount(a) == base, "no reference left behind over 10,000 round trips")
    check(grew < 8 * 1024, "peak RSS grew %d KiB over 9,000 round trips" % grew)


def test_refusals():
    for arr, needle in [(np.zeros((2, 3)), "float64"), (np.zeros(3, dtype=np.int64), "int64"),
                        (np.zeros((1, 1, 1, 1, 2), dtype=np.float32), "5 dims"),
                        (np.zeros((4, 3), dtype=np.float32)[::-1], "negative"),
                        (np.zeros((0, 3), dtype=np.float32), "")]:
        before = sys.getrefcount(arr)
        t, err = to_lf(arr)
        check(t is None and needle in (err or ""), "refused with a message naming %r: %r" % (needle, err))
    gc.collect()


def test_torch():
    try:
        import torch
        import torch.utils.dlpack as tdl
    except ImportError:
        print("dlpack_numpy: torch not installed: the torch cases are skipped")
        return
    x = torch.randn(8, 12, dtype=torch.bfloat16)[:, 1::2]
    t, err = to_lf(x)
    check(t is not None, "a bf16 torch view taken: %s" % err)
    y = lf_op(lib.lf_add, t, t)
    back = tdl.from_dlpack(Exported(y))
    check(back.dtype == torch.bfloat16 and torch.equal(back, x + x), "bf16 add through DLPack with torch")
    lib.lf_tensor_free(t), lib.lf_tensor_free(y)


test_matmul_at_odd_strides()
test_round_trip_no_copy()
test_deleters_counted()
test_no_growth()
test_refusals()
test_torch()
print("dlpack_numpy: %d checks, %d failed" % (checks, failures))
sys.exit(1 if failures else 0)
