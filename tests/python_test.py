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
               tensors, bf16 too (tests/python_ops_torch_test.py, run from here); linfuse.torch's
               module and apply() are tests/python_torch_test.py's.

Error measure (as the C tests'): |got - ref| / (mag + tiny), mag the sum of the magnitudes of
the terms that made ref (|x| @ |W|^T + |b| for a Linear), so sums that cancel do not blow it up.
Tolerances: f32 1e-5, f16 2e-3 for one GEMM; the MLP, whose g, u and h are rounded to the dtype
in between, f32 1e-5, f16 4e-3, bf16 3e-2.

usage: tests/python_test.py BUILD/liblinfuse.so   (PYTHONPATH=python, LINFUSE_LIBRARY as given)
       tests/python_test.py --installed           (the package a wheel installed, nothing set)"""
import ctypes as C
import gc
import os
import re
import resource
import subprocess
import sys
import warnings

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
        sys.modules.setdefault("python_test", sys.modules[__name__])  # its helpers and counts: this run's
        import python_ops_torch_test  # the same through torch tensors (tests/python_ops_torch_test.py)
        python_ops_torch_test.test_torch_ops(torch)
        python_ops_torch_test.test_torch_misuse(torch)
    print("python_test: %d checks, %d failed" % (checks, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
