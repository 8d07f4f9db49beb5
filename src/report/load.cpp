#include "report/load.h"

#include <charconv>

namespace gm {

Result<RunRecord> resolve_run(const Ledger& ledger, std::string_view ref) {
  if (ref == "last") return ledger.last_run();
  std::int64_t id = 0;
  auto [end, ec] = std::from_chars(ref.data(), ref.data() + ref.size(), id);
  if (ec != std::errc() || end != ref.data() + ref.size() || id <= 0)
    return make_error(ErrorKind::usage, "run '" + std::string(ref) + "': expected a run id (see `gpumeter runs`) or 'last'");
  auto run = ledger.run(id);
  if (!run && run.error().kind == ErrorKind::not_found)
    return make_error(ErrorKind::not_found, "no run " + std::to_string(id) + " in the ledger (see `gpumeter runs`)");
  return run;
}

Result<RunHtmlInput> load_run_html_input(const Ledger& ledger, const RunRecord& run, const KpiOptions& options,
                                         const GpuSpec* gpu) {
  RunHtmlInput in;
  in.run = run;
  GM_TRY(in.samples, ledger.samples(run.id));
  GM_TRY(in.progress, ledger.progress(run.id));
  GM_TRY(in.actions, ledger.actions(run.id));
  in.kpis = compute_kpis(run, in.progress, gpu, options);
  return in;
}

}  // namespace gm
