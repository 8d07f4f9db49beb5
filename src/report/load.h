#pragma once
// Loading what reports need from the ledger: run references ("42", "last"), a run with its progress,
// and the input of a run's HTML page.
#include <string_view>

#include "catalog/catalog.h"
#include "report/html.h"
#include "report/kpi.h"
#include "store/store.h"
#include "util/result.h"

namespace gm {

/// A run by reference: a positive integer id or "last". Usage error for other text, not_found (naming the
/// id) when the ledger has no such run.
Result<RunRecord> resolve_run(const Ledger& ledger, std::string_view ref);

/// Everything a run's HTML page shows, read from the ledger; KPIs computed with `options` and `gpu`, the
/// catalog spec of the run's GPU (null when unknown: no MFU).
Result<RunHtmlInput> load_run_html_input(const Ledger& ledger, const RunRecord& run, const KpiOptions& options,
                                         const GpuSpec* gpu);

}  // namespace gm
