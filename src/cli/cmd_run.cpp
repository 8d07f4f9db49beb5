// gpumeter run: a metered job with a live cost line, forecast, budget guard, ledger and run report.
#include "cli/cli.h"
#include "cli/common.h"
#include "cli/run_support.h"

namespace gm::cli {

int cmd_run(int argc, char** argv) {
  CLI::App app{"Run a command with its GPU cost metered, forecast and guarded", "run"};
  RunFlags f;
  add_run_flags(app, f);
  if (auto rc = parse_run_args(app, f, argc, argv)) return *rc;
  return execute_run(f, false);
}

}  // namespace gm::cli
