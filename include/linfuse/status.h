/* linfuse status codes: every public function returns an lf_status; on failure the calling
 * thread's message (lf_last_error) names the argument and the expected and actual values.
 * Layer: base of everything; knows nothing else. */
#ifndef LINFUSE_STATUS_H
#define LINFUSE_STATUS_H

/* Every function of the public headers carries LF_API: the library is built with hidden
 * visibility, so what is exported is exactly what these headers declare. */
#if defined(LF_BUILDING_MODULE) /* a device module (liblinfuse_cuda.so) exports its entry alone */
#define LF_API
#elif defined(__GNUC__) || defined(__clang__)
#define LF_API __attribute__((visibility("default")))
#else
#define LF_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lf_status {
    LF_OK = 0,
    LF_EINVAL,       /* a bad argument: NULL, out-of-range dim, bad option value */
    LF_ESHAPE,       /* shapes or strides that do not fit the operation */
    LF_EDTYPE,       /* element types that do not fit the operation */
    LF_EDEVICE,      /* wrong device, or a device that is not available */
    LF_ENOMEM,       /* an allocation failed */
    LF_EOVERFLOW,    /* an element or byte count does not fit in 63 bits */
    LF_EUNSUPPORTED, /* a valid request this build or backend cannot do */
    LF_EIO,          /* a file could not be read or written */
    LF_EGUARD,       /* a compiled plan's guard rejected an input */
    LF_STATUS_COUNT
} lf_status;

/* "LF_ESHAPE" and so on; "LF_E?" for values outside the enum. */
LF_API const char *lf_status_name(lf_status s);

/* The message of the last failing call on this thread ("" if none). Valid until the next
 * failing call on the same thread. */
LF_API const char *lf_last_error(void);

/* Forget the last message of this thread. */
LF_API void lf_clear_error(void);

/* The loaded library's version, "MAJOR.MINOR.PATCH" (linfuse/version.h has the headers'). */
LF_API const char *lf_version(void);

#ifdef __cplusplus
}
#endif
#endif
