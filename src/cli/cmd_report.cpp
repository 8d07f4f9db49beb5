#include <cstdio>

#include "cli/cli.h"
#include "cli/common.h"
#include "util/exit_codes.h"

namespace gm::cli {
namespace {

/// `report --help` without a mode's flag: every mode with all its options, so that none is found only by
/// guessing a flag first.
int report_help() {
  std::fputs(
      "gpumeter report: one run, many runs, one run as an HTML page, or the fleet from Prometheus.\n"
      "The flags choose the mode:\n"
      "  gpumeter report [RUN] [--json | --csv]                  one run of the ledger (default: the last)\n"
      "  gpumeter report [RUN] --html FILE                       one run as a page with charts\n"
      "  gpumeter report --since 7d [--until ..] [--by ..]       many runs (--since, --until, --by, "
      "--daily,\n"
      "                                                          --date or --scaling selects this mode)\n"
      "  gpumeter report --prometheus URL [--since ..] [--by ..] the fleet, from what the agents export\n",
      stdout);
  int rc = print_mode_help("One run", single_run_report, {"report", "--help"});
  if (rc == util::kExitOk)
    rc = print_mode_help("One run as an HTML page", run_html_report, {"report", "--html", "FILE", "--help"});
  if (rc == util::kExitOk)
    rc = print_mode_help("Many runs", multi_run_report, {"report", "--since", "7d", "--help"});
  if (rc == util::kExitOk)
    rc = print_mode_help("The fleet (Prometheus)", fleet_report, {"report", "--prometheus", "URL", "--help"});
  return rc;
}

}  // namespace

int cmd_report(int argc, char** argv) {
  if (wants_fleet_report(argc, argv)) return fleet_report(argc, argv);
  if (wants_multi_run_report(argc, argv)) return multi_run_report(argc, argv);
  if (wants_run_html_report(argc, argv)) return run_html_report(argc, argv);
  if (help_requested(argc, argv)) return report_help();
  return single_run_report(argc, argv);
}

}  // namespace gm::cli
