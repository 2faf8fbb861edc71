"""Arrays in and out of linfuse through DLPack, without copies.

In: a torch tensor through torch.utils.dlpack.to_dlpack (no stream handshake: the caller runs
linfuse on torch's current stream, so stream order is the order of the calls), anything else
through its __dlpack__(); the capsule's DLManagedTensor goes to lf_tensor_from_dlpack, and once
linfuse has taken it the capsule is renamed "used_dltensor" (DLPack's rule: its destructor then
leaves the tensor alone, and linfuse runs the producer's deleter when its last view goes). FP8
tensors travel as their bytes (torch's DLPack has no float8 in every version; numpy has no FP8
dtype at all): a uint8 export retagged kDLFloat8_e4m3fn before linfuse reads it.

Out: lf_tensor_to_dlpack's DLManagedTensor in a capsule named "dltensor", whose destructor runs
the deleter only when no consumer took it. (Approach of tests/dlpack_numpy.py.)"""
import ctypes as C
import sys

from . import Error, _lib

_get_pointer = C.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = C.c_void_p, [C.py_object, C.c_char_p]
_set_name = C.pythonapi.PyCapsule_SetName
_set_name.restype, _set_name.argtypes = C.c_int, [C.py_object, C.c_char_p]
_CAPSULE_DESTRUCTOR = C.CFUNCTYPE(None, C.c_void_p)
_capsule_new = C.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = C.py_object, [C.c_void_p, C.c_char_p, _CAPSULE_DESTRUCTOR]
# In a capsule's destructor the capsule is a raw pointer on its way out: looked at through
# prototypes that take a pointer, so no reference is taken on it.
_raw_is_valid = C.PYFUNCTYPE(C.c_int, C.c_void_p, C.c_char_p)(("PyCapsule_IsValid", C.pythonapi))
_raw_get_pointer = C.PYFUNCTYPE(C.c_void_p, C.c_void_p, C.c_char_p)(("PyCapsule_GetPointer", C.pythonapi))


@_CAPSULE_DESTRUCTOR
def _destroy_unused(cap):
    if _raw_is_valid(cap, b"dltensor"):  # never consumed (a consumer renames it "used_dltensor")
        mt = C.cast(_raw_get_pointer(cap, b"dltensor"), C.POINTER(_lib.DLManagedTensor))
        mt.contents.deleter(C.cast(mt, C.c_void_p))


_KDL_CPU = 1
_INT64S = [C.c_int64 * n for n in range(5)]  # shape and stride arrays by dims (a ctypes type is made once)
_NUMPY_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}  # numpy kind -> DLPack type code
_HELD = {}  # address of a DLManagedTensor made by _take_numpy -> what it keeps alive


@_lib.DELETER
def _release_numpy(mt):
    if _HELD is not None:  # None: the interpreter is tearing this module down; all goes anyway
        _HELD.pop(mt, None)


def torch_module():
    """torch when the program has imported it (linfuse never imports it first)."""
    return sys.modules.get("torch")


def is_torch(x):
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def foreign_as_numpy(lib, check, x, what):
    """A CPU array of another library (the array API's: anything with __dlpack__ that is neither
    numpy's nor torch's) as a numpy array over its memory. Its capsule goes to linfuse's own check
    first (lf_tensor_from_dlpack: a NULL shape, a device, a dtype refused by name), and numpy then
    views linfuse's export of it, a capsule linfuse made: numpy never reads a foreign one (a NULL
    shape crashed inside numpy.from_dlpack). The producer's deleter runs when numpy's view goes."""
    import numpy
    cap = x.__dlpack__()
    h = C.c_void_p()
    check(lib.lf_tensor_from_dlpack(C.byref(h), C.c_void_p(_get_pointer(cap, b"dltensor"))), what)
    _set_name(cap, b"used_dltensor")  # linfuse owns it now
    try:
        obj, _ = export(lib, check, h, what)
        return numpy.from_dlpack(obj)
    finally:
        lib.lf_tensor_free(h)


def _fp8_dtype(torch):
    return getattr(torch, "float8_e4m3fn", None)


_TORCH = {}  # what take() asks of torch on every call, asked once: its tensor's conversions


def _torch_facts(torch):
    if _TORCH.get("module") is not torch:
        _TORCH.update(module=torch, to_dlpack=torch.utils.dlpack.to_dlpack, fp8=_fp8_dtype(torch),
                      signed_views=hasattr(torch.Tensor, "is_neg"))
    return _TORCH


class Handles:
    """lf_tensor handles made for one call, freed together at its end (a handle given to a module
    that takes ownership is released from here with give())."""

    def __init__(self, lib, check):
        self.lib, self.check, self.owned = lib, check, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for h in self.owned:
            self.lib.lf_tensor_free(h)
        self.owned = []

    def give(self, h):
        self.owned.remove(h)
        return h

    def take(self, x, what, fp8=False):
        """An lf_tensor over x's memory (no copy). fp8: x holds E4M3 codes (a torch float8_e4m3fn
        or uint8 tensor, a numpy uint8 array)."""
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor):
            facts = _torch_facts(torch)
            t = x.detach() if x.requires_grad else x
            if facts["signed_views"] and (t.is_neg() or t.is_conj()):
                t = t.resolve_conj().resolve_neg()  # DLPack carries no negative or conjugate bit: its values, copied
            if t.dtype == facts["fp8"]:
                t, fp8 = t.view(torch.uint8), True
            cap = facts["to_dlpack"](t)
        elif hasattr(x, "__dlpack__"):
            try:
                cap = x.__dlpack__()
            except BufferError:
                if type(x).__module__ != "numpy":
                    raise
                return self._take_numpy(x, what, fp8)  # numpy exports no read-only array, bool or swapped bytes
        else:
            raise TypeError("linfuse: %s is a %s, which has no __dlpack__ (numpy arrays and torch tensors do)"
                            % (what, type(x).__name__))
        ptr = _get_pointer(cap, b"dltensor")
        if fp8:
            dl = C.cast(ptr, C.POINTER(_lib.DLManagedTensor)).contents.dl_tensor
            if dl.code == _lib.KDL_UINT and dl.bits == 8:
                dl.code = _lib.KDL_FLOAT8_E4M3FN
        h = C.c_void_p()
        self.check(self.lib.lf_tensor_from_dlpack(C.byref(h), C.c_void_p(ptr)), what)
        _set_name(cap, b"used_dltensor")  # linfuse owns it now
        self.owned.append(h)
        return h

    def _take_numpy(self, a, what, fp8):
        """A numpy array numpy will not export (read-only: a memory-mapped file, a broadcast view;
        or a dtype linfuse then refuses by name) as a DLManagedTensor made here, which holds a
        reference on the array until linfuse runs its deleter. linfuse only reads such arrays."""
        if not a.dtype.isnative:
            raise Error("%s: a %s array with its bytes swapped (big-endian): linfuse reads native float32 and "
                        "float16 (and uint8 E4M3 codes)" % (what, a.dtype))
        if any(st % a.itemsize for st in a.strides):
            raise Error("%s: strides %s are not whole %d-byte elements" % (what, a.strides, a.itemsize))
        n = a.ndim
        code = _NUMPY_CODES.get(a.dtype.kind, 255)
        if fp8 and a.dtype.kind == "u" and a.itemsize == 1:
            code = _lib.KDL_FLOAT8_E4M3FN
        if n > 4:
            raise Error("%s: %d dims: linfuse takes 1 to 4" % (what, n))
        shape, strides = _INT64S[n](*a.shape), _INT64S[n](*(st // a.itemsize for st in a.strides))
        mt = _lib.DLManagedTensor()
        mt.dl_tensor = _lib.DLTensor(a.__array_interface__["data"][0] or 1, _KDL_CPU, 0, n, code, 8 * a.itemsize, 1,
                                     shape, strides, 0)
        mt.deleter = _release_numpy
        addr = C.addressof(mt)
        _HELD[addr] = (a, mt, shape, strides)
        h = C.c_void_p()
        try:
            self.check(self.lib.lf_tensor_from_dlpack(C.byref(h), C.c_void_p(addr)), what)
        except BaseException:
            _HELD.pop(addr, None)  # refused: nothing was taken, no deleter will run
            raise
        self.owned.append(h)
        return h

    def view_t(self, h, what):
        """lf_t(h): the transposed view, a new handle."""
        out = C.c_void_p()
        self.check(self.lib.lf_t(C.byref(out), h), what)
        self.owned.append(out)
        return out


class _Exported:
    """A linfuse tensor handed out through DLPack, for numpy.from_dlpack / torch's from_dlpack."""

    def __init__(self, ptr, device):
        self.ptr, self.device = ptr, device

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return _capsule_new(self.ptr, b"dltensor", _destroy_unused)  # the unversioned form, which every consumer takes


def export(lib, check, h, what):
    """h handed out: (a DLPack-capable object, its DLTensor dtype code). The object holds a
    reference on h's storage, so h may be freed at once."""
    out = C.c_void_p()
    check(lib.lf_tensor_to_dlpack(h, C.byref(out)), what)
    dl = C.cast(out, C.POINTER(_lib.DLManagedTensor)).contents.dl_tensor
    code = dl.code
    if code == _lib.KDL_FLOAT8_E4M3FN:  # as bytes: consumers take uint8 everywhere
        dl.code = _lib.KDL_UINT
    return _Exported(out.value, (dl.device_type, dl.device_id)), code


def to_numpy(lib, check, h, what):
    import numpy as np
    obj, _ = export(lib, check, h, what)
    return np.from_dlpack(obj)


def to_torch(lib, check, h, what):
    """h as a torch tensor on its device (E4M3 codes as float8_e4m3fn where torch has it)."""
    import torch
    obj, code = export(lib, check, h, what)
    t = torch.utils.dlpack.from_dlpack(obj.__dlpack__())
    if code == _lib.KDL_FLOAT8_E4M3FN and _fp8_dtype(torch) is not None:
        t = t.view(_fp8_dtype(torch))
    return t
