"""What a module computes, read from outside it, for linfuse.torch.apply: the activation an
act_fn or a forward computes (at fixed points, in float32), and the module's own output in eval
and in training mode, with every random generator it may draw from seeded for the read and put
back after, its training flags set without its train() override, and whatever a read sets on it
taken back. Nothing here changes what the caller sees of the module or of the generators."""
import collections
import contextlib
import random
import sys

import torch
from torch import nn

ACTS = ("silu", "gelu_tanh", "gelu_erf")  # the gated activations, as linfuse names them


_POINTS = (7, 8, 10, 12, 16, 20, 30, 50, 100, 1000)


def act_points():
    """Where an activation is read: [-6, 6], where gelu's tanh and erf forms differ most (by up to
    4.7e-4), and large values both ways (where a clamped activation parts from these)."""
    big = torch.tensor(_POINTS, dtype=torch.float32)
    return torch.cat([torch.linspace(-6, 6, 97, dtype=torch.float32), big, -big])


def act_values(act, x):
    if act == "silu":
        return x * torch.sigmoid(x)
    if act == "gelu_tanh":
        return 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + torch.erf(x * 0.7071067811865476))


def act_distance(got, ref):
    """got's largest difference from ref, relative to max(1, |ref|) (inf for a NaN or a shape apart)."""
    got = got.reshape(-1).float() if isinstance(got, torch.Tensor) else None
    if got is None or got.shape != ref.shape:
        return float("inf")
    d = float(((got - ref).abs() / ref.abs().clamp(min=1)).max())
    return d if d == d else float("inf")


def _generators(device):
    """The states of every random generator a forward may draw from, by name: torch's on the CPU
    and on device, Python's random, numpy's global one (where numpy is loaded)."""
    states = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    np = sys.modules.get("numpy")
    if np is not None:
        states["numpy"] = np.random.get_state()
    return states


def _set_generators(device, states):
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    if "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"], device)
    if "numpy" in states:
        sys.modules["numpy"].random.set_state(states["numpy"])


def _same(a, b):
    """Whether two generator states (tensors, numpy arrays, tuples of them, numbers) are equal."""
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b))
    if hasattr(a, "all"):  # a numpy array
        return bool((a == b).all())
    return a == b


def _same_generators(a, b):
    """Whether two _generators() states are the same (nothing was drawn between them)."""
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)


@contextlib.contextmanager
def mode(mod, training, device, seed=0):
    """For a read: mod and everything in it in training mode `training` (their flags set, no
    train() override called), every random generator seeded with `seed` (a draw is the same
    whatever the caller's seed); yields a function that says whether the block drew from any of
    them. All put back after: the caller's generators and flags are as they were."""
    was = [(m, m.training) for m in mod.modules()] if mod is not None else []
    saved = _generators(device)
    try:
        torch.default_generator.manual_seed(seed)
        if device.type == "cuda":  # this GPU's alone (torch.manual_seed would seed every GPU's)
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        random.seed(seed)
        np = sys.modules.get("numpy")
        if np is not None:
            np.random.seed(seed)
        start = _generators(device)
        for m, _ in was:
            m.training = training
        yield lambda: not _same_generators(start, _generators(device))
    finally:
        for m, t in was:
            m.training = t
        _set_generators(device, saved)


def _module_state(mod):
    """What a forward may set on its module besides its output (an attribute made on the first
    call, a buffer or weight made lazily): the module's own dict, with its dicts and sets copied."""
    return {k: (v, v.copy() if type(v) in (dict, set, collections.OrderedDict) else None)
            for k, v in mod.__dict__.items()}


def _put_module_state(mod, state):
    for k in [k for k in mod.__dict__ if k not in state]:
        del mod.__dict__[k]
    for k, (v, contents) in state.items():
        if contents is not None:
            v.clear()
            v.update(contents)
        mod.__dict__[k] = v


def read_act(fn):
    """fn's values at act_points() in float32 (fn an activation function or module, in eval mode,
    the generators seeded and put back after)."""
    x = act_points()
    with mode(fn if isinstance(fn, nn.Module) else None, False, x.device), torch.no_grad():
        return fn(x.clone())


def read_inline_act(mod, names):
    """The values at act_points() of the activation a module's forward computes itself, read
    through that forward with its projections stood in for, for the call, by float32 Linears
    without biases over two features (the point p and a 1) and one hidden unit: gate = p, up = 1,
    down puts act(p) * 1 in the first feature. Whatever the forward sets on the module (an
    attribute or weight it makes on its first call, from the stand-ins) is taken back after.
    Raises what the forward raises."""
    cpu = torch.device("cpu")
    with mode(None, False, cpu):  # a Linear's initialization draws from the generator
        lins = [nn.Linear(2, 1, bias=False), nn.Linear(2, 1, bias=False)] if len(names) == 3 else \
            [nn.Linear(2, 2, bias=False)]
        lins.append(nn.Linear(1, 2, bias=False))
    with torch.no_grad():
        for lin in lins:
            lin.weight.zero_()
        if len(names) == 3:
            lins[0].weight[0, 0] = 1
            lins[1].weight[0, 1] = 1
        else:
            lins[0].weight[0, 0] = lins[0].weight[1, 1] = 1
        lins[-1].weight[0, 0] = 1
    p = act_points()
    x = torch.stack([p, torch.ones_like(p)], 1)
    state = _module_state(mod)
    try:
        for n, lin in zip(names, lins):
            mod._modules[n] = lin
        with mode(mod, False, cpu), torch.no_grad():
            y = type(mod).forward(mod, x)
    finally:
        _put_module_state(mod, state)
    return y[:, 0] if isinstance(y, torch.Tensor) and y.dim() == 2 and y.shape[1] == 2 else y


def name_act(got, what, named=None):
    """(act, None) for the one of ACTS that got (values at act_points()) computes to 1e-5, or
    (None, why none)."""
    x = act_points()
    errs = []
    for act in ACTS:
        err = act_distance(got, act_values(act, x))
        if err <= 1e-5:
            return act, None
        errs.append("%.2g" % err)
    return None, "%s computes none of %s, the activations linfuse's gated MLP takes (it differs by %s on a " \
        "float32 probe%s)" % (what, ", ".join(ACTS), ", ".join(errs),
                              "; config.%s = %r" % named if named is not None else "")


def token_error(ref, got):
    """The largest of each token's difference relative to its own largest output; a token whose own
    output overflows is not compared, one whose own output is zero must be zero. A NaN in got
    counts as infinite."""
    err = 0.0
    for r, g in zip(ref, got):
        if not bool(torch.isfinite(r).all()):
            continue
        top = float(r.abs().max())
        e = float((g - r).abs().max()) / top if top else (0.0 if not bool(g.any()) else float("inf"))
        if e != e:
            return float("inf")
        err = max(err, e)
    return err


def own_output(mod, forward, x, training):
    """The module's own output on (a copy of) x in training mode `training` (see mode()), twice with
    different seeds: the output, or why linfuse cannot stand in for it in that mode (it fails, it
    draws from a random generator or its output differs from run to run, or its first, N(0, 1)
    tokens give zeros or non-finite values). What the runs set on the module is taken back."""
    which = "training" if training else "eval"
    outs = []
    for n in (0, 1):
        state = _module_state(mod)
        try:
            with mode(mod, training, x.device, seed=n) as drew:
                y = forward(mod, x.clone())
                if drew():
                    return "its own forward in %s mode draws random numbers (a dropout?)" % which
        except Exception as e:  # noqa: BLE001 (a module whose own forward fails is no MLP linfuse can stand in for)
            return "its own forward fails in %s mode (%s: %s)" % (which, type(e).__name__, e)
        finally:
            _put_module_state(mod, state)
        if not isinstance(y, torch.Tensor) or y.shape != x.shape:
            return "its own forward returns %s for x of shape %s; linfuse's returns one tensor of x's shape" % (
                tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__, tuple(x.shape))
        outs.append(y)
    if not torch.equal(outs[0], outs[1]):
        return "its own output in %s mode is random (a dropout?)" % which
    first = outs[0][:4].float()
    if not bool(torch.isfinite(first).all()) or float(first.abs().max()) == 0:
        return "its own forward gives %s in %s mode" % (
            "non-finite values" if not bool(torch.isfinite(first).all()) else "zeros", which)
    return outs[0].float()
