"""linfuse's Linear, gated GEMM and gated MLP on arrays the caller owns: numpy arrays and torch
tensors (CPU or CUDA), or any other CPU array with __dlpack__. Inputs go in through DLPack
without a copy; the result is allocated by the caller's library (torch.empty on the input's
device, numpy.empty) and written by linfuse's out= forms, so linfuse takes no memory of its own;
it comes back as the input's kind on the input's device. On CUDA each call runs on torch's
current stream (torch.cuda.current_stream(): linfuse's stream is set to it for the call and put
back after) and nothing synchronizes, so calls queue in order with torch's own work, inside a
CUDA graph capture too. A refused input raises linfuse.Error with linfuse's message."""
import collections
import contextlib
import ctypes as C
import math
import threading
import warnings
import weakref

from . import Error, Fp8FallbackWarning, _dlpack, _lib, check, lib

_ACT_ALIASES = {None: "none", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu_erf"}
_GATED_ACTS = ("gelu_tanh", "silu", "gelu_erf")


def _act(act, gated):
    if act is not None and not isinstance(act, str):
        # an array here is a weight passed where the activation goes (gated_mlp(x, gate, up, down)):
        # named by kind and shape, never printed whole
        shape = getattr(act, "shape", None)
        what = "%s.%s" % (type(act).__module__, type(act).__name__) + \
            (" of shape %s" % (tuple(shape),) if shape is not None else "")
        hint = "; gate and up go in as one gate_up (2H, D) = [Wg; Wu] (numpy.concatenate([gate, up]), " \
            "torch.cat([gate, up])), then down" if gated and shape is not None else ""
        raise ValueError("linfuse: act=(a %s) is not an activation's name%s" % (what, hint))
    name = _ACT_ALIASES.get(act, act)
    if name not in _lib.ACT or (gated and name not in _GATED_ACTS):
        takes = _GATED_ACTS + ("swish", "gelu_pytorch_tanh", "gelu") if gated else \
            tuple(_lib.ACT) + ("swish", "gelu_pytorch_tanh", "gelu")
        raise ValueError("linfuse: act=%r: takes %s" % (act, ", ".join(takes)))
    return _lib.ACT[name]


def _variant(variant):
    if not isinstance(variant, str) or variant not in _lib.VARIANT:
        raise ValueError("linfuse: variant=%r: takes %s" % (variant, ", ".join(_lib.VARIANT)))
    return _lib.VARIANT[variant]


class _Kind:
    """How to make arrays like x: its library's empty(), and where linfuse runs (device, stream)."""

    def __init__(self, x):
        self.torch = _dlpack.torch_module() if _dlpack.is_torch(x) else None
        self.x, self.given = x, x
        if self.torch is None:
            if not hasattr(x, "__dlpack__"):
                raise TypeError("linfuse: x is a %s, which has no __dlpack__ (numpy arrays and torch tensors do)"
                                % type(x).__name__)
            if type(x).__module__ != "numpy":
                dev = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else None
                if dev is not None and dev[0] not in (1, 3):  # kDLCPU, kDLCUDAHost
                    raise Error("linfuse: a %s on DLPack device %s: arrays on a GPU are taken as torch tensors "
                                "(torch.from_dlpack makes one without a copy)" % (type(x).__name__, dev))
            import numpy
            self.np = numpy
            if type(x).__module__ != "numpy":  # another CPU array (the array API's): numpy's view of it
                self.x = _dlpack.foreign_as_numpy(lib, check, x, "linfuse: a %s" % type(x).__name__)

    @property
    def cuda(self):
        return self.torch is not None and self.x.is_cuda

    def device_type(self):
        return _lib.DEVICE_CUDA if self.cuda else _lib.DEVICE_CPU

    def empty(self, shape, dtype=None):
        if self.torch is not None:
            return self.torch.empty(shape, dtype=dtype or self.x.dtype, device=self.x.device)
        return self.np.empty(shape, dtype=dtype or self.x.dtype)

    def workspace(self, nbytes):
        """At least nbytes of the input's device, in the input's dtype (linfuse uses its bytes)."""
        item = self.x.element_size() if self.torch is not None else self.x.dtype.itemsize
        return self.empty((max(1, math.ceil(nbytes / item)),))

    def back(self, y):
        """y (a numpy array) as the input's kind: numpy's own, else the kind's from_dlpack."""
        if self.torch is not None or type(self.given).__module__ == "numpy":
            return y
        if hasattr(self.given, "__array_namespace__"):
            ns = self.given.__array_namespace__()
        else:
            import importlib
            ns = importlib.import_module(type(self.given).__module__.split(".")[0])
        return ns.from_dlpack(y) if hasattr(ns, "from_dlpack") else y

    @contextlib.contextmanager
    def running(self):
        """linfuse on x's GPU and on torch's current stream there, for the call (nothing on the CPU)."""
        if not self.cuda:
            yield
            return
        torch = self.torch
        current = torch.cuda.current_device()
        index = self.x.device.index if self.x.device.index is not None else current
        # the runtime's current GPU and linfuse's agree inside (torch's is switched only when it must)
        with torch.cuda.device(index) if index != current else contextlib.nullcontext():
            check(lib.lf_device_select(_lib.DEVICE_CUDA, index), "linfuse: cuda:%d" % index)
            prev = C.c_void_p()
            check(lib.lf_cuda_get_stream(C.byref(prev)), "linfuse: the stream")
            check(lib.lf_cuda_set_stream(C.c_void_p(_raw_stream(torch, index))), "linfuse: torch's current stream")
            try:
                yield
            finally:
                lib.lf_cuda_set_stream(prev)


def _raw_stream(torch, index):
    """torch's current stream on GPU index, as the cudaStream_t's value: through the call Triton
    launches with where torch has it (no Stream object made), else through torch.cuda.current_stream."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream


def _handles():
    return _dlpack.Handles(lib, check)


def _rows(x, what):
    if len(x.shape) < 1:
        raise Error("linfuse.%s: x is a scalar; expected (..., features)" % what)
    if x.shape[-1] == 0:
        raise Error("linfuse.%s: x is %s: no features (its last dim is 0)" % (what, tuple(x.shape)))
    return x.reshape(-1, x.shape[-1])


def _two_dims(w, what, name):
    if not hasattr(w, "shape"):
        raise TypeError("%s: %s is a %s, which has no __dlpack__ (numpy arrays and torch tensors do)"
                        % (what, name, type(w).__name__))
    if len(w.shape) != 2:
        raise Error("%s: %s has shape %s; expected 2 dims" % (what, name, tuple(w.shape)))


def linear(x, weight, bias=None, act=None):
    """act(x @ weight.T + bias): x (..., in), weight (out, in), bias (out) or None; act None,
    "relu", "gelu_tanh", "gelu_erf" (or "gelu"), "silu". One GEMM with the bias and activation in
    its epilogue (lf_addmm_act_out). Returns (..., out), x's kind, dtype and device."""
    a = _act(act, gated=False)
    _two_dims(weight, "linfuse.linear", "weight")
    k = _Kind(x)
    x = k.x
    out_shape = tuple(x.shape[:-1]) + (weight.shape[0],)
    x2 = _rows(x, "linear")
    y = k.empty(out_shape)
    if x2.shape[0] == 0 or weight.shape[0] == 0:  # no rows, or no outputs (torch gives (..., 0))
        _no_rows(x, weight.shape[1], str(weight.dtype), "linfuse.linear")
        if bias is not None and tuple(bias.shape) != (weight.shape[0],):
            raise Error("linfuse.linear: bias is %s, the weight has %d outputs" % (tuple(bias.shape), weight.shape[0]))
        return k.back(y)
    with k.running(), _handles() as h:
        tx, tw = h.take(x2, "linfuse.linear: x"), h.take(weight, "linfuse.linear: weight")
        tb = h.take(bias, "linfuse.linear: bias") if bias is not None else None
        ty = h.take(y.reshape(x2.shape[0], weight.shape[0]), "linfuse.linear: out")
        check(lib.lf_addmm_act_out(ty, tb, tx, h.view_t(tw, "linfuse.linear"), a), "linfuse.linear")
    return k.back(y)


def gated_gemm(x, gate_up, act="silu"):
    """act(x @ Wg.T) * (x @ Wu.T) in one GEMM whose epilogue pairs the two halves: x (..., D),
    gate_up (2H, D) = [Wg; Wu]; returns (..., H). Where the device has no gated kernel for the
    shape, linfuse runs a GEMM into g and u plus act*mul, and takes memory of its own for them."""
    a = _act(act, gated=True)
    _two_dims(gate_up, "linfuse.gated_gemm", "gate_up")
    if gate_up.shape[0] % 2:
        raise Error("linfuse.gated_gemm: gate_up has %d rows: [Wg; Wu] has 2H" % gate_up.shape[0])
    k = _Kind(x)
    x = k.x
    H = gate_up.shape[0] // 2
    out_shape = tuple(x.shape[:-1]) + (H,)
    x2 = _rows(x, "gated_gemm")
    y = k.empty(out_shape)
    if x2.shape[0] == 0:
        _no_rows(x, gate_up.shape[1], str(gate_up.dtype), "linfuse.gated_gemm")
        return k.back(y)
    with k.running(), _handles() as h:
        tx, tg = h.take(x2, "linfuse.gated_gemm: x"), h.take(gate_up, "linfuse.gated_gemm: gate_up")
        ty = h.take(y.reshape(x2.shape[0], H), "linfuse.gated_gemm: out")
        check(lib.lf_mm_gated_out(ty, tx, h.view_t(tg, "linfuse.gated_gemm"), a, H), "linfuse.gated_gemm")
    return k.back(y)


def _fp8_runs(k):
    """Whether the fp8 variant runs FP8 here; if not, the reason (linfuse's)."""
    if lib.lf_fp8_supported(k.device_type()) == _lib.STATUS_OK:
        return True, ""
    return False, lib.error()


def _module(h, gate_up, down, a, what):
    """A linfuse gated MLP over gate_up and down (views, no copy); free it with lf_nn_gated_mlp_free."""
    m = _lib.GatedMlp()
    gu, dn = h.take(gate_up, what + ": gate_up"), h.take(down, what + ": down")
    check(lib.lf_nn_gated_mlp_from_weights(C.byref(m), h.give(gu), h.give(dn), a), what)  # m owns both, also on failure
    return m


class GatedMlp:
    """linfuse's gated MLP over weights taken once: gate_up (2H, D) = [Wg; Wu] contiguous, down
    (D, H), act as gated_mlp takes them; fp8_weights, quantize_fp8's four arrays, for the fp8
    variant. The weights are viewed through DLPack, without a copy, and kept alive while the object
    lives (close() lets them go). Calling it, m(x, variant="gated"), computes what gated_mlp(x,
    gate_up, down, act, variant) does, but a call takes in only x, its output and a workspace:
    the weights are not read into linfuse again, which is what a decode loop, one token a call,
    feels. Where the fp8 variant is asked for without fp8_weights, the weights are quantized once,
    on the first such call (into memory linfuse allocates). name: what its errors begin with.

    Threads may call one GatedMlp at once; close() waits for none of them (the weights go when the
    last call in flight returns). A torch weight whose memory torch moves after the GatedMlp was
    made (share_memory_, resize_, set_) is refused on the next call: make a new GatedMlp."""

    def __init__(self, gate_up, down, act="silu", fp8_weights=None, name="linfuse.GatedMlp"):
        self._m = None
        self.name = what = name
        a = _act(act, gated=True)
        _two_dims(gate_up, what, "gate_up")
        _two_dims(down, what, "down")
        if fp8_weights is not None and len(fp8_weights) != 4:
            raise Error("%s: fp8_weights is quantize_fp8()'s four arrays, got %d" % (what, len(fp8_weights)))
        kind = _Kind(gate_up)
        self.dim, self.out_features = int(gate_up.shape[1]), int(down.shape[0])
        self._hidden = int(down.shape[1])
        self._weights = (gate_up, down) + tuple(fp8_weights or ())  # held for their addresses; () once freed
        self._torch_weights = tuple(w for w in self._weights if _dlpack.is_torch(w))
        # numpy's, which numpy reallocates under an export only when told to (resize(refcheck=False))
        self._np_weights = tuple(w for w in self._weights if type(w).__module__ == "numpy")
        self._dtype = str(gate_up.dtype)
        for w in self._torch_weights:  # taken by value, a later write to them would go unseen
            if hasattr(w, "is_neg") and (w.is_neg() or w.is_conj()):
                raise Error("%s: a weight is a view with its negative or conjugate bit set: pass "
                            "w.resolve_neg().resolve_conj(), which linfuse can view in place" % what)
        self._ws = {}  # (variant, tokens) -> workspace bytes, for the last few token counts
        # What the direct call (_call_raw) compares a torch x against: the weights' tensor type,
        # dtype, device and GPU (-1: the CPU); None where the weights are numpy's (or torch has no
        # negative bit to ask of x: before 1.10). FP8 found to run here, or not yet.
        torch_w = _dlpack.torch_module() if _dlpack.is_torch(gate_up) else None
        self._raw_as = (torch_w.Tensor, gate_up.dtype, gate_up.device, gate_up.get_device(), torch_w.strided) \
            if torch_w is not None and hasattr(torch_w.Tensor, "is_neg") else None
        self._fp8_here = False
        self._lock, self._calls, self._closed = threading.Lock(), 0, False
        with kind.running(), _handles() as h:
            m = _module(h, gate_up, down, a, what)
            try:
                if fp8_weights is not None:
                    q = [h.take(w, "%s: fp8_weights[%d]" % (what, i), fp8=i % 2 == 0)
                         for i, w in enumerate(fp8_weights)]
                    check(lib.lf_nn_gated_mlp_set_fp8_weights(C.byref(m), *[h.give(t) for t in q]), what)
            except BaseException:
                lib.lf_nn_gated_mlp_free(C.byref(m))
                raise
        self._m, self._quantized, self._at = m, fp8_weights is not None, self._addresses()

    def _addresses(self):
        """Where and how the weights' memory is laid out: torch's resize_, set_ or as_strided_, and
        numpy's resize(refcheck=False), change one of them (linfuse would read freed memory)."""
        return tuple((w.data_ptr(), w.shape, w.stride()) for w in self._torch_weights) + \
            tuple((w.__array_interface__["data"][0], w.shape, w.strides) for w in self._np_weights)

    def _weights_stayed(self):
        if self._addresses() != self._at:
            raise Error("%s: a weight's memory moved or changed its layout since this GatedMlp was made "
                        "(torch's share_memory_, resize_, set_, as_strided_; numpy's resize): make a new one over "
                        "the weights as they are" % self.name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if getattr(self, "_m", None) is None:
            return "<%s (closed)>" % self.name
        return "<%s (%s, %d -> %d -> %d)>" % (self.name, self._dtype, self.dim, self._hidden, self.out_features)

    def close(self):
        """Let the weights go (the object cannot be called after); at once, or when the last call
        in flight returns. `with linfuse.GatedMlp(...) as m:` closes it at the block's end."""
        with self._lock:
            self._closed = True
            self._free_if_idle()

    def _free_if_idle(self):
        """With the lock held: once closed and no call is in flight, the C module and the weights go."""
        if self._closed and self._calls == 0 and self._m is not None:
            lib.lf_nn_gated_mlp_free(C.byref(self._m))
            self._m, self._weights, self._torch_weights, self._np_weights = None, (), (), ()

    def __del__(self):
        if lib is not None and getattr(self, "_m", None) is not None:  # not at interpreter exit
            self.close()

    def _no_copy(self, *args):
        """A GatedMlp owns a C module that one close() frees: a copy sharing it could call it after
        the original closed (copy.copy did, and read freed memory). Make another over the weights."""
        raise TypeError("%s: a GatedMlp cannot be copied or pickled (it owns linfuse's module over the weights): "
                        "make a new GatedMlp(gate_up, down, ...) over them" % self.name)

    __copy__ = __deepcopy__ = __reduce_ex__ = __reduce__ = _no_copy

    def _enter(self):
        with self._lock:
            if self._closed:
                raise Error("%s: this GatedMlp was closed" % self.name)
            self._calls += 1

    def _leave(self):
        with self._lock:
            self._calls -= 1
            self._free_if_idle()

    def _call_raw(self, x, v):
        """The call for a torch x as a decode loop makes it, in one crossing into C
        (lf_nn_gated_mlp_forward_raw: no lf_tensor, no DLPack export, torch's current stream passed
        in), or None where x is anything else or the call needs more (another current GPU, a
        quantization, an fp8 fallback, an empty x): the general path then says or does it."""
        kind = self._raw_as
        if kind is None or type(x) is not kind[0] or x.dtype != kind[1] or x.device != kind[2] or \
                x.layout != kind[4] or not x.is_contiguous() or x.is_neg() or x.is_conj() or not x.dim() or \
                x.shape[-1] != self.dim:
            return None
        torch = _dlpack.torch_module()
        gpu = kind[3]
        # on a GPU, only where the runtime's current GPU is the weights' already (torch's own
        # device), so the C call's select switches nothing under torch; else the general path
        if gpu >= 0 and torch.cuda.current_device() != gpu:
            return None
        if v == _FP8 and not (self._quantized and self._fp8_here):
            return None
        T = x.numel() // self.dim
        if T == 0:
            return None
        need = self._ws.get((v, T))
        if need is None:
            return None
        y = torch.empty(x.shape[:-1] + (self.out_features,), dtype=x.dtype, device=x.device)
        ws = torch.empty((-(-need // x.element_size()),), dtype=x.dtype, device=x.device)
        stream = None if gpu < 0 else C.byref(C.c_void_p(_raw_stream(torch, gpu)))
        self._enter()
        try:
            self._weights_stayed()
            check(lib.lf_nn_gated_mlp_forward_raw(C.byref(self._m), v, x.data_ptr(), T, self.dim, y.data_ptr(),
                                                  self.out_features, ws.data_ptr(), need, stream), self.name)
        finally:
            self._leave()
        return y

    def __call__(self, x, variant="gated"):
        what = self.name
        v = _variant(variant)
        y = self._call_raw(x, v)
        if y is not None:
            return y
        k = _Kind(x)
        x = k.x
        if len(x.shape) < 1 or x.shape[-1] != self.dim:
            raise Error("%s: x is %s: x's last dim is %s, the weights take %d" % (
                what, tuple(x.shape), x.shape[-1] if len(x.shape) else "missing", self.dim))
        out_shape = tuple(x.shape[:-1]) + (self.out_features,)
        x2 = _rows(x, "gated_mlp")
        T = x2.shape[0]
        if T == 0:
            _no_rows(x, self.dim, self._dtype, what)
            return k.back(k.empty(out_shape))
        y = k.empty(out_shape)
        if v == _FP8:
            runs, why = _fp8_runs(k)
            self._fp8_here = runs
            if not runs:
                warnings.warn("linfuse: the fp8 variant runs as the gated one here: %s" % why, Fp8FallbackWarning,
                              stacklevel=2)
                v = _GATED
        self._enter()
        try:
            self._weights_stayed()
            with k.running(), _handles() as h:
                if v == _FP8 and not self._quantized:
                    with self._lock:  # one quantization, whichever thread asks first
                        if not self._quantized:
                            check(lib.lf_nn_gated_mlp_quantize_fp8(C.byref(self._m)), what)
                            self._quantized = True
                need = self._ws.get((v, T))
                if need is None:
                    n = C.c_size_t()
                    check(lib.lf_nn_gated_mlp_workspace(C.byref(self._m), v, T, C.byref(n)), what)
                    if len(self._ws) >= 64:  # prefill lengths vary: keep the last few only
                        self._ws.clear()
                    need = self._ws[(v, T)] = n.value
                ws = k.workspace(need)
                tx, tw = h.take(x2, what + ": x"), h.take(ws, what + ": workspace")
                ty = h.take(y.reshape(T, self.out_features), what + ": out")
                check(lib.lf_nn_gated_mlp_forward_out(C.byref(self._m), v, tx, ty, tw), what)
        finally:
            self._leave()
        return k.back(y)


def _no_rows(x, width, dtype, what):
    """An x of no rows reaches no C check: its width and dtype must still be the weight's, as the C
    calls say."""
    if x.shape[-1] != width:
        raise Error("%s: x is %s: x's last dim is %d, the weight takes %d" % (what, tuple(x.shape), x.shape[-1],
                                                                            width))
    if str(x.dtype) != dtype:
        raise Error("%s: x is %s, the weight %s: they must agree" % (what, x.dtype, dtype))


_GATED, _FP8 = _lib.VARIANT["gated"], _lib.VARIANT["fp8"]


# gated_mlp's GatedMlps, one per set of weight objects passed again and again (a loop over
# gated_mlp, the torch op under torch.compile without CUDA graphs, a patched module's calls under
# the profiler or with gradients on): making one costs more than the call's own work at a decode
# step's sizes. Torch tensors only. An entry's GatedMlp is made over aliases of the weights
# (w.detach(): the same memory, a TensorImpl of their own), so what it holds keeps no weight
# object alive (torch keeps a tensor's Python object alive while anything holds its TensorImpl);
# the entry refers to the weights weakly, is used only for the very objects it was made over while
# their memory and layout are what they were, and goes when one of them is collected or is passed
# again with other memory (until then it holds the memory it was made over: weights given new
# memory in place, w.data = ... or a module's .half(), free their old memory at their next call).
# Not for numpy arrays (their DLPack export holds the array itself: it would never be collected),
# nor for the fp8 variant without fp8_weights, whose quantization is redone on every call. The
# least recently used goes past _MLPS_MAX (a model's MLPs, one entry each, are far fewer).
_MLPS = collections.OrderedDict()
_MLPS_LOCK = threading.Lock()
_MLPS_MAX = 1024


def _forget(key):
    # No lock: a collection may run this inside a locked section, in any thread. OrderedDict's
    # pop and popitem are single C calls under the GIL.
    _MLPS.pop(key, None)


def _storage_bytes(w):
    return w.untyped_storage().nbytes() if hasattr(w, "untyped_storage") else w.storage().nbytes()


def _where(ws):
    """Where and how each weight lies: what a new GatedMlp would be made over (its memory, the
    storage's extent, its layout, type and device, and the negative and conjugate bits DLPack
    cannot carry)."""
    return tuple((w.data_ptr(), _storage_bytes(w), w.storage_offset(), w.shape, w.stride(), w.dtype, w.device,
                  w.is_neg() or w.is_conj() if hasattr(w, "is_neg") else False) for w in ws)


def _cached_mlp(gate_up, down, act, fp8_weights):
    """The GatedMlp for these torch weight objects, made on the first call; None for any other kind."""
    ws = (gate_up, down) + tuple(fp8_weights or ())
    torch = _dlpack.torch_module() if _dlpack.is_torch(gate_up) else None
    if torch is None or not all(_dlpack.is_torch(w) and w.layout == torch.strided for w in ws):
        return None
    key = (act,) + tuple(id(w) for w in ws)
    got = _MLPS.get(key)
    if got is not None:
        refs, at, m = got
        if all(r() is w for r, w in zip(refs, ws)) and _where(ws) == at:
            try:
                _MLPS.move_to_end(key)
            except KeyError:  # dropped just now by a collection in another thread
                pass
            return m
    if got is not None:  # these objects, moved or laid out anew: their old memory goes now
        _forget(key)
        got = m = None
    # each reference's callback lives as long as the entry holding it: nothing piles up on a
    # weight that outlives many entries (one passed with a new partner on every call)
    refs, at = tuple(weakref.ref(w, lambda _, key=key: _forget(key)) for w in ws), _where(ws)
    alias = [w.detach() for w in ws]
    m = GatedMlp(alias[0], alias[1], act, alias[2:] or None, name="linfuse.gated_mlp")
    with _MLPS_LOCK:
        while len(_MLPS) >= _MLPS_MAX:
            try:
                _MLPS.popitem(last=False)
            except KeyError:  # emptied meanwhile by collections
                break
        _MLPS[key] = (refs, at, m)
    return m


def gated_mlp(x, gate_up, down, act="silu", variant="gated", fp8_weights=None):
    """down(act(gate(x)) * up(x)), the MLP of Llama/Mistral/Qwen (act "silu") and Gemma
    ("gelu_tanh"): x (..., D), gate_up (2H, D) = [Wg; Wu] contiguous, down (D, H). variant:
    "eager" (5 kernels), "fused" (4), "gated" (2: the gated GEMM, then down), "fp8" (FP8 GEMMs,
    where the device has them: Hopper; elsewhere the gated variant runs, with an
    Fp8FallbackWarning). fp8_weights: quantize_fp8(gate_up, down)'s four arrays, made once; without
    them the fp8 variant quantizes the weights on every call. Every intermediate lives in one
    workspace allocated like x (linfuse allocates nothing). Returns (..., D). Calls again on the
    same weight objects reuse what the first made of them (a GatedMlp, held without keeping the
    weights alive); a GatedMlp of one's own saves the lookup too."""
    _act(act, gated=True)
    _variant(variant)
    _Kind(x)
    if variant != "fp8" or fp8_weights is not None:
        m = _cached_mlp(gate_up, down, act, fp8_weights)
        if m is not None:
            return m(x, variant)
    m = GatedMlp(gate_up, down, act, fp8_weights, name="linfuse.gated_mlp")
    try:
        return m(x, variant)
    finally:
        m.close()


def quantize_fp8(gate_up, down):
    """The fp8 variant's weights, made once for gated_mlp(..., variant="fp8", fp8_weights=...):
    (gate_up_q (2H, D) E4M3 codes, gate_up_scale (2H, 1) f32 per output channel, down_q (D, H) E4M3
    codes, down_scale f32 per 128 x 128 block), as lf_nn_gated_mlp_quantize_fp8 makes them, on the
    weights' device. Codes are torch.float8_e4m3fn tensors for torch (a copy in torch's memory),
    uint8 arrays for numpy."""
    k = _Kind(gate_up)
    what = "linfuse.quantize_fp8"
    out = []
    with k.running(), _handles() as h:
        m = _module(h, gate_up, down, _lib.ACT["silu"], what)
        try:
            check(lib.lf_nn_gated_mlp_quantize_fp8(C.byref(m)), what)
            for t in (m.gate_up_q, m.gate_up_scale, m.down_q, m.down_scale):
                if k.torch is not None:
                    o = _dlpack.to_torch(lib, check, C.c_void_p(t), what)
                    out.append(o.clone() if o.is_cuda else o)  # on the GPU, torch's memory, not linfuse's cache
                else:
                    out.append(k.back(_dlpack.to_numpy(lib, check, C.c_void_p(t), what)))
        finally:
            lib.lf_nn_gated_mlp_free(C.byref(m))
    return tuple(out)
