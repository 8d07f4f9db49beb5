#pragma once
// The live status of a supervised run: the snapshot every sink renders (the collaborators add their
// fields), and its file for the job (GPUMETER_STATUS_FILE, docs/run.md "Spend so far").
#include <cstdint>
#include <string>

#include "guard/run_state.h"

namespace gm::guard {

/// The run's own fields of the status at `now_ns` (spend, burn, budget, progress, forecast, GPUs, MFU).
StatusSnapshot run_snapshot(const RunState& state, std::int64_t now_ns);

/// Writes the status for the job: a temporary file renamed over the last one, so a reader never sees half
/// of it. Failures are ignored: the file is a convenience for the job, never a reason to disturb it.
void write_status_file(const std::string& path, const StatusSnapshot& snapshot, std::int64_t run_id,
                       std::int64_t unix_ms);

}  // namespace gm::guard
