#pragma once
// The live views of a metered session: the status line of `run` and `attach`, and the objects of attach's
// --json-lines stream (docs/cli.md).
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "guard/session.h"

namespace gm::report {

/// The --target field of the status line: "loss 2.57 → 2.2 at ~step 390, $0.17 in all [$0.14–$0.21]",
/// "loss 2.57 → 2.2: too early to tell".
std::string render_target_field(const guard::TargetStatus& target);
/// The live status as one line of at most `width` columns: the least important fields (GPU details, the
/// forecast interval, $/h, the step) are dropped first; spend, budget left, ETA and STOPPING stay.
std::string render_status_line(const guard::StatusSnapshot& s, std::size_t width);

/// The "started" object of attach --json-lines.
nlohmann::json live_started_json(pid_t pid, std::int64_t run_id, const std::string& socket_path,
                                 std::int64_t start_unix_ms);
/// The "action" object: a guard's action with the spend at that moment.
nlohmann::json live_action_json(const store::ActionRecord& a);
/// The "cell" object: one notebook cell's time, cost and utilization.
nlohmann::json live_cell_json(const store::CellRecord& c);
/// The "interval" object: spend, $/h, budget, forecast, target, per-GPU figures (memory totals by index, when
/// known) and the live findings.
nlohmann::json live_status_json(const guard::StatusSnapshot& s,
                                const std::map<unsigned, std::uint64_t>& memory_total);

}  // namespace gm::report
