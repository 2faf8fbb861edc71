/* linfuse's version, for programs that build against it: the macros are the headers' version,
 * lf_version() the library's that is loaded (linfuse/status.h). The build reads the version from
 * here. ABI: until 1.0 every minor version may change the ABI, so the library's soname carries
 * both (liblinfuse.so.0.2); from 1.0 on, the soname carries the major version, which changes
 * whenever a public function is removed or changes its arguments, or a public struct or enum
 * changes its layout; a minor version only adds. Layer: base. */
#ifndef LINFUSE_VERSION_H
#define LINFUSE_VERSION_H

#define LF_VERSION_MAJOR 0
#define LF_VERSION_MINOR 2
#define LF_VERSION_PATCH 0
/* One number that grows with every release: 10000 * major + 100 * minor + patch. */
#define LF_VERSION_NUMBER (LF_VERSION_MAJOR * 10000 + LF_VERSION_MINOR * 100 + LF_VERSION_PATCH)

#endif
