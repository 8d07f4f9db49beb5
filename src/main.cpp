// gpumeter: thin entry point. Looks the subcommand up in the table and dispatches.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "cli/cli.h"
#include "util/exit_codes.h"

namespace {
void print_usage(std::FILE* out) {
  std::fprintf(out, "gpumeter %s: what GPU work costs, per second.\n\nUsage: gpumeter COMMAND [OPTIONS]\n\nCommands:\n",
               GPUMETER_VERSION);
  for (const auto& c : gm::cli::commands()) std::fprintf(out, "  %-9s %s\n", c.name, c.summary);
  std::fprintf(out, "\nRun 'gpumeter COMMAND --help' for a command's options.\n");
}
}  // namespace

int main(int argc, char** argv) {
  // A file over the size limit (RLIMIT_FSIZE, a full quota) is a write error gpumeter reports, not a signal that
  // kills it in the middle of metering a job. Jobs get the default disposition back (sys/spawn).
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) {
    print_usage(stderr);
    return gm::util::kExitUsage;
  }
  const std::string_view name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return gm::util::kExitOk;
  }
  if (name == "--version" || name == "version") {
    std::printf("gpumeter %s\n", GPUMETER_VERSION);
    return gm::util::kExitOk;
  }
  for (const auto& c : gm::cli::commands())
    if (name == c.name) return c.run(argc - 1, argv + 1);
  std::fprintf(stderr, "gpumeter: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return gm::util::kExitUsage;
}
