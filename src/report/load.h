#pragma once
// Loading what reports need from the ledger: run references ("42", "last"), a run with its progress,
// and the input of a run's HTML page.
#include <string_view>

#include "catalog/catalog.h"
#include "report/gate.h"
#include "report/html.h"
#include "report/kpi.h"
#include "store/store.h"
#include "util/result.h"

namespace gm::report {

/// A run by reference: a positive integer id or "last". Usage error for other text, not_found (naming the
/// id) when the ledger has no such run.
Result<store::RunRecord> resolve_run(const store::Ledger& ledger, std::string_view ref);

/// Everything a run's HTML page shows, read from the ledger; KPIs computed with `options` and `gpu`, the
/// catalog spec of the run's GPU (null when unknown: no MFU).
Result<RunHtmlInput> load_run_html_input(const store::Ledger& ledger, const store::RunRecord& run,
                                         const KpiOptions& options, const catalog::GpuSpec* gpu);
/// `report RUN --html`: load_run_html_input with the run's GPU from the built-in catalog (MFU's peak), the
/// run report's findings, its own MFU basis (unless `options.params` overrides it) and the rightsizing hint.
/// The runs `refs` name (ids or "last") with their progress, for the scaling study.
Result<std::vector<ScalingInput>> load_scaling_inputs(const store::Ledger& ledger,
                                                      const std::vector<std::string>& refs);
/// One side of `compare`: the run `ref` names (an id or "last") with its progress and serving counters.
Result<CompareSide> load_compare_side(const store::Ledger& ledger, std::string_view ref);
Result<RunHtmlInput> load_run_page(const store::Ledger& ledger, const store::RunRecord& run,
                                   const KpiOptions& options);

}  // namespace gm::report
