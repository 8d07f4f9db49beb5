#pragma once
#include "store/store.h"
// Helpers shared by subcommands: flag parsing with CLI11, pricing flags, error rendering.
#include <CLI/CLI.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "meter/meter.h"
#include "util/exit_codes.h"
#include "util/result.h"

namespace gm::cli {

/// Parses argv with `app`. On --help prints help and returns kExitOk; on a bad flag prints
/// "gpumeter CMD: error: ..." and returns kExitUsage; returns nullopt when the command should go on.
std::optional<int> parse_args(CLI::App& app, int argc, char** argv);
/// True when argv (before a "--") asks for help: -h, --help or --help-all.
bool help_requested(int argc, char** argv);
/// Prints "\n== TITLE ==" and then the help of another mode of the command, by calling `run` with `args`
/// (its argv, ending in "--help"); returns its exit code.
int print_mode_help(const char* title, int (*run)(int, char**), std::vector<const char*> args);
/// Flag check: a number greater than 0 ("must be greater than 0, got '0'" otherwise).
CLI::Validator positive_number();
/// Flag check: a number of at least 0.
CLI::Validator non_negative_number();

/// Adds --price, --offer, --config and --catalog to `app`, storing into `options`.
void add_pricing_flags(CLI::App& app, meter::PricingOptions& options);

/// Prints "gpumeter CMD: error: MESSAGE" on stderr and returns the exit code for the error's kind.
int fail(const char* command, const Error& error);

/// One subcommand of a command group (`budget set`, `ledger copy`): its name and its entry point.
struct Subcommand {
  const char* name;
  int (*run)(int argc, char** argv);
};
/// Runs the subcommand argv[1] names with argv shifted by one; no argument or --help/-h prints `help`
/// (usage exit without an argument); an unknown name is a usage error that lists the names.
int dispatch_subcommands(const char* command, int argc, char** argv, const std::string& help,
                         std::span<const Subcommand> subcommands);
/// Opens the ledger for a read command (runs, report, compare): a missing SQLite file is an error naming it
/// (kind not_found), never created. `path` empty = the default ledger. A shared (PostgreSQL) ledger gets the
/// runs spooled here while it was unreachable (a note on stderr names how many).
Result<std::unique_ptr<store::Ledger>> open_ledger_for_reading(const std::optional<std::string>& path);
/// Opens (creating) the ledger for a command that writes it, replaying spooled runs into a shared ledger.
Result<std::unique_ptr<store::Ledger>> open_ledger_for_writing(const std::optional<std::string>& path);
/// Prints gpumeter's notes about the ledger (spooled, replayed) on stderr as "gpumeter CMD: note: …".
void print_ledger_notes(const char* command, const std::vector<std::string>& notes);

/// True when stdout is a terminal.
bool stdout_is_tty();

}  // namespace gm::cli
