#!/usr/bin/env python3
"""The Python frames `linfuse profile` puts on a kernel (src/capture/python_frames.c), read in a real
interpreter: through ctypes.PyDLL (the GIL held, as a capture inside Python code), through
ctypes.CDLL (the GIL let go around the call, as PyTorch's ops do: taken again for the read), from
a Python thread, from a thread Python does not know (no frames, no hang), and inside a
subinterpreter (no hang, no crash). Each read names this
file, the function and its line, innermost first.
usage: python_frames_test.py MODULE.so"""
import ctypes
import sys
import threading

checks = fails = 0


def check(ok, what):
    global checks, fails
    checks += 1
    fails += not ok
    print("%s: %s" % ("ok  " if ok else "FAIL", what))


def call(fn):
    buf = ctypes.create_string_buffer(4096)
    n = fn(buf, ctypes.sizeof(buf))
    return n, buf.value.decode()


def innermost_here(text, function):
    """The innermost frames are call() and then function, both of this file, with their lines."""
    lines = text.split("\n")
    return len(lines) >= 2 and all(l.startswith(__file__ + "(") for l in lines[:2]) and \
        lines[0].endswith("): call") and lines[1].endswith("): " + function)


def held(lib):
    return call(lib.lf_test_frames)


def released(lib):
    return call(lib.lf_test_frames)


def main():
    path = sys.argv[1]
    with_gil, without = ctypes.PyDLL(path), ctypes.CDLL(path)
    for lib in (with_gil, without):
        lib.lf_test_frames.argtypes = lib.lf_test_frames_foreign_thread.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    n, text = held(with_gil)
    check(n >= 3 and innermost_here(text, "held") and text.split("\n")[2].endswith("): main"),
          "GIL held: %d frames, innermost call(), held(), main(): %r" % (n, text[:200]))
    n, text = released(without)
    check(n >= 3 and innermost_here(text, "released"), "GIL let go: taken again, %d frames: %r" % (n, text[:200]))
    got = []
    t = threading.Thread(target=lambda: got.append(released(without)))
    t.start()
    t.join(30)
    check(not t.is_alive() and got and got[0][0] >= 1 and "<lambda>" in got[0][1],
          "a Python thread's own frames: %r" % (got[0][1][:200] if got else None))
    n, text = call(without.lf_test_frames_foreign_thread)
    check(n == 0 and text == "", "a thread Python does not know: none (%d, %r)" % (n, text))
    # a thread of Python's that holds the GIL while another reads: that one waits, then reads
    stop = threading.Event()
    spin = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)])
    spin.start()
    n, text = released(without)
    stop.set()
    spin.join(30)
    check(n >= 2 and innermost_here(text, "released"), "read while another thread runs Python: %r" % text[:120])
    # once a subinterpreter exists (PyGILState_Check then says yes on every thread): reads inside it,
    # with its GIL held and let go, neither hang nor crash; the main thread's still name its frames
    try:
        import _xxsubinterpreters as sub  # 3.8 - 3.12
    except ImportError:
        try:
            import _interpreters as sub  # 3.13
        except ImportError:
            sub = None
    if sub is not None:
        sid = sub.create()
        code = ("import ctypes\n"
                "for lib in (ctypes.PyDLL(%r), ctypes.CDLL(%r)):\n"
                "    lib.lf_test_frames.argtypes = [ctypes.c_char_p, ctypes.c_size_t]\n"
                "    lib.lf_test_frames(ctypes.create_string_buffer(4096), 4096)\n") % (path, path)
        sub.run_string(sid, code)
        sub.destroy(sid)
        n, text = released(without)
        check(n >= 3 and innermost_here(text, "released"), "after a subinterpreter: %d frames" % n)
    print("python_frames: %d checks, %d failed" % (checks, fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
