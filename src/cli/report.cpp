#include "cli/cli.h"
#include "cli/report_run.h"

namespace gm::cli {

int cmd_report(int argc, char** argv) { return single_run_report(argc, argv); }

}  // namespace gm::cli
