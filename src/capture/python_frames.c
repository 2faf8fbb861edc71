/* The innermost Python frames of the calling thread, read through CPython's own C API, found in the
 * running process (dlsym: a process without Python has none of these symbols, and gets no frames).
 * Only while the thread runs Python (its thread state attached: it holds the GIL) or, for a thread
 * of the main interpreter that let the GIL go for a call into C (PyTorch's ops release it around
 * their dispatch), after taking it again, as any C extension does; a thread Python does not know,
 * or one of a subinterpreter that let its GIL go, is given no frames. The
 * read happens where a CUDA call begins, before CUDA takes a lock of its own (graph_nodes.c), so
 * taking the GIL there cannot wait on a thread that waits on CUDA. The public calls it uses are
 * in every CPython from 3.9 on. Hand-written because no library reads a live interpreter's frames
 * from C without linking that interpreter. Layer: capture/. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "capture/capture.h"

typedef struct py_object py_object; /* PyObject, PyFrameObject, PyCodeObject, PyThreadState */

static struct {
    int (*is_initialized)(void);
    int (*is_finalizing)(void);
    py_object *(*current)(void); /* the thread's attached state: it runs Python now, or NULL */
    py_object *(*this_thread_state)(void);
    py_object *(*state_interp)(py_object *tstate);
    py_object *(*main_interp)(void);
    int (*gil_ensure)(void);
    void (*gil_release)(int);
    py_object *(*thread_frame)(py_object *tstate);
    py_object *(*frame_back)(py_object *frame);
    py_object *(*frame_code)(py_object *frame);
    int (*frame_line)(py_object *frame);
    py_object *(*get_attr)(py_object *o, const char *name);
    const char *(*utf8)(py_object *s);
    void (*inc_ref)(py_object *o);
    void (*dec_ref)(py_object *o);
    void (*err_fetch)(py_object **type, py_object **value, py_object **tb);
    void (*err_restore)(py_object *type, py_object *value, py_object *tb);
    int found;
} py;

static pthread_once_t found_once = PTHREAD_ONCE_INIT;

static void *sym(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

/* The interpreter's entry points, looked up once; found only when every one needed is there. */
static void find_python(void)
{
    *(void **)&py.is_initialized = sym("Py_IsInitialized");
    *(void **)&py.is_finalizing = sym("Py_IsFinalizing"); /* 3.13 */
    if (!py.is_finalizing)
        *(void **)&py.is_finalizing = sym("_Py_IsFinalizing");
    *(void **)&py.current = sym("PyThreadState_GetUnchecked"); /* 3.13 */
    if (!py.current)
        *(void **)&py.current = sym("_PyThreadState_UncheckedGet"); /* 3.9 - 3.12 */
    *(void **)&py.this_thread_state = sym("PyGILState_GetThisThreadState");
    *(void **)&py.state_interp = sym("PyThreadState_GetInterpreter");
    *(void **)&py.main_interp = sym("PyInterpreterState_Main");
    *(void **)&py.gil_ensure = sym("PyGILState_Ensure");
    *(void **)&py.gil_release = sym("PyGILState_Release");
    *(void **)&py.thread_frame = sym("PyThreadState_GetFrame");
    *(void **)&py.frame_back = sym("PyFrame_GetBack");
    *(void **)&py.frame_code = sym("PyFrame_GetCode");
    *(void **)&py.frame_line = sym("PyFrame_GetLineNumber");
    *(void **)&py.get_attr = sym("PyObject_GetAttrString");
    *(void **)&py.utf8 = sym("PyUnicode_AsUTF8");
    *(void **)&py.inc_ref = sym("Py_IncRef");
    *(void **)&py.dec_ref = sym("Py_DecRef");
    *(void **)&py.err_fetch = sym("PyErr_Fetch");
    *(void **)&py.err_restore = sym("PyErr_Restore");
    py.found = py.is_initialized && py.current && py.this_thread_state && py.state_interp && py.main_interp &&
               py.gil_ensure && py.gil_release && py.thread_frame && py.frame_back && py.frame_code && py.frame_line &&
               py.get_attr && py.utf8 && py.inc_ref && py.dec_ref && py.err_fetch && py.err_restore;
}

/* A code object's "file" and "function" as one text, "file\0function", kept per code object (read
 * once: attribute lookups cost more than the rest of a frame). The cache holds a reference on each
 * code object, so an address is never another's. Its own lock: interpreters with a GIL each, and
 * free-threaded builds, run Python on several threads at once. */
static pthread_mutex_t codes_lock = PTHREAD_MUTEX_INITIALIZER;
enum { CODES = 4096, CODE_TEXT = 320 };
static struct {
    py_object *code;
    char text[CODE_TEXT];
} codes[CODES];

static const char *code_text(py_object *code)
{
    size_t h = ((uintptr_t)code >> 4) * 0x9e3779b97f4a7c15ull % CODES;
    for (int probe = 0; probe < 8; probe++, h = (h + 1) % CODES) {
        if (codes[h].code == code)
            return codes[h].text;
        if (codes[h].code)
            continue;
        py_object *file = py.get_attr(code, "co_filename"), *fn = py.get_attr(code, "co_name");
        const char *f = file ? py.utf8(file) : NULL, *n = fn ? py.utf8(fn) : NULL;
        int w = snprintf(codes[h].text, CODE_TEXT, "%s", f ? f : "?");
        if (w >= 0 && w < CODE_TEXT - 1)
            snprintf(codes[h].text + w + 1, (size_t)(CODE_TEXT - w - 1), "%s", n ? n : "?");
        else
            codes[h].text[CODE_TEXT - 2] = '\0', codes[h].text[CODE_TEXT - 1] = '\0';
        if (file)
            py.dec_ref(file);
        if (fn)
            py.dec_ref(fn);
        py.inc_ref(code);
        codes[h].code = code;
        return codes[h].text;
    }
    return NULL; /* a full neighbourhood: this frame is said as unknown */
}

/* The frames of tstate, the calling thread's, attached to its interpreter. */
static int read_frames(py_object *tstate, char *buf, size_t cap, int depth)
{
    py_object *et, *ev, *tb; /* an exception in flight stays as it was */
    py.err_fetch(&et, &ev, &tb);
    py_object *f = py.thread_frame(tstate);
    size_t used = 0;
    int n = 0;
    buf[0] = '\0';
    while (f && n < depth) {
        py_object *code = py.frame_code(f);
        const int line = py.frame_line(f);
        pthread_mutex_lock(&codes_lock);
        const char *t = code ? code_text(code) : NULL;
        int w = t ? snprintf(buf + used, cap - used, "%s%s(%d): %s", n ? "\n" : "", t, line, t + strlen(t) + 1)
                  : snprintf(buf + used, cap - used, "%s?(%d): ?", n ? "\n" : "", line);
        pthread_mutex_unlock(&codes_lock);
        if (code)
            py.dec_ref(code);
        if (w < 0 || (size_t)w >= cap - used) {
            buf[used] = '\0'; /* the frame that does not fit is left out whole */
            py.dec_ref(f);
            f = NULL;
            break;
        }
        used += (size_t)w, n++;
        py_object *back = py.frame_back(f);
        py.dec_ref(f);
        f = back;
    }
    if (f)
        py.dec_ref(f);
    py.err_restore(et, ev, tb);
    return n;
}

int lfc_python_frames(char *buf, size_t cap, int depth)
{
    if (!buf || cap < 2)
        return 0;
    buf[0] = '\0';
    pthread_once(&found_once, find_python);
    if (!py.found || !py.is_initialized() || (py.is_finalizing && py.is_finalizing()))
        return 0;
    /* A thread running Python now (its state attached) reads its own frames as it is: it holds its
     * interpreter's GIL, or runs free-threaded. PyGILState_Check cannot tell this: once any
     * subinterpreter exists it answers yes on every thread. */
    py_object *attached = py.current();
    if (attached)
        return read_frames(attached, buf, cap, depth);
    /* A thread that let the GIL go around a call into C takes it again, as any C extension does,
     * only where its state is the main interpreter's: PyGILState_Ensure knows no other (it would
     * wait on itself, or abort, for a thread of a subinterpreter). A thread Python does not know
     * gets none. */
    py_object *own = py.this_thread_state();
    if (!own || py.state_interp(own) != py.main_interp())
        return 0;
    const int state = py.gil_ensure();
    const int n = read_frames(py.current() ? py.current() : own, buf, cap, depth);
    py.gil_release(state);
    return n;
}
