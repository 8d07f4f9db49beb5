// gpumeter report RUN|last [--json|--csv]: one run's report (text, JSON, CSV).
#include <cstdio>

#include "catalog/catalog.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "report/run_report.h"
#include "store/store.h"
#include "util/exit_codes.h"

namespace gm::cli {

int single_run_report(int argc, char** argv) {
  CLI::App app{"Report on a run from the ledger", "report"};
  std::string which = "last";
  bool json = false, csv = false;
  std::optional<std::string> ledger_path;
  app.add_option("run", which, "run id, or 'last' (default)");
  auto* j = app.add_flag("--json", json, "JSON output");
  auto* c = app.add_flag("--csv", csv, "CSV output");
  j->excludes(c);
  app.add_option("--ledger", ledger_path,
                 "ledger file (default $GPUMETER_LEDGER or $XDG_DATA_HOME/gpumeter/ledger.db)");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  std::optional<std::int64_t> id;
  if (which != "last") {
    if (which.empty() || which.find_first_not_of("0123456789") != std::string::npos)
      return fail("report", make_error(ErrorKind::usage,
                                       "run '" + which + "': expected a run id (a number) or 'last'"));
    id = std::stoll(which);
  }
  auto ledger = open_ledger_for_reading(ledger_path);
  if (!ledger) return fail("report", ledger.error());
  if (!id) {
    auto last = (*ledger)->last_run();
    if (!last) return fail("report", last.error());
    id = last->id;
  }
  auto catalog = catalog::Catalog::builtin();
  const catalog::Catalog* cat = catalog ? &*catalog : nullptr;
  auto report = report::load_run_report(**ledger, *id, cat);
  if (!report) return fail("report", report.error());
  if (json)
    std::fputs(report::render_run_report_json(*report).c_str(), stdout);
  else if (csv)
    std::fputs(report::render_run_report_csv(*report).c_str(), stdout);
  else
    std::fputs(report::render_run_report_text(*report).c_str(), stdout);
  return util::kExitOk;
}

}  // namespace gm::cli
