#include <cstdio>

#include "cli/cli.h"
#include "util/exit_codes.h"

namespace gm::cli {

int cmd_doctor(int, char**) {
  std::fprintf(stderr, "gpumeter doctor: not built yet\n");
  return kExitFailure;
}

}  // namespace gm::cli
