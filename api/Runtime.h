// The runtime as the API gives it to the CLI, tec-bench and the Python package: sessions (run, train,
// checkpoints), plan files, memory reports, the machine report (`tec doctor`) and the process group of data
// parallelism. api/ is their only door
// (tests/unit/check_layers.py); these are the runtime's own types, so a tool without the compiler
// (tec-bench on a GPU machine) includes this and links the runtime alone.
#ifndef TEC_API_RUNTIME_H
#define TEC_API_RUNTIME_H

#include "runtime/Collectives.h"
#include "runtime/Doctor.h"
#include "runtime/MemoryReport.h"
#include "runtime/PlanFile.h"
#include "runtime/Session.h"

#endif
