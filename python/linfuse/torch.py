"""linfuse inside PyTorch models: custom ops that torch.compile keeps and CUDA graphs capture, a
module that owns a gated MLP's weights, and one call that puts it in place of a transformers
model's MLPs (docs/python.md).

Ops (torch >= 2.4: torch.library.custom_op, each with a fake implementation, so
torch.compile(fullgraph=True) traces through them with no graph break; older torch: plain
functions that run eagerly, inside a record_function of the same name):
  linfuse::gated_mlp(x, gate_up, down, act, variant, gate_up_q, gate_up_scale, down_q, down_scale)
  linfuse::gated_gemm(x, gate_up, act)
  linfuse::linear(x, weight, bias, act)
Outputs and workspaces are allocated by torch inside each op, on torch's current stream. They
are for inference: calling backward through one raises saying so.

GatedMLP is a plain nn.Module over [Wg; Wu] and W_down whose state_dict keys are the MLP's it
stands for (gate_proj.weight, up_proj.weight, down_proj.weight, or w1/w3/w2, or gate_up_proj).
apply(model) puts one in place of every gated MLP it recognises (down(act(gate(x)) * up(x)),
act silu, gelu_tanh or gelu_erf), each checked once against the module it replaces; unapply(model)
puts the originals back."""
import collections
import typing
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from . import Error, _lib, lib
from . import ops as _ops

HAS_CUSTOM_OP = hasattr(torch, "library") and hasattr(torch.library, "custom_op") and \
    hasattr(torch.library, "register_fake")  # torch >= 2.4
Tensor = torch.Tensor
OptTensor = typing.Optional[torch.Tensor]


def _no_backward(name):
    def backward(ctx, *grads):
        raise RuntimeError("linfuse::%s has no backward: linfuse's ops are for inference (run the model under "
                           "torch.no_grad() or torch.inference_mode(); linfuse.torch.unapply(model) before training)"
                           % name)

    def setup_context(ctx, inputs, output):
        pass

    return backward, setup_context


def _gated_mlp_impl(x, gate_up, down, act, variant, gate_up_q, gate_up_scale, down_q, down_scale):
    fp8 = None if gate_up_q is None else (gate_up_q, gate_up_scale, down_q, down_scale)
    return _ops.gated_mlp(x, gate_up, down, act=act, variant=variant, fp8_weights=fp8)


if HAS_CUSTOM_OP:
    @torch.library.custom_op("linfuse::gated_mlp", mutates_args=())
    def gated_mlp(x: Tensor, gate_up: Tensor, down: Tensor, act: str = "silu", variant: str = "gated",
                  gate_up_q: OptTensor = None, gate_up_scale: OptTensor = None, down_q: OptTensor = None,
                  down_scale: OptTensor = None) -> Tensor:
        return _gated_mlp_impl(x, gate_up, down, act, variant, gate_up_q, gate_up_scale, down_q, down_scale)

    @gated_mlp.register_fake
    def _(x, gate_up, down, act="silu", variant="gated", gate_up_q=None, gate_up_scale=None, down_q=None,
          down_scale=None):
        torch._check(gate_up.dim() == 2 and down.dim() == 2, lambda: "linfuse::gated_mlp: weights must be 2-D")
        torch._check(x.shape[-1] == gate_up.shape[1], lambda: "linfuse::gated_mlp: x's last dim is not gate_up's")
        return x.new_empty(tuple(x.shape[:-1]) + (down.shape[0],))

    @torch.library.custom_op("linfuse::gated_gemm", mutates_args=())
    def gated_gemm(x: Tensor, gate_up: Tensor, act: str = "silu") -> Tensor:
        return _ops.gated_gemm(x, gate_up, act=act)

    @gated_gemm.register_fake
    def _(x, gate_up, act="silu"):
        torch._check(x.shape[-1] == gate_up.shape[1], lambda: "linfuse::gated_gemm: x's last dim is not gate_up's")
        return x.new_empty(tuple(x.shape[:-1]) + (gate_up.shape[0] // 2,))

    @torch.library.custom_op("linfuse::linear", mutates_args=())
    def linear(x: Tensor, weight: Tensor, bias: OptTensor = None, act: str = "none") -> Tensor:
        return _ops.linear(x, weight, bias, act=act)

    @linear.register_fake
    def _(x, weight, bias=None, act="none"):
        torch._check(x.shape[-1] == weight.shape[1], lambda: "linfuse::linear: x's last dim is not weight's")
        return x.new_empty(tuple(x.shape[:-1]) + (weight.shape[0],))

    for _op, _name in ((gated_mlp, "gated_mlp"), (gated_gemm, "gated_gemm"), (linear, "linear")):
        _bw, _setup = _no_backward(_name)
        _op.register_autograd(_bw, setup_context=_setup)

    def _call_gated_mlp(*args):
        return torch.ops.linfuse.gated_mlp(*args)
else:  # older torch: plain functions, traced as record_function spans of the ops' names
    from torch.autograd.profiler import record_function as _record

    class _Inference(torch.autograd.Function):
        """Where an input requires grad: the op's result joins the graph, and backward says why it cannot."""

        @staticmethod
        def forward(ctx, name, impl, *args):
            ctx.name = name
            return impl(*args)

        @staticmethod
        def backward(ctx, *grads):
            _no_backward(ctx.name)[0](ctx, *grads)

    def _run(name, impl, *args):
        with _record("linfuse::" + name):
            if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
                return _Inference.apply(name, impl, *args)
            return impl(*args)

    def gated_mlp(x, gate_up, down, act="silu", variant="gated", gate_up_q=None, gate_up_scale=None, down_q=None,
                  down_scale=None):
        return _run("gated_mlp", _gated_mlp_impl, x, gate_up, down, act, variant, gate_up_q, gate_up_scale, down_q,
                    down_scale)

    def gated_gemm(x, gate_up, act="silu"):
        return _run("gated_gemm", lambda *a: _ops.gated_gemm(*a), x, gate_up, act)

    def linear(x, weight, bias=None, act="none"):
        return _run("linear", lambda *a: _ops.linear(*a), x, weight, bias, act)

    _call_gated_mlp = gated_mlp


# --- the module ---

ACTS = ("silu", "gelu_tanh", "gelu_erf")  # the gated activations, as linfuse names them
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_FP8 = ("gate_up_q", "gate_up_scale", "down_q", "down_scale")
_LAYOUTS = (("gate_proj", "up_proj", "down_proj"),  # transformers' Llama, Mistral, Qwen, Gemma, ...
            ("w1", "w3", "w2"),                     # Meta's reference Llama: w2(silu(w1(x)) * w3(x))
            ("gate_up_proj", "down_proj"))          # Phi-3, GLM: [gate, up] from one Linear


def _reference(act, x):
    return F.silu(x) if act == "silu" else F.gelu(x, approximate="tanh") if act == "gelu_tanh" else F.gelu(x)


def _compiling():
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None) or \
        getattr(getattr(torch, "_dynamo", None), "is_compiling", None)
    return bool(fn and fn())


if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
    def _autocast_dtype(device_type):
        """The dtype autocast runs a Linear in on device_type ("cpu", "cuda"), or None where it is off."""
        return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
else:
    def _autocast_dtype(device_type):
        cpu = device_type == "cpu"
        if not (torch.is_autocast_cpu_enabled() if cpu else torch.is_autocast_enabled()):
            return None
        return torch.get_autocast_cpu_dtype() if cpu else torch.get_autocast_gpu_dtype()


_wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)  # vmap's, grad's


def _unwatched(x, mod):
    """Nothing would see the op if it were skipped: a plain tensor (not torch.fx's Proxy, not a
    subclass), no gradient wanted, no dispatch mode (FakeTensorMode, ...), no profiler, no jit trace."""
    modes = getattr(torch._C, "_len_torch_dispatch_stack", None)
    return type(x) is torch.Tensor and \
        not (torch.is_grad_enabled() and (x.requires_grad or mod.gate_up.requires_grad or mod.down.requires_grad)) \
        and (modes is None or modes() == 0) and not torch._C._autograd._profiler_enabled() and \
        not torch.jit.is_tracing()


def _version(t):
    return None if t.is_inference() else t._version  # an inference tensor keeps no version counter


# Each module's linfuse.GatedMlp, for eager calls that need no custom op: made once over its weights,
# remade when a weight is another tensor or (fp8) was written. Beside the module, not on it:
# copy.deepcopy and pickling never see a C handle.
_PREPARED = weakref.WeakKeyDictionary()


def _save_keys(mod, state, prefix, local_metadata):
    """state_dict: [Wg; Wu] and W_down under the keys of the MLP the module stands for."""
    gu, down = state.pop(prefix + "gate_up"), state.pop(prefix + "down")
    parts = (gu[:mod.hidden], gu[mod.hidden:]) if len(mod.keys) == 3 else (gu,)
    for name, w in zip(mod.keys, parts + (down,)):
        state[prefix + name + ".weight"] = w
    return state


def _load_keys(mod, state, prefix, *args):
    """load_state_dict: the MLP's keys taken into [Wg; Wu] and W_down (the module's own keys, as a
    state_dict of it under no hook has them, load too)."""
    k = [prefix + n + ".weight" for n in mod.keys]
    if all(n in state for n in k[:-1]):
        parts = [state.pop(n) for n in k[:-1]]
        state[prefix + "gate_up"] = parts[0] if len(parts) == 1 else torch.cat(parts)
    if k[-1] in state:
        state[prefix + "down"] = state.pop(k[-1])


def _after_load(mod, incompatible):
    mod.requantize()  # (for fp8 only)


class GatedMLP(nn.Module):
    """down(act(x @ Wg^T) * (x @ Wu^T)) by linfuse, a plain nn.Module: its Parameters gate_up = [Wg; Wu]
    (2H, D) and down (D, H); act "silu", "gelu_tanh" or "gelu_erf"; variant "gated" or "fp8" (FP8
    weights quantized from these, non-persistent buffers). keys name the MLP's projections, whose
    state_dict keys it keeps: gate_proj/up_proj/down_proj, w1/w3/w2 or gate_up_proj/down_proj.
    Eager inference calls a linfuse.GatedMlp made once over the weights; torch.compile, gradients,
    the profiler and dispatch modes get linfuse::gated_mlp; where linfuse cannot compute (autocast
    to another dtype, functorch's transforms, another dtype or device) torch's own ops run."""

    def __init__(self, gate_up, down, act="silu", variant="gated", keys=_LAYOUTS[0]):
        super().__init__()
        if act not in ACTS:
            raise ValueError("linfuse.torch.GatedMLP: act=%r: takes %s" % (act, ", ".join(ACTS)))
        if variant not in ("gated", "fp8"):
            raise ValueError("linfuse.torch.GatedMLP: variant=%r: takes 'gated' or 'fp8'" % (variant,))
        if len(keys) not in (2, 3) or gate_up.dim() != 2 or down.dim() != 2 or gate_up.shape[0] % 2 or \
                tuple(down.shape) != (gate_up.shape[1], gate_up.shape[0] // 2):
            raise ValueError("linfuse.torch.GatedMLP: gate_up %s and down %s: expected (2H, D) and (D, H), keys of 2 "
                             "or 3 names" % (tuple(gate_up.shape), tuple(down.shape)))
        self.act, self.variant, self.keys = act, variant, tuple(keys)
        self.dim, self.hidden = int(gate_up.shape[1]), int(gate_up.shape[0]) // 2
        self.gate_up = gate_up if isinstance(gate_up, nn.Parameter) else nn.Parameter(gate_up, requires_grad=False)
        self.down = down if isinstance(down, nn.Parameter) else nn.Parameter(down, requires_grad=False)
        for n in _FP8:
            self.register_buffer(n, None, persistent=False)
        self._fp8_at = None
        (getattr(self, "register_state_dict_post_hook", None) or self._register_state_dict_hook)(_save_keys)
        if hasattr(self, "register_load_state_dict_pre_hook"):  # torch >= 2.1 (before: the private form)
            self.register_load_state_dict_pre_hook(_load_keys)
        else:
            self._register_load_state_dict_pre_hook(_load_keys, with_module=True)
        self.register_load_state_dict_post_hook(_after_load)
        self.requantize()  # (for fp8 only)

    def extra_repr(self):
        return "dim=%(dim)d hidden=%(hidden)d act=%(act)s variant=%(variant)s keys=" % vars(self) + "/".join(self.keys)

    def requantize(self):
        """The FP8 weights made again from gate_up and down (load_state_dict, a move and an eager call
        after a write do it; by hand, after writing a compiled model's weights in place)."""
        if self.variant != "fp8":
            return
        with torch.no_grad():
            q = _ops.quantize_fp8(self.gate_up.detach(), self.down.detach())
        for n, t in zip(_FP8, q):
            self._buffers[n] = t
        self._fp8_at = (_version(self.gate_up), _version(self.down))

    def _apply(self, fn, *args, **kwargs):  # .to(), .cuda(), .half(): the FP8 weights made again from the new ones
        out = super()._apply(fn, *args, **kwargs)
        if self.variant == "fp8" and self.gate_up.dtype in _DTYPES:
            self.requantize()
        return out

    def _torch_forward(self, x):
        gu = F.linear(x, self.gate_up)
        return F.linear(_reference(self.act, gu[..., :self.hidden]) * gu[..., self.hidden:], self.down)

    def _fp8_args(self):
        return tuple(getattr(self, n) for n in _FP8)

    def _prepared(self):
        gu, d = self.gate_up, self.down
        key = (gu.data_ptr(), d.data_ptr(), gu.dtype, self.gate_up_q is None or self.gate_up_q.data_ptr())
        got = _PREPARED.get(self)
        if got is None or got[0] != key:
            fp8 = None if self.gate_up_q is None else self._fp8_args()
            got = _PREPARED[self] = (key, _ops.GatedMlp(gu.detach(), d.detach(), self.act, fp8,
                                                        name="linfuse.torch.GatedMLP"))
        return got[1]

    def forward(self, x):
        if not _compiling():
            # under autocast torch would run a Linear in the autocast dtype: linfuse only where the
            # weights are in it already (the custom op has no autocast rule)
            cast = _autocast_dtype(x.device.type)
            w = self.gate_up
            if cast is not None and cast != w.dtype:
                return self._torch_forward(x)
            if cast is not None and x.dtype != cast:
                x = x.to(cast)
            if x.dtype != w.dtype or x.device != w.device or w.dtype not in _DTYPES or \
                    w.device.type not in ("cpu", "cuda") or (_wrapped is not None and _wrapped(x)) or \
                    (not HAS_CUSTOM_OP and torch.jit.is_tracing()):
                return self._torch_forward(x)  # torch's own result, or its own error
            if self.variant == "fp8" and self._fp8_at != (_version(w), _version(self.down)):
                self.requantize()  # the weights were written since
            if _unwatched(x, self):
                return self._prepared()(x, self.variant)
        return _call_gated_mlp(x, self.gate_up, self.down, self.act, self.variant, *self._fp8_args())


# --- apply: finding gated MLPs and putting GatedMLPs in their place ---

_ACT_ATTRS = ("act_fn", "activation_fn", "act")
_CONFIG_ACTS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
                "gelu_fast": "gelu_tanh", "gelu": "gelu_erf"}
# The probe at apply: the new module's output against the old one's on 8 random tokens, as a fraction
# of each token's largest |output| (bf16 rounds at 2^-8; fp8 has a few % RMS error; float32 agrees to
# ~1e-6); a multiplier the tolerance would let through shows in the probe's scale check.
PROBE_TOLERANCE = {"gated": 0.03, "gated_f32": 0.01, "fp8": 0.25}
_PROBE_SCALES = (1.0, 1.0, 1.0, 1.0, 16.0, 16.0, 256.0, 256.0)  # large ones: where a clamp parts them
_ORIGINALS = weakref.WeakKeyDictionary()  # each GatedMLP apply made -> the module it replaced


class PatchReport:
    """What apply() did: replaced[(name, class, act, variant, note)], left[(name, class, reason)]."""
    def __init__(self, variant):
        self.variant, self.replaced, self.left, self.already = variant, [], [], 0

    def __str__(self):
        lines = ["linfuse.torch.apply(variant=%r): %d MLP%s replaced, %d left as they were"
                 % (self.variant, len(self.replaced), "" if len(self.replaced) == 1 else "s", len(self.left))]
        lines += ["  replaced %s (%s, %s, %s)%s" % (n, c, a, v, ": " + note if note else "")
                  for n, c, a, v, note in self.replaced]
        lines += ["  left     %s (%s): %s" % r for r in self.left]
        if not self.replaced and not self.left:
            lines.append("  %d MLPs are linfuse.torch.GatedMLPs already (unapply(model) first to patch again)" %
                         self.already if self.already else
                         "  no module has gate_proj, up_proj and down_proj, or gate_up_proj and down_proj (the names "
                         "transformers gives a gated MLP's projections), or w1, w2 and w3 (Meta's); for other names, "
                         "put a linfuse.torch.GatedMLP in the MLP's place yourself")
        return "\n".join(lines)

    __repr__ = __str__


def _layout(mod):
    return next((names for names in _LAYOUTS if all(getattr(mod, p, None) is not None for p in names)), None)


def _points():
    """Where an activation is read: [-6, 6] (gelu's two forms differ by up to 4.7e-4 there) and
    large values both ways (where a clamped activation parts from these)."""
    big = torch.tensor((7, 8, 10, 12, 16, 20, 30, 50, 100, 1000), dtype=torch.float32)
    return torch.cat([torch.linspace(-6, 6, 97), big, -big])


def _name_act(fn, what):
    """([act], where from) for the one of ACTS fn computes to 1e-5 in float32, or why none."""
    x = _points()
    try:
        with torch.no_grad():
            got = fn(x.clone())
    except Exception as e:  # noqa: BLE001 (any failure: not an activation linfuse knows)
        return "%s fails on a float32 probe (%s: %s)" % (what, type(e).__name__, e)
    errs = []
    for act in ACTS:
        ref = _reference(act, x)
        ok = isinstance(got, torch.Tensor) and got.shape == ref.shape
        err = float(((got.float() - ref).abs() / ref.abs().clamp(min=1)).max()) if ok else float("inf")
        if err <= 1e-5:
            return [act], "%s computes %s" % (what, act)
        errs.append("%.2g" % err if err == err else "nan")
    return "%s computes none of %s, the activations linfuse's gated MLP takes (it differs by %s on a float32 " \
        "probe)" % (what, ", ".join(ACTS), ", ".join(errs))


def _acts(mod, model):
    """The activations mod may compute, with where that came from: its act_fn (activation_fn, act),
    read at fixed points, else the config's hidden_activation or hidden_act, else all three, for
    the probe of the whole module to decide. Or why none linfuse takes."""
    attr = next((a for a in _ACT_ATTRS if callable(getattr(mod, a, None))), None)
    if attr is not None:
        fn = getattr(mod, attr)
        if isinstance(fn, nn.Module) and (any(True for _ in fn.parameters()) or any(True for _ in fn.buffers())):
            return "its %s %s holds parameters or buffers: linfuse would compute without them" % (
                attr, type(fn).__name__)
        return _name_act(fn, "its %s %s" % (attr, type(fn).__name__))
    cfg = getattr(mod, "config", None) or getattr(model, "config", None)
    for field in ("hidden_activation", "hidden_act"):  # Gemma's configs carry both: the first is its MLP's
        named = getattr(cfg, field, None)
        if isinstance(named, str) and named in _CONFIG_ACTS:
            return [_CONFIG_ACTS[named]], "config.%s = %r" % (field, named)
    return list(ACTS), "its forward computes {act} (no act_fn: read through it)"


def _storage(t):
    try:  # (meta, a wrapper subclass: nothing to compare)
        return (t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()).data_ptr() or None
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _sharing(model):
    """How often each module is a child and each storage fills a parameter slot: tied weights."""
    mods = list(model.modules())
    return collections.Counter(id(c) for m in mods for c in m._modules.values() if c is not None), \
        collections.Counter(_storage(p) for m in mods for p in m._parameters.values() if p is not None and _storage(p))


def _why_not(mod, layout, shared):
    """Why a module of a known layout is not a gated MLP linfuse takes as it is, or None."""
    if hasattr(mod, "_hf_hook"):
        return "its weights are managed by an accelerate hook (offloading or device map); linfuse needs them in place"
    lins = [getattr(mod, p) for p in layout]
    if any(isinstance(lin, torch.Tensor) for lin in lins):
        return "its %s are tensors, not nn.Linear modules (%s): linfuse patches dense MLPs, not experts held " \
               "stacked" % (", ".join(layout), ", ".join(str(tuple(t.shape)) for t in lins if isinstance(t, Tensor)))
    if any(type(lin) is not nn.Linear for lin in lins):
        return "%s are %s, not plain nn.Linear (quantized or wrapped layers)" % (
            ", ".join(layout), ", ".join(type(lin).__name__ for lin in lins))
    extra = ["%s (%s)" % (n, type(c).__name__) for n, c in mod._modules.items()
             if c is not None and n not in layout and n not in _ACT_ATTRS]
    extra += ["parameter %s" % n for n, t in mod._parameters.items() if t is not None]
    extra += ["buffer %s" % n for n, t in mod._buffers.items() if t is not None]
    if extra:
        return "it holds more than its projections and activation (%s): linfuse would not run them" % ", ".join(extra)
    modules, storages = shared  # gate and up as the two halves of one [Wg; Wu] (as unapply leaves them) are no tie
    pair = len(layout) == 3 and _storage(lins[0].weight) == _storage(lins[1].weight) and \
        lins[0].weight.data_ptr() != lins[1].weight.data_ptr()
    tied = [p for p, lin in zip(layout, lins) if modules[id(lin)] > 1 or
            storages[_storage(lin.weight) or -1] > (2 if pair and lin is not lins[-1] else 1)]
    if modules[id(mod)] > 1 or tied:
        return "%s shared with another module or parameter (tied weights): replacing it would change the other" % (
            "it is" if not tied else "its %s %s" % (" and ".join(tied), "is" if len(tied) == 1 else "are"))
    if any(lin.bias is not None for lin in lins):
        return "its projections have biases (mlp_bias); linfuse's gated MLP has none"
    hooked = [p for p, lin in zip(layout, lins)
              if lin._forward_hooks or lin._forward_pre_hooks or getattr(lin, "parametrizations", None)]
    if hooked or mod._forward_hooks or mod._forward_pre_hooks:
        return "%s forward hooks or parametrizations (weight_norm, a probe): linfuse would not run them" % (
            "its %s have" % ", ".join(hooked) if hooked else "it has")
    ws = [lin.weight for lin in lins]
    if len({(w.dtype, w.device) for w in ws}) != 1:
        return "its weights are of different dtypes or devices"
    w = ws[-1]
    if w.dtype not in _DTYPES or w.device.type not in ("cpu", "cuda"):
        return "%s on %s: linfuse computes in float32, bfloat16, float16 on the CPU and CUDA GPUs" % (w.dtype, w.device)
    gu_rows = ws[0].shape[0] * (2 if len(layout) == 3 else 1)
    if (len(layout) == 3 and ws[0].shape != ws[1].shape) or gu_rows % 2 or w.shape != (ws[0].shape[1], gu_rows // 2):
        return "weights %s: expected gate and up (H, D) (or gate_up (2H, D)) and down (D, H)" % (
            ", ".join(str(tuple(t.shape)) for t in ws))
    if w.device.type == "cuda" and lib.lf_device_require(_lib.DEVICE_CUDA) != _lib.STATUS_OK:
        return "linfuse cannot run on %s: %s" % (w.device, lib.error())
    return None


def _token_error(ref, got):
    """The largest difference of a token's output relative to its own largest |output| (a token whose
    own output is not finite is not compared; NaN in got is infinite)."""
    err = 0.0
    for r, g in zip(ref.float(), got.float()):
        if bool(torch.isfinite(r).all()):
            top = float(r.abs().max())
            e = float((g - r).abs().max()) / top if top else (0.0 if not bool(g.any()) else float("inf"))
            err = max(err, e if e == e else float("inf"))
    return err


def _own(mod, x, training, seed):
    """The module's own output in a training mode (its and its modules' flags set, no train()
    override called), torch's generators seeded and put back after."""
    was = [(m, m.training) for m in mod.modules()]
    for m, _ in was:
        m.training = training
    try:
        with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
            torch.manual_seed(seed)
            return mod(x.clone())
    finally:
        for m, t in was:
            m.training = t


def _probe(mod, new):
    """new against mod on 8 random tokens (four of N(0, 1), four larger), in eval mode; mod's own
    forward in training mode too, twice with two seeds (a dropout there parts them). The error
    where new stands for mod, else why not."""
    w = new.down
    gen = torch.Generator(device=w.device).manual_seed(0)
    scale = torch.tensor(_PROBE_SCALES, device=w.device).unsqueeze(1)
    x = (torch.randn((len(_PROBE_SCALES), new.dim), generator=gen, device=w.device) * scale).to(w.dtype)
    with torch.no_grad(), torch.autocast(device_type=w.device.type, enabled=False):
        try:
            ref = _own(mod, x, False, 0)
            trained = [_own(mod, x, True, s) for s in (0, 1)]
        except Exception as e:  # noqa: BLE001 (a module whose forward fails on x alone is none linfuse stands for)
            return "its own forward fails on x alone (%s: %s)" % (type(e).__name__, e)
        if not isinstance(ref, torch.Tensor) or ref.shape != x.shape:
            return "its own forward returns %s for x of shape %s" % (
                tuple(ref.shape) if isinstance(ref, torch.Tensor) else type(ref).__name__, tuple(x.shape))
        first = ref[:4].float()
        if not bool(torch.isfinite(first).all()) or float(first.abs().max()) == 0:
            return "its own forward gives %s for N(0, 1) tokens (weights not loaded yet? apply after they are)" % (
                "zeros" if bool(torch.isfinite(first).all()) else "non-finite values")
        if any(not torch.equal(t, ref) for t in trained):
            return "its own forward in training mode differs from eval mode's (a dropout?): linfuse computes " \
                   "the eval forward only"
        try:
            got = new(x.clone())
        except Error as e:
            return "linfuse refused it: %s" % e
        # the gated MLP's own output in float32 against the module's, as one scale over all tokens: a
        # multiplier in its forward shows as one (in bf16 it hides inside a token's rounding)
        gu = F.linear(x.float(), new.gate_up.float())
        r32 = F.linear(_reference(new.act, gu[:, :new.hidden]) * gu[:, new.hidden:], new.down.float())
        ok = torch.isfinite(ref).all(1)
        scale = float((ref.float()[ok] * r32[ok]).sum() / (r32[ok] * r32[ok]).sum().clamp(min=1e-30))
    tol = PROBE_TOLERANCE["fp8" if new.variant == "fp8" else "gated_f32" if w.dtype == torch.float32 else "gated"]
    err = _token_error(ref, got)
    hint = "; a gate_up_proj whose halves are [up, gate], not [gate, up], differs so" if len(new.keys) == 2 else ""
    if err > tol:
        return "its own forward and linfuse's (%s) differ on %d random tokens: by %.3g times the largest value of " \
            "a token's own output (tolerance %.3g)%s" % (new.act, len(_PROBE_SCALES), err, tol, hint)
    return err if abs(scale - 1) <= 0.005 else "its forward gives the MLP's output times %.4f (a multiplier?)" % scale


def _gated_mlp_for(mod, layout, acts, variant):
    """A GatedMLP over mod's weights (gate and up stacked into a new tensor, down's Parameter shared),
    for the one of acts whose probe comes closest (gelu's two forms can both pass in 16 bits):
    (module, act), or why none passes."""
    lins = [getattr(mod, p) for p in layout]
    with torch.no_grad():
        gu = lins[0].weight if len(layout) == 2 else \
            nn.Parameter(torch.cat([lins[0].weight, lins[1].weight]), requires_grad=lins[0].weight.requires_grad)
    tried = [(GatedMLP(gu, lins[-1].weight, act, variant, layout).train(mod.training), act) for act in acts]
    got = [(_probe(mod, new), new, act) for new, act in tried]
    passed = [(err, i, new, act) for i, (err, new, act) in enumerate(got) if not isinstance(err, str)]
    if passed:
        return min(passed)[2:]
    return got[0][0] if len(acts) == 1 else "its forward computes none of %s, read through it: %s" % (
        ", ".join(acts), "; ".join(g[0] for g in got))


def _hand_over(mod, new):
    """mod's gate and up weights become views of new's [Wg; Wu] (their old memory goes; the module,
    held elsewhere, still works); down's Parameter is one for both."""
    if len(new.keys) == 3:
        H = new.hidden
        for lin, part in ((getattr(mod, new.keys[0]), new.gate_up[:H]), (getattr(mod, new.keys[1]), new.gate_up[H:])):
            if lin.weight.is_inference() or part.is_inference():
                lin.weight = nn.Parameter(part.detach(), requires_grad=lin.weight.requires_grad)
            else:  # the same Parameter objects, their data replaced: an optimizer keeps them
                lin.weight.data = part.detach()


def apply(model, variant="gated"):
    """A linfuse.torch.GatedMLP in place of every gated MLP inside model: any module made of bias-free
    nn.Linears gate_proj, up_proj, down_proj (or w1, w3, w2; or gate_up_proj, down_proj) and an
    act_fn (activation_fn, act) computing silu, gelu_tanh or gelu_erf (without one: the config's
    hidden_act, or what its forward is found to compute). Each is checked once against the module
    it replaces on 8 random tokens; one linfuse cannot stand for is left, with the reason. The
    replaced module keeps working where it is held. variant "gated" or "fp8" (gated where the
    device has no FP8 GEMM). Returns a PatchReport (print it); unapply(model) undoes it."""
    if variant not in ("gated", "fp8"):
        raise ValueError("linfuse.torch.apply: variant=%r: takes 'gated' or 'fp8'" % (variant,))
    if not isinstance(model, nn.Module):
        raise TypeError("linfuse.torch.apply: model is a %s, not a torch.nn.Module" % type(model).__name__)
    report = PatchReport(variant)
    report.already = sum(isinstance(m, GatedMLP) for m in model.modules())
    if _layout(model) is not None:
        report.left.append(("(the model itself)", type(model).__name__, "apply replaces the MLPs inside a model; "
                            "linfuse.torch.GatedMLP over its weights stands for this one"))
    shared = _sharing(model)
    spots = [(p + "." + c if p else c, parent, c, child) for p, parent in model.named_modules()
             for c, child in parent._modules.items() if child is not None and _layout(child) is not None]
    for name, parent, slot, mod in spots:
        layout, cls = _layout(mod), type(mod).__name__
        why = _why_not(mod, layout, shared)
        got = why or _acts(mod, model)
        if isinstance(got, str):
            report.left.append((name, cls, got))
            continue
        acts, note = got
        dev = getattr(mod, layout[-1]).weight.device
        used = variant
        # fp8: the device first (a newer torch does not give the CPU an FP8 GEMM), then torch
        if variant == "fp8" and lib.lf_fp8_supported(_lib.DEVICE_CUDA if dev.type == "cuda" else _lib.DEVICE_CPU):
            used, note = "gated", note + "; fp8 runs gated on %s: %s" % (dev, lib.error())
        elif variant == "fp8" and getattr(torch, "float8_e4m3fn", None) is None:
            used, note = "gated", note + "; fp8 runs gated: this torch (%s) has no float8_e4m3fn" % torch.__version__
        try:
            made = _gated_mlp_for(mod, layout, acts, used)
        except Error as e:
            made = "linfuse refused it: %s" % e
        if isinstance(made, str):
            report.left.append((name, cls, made))
            continue
        new, act = made
        _hand_over(mod, new)
        parent._modules[slot] = new
        _ORIGINALS[new] = mod
        report.replaced.append((name, cls, act, used, note.replace("{act}", act)))
    return report


def unapply(model):
    """Every MLP apply() replaced in model put back, over the GatedMLP's weights as they are now
    (moved or loaded since, they follow); returns their names. A copy's GatedMLPs stay."""
    names = []
    for p, parent in list(model.named_modules()):
        for slot, child in list(parent._modules.items()):
            old = _ORIGINALS.get(child) if isinstance(child, GatedMLP) else None
            if old is None:
                continue
            if len(child.keys) == 3:
                _hand_over(old, child)
            else:
                getattr(old, child.keys[0]).weight = child.gate_up
            getattr(old, child.keys[-1]).weight = child.down
            parent._modules[slot] = old
            _PREPARED.pop(child, None)
            names.append(p + "." + slot if p else slot)
    return names
