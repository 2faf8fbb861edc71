#!/usr/bin/env python3
"""linfuse.torch on the CPU (Debian's torch 1.13 here; any torch that is there): GatedMLP as a plain
nn.Module, and apply() putting one in place of each gated MLP it recognises.

  apply       Llama- and Gemma-shaped models (silu from act_fn; gelu_tanh from config): every MLP
              replaced by a GatedMLP, the report's lines, output within f32's 1e-5 and bf16's
              rounding of the unpatched model's, state_dict keys and values the unpatched model's,
              memory not grown, the replaced module still working where it is held, unapply;
  as a module copy.deepcopy, pickle, torch.save/load, load_state_dict of the unpatched model's
              dict, .to(bfloat16) and .double() after apply (torch's own ops where linfuse
              computes no float64), hooks on it, train/eval;
  layouts     Meta's w1/w3/w2 with the activation in the forward (silu, exact and tanh gelu told
              apart in f32), Phi-3's gate_up_proj; a gate_up_proj whose halves are [up, gate], a
              forward that scales its output, a dropout in training mode: left, saying why;
  left        biases, other parts, tied weights, a module in two places, an activation linfuse
              has none of, wrapped Linears, experts held as tensors, weights not loaded (zeros),
              the model itself: each left with its reason;
  fp8         on the CPU: gated, the report says why;
  gradients   a backward through a GatedMLP refused, saying why; autocast to another dtype runs
              torch's own ops;
  compile     on torch >= 2.4: opcheck of the custom ops, torch.compile(fullgraph=True) of a
              patched model with no graph break, FakeTensorMode, torch.jit.trace recording the op.
usage: python_torch_test.py   (linfuse importable: PYTHONPATH=python LINFUSE_LIBRARY=..., or installed)"""
import copy
import io
import pickle
import sys
import types
import weakref

try:
    import torch
except ImportError:  # Debian's python3-torch is not installed: nothing to test (scripts/deps.sh test installs it)
    print("python_torch_test: torch is not installed: skipped")
    sys.exit(0)
from torch import nn
import torch.nn.functional as F

import linfuse
import linfuse.torch as lt

checks = fails = 0


def check(ok, what):
    global checks, fails
    checks += 1
    if not ok:
        fails += 1
        print("FAIL: " + what)


def rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp(min=1e-12))


def mlp_class(name, D, H, act, layout=("gate_proj", "up_proj", "down_proj"), act_attr="act_fn", bias=False):
    """A gated MLP module class as transformers and Meta write them."""
    def __init__(self, config=None):
        nn.Module.__init__(self)
        self.config = config
        if len(layout) == 3:
            setattr(self, layout[0], nn.Linear(D, H, bias=bias))
            setattr(self, layout[1], nn.Linear(D, H, bias=bias))
        else:
            setattr(self, layout[0], nn.Linear(D, 2 * H, bias=bias))
        setattr(self, layout[-1], nn.Linear(H, D, bias=bias))
        if act_attr:
            setattr(self, act_attr, act)

    def forward(self, x):
        fn = getattr(self, act_attr) if act_attr else act
        if len(layout) == 2:
            g, u = getattr(self, layout[0])(x).chunk(2, dim=-1)
        else:
            g, u = getattr(self, layout[0])(x), getattr(self, layout[1])(x)
        return getattr(self, layout[-1])(fn(g) * u)
    return type(name, (nn.Module,), {"__init__": __init__, "forward": forward})


class Layer(nn.Module):
    def __init__(self, mlp):
        super().__init__()
        self.norm, self.mlp = nn.LayerNorm(mlp.down_proj.out_features if hasattr(mlp, "down_proj") else 64), mlp

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Model(nn.Module):
    def __init__(self, mlps, config=None):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList([Layer(m) for m in mlps])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


LlamaMLP = mlp_class("LlamaMLP", 64, 96, nn.SiLU())
GemmaMLP = mlp_class("GemmaMLP", 64, 96, nn.GELU(approximate="tanh"))


def llama(layers=2, seed=0):
    torch.manual_seed(seed)
    return Model([LlamaMLP() for _ in range(layers)], types.SimpleNamespace(hidden_act="silu")).eval()


def storage_bytes(model):
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            total += s.nbytes() if hasattr(s, "nbytes") else s.size() * t.element_size()
    return total


def test_apply():
    for family, make in (("llama", llama), ("gemma", lambda: Model([GemmaMLP() for _ in range(2)],
                         types.SimpleNamespace(hidden_act="gelu", hidden_activation="gelu_pytorch_tanh")).eval())):
        torch.manual_seed(1)
        model = make()
        x = torch.randn(2, 5, 64)
        with torch.no_grad():
            ref = model(x)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        before = storage_bytes(model)
        old = model.layers[0].mlp
        report = lt.apply(model)
        act = "silu" if family == "llama" else "gelu_tanh"
        check(len(report.replaced) == 2 and not report.left and all(r[2] == act for r in report.replaced) and
              "replaced layers.0.mlp (%sMLP, %s, gated)" % (family.capitalize(), act) in str(report),
              "%s: both MLPs replaced: %s" % (family, report))
        mlp = model.layers[0].mlp
        check(type(mlp) is lt.GatedMLP and mlp.act == act and "keys=gate_proj/up_proj/down_proj" in repr(mlp),
              "%s: a GatedMLP in the MLP's place: %r" % (family, mlp))
        with torch.no_grad():
            got = model(x)
            check(rel(got, ref) <= 1e-5, "%s: output within f32's 1e-5 of the unpatched model: %.3g" % (
                family, rel(got, ref)))
            check(rel(old(x), mlp(x)) <= 1e-5, "%s: the replaced module, held, still works" % family)
        sd = model.state_dict()
        check(list(sd) == list(state) and all(torch.equal(sd[k], state[k]) for k in state),
              "%s: state_dict keys (in order) and values the unpatched model's: %s" % (family, list(sd)[:6]))
        check(storage_bytes(model) <= before, "%s: memory not grown (%d -> %d bytes)" % (
            family, before, storage_bytes(model)))
        names = lt.unapply(model)
        check(names == ["layers.0.mlp", "layers.1.mlp"] and model.layers[0].mlp is old, "%s: unapply: %s" % (
            family, names))
        with torch.no_grad():
            check(rel(model(x), ref) <= 1e-6, "%s: unpatched again, the same output" % family)
    # bf16: within its rounding of the unpatched bf16 model's
    model = llama().to(torch.bfloat16)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        ref = model(x)
        lt.apply(model)
        check(rel(model(x), ref) <= 0.02, "bf16: within its rounding: %.3g" % rel(model(x), ref))


def test_module():
    model = llama()
    x = torch.randn(4, 64)
    with torch.no_grad():
        ref = model(x)
    unpatched_state = copy.deepcopy(model.state_dict())
    lt.apply(model)
    with torch.no_grad():
        for how, other in (("copy.deepcopy", lambda m: copy.deepcopy(m)),
                           ("pickle", lambda m: pickle.loads(pickle.dumps(m))),
                           ("torch.save", lambda m: torch.load(save(m)))):
            c = other(model)
            check(type(c.layers[1].mlp) is lt.GatedMLP and rel(c(x), ref) <= 1e-5 and
                  c.layers[0].mlp.gate_up.data_ptr() != model.layers[0].mlp.gate_up.data_ptr(),
                  "%s of a patched model: patched, its own weights, the same output" % how)
        scaled = {k: v * 2 if k.endswith("down_proj.weight") else v for k, v in unpatched_state.items()}
        result = model.load_state_dict(scaled)
        check(not result.missing_keys and not result.unexpected_keys and
              torch.equal(model.layers[0].mlp.down, scaled["layers.0.mlp.down_proj.weight"]),
              "load_state_dict of the unpatched model's keys: %s" % (result,))
        model.load_state_dict(unpatched_state)
        strict = nn.Module.load_state_dict
        bad = dict(unpatched_state)
        bad.pop("layers.1.mlp.up_proj.weight")
        try:
            strict(model, bad)
            check(False, "a state_dict without up_proj.weight is refused by strict loading")
        except RuntimeError as e:
            check("layers.1.mlp" in str(e), "a state_dict missing a key: strict loading refuses it: %s" % str(e)[:120])
        model.load_state_dict(unpatched_state)
        bf = copy.deepcopy(model).to(torch.bfloat16)
        check(bf.layers[0].mlp.gate_up.dtype == torch.bfloat16 and rel(bf(x.bfloat16()), ref) <= 0.03,
              ".to(bfloat16) after apply: moved as any module, linfuse's bf16 result")
        dbl = copy.deepcopy(model).double()
        check(rel(dbl(x.double()), ref) <= 1e-5, ".double(): torch's own ops (linfuse computes no float64)")
        # what a user changes on a patched model takes effect or raises, never ignored (issue 52):
        # a forward replaced on the GatedMLP (as accelerate attaches hooks) runs; its projections
        # are not there to replace
        mlp0 = model.layers[0].mlp
        mlp0.forward = lambda t: torch.zeros_like(t)
        check(torch.equal(mlp0(x), torch.zeros_like(x)), "a forward set on a GatedMLP runs")
        del mlp0.forward
        try:
            mlp0.down_proj.forward = lambda t: t
            check(False, "a GatedMLP's down_proj is not there to patch: it raises")
        except AttributeError:
            check(True, "")
        seen = []
        h = model.layers[0].mlp.register_forward_hook(lambda m, i, o: seen.append(o.shape))
        model(x)
        h.remove()
        check(seen == [x.shape], "a forward hook on a GatedMLP runs")
        model.train()
        check(rel(model(x), ref) <= 1e-5 and model.layers[0].mlp.training, "train(): the same forward")
        model.eval()
    standalone = lt.GatedMLP(torch.randn(192, 64), torch.randn(64, 96), act="gelu_erf", keys=("w1", "w3", "w2"))
    check(sorted(standalone.state_dict()) == ["w1.weight", "w2.weight", "w3.weight"],
          "a GatedMLP of Meta's keys: %s" % sorted(standalone.state_dict()))
    for bad, needle in ((lambda: lt.GatedMLP(torch.randn(192, 64), torch.randn(64, 96), act="relu"), "act='relu'"),
                        (lambda: lt.GatedMLP(torch.randn(191, 64), torch.randn(64, 96)), "expected (2H, D)"),
                        (lambda: lt.GatedMLP(torch.randn(192, 64), torch.randn(64, 96), variant="fp16"), "variant")):
        try:
            bad()
            check(False, "a GatedMLP of wrong arguments refused: %s" % needle)
        except ValueError as e:
            check(needle in str(e), "refused saying %r: %s" % (needle, e))


def test_kept_objects():
    """An optimizer made before apply still trains after unapply (gate's Parameter is the same object);
    a model made under inference_mode is patched and runs; threads calling a GatedMLP first at once."""
    model = llama(layers=1)
    g0 = model.layers[0].mlp.gate_proj.weight
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lt.apply(model)
    lt.unapply(model)
    check(model.layers[0].mlp.gate_proj.weight is g0, "apply/unapply keep gate's Parameter object")
    again = lt.apply(model)  # gate and up now halves of one [Wg; Wu]: no tie
    check(len(again.replaced) == 1, "apply again after unapply: %s" % again)
    twice = lt.apply(model)
    check(not twice.replaced and "GatedMLPs already" in str(twice), "apply on a patched model says so: %s" % twice)
    lt.unapply(model)
    before = g0.detach().clone()
    model(torch.randn(8, 64)).square().sum().backward()
    opt.step()
    check(not torch.equal(before, g0), "an optimizer made before apply still trains gate_proj after unapply")
    with torch.inference_mode():
        inf = llama(layers=1)
        x = torch.randn(3, 64)
        ref = inf(x)
    report = lt.apply(inf)
    with torch.inference_mode():
        check(len(report.replaced) == 1 and rel(inf(x), ref) <= 1e-5, "a model made under inference_mode: %s" % report)
    import threading
    model = llama(layers=1)
    lt.apply(model)
    mlp, out, bar = model.layers[0].mlp, [], threading.Barrier(4)

    def first_call():
        bar.wait()
        with torch.no_grad():
            out.append(mlp(torch.ones(2, 64)))
    ts = [threading.Thread(target=first_call) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(len(out) == 4 and all(torch.equal(o, out[0]) for o in out), "four threads' first calls: the same answer")


def save(m):
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    return buf


class MetaFF(nn.Module):
    """Meta's reference FeedForward: the activation in the forward itself."""

    def __init__(self, act):
        super().__init__()
        self.w1, self.w3, self.w2 = nn.Linear(64, 96, bias=False), nn.Linear(64, 96, bias=False), \
            nn.Linear(96, 64, bias=False)
        self.fn = act  # no act_fn: the activation is the forward's own

    def forward(self, x):
        return self.w2(self.fn(self.w1(x)) * self.w3(x))


def test_layouts():
    for fn, want in ((F.silu, "silu"), (F.gelu, "gelu_erf"), (lambda t: F.gelu(t, approximate="tanh"), "gelu_tanh")):
        model = Model([MetaFF(fn)])
        x = torch.randn(3, 64)
        with torch.no_grad():
            ref = model(x)
            report = lt.apply(model)
            check(len(report.replaced) == 1 and report.replaced[0][2] == want and rel(model(x), ref) <= 1e-5 and
                  "read through it" in report.replaced[0][4],
                  "Meta's w1/w3/w2, %s in the forward: read through it: %s" % (want, report))
            check({"layers.0.mlp.w1.weight", "layers.0.mlp.w2.weight", "layers.0.mlp.w3.weight"} <=
                  set(model.state_dict()), "Meta's keys kept: %s" % sorted(model.state_dict()))
    Phi3 = mlp_class("Phi3MLP", 64, 96, nn.SiLU(), layout=("gate_up_proj", "down_proj"), act_attr="activation_fn")
    model = Model([Phi3()])
    x = torch.randn(3, 64)
    with torch.no_grad():
        ref = model(x)
        w = model.layers[0].mlp.gate_up_proj.weight
        report = lt.apply(model)
        check(len(report.replaced) == 1 and rel(model(x), ref) <= 1e-5 and model.layers[0].mlp.gate_up is w,
              "Phi-3's gate_up_proj: used as it is: %s" % report)
    swapped = Phi3()

    def up_gate(self, x):
        u, g = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(self.activation_fn(g) * u)
    swapped.forward = types.MethodType(up_gate, swapped)
    Swapped = type("SwappedMLP", (type(swapped),), {"forward": up_gate})
    model = Model([Swapped()])
    report = lt.apply(model)
    check(not report.replaced and "[up, gate]" in report.left[0][2], "halves [up, gate]: left: %s" % report)


def left_reason(model, needle, what):
    report = lt.apply(model)
    check(not report.replaced and report.left and needle in report.left[0][2], "%s: left, saying %r: %s" % (
        what, needle, report))


def test_left():
    left_reason(Model([mlp_class("BiasMLP", 64, 96, nn.SiLU(), bias=True)()]), "biases", "biases")
    m = LlamaMLP()
    m.norm = nn.LayerNorm(96)
    left_reason(Model([m]), "more than its projections", "another part")
    m = LlamaMLP()
    m.up_proj.weight = m.gate_proj.weight
    left_reason(Model([m]), "tied weights", "gate and up tied")
    shared = LlamaMLP()
    left_reason(Model([shared, shared]), "shared", "a module in two places")
    left_reason(Model([mlp_class("ReluMLP", 64, 96, nn.ReLU())()]), "computes none of", "relu")

    class Wrapped(nn.Linear):
        pass
    m = LlamaMLP()
    m.up_proj = Wrapped(64, 96, bias=False)
    left_reason(Model([m]), "not plain nn.Linear", "a wrapped Linear")
    m = LlamaMLP()
    m.gate_proj, m.up_proj = nn.Parameter(torch.randn(4, 96, 64)), nn.Parameter(torch.randn(4, 96, 64))
    left_reason(Model([m]), "not experts held stacked", "experts held as tensors")
    m = LlamaMLP()
    with torch.no_grad():
        m.down_proj.weight.zero_()
    left_reason(Model([m]), "zeros", "weights not loaded")

    class Drop(LlamaMLP):
        def forward(self, x):
            return F.dropout(super().forward(x), 0.1, self.training)
    left_reason(Model([Drop()]), "training mode", "a dropout in training mode")

    class Scaled(LlamaMLP):
        def forward(self, x):
            return super().forward(x) * 1.02
    left_reason(Model([Scaled()]), "differ", "an output scaled by 1.02")
    # in bf16 too, where a token's rounding hides a 2% scale (the probe's tolerance there is 3%)
    left_reason(Model([Scaled()]).to(torch.bfloat16), "times 1.02", "a bf16 output scaled by 1.02")

    class Scaled1005(LlamaMLP):
        def forward(self, x):
            return super().forward(x) * 1.025
    left_reason(Model([Scaled1005()]).to(torch.bfloat16), "", "a bf16 output scaled by 1.025")
    m = LlamaMLP()
    m.down_proj.register_forward_hook(lambda mod, i, o: None)
    left_reason(Model([m]), "forward hooks", "a hooked projection")
    report = lt.apply(LlamaMLP())
    check(not report.replaced and "the model itself" in str(report), "the model itself: left: %s" % report)
    report = lt.apply(nn.Sequential(nn.Linear(4, 4)))
    check(not report.replaced and not report.left and "no module has gate_proj" in str(report),
          "nothing found: the report says what is looked for")


def test_fp8_grad_autocast():
    model = llama()
    report = lt.apply(model, variant="fp8")
    check(all(r[3] == "gated" for r in report.replaced) and "fp8 runs gated on cpu" in str(report),
          "fp8 on the CPU: gated, saying why: %s" % report)
    mlp = model.layers[0].mlp
    x = torch.randn(3, 64, requires_grad=True)
    y = mlp(x)
    try:
        y.sum().backward()
        check(False, "a backward through a GatedMLP is refused")
    except RuntimeError as e:
        check("has no backward" in str(e), "a backward refused, saying why: %s" % e)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got = mlp(x.detach())
    want = F.linear(F.silu(F.linear(x.detach().bfloat16(), mlp.gate_up[:96].bfloat16())) *
                    F.linear(x.detach().bfloat16(), mlp.gate_up[96:].bfloat16()), mlp.down.bfloat16())
    check(got.dtype == torch.bfloat16 and rel(got, want) <= 0.02, "f32 weights under bf16 autocast: torch's own "
          "ops, autocast's result (%s, %.3g)" % (got.dtype, rel(got, want)))
    with torch.no_grad():
        old = weakref.ref(lt._PREPARED.get(mlp, (None, None))[1] or mlp)
        mlp(x.detach())
        first = lt._PREPARED.get(mlp)
        mlp(x.detach())
        check(first is not None and lt._PREPARED.get(mlp) is first and old() is not None,
              "eager calls reuse the module's linfuse.GatedMlp")


def test_compile():
    if not lt.HAS_CUSTOM_OP:
        print("python_torch_test: torch %s has no torch.library.custom_op (2.4+): the custom-op and torch.compile "
              "checks are skipped" % torch.__version__)
        return
    x, gu, dn = torch.randn(5, 32), torch.randn(96, 32) * 0.2, torch.randn(32, 48) * 0.2
    w, b = torch.randn(24, 32), torch.randn(24)
    for op, args in ((torch.ops.linfuse.gated_mlp.default, (x, gu, dn, "silu", "gated")),
                     (torch.ops.linfuse.gated_gemm.default, (x, gu, "gelu_tanh")),
                     (torch.ops.linfuse.linear.default, (x, w, b, "relu"))):
        try:
            torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor"))
        except Exception as e:  # noqa: BLE001
            check(False, "opcheck %s: %s" % (op, e))
    model = llama()
    lt.apply(model)
    xm = torch.randn(3, 64)
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(xm)
        check(explained.graph_break_count == 0, "torch.compile of a patched model: %d graph breaks" %
              explained.graph_break_count)
        got = torch.compile(model, fullgraph=True, backend="aot_eager")(xm)
        check(rel(got, model(xm)) <= 1e-5, "the compiled model computes the eager one's values")
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            out = model.layers[0].mlp(mode.from_tensor(xm))
        check(tuple(out.shape) == (3, 64), "a GatedMLP under FakeTensorMode gives the fake op's shape")
        traced = torch.jit.trace(model.layers[0].mlp, xm)
        check("linfuse::gated_mlp" in str(traced.graph), "torch.jit.trace records linfuse::gated_mlp")
    torch._dynamo.reset()


def main():
    print("python_torch_test: linfuse %s from %s, torch %s" % (linfuse.library_version(), linfuse.library_path,
                                                              torch.__version__))
    test_apply()
    test_module()
    test_kept_objects()
    test_layouts()
    test_left()
    test_fp8_grad_autocast()
    test_compile()
    print("python_torch_test: %d checks, %d failed" % (checks, fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
