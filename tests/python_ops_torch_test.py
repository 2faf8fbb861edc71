"""The ops through torch tensors (run by tests/python_test.py, whose helpers and counts it shares):
linear and every MLP variant in f32, bf16 and f16 against float64 through strided views; gated_mlp
reusing what it made of the same weight objects and seeing writes, new memory and new objects;
GatedMlp's one-crossing direct call giving the general path's bits; weights torch moves or
re-lays out caught; and what a new user's attack found in the ops (copies of a GatedMlp refused, a
misaligned array, relu of NaN, array-API arrays, empty outputs, the clamped exp)."""
import copy
import gc
import pickle
import sys
import threading
import warnings

from python_test import MLP_TOL, TOL, act_ref, check, err, mlp_ref, no_growth, raises


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


def test_torch_misuse(torch):
    """What a new user's attack found in the ops (each was a crash, a silent wrong answer or a spurious
    error); linfuse.torch's module and apply are tests/python_torch_test.py's."""
    import numpy as np
    import linfuse
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
