// gpumeter runs: the ledger's runs.
#include <cstdio>

#include "cli/cli.h"
#include "cli/common.h"
#include "report/listings.h"
#include "store/store.h"

namespace gm::cli {

int cmd_runs(int argc, char** argv) {
  CLI::App app{"List the runs recorded in the ledger, newest first", "runs"};
  bool json = false;
  std::optional<std::string> ledger_path;
  std::optional<std::size_t> limit;
  app.add_flag("--json", json, "machine-readable output");
  app.add_option("--ledger", ledger_path,
                 "ledger file (default $GPUMETER_LEDGER or $XDG_DATA_HOME/gpumeter/ledger.db)");
  app.add_option("--limit,-n", limit, "at most this many runs");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  auto ledger = open_ledger_for_reading(ledger_path);
  if (!ledger && ledger.error().kind == ErrorKind::not_found && !ledger_path && !json) {
    std::printf("no runs recorded yet (%s)\n", ledger.error().message.c_str());
    return util::kExitOk;
  }
  if (!ledger) return fail("runs", ledger.error());
  store::RunFilter filter;
  filter.limit = limit;
  auto runs = (*ledger)->runs(filter);
  if (!runs) return fail("runs", runs.error());
  std::fputs((json ? report::render_runs_json(*runs) : report::render_runs_text(*runs, (*ledger)->describe()))
                 .c_str(),
             stdout);
  return util::kExitOk;
}

}  // namespace gm::cli
