#include "cli/common.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <utility>
#include <vector>

namespace gm::cli {

namespace {

/// The help section of an option, by its long name: every command's --help lists its options in these
/// groups (options not named here stay under "Options").
const char* group_of(const std::string& name) {
  static const std::pair<const char*, std::vector<std::string>> groups[] = {
      {"Pricing",
       {"--price", "--offer", "--config", "--catalog", "--provider", "--region", "--spot", "--all-regions"}},
      {"Budget guard",
       {"--budget", "--warn-at", "--forecast-stop", "--max-idle", "--grace", "--stop-signal", "--stop-to",
        "--total-steps", "--target", "--target-stop"}},
      {"Serving engines",
       {"--inference-endpoint", "--inference-window", "--inference-discover", "--kubelet-pods-url",
        "--kubelet-token-file", "--kubelet-pods-every"}},
      {"Owners on this node",
       {"--proc-root", "--pod-log-root", "--container-log-root", "--pod-resources-socket", "--slurm-conf",
        "--slurm-job-expiry", "--max-owners"}},
      {"Server", {"--listen", "--web-config", "--interval", "--state", "--once"}},
      {"Ledger and notifications", {"--ledger", "--label", "--notify", "--webhook"}},
      {"Output",
       {"--json", "--csv", "--html", "--json-report", "--json-lines", "--quiet", "--status-every", "--top",
        "--by", "--no-progress", "--partial"}},
  };
  for (const auto& [group, names] : groups)
    for (const auto& n : names)
      if (n == name) return group;
  return nullptr;
}

void group_options(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    for (const auto& name : o->get_lnames())
      if (const char* g = group_of("--" + name)) {
        o->group(g);
        break;
      }
  }
  for (CLI::App* sub : app.get_subcommands({})) group_options(*sub);
}

}  // namespace

std::optional<int> parse_args(CLI::App& app, int argc, char** argv) {
  group_options(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return util::kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return util::kExitOk;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "gpumeter %s: error: %s\nRun 'gpumeter %s --help' for usage.\n",
                 app.get_name().c_str(), e.what(), app.get_name().c_str());
    return util::kExitUsage;
  }
  return std::nullopt;
}

bool help_requested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "-h" || a == "--help" || a == "--help-all") return true;
  }
  return false;
}

int print_mode_help(const char* title, int (*run)(int, char**), std::vector<const char*> args) {
  std::printf("\n== %s ==\n", title);
  std::fflush(stdout);
  std::vector<char*> argv;
  for (const char* a : args) argv.push_back(const_cast<char*>(a));
  argv.push_back(nullptr);
  return run(static_cast<int>(argv.size()) - 1, argv.data());
}

void add_pricing_flags(CLI::App& app, meter::PricingOptions& options) {
  app.add_option("--price", options.price_usd_per_gpu_hour,
                 "price in USD per GPU-hour (overrides everything)")
      ->check(positive_number());
  app.add_option("--offer", options.offer, "catalog offer provider:instance[:spot], e.g. aws:p5.48xlarge");
  app.add_option("--config", options.config_path,
                 "config file (TOML); default $XDG_CONFIG_HOME/gpumeter/config.toml");
  app.add_option("--catalog", options.catalog_override, "offers CSV merged over the built-in catalog");
}

Result<std::unique_ptr<store::Ledger>> open_ledger_for_reading(const std::optional<std::string>& path) {
  std::vector<std::string> notes;
  auto ledger = store::open_ledger(path, /*create=*/false, notes);
  print_ledger_notes("ledger", notes);
  return ledger;
}

Result<std::unique_ptr<store::Ledger>> open_ledger_for_writing(const std::optional<std::string>& path) {
  std::vector<std::string> notes;
  auto ledger = store::open_ledger(path, /*create=*/true, notes);
  print_ledger_notes("ledger", notes);
  return ledger;
}

void print_ledger_notes(const char* command, const std::vector<std::string>& notes) {
  for (const auto& n : notes) std::fprintf(stderr, "gpumeter %s: note: %s\n", command, n.c_str());
}

int fail(const char* command, const Error& error) {
  std::fprintf(stderr, "gpumeter %s: error: %s\n", command, error.message.c_str());
  return util::exit_code_for(error.kind);
}

bool stdout_is_tty() {
  return isatty(STDOUT_FILENO) == 1;
}

namespace {
CLI::Validator number_check(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& text) -> std::string {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || !std::isfinite(v))
          return "expected a number, got '" + text + "'";
        if (allow_zero ? v < 0 : v <= 0)
          return std::string(allow_zero ? "must be 0 or more" : "must be greater than 0") + ", got '" + text +
                 "'";
        return {};
      },
      allow_zero ? "NUMBER>=0" : "NUMBER>0");
}
}  // namespace

CLI::Validator positive_number() {
  return number_check(false);
}
CLI::Validator non_negative_number() {
  return number_check(true);
}

int dispatch_subcommands(const char* command, int argc, char** argv, const std::string& help,
                         std::span<const Subcommand> subcommands) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(help.c_str(), stdout);
    return argc < 2 ? util::kExitUsage : util::kExitOk;
  }
  const std::string sub = argv[1];
  std::string names;
  for (std::size_t i = 0; i < subcommands.size(); ++i) {
    if (sub == subcommands[i].name) return subcommands[i].run(argc - 1, argv + 1);
    names += (i == 0 ? "" : i + 1 == subcommands.size() ? " or " : ", ") + std::string(subcommands[i].name);
  }
  return fail(command, make_error(ErrorKind::usage, "unknown subcommand '" + sub + "': expected " + names));
}

}  // namespace gm::cli
