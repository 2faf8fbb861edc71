"""linfuse inside PyTorch models: custom ops that torch.compile keeps and CUDA graphs capture, and
one call that patches a transformers model's MLPs (docs/python.md).

Ops (torch >= 2.4: torch.library.custom_op, each with a fake implementation, so
torch.compile(fullgraph=True) traces through them with no graph break; older torch: plain
functions that run eagerly, inside a record_function of the same name):
  linfuse::gated_mlp(x, gate_up, down, act, variant, gate_up_q, gate_up_scale, down_q, down_scale)
  linfuse::gated_gemm(x, gate_up, act)
  linfuse::linear(x, weight, bias, act)
Outputs and workspaces are allocated by torch inside each op, on torch's current stream. They
are for inference: calling backward through one raises saying so.

apply(model, variant) replaces the forward of every gated MLP in a model (down(act(gate(x)) *
up(x)), act silu, gelu_tanh or gelu_erf) with linfuse::gated_mlp, whatever its class: transformers' Llama,
Mistral, Qwen, Gemma and the many alike (gate_proj, up_proj, down_proj, act_fn), Phi-3 and GLM
(gate_up_proj, down_proj, activation_fn), Meta's reference naming (w1, w2, w3, the activation in
the forward itself), a model's own. Each is checked against its own forward, in eval and in
training mode, before it is kept; unapply(model) puts them back."""
import contextlib
import copy
import inspect
import threading
import typing
import warnings
import weakref

import torch
from torch import nn

from . import Error, _lib, lib
from . import _probe
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


def _gated_mlp_shape(x, gate_up, down):
    torch._check(gate_up.dim() == 2 and down.dim() == 2, lambda: "linfuse::gated_mlp: weights must be 2-D")
    torch._check(x.shape[-1] == gate_up.shape[1], lambda: "linfuse::gated_mlp: x's last dim is not gate_up's")
    return tuple(x.shape[:-1]) + (down.shape[0],)


if HAS_CUSTOM_OP:
    @torch.library.custom_op("linfuse::gated_mlp", mutates_args=())
    def gated_mlp(x: Tensor, gate_up: Tensor, down: Tensor, act: str = "silu", variant: str = "gated",
                  gate_up_q: OptTensor = None, gate_up_scale: OptTensor = None, down_q: OptTensor = None,
                  down_scale: OptTensor = None) -> Tensor:
        return _gated_mlp_impl(x, gate_up, down, act, variant, gate_up_q, gate_up_scale, down_q, down_scale)

    @gated_mlp.register_fake
    def _(x, gate_up, down, act="silu", variant="gated", gate_up_q=None, gate_up_scale=None, down_q=None,
          down_scale=None):
        return x.new_empty(_gated_mlp_shape(x, gate_up, down))

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


# --- patching transformers' MLPs ---

_CONFIG_ACTS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu_erf"}
_ACTS = _probe.ACTS
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# The probe forward at apply: linfuse's output against the module's own on 8 random tokens, as a
# fraction of the largest |output| (bf16 rounds at 2^-8; the fp8 variant has a few % RMS error).
# In float32 both agree to ~1e-6 (1e-3 were a GPU GEMM in TF32), so 1%: at 3% a forward that
# scales its output by 1.02 (a FalconH1-style multiplier) was replaced and ran 2% off.
PROBE_TOLERANCE = {"gated": 0.03, "gated_f32": 0.01, "fp8": 0.25}


class PatchReport:
    """What apply() did: replaced[(name, class, act, variant, note)], left[(name, class, reason)]."""

    def __init__(self, variant):
        self.variant, self.replaced, self.left = variant, [], []

    def __str__(self):
        lines = ["linfuse.torch.apply(variant=%r): %d MLP%s replaced, %d left as they were"
                 % (self.variant, len(self.replaced), "" if len(self.replaced) == 1 else "s", len(self.left))]
        for name, cls, act, variant, note in self.replaced:
            lines.append("  replaced %s (%s, %s, %s)%s" % (name or "(%s)" % _ITSELF, cls, act, variant,
                                                           ": " + note if note else ""))
        for name, cls, reason in self.left:
            lines.append("  left     %s (%s): %s" % (name or "(%s)" % _ITSELF, cls, reason))
        if not self.replaced and not self.left:
            lines.append("  no module has gate_proj, up_proj and down_proj, or gate_up_proj and down_proj (the names "
                         "transformers gives a gated MLP's projections), or w1, w2 and w3 (Meta's). A gated MLP "
                         "of other names: name its Linears so (aliases are parts apply would not run), or call a "
                         "linfuse.GatedMlp over [Wg; Wu] and down's weight in its forward")
        return "\n".join(lines)

    __repr__ = __str__


def _compiling():
    c = getattr(torch, "compiler", None)
    if c is not None and hasattr(c, "is_compiling"):
        return c.is_compiling()
    d = getattr(torch, "_dynamo", None)
    return bool(d is not None and hasattr(d, "is_compiling") and d.is_compiling())


def _version_of(t):
    try:
        return t._version
    except RuntimeError:  # an inference tensor keeps no version counter
        return None


def _fp8_versions(mod):
    """The versions the FP8 weights were made at: the stacked weight's, down's, and gate's and up's
    own (a Parameter whose .data was set to a view of the stacked weight counts its writes apart)."""
    return (_version_of(mod.linfuse_gate_up), _version_of(_down_weight(mod))) + \
        tuple(_version_of(w) for w in _gate_up_weights(mod))


# The layouts of a gated MLP linfuse takes, by its projections' names: gate and up as two Linears
# (stacked once by apply), named as transformers names them (Llama, Mistral, Qwen, Gemma and most
# others) or as Meta's reference Llama does (gpt-fast, torchtitan and older Mixtral experts too:
# `w2(silu(w1(x)) * w3(x))`); or one Linear whose weight is [Wg; Wu] already (Phi-3, GLM:
# `gate, up = gate_up_proj(x).chunk(2, -1)`, used as it is). Each is (gate, up, down) or
# (gate_up, down).
_SPLIT = ("gate_proj", "up_proj", "down_proj")
_META = ("w1", "w3", "w2")
_FUSED = ("gate_up_proj", "down_proj")
_LAYOUTS = (_SPLIT, _META, _FUSED)
_ACT_ATTRS = ("act_fn", "activation_fn", "act")


def _layout(mod):
    """The projection names mod has (one of _LAYOUTS), or None where it is no gated MLP."""
    for names in _LAYOUTS:
        if all(getattr(mod, p, None) is not None for p in names):
            return names
    return None


def _weights(mod):
    """The Parameters of a patched module's projections, in its layout's order: (gate, up, down)
    or (gate_up, down). Read from the module's own dicts where they are there (nn.Module's
    __getattr__ is slow)."""
    names, mods = mod.linfuse_layout, mod._modules
    try:
        return tuple(mods[p]._parameters["weight"] for p in names)
    except (KeyError, AttributeError):  # a projection replaced by something else since apply
        _check_parts(mod)  # raises, naming it, where it is no longer a plain Linear
        return tuple(getattr(mod, p).weight for p in names)


def _gate_up_weights(mod):
    """The Parameters that hold gate and up: (gate's, up's) or (gate_up's,)."""
    return _weights(mod)[:-1]


def _down_weight(mod):
    down = getattr(mod, mod.linfuse_layout[-1])
    if type(down) is not nn.Linear:
        _check_parts(mod)  # raises, naming it
    return down.weight


def _act_now(mod, attr):
    """What mod's activation attribute holds now (a submodule, a function set on it, or its class's)."""
    got = mod._modules.get(attr)
    if got is None:
        got = mod.__dict__.get(attr)
    # the class's own function (a method's bound form is made anew at every lookup)
    return got if got is not None else getattr(type(mod), attr, None)


def _views_intact(mod):
    """Whether gate's and up's Parameters still view the stacked weight apply registered."""
    gu, ws = mod.linfuse_gate_up, _gate_up_weights(mod)
    if any(w.dtype != gu.dtype or w.device != gu.device for w in ws):
        return False
    if len(ws) == 1:
        return ws[0].data_ptr() == gu.data_ptr() and ws[0].shape == gu.shape and ws[0].stride() == gu.stride()
    H = gu.shape[0] // 2
    return ws[0].data_ptr() == gu.data_ptr() and ws[1].data_ptr() == gu.data_ptr() + H * gu.shape[1] * gu.element_size()


def _who(mod):
    """A patched module as its errors name it: its path in the model apply was given, and its class."""
    return "%s (%s)" % (getattr(mod, "linfuse_name", "?"), mod.linfuse_base_class.__name__)


_ITSELF = "the model itself"


def _plain(lin):
    """A bias-free nn.Linear (a parametrization would have changed its class): what apply takes and
    linfuse computes in a projection's place."""
    return type(lin) is nn.Linear and lin._parameters.get("bias") is None


def _settings(mod):
    """What a forward may read from its module besides its parts: the module's own attributes
    that are functions, flags, floats or strings (an activation held as a function, a switch, a
    scale). Not ints: sizes do not change, and a counter a forward keeps would (while the
    module's own forward runs, in training mode or under a hook) and be refused for it."""
    return tuple((k, v) for k, v in mod.__dict__.items()
                 if not k.startswith(("_", "linfuse_")) and k != "training" and
                 (isinstance(v, (bool, float, str)) or (callable(v) and not isinstance(v, (nn.Module, type)))))


_MISSING = object()


def _check_parts(mod, traced=False):
    """The module is made of what apply found: its activation the same object, its projections
    plain Linears, no submodule added or removed. Read by torch.compile's trace (traced) as well as
    by eager calls: the objects it compares are then what the compiled code's guards watch, and a
    change traces it again, through this check. (Traced, an activation held as a function rather
    than a module is not compared: it is not among the module's children, where the trace looks.)"""
    # Traced, a builtin error: dynamo cannot trace Error's constructor (its super().__init__).
    error = RuntimeError if traced else Error
    attr, fn = mod.linfuse_act_ref
    if traced:
        replaced = isinstance(fn, nn.Module) and mod._modules.get(attr) is not fn
    else:
        now = None if attr is None else _act_now(mod, attr)
        replaced = attr is not None and now is not fn and now != fn
    if replaced:
        raise error("linfuse: %s's %s was replaced after linfuse.torch.apply read its activation (%s) from it: "
                    "call linfuse.torch.unapply(model), then apply(model) again" % (_who(mod), attr, mod.linfuse_act))
    if not traced:
        for k, v in mod.linfuse_settings:
            now = mod.__dict__.get(k, _MISSING)
            if now is not v and now != v:
                raise Error("linfuse: %s's %s changed after linfuse.torch.apply compared its forward with "
                            "linfuse's (%r, now %r): call linfuse.torch.unapply(model), then apply(model) again" % (
                                _who(mod), k, v, None if now is _MISSING else now))
    mods = mod._modules
    # (not _plain: this runs traced too, where the plain attribute read is the one dynamo follows)
    changed = [n for n in mod.linfuse_layout if not (type(mods.get(n)) is nn.Linear and mods[n].bias is None)]
    if changed or tuple(mods) != mod.linfuse_children:
        raise error(
            "linfuse: %s's parts changed after linfuse.torch.apply (%s): call linfuse.torch.unapply(model), then "
            "apply(model) again" % (_who(mod), ", ".join(changed) or "a submodule added or removed"))


def _check_intact(mod):
    """Outside torch.compile: the parts as apply found them, the parameters still view the stacked
    weight (a .to() or a cast after apply() makes new ones), and FP8 weights are redone when the
    weights were written since."""
    _check_parts(mod)
    if not _views_intact(mod):
        names = mod.linfuse_layout
        what = "%s weight no longer views" % names[0] if len(names) == 2 else \
            "%s and %s weights no longer view" % names[:2]
        raise Error("linfuse: %s's %s the stacked [Wg; Wu] that "
                    "linfuse.torch.apply made (the model was moved or cast, or a parameter replaced, after apply): "
                    "call linfuse.torch.unapply(model), then apply(model) again, after any move or cast" % (
                        _who(mod), what))
    if mod.linfuse_gate_up_q is not None and None not in mod.linfuse_fp8_versions and \
            _fp8_versions(mod) != mod.linfuse_fp8_versions:
        _quantize(mod)


# Each patched module's weights taken into linfuse once (an ops.GatedMlp), for the eager calls that
# need no custom op, with the weights' addresses (and, for fp8, versions) it was checked at: remade
# after a full check when any of them changes. Kept beside the module, not on it: copy.deepcopy
# and pickling must not copy a C handle.
_PREPARED = weakref.WeakKeyDictionary()
_PREPARING = threading.Lock()


def _key(mod):
    """The addresses and layouts (and for fp8 the versions) a module's GatedMlp was made at. Read
    from the module's own dicts: nn.Module's __getattr__ costs a decode step's call more than the
    rest."""
    mods, bufs = mod._modules, mod._buffers
    ws = _weights(mod)
    g, u, d = (ws[0], ws[0], ws[1]) if len(ws) == 2 else ws  # a fused gate_up's weight stands for both
    gu, q = bufs["linfuse_gate_up"], bufs["linfuse_gate_up_q"]
    attr = mod.__dict__["linfuse_act_ref"][0]
    act = None if attr is None else _act_now(mod, attr)
    # the parts as objects, and whether each projection is still plain (a bias set, a class
    # swapped): a change makes the next call check the module in full (_check_intact)
    key = (g.data_ptr(), u.data_ptr(), gu.data_ptr(), d.data_ptr(), g.stride(), u.stride(), d.stride(), d.shape,
           id(act), tuple(mods.values()), tuple(_plain(mods.get(n)) for n in mod.linfuse_layout),
           tuple(id(mod.__dict__.get(k)) for k, _ in mod.__dict__["linfuse_settings"]))
    return key if q is None else key + _fp8_versions(mod) + (q.data_ptr(),)


def _drop(mod):
    got = _PREPARED.pop(mod, None)
    if got is not None:
        got[1].close()


def _eager_weights(mod):
    """Outside torch.compile, on every call: the module's GatedMlp. Cheap while nothing moved or
    changed (_key: addresses, layouts, the parts as objects); else the full _check_intact, and a
    new GatedMlp.
    (A held GatedMlp keeps its tensors alive: an address seen again is the same memory.)"""
    key = _key(mod)
    got = _PREPARED.get(mod)
    if got is not None and got[0] == key:
        return got[1]
    with _PREPARING:  # threads calling a module first at once: one makes it, the others use it
        got = _PREPARED.get(mod)
        if got is not None and got[0] == key:
            return got[1]
        _drop(mod)  # the old weights go now, whether or not the check below passes
        _check_intact(mod)  # raises, or quantizes again
        gu, d = mod.linfuse_gate_up, _down_weight(mod)
        key, q = _key(mod), mod.linfuse_gate_up_q
        fp8 = None if q is None else (q, mod.linfuse_gate_up_scale, mod.linfuse_down_q, mod.linfuse_down_scale)
        got = _PREPARED[mod] = (key, _ops.GatedMlp(gu, d, mod.linfuse_act, fp8,
                                                   name="linfuse.gated_mlp (%s)" % type(mod).__name__))
    return got[1]


def _find_fx_tracing():
    """torch.fx's "is a symbolic trace running", found once (absent from some builds). Newer torch
    names it apart from torch.export's tracing (is_fx_symbolic_tracing) and logs a warning at the
    older name's first call (torch 2.11, seen from this very check); the warning's own text names
    is_fx_tracing_symbolic_tracing, which torch does not define, so both are asked for."""
    import torch.fx._symbolic_trace as st
    for name in ("is_fx_symbolic_tracing", "is_fx_tracing_symbolic_tracing", "is_fx_tracing"):
        fn = getattr(st, name, None)
        if callable(fn):
            return fn
    return lambda: False


try:
    _fx_tracing = _find_fx_tracing()
except ImportError:
    def _fx_tracing():
        return False


def _unwatched(x, mod):
    """Nothing would see the op if it were skipped: a plain tensor, no gradient wanted, no torch
    dispatch mode (FakeTensorMode, FlopCounterMode, ...), no profiler, no tracer (torch.jit.trace,
    ONNX export, torch.fx)."""
    modes = getattr(torch._C, "_len_torch_dispatch_stack", None)
    return type(x) is torch.Tensor and \
        not (torch.is_grad_enabled() and (x.requires_grad or _down_weight(mod).requires_grad)) and \
        (modes is None or modes() == 0) and not torch._C._autograd._profiler_enabled() and \
        not torch.jit.is_tracing() and not _fx_tracing()


_functorch = getattr(torch._C, "_functorch", None)
_wrapped = getattr(_functorch, "is_functorch_wrapped_tensor", None)  # vmap's and grad's wrappers (torch 2)


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


def _own_forward(self, x):
    """Where linfuse would compute other than the module (see _patched_forward): the module's own."""
    return self.linfuse_base_class.forward(self, x)


_TRACE_WARNED = []


def _patched_forward(self, *args, **kwargs):
    """The patched module's forward: x alone, by position or by the name the module's own forward
    gives it, is linfuse's; any other arguments, the module's own forward (it checked nothing else)."""
    if len(args) == 1 and not kwargs:
        return _forward_x(self, args[0])
    if not args and len(kwargs) == 1 and self.linfuse_input in kwargs:
        return _forward_x(self, kwargs[self.linfuse_input])
    return self.linfuse_base_class.forward(self, *args, **kwargs)


_module_mod = nn.modules.module  # its global hook dicts (register_module_forward_hook and the pre-hook)


def _hooked(mod):
    """Whether a hook was put on one of mod's projections or its activation since apply (those
    there at apply left the module), or its forward replaced (module.forward = ..., as accelerate's
    hooks attach), or a global module hook is registered (it would see each projection's call):
    the module's own forward runs them."""
    if getattr(_module_mod, "_global_forward_hooks", None) or getattr(_module_mod, "_global_forward_pre_hooks", None):
        return True
    for child in mod._modules.values():
        if child is not None and (child._forward_hooks or child._forward_pre_hooks or "forward" in child.__dict__):
            return True
    return False


def _inner_modules(mod):
    """Every module inside mod, not mod itself (which its own dict, copied and pickled, must not hold)."""
    return tuple(m for m in mod.modules() if m is not mod)


def _mode_is_linfuses(mod):
    """Whether mod and everything in it are in a training mode in which its own forward and
    linfuse's agree (apply's probe): any, or the one mode, every flag at it (a dropout inside its
    activation trained alone, as Monte Carlo dropout does, is seen)."""
    modes = mod.linfuse_modes
    if len(modes) == 2:
        return True
    if mod.training != modes[0]:
        return False
    for m in mod.linfuse_mode_mods:
        if m.training != modes[0]:
            return False
    return True


def _forward_x(self, x):
    if _hooked(self) or not _mode_is_linfuses(self):
        return _own_forward(self, x)
    compiling = _compiling()
    # Under autocast torch casts a Linear's operands to the autocast dtype, which is linfuse's only
    # where the weights are in it already; the custom op has no autocast rule, so this holds when
    # torch.compile traces the forward too (dynamo reads the autocast state as a constant).
    cast = _autocast_dtype("cuda" if x.is_cuda else "cpu")
    if cast is not None:
        if self.linfuse_gate_up.dtype != cast:  # torch would cast the weights: linfuse cannot
            return _own_forward(self, x)
        if x.dtype != cast:
            x = x.to(cast)
    if not compiling:
        # What the module would do and linfuse cannot: under functorch's transforms (vmap, grad)
        # x has no memory of its own; torch.jit.trace before torch 2.4 (no custom op) would
        # record none of linfuse's work.
        if _wrapped is not None and _wrapped(x):
            return _own_forward(self, x)
        if not HAS_CUSTOM_OP and torch.jit.is_tracing():
            if not _TRACE_WARNED:
                _TRACE_WARNED.append(True)
                warnings.warn("linfuse.torch: torch.jit.trace before torch 2.4 cannot record linfuse's op; the "
                              "trace records the module's own forward", stacklevel=2)
            return _own_forward(self, x)
        # Gradients: gate's and up's weights live in the stacked buffer the op is given, so where
        # only they want one the op's result would not join the graph: it is joined here, to a
        # node whose backward says why it cannot run (as the op's does).
        if torch.is_grad_enabled() and any(w.requires_grad for w in _gate_up_weights(self)) \
                and not (x.requires_grad or _down_weight(self).requires_grad):
            y = _patched_forward_inner(self, x, False)
            return _RefuseBackward.apply(y, *_gate_up_weights(self))
    return _patched_forward_inner(self, x, compiling)


class _RefuseBackward(torch.autograd.Function):
    """y joined to the graph through gate's and up's weights; its backward raises, as the op's."""

    @staticmethod
    def forward(ctx, y, *weights):
        return y.view_as(y)

    @staticmethod
    def backward(ctx, *grads):
        _no_backward("gated_mlp")[0](ctx, *grads)


@contextlib.contextmanager
def _quiet_tracer():
    """Under torch.jit.trace the weights' sizes the checks compare are traced values, which torch
    warns about turning into Python bools: they are the trace's constants, and the warning is not
    the user's to read."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        yield


def _patched_forward_inner(self, x, compiling):
    if compiling:
        _check_parts(self, traced=True)  # torch.compile's guards then watch these parts
    else:
        # Eager inference calls linfuse directly: the custom op's dispatch (and the weights taken
        # into linfuse again on every call) cost a decode step as much as the MLP's own kernels'
        # launches (bench/torch_op_overhead.py). Anything that may look at the op, or needs its
        # autograd node, takes the op (and the weights are checked, touched by nothing else).
        if _unwatched(x, self):
            return _eager_weights(self)(x, self.linfuse_variant)
        with _quiet_tracer() if torch.jit.is_tracing() else contextlib.nullcontext():
            got = _PREPARED.get(self)
            if got is not None and got[0] != _key(self):
                _drop(self)  # weights that moved are not kept alive for the next direct call
            _check_intact(self)
    return _call_gated_mlp(x, self.linfuse_gate_up, _down_weight(self), self.linfuse_act, self.linfuse_variant,
                           self.linfuse_gate_up_q, self.linfuse_gate_up_scale, self.linfuse_down_q,
                           self.linfuse_down_scale)


_PATCHED_CLASSES = {}
# What apply sets on a module it patches, besides its buffers (_BUFFERS) and its class.
_ATTRS = ("linfuse_act", "linfuse_variant", "linfuse_fp8_versions", "linfuse_act_ref", "linfuse_name",
          "linfuse_children", "linfuse_layout", "linfuse_modes", "linfuse_mode_mods", "linfuse_settings")
_BUFFERS = ("linfuse_gate_up", "linfuse_gate_up_q", "linfuse_gate_up_scale", "linfuse_down_q", "linfuse_down_scale")


def _views_again(mod):
    """gate's and up's weights as views of the module's stacked one (a copy of a module copies
    nn.Parameters by value, which leaves them apart and the module refusing)."""
    mod.__dict__.setdefault("linfuse_modes", (False, True))  # a module pickled before these were kept
    mod.__dict__.setdefault("linfuse_mode_mods", _inner_modules(mod))
    mod.__dict__.setdefault("linfuse_settings", _settings(mod))
    names = mod.__dict__.setdefault("linfuse_layout", _layout(mod))
    if len(names) == 2:
        # the fused weight's own Parameter stays (a copy keeps what it is tied to); the stacked
        # buffer, copied apart from it, views it again
        mod._buffers["linfuse_gate_up"] = mod._modules[names[0]].weight.detach()
        return mod
    gu, H = mod.linfuse_gate_up, mod.linfuse_gate_up.shape[0] // 2
    for lin, part in ((mod._modules[names[0]], gu[:H]), (mod._modules[names[1]], gu[H:])):
        if lin.weight.is_inference() or part.is_inference():  # (see _stack)
            lin.weight = nn.Parameter(part, requires_grad=lin.weight.requires_grad)
        else:  # the copied Parameter objects stay: an optimizer copied with the model holds them
            lin.weight.data = part
    return mod


def _patched_deepcopy(self, memo):
    """copy.deepcopy of a patched module: patched too, over its own stacked weight (refused, as
    the module's own calls are, where its parameters no longer view that weight)."""
    _check_intact(self)
    new = type(self).__new__(type(self))
    memo[id(self)] = new
    for k, v in self.__dict__.items():
        new.__dict__[k] = copy.deepcopy(v, memo)
    return _views_again(new)


def _unpickle_patched(base, state):
    cls = _patched_class(base)
    new = cls.__new__(cls)
    new.__setstate__(state)
    return _views_again(new)


def _patched_reduce(self, protocol):
    """pickle (and torch.save) of a patched module: by its base class, which must be importable (as
    transformers' are), patched again where it is loaded (the patched class is made, not imported).
    Refused, as the module's own calls are, where its parameters no longer view its stacked weight."""
    _check_intact(self)
    return _unpickle_patched, (self.linfuse_base_class, dict(self.__getstate__()))


def _patched_copy(self):
    """copy.copy: the same submodules and tensors, as nn.Module's shallow copy (nothing re-viewed:
    the original shares them)."""
    new = type(self).__new__(type(self))
    new.__dict__.update(self.__dict__)
    return new


def _input_name(cls):
    """The name cls.forward gives its first argument after self (None where it has none: *args)."""
    try:
        params = list(inspect.signature(cls.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    ok = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return params[0].name if params and params[0].kind in ok else None


def _patched_class(cls):
    if cls not in _PATCHED_CLASSES:
        _PATCHED_CLASSES[cls] = type("Linfuse" + cls.__name__, (cls,),
                                     {"forward": _patched_forward, "__deepcopy__": _patched_deepcopy,
                                      "__copy__": _patched_copy, "__reduce_ex__": _patched_reduce,
                                      "linfuse_base_class": cls, "linfuse_input": _input_name(cls),
                                      "__module__": __name__})
    return _PATCHED_CLASSES[cls]


def _storage_ptr(t):
    """Where t's storage is; None where it has none to compare (meta, empty, a wrapper subclass)."""
    try:
        p = t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        return None
    return p or None


def _sharing(model):
    """How many times each submodule is a child, and each parameter storage fills a parameter
    slot, over the model (before apply changes anything): what tied weights look like, whether
    through one Parameter object or two over one storage."""
    modules, storages = {}, {}
    for m in model.modules():
        for child in m._modules.values():
            if child is not None:
                modules[id(child)] = modules.get(id(child), 0) + 1
        for p in m._parameters.values():
            ptr = _storage_ptr(p) if p is not None else None
            if ptr is not None:
                storages[ptr] = storages.get(ptr, 0) + 1
    return {"modules": modules, "storages": storages}


def _act_attr(mod):
    """The name of the attribute mod's activation is read from: the first of _ACT_ATTRS that holds
    something callable (any other child is a part linfuse would not run), or None."""
    return next((a for a in _ACT_ATTRS if callable(getattr(mod, a, None))), None)


def _act_of(mod, model, names):
    """The activation mod computes, read from its act_fn (activation_fn, act) or, where it has no
    such callable, through its forward (_probe.read_inline_act): (act, a note on where it came from,
    the attribute's name or None), or why none linfuse takes. The config's name for it goes in the
    note where the config agrees."""
    attr = _act_attr(mod)
    if attr is None:  # computed in the forward itself: w2(F.silu(w1(x)) * w3(x))
        try:
            got = _probe.read_inline_act(mod, names)
        except Exception as e:  # noqa: BLE001 (a forward that does not run so is not one linfuse can read)
            return "it has no %s, and its forward does not run with two-feature float32 projections standing " \
                   "in for its own, through which linfuse reads the activation it computes (%s: %s)" % (
                       ", ".join(_ACT_ATTRS), type(e).__name__, e)
        act, why = _probe.name_act(got, "its forward")
        if act is not None:
            return act, "its forward computes %s (read through it: no %s)" % (act, ", ".join(_ACT_ATTRS)), None
        x = _probe.act_points()
        flipped = [a for a in _ACTS if _probe.act_distance(got, _probe.act_values(a, torch.ones(())) * x) <= 1e-5]
        return why + ("; it applies the activation to %s (up) rather than %s (gate)" % (names[1], names[0])
                      if flipped and len(names) == 3 else "")
    fn = getattr(mod, attr)
    if isinstance(fn, nn.Module):
        held = [n for n, _ in fn.named_parameters()] + [n for n, _ in fn.named_buffers()]
        if held:
            return "its %s %s holds parameters or buffers (%s): linfuse would compute without them" % (
                attr, type(fn).__name__, ", ".join(held))
    cfg = getattr(mod, "config", None) or getattr(model, "config", None)
    named = None
    for field in ("hidden_activation", "hidden_act"):  # Gemma's configs carry both: the first is its MLP's
        if isinstance(getattr(cfg, field, None), str):
            named = (field, getattr(cfg, field))
            break
    try:
        got = _probe.read_act(fn)
    except Exception as e:  # noqa: BLE001 (any failure means: not an activation linfuse knows)
        return "%s %s fails on a float32 probe (%s: %s)" % (attr, type(fn).__name__, type(e).__name__, e)
    act, why = _probe.name_act(got, "%s %s" % (attr, type(fn).__name__), named)
    if act is None:
        return why
    if named is not None and _CONFIG_ACTS.get(named[1]) == act:
        return act, "config.%s = %r" % named, attr
    other = "; config.%s = %r names another, its act_fn decides" % named if named is not None else ""
    return act, "%s %s computes %s (probed)%s" % (attr, type(fn).__name__, act, other), attr


def _why_not(mod, model, layout, shared=None):
    """Why linfuse cannot take mod (a reason), or _act_of's (act, a note on where the activation
    came from, the attribute it was read from). Any module of a layout linfuse knows (layout, one
    of _LAYOUTS) is a candidate, whatever its class: made of its projections and activation alone,
    plain bias-free Linears of matching shapes, an activation linfuse computes; apply then checks
    its forward against linfuse's on random tokens. shared: _sharing(model)."""
    if hasattr(mod, "linfuse_base_class"):
        return "already patched by linfuse (unapply first to patch again)"
    names = layout
    if hasattr(mod, "_hf_hook"):
        return "its weights are managed by an accelerate hook (offloading or device map); linfuse needs them in place"
    lins = [getattr(mod, p, None) for p in names]
    tensors = [p for p, lin in zip(names, lins) if isinstance(lin, torch.Tensor)]
    if tensors:
        return "its %s %s tensors, not nn.Linear modules (%s): linfuse patches dense MLPs, not experts held " \
               "stacked" % (", ".join(tensors), "is" if len(tensors) == 1 else "are",
                            ", ".join("%s %s" % (p, tuple(getattr(mod, p).shape)) for p in tensors))
    if any(type(lin) is not nn.Linear for lin in lins):
        return "%s are %s, not plain nn.Linear (quantized or wrapped layers)" % (
            ", ".join(names), ", ".join(type(lin).__name__ for lin in lins))
    act_attr = _act_attr(mod)
    extra = [(n, type(c).__name__) for n, c in mod._modules.items()
             if c is not None and n not in names and n != act_attr]
    own = [("parameter", n) for n, t in mod._parameters.items() if t is not None] + \
        [("buffer", n) for n, t in mod._buffers.items() if t is not None]
    if extra or own:
        parts = ["%s (%s)" % e for e in extra] + ["%s %s" % o for o in own]
        return "it holds more than its projections and activation (%s): linfuse would not run them" % (
            ", ".join(parts))
    if shared is not None and len(names) == 3:
        # gate's and up's storage may be one: the stacked weight an earlier apply left. (A fused
        # gate_up_proj is used as it is: tied or not, nothing of it changes.)
        ptrs = [_storage_ptr(lin.weight) for lin in lins[:2]]
        g, u = lins[0].weight, lins[1].weight
        halves = g.shape == u.shape and g.is_contiguous() and u.is_contiguous() and \
            u.data_ptr() == g.data_ptr() + g.numel() * g.element_size()
        slots = 2 if ptrs[0] is not None and ptrs[0] == ptrs[1] and lins[0] is not lins[1] and g is not u and \
            halves else 1  # the parameter slots this module's own storage fills
        tied = [p for p, lin, ptr in zip(names[:2], lins[:2], ptrs)
                if shared["modules"].get(id(lin), 0) > 1 or
                (ptr is not None and shared["storages"].get(ptr, 0) > slots)]
        if tied:
            return "its %s %s shared with another module or parameter (tied weights): stacking gate and up " \
                   "would change the other" % (" and ".join(tied), "is" if len(tied) == 1 else "are")
    if any(lin.bias is not None for lin in lins):
        return "its projections have biases (mlp_bias); linfuse's gated MLP has none"
    hooked = [p for p, lin in zip(names, lins)
              if lin._forward_hooks or lin._forward_pre_hooks or getattr(lin, "parametrizations", None)]
    hooked += [a for a in _ACT_ATTRS if isinstance(mod._modules.get(a), nn.Module) and
               (mod._modules[a]._forward_hooks or mod._modules[a]._forward_pre_hooks)]
    if hooked:
        return "its %s %s forward hooks or parametrizations (weight_norm, a probe): linfuse would not run " \
               "them" % (", ".join(hooked), "has" if len(hooked) == 1 else "have")
    ws = [lin.weight for lin in lins]
    d = ws[-1]
    if len({(t.dtype, t.device) for t in ws}) != 1:
        return "its weights are of different dtypes or devices"
    if d.dtype not in _DTYPES:
        return "dtype %s: linfuse computes in float32, bfloat16, float16" % d.dtype
    if d.device.type not in ("cpu", "cuda"):
        return "device %s: linfuse runs on the CPU and CUDA GPUs" % d.device
    if len(names) == 3:
        g, u = ws[0], ws[1]
        if g.shape != u.shape or d.shape != (g.shape[1], g.shape[0]):
            return "weights %s, %s, %s: expected (H, D), (H, D), (D, H)" % (tuple(g.shape), tuple(u.shape),
                                                                           tuple(d.shape))
    elif ws[0].dim() != 2 or ws[0].shape[0] % 2 or d.shape != (ws[0].shape[1], ws[0].shape[0] // 2):
        return "weights %s, %s: expected (2H, D), (D, H)" % (tuple(ws[0].shape), tuple(d.shape))
    if d.device.type == "cuda" and lib.lf_device_require(_lib.DEVICE_CUDA) != _lib.STATUS_OK:
        return "linfuse cannot run on %s: %s" % (d.device, lib.error())
    return _act_of(mod, model, names)


def _quantize(mod):
    with torch.no_grad():
        q = _ops.quantize_fp8(mod.linfuse_gate_up, _down_weight(mod))
    for n, t in zip(_BUFFERS[1:], q):
        mod._buffers[n] = t
    mod.linfuse_fp8_versions = _fp8_versions(mod)


def _stack(mod, names):
    """gate and up as one (2H, D) tensor [Wg; Wu], their parameters made views of it (their old
    memory goes once the undo function returned with it is dropped: memory does not grow;
    state_dict keeps its keys). The Parameter objects stay the same ones, their data replaced: an
    optimizer made before apply still holds them after unapply. A fused gate_up_proj's weight is
    [Wg; Wu] already: the stacked tensor is a view of it. Returns (the stacked tensor, a function
    that puts gate and up back as they were: for a module apply leaves). names: mod's layout."""
    if len(names) == 2:
        w = getattr(mod, names[0]).weight
        with torch.inference_mode(w.is_inference() and torch.is_inference_mode_enabled()), torch.no_grad():
            return w.detach(), lambda: None
    gate, up = getattr(mod, names[0]), getattr(mod, names[1])
    g, u = gate.weight, up.weight
    H = g.shape[0]
    # under inference_mode a new tensor is an inference tensor: not for weights that are not
    normal = not (g.is_inference() or u.is_inference())
    # (inference_mode(False) turns gradients on: no_grad goes inside it)
    with torch.inference_mode(not normal and torch.is_inference_mode_enabled()), torch.no_grad():
        gu = torch.empty((2 * H, g.shape[1]), dtype=g.dtype, device=g.device)
        gu[:H].copy_(g)
        gu[H:].copy_(u)
    if g.is_inference() or u.is_inference():
        # made under inference_mode: a normal tensor set as their data would have no version
        # counter, which breaks the module's own forward too; new Parameters as views instead
        gate.weight = nn.Parameter(gu[:H], requires_grad=g.requires_grad)
        up.weight = nn.Parameter(gu[H:], requires_grad=u.requires_grad)

        def undo():
            gate.weight, up.weight = g, u
        return gu, undo
    old = g.data, u.data

    def undo_data():
        g.data, u.data = old
    g.data, u.data = gu[:H], gu[H:]
    return gu, undo_data


def _warm(device):
    """linfuse started on device, with torch's current stream known to it (its cuBLASLt workspace
    made now, not inside a later graph capture)."""
    if device.type != "cuda":
        return
    probe = torch.empty(1, device=device)
    with _ops._Kind(probe).running():
        pass


# The probe's tokens: four of N(0, 1), two 16 and two 256 times as large (where a clamp in a
# module's forward, as some MLPs have, would part it from linfuse's).
_PROBE_SCALES = (1.0, 1.0, 1.0, 1.0, 16.0, 16.0, 256.0, 256.0)


def _compare_forwards(mod, variant):
    """linfuse's output against the module's own on 8 random tokens (four of N(0, 1), four larger),
    in eval and in training mode (where a dropout, say, parts them). Returns the training modes
    (of False, True) in which they agree and, where that is one, why not the other; or why linfuse
    takes neither."""
    w = _down_weight(mod)
    gen = torch.Generator(device=w.device)
    gen.manual_seed(0)
    scale = torch.tensor(_PROBE_SCALES, device=w.device).unsqueeze(1)
    x = (torch.randn((len(_PROBE_SCALES), w.shape[0]), generator=gen, device=w.device) * scale).to(w.dtype)
    what = "on %d random tokens" % len(_PROBE_SCALES)
    # autocast off: under it both forwards might run the module's own computation (the fallback)
    with torch.no_grad(), torch.autocast(device_type=w.device.type, enabled=False):
        refs = {t: _probe.own_output(mod, mod.linfuse_base_class.forward, x, t) for t in (False, True)}
        _drop(mod)
        try:
            got = _patched_forward_inner(mod, x.clone(), False).float()
        except Error as e:
            return "linfuse refused it: %s" % e
    tol = PROBE_TOLERANCE["fp8" if variant == "fp8" else "gated_f32" if w.dtype == torch.float32 else "gated"]
    errs = {t: _probe.token_error(r, got) for t, r in refs.items() if not isinstance(r, str)}
    modes = tuple(t for t in (False, True) if t in errs and errs[t] <= tol)
    if len(modes) == 1:
        t = not modes[0]
        why = refs[t] if isinstance(refs[t], str) else "its own forward differs there by %.3g" % errs[t]
        return modes, "in %s mode its own forward runs: %s" % ("training" if t else "eval", why)
    if modes:
        return modes, None
    if not errs:
        why = refs[False]
        return why + (" (weights not loaded yet?): linfuse cannot check it; apply after the weights are in"
                      if why.startswith("its own forward gives") else "")
    t = min(errs, key=errs.get)
    hint = "; a gate_up_proj whose halves are [up, gate] rather than [gate, up] differs so" \
        if len(mod.linfuse_layout) == 2 else ""
    return "its own forward and linfuse's differ %s%s: by %.3g times the largest value of a token's own output " \
           "(tolerance %.3g)%s" % (what, " in training mode" if t else "", errs[t], tol, hint)


def apply(model, variant="gated"):
    """Replace the forward of every gated MLP in model with linfuse::gated_mlp, in place: each module,
    whatever its class, made of gate_proj, up_proj and down_proj (or w1, w3 and w2, Meta's names, or
    one gate_up_proj whose output is [gate, up], and down_proj), bias-free nn.Linears, and an act_fn
    (or activation_fn, or act) that computes silu, gelu_tanh or gelu_erf (without one, the
    activation the forward computes itself, read through it). Returns a PatchReport (print it).
    variant "gated" (the gated GEMM, then down) or "fp8" (FP8 weights quantized once, here; where
    the device has no FP8 GEMM the module runs gated, and the report says why). Each replaced
    module: gate and up stacked once into [Wg; Wu] (a non-persistent buffer, linfuse_gate_up) with
    the original parameters made views of it (a gate_up_proj's weight is used as it is), checked
    against its own forward on 8 random tokens, in eval and in training mode (where it differs in
    one, a dropout in its forward, that mode runs the module's own forward); its class becomes a
    subclass, Linfuse<Class>, whose forward calls linfuse. A module linfuse cannot run (an unknown
    activation, biases, other parts, a dtype, device or layer it does not take, or a probe that
    differs) is left as it was, with the reason in the report. Patch after moving the model to its
    device and dtype; unapply(model) restores the modules."""
    if variant not in ("gated", "fp8"):
        raise ValueError("linfuse.torch.apply: variant=%r: takes 'gated' or 'fp8'" % (variant,))
    if not isinstance(model, nn.Module):
        raise TypeError("linfuse.torch.apply: model is a %s, not a torch.nn.Module" % type(model).__name__)
    report = PatchReport(variant)
    shared = _sharing(model)
    for name, mod in model.named_modules():
        layout = _layout(mod)
        if layout is None:
            continue
        cls = type(mod).__name__
        why = _why_not(mod, model, layout, shared)
        if isinstance(why, str):
            report.left.append((name, cls, why))
            continue
        act, act_source, act_attr = why
        dev = getattr(mod, layout[-1]).weight.device
        _warm(dev)
        used, note = variant, act_source
        if variant == "fp8":  # the device first: a newer torch does not give the CPU an FP8 GEMM
            if lib.lf_fp8_supported(_lib.DEVICE_CUDA if dev.type == "cuda" else _lib.DEVICE_CPU) != _lib.STATUS_OK:
                used, note = "gated", "fp8 runs gated on %s: %s" % (dev, lib.error())
            elif getattr(torch, "float8_e4m3fn", None) is None:
                used, note = "gated", "fp8 runs gated: this torch (%s) has no float8_e4m3fn" % torch.__version__
        base_class, settings = mod.__class__, _settings(mod)
        gu, undo = _stack(mod, layout)  # the old gate and up weights go with undo (nothing else may hold them: memory)
        mod.__class__ = _patched_class(base_class)
        mod.register_buffer("linfuse_gate_up", gu, persistent=False)
        for n in _BUFFERS[1:]:
            mod.register_buffer(n, None, persistent=False)
        del gu
        mod.linfuse_act, mod.linfuse_variant, mod.linfuse_fp8_versions = act, used, (None, None)
        mod.linfuse_act_ref = (act_attr, None if act_attr is None else _act_now(mod, act_attr))
        mod.linfuse_name = name or _ITSELF
        mod.linfuse_children = tuple(mod._modules)
        mod.linfuse_layout = layout
        mod.linfuse_modes, mod.linfuse_mode_mods = (False, True), _inner_modules(mod)
        mod.linfuse_settings = settings
        try:
            if used == "fp8":
                _quantize(mod)
            got = _compare_forwards(mod, used)
        except Error as e:
            got = "linfuse refused it: %s" % e
        except BaseException:
            _restore(mod)
            undo()
            raise
        if isinstance(got, str):  # left as it was: its own gate and up weights again
            _restore(mod)
            undo()
            report.left.append((name, cls, got))
            continue
        del undo  # the old gate and up weights go now
        mod.linfuse_modes, mode_note = got
        if mode_note:
            note += "; " + mode_note
        report.replaced.append((name, cls, act, used, note))
    return report


def _restore(mod):
    _drop(mod)
    mod.__class__ = mod.linfuse_base_class
    for n in _BUFFERS:
        mod._buffers.pop(n, None)
    for n in _ATTRS:
        mod.__dict__.pop(n, None)


def unapply(model):
    """Put back the original forward of every MLP apply() replaced; returns their names. The gate
    and up parameters stay views of one stacked tensor (the same values and keys; no copy)."""
    names = []
    for name, mod in model.named_modules():
        if hasattr(mod, "linfuse_base_class"):
            _restore(mod)
            names.append(name)
    return names
