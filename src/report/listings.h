#pragma once
// Listings over the ledger and the fleet: `runs`, `budget list`, the fleet report from Prometheus and the
// scaling study of `report --scaling`, as text tables and JSON documents.
#include <cstdint>
#include <string>
#include <vector>

#include "guard/team_budget.h"
#include "report/fleet.h"
#include "report/kpi.h"
#include "store/store.h"

namespace gm::report {

/// `runs --json`: one object per run (money in USD, null where unknown).
std::string render_runs_json(const std::vector<store::RunRecord>& runs);
/// `runs`: the table, or "no runs recorded yet (ledger LEDGER)".
std::string render_runs_text(const std::vector<store::RunRecord>& runs, const std::string& ledger);
/// `budget list --json`: each budget with its spend, remainder and runs this period.
std::string render_budgets_json(const std::vector<guard::TeamBudgetStatus>& statuses);
/// `budget list`: the table, or how to set one.
std::string render_budgets_text(const std::vector<guard::TeamBudgetStatus>& statuses);
/// `report --prometheus ... --json`: the groups and the totals over `range_ms`.
std::string render_fleet_json(const FleetReport& rep, const std::string& by, const std::string& since,
                              std::int64_t range_ms);
/// `report --prometheus ...`: the title, the table of groups with their share, and the totals.
std::string render_fleet_text(const FleetReport& rep, const std::string& by, const std::string& since,
                              const std::string& url);
/// `report --scaling ... --json`: the unit and one row per run.
std::string render_scaling_json(const ScalingStudy& study);
/// `report --scaling ...`: speedup, efficiency and cost per unit against the run with the fewest GPUs.
std::string render_scaling_text(const ScalingStudy& study);

}  // namespace gm::report
