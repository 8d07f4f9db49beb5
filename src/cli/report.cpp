#include "cli/cli.h"
#include "cli/report_fleet.h"
#include "cli/report_multi.h"
#include "cli/report_run.h"
#include "util/exit_codes.h"

namespace gm::cli {

int cmd_report(int argc, char** argv) {
  if (wants_fleet_report(argc, argv)) return fleet_report(argc, argv);
  if (wants_multi_run_report(argc, argv)) return multi_run_report(argc, argv);
  if (wants_run_html_report(argc, argv)) return run_html_report(argc, argv);
  return single_run_report(argc, argv);
}

}  // namespace gm::cli
