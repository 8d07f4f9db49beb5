#include <cstdio>

#include "cli/cli.h"
#include "util/exit_codes.h"

namespace gm::cli {

int cmd_compare(int, char**) {
  std::fprintf(stderr, "gpumeter compare: not built yet\n");
  return kExitFailure;
}

}  // namespace gm::cli
