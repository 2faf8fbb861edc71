/* The injection library's two halves: CUPTI (inject_cupti.c: buffers, records, the GPUs'
 * properties) and the process's life (lifecycle.c: the entry points the driver and NVTX call,
 * settings, the helper thread, exit and signals, the trace file). Layer: inject/. */
#ifndef LF_INJECT_RUN_H
#define LF_INJECT_RUN_H

#include <stddef.h>

#include "inject/inject.h"

/* Register CUPTI's buffer callbacks; records go to s (kernels_only: device work and NVTX only).
 * 0, or -1 with the reason in why. */
int lfi_cupti_start(lfi_session *s, int kernels_only, char *why, size_t cap);
/* Turn recording on or off: the activity kinds and the calls worth a row. */
void lfi_cupti_enable(int on);
/* Hand every buffer CUPTI has filled to the session (the helper thread does so as they come). */
void lfi_cupti_drain(void);
/* Everything still in CUPTI's buffers, the unfinished ones too, into the session. */
void lfi_cupti_flush(void);
/* Records CUPTI dropped (no buffer to put them in, or a device buffer full). */
int64_t lfi_cupti_dropped(void);
/* Buffers another CUPTI client in the process took (after lfi_cupti_flush): their records are lost. */
int64_t lfi_cupti_buffers_taken(void);
/* Now on the records' clock. */
int64_t lfi_cupti_now(void);
/* Ask the driver for the GPUs' properties, once it has started: 1 when known (or there is no
 * GPU to ask about), 0 to ask again later. */
int lfi_cupti_devices(void);
/* Kineto's deviceProperties array (NULL when not known) and multiprocessors per device. */
const char *lfi_cupti_properties(void);
const int *lfi_cupti_sms(int *n);
/* lfi_meta's occupancy and demangle hooks. */
int lfi_cupti_occupancy(void *ctx, const lfi_rec *k, double blocks_per_sm);
char *lfi_cupti_demangle(const char *name);
/* A file descriptor that becomes readable when CUPTI has handed a buffer over. */
int lfi_cupti_ready_fd(void);

#endif
