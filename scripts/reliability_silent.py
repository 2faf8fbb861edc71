"""scripts/reliability.py's family "silent": answers that were wrong with exit 0, and output lost
with exit 0 (issue 52's cases, found by an attack and a new user's first hour). Each is handled
when linfuse gives the right answer or refuses by name; exit 0 with a wrong or lost answer is the
finding. Python cases run Debian's python3 over the package in python/ and the library beside the
binary; those that need numpy or torch are left out where that python3 has none."""
import json
import math
import os
import struct
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
X2 = os.path.join(ROOT, "..", "shared", "ref", "torch-h200x2")


def st_file(path, tensors):
    """A .safetensors file of tensors: name -> (dtype, shape, bytes)."""
    header, blob = {}, b""
    for name in sorted(tensors):
        dt, shape, data = tensors[name]
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)
    return path


def read_y(path):
    """Tensor y of a .safetensors file linfuse wrote, as a flat list of floats (F32)."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])["y"]
    s, e = h["data_offsets"]
    return list(struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e]))


def sanitizer_env(lib):
    """What Python needs to load a library built with AddressSanitizer (make test's), as the CMake
    tests give it: the runtime preloaded (and libstdc++ after it), leak checks off for Python's own.
    gcc's runtime is a library the sanitized one needs; clang's is linked into programs, so a
    library of clang's names it only by the symbols it leaves undefined."""
    run = lambda *a: subprocess.run(list(a), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    undefined = run("nm", "-D", "--undefined-only", lib)
    if "__asan_" not in undefined:
        return []
    ldd = run("ldd", lib)
    rt = [w for line in ldd.splitlines() for w in line.split() if "libasan" in w and w.startswith("/")]
    if not rt:
        arch = run("uname", "-m").strip()
        rt = [run("clang", "-print-file-name=libclang_rt.asan-%s.so" % arch).strip()]
    cxx = run("cc", "-print-file-name=libstdc++.so.6").strip()
    return ["LD_PRELOAD=%s:%s" % (rt[0], cxx), "ASAN_OPTIONS=detect_leaks=0"]


def silu(v):
    return v / (1 + math.exp(-v))


def attacks(bin_, w, attack, write, trace, op, ref):
    f32 = lambda n, k=7: struct.pack("<%df" % n, *[((i * 5) % k - k // 2) / 8 for i in range(n)])
    pre = "model.layers.0.mlp."
    D, T = 8, 3

    def mlp(weights, out, *more, inp=None):
        return [bin_, "mlp", "--weights", weights, "--prefix", pre[:-1], "--input", inp, "--output", out,
                "--device", "cpu", "--dtype", "f32"] + list(more)

    X = st_file(w("sx.safetensors"), {"x": ("F32", [T, D], f32(T * D))})
    xs = struct.unpack("<%df" % (T * D), f32(T * D))

    # FP8 block scales: H rows of gate in blocks of `rows`, the block size stated (or not) in
    # config.json; a usable one gives the right y, anything else is refused naming the key
    def fp8_ckpt(d, H, rows, cfg):
        os.makedirs(d, exist_ok=True)
        grid = -(-H // rows)
        scales = [1.0 + k for k in range(grid)]
        st_file(os.path.join(d, "model.safetensors"), {
            pre + "gate_proj.weight": ("F8_E4M3", [H, D], bytes([0x38]) * (H * D)),  # 1.0 each
            pre + "gate_proj.weight_scale_inv": ("F32", [grid, 1], struct.pack("<%df" % grid, *scales)),
            pre + "up_proj.weight": ("F32", [H, D], f32(H * D, 5)), pre + "down_proj.weight": ("F32", [D, H], f32(D * H))})
        c = os.path.join(d, "config.json")
        if cfg is None:
            if os.path.exists(c):
                os.unlink(c)
        else:
            write(c, json.dumps({"hidden_act": "silu", "quantization_config": cfg}))
        up = struct.unpack("<%df" % (H * D), f32(H * D, 5))
        dn = struct.unpack("<%df" % (D * H), f32(D * H))
        y = []
        for t in range(T):
            xt = xs[t * D:(t + 1) * D]
            h = [silu(scales[k // rows] * sum(xt)) * sum(xt[i] * up[k * D + i] for i in range(D)) for k in range(H)]
            y += [sum(dn[j * H + k] * h[k] for k in range(H)) for j in range(D)]
        return y

    def y_is(want, out):
        def check(o, e):
            got = read_y(out)
            worst = max(abs(a - b) / (1e-3 + abs(b)) for a, b in zip(got, want))
            return None if worst < 1e-3 else "wrong: y %.1f%% off" % (100 * worst)
        return check

    y = w("fy.safetensors")
    want = fp8_ckpt(w("fp8_64"), 100, 64, {"weight_block_size": [64, 64]})
    attack("silent", "FP8 64-row blocks, weight_block_size [64, 64]", mlp(w("fp8_64"), y, "--act", "silu", inp=X), 0,
           y_is(want, y))
    for tag, v in [("[64.0, 64.0]", [64.0, 64.0]), ('["64", "64"]', ["64", "64"]), ("[0, 0]", [0, 0]),
                   ("[-64, 64]", [-64, 64]), ("[128.5, 128]", [128.5, 128]), ("[128]", [128])]:
        fp8_ckpt(w("fp8_bad"), 100, 64, {"weight_block_size": v})
        attack("silent", "FP8 blocks, weight_block_size " + tag, mlp(w("fp8_bad"), y, "--act", "silu", inp=X), 2,
               lambda o, e: None if "weight_block_size" in e else "wrong: the key is not named")
    for tag, H, rows in [("64-row", 100, 64), ("100-row", 300, 100), ("256-row", 512, 256)]:
        fp8_ckpt(w("fp8_none"), H, rows, None)
        attack("silent", "FP8 %s blocks, no config.json" % tag, mlp(w("fp8_none"), y, "--act", "silu", inp=X), 2,
               lambda o, e: None if "add \"quantization_config\"" in e else "wrong: not said what to add")

    # two namings of one layer: the fused gate_up_proj (zeros) beside gate_proj/up_proj
    H = 12
    d = w("two")
    os.makedirs(d)
    st_file(os.path.join(d, "model.safetensors"), {
        pre + "gate_proj.weight": ("F32", [H, D], f32(H * D)), pre + "up_proj.weight": ("F32", [H, D], f32(H * D)),
        pre + "gate_up_proj.weight": ("F32", [2 * H, D], bytes(4 * 2 * H * D)),
        pre + "down_proj.weight": ("F32", [D, H], f32(D * H)),
        "layers.1.w1.weight": ("F32", [H, D], f32(H * D)), "layers.1.w3.weight": ("F32", [H, D], f32(H * D)),
        "layers.1.w2.weight": ("F32", [D, H], f32(D * H))})
    attack("silent", "gate_up_proj beside gate_proj/up_proj", mlp(d, y, "--act", "silu", inp=X), 2,
           lambda o, e: None if "gate_proj/up_proj/down_proj and gate_up_proj/down_proj" in e else "wrong: not both named")
    attack("silent", "the not-found listing names each layer once",
           [bin_, "mlp", "--weights", d, "--prefix", "nope", "--input", X, "--output", y, "--act", "silu"], 2,
           lambda o, e: None if e.count("model.layers.0.mlp") == 1 else "wrong: a layer listed twice: %s" % e[-120:])

    # linfuse mlp, a new user's paths: weights that are not there, --input -, hidden_act ["silu"]
    attack("silent", "mlp --weights that do not exist",
           mlp(w("models", "Meta-Llama-3-8B"), y, inp=X), 2,
           lambda o, e: None if "--weights" in e and "No such file" in e and "--act" not in e else
           "wrong: %s" % e.strip()[-100:])
    good = w("good")
    os.makedirs(good)
    st_file(os.path.join(good, "model.safetensors"), {
        pre + "gate_proj.weight": ("F32", [H, D], f32(H * D)), pre + "up_proj.weight": ("F32", [H, D], f32(H * D)),
        pre + "down_proj.weight": ("F32", [D, H], f32(D * H))})
    write(os.path.join(good, "config.json"), '{"hidden_act": "silu"}')
    attack("silent", "mlp --input -", ["sh", "-c", 'f=$1; shift; exec "$@" < "$f"', "sh", X] + mlp(good, y, inp="-"), 0)
    write(os.path.join(good, "config.json"), '{"hidden_act": ["silu"]}')
    attack("silent", 'hidden_act ["silu"]', mlp(good, y, inp=X), 2,
           lambda o, e: None if "not a string" in e else "wrong: %s" % e.strip()[-100:])
    # a header whose data_offsets are floats of integer value: refused, not read as integers
    hdr = json.dumps({"x": {"dtype": "F32", "shape": [T, D], "data_offsets": [0.0, 4.0 * T * D]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    fx = write(w("floatoff.safetensors"), struct.pack("<Q", len(hdr)) + hdr + f32(T * D))
    attack("silent", "data_offsets as floats", mlp(good, y, "--act", "silu", inp=fx), 2)
    # a typo: one line, the hint last
    attack("silent", "a typo'd flag: one line, the hint last", [bin_, "linear", "--bacth", "2"], 2,
           lambda o, e: None if e.count("\n") == 1 and e.rstrip().endswith("did you mean --batch?") else
           "wrong: %d lines" % e.count("\n"))

    # traces: a merged trace's steps are each rank's
    r0, r1 = os.path.join(X2, "tp_64x128x768x3072_rank0.json"), os.path.join(X2, "tp_64x128x768x3072_rank1.json")
    if os.path.exists(r0):
        m = w("merged.json")
        subprocess.run([bin_, "trace", "merge", r0, r1, "-o", m], capture_output=True)
        attack("silent", "trace report A MERGED", [bin_, "trace", "report", r0, m, "-o", w("am.html")], 2,
               lambda o, e: None if not os.path.exists(w("am.html")) else "data lost: a report written")
        attack("silent", "trace report MERGED: a section per rank", [bin_, "trace", "report", m, "-o", w("m.html")], 0,
               lambda o, e: None if 'id="rank1"' in open(w("m.html")).read() else "wrong: no section per rank")
    for tag, v in [("a string", '"1733616000000000000"'), ("9e18", "9e18")]:
        f = write(w("base.json"), '{"baseTimeNanoseconds": %s, "traceEvents": []}' % v)
        attack("silent", "baseTimeNanoseconds as %s" % tag, [bin_, "trace", "summary", f], 2)

    # standard output that cannot take what is printed: exit 1 with the reason, never 0
    full = os.path.join(ref, "mlp_64x128x768x3072_eager.json")
    for args in (["trace", "table", full], ["trace", "summary", full], ["trace", "breakdown", full],
                 ["trace", "diff", full, os.path.join(ref, "mlp_64x128x768x3072_compile.json")],
                 ["trace", "expect", full, "--kernels-per-step", "5"], ["--help"],
                 ["linear", "--device", "cpu", "--out", w("lin")]):
        attack("silent", "%s > /dev/full" % " ".join(args[:2]), ["sh", "-c", 'exec "$@" > /dev/full', "sh", bin_] + args,
               1, lambda o, e: None if "standard output" in e else "wrong: the reason is not said")
    cut = w("cut.json")
    attack("silent", "table --format json past ulimit -f",
           ["sh", "-c", 'ulimit -f 2; exec "$@" > "$0"', cut, bin_, "trace", "table", full, "--format", "json",
            "--row-limit", "-1"], 1)

    # the Python package: checks of its own input, before anything else reads it
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
    lib = os.path.join(os.path.dirname(bin_), "liblinfuse.so")
    env = ["PYTHONPATH=" + os.path.join(ROOT, "python"), "LINFUSE_LIBRARY=" + lib] + sanitizer_env(lib)
    has = lambda mod: subprocess.run([py, "-c", "import " + mod], capture_output=True).returncode == 0

    def pyattack(name, code):
        attack("silent", name, ["env"] + env + [py, "-c", code], 0)
    if has("numpy"):
        pyattack("Python: a DLPack capsule with a NULL shape", NULL_SHAPE)
        pyattack("Python: gate and up passed apart", APART)
    if has("torch"):
        pyattack("Python: a projection's forward replaced after apply", REPLACED)


NULL_SHAPE = r'''
import ctypes as C, numpy as np, linfuse
from linfuse import _lib
new = C.pythonapi.PyCapsule_New
new.restype, new.argtypes = C.py_object, [C.c_void_p, C.c_char_p, C.c_void_p]
keep = []
class A:
    shape = (16, 8)
    buf = (C.c_float * 128)()
    def __dlpack_device__(self): return (1, 0)
    def __dlpack__(self, **kw):
        mt = _lib.DLManagedTensor()
        mt.dl_tensor = _lib.DLTensor(C.addressof(self.buf), 1, 0, 2, 2, 32, 1, None, None, 0)
        keep.append(mt)
        return new(C.addressof(mt), b"dltensor", None)
for f in (lambda: linfuse.gated_mlp(A(), np.ones((16, 8), np.float32), np.ones((8, 8), np.float32)),
          lambda: linfuse.GatedMlp(A(), np.ones((8, 8), np.float32))):
    try:
        f()
        raise SystemExit("accepted a NULL shape")
    except linfuse.Error as e:
        assert "shape" in str(e), e
'''

APART = r'''
import numpy as np, linfuse
x, g, u, d = np.ones((4, 8), np.float32), np.ones((8, 8), np.float32), np.ones((8, 8), np.float32), np.ones((8, 8), np.float32)
try:
    linfuse.gated_mlp(x, g, u, d)
    raise SystemExit("accepted gate and up apart")
except ValueError as e:
    assert len(str(e)) < 300 and "[Wg; Wu]" in str(e), e
try:
    linfuse.gated_mlp(x.astype(np.float64), np.ones((16, 8), np.float32), d)
except linfuse.Error as e:
    assert "cast it" in str(e), e
'''

REPLACED = r'''
import torch, linfuse.torch as lt
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(16, 32, bias=False), nn.Linear(16, 32, bias=False)
        self.down_proj, self.act_fn = nn.Linear(32, 16, bias=False), nn.SiLU()
    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
torch.manual_seed(0)
m, x = M(), torch.randn(4, 16)
lt.apply(m)
with torch.no_grad():
    m.down_proj.forward = lambda t: torch.zeros(t.shape[0], 16)
    y = m(x)
assert torch.count_nonzero(y) == 0, "the replaced forward was ignored"
'''
