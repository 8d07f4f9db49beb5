// gpumeter runs: the ledger's runs.
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/common.h"
#include "report/multi.h"
#include "report/run_report.h"
#include "store/store.h"
#include "util/exit_codes.h"
#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

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
    return kExitOk;
  }
  if (!ledger) return fail("runs", ledger.error());
  RunFilter filter;
  filter.limit = limit;
  auto runs = (*ledger)->runs(filter);
  if (!runs) return fail("runs", runs.error());
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : *runs) {
      arr.push_back({{"run_id", r.id},
                     {"command", r.command},
                     {"user", r.user},
                     {"host", r.host},
                     {"labels", r.labels},
                     {"start_unix_ms", r.start_unix_ms},
                     {"end_unix_ms", json_or_null(r.end_unix_ms)},
                     {"status", r.status},
                     {"status_text", describe_status(r)},
                     {"exit_code", json_or_null(r.exit_code)},
                     {"stopped_by", json_or_null(r.stopped_by)},
                     {"wall_s", static_cast<double>(r.wall_ms) / 1000.0},
                     {"billed_s", r.billed_s},
                     {"cost_usd", micros_to_usd(r.cost_micros)},
                     {"price_usd_per_gpu_hour", micros_to_usd(r.price_micros_per_gpu_hour)},
                     {"price_source", r.price_source},
                     {"gpus_allocated", r.gpus_allocated},
                     {"gpus_used", r.gpus_used},
                     {"gpu_model", r.gpu_model}});
    }
    std::printf("%s\n", arr.dump(2).c_str());
    return kExitOk;
  }
  if (runs->empty()) {
    std::printf("no runs recorded yet (ledger %s)\n",
                (*ledger)->describe().c_str());
    return kExitOk;
  }
  std::printf("%6s  %-19s  %-14s  %-22s  %10s  %12s  %4s  %-18s  %s\n", "RUN", "STARTED (UTC)", "HOST", "STATUS",
              "WALL", "COST", "GPUS", "LABELS", "COMMAND");
  for (const auto& r : *runs) {
    std::string labels;
    for (const auto& [k, v] : r.labels) labels += (labels.empty() ? "" : ",") + k + "=" + v;
    if (labels.empty()) labels = "-";
    std::printf("%6lld  %-19s  %-14s  %-22s  %10s  %12s  %4zu  %-18s  %s\n", static_cast<long long>(r.id),
                format_time_utc(r.start_unix_ms).c_str(), shorten_middle(r.host.empty() ? "-" : r.host, 14).c_str(),
                describe_status(r).c_str(),
                format_duration_s(static_cast<double>(r.wall_ms) / 1000.0).c_str(),
                r.price_source == "none" ? "no price" : format_usd(micros_to_usd(r.cost_micros)).c_str(),
                r.gpus_allocated.size(), shorten_middle(labels, 18).c_str(), r.command.c_str());
  }
  return kExitOk;
}

}  // namespace gm::cli
