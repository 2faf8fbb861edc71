"""linfuse from Python: the C library's Linear and gated MLP on numpy arrays and torch tensors
(CPU and CUDA) through DLPack, without copies; `linfuse.torch` adds custom ops for torch.compile
and CUDA graphs, and one call that patches a transformers model's MLPs (docs/python.md).

Pure Python over liblinfuse (ctypes). The library is found in this order, and the first found is
the one used (`library_path`, `library_source` say which):
  1. LINFUSE_LIBRARY, when set: that file and no other (a failure to load it is an error);
  2. next to this package's files (a copy placed in python/linfuse/);
  3. where `cmake --install` put it (the prefix's libdir, recorded in _install.py at install).
Importing linfuse imports neither numpy nor torch."""
import os as _os

from . import _lib

__version__ = "0.2.0"  # the package's; library_version() is the loaded library's
__all__ = ["Error", "linear", "gated_gemm", "gated_mlp", "GatedMlp", "quantize_fp8", "library_version", "library_path",
           "library_source", "Fp8FallbackWarning"]


class Error(RuntimeError):
    """A call linfuse refused or could not run: linfuse's own message (what and why), and its
    status (status_name: "LF_ESHAPE", "LF_EDTYPE", ...)."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status
        self.status_name = None


class Fp8FallbackWarning(UserWarning):
    """The fp8 variant ran as the gated one: the device has no FP8 GEMM (the CPU, a GPU before
    Hopper); the message says why."""


def _candidates():
    here = _os.path.dirname(_os.path.abspath(__file__))
    env = _os.environ.get("LINFUSE_LIBRARY")
    if env:
        return [("LINFUSE_LIBRARY", env)]
    found = []
    for name in sorted(_os.listdir(here)):
        if name.startswith("liblinfuse.so"):
            found.append(("next to the package", _os.path.join(here, name)))
    try:
        from . import _install  # written by cmake --install: where the library went, relative to here
        found.append(("the install's libdir", _os.path.normpath(_os.path.join(here, _install.LIBDIR, _install.SONAME))))
    except ImportError:
        pass
    return found


def _load():
    tried = []
    candidates = _candidates()
    for source, path in candidates:
        if not _os.path.exists(path):
            tried.append("%s (%s): no such file" % (path, source))
            continue
        try:
            return _lib.Lib(path), path, source
        except OSError as e:
            tried.append("%s (%s): %s" % (path, source, e))
        except AttributeError as e:  # a library without a function this package calls: another version
            tried.append("%s (%s): not this package's library (%s)" % (path, source, e))
    if not candidates:
        tried.append("LINFUSE_LIBRARY is not set, no liblinfuse.so* lies next to the package and it was not "
                     "installed by cmake --install (no _install.py)")
    raise ImportError("linfuse: no usable liblinfuse: " + "; ".join(tried) +
                      " (set LINFUSE_LIBRARY=/path/to/liblinfuse.so, e.g. build/liblinfuse.so)")


lib, library_path, library_source = _load()


def library_version():
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return lib.lf_version().decode()


def check(status, what):
    """Raise Error with linfuse's message when status is not LF_OK."""
    if status != _lib.STATUS_OK:
        e = Error("%s: %s" % (what, lib.error()), status)
        e.status_name = lib.lf_status_name(status).decode()
        raise e


from .ops import GatedMlp, gated_gemm, gated_mlp, linear, quantize_fp8  # noqa: E402  (they use lib, check)
