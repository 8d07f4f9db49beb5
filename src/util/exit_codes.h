#pragma once
// Exit codes of gpumeter, in one place (documented in docs/cli.md).
#include "util/result.h"

namespace gm::util {

inline constexpr int kExitOk = 0;            ///< success
inline constexpr int kExitFailure = 1;       ///< run-time failure; `compare`: the gate failed
inline constexpr int kExitUsage = 2;         ///< bad flags or arguments
inline constexpr int kExitNoGpuLibrary = 3;  ///< no GPU library (NVML) could be loaded or initialised (gpus, doctor, agent)
inline constexpr int kExitNotFound = 4;      ///< unknown run / GPU / offer / model
inline constexpr int kExitUnavailable = 5;   ///< ledger locked or corrupt, server unreachable
inline constexpr int kExitGuardStop = 86;    ///< run, attach: gpumeter stopped the job (see stopped_by)
inline constexpr int kExitPreempted = 87;    ///< run, attach: stopped on the cloud's preemption notice
inline constexpr int kExitTeamBudgetSpent = 88;  ///< run, attach: a team budget the run matches is spent; not started

/// Maps an error category to its exit code.
inline int exit_code_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage: return kExitUsage;
    case ErrorKind::not_found: return kExitNotFound;
    case ErrorKind::no_gpu_library: return kExitNoGpuLibrary;
    case ErrorKind::unavailable: return kExitUnavailable;
    case ErrorKind::failure: break;
  }
  return kExitFailure;
}

}  // namespace gm::util
