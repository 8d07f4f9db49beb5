// The fleet report: dollars per namespace / Slurm job / user / GPU over a range, from Prometheus.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "cli/cli.h"
#include "cli/common.h"
#include "report/fleet.h"
#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::cli {

bool wants_fleet_report(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--prometheus" || a.rfind("--prometheus=", 0) == 0) return true;
  }
  return false;
}

int fleet_report(int argc, char** argv) {
  CLI::App app("fleet report from Prometheus: cost by namespace, Slurm job or account, user or GPU", "report");
  std::string url, since = "7d", by = "namespace";
  bool json_out = false;
  app.add_option("--prometheus", url, "Prometheus base URL, e.g. http://prometheus:9090")->required();
  app.add_option("--since", since, "range to report on, ending now (e.g. 24h, 7d)");
  app.add_option("--by", by, "group by namespace, job (Slurm), account (Slurm), user or gpu")
      ->check(CLI::IsMember({"namespace", "job", "user", "gpu"}));
  app.add_flag("--json", json_out, "JSON output");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  auto range_ms = parse_duration_ms(since);
  if (!range_ms) return fail("report", make_error(ErrorKind::usage, "--since '" + since + "': " + range_ms.error().message));
  auto rep = query_fleet_report(url, *range_ms, by);
  if (!rep) return fail("report", rep.error());

  if (json_out) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : rep->rows)
      rows.push_back({{"key", r.key.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.key)},
                      {"cost_usd", r.cost_usd},
                      {"energy_j", json_or_null(r.energy_j)},
                      {"gpu_seconds", json_or_null(r.gpu_seconds)}});
    const nlohmann::json j = {{"by", by},
                              {"since", since},
                              {"range_s", *range_ms / 1000},
                              {"device_cost_usd", rep->device_cost_usd},
                              {"owner_cost_usd", rep->owner_cost_usd},
                              {"unallocated_cost_usd", rep->unallocated_cost_usd},
                              {"idle_cost_usd", rep->idle_cost_usd},
                              {"rows", rows}};
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("Fleet GPU cost, last %s, by %s (from %s)\n\n", since.c_str(), by.c_str(), url.c_str());
  TextTable t;
  const char* title = by == "job" ? "slurm job" : by.c_str();
  t.header({title, "cost", "share", "energy", "GPU-hours"},
           {TextTable::Align::left, TextTable::Align::right, TextTable::Align::right, TextTable::Align::right,
            TextTable::Align::right});
  const double base = by == "gpu" ? rep->device_cost_usd : rep->owner_cost_usd;
  for (const auto& r : rep->rows)
    t.row({r.key.empty() ? "(none)" : r.key, format_usd(r.cost_usd),
           base > 0 ? fmt::format("{:.1f} %", usd_share_pct(r.cost_usd, base)) : "n/a",
           r.energy_j ? fmt::format("{:.4f} kWh", *r.energy_j / 3.6e6) : "n/a",
           r.gpu_seconds ? fmt::format("{:.4f}", *r.gpu_seconds / 3600.0) : "n/a"});
  std::fputs(t.render().c_str(), stdout);
  std::printf("\nGPU cost            %s\n", format_usd(rep->device_cost_usd).c_str());
  std::printf("  owners            %s\n", format_usd(rep->owner_cost_usd).c_str());
  std::printf("  unallocated       %s\n", format_usd(rep->unallocated_cost_usd).c_str());
  std::printf("idle (in owners)    %s\n", format_usd(rep->idle_cost_usd).c_str());
  return kExitOk;
}

}  // namespace gm::cli
