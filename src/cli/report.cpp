#include <cstdio>

#include "cli/cli.h"
#include "util/exit_codes.h"

namespace gm::cli {

int cmd_report(int, char**) {
  std::fprintf(stderr, "gpumeter report: not built yet\n");
  return kExitFailure;
}

}  // namespace gm::cli
