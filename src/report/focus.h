#pragma once
// FOCUS 1.x export (FinOps Open Cost and Usage Specification): one CSV row per run and allocated GPU over
// the run's charge period, so finance tools ingest measured GPU cost. Costs are split from the run's integer
// micro-dollars, so Σ BilledCost over the rows equals the multi-run report's total exactly.
#include <string>
#include <vector>

#include "report/multi.h"
#include "store/store.h"
#include "util/result.h"

namespace gm::report {

/// The FOCUS columns, in file order.
const std::vector<std::string>& focus_columns();
/// FOCUS CSV (header + rows) of the runs `options` selects (the same runs as build_multi_report).
Result<std::string> render_focus_csv(const store::Ledger& ledger, const MultiOptions& options);

}  // namespace gm::report
