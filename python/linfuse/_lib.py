"""The C library seen from Python: ctypes prototypes of the liblinfuse functions this package
calls, the enum values it passes, and the one public struct it holds (lf_nn_gated_mlp). Every
declaration here mirrors one in include/linfuse/*.h; tests/python_test.py checks the enum values
against the library's own names and the struct against lf_nn_gated_mlp_init.

Two handles on one loaded library: `lib` releases the GIL while C runs (the compute calls), and
`lib_gil` keeps it (the calls that may run a DLPack deleter: numpy's deleter drops a Python
reference, which needs the GIL)."""
import ctypes as C

# --- enum values (linfuse/tensor.h, backend.h, nn.h, status.h) ---
DTYPE = {"f32": 0, "bf16": 1, "f16": 2, "f8e4m3": 4}  # lf_dtype
DEVICE_CPU, DEVICE_CUDA = 0, 1  # lf_device
ACT = {"none": 0, "relu": 1, "gelu_tanh": 2, "gelu_erf": 3, "silu": 4}  # lf_act
VARIANT = {"eager": 0, "fused": 1, "gated": 2, "fp8": 3}  # lf_mlp_variant (LF_MLP_FP8 = 3)
STATUS_OK = 0
KDL_FLOAT8_E4M3FN = 10  # DLPack 1.1's kDLFloat8_e4m3fn (linfuse/dlpack.h takes it)
KDL_UINT = 1


# --- DLPack's structs (dlpack/dlpack.h, the version-less DLManagedTensor linfuse takes) ---
class DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device_type", C.c_int32), ("device_id", C.c_int32), ("ndim", C.c_int32),
                ("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16),
                ("shape", C.POINTER(C.c_int64)), ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


DELETER = C.CFUNCTYPE(None, C.c_void_p)


class DLManagedTensor(C.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", C.c_void_p), ("deleter", DELETER)]


# --- the modules (include/linfuse/nn.h): mirrored field for field ---
class NnLinear(C.Structure):
    """lf_nn_linear (include/linfuse/nn.h)."""
    _fields_ = [("in_features", C.c_int64), ("out_features", C.c_int64), ("weight", C.c_void_p), ("bias", C.c_void_p)]


class GatedMlp(C.Structure):
    """lf_nn_gated_mlp (include/linfuse/nn.h), field for field, then spare bytes: the library
    writes the struct it knows (memset of sizeof), so a struct grown in a later header stays
    inside this one until the mirror is updated (the test of the fields read catches a change)."""
    _fields_ = [("dim", C.c_int64), ("hidden", C.c_int64), ("act", C.c_int), ("gate_up", C.c_void_p),
                ("gate", NnLinear), ("up", NnLinear), ("down", NnLinear),
                ("gate_up_q", C.c_void_p), ("gate_up_scale", C.c_void_p), ("down_q", C.c_void_p),
                ("down_scale", C.c_void_p), ("_spare", C.c_uint8 * 256)]


class GatedMlpOpts(C.Structure):
    """lf_nn_gated_mlp_opts (include/linfuse/nn.h)."""
    _fields_ = [("dim", C.c_int64), ("hidden", C.c_int64), ("dtype", C.c_int), ("device", C.c_int), ("act", C.c_int)]


class Rng(C.Structure):
    """lf_rng (include/linfuse/tensor.h)."""
    _fields_ = [("s", C.c_uint64 * 4)]


P = C.c_void_p  # an lf_tensor * (opaque here: only the library reads it)
PP = C.POINTER(C.c_void_p)
MLP = C.POINTER(GatedMlp)
S = C.c_int  # lf_status

# name: (restype, argtypes, keeps the GIL)
_PROTOS = {
    "lf_version": (C.c_char_p, [], False),
    "lf_last_error": (C.c_char_p, [], False),
    "lf_clear_error": (None, [], False),
    "lf_status_name": (C.c_char_p, [S], False),
    "lf_dtype_name": (C.c_char_p, [C.c_int], False),
    "lf_device_name": (C.c_char_p, [C.c_int], False),
    "lf_act_name": (C.c_char_p, [C.c_int], False),
    "lf_mlp_variant_name": (C.c_char_p, [C.c_int], False),
    "lf_mlp_variant_parse": (C.c_int, [C.c_char_p], False),
    # tensors and DLPack (linfuse/tensor.h, linfuse/dlpack.h)
    "lf_tensor_from_dlpack": (S, [PP, P], False),
    "lf_tensor_to_dlpack": (S, [P, PP], False),
    "lf_tensor_free": (None, [P], True),
    "lf_tensor_data": (C.c_void_p, [P], False),
    "lf_tensor_numel": (C.c_int64, [P], False),
    "lf_tensor_device": (C.c_int, [P], False),
    "lf_tensor_device_index": (C.c_int, [P], False),
    "lf_tensor_shares_storage": (C.c_int, [P, P], False),
    "lf_rng_seed": (None, [C.POINTER(Rng), C.c_uint64], False),
    # ops (linfuse/ops.h)
    "lf_t": (S, [PP, P], False),
    "lf_addmm_act": (S, [PP, P, P, P, C.c_int], False),
    "lf_addmm_act_out": (S, [P, P, P, P, C.c_int], False),
    "lf_mm_gated": (S, [PP, P, P, C.c_int, C.c_int64], False),
    "lf_mm_gated_out": (S, [P, P, P, C.c_int, C.c_int64], False),
    "lf_fp8_supported": (S, [C.c_int], False),
    # the gated MLP (linfuse/nn.h); the calls that may free a handle keep the GIL
    "lf_nn_gated_mlp_init": (S, [MLP, C.POINTER(GatedMlpOpts), C.POINTER(Rng)], False),
    "lf_nn_gated_mlp_from_weights": (S, [MLP, P, P, C.c_int], True),
    "lf_nn_gated_mlp_set_fp8_weights": (S, [MLP, P, P, P, P], True),
    "lf_nn_gated_mlp_quantize_fp8": (S, [MLP], True),
    "lf_nn_gated_mlp_workspace": (S, [MLP, C.c_int, C.c_int64, C.POINTER(C.c_size_t)], False),
    "lf_nn_gated_mlp_forward_out": (S, [MLP, C.c_int, P, P, P], False),
    "lf_nn_gated_mlp_forward_raw": (S, [MLP, C.c_int, P, C.c_int64, C.c_int64, P, C.c_int64, P, C.c_size_t,
                                        C.POINTER(C.c_void_p)], False),
    "lf_nn_gated_mlp_forward_variant": (S, [MLP, C.c_int, P, PP], False),
    "lf_nn_gated_mlp_free": (None, [MLP], True),
    # devices and streams (linfuse/backend.h, linfuse/cuda.h)
    "lf_device_available": (C.c_int, [C.c_int], False),
    "lf_device_require": (S, [C.c_int], False),
    "lf_device_select": (S, [C.c_int, C.c_int], False),
    "lf_cuda_set_stream": (S, [C.c_void_p], False),
    "lf_cuda_use_own_stream": (S, [], False),
    "lf_cuda_get_stream": (S, [PP], False),
}


class Lib:
    """The loaded library's functions as attributes (each with its prototype)."""

    def __init__(self, path):
        self.path = path
        released = C.CDLL(path)  # raises OSError with the loader's reason
        held = C.PyDLL(path, handle=released._handle)
        self.handle = released
        for name, (res, args, keep_gil) in _PROTOS.items():
            fn = getattr(held if keep_gil else released, name)
            fn.restype, fn.argtypes = res, args
            setattr(self, name, fn)

    def error(self):
        """The calling thread's last linfuse message."""
        return (self.lf_last_error() or b"").decode("utf-8", "replace")
