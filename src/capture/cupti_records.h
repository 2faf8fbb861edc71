/* What the collector (cupti_collect.c) asks of cupti_records.c: CUPTI's records and callback ids
 * in the collector's terms. Layer: capture/. */
#ifndef LF_CAPTURE_CUPTI_RECORDS_H
#define LF_CAPTURE_CUPTI_RECORDS_H

#include <cupti.h>

#include "capture/capture.h"

/* A call's name for its callback id ("cudaLaunchKernel", CUPTI's "_v7000" dropped), kept per id;
 * NULL for an id CUPTI does not name. */
const char *lfc_api_name(int driver, uint32_t cbid);
/* One CUPTI record as an lfc_rec (a name may point into buf); 0 for the kinds not kept. */
int lfc_convert(const CUpti_Activity *r, lfc_rec *o, char *buf, size_t cap);

#endif
