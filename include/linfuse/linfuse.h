/* Everything linfuse offers, in one include: tensors and DLPack, the ops, the modules (Linear, the
 * gated MLP) and checkpoints, compile mode, the devices and their settings, communicators, the
 * profiler, and the trace tools that read any Kineto-schema trace. Link with -llinfuse
 * (pkg-config linfuse, or CMake's find_package(linfuse) and linfuse::linfuse). */
#ifndef LINFUSE_LINFUSE_H
#define LINFUSE_LINFUSE_H

#include "linfuse/version.h"
#include "linfuse/status.h"
#include "linfuse/settings.h"
#include "linfuse/tensor.h"
#include "linfuse/dlpack.h"
#include "linfuse/backend.h"
#include "linfuse/cpu.h"
#include "linfuse/cuda.h"
#include "linfuse/ops.h"
#include "linfuse/nn.h"
#include "linfuse/safetensors.h"
#include "linfuse/compile.h"
#include "linfuse/dist.h"
#include "linfuse/profiler.h"
#include "linfuse/trace.h"

#endif
