#!/usr/bin/env python3
"""The Python package (python/linfuse) on the CPU, over the library given:

  the loader   which library it took and why (LINFUSE_LIBRARY, a missing or broken file said by
               name), its version and the package's against linfuse/version.h, and an import that
               pulls in neither numpy nor torch;
  the mirrors  the enum values and the lf_nn_gated_mlp struct _lib.py mirrors, against the
               library's own names and what lf_nn_gated_mlp_init fills in;
  numbers      linear (every activation, with and without bias), the gated GEMM and every MLP
               variant against float64, at odd sizes through strided views, in f32 and f16;
               the fp8 variant runs gated here, says so with an Fp8FallbackWarning, and gives the
               gated variant's bits; quantize_fp8's codes decode to the weights;
  refusals     a dtype, a shape, a stride, a layout linfuse cannot take raise linfuse.Error with
               linfuse's message and status;
  memory       every DLPack deleter runs: references back and peak RSS flat over 10,000 calls
               of each op;
  torch        where torch is importable (Debian's python3-torch, 1.13): the same through torch
               tensors (bf16 too), and linfuse.torch: apply() on Llama- and Gemma-shaped MLPs
               (the report, state_dict keys, no memory growth, output within bf16 tolerance,
               backward refused, a moved model caught, unapply); on torch >= 2.4 the custom ops
               with torch.library.opcheck and torch.compile(fullgraph=True) with no graph break.

Error measure (as the C tests'): |got - ref| / (mag + tiny), mag the sum of the magnitudes of
the terms that made ref (|x| @ |W|^T + |b| for a Linear), so sums that cancel do not blow it up.
Tolerances: f32 1e-5, f16 2e-3 for one GEMM; the MLP, whose g, u and h are rounded to the dtype
in between, f32 1e-5, f16 4e-3, bf16 3e-2.

usage: tests/python_test.py BUILD/liblinfuse.so   (PYTHONPATH=python, LINFUSE_LIBRARY as given)
       tests/python_test.py --installed           (the package a wheel installed, nothing set)"""
import ctypes as C
import copy
import gc
import os
import pickle
import re
import resource
import subprocess
import sys
import threading
import types
import warnings
import weakref

failures = checks = 0
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOL = {"f32": 1e-5, "f16": 2e-3, "bf16": 2e-2}
MLP_TOL = {"f32": 1e-5, "f16": 4e-3, "bf16": 3e-2}


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("check failed: " + what, file=sys.stderr)
    return cond


def raises(exc, needles, fn, what):
    """fn() must raise exc whose message holds every needle."""
    try:
        fn()
    except exc as e:
        msg = str(e)
        return check(all(n in msg for n in needles), "%s: message %r lacks %r" % (what, msg, needles))
    except Exception as e:  # noqa: BLE001
        return check(False, "%s: raised %s: %s, expected %s" % (what, type(e).__name__, e, exc.__name__))
    return check(False, "%s: did not raise" % what)


def python(code, env_over):
    env = dict(os.environ)
    for k, v in env_over.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def header_version():
    text = open(os.path.join(ROOT, "include", "linfuse", "version.h")).read()
    return ".".join(re.search(r"#define LF_VERSION_%s (\d+)" % k, text).group(1) for k in ("MAJOR", "MINOR", "PATCH"))


# --- the loader ---

def test_loader(lib_path):
    import linfuse
    check(os.path.samefile(linfuse.library_path, lib_path) and linfuse.library_source == "LINFUSE_LIBRARY",
          "loaded %s (%s), expected %s through LINFUSE_LIBRARY" % (linfuse.library_path, linfuse.library_source,
                                                                   lib_path))
    v = header_version()
    check(linfuse.library_version() == v and linfuse.__version__ == v,
          "versions: library %s, package %s, version.h %s" % (linfuse.library_version(), linfuse.__version__, v))
    rc, out = python("import sys, linfuse; print(sorted(m for m in ('numpy', 'torch') if m in sys.modules))", {})
    check(rc == 0 and out.strip() == "[]", "import linfuse imports neither numpy nor torch: %r" % out)
    rc, out = python("import linfuse", {"LINFUSE_LIBRARY": "/nonexistent/liblinfuse.so"})
    check(rc != 0 and "/nonexistent/liblinfuse.so (LINFUSE_LIBRARY): no such file" in out,
          "a missing LINFUSE_LIBRARY named: %r" % out[-300:])
    rc, out = python("import linfuse", {"LINFUSE_LIBRARY": os.path.abspath(__file__)})
    check(rc != 0 and os.path.abspath(__file__) + " (LINFUSE_LIBRARY): " in out and "no usable liblinfuse" in out,
          "a file that is no library named with the loader's reason: %r" % out[-300:])
    rc, out = python("import linfuse", {"LINFUSE_LIBRARY": None})
    check(rc != 0 and "LINFUSE_LIBRARY is not set" in out and "cmake --install" in out,
          "with nothing to load, the three places are said: %r" % out[-400:])


def test_loader_installed():
    """An installed package (a wheel's): linfuse comes from the install, not this source tree, with
    its own library, with no PYTHONPATH or LINFUSE_LIBRARY."""
    import linfuse
    pkg = os.path.dirname(os.path.abspath(linfuse.__file__))
    check(not pkg.startswith(os.path.join(ROOT, "python")), "linfuse imported from the install: %s" % pkg)
    check(linfuse.library_source == "the install's libdir" and
          os.path.dirname(os.path.abspath(linfuse.library_path)).startswith(pkg),
          "the package's own library: %s (%s)" % (linfuse.library_path, linfuse.library_source))
    v = header_version()
    check(linfuse.library_version() == v and linfuse.__version__ == v,
          "versions: library %s, package %s, version.h %s" % (linfuse.library_version(), linfuse.__version__, v))
    rc, out = python("import sys, linfuse; print(sorted(m for m in ('numpy', 'torch') if m in sys.modules))", {})
    check(rc == 0 and out.strip() == "[]", "import linfuse imports neither numpy nor torch: %r" % out)


# --- the mirrors in _lib.py ---

def test_mirrors():
    import linfuse
    from linfuse import _lib
    lib = linfuse.lib
    for table, fn in ((_lib.DTYPE, lib.lf_dtype_name), (_lib.ACT, lib.lf_act_name),
                      (_lib.VARIANT, lib.lf_mlp_variant_name)):
        for name, value in table.items():
            check(fn(value).decode() == name, "enum %s = %d is %r in the library" % (name, value, fn(value)))
    check(lib.lf_device_name(_lib.DEVICE_CPU) == b"cpu" and lib.lf_device_name(_lib.DEVICE_CUDA) == b"cuda",
          "device enum")
    m, opts, rng = _lib.GatedMlp(), _lib.GatedMlpOpts(24, 40, _lib.DTYPE["bf16"], _lib.DEVICE_CPU, _lib.ACT["silu"]), \
        _lib.Rng()
    lib.lf_rng_seed(C.byref(rng), 3)
    check(lib.lf_nn_gated_mlp_init(C.byref(m), C.byref(opts), C.byref(rng)) == 0, "init: " + lib.error())
    gu = lib.lf_tensor_data(m.gate_up)
    check(m.dim == 24 and m.hidden == 40 and m.act == _lib.ACT["silu"], "the struct's dim, hidden, act as init wrote")
    check(lib.lf_tensor_numel(m.gate_up) == 80 * 24 and lib.lf_tensor_data(m.gate.weight) == gu and
          lib.lf_tensor_data(m.up.weight) == gu + 40 * 24 * 2, "gate_up and the gate/up views where init put them")
    check(m.gate.in_features == 24 and m.gate.out_features == 40 and m.down.in_features == 40 and
          m.down.out_features == 24 and lib.lf_tensor_numel(m.down.weight) == 24 * 40 and not m.down.bias,
          "the three nn_linear mirrors")
    check(not any((m.gate_up_q, m.gate_up_scale, m.down_q, m.down_scale)), "no FP8 weights before quantizing")
    check(lib.lf_nn_gated_mlp_quantize_fp8(C.byref(m)) == 0, "quantize: " + lib.error())
    check(lib.lf_tensor_numel(m.gate_up_q) == 80 * 24 and lib.lf_tensor_numel(m.gate_up_scale) == 80 and
          lib.lf_tensor_numel(m.down_q) == 24 * 40 and lib.lf_tensor_numel(m.down_scale) == 4,
          "the four FP8 fields where quantize put them")
    lib.lf_nn_gated_mlp_free(C.byref(m))
    check(not m.gate_up and not m.down_q, "free clears the handles")


# --- numbers against float64 (numpy) ---

def act_ref(np, act, z):
    if act in (None, "none"):
        return z
    if act == "relu":
        return np.maximum(z, 0)
    if act == "silu":
        return z / (1 + np.exp(-z))
    if act == "gelu_tanh":
        return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    from math import erf
    return 0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2)))


def err(np, got, ref, mag):
    return float(np.max(np.abs(np.asarray(got, dtype=np.float64) - ref) / (mag + 1e-30)))


def strided(np, rng, shape, dtype, lo=-1, hi=1):
    """A view at odd strides and an offset: every other element of a larger buffer, last dim first."""
    big = rng.uniform(lo, hi, tuple(2 * s + 1 for s in shape)).astype(dtype)
    return big[(slice(1, None, 2),) * len(shape)]


def test_linear_numpy():
    import numpy as np
    import linfuse
    rng = np.random.default_rng(1)
    for dt, name in ((np.float32, "f32"), (np.float16, "f16")):
        x = strided(np, rng, (3, 5, 37), dt)  # (3, 5, 37) at strides (2*11*75, 2*75, 2)
        w = rng.uniform(-1, 1, (37, 19)).astype(dt).T  # (19, 37), a transposed view
        b = rng.uniform(-1, 1, 19).astype(dt)
        for act in (None, "relu", "gelu_tanh", "gelu_erf", "silu"):
            for bias in (None, b):
                y = linfuse.linear(x, w, bias, act=act)
                X, W = x.astype(np.float64), w.astype(np.float64)
                z = X @ W.T + (0 if bias is None else bias.astype(np.float64))
                mag = np.abs(X) @ np.abs(W).T + (0 if bias is None else np.abs(bias.astype(np.float64)))
                e = err(np, y, act_ref(np, act, z), mag)
                check(type(y) is np.ndarray and y.dtype == dt and y.shape == (3, 5, 19),
                      "linear %s returns a numpy %s (3, 5, 19): %s %s" % (name, name, y.dtype, y.shape))
                check(e <= TOL[name], "linear %s act=%s bias=%s: error %.3g > %.0e" % (name, act, bias is not None,
                                                                                      e, TOL[name]))
    y1 = linfuse.linear(np.ones(7, np.float32), np.ones((3, 7), np.float32))
    check(y1.shape == (3,) and np.all(y1 == 7), "a 1-D x gives a 1-D y")
    y0 = linfuse.linear(np.ones((0, 7), np.float32), np.ones((3, 7), np.float32))
    check(y0.shape == (0, 3), "zero tokens give an empty (0, 3) y without calling linfuse")


def mlp_ref(np, x, gate_up, down, act):
    """y and its magnitude, in float64."""
    X, GU, DN = (a.astype(np.float64) for a in (x, gate_up, down))
    H = GU.shape[0] // 2
    g, u = X @ GU[:H].T, X @ GU[H:].T
    h = act_ref(np, act, g) * u
    mag_h = np.abs(act_ref(np, act, g)) * np.abs(u) + np.abs(X) @ np.abs(GU[:H]).T * np.abs(u)
    return h @ DN.T, np.abs(h) @ np.abs(DN).T + 0.01 * (mag_h @ np.abs(DN).T), h


def test_mlp_numpy():
    import numpy as np
    import linfuse
    rng = np.random.default_rng(2)
    D, H = 40, 72
    for dt, name in ((np.float32, "f32"), (np.float16, "f16")):
        x = strided(np, rng, (3, 7, D), dt)
        gate_up = rng.uniform(-0.3, 0.3, (2 * H, D)).astype(dt)
        down = rng.uniform(-0.3, 0.3, (H, D)).astype(dt).T  # (D, H) as a transposed view
        for act in ("silu", "gelu_tanh"):
            ref, mag, h = mlp_ref(np, x, gate_up, down, act)
            ys = {}
            for v in ("eager", "fused", "gated"):
                ys[v] = y = linfuse.gated_mlp(x, gate_up, down, act=act, variant=v)
                e = err(np, y, ref, mag)
                check(y.shape == (3, 7, D) and y.dtype == dt, "mlp %s %s shape/dtype" % (v, name))
                check(e <= MLP_TOL[name], "mlp %s %s %s: error %.3g > %.0e" % (v, act, name, e, MLP_TOL[name]))
            check(np.array_equal(ys["eager"], ys["fused"]), "fused == eager bit for bit (%s %s)" % (act, name))
            g = linfuse.gated_gemm(x, gate_up, act=act)
            X = x.astype(np.float64)
            mag_g = (np.abs(X) @ np.abs(gate_up[:H].astype(np.float64)).T) * \
                (np.abs(X) @ np.abs(gate_up[H:].astype(np.float64)).T)
            check(g.shape == (3, 7, H) and err(np, g, h, mag_g + np.abs(h)) <= 2 * TOL[name],
                  "gated_gemm %s %s: error %.3g" % (act, name, err(np, g, h, mag_g + np.abs(h))))
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                y8 = linfuse.gated_mlp(x, gate_up, down, act=act, variant="fp8")
            said = [str(w.message) for w in seen if issubclass(w.category, linfuse.Fp8FallbackWarning)]
            check(len(said) == 1 and "runs as the gated one" in said[0] and "no FP8" in said[0],
                  "the fp8 variant on the CPU says it runs gated, and why: %r" % said)
            check(np.array_equal(y8, ys["gated"]), "the fp8 variant here gives the gated variant's bits")


def e4m3_decode(np, q):
    q = q.astype(np.int32)
    s = np.where(q & 0x80, -1.0, 1.0)
    e, m = (q >> 3) & 0xF, q & 7
    return s * np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7))


def test_quantize_numpy():
    import numpy as np
    import linfuse
    rng = np.random.default_rng(3)
    D, H = 48, 200
    gate_up = rng.uniform(-1, 1, (2 * H, D)).astype(np.float32)
    down = rng.uniform(-1, 1, (D, H)).astype(np.float32)
    gq, gs, dq, ds = linfuse.quantize_fp8(gate_up, down)
    check(gq.shape == (2 * H, D) and gq.dtype == np.uint8 and gs.shape == (2 * H, 1) and gs.dtype == np.float32 and
          dq.shape == (D, H) and dq.dtype == np.uint8 and ds.shape == (1, 4), "quantize_fp8's four arrays: %s" % (
              [(a.shape, a.dtype) for a in (gq, gs, dq, ds)],))
    deq = e4m3_decode(np, gq) * gs
    bound = 2.0 ** -4 * np.abs(gate_up) + 2.0 ** -9 * gs
    check(np.all(np.abs(deq - gate_up) <= bound), "gate_up's E4M3 codes times their row scales are the weights "
          "to within E4M3's step (worst %.3g)" % float(np.max(np.abs(deq - gate_up) / bound)))
    deq_d = e4m3_decode(np, dq) * np.repeat(ds[0, :2], 128)[:H]
    check(np.all(np.abs(deq_d - down) <= 2.0 ** -4 * np.abs(down) + 2.0 ** -9 * ds.max()),
          "down's codes times their 128 x 128 block scales are the weights")


def test_refusals_numpy():
    import numpy as np
    import linfuse
    x = np.ones((4, 8), np.float32)
    w = np.ones((3, 8), np.float32)
    raises(linfuse.Error, ["linfuse.linear: x", "float64"], lambda: linfuse.linear(x.astype(np.float64), w),
           "a float64 x")
    raises(linfuse.Error, ["linfuse.linear", "cannot be multiplied"], lambda: linfuse.linear(x, w[:, :6]),
           "mismatched inner dims")
    try:
        linfuse.linear(x, w[:, :6])
    except linfuse.Error as e:
        check(e.status_name == "LF_ESHAPE", "the Error carries linfuse's status: %s" % e.status_name)
    raises(linfuse.Error, ["linfuse.linear: x", "negative"], lambda: linfuse.linear(x[::-1], w), "a negative stride")
    raises(linfuse.Error, ["linfuse.linear"], lambda: linfuse.linear(x, w.astype(np.float16)), "mixed dtypes")
    raises(linfuse.Error, ["bias must be contiguous"], lambda: linfuse.linear(x, w, np.ones(6, np.float32)[::2]),
           "a strided bias (linfuse's epilogue reads it contiguous)")
    gu, dn = np.ones((16, 8), np.float32), np.ones((8, 8), np.float32)
    raises(linfuse.Error, ["linfuse.gated_mlp", "is not contiguous (strides 1, 16)", "pass a contiguous copy"],
           lambda: linfuse.gated_mlp(x, np.ones((8, 16), np.float32).T, dn), "a gate_up that is not contiguous")
    raises(linfuse.Error, ["linfuse.gated_mlp", "x is f16 but the weights are f32"],
           lambda: linfuse.gated_mlp(x.astype(np.float16), gu, dn), "an x of another dtype than the weights")
    raises(linfuse.Error, ["linfuse.gated_mlp", "x's last dim is 9"],
           lambda: linfuse.gated_mlp(np.ones((4, 9), np.float32), gu, dn), "x of the wrong width")
    raises(ValueError, ["act='tanh'", "silu"], lambda: linfuse.gated_mlp(x, gu, dn, act="tanh"), "an unknown act")
    raises(ValueError, ["variant='fast'", "gated"], lambda: linfuse.gated_mlp(x, gu, dn, variant="fast"),
           "an unknown variant")
    raises(TypeError, ["has no __dlpack__"], lambda: linfuse.linear([[1.0] * 8], w), "a list")
    raises(linfuse.Error, ["weight has shape (3,)"], lambda: linfuse.linear(x, np.ones(3, np.float32)),
           "a 1-D weight")
    gc.collect()  # the tracebacks of the refusals above, in cycles with their frames
    before = [sys.getrefcount(a) for a in (x, w, gu, dn)]
    for _ in range(50):
        try:
            linfuse.linear(x.astype(np.float64), w)
        except linfuse.Error:
            pass
        try:
            linfuse.gated_mlp(np.ones((4, 9), np.float32), gu, dn)
        except linfuse.Error:
            pass
    gc.collect()
    after = [sys.getrefcount(a) for a in (x, w, gu, dn)]
    check(after == before, "refusals leave no reference behind: %s, were %s" % (after, before))


def test_refusals_foreign():
    """Inputs a user gets wrong, each refused by linfuse before anything else reads them: a foreign
    array whose DLPack capsule has a NULL shape (numpy.from_dlpack had read it first and crashed),
    as x and as GatedMlp's gate_up; gate and up passed apart to gated_mlp (the message had printed
    the whole array); a float64 array, with the cast to make."""
    import numpy as np
    import linfuse
    from linfuse import _lib

    make = C.pythonapi.PyCapsule_New
    make.restype, make.argtypes = C.py_object, [C.c_void_p, C.c_char_p, C.c_void_p]
    held = []

    class NullShape:
        """A CPU float32 array of the array API whose capsule's DLTensor has shape NULL."""

        shape = (16, 8)  # what it says of itself; its capsule says nothing

        def __init__(self, ndim=2):
            self.buf = (C.c_float * 128)()
            self.ndim = ndim

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, stream=None, **kw):
            mt = _lib.DLManagedTensor()
            mt.dl_tensor = _lib.DLTensor(C.addressof(self.buf), 1, 0, self.ndim, 2, 32, 1, None, None, 0)
            held.append(mt)
            return make(C.addressof(mt), b"dltensor", None)

    gu, dn = np.ones((16, 8), np.float32), np.ones((8, 8), np.float32)
    raises(linfuse.Error, ["dl_tensor.shape"], lambda: linfuse.gated_mlp(NullShape(), gu, dn), "x with a NULL shape")
    raises(linfuse.Error, ["dl_tensor.shape"], lambda: linfuse.linear(NullShape(), dn), "linear's x, NULL shape")
    raises(linfuse.Error, ["dl_tensor.shape"], lambda: linfuse.GatedMlp(NullShape(), dn), "gate_up with a NULL shape")
    x = np.ones((4, 8), np.float32)
    g, u = np.ones((8, 8), np.float32), np.ones((8, 8), np.float32)
    try:
        linfuse.gated_mlp(x, g, u, dn)
        check(False, "gate and up passed apart: not refused")
    except ValueError as e:
        msg = str(e)
        check("numpy.ndarray of shape (8, 8)" in msg and "[Wg; Wu]" in msg and len(msg) < 300 and "1." not in msg,
              "gate and up passed apart: named by kind and shape, with the fix, not printed: %r" % msg)
    raises(linfuse.Error, ["float64", "cast it to one of them first"],
           lambda: linfuse.gated_mlp(x.astype(np.float64), gu, dn), "a float64 x: the cast to make")


def rss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def live_kib():
    """The heap's live bytes when AddressSanitizer's runtime is loaded (its quarantine holds freed
    memory, so RSS grows under it whatever the code does), else None."""
    try:
        f = C.CDLL(None).__sanitizer_get_current_allocated_bytes
    except AttributeError:
        return None
    f.restype = C.c_size_t
    return f() // 1024


def no_growth(label, make_args, fn, n=10000):
    """fn(*args) n times: the arguments' references back where they were, peak RSS flat."""
    args = make_args()
    base = [sys.getrefcount(a) for a in args if a is not None]
    measure, what, limit = (live_kib, "live heap", 256) if live_kib() is not None else (rss_kib, "peak RSS", 8192)
    start = None
    for i in range(n):
        if i == n // 10:
            gc.collect()
            start = measure()
        fn(*args)
    gc.collect()
    grew = measure() - start
    check([sys.getrefcount(a) for a in args if a is not None] == base,
          "%s: references back after %d calls (every DLPack deleter ran)" % (label, n))
    check(grew < limit, "%s: %s grew %d KiB over %d calls (limit %d)" % (label, what, grew, n - n // 10, limit))
    print("python_test: %s: %d calls, %s grew %d KiB over the last %d" % (label, n, what, grew, n - n // 10))


def test_gated_mlp_object_numpy():
    import numpy as np
    import linfuse
    rng = np.random.default_rng(8)
    gu = rng.uniform(-0.3, 0.3, (2 * 40, 29)).astype(np.float32)
    dn = rng.uniform(-0.3, 0.3, (29, 40)).astype(np.float32)
    m = linfuse.GatedMlp(gu, dn, act="silu")
    for T in (1, 7, 1, 16):  # a workspace size remembered per token count, each still right
        x = rng.uniform(-1, 1, (T, 2 * 29)).astype(np.float32)[:, ::2]
        for v in ("eager", "fused", "gated"):
            got, want = m(x, v), linfuse.gated_mlp(x, gu, dn, act="silu", variant=v)
            check(got.shape == (T, 29) and np.array_equal(got, want),
                  "GatedMlp(%d tokens, %s) computes gated_mlp's values" % (T, v))
    raises(linfuse.Error, ["linfuse.GatedMlp", "x's last dim is 9"], lambda: m(np.ones((2, 9), np.float32)),
           "GatedMlp: x of the wrong width")
    raises(ValueError, ["variant='fast'"], lambda: m(x, "fast"), "GatedMlp: an unknown variant")
    raises(linfuse.Error, ["expected a contiguous (2H, D)"], lambda: linfuse.GatedMlp(gu[:, ::2], dn),
           "GatedMlp over a gate_up that is not contiguous")
    m.close()
    m.close()
    raises(linfuse.Error, ["closed"], lambda: m(x), "a closed GatedMlp")
    # arrays numpy will not export: read-only (a memory-mapped checkpoint), a broadcast view
    ro_gu, ro_dn = gu.copy(), dn.copy()
    ro_gu.setflags(write=False), ro_dn.setflags(write=False)
    xb = np.broadcast_to(rng.uniform(-1, 1, 29).astype(np.float32), (4, 29))
    check(np.array_equal(linfuse.gated_mlp(xb, ro_gu, ro_dn), linfuse.gated_mlp(np.ascontiguousarray(xb), gu, dn)),
          "read-only weights and a broadcast x are read in place, the same values")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", linfuse.Fp8FallbackWarning)
        q = linfuse.quantize_fp8(gu, dn)
        check(linfuse.gated_mlp(xb, gu, dn, variant="fp8", fp8_weights=q).shape == (4, 29),
              "quantize_fp8's (read-only) arrays go back in as fp8_weights")
    raises(linfuse.Error, ["bool"], lambda: linfuse.gated_mlp(np.ones((2, 29), bool), gu, dn), "a bool x")
    raises(linfuse.Error, ["big-endian"], lambda: linfuse.gated_mlp(np.ones((2, 29), ">f4"), gu, dn),
           "a big-endian x")
    # no rows: still checked; and what is no array, no act, no variant
    raises(linfuse.Error, ["x's last dim is 99"], lambda: linfuse.gated_mlp(np.zeros((0, 99), np.float32), gu, dn),
           "x of no rows and the wrong width")
    raises(linfuse.Error, ["float64"], lambda: linfuse.linear(np.zeros((0, 29)), gu), "x of no rows, float64")
    raises(linfuse.Error, ["no features"], lambda: linfuse.linear(np.ones((3, 0), np.float32),
                                                                  np.ones((8, 0), np.float32)), "x of no features")
    raises(TypeError, ["gate_up is a list"], lambda: linfuse.gated_mlp(xb, gu.tolist(), dn), "a list for gate_up")
    raises(ValueError, ["act="], lambda: linfuse.gated_mlp(xb, gu, dn, act=["silu"]), "a list for act")
    raises(ValueError, ["variant="], lambda: linfuse.gated_mlp(xb, gu, dn, variant=["gated"]), "a list for variant")
    raises(linfuse.Error, ["17 rows", "2H"], lambda: linfuse.gated_gemm(xb, gu[:17]), "gate_up of odd rows")
    keep = linfuse.GatedMlp(gu, dn)
    no_growth("GatedMlp calls (numpy)", lambda: (rng.uniform(-1, 1, (3, 29)).astype(np.float32),),
              lambda x: keep(x))


def test_no_leaks_numpy():
    import numpy as np
    import linfuse
    rng = np.random.default_rng(4)
    no_growth("linear (numpy)", lambda: (rng.uniform(-1, 1, (5, 33)).astype(np.float32)[:, ::2],
                                         rng.uniform(-1, 1, (9, 17)).astype(np.float32),
                                         rng.uniform(-1, 1, 9).astype(np.float32)),
              lambda x, w, b: linfuse.linear(x, w, b, act="gelu_tanh"))
    no_growth("gated_mlp (numpy)", lambda: (rng.uniform(-1, 1, (3, 16)).astype(np.float32),
                                            rng.uniform(-1, 1, (48, 16)).astype(np.float32),
                                            rng.uniform(-1, 1, (16, 24)).astype(np.float32)),
              lambda x, gu, dn: linfuse.gated_mlp(x, gu, dn, variant="gated"))


# --- torch ---

def t64(t):
    import numpy as np
    return t.detach().to("cpu").float().numpy().astype(np.float64)


def fresh_gated_mlp(linfuse, x, gu, dn, act="silu"):
    """A new GatedMlp's answer: what a call of gated_mlp on the same weights must give."""
    with linfuse.GatedMlp(gu, dn, act) as m:
        return m(x)


def test_torch_ops(torch):
    import numpy as np
    import linfuse
    g = torch.Generator().manual_seed(5)
    for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16"), (torch.float16, "f16")):
        x = (torch.rand((3, 11, 2 * 29), generator=g) * 2 - 1).to(dt)[:, ::2, 1::2]  # (3, 6, 29), strided
        w = (torch.rand((13, 29), generator=g) * 2 - 1).to(dt)
        b = (torch.rand(13, generator=g) * 2 - 1).to(dt)
        y = linfuse.linear(x, w, b, act="silu")
        X, W, B = t64(x), t64(w), t64(b)
        e = err(np, t64(y), act_ref(np, "silu", X @ W.T + B), np.abs(X) @ np.abs(W).T + np.abs(B))
        check(isinstance(y, torch.Tensor) and y.dtype == dt and y.device == x.device and tuple(y.shape) == (3, 6, 13),
              "torch linear %s returns a torch tensor like x" % name)
        check(e <= TOL[name], "torch linear %s: error %.3g > %.0e" % (name, e, TOL[name]))
        gu = ((torch.rand((2 * 40, 29), generator=g) * 2 - 1) * 0.3).to(dt)
        dn = ((torch.rand((29, 40), generator=g) * 2 - 1) * 0.3).to(dt)
        ref, mag, _ = mlp_ref(np, X, t64(gu), t64(dn), "gelu_tanh")
        for v in ("eager", "fused", "gated"):
            y = linfuse.gated_mlp(x, gu, dn, act="gelu_tanh", variant=v)
            e = err(np, t64(y), ref, mag)
            check(e <= MLP_TOL[name], "torch mlp %s %s: error %.3g > %.0e" % (v, name, e, MLP_TOL[name]))
        if name == "bf16":
            ref_w = w.clone()
            check(torch.equal(linfuse.linear(x, w), linfuse.linear(x.contiguous(), w.t().contiguous().t())) and
                  torch.equal(w, ref_w), "a bf16 weight seen transposed is read in place, the same answer")
    x = torch.ones(4, 8)
    raises(linfuse.Error, ["linfuse.linear: x", "float64"], lambda: linfuse.linear(x.double(), torch.ones(3, 8)),
           "a float64 torch tensor")
    w = torch.ones(3, 8, requires_grad=True)
    check(torch.equal(linfuse.linear(x, w), torch.full((4, 3), 8.0)), "a weight that requires grad is read (detached)")
    no_growth("linear (torch)", lambda: (torch.rand(5, 17), torch.rand(9, 17), torch.rand(9)),
              lambda x, w, b: linfuse.linear(x, w, b))
    no_growth("gated_mlp (torch)", lambda: (torch.rand(3, 16), torch.rand(48, 16), torch.rand(16, 24)),
              lambda x, gu, dn: linfuse.gated_mlp(x, gu, dn))
    # gated_mlp called again on the same weight objects reuses what the first call made of them
    # (held weakly): in-place writes are read, a weight given new memory is seen, a collected weight
    # takes its entry with it (so a new object at its id finds none)
    from linfuse import ops
    gu, dn, x = torch.randn(48, 16), torch.randn(16, 24), torch.randn(3, 16)
    y0 = linfuse.gated_mlp(x, gu, dn)
    n0 = len(ops._MLPS)
    m0 = ops._cached_mlp(gu, dn, "silu", None)
    check(torch.equal(linfuse.gated_mlp(x, gu, dn), y0) and len(ops._MLPS) == n0 and
          ops._cached_mlp(gu, dn, "silu", None) is m0, "gated_mlp: a second call on the same weights reuses the first's")
    with torch.no_grad():
        dn.mul_(2)
    check(torch.equal(linfuse.gated_mlp(x, gu, dn), fresh_gated_mlp(linfuse, x, gu, dn)),
          "gated_mlp: a weight written in place is read by the next call")
    dn.data = torch.randn(16, 24)  # the same object, new memory
    check(torch.equal(linfuse.gated_mlp(x, gu, dn), fresh_gated_mlp(linfuse, x, gu, dn)),
          "gated_mlp: a weight given new memory is seen")
    check(torch.equal(linfuse.gated_mlp(x, gu, dn, act="gelu_tanh"), fresh_gated_mlp(linfuse, x, gu, dn, "gelu_tanh")),
          "gated_mlp: the same weights with another activation")
    key = ("silu", id(gu), id(dn))
    del gu
    gc.collect()
    check(key not in ops._MLPS, "gated_mlp: a collected weight takes its entry with it")
    for _ in range(3):  # new objects, perhaps at freed ids: each computed over its own values
        gu2 = torch.randn(48, 16)
        check(torch.equal(linfuse.gated_mlp(x, gu2, dn), fresh_gated_mlp(linfuse, x, gu2, dn)),
              "gated_mlp: a new weight object (perhaps at an old one's id) computes with its own values")
        del gu2
    gun, dnn = np.random.rand(48, 16).astype(np.float32), np.random.rand(16, 24).astype(np.float32)
    linfuse.gated_mlp(np.ones((2, 16), np.float32), gun, dnn)
    check(ops._cached_mlp(gun, dnn, "silu", None) is None and sys.getrefcount(gun) == 2,
          "gated_mlp: numpy weights are not kept (their DLPack export would hold them)")
    # a view torch keeps with its negative bit set (DLPack has none): its values, not its memory's
    xn = torch.randn(3, 17, dtype=torch.cfloat).conj().imag
    wn = torch.randn(5, 17)
    check(torch.allclose(linfuse.linear(xn, wn), torch.nn.functional.linear(xn, wn), atol=1e-5),
          "a negative-bit view (x.conj().imag) computes with its values")
    # torch moving a weight's memory under a GatedMlp is caught, not read after it was freed
    gu, dn = torch.randn(64, 16), torch.randn(16, 32)
    m = linfuse.GatedMlp(gu, dn)
    x = torch.randn(3, 16)
    y0 = m(x)
    dn.share_memory_()
    raises(linfuse.Error, ["memory moved"], lambda: m(x), "a weight whose memory torch moved")
    gun, dnn = np.random.rand(64, 16).astype(np.float32), np.random.rand(16, 32).astype(np.float32)
    mn, xn = linfuse.GatedMlp(gun, dnn), np.ones((2, 16), np.float32)
    mn(xn)
    dnn.resize((1,), refcheck=False)  # numpy frees the memory linfuse viewed
    raises(linfuse.Error, ["memory moved"], lambda: mn(xn), "a numpy weight resized under a GatedMlp")
    m = linfuse.GatedMlp(gu, dn)
    check(torch.equal(m(x), y0), "a new GatedMlp over the moved weight computes the same")
    # GatedMlp's direct call (one crossing into C, lf_nn_gated_mlp_forward_raw), taken from a
    # token count's second call on: the same bits as the first call's general path, every variant
    # and dtype, one and five tokens; what it does not take goes the general way with its answers
    VARIANT = linfuse._lib.VARIANT
    for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16"), (torch.float16, "f16")):
        gu = ((torch.rand((2 * 40, 29), generator=g) * 2 - 1) * 0.3).to(dt)
        dn = ((torch.rand((29, 40), generator=g) * 2 - 1) * 0.3).to(dt)
        m = linfuse.GatedMlp(gu, dn, act="gelu_tanh")
        for T in (1, 5):
            x = (torch.rand((1, T, 29), generator=g) * 2 - 1).to(dt)
            ref, mag, _ = mlp_ref(np, t64(x).reshape(T, 29), t64(gu), t64(dn), "gelu_tanh")
            for v in ("eager", "fused", "gated"):
                first = m(x, v)
                check(m._call_raw(x, VARIANT[v]) is not None, "GatedMlp %s %s %d tokens: the second call is direct"
                      % (name, v, T))
                again = m(x, v)
                e = err(np, t64(again).reshape(T, 29), ref, mag)
                check(torch.equal(first, again) and again.shape == x.shape and again.dtype == dt and e <= MLP_TOL[name],
                      "GatedMlp %s %s %d tokens: the direct call's bits are the general path's (error %.3g)"
                      % (name, v, T, e))
        xs = (torch.rand((5, 58), generator=g) * 2 - 1).to(dt)[:, ::2]  # strided: the general path
        check(m._call_raw(xs, VARIANT["gated"]) is None and torch.equal(m(xs), m(xs.contiguous())),
              "GatedMlp %s: a strided x goes the general way, the same answer" % name)
    m = linfuse.GatedMlp(torch.randn(64, 17), torch.randn(17, 32))
    x = torch.randn(2, 17)
    m(x)
    xn = torch.randn(2, 17, dtype=torch.cfloat).conj().imag
    check(m._call_raw(xn, VARIANT["gated"]) is None and torch.allclose(m(xn), m(xn.clone()), atol=1e-6),
          "GatedMlp: a negative-bit x goes the general way, with its values")
    raises(linfuse.Error, ["float64"], lambda: m(x.double()), "GatedMlp: a float64 x, refused by name")
    xg = x.clone().requires_grad_()
    check(torch.equal(m(xg), m(x)) and not m(xg).requires_grad, "GatedMlp: an x that requires grad is read")
    check(m(torch.empty(0, 17)).shape == (0, 17), "GatedMlp: no rows, an empty answer")
    check(m._call_raw(torch.empty(2, 17, device="meta"), VARIANT["gated"]) is None and
          m._call_raw(x.to_sparse(), VARIANT["gated"]) is None, "GatedMlp: a meta or sparse x goes the general way")
    # closed while another thread calls: the call completes (or was refused as closed)
    big = linfuse.GatedMlp(torch.randn(2048, 512), torch.randn(512, 1024))
    xb, out = torch.randn(128, 512), []

    def call():
        try:
            out.append(big(xb))
        except linfuse.Error as e:
            out.append(e)
    t = threading.Thread(target=call)
    t.start()
    big.close()
    t.join()
    check(len(out) == 1 and (isinstance(out[0], torch.Tensor) or "closed" in str(out[0])),
          "close() during a call: the call finishes or says closed: %r" % (out[:1],))


def toy_model(torch, family, H=96, D=64, layers=2):
    """A model shaped as transformers' LlamaForCausalLM / GemmaForCausalLM is around its MLPs: class
    names, gate_proj/up_proj/down_proj, act_fn from config (silu; gelu_pytorch_tanh)."""
    nn = torch.nn

    def Config():  # noqa: N802 (a config object, picklable)
        return types.SimpleNamespace(hidden_act="silu" if family == "llama" else "gelu",
                                     hidden_activation=None if family == "llama" else "gelu_pytorch_tanh")

    def mlp_class(cls_name):
        def __init__(self, config):
            nn.Module.__init__(self)
            self.config = config
            self.gate_proj = nn.Linear(D, H, bias=False)
            self.up_proj = nn.Linear(D, H, bias=False)
            self.down_proj = nn.Linear(H, D, bias=False)
            self.act_fn = nn.SiLU() if family == "llama" else nn.GELU(approximate="tanh")

        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return type(cls_name, (nn.Module,), {"__init__": __init__, "forward": forward})

    MLP = mlp_class("LlamaMLP" if family == "llama" else "GemmaMLP")

    class Layer(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.mlp = MLP(config)
            self.norm = nn.LayerNorm(D)

        def forward(self, x):
            return x + self.mlp(self.norm(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.config = Config()
            self.layers = nn.ModuleList([Layer(self.config) for _ in range(layers)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
    return Model(), MLP


def storage_bytes(torch, model):
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        ptr = t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()
        if ptr not in seen:
            seen.add(ptr)
            total += (t.untyped_storage().nbytes() if hasattr(t, "untyped_storage") else
                      t.storage().size() * t.element_size())
    return total


def test_torch_apply(torch):
    import linfuse
    import linfuse.torch as lt
    nn = torch.nn
    torch.manual_seed(6)
    for family, act in (("llama", "silu"), ("gemma", "gelu_tanh")):
        model, MLP = toy_model(torch, family)
        model = model.to(torch.bfloat16)
        x = torch.randn(2, 9, 64).to(torch.bfloat16)
        with torch.no_grad():
            ref = model(x)
        keys, nbytes = list(model.state_dict()), storage_bytes(torch, model)
        old = [(layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight) for layer in model.layers]
        # modules linfuse must leave alone, each with its reason
        biased = MLP(model.config).to(torch.bfloat16)
        biased.up_proj = nn.Linear(64, 96, bias=True).to(torch.bfloat16)
        model.biased = biased
        wrong_act = MLP(model.config).to(torch.bfloat16)
        wrong_act.act_fn = nn.Tanh() if family == "gemma" else nn.ReLU()
        model.wrong_act = wrong_act
        other = nn.Module()  # the layout, but no activation to read
        other.gate_proj, other.up_proj, other.down_proj = (nn.Linear(4, 4, bias=False) for _ in range(3))
        model.other = other
        report = lt.apply(model, variant="fp8")
        text = str(report)
        check(len(report.replaced) == 2 and all(r[2] == act and r[3] == "gated" for r in report.replaced),
              "%s: both MLPs replaced, %s, the fp8 variant running gated on the CPU:\n%s" % (family, act, text))
        check("fp8 runs gated" in text, "%s: the report says why fp8 runs gated: %s" % (family, text))
        left = {name: why for name, _, why in report.left}
        check("biases" in left.get("biased", "") and "none of silu, gelu_tanh" in left.get("wrong_act", "") and
              "does not run with two-feature float32 projections" in left.get("other", ""),
              "%s: each module left alone with its reason: %s" % (family, left))
        del model.biased, model.wrong_act, model.other
        check(list(model.state_dict()) == keys, "%s: state_dict keeps its keys" % family)
        check(storage_bytes(torch, model) == nbytes, "%s: parameter memory did not grow (%d -> %d bytes)" % (
            family, nbytes, storage_bytes(torch, model)))
        check(all(layer.mlp.gate_proj.weight is g and layer.mlp.up_proj.weight is u and
                  g.data_ptr() == layer.mlp.linfuse_gate_up.data_ptr() for layer, (g, u) in zip(model.layers, old)),
              "%s: gate's and up's Parameters are the same objects (an optimizer keeps them), over the stacked "
              "weight" % family)
        mlp = model.layers[0].mlp
        check(mlp.gate_proj.weight.data_ptr() == mlp.linfuse_gate_up.data_ptr(),
              "%s: gate_proj.weight is a view of the stacked [Wg; Wu]" % family)
        with torch.no_grad():
            got = model(x)
        e = float((got.float() - ref.float()).abs().max() / ref.float().abs().max())
        check(e <= 2e-2, "%s: the patched model's output within bf16 tolerance (max |diff| / max |ref| = %.3g <= 2e-2)"
              % (family, e))
        # eager inference calls linfuse directly; the profiler sees the op, with the same values
        mlp0 = model.layers[0].mlp
        h = model.layers[0].norm(x).detach()
        with torch.no_grad():
            direct = mlp0(h)
            via_op = lt.gated_mlp(h, mlp0.linfuse_gate_up, mlp0.down_proj.weight, act, "gated")
            with torch.profiler.profile() as prof:
                profiled = mlp0(h)
        check(torch.equal(direct, via_op) and torch.equal(profiled, via_op),
              "%s: the direct eager call, the op and the profiled call agree" % family)
        names = {e.key for e in prof.key_averages()}
        check("linfuse::gated_mlp" in names, "%s: under torch.profiler the MLP shows as linfuse::gated_mlp: %s"
              % (family, sorted(names)[:12]))
        copied = copy.deepcopy(model)
        with torch.no_grad():
            check(torch.equal(copied(x), got) and copied.layers[0].mlp.gate_proj.weight.data_ptr() ==
                  copied.layers[0].mlp.linfuse_gate_up.data_ptr() != mlp0.linfuse_gate_up.data_ptr(),
                  "%s: a deep copy of the patched model has its own stacked weights, viewed, and computes the same"
                  % family)
        del copied
        # pickled (torch.save too) by the base class, patched again when loaded
        mlp_cls = type(mlp0).linfuse_base_class
        mlp_cls.__qualname__ = mlp_cls.__name__
        globals()[mlp_cls.__name__] = mlp_cls  # importable by name, as transformers' classes are
        loaded = pickle.loads(pickle.dumps(mlp0))
        with torch.no_grad():
            check(type(loaded) is type(mlp0) and torch.equal(loaded(h), direct) and
                  loaded.gate_proj.weight.data_ptr() == loaded.linfuse_gate_up.data_ptr(),
                  "%s: a pickled patched MLP loads patched, its views kept, computing the same" % family)
        del loaded, globals()[mlp_cls.__name__]
        with torch.no_grad():
            kept = mlp0.down_proj.weight
            mlp0.down_proj.weight = nn.Parameter(kept * 2)  # a weight replaced after apply: the next call reads it
            check(torch.equal(mlp0(h), lt.gated_mlp(h, mlp0.linfuse_gate_up, kept * 2, act, "gated")),
                  "%s: a down weight replaced after apply is the one the next eager call reads" % family)
            mlp0.down_proj.weight = kept
            check(torch.equal(mlp0(h), direct), "%s: and the first one again when it is put back" % family)
        y = model(x)
        raises(RuntimeError, ["has no backward", "inference"], lambda: y.float().sum().backward(),
               "%s: backward through linfuse" % family)
        restored = lt.unapply(model)
        check(restored == ["layers.0.mlp", "layers.1.mlp"] and type(model.layers[0].mlp) is MLP,
              "%s: unapply restores the classes: %s" % (family, restored))
        with torch.no_grad():
            check(torch.equal(model(x), ref), "%s: the restored model computes what it did" % family)
        # tied projections are left alone: stacking one MLP's gate and up would change the other's
        tied, _ = toy_model(torch, family)
        tied.layers[1].mlp.gate_proj = tied.layers[0].mlp.gate_proj
        report = lt.apply(tied)
        left = {n: why for n, _, why in report.left}
        check(set(left) == {"layers.0.mlp", "layers.1.mlp"} and all("tied" in w for w in left.values()),
              "%s: MLPs sharing a gate_proj are left, saying why: %s" % (family, report))
        same, _ = toy_model(torch, family, layers=1)
        same.layers[0].mlp.up_proj = same.layers[0].mlp.gate_proj
        check(any("tied" in why for _, _, why in lt.apply(same).left), "%s: gate_proj is up_proj: left" % family)
        one, _ = toy_model(torch, family)
        one.layers[1].mlp.gate_proj.weight = one.layers[0].mlp.gate_proj.weight  # one Parameter in two places
        check(len(lt.apply(one).left) == 2 and one.layers[1].mlp.gate_proj.weight is one.layers[0].mlp.gate_proj.weight,
              "%s: a Parameter tied across MLPs: both left, the tie kept" % family)
        lt.apply(model)
        shallow = copy.copy(model.layers[0].mlp)
        before = model.layers[0].mlp.gate_proj.weight
        check(shallow.gate_proj is model.layers[0].mlp.gate_proj and model.layers[0].mlp.gate_proj.weight is before,
              "%s: copy.copy of a patched MLP shares its submodules and leaves the original's parameters" % family)
        del shallow, before  # a view keeps its base: neither may hold the stacked weight below
        with torch.no_grad():
            model(x)
        old_gu = weakref.ref(model.layers[0].mlp.linfuse_gate_up)
        model.float()
        raises(linfuse.Error, ["no longer view the stacked", "unapply"], lambda: model(x.float()),
               "%s: a model cast after apply is caught" % family)
        gc.collect()
        check(old_gu() is None, "%s: and linfuse holds none of the weights from before the cast" % family)
        lt.unapply(model)


def test_torch_apply_layouts(torch):
    """Gated MLPs by their layout, whatever their class: Phi-3's fused gate_up_proj, a model's own
    SwiGLU with no config, and the modules that look like one but are not."""
    import linfuse
    import linfuse.torch as lt
    nn, F = torch.nn, torch.nn.functional
    D, H = 64, 80
    torch.manual_seed(7)

    class Phi3MLP(nn.Module):  # transformers' Phi3MLP (and GlmMLP): [gate, up] = gate_up_proj(x)
        def __init__(self, act="silu"):
            super().__init__()
            self.config = types.SimpleNamespace(hidden_act=act)
            self.gate_up_proj = nn.Linear(D, 2 * H, bias=False)
            self.down_proj = nn.Linear(H, D, bias=False)
            self.activation_fn = nn.SiLU() if act == "silu" else nn.GELU(approximate="tanh")

        def forward(self, x):
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.down_proj(up * self.activation_fn(gate))

    class SwiGLU(nn.Module):  # a model's own: no config, the activation a plain function
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = nn.Linear(D, H, bias=False), nn.Linear(D, H, bias=False)
            self.down_proj = nn.Linear(H, D, bias=False)
            self.act_fn = F.silu

        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    class Dropped(SwiGLU):  # one more part (a dropout) linfuse would not run
        def __init__(self):
            super().__init__()
            self.dropout = nn.Dropout(0.1)

    class UpFirst(Phi3MLP):  # the layout, but [up, gate]: the probe against its own forward says no
        def forward(self, x):
            up, gate = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.down_proj(up * self.activation_fn(gate))

    model = nn.Module()
    model.phi = Phi3MLP()
    model.gemmaish = Phi3MLP("gelu_pytorch_tanh")
    model.erf = SwiGLU()
    model.erf.act_fn = nn.GELU()  # exact: linfuse's gelu_erf, told apart from the tanh form by the probe
    model.own = SwiGLU()
    model.dropped = Dropped()
    model.up_first = UpFirst()
    model.odd = Phi3MLP()
    model.odd.gate_up_proj = nn.Linear(D, 2 * H + 1, bias=False)
    model.biased = Phi3MLP()
    model.biased.gate_up_proj = nn.Linear(D, 2 * H, bias=True)
    model.relu = Phi3MLP()
    model.relu.activation_fn = nn.ReLU()
    model = model.to(torch.bfloat16)
    x = torch.randn(3, 5, D).to(torch.bfloat16)
    with torch.no_grad():
        ref = {n: getattr(model, n)(x) for n in ("phi", "gemmaish", "own", "erf")}
    w_phi = model.phi.gate_up_proj.weight
    nbytes = storage_bytes(torch, model)
    report = lt.apply(model)
    text = str(report)
    done = {name: (act, note) for name, _, act, _, note in report.replaced}
    left = {name: why for name, _, why in report.left}
    check(set(done) == {"phi", "gemmaish", "own", "erf"} and done["phi"][0] == "silu" and
          done["gemmaish"][0] == "gelu_tanh" and done["own"][0] == "silu" and done["erf"][0] == "gelu_erf",
          "layouts: Phi-3's fused MLP (silu, gelu_tanh) and a model's own SwiGLU (silu, erf GELU) "
          "replaced:\n%s" % text)
    check("config.hidden_act = 'silu'" in done.get("phi", ("", ""))[1] and
          "computes silu (probed)" in done.get("own", ("", ""))[1],
          "layouts: the report says where each activation came from:\n%s" % text)
    check("more than its projections" in left.get("dropped", "") and "dropout (Dropout)" in left.get("dropped", ""),
          "layouts: an MLP with a dropout is left, naming it: %s" % left.get("dropped"))
    check("own forward and linfuse's differ" in left.get("up_first", "") and "[up, gate]" in left.get("up_first", ""),
          "layouts: a fused MLP whose halves are [up, gate] fails the probe and is left: %s" % left.get("up_first"))
    check("expected (2H, D), (D, H)" in left.get("odd", ""), "layouts: an odd gate_up_proj is left: %s"
          % left.get("odd"))
    check("biases" in left.get("biased", ""), "layouts: a biased gate_up_proj is left: %s" % left.get("biased"))
    check("none of silu, gelu_tanh, gelu_erf" in left.get("relu", "") and "config.hidden_act = 'silu'" in left.get("relu", ""),
          "layouts: an activation_fn that is not the config's, nor one linfuse takes, is left: %s" % left.get("relu"))
    phi = model.phi
    check(phi.gate_up_proj.weight is w_phi and phi.linfuse_gate_up.data_ptr() == w_phi.data_ptr() and
          storage_bytes(torch, model) == nbytes,
          "layouts: the fused weight is used as it is (the same Parameter, no copy, memory did not grow)")
    with torch.no_grad():
        got = {n: getattr(model, n)(x) for n in ref}
        for n in ref:
            e = float((got[n].float() - ref[n].float()).abs().max() / ref[n].float().abs().max())
            check(e <= 2e-2, "layouts: %s's patched output within bf16 tolerance (%.3g <= 2e-2)" % (n, e))
        check(torch.equal(got["phi"], lt.gated_mlp(x, w_phi, phi.down_proj.weight, "silu", "gated")),
              "layouts: the fused MLP's eager call is the op on its own weight")
        with torch.profiler.profile() as prof:
            profiled = phi(x)
        check(torch.equal(profiled, got["phi"]) and "linfuse::gated_mlp" in {e.key for e in prof.key_averages()},
              "layouts: profiled, the fused MLP shows as linfuse::gated_mlp and computes the same")
        copied = copy.deepcopy(phi)
        check(torch.equal(copied(x), got["phi"]) and copied.gate_up_proj.weight.data_ptr() ==
              copied.linfuse_gate_up.data_ptr() != w_phi.data_ptr(),
              "layouts: a deep copy of the fused MLP views its own weight and computes the same")
        cls = type(phi).linfuse_base_class
        cls.__qualname__ = cls.__name__
        globals()[cls.__name__] = cls
        loaded = pickle.loads(pickle.dumps(phi))
        check(type(loaded) is type(phi) and torch.equal(loaded(x), got["phi"]) and
              loaded.gate_up_proj.weight.data_ptr() == loaded.linfuse_gate_up.data_ptr(),
              "layouts: a pickled fused MLP loads patched, its weight viewed, computing the same")
        del loaded, globals()[cls.__name__]
        with torch.no_grad():
            w_phi.mul_(0.5)  # written in place: the next call reads it
        check(torch.equal(phi(x), lt.gated_mlp(x, w_phi, phi.down_proj.weight, "silu", "gated")),
              "layouts: a fused weight written in place is what the next call reads")
    w_phi.requires_grad_(True)
    phi.down_proj.weight.requires_grad_(False)
    y = phi(x)
    raises(RuntimeError, ["has no backward", "inference"], lambda: y.float().sum().backward(),
           "layouts: backward through the fused MLP where only gate_up_proj wants a gradient")
    phi.gate_up_proj.weight = nn.Parameter(w_phi.detach().clone())  # replaced after apply: refused
    raises(linfuse.Error, ["phi (Phi3MLP)", "gate_up_proj weight no longer views", "unapply"], lambda: phi(x),
           "layouts: a fused weight replaced after apply is caught")
    phi.gate_up_proj.weight = w_phi
    model.own.float()
    raises(linfuse.Error, ["gate_proj and up_proj weights no longer view"], lambda: model.own(x.float()),
           "layouts: a cast after apply is caught in the model's own MLP")
    test_torch_apply_edges(torch, SwiGLU, Phi3MLP)
    empty = str(lt.apply(nn.Sequential(nn.Linear(4, 4))))
    check("0 MLPs replaced, 0 left" in empty and "no module has gate_proj" in empty,
          "layouts: a model with no gated MLP gets a report that says what apply looks for: %s" % empty)
    raises(TypeError, ["not a torch.nn.Module"], lambda: lt.apply("model"), "layouts: apply of a string")
    alone = SwiGLU()
    check("(the model itself)" in str(lt.apply(alone)), "layouts: an MLP patched on its own is named in the report")
    lt.unapply(alone)
    restored = lt.unapply(model)
    check(sorted(restored) == ["erf", "gemmaish", "own", "phi"] and type(model.phi) is Phi3MLP and
          type(model.own) is SwiGLU and model.phi.gate_up_proj.weight is w_phi,
          "layouts: unapply restores the classes, the fused weight untouched: %s" % restored)


def test_torch_apply_inline(torch):
    """Gated MLPs whose forward computes its activation itself (nothing to read it from): Meta's
    w1, w2, w3 naming, the activation found by the probe; a dropout in the forward (linfuse in eval
    mode, the module's own forward in training mode); a deep copy taken with its optimizer."""
    import linfuse
    import linfuse.torch as lt
    nn, F = torch.nn, torch.nn.functional
    D, H = 48, 72
    torch.manual_seed(11)

    class FeedForward(nn.Module):  # Meta's reference Llama (gpt-fast, torchtitan): w2(silu(w1(x)) * w3(x))
        def __init__(self, act=F.silu, swapped=False, p=0.0):
            super().__init__()
            self.w1, self.w3 = nn.Linear(D, H, bias=False), nn.Linear(D, H, bias=False)
            self.w2 = nn.Linear(H, D, bias=False)
            self.fn, self.swapped, self.p = act, swapped, p  # fn: no name apply reads an activation from

        def forward(self, x):
            gate, up = (self.w3(x), self.w1(x)) if self.swapped else (self.w1(x), self.w3(x))
            return self.w2(F.dropout(self.fn(gate) * up, self.p, self.training))

    class InferenceOnly(FeedForward):  # refuses training mode: linfuse's in eval mode still
        def forward(self, x):
            assert not self.training, "inference only"
            return super().forward(x)

    class McDropout(nn.Module):  # transformers' naming, a dropout inside its activation
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = nn.Linear(D, H, bias=False), nn.Linear(D, H, bias=False)
            self.down_proj = nn.Linear(H, D, bias=False)
            self.act_fn = nn.Sequential(nn.SiLU(), nn.Dropout(0.1))

        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    model = nn.Module()  # left in training mode, as a model built in a script is
    model.meta = FeedForward()
    model.tanh = FeedForward(act=lambda t: F.gelu(t, approximate="tanh"))
    model.erf = FeedForward(act=F.gelu)
    model.drop = FeedForward(p=0.25)
    model.swapped = FeedForward(swapped=True)
    model.relu = FeedForward(act=F.relu)
    model.quick = FeedForward(act=lambda t: t * torch.sigmoid(1.702 * t))  # CLIP's quick_gelu: 1% from gelu_erf
    model.zeroed = FeedForward(p=1.0)  # all dropped in training mode: zeros, not linfuse's output
    model.inference = InferenceOnly()
    model.mc = McDropout()
    keys = list(model.state_dict())
    torch.manual_seed(5)
    want_draw = torch.rand(4)
    torch.manual_seed(5)
    report = lt.apply(model)
    check(torch.equal(torch.rand(4), want_draw), "inline: apply's probes draw nothing from the caller's generator")
    text = str(report)
    done = {name: (act, note) for name, _, act, _, note in report.replaced}
    left = {name: why for name, _, why in report.left}
    check({n: a for n, (a, _) in done.items()} == {"meta": "silu", "tanh": "gelu_tanh", "erf": "gelu_erf",
                                                   "drop": "silu", "zeroed": "silu", "inference": "silu",
                                                   "mc": "silu"},
          "inline: Meta's w1/w2/w3 MLPs replaced, each activation found by the probe (silu, GELU's two forms "
          "told apart):\n%s" % text)
    check("its forward computes silu (read through it" in done.get("meta", ("", ""))[1],
          "inline: the report says the activation was read through the forward: %s" % (done.get("meta"),))
    for n, why in (("drop", "random"), ("zeroed", "gives zeros"), ("inference", "fails in training mode"),
                   ("mc", "random")):
        check("in training mode its own forward runs" in done.get(n, ("", ""))[1] and why in done.get(n, ("", ""))[1],
              "inline: the report says why %s's own forward runs in training mode: %s" % (n, done.get(n)))
    check("training mode" not in done.get("meta", ("", ""))[1], "inline: meta runs linfuse in both modes")
    for n, why in (("swapped", "applies the activation to w3 (up) rather than w1 (gate)"), ("relu", "computes none of"),
                   ("quick", "computes none of")):
        check(why in left.get(n, ""), "inline: %s is left, saying why: %s" % (n, left.get(n)))
    check(list(model.state_dict()) == keys, "inline: state_dict keeps its keys")
    meta = model.meta
    gu = meta.linfuse_gate_up
    check(meta.w1.weight.data_ptr() == gu.data_ptr() and meta.w3.weight.data_ptr() == gu[H:].data_ptr(),
          "inline: w1 and w3 are views of the stacked [W1; W3]")
    x = torch.randn(3, 5, D)
    with torch.no_grad():
        for training in (False, True):
            model.train(training)
            for n, (act, _) in done.items():
                mod = getattr(model, n)
                if n == "inference" and training:
                    raises(AssertionError, ["inference only"], lambda: mod(x), "inline: in training mode "
                           "an inference-only MLP runs its own forward, which refuses")
                    continue
                torch.manual_seed(3)
                got = mod(x)
                torch.manual_seed(3)
                own = mod.linfuse_base_class.forward(mod, x)
                ours = lt.gated_mlp(x, mod.linfuse_gate_up, getattr(mod, mod.linfuse_layout[-1]).weight, act, "gated")
                if n in ("drop", "zeroed", "mc") and training:
                    check(torch.equal(got, own), "inline: in training mode %s runs its own forward" % n)
                else:
                    check(torch.equal(got, ours) and torch.allclose(got, own, rtol=1e-4, atol=1e-5),
                          "inline: %s in %s mode is linfuse's op, within 1e-4 of its own forward" % (
                              n, "training" if training else "eval"))
    model.eval()
    # Monte Carlo dropout: the model in eval mode, the dropouts alone in training mode
    for m in model.mc.modules():
        if isinstance(m, nn.Dropout):
            m.train()
    with torch.no_grad():
        torch.manual_seed(3)
        got = model.mc(x)
        torch.manual_seed(3)
        own = model.mc.linfuse_base_class.forward(model.mc, x)
    check(torch.equal(got, own), "inline: a dropout inside the activation trained alone (MC dropout): its own forward")
    model.mc.eval()
    # an act_fn holding a dropout, the model in training mode at apply: read in eval mode, the
    # caller's generator untouched
    mc2 = nn.Module()
    mc2.mlp = McDropout()
    torch.manual_seed(5)
    rep2 = lt.apply(mc2)
    check(len(rep2.replaced) == 1 and torch.equal(torch.rand(4), want_draw),
          "inline: an act_fn with a dropout, in training mode at apply: replaced, the generator untouched: %s" % rep2)
    # a deep copy of the MLP taken with its optimizer: the optimizer's parameters are the copy's
    opt = torch.optim.SGD(meta.parameters(), lr=0.1)
    meta2, opt2 = copy.deepcopy((meta, opt))
    params = {id(p) for g in opt2.param_groups for p in g["params"]}
    with torch.no_grad():
        check(params == {id(p) for p in meta2.parameters()} and meta2.w1.weight.data_ptr() ==
              meta2.linfuse_gate_up.data_ptr() != gu.data_ptr() and torch.equal(meta2(x), meta(x)),
              "inline: deep-copied with its optimizer, the copy's w1 and w3 are the optimizer's and view its own "
              "stacked weight")
    if lt.HAS_CUSTOM_OP:  # torch.compile: the op traced in eval mode, the module's own forward in training mode
        for training, op_wanted in ((False, True), (True, False)):
            try:
                torch._dynamo.reset()
                model.drop.train(training)
                with torch.no_grad():
                    explained = torch._dynamo.explain(model.drop)(x)
                    code = "".join(g.code for g in explained.graphs)
                    got = torch.compile(model.drop, fullgraph=True, backend="aot_eager")(x)
                    shape_ok = got.shape == x.shape and (not op_wanted or torch.equal(got, model.drop(x)))
                check(explained.graph_break_count == 0 and ("linfuse" in code) == op_wanted and shape_ok,
                      "inline: compiled in %s mode, the dropout MLP %s (%d breaks)" % (
                          "training" if training else "eval", "is linfuse's op" if op_wanted else "runs its own forward",
                          explained.graph_break_count))
            except Exception as e:  # noqa: BLE001
                check(False, "inline: compiled in %s mode: %s: %s" % (training, type(e).__name__, e))
        model.drop.eval()
        torch._dynamo.reset()
    # what the forward reads besides its parts, changed after apply: refused by name
    counted = FeedForward()
    counted.calls = 0  # an int a forward might count with: not watched
    lt.apply(counted)
    with torch.no_grad():
        counted(x)
        counted.calls = 5
        check(torch.allclose(counted(x), counted.linfuse_base_class.forward(counted, x), rtol=1e-4, atol=1e-5),
              "inline: an int attribute changed after apply is not refused")
    for attr, value in (("fn", F.gelu), ("p", 0.5)):
        saved = getattr(meta, attr)
        setattr(meta, attr, value)
        raises(linfuse.Error, ["meta (FeedForward)", "%s changed after linfuse.torch.apply" % attr], lambda: meta(x),
               "inline: the module's %s changed after apply is caught" % attr)
        setattr(meta, attr, saved)
    with torch.no_grad():
        check(torch.allclose(meta(x), meta.linfuse_base_class.forward(meta, x), rtol=1e-4, atol=1e-5),
              "inline: put back, the module runs linfuse's again")
    meta.w1 = nn.Linear(D, H, bias=True)  # a part replaced after apply: refused by name
    raises(linfuse.Error, ["meta (FeedForward)", "parts changed", "w1"], lambda: meta(x),
           "inline: a projection replaced after apply is caught")
    for part in ("w1", "w2"):
        saved = getattr(meta, part)
        setattr(meta, part, nn.Identity())
        raises(linfuse.Error, ["parts changed", part], lambda: meta(x),
               "inline: %s replaced by an Identity after apply is caught by name" % part)
        setattr(meta, part, saved)
    test_torch_apply_inline_state(torch, FeedForward)
    test_torch_probe_tolerance(torch, FeedForward)
    restored = lt.unapply(model)
    check(sorted(restored) == ["drop", "erf", "inference", "mc", "meta", "tanh", "zeroed"] and
          type(model.meta) is FeedForward,
          "inline: unapply restores them: %s" % restored)


def test_torch_probe_tolerance(torch, FeedForward):
    """A float32 forward that scales its output by 1.02 (a FalconH1-style multiplier near 1) is left:
    float32 is held to 1% (3% let it through, and the patched model ran 2% off)."""
    import linfuse.torch as lt
    nn = torch.nn

    class Scaled(FeedForward):
        def forward(self, x):
            return super().forward(x) * 1.02

    torch.manual_seed(5)
    model = nn.Sequential(Scaled()).eval()
    report = lt.apply(model)
    left = [r for r in report.left if r[0] == "0"]
    check(not report.replaced and left and "differ" in left[0][2],
          "probe: an f32 output scaled by 1.02 is left: %s" % (left or report.replaced))


def test_torch_apply_inline_state(torch, FeedForward):
    """What a forward does besides its output, seen by apply's reads and probes (a second attack's
    findings): state set on the first call, an x edited in place, draws from any generator, a
    second activation-named part; a module left keeps its own weights."""
    import random
    import linfuse.torch as lt
    nn, F = torch.nn, torch.nn.functional
    D = FeedForward().w1.in_features

    class Scaled(FeedForward):  # sets itself up on its first call, from its projections (no MLP linfuse runs)
        def forward(self, x):
            if not hasattr(self, "scale"):
                self.scale = self.w1.in_features ** -0.5
            return super().forward(x) * self.scale

    class Lazy(FeedForward):  # builds [W1; W3] on its first call
        def forward(self, x):
            if "fused" not in self._buffers:
                self.register_buffer("fused", torch.cat([self.w1.weight, self.w3.weight]), persistent=False)
            g, u = F.linear(x, self.fused).chunk(2, -1)
            return self.w2(F.silu(g) * u)

    class Clamping(FeedForward):  # edits its input in place
        def forward(self, x):
            return super().forward(x.clamp_(-20, 20))

    class LayerDrop(FeedForward):  # drops the whole MLP one call in ten in training mode
        def forward(self, x):
            y = super().forward(x)
            return y * 0 if self.training and torch.rand(()) < 0.1 else y

    class PyRandom(FeedForward):  # Python's random, in training mode
        def forward(self, x):
            y = super().forward(x)
            return y * random.uniform(0.5, 1.5) if self.training else y

    class TwoActs(FeedForward):  # an act_fn, and an act besides it that the forward runs too
        def __init__(self):
            super().__init__()
            self.act_fn, self.act = nn.SiLU(), nn.Identity()

        def forward(self, x):
            return self.w2(self.act(self.act_fn(self.w1(x))) * self.w3(x))

    torch.manual_seed(2)
    model = nn.Module()
    for n, cls in (("scaled", Scaled), ("lazy", Lazy), ("clamping", Clamping), ("layerdrop", LayerDrop),
                   ("pyrandom", PyRandom), ("two_acts", TwoActs)):
        setattr(model, n, cls())
    twin = copy.deepcopy(model)  # never patched: what each should compute
    ptrs = {n: getattr(model, n).w1.weight.data_ptr() for n in ("clamping", "two_acts")}
    random.seed(9)
    want = random.random()
    random.seed(9)
    report = lt.apply(model)
    check(random.random() == want, "state: apply draws nothing from Python's random")
    done = {name: note for name, _, _, _, note in report.replaced}
    left = {name: why for name, _, why in report.left}
    check(set(done) == {"lazy", "layerdrop", "pyrandom"} and "scaled" in left,
          "state: the MLPs replaced (scaled, whose output is scaled, left):\n%s" % report)
    check("fused" not in model.lazy._buffers,
          "state: a weight the forward made in apply's reads and probes is not kept (linfuse never uses it)")
    for n in ("layerdrop", "pyrandom"):
        check("in training mode its own forward runs: its own forward in training mode draws random numbers" in
              done.get(n, ""), "state: %s's training mode, which draws, is its own: %s" % (n, done.get(n)))
    check("clamping" in left, "state: a forward clamping x in place is left: %s" % left.get("clamping"))
    check("holds more than its projections and activation (act (Identity))" in left.get("two_acts", ""),
          "state: a second activation-named part is a part linfuse would not run: %s" % left.get("two_acts"))
    check(all(getattr(model, n).w1.weight.data_ptr() == p for n, p in ptrs.items()),
          "state: a module left keeps its own gate and up weights (not views of a stacked copy)")
    x = torch.randn(4, D) * 30
    with torch.no_grad():
        for n in ("scaled", "lazy", "clamping", "two_acts"):
            mod, ref = getattr(model, n), getattr(twin, n)
            got, want_y = mod(x.clone()), ref(x.clone())
            e = float((got - want_y).abs().max() / want_y.abs().max())
            check(e < 1e-4, "state: %s computes what an untouched copy does after apply (%.3g)" % (n, e))
        model.layerdrop.train()
        drops = sum(int(not bool(model.layerdrop(x).any())) for _ in range(200))
        check(5 <= drops <= 50, "state: in training mode the LayerDrop MLP still drops (%d of 200)" % drops)
        model.layerdrop.eval()


def test_torch_apply_edges(torch, SwiGLU, Phi3MLP):
    """What a layout alone does not say: the forward's other arguments, weights not loaded yet, an
    activation with parameters of its own or clamped, ties, inference mode, MoE experts."""
    import linfuse
    import linfuse.torch as lt
    nn, F = torch.nn, torch.nn.functional
    D = 64
    x = torch.randn(3, D)

    class Named(SwiGLU):  # called by keyword, or with a second argument
        def forward(self, hidden_states, scale=1.0):
            return SwiGLU.forward(self, hidden_states) * scale

    m = Named()
    with torch.no_grad():
        own = (m(x), m(x, 0.5))
        check(len(lt.apply(m).replaced) == 1, "edges: a forward with a named input and a default argument is patched")
        by_name, scaled = m(hidden_states=x), m(x, 0.5)
    check(float((by_name - own[0]).abs().max()) <= 1e-4 * float(own[0].abs().max()) and torch.equal(scaled, own[1]),
          "edges: x by its name runs linfuse; a second argument runs the module's own forward")
    zero = SwiGLU()
    for p in zero.parameters():
        nn.init.zeros_(p)
    why = " ".join(w for _, _, w in lt.apply(zero).left)
    check("gives zeros" in why and "weights not loaded" in why, "edges: all-zero weights cannot be checked: left: %s" % why)

    class Beta(nn.Module):
        def __init__(self):
            super().__init__()
            self.beta = nn.Parameter(torch.ones(()))

        def forward(self, t):
            return t * torch.sigmoid(self.beta * t)
    b = SwiGLU()
    b.act_fn = Beta()
    why = " ".join(w for _, _, w in lt.apply(b).left)
    check("holds parameters or buffers (beta)" in why, "edges: an activation with a parameter is left: %s" % why)
    c = SwiGLU()
    c.act_fn = lambda t: F.silu(t.clamp(max=7.0))
    why = " ".join(w for _, _, w in lt.apply(c).left)
    check("none of silu" in why, "edges: a clamped silu is not silu: %s" % why)

    class Clamped(SwiGLU):  # the clamp in the forward: the probe's large tokens see it
        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)).clamp(max=7.0) * self.up_proj(x))
    why = " ".join(w for _, _, w in lt.apply(Clamped()).left)
    check("own forward and linfuse's differ" in why, "edges: a clamp inside the forward is seen: %s" % why)
    r = SwiGLU()
    lt.apply(r)
    r.act_fn = nn.GELU()
    raises(linfuse.Error, ["act_fn was replaced", "unapply"], lambda: r(x), "edges: an act_fn replaced after apply")
    lt.unapply(r)
    h = SwiGLU()
    lt.apply(h)
    seen = []
    handle = h.down_proj.register_forward_hook(lambda mod, inp, out: seen.append(out.shape))
    with torch.no_grad():
        hooked = h(x)
        own = type(h).linfuse_base_class.forward(h, x)
    handle.remove()
    check(len(seen) == 2 and torch.equal(hooked, own),
          "edges: a hook put on a projection after apply runs (the module's own forward does): %s" % seen)
    # a global module hook (register_module_forward_hook: activation-capturing tools) sees every
    # projection's call, as it would without linfuse
    linears = []
    handle = nn.modules.module.register_module_forward_hook(
        lambda mod, inp, out: linears.append(type(mod).__name__) if isinstance(mod, nn.Linear) else None)
    with torch.no_grad():
        ghooked = h(x)
    handle.remove()
    check(linears.count("Linear") == 3 and torch.equal(ghooked, own),
          "edges: a global forward hook sees the three projections: %s" % linears)
    # a projection's or the activation's forward replaced after apply (as accelerate's hooks attach:
    # module.forward = ...): it takes effect, as the module's own forward would run it (it had been
    # ignored, the patched module 1.0 off)
    for part in ("down_proj", "gate_proj", "act_fn"):
        f = SwiGLU()
        if part == "act_fn":
            f.act_fn = nn.SiLU()
        lt.apply(f)
        with torch.no_grad():
            before = f(x)
        base = getattr(f, part).forward
        getattr(f, part).forward = lambda t, base=base: base(t) * 0.5
        with torch.no_grad():
            got, own = f(x), type(f).linfuse_base_class.forward(f, x)
        check(torch.equal(got, own) and not torch.allclose(got, before),
              "edges: %s.forward replaced after apply takes effect" % part)
        del getattr(f, part).forward
        with torch.no_grad():
            back, own = f(x), type(f).linfuse_base_class.forward(f, x)
        check(torch.allclose(back, own, rtol=1e-4, atol=1e-5), "edges: %s.forward put back: the same again" % part)
    ah = SwiGLU()
    ah.act_fn = nn.SiLU()
    ah.act_fn.register_forward_hook(lambda mod, inp, out: None)
    why = " ".join(w for _, _, w in lt.apply(ah).left)
    check("act_fn has forward hooks" in why, "edges: a hook on the activation at apply leaves the module: %s" % why)
    for what in ("wrapped", "bias"):
        pm = SwiGLU()
        lt.apply(pm)
        if what == "wrapped":  # as PEFT's LoRA wraps a projection: its weight is the same memory
            class Wrapped(nn.Module):
                def __init__(self, base):
                    super().__init__()
                    self.base = base

                @property
                def weight(self):
                    return self.base.weight

                def forward(self, t):
                    return self.base(t) * 2
            pm.up_proj = Wrapped(pm.up_proj)
        else:
            pm.down_proj.bias = nn.Parameter(torch.ones(D))
        raises(linfuse.Error, ["parts changed after linfuse.torch.apply", "unapply"], lambda: pm(x),
               "edges: a projection %s after apply" % what)

    class Method(SwiGLU):  # the activation a method of the class: bound anew at each lookup
        def __init__(self):
            super().__init__()
            del self.act_fn

        def act_fn(self, t):
            return F.silu(t)
    mm = Method()
    lt.apply(mm)
    with torch.no_grad():
        mm(x)
        first = lt._PREPARED.get(mm)
        mm(x)
        check(first is not None and lt._PREPARED.get(mm) is first,
              "edges: an activation written as a method keeps the module's prepared weights from call to call")
    t = SwiGLU()
    t.up_proj.weight = nn.Parameter(t.gate_proj.weight.data)  # two Parameters over one storage
    why = " ".join(w for _, _, w in lt.apply(t).left)
    check("tied" in why and t.up_proj.weight.data_ptr() == t.gate_proj.weight.data_ptr(),
          "edges: gate and up over one storage are left tied: %s" % why)
    i = SwiGLU()
    with torch.inference_mode():
        lt.apply(i)
    lt.unapply(i)
    i(torch.randn(2, D, requires_grad=True)).sum().backward()
    check(not i.gate_proj.weight.is_inference() and i.gate_proj.weight.grad is not None,
          "edges: apply under inference_mode leaves normal weights normal (a backward after unapply works)")

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = Phi3MLP()
            self.other = nn.Linear(D, 160, bias=False)
            self.other.weight = self.mlp.gate_up_proj.weight
    tm = Tied()
    lt.apply(tm)
    cp = copy.deepcopy(tm)
    check(cp.other.weight is cp.mlp.gate_up_proj.weight and cp.mlp.linfuse_gate_up.data_ptr() ==
          cp.other.weight.data_ptr(), "edges: a copy keeps a fused weight tied to another module, and views it")

    class Experts(nn.Module):  # an MoE's experts, held stacked
        def __init__(self):
            super().__init__()
            self.gate_up_proj = nn.Parameter(torch.randn(4, 160, D))
            self.down_proj = nn.Parameter(torch.randn(4, D, 80))
            self.act_fn = nn.SiLU()
    why = " ".join(w for _, _, w in lt.apply(Experts()).left)
    check("not nn.Linear modules" in why and "(4, 160, 64)" in why, "edges: MoE experts are left, saying why: %s" % why)

    class Both(Phi3MLP):  # gate_proj and up_proj there but None: the fused layout
        def __init__(self):
            super().__init__()
            self.gate_proj = self.up_proj = None
    check(len(lt.apply(Both()).replaced) == 1, "edges: gate_proj = up_proj = None: judged as the fused layout")

    class Pair(SwiGLU):
        def forward(self, x):
            return SwiGLU.forward(self, x), None
    why = " ".join(w for _, _, w in lt.apply(Pair()).left)
    check("returns tuple" in why, "edges: a forward returning a tuple is left, saying so: %s" % why)


def test_torch_custom_ops(torch):
    import linfuse.torch as lt
    if not lt.HAS_CUSTOM_OP:
        print("python_test: torch %s has no torch.library.custom_op (2.4+): the custom-op and torch.compile "
              "checks are skipped; the ops run as plain functions" % torch.__version__)
        return
    x, gu, dn = torch.randn(5, 32), torch.randn(96, 32) * 0.2, torch.randn(32, 48) * 0.2
    w, b = torch.randn(24, 32), torch.randn(24)
    if hasattr(torch.library, "opcheck"):
        for op, args in ((torch.ops.linfuse.gated_mlp.default, (x, gu, dn, "silu", "gated")),
                         (torch.ops.linfuse.gated_gemm.default, (x, gu, "gelu_tanh")),
                         (torch.ops.linfuse.linear.default, (x, w, b, "relu"))):
            try:
                torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor"))
                check(True, "")
            except Exception as e:  # noqa: BLE001
                check(False, "opcheck %s: %s" % (op, e))

    def f(x):
        return torch.ops.linfuse.gated_mlp(x, gu, dn, "silu", "gated").sum() + \
            torch.ops.linfuse.linear(x, w, b, "relu").sum() + torch.ops.linfuse.gated_gemm(x, gu, "gelu_tanh").sum()
    explained = torch._dynamo.explain(f)(x)
    check(explained.graph_break_count == 0 and explained.graph_count == 1,
          "torch.compile traces the custom ops whole: %d graphs, %d breaks" % (explained.graph_count,
                                                                               explained.graph_break_count))
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    check(torch.allclose(compiled(x), f(x)), "the compiled function computes the eager one's values")
    # a patched module under the tracers and fake tensors: the op, not the direct call, is what they see
    import linfuse.torch as lt
    model, _ = toy_model(torch, "llama", layers=1)
    lt.apply(model)
    mlp, xm = model.layers[0].mlp, torch.randn(3, 64)
    with torch.no_grad():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            traced = torch.jit.trace(mlp, xm)
        ours = [str(w.message)[:80] for w in caught if "linfuse" in w.filename]
        check(not ours, "torch.jit.trace of a patched MLP: no warning from linfuse's checks: %s" % ours)
        x2 = torch.randn(5, 64)
        check("linfuse::gated_mlp" in str(traced.graph) and torch.allclose(traced(x2), mlp(x2)),
              "torch.jit.trace of a patched MLP records linfuse::gated_mlp and computes on new inputs")
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            out = mlp(mode.from_tensor(xm))
        check(tuple(out.shape) == (3, 64), "a patched MLP under FakeTensorMode gives the fake op's shape")
    # torch.compile under autocast makes eager's choice (the op has no autocast rule): weights not
    # in the autocast dtype, the module's own forward; weights in it, x cast and linfuse's op
    f32m = toy_model(torch, "llama", layers=1)[0]
    bf = toy_model(torch, "llama", layers=1)[0].to(torch.bfloat16)
    lt.apply(f32m)
    lt.apply(bf)
    for what, m, op_wanted in (("an f32 module under bf16 autocast: its own forward", f32m.layers[0].mlp, False),
                               ("a bf16 module, an f32 x, bf16 autocast: x cast, linfuse's op", bf.layers[0].mlp,
                                True)):
        xin = torch.randn(4, 64)
        try:
            torch._dynamo.reset()
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                explained = torch._dynamo.explain(m)(xin)
                code = "".join(g.code for g in explained.graphs)
                got = torch.compile(m, fullgraph=True, backend="aot_eager")(xin)
                want = m.linfuse_base_class.forward(m, xin)
            check(explained.graph_break_count == 0 and ("linfuse" in code) == op_wanted and got.dtype == want.dtype
                  and torch.allclose(got.float(), want.float(), atol=0.03),
                  "compiled, %s (%d breaks, op in the graph: %s, dtype %s)"
                  % (what, explained.graph_break_count, "linfuse" in code, got.dtype))
        except Exception as e:  # noqa: BLE001
            check(False, "compiled, %s: %s: %s" % (what, type(e).__name__, e))
    # a compiled forward checks the module's parts as the eager one does: an activation replaced
    # after it ran is caught (its guards see the change and trace again), not computed the old way
    for what, change, said in (("an activation", lambda m: setattr(m, "act_fn", torch.nn.GELU()),
                                 "act_fn was replaced after linfuse.torch.apply"),
                                ("a projection", lambda m: setattr(m, "down_proj", torch.nn.Linear(96, 64)),
                                 "parts changed after linfuse.torch.apply (down_proj)")):
        try:
            torch._dynamo.reset()
            model, _ = toy_model(torch, "llama", layers=1)
            lt.apply(model)
            m, xin = model.layers[0].mlp, torch.randn(4, 64)
            c = torch.compile(m, fullgraph=True, backend="aot_eager")
            with torch.no_grad():
                first_ok = torch.allclose(c(xin), m.linfuse_base_class.forward(m, xin), atol=1e-4)
                change(m)
                try:
                    c(xin)
                    caught = "nothing raised"
                except Exception as e:  # noqa: BLE001 (dynamo may wrap the error: its text must say what changed)
                    caught = str(e)
            check(first_ok and said in caught,
                  "compiled, %s replaced after the first call: caught (%s)" % (what, caught[:300]))
        except Exception as e:  # noqa: BLE001
            check(False, "compiled, %s replaced after the first call: %s: %s" % (what, type(e).__name__, e))
    # the autocast state is part of what a compiled forward was traced under: called again without
    # autocast, the f32 module compiled under it must not keep autocast's choice
    try:
        torch._dynamo.reset()
        m, xin = f32m.layers[0].mlp, torch.randn(4, 64)
        c = torch.compile(m, fullgraph=True, backend="aot_eager")
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            under = c(xin)
        with torch.no_grad():
            got, want = c(xin), m(xin)
        check(under.dtype == torch.bfloat16 and got.dtype == torch.float32 and torch.allclose(got, want, atol=1e-4),
              "compiled under autocast, then called without it: %s then %s" % (under.dtype, got.dtype))
    except Exception as e:  # noqa: BLE001
        check(False, "compiled under autocast, then called without it: %s: %s" % (type(e).__name__, e))
    torch._dynamo.reset()


def test_torch_misuse(torch):
    """What a new user's attack found (each was a crash, a silent wrong answer or a spurious error)."""
    import numpy as np
    import linfuse
    import linfuse.torch as lt
    nn = torch.nn
    # a GatedMlp is not copied: a copy shared its C module, freed under it by the original's close()
    m = linfuse.GatedMlp(torch.randn(64, 16), torch.randn(16, 32))
    for how, fn in (("copy.copy", copy.copy), ("copy.deepcopy", copy.deepcopy), ("pickle", pickle.dumps)):
        raises(TypeError, ["cannot be copied or pickled"], lambda: fn(m), "GatedMlp: %s refused" % how)
    # a weight re-laid out in place at the same address: refused, not read with the old strides
    gu, dn = torch.randn(24, 8), torch.randn(8, 12)
    m, x = linfuse.GatedMlp(gu, dn), torch.randn(3, 8)
    m(x), m(x)
    with torch.no_grad():
        dn.as_strided_((8, 12), (1, 8))
    raises(linfuse.Error, ["changed its layout"], lambda: m(x), "GatedMlp: a weight re-strided in place")
    # a misaligned array: refused by name (its reads were undefined behaviour)
    buf = bytearray(4 * 8 * 4 + 2)
    w = np.frombuffer(buf, np.float32, offset=2, count=32).reshape(8, 4)
    raises(linfuse.Error, ["not aligned"], lambda: linfuse.linear(np.ones((1, 4), np.float32), w),
           "a weight not aligned to its elements")
    # relu keeps NaN, as torch.relu does
    y = linfuse.linear(np.ones((1, 2), np.float32), np.eye(2, dtype=np.float32), np.array([np.nan, 0], np.float32),
                       act="relu")
    check(np.isnan(y[0, 0]) and y[0, 1] == 1.0, "relu(NaN) is NaN: %s" % y)
    try:  # an array-API array (numpy's experimental namespace): taken through numpy, given back as one
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import numpy.array_api as xp
    except ImportError:
        xp = None
    if xp is not None:
        xa, wa = xp.asarray(np.ones((2, 4), np.float32)), xp.asarray(np.eye(3, 4, dtype=np.float32))
        ya = linfuse.linear(xa, wa)
        check(type(ya) is type(xa) and ya.shape == (2, 3) and bool(xp.all(ya == xp.ones((2, 3), dtype=xp.float32))),
              "linear of array-API arrays: an array-API array back, the right values")
    y = linfuse.linear(np.ones((3, 4), np.float32), np.ones((0, 4), np.float32))
    check(y.shape == (3, 0), "linear with no output features: (3, 0), as torch's: %s" % (y.shape,))
    raises(linfuse.Error, ["x's last dim"], lambda: linfuse.linear(np.ones((3, 5), np.float32),
                                                                  np.ones((0, 4), np.float32)),
           "linear with no outputs still checks x's width")
    for act in ("silu", "gelu_tanh"):  # the clamped exp left x / e^88 far below: -0.006 at -1e36
        y = linfuse.linear(np.array([[-1e36], [-3e38], [-89.0]], np.float32), np.ones((1, 1), np.float32), act=act)
        check(np.all(np.abs(y) < 1e-30), "%s far below zero is 0: %s" % (act, y.ravel()))
    model, MLP = toy_model(torch, "llama", layers=1)
    mlp = model.layers[0].mlp
    g0 = mlp.gate_proj.weight
    opt = torch.optim.SGD(mlp.parameters(), lr=0.1)
    lt.apply(model)
    x = torch.randn(3, 64)
    # gate's and up's weights wanting a gradient, down's frozen: the forward runs, its backward
    # refuses (the gradients were silently dropped)
    mlp.down_proj.weight.requires_grad_(False)
    y = mlp(x)
    check(y.requires_grad and torch.allclose(y.detach(), mlp.linfuse_base_class.forward(mlp, x).detach(), atol=1e-4),
          "patched: gate/up want grad, down frozen: the forward runs and joins the graph")
    raises(RuntimeError, ["no backward"], lambda: y.sum().backward(), "patched: gate/up want grad: backward refused")
    mlp.down_proj.weight.requires_grad_(True)
    # a module whose gate parameter was replaced: its copies refuse, as it does
    with torch.no_grad():
        ref = mlp.linfuse_base_class.forward(mlp, x)
        check(torch.allclose(mlp(x), ref, atol=1e-4), "patched toy MLP computes its own forward")
    saved = mlp.gate_proj.weight
    mlp.gate_proj.weight = nn.Parameter(torch.randn_like(saved))
    for how, fn in (("deepcopy", copy.deepcopy), ("pickle", pickle.dumps)):
        raises(linfuse.Error, ["no longer view"], lambda: fn(mlp), "a patched module with a replaced gate: %s" % how)
    mlp.gate_proj.weight = saved
    # down re-laid out at the same address: the module's GatedMlp is made again
    with torch.no_grad():
        mlp(x)
        w = mlp.down_proj.weight
        mlp.down_proj.weight = nn.Parameter(w.as_strided((64, 96), (1, 64)))
        check(torch.allclose(mlp(x), mlp.linfuse_base_class.forward(mlp, x), atol=1e-4),
              "patched: a down weight re-strided at the same address is seen")
        mlp.down_proj.weight = w
    # autocast: x cast to the weights' dtype where autocast would, else the module's own forward
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        y, own = mlp(x), mlp.linfuse_base_class.forward(mlp, x)
    check(y.dtype == own.dtype and torch.equal(y, own), "patched f32 module under bf16 autocast: its own forward")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        y, own = mlp(x.bfloat16()), mlp.linfuse_base_class.forward(mlp, x.bfloat16())
    check(y.dtype == own.dtype and torch.equal(y, own), "... with a bf16 x too: its own forward")
    bf = toy_model(torch, "llama", layers=1)[0].to(torch.bfloat16)
    lt.apply(bf)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        y = bf.layers[0].mlp(x)  # f32 x, bf16 weights: x cast as autocast would
        own = bf.layers[0].mlp.linfuse_base_class.forward(bf.layers[0].mlp, x)
    check(y.dtype == own.dtype == torch.bfloat16 and torch.allclose(y.float(), own.float(), atol=0.03),
          "patched bf16 module under bf16 autocast, an f32 x: cast, computed by linfuse")
    # an optimizer made before apply still trains gate and up after unapply
    lt.unapply(model)
    check(mlp.gate_proj.weight is g0, "apply/unapply keep gate's Parameter object")
    before = g0.detach().clone()
    mlp(torch.randn(8, 64)).square().sum().backward()
    opt.step()
    check(not torch.equal(before, g0), "an optimizer made before apply still trains gate_proj after unapply")
    # a model made under inference_mode: patched (new Parameters: a normal tensor as an inference
    # Parameter's data broke the module's own forward)
    with torch.inference_mode():
        inf_model, _ = toy_model(torch, "llama", layers=1)
    report = lt.apply(inf_model)
    with torch.inference_mode():
        xi = torch.randn(3, 64)
        m0 = inf_model.layers[0].mlp
        check(len(report.replaced) == 1 and torch.allclose(m0(xi), m0.linfuse_base_class.forward(m0, xi), atol=1e-4),
              "a model made under inference_mode is patched and runs: %s" % report)
    # a projection with hooks or a parametrization is left alone with the reason
    model, _ = toy_model(torch, "llama", layers=1)
    model.layers[0].mlp.down_proj.register_forward_hook(lambda mod, i, o: None)
    report = lt.apply(model)
    check(not report.replaced and "forward hooks" in str(report), "a hooked projection is left: %s" % report)
    # threads calling a module for the first time at once: one GatedMlp, no "closed" error
    model, _ = toy_model(torch, "llama", layers=1)
    lt.apply(model)
    mlp, errors, bar = model.layers[0].mlp, [], threading.Barrier(4)

    def first_call():
        bar.wait()
        try:
            with torch.no_grad():
                mlp(torch.randn(1, 64))
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=first_call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, "four threads' first calls at once: %r" % errors[:1])
    # torch.jit.trace where linfuse has no custom op: the module's own forward is traced (a warning)
    if not lt.HAS_CUSTOM_OP:
        with torch.no_grad(), warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            traced = torch.jit.trace(mlp, torch.randn(3, 64), check_trace=False)
            x = torch.randn(3, 64)
            check(torch.allclose(traced(x), mlp(x), atol=1e-4), "jit.trace before torch 2.4 records the own forward")
    func = getattr(torch, "func", None)
    if func is None:  # torch 1.13: functorch, a package of its own
        try:
            import functorch as func
        except ImportError:
            func = None
    if func is not None and hasattr(func, "vmap"):  # functorch's wrappers: the module's own forward
        with torch.no_grad():
            xs = torch.randn(5, 2, 64)
            check(torch.allclose(func.vmap(mlp)(xs), torch.stack([mlp(r) for r in xs]), atol=1e-4),
                  "vmap over a patched module")


def main():
    if sys.argv[1:] == ["--installed"]:  # the package as pip installed it (tests/wheel_test.sh)
        for var in ("LINFUSE_LIBRARY", "PYTHONPATH"):
            check(var not in os.environ, "%s is set: the installed package must need none" % var)
        test_loader_installed()
    else:
        lib_path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("LINFUSE_LIBRARY", "")
        os.environ.setdefault("LINFUSE_LIBRARY", lib_path)
        test_loader(lib_path)
    test_mirrors()
    test_linear_numpy()
    test_mlp_numpy()
    test_quantize_numpy()
    test_refusals_numpy()
    test_refusals_foreign()
    test_gated_mlp_object_numpy()
    test_no_leaks_numpy()
    try:
        import torch
    except ImportError:
        torch = None
        print("python_test: torch is not installed: the torch checks are skipped (Debian: python3-torch)")
    if torch is not None:
        test_torch_ops(torch)
        test_torch_apply(torch)
        test_torch_apply_layouts(torch)
        test_torch_apply_inline(torch)
        test_torch_custom_ops(torch)
        test_torch_misuse(torch)
    print("python_test: %d checks, %d failed" % (checks, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
