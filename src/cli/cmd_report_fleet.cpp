// The fleet report: dollars per namespace / Slurm job / user / GPU over a range, from Prometheus.
#include <cstdio>
#include <string_view>

#include "cli/cli.h"
#include "cli/common.h"
#include "report/fleet.h"
#include "report/listings.h"
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
  CLI::App app("fleet report from Prometheus: cost by namespace, Slurm job or account, user or GPU",
               "report");
  std::string url, since = "7d", by = "namespace";
  bool json_out = false;
  app.add_option("--prometheus", url, "Prometheus base URL, e.g. http://prometheus:9090")->required();
  app.add_option("--since", since, "range to report on, ending now (e.g. 24h, 7d)");
  app.add_option("--by", by, "group by namespace, job (Slurm), account (Slurm), user or gpu")
      ->check(CLI::IsMember({"namespace", "job", "user", "gpu"}));
  app.add_flag("--json", json_out, "JSON output");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  auto range_ms = util::parse_duration_ms(since);
  if (!range_ms)
    return fail("report",
                make_error(ErrorKind::usage, "--since '" + since + "': " + range_ms.error().message));
  auto rep = report::query_fleet_report(url, *range_ms, by);
  if (!rep) return fail("report", rep.error());

  const std::string out = json_out ? report::render_fleet_json(*rep, by, since, *range_ms)
                                   : report::render_fleet_text(*rep, by, since, url);
  std::fputs(out.c_str(), stdout);
  return util::kExitOk;
}

}  // namespace gm::cli
