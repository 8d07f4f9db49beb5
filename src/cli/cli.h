#pragma once
// The subcommand table. main.cpp only looks up a name here and calls it.
#include <span>

namespace gm::cli {

/// One subcommand: its name, a one-line summary for `gpumeter --help`, and its entry point, which
/// parses its own flags (argv[0] is the subcommand name) and returns the process exit code.
struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

/// All subcommands, in help order.
std::span<const Command> commands();

int cmd_gpus(int argc, char** argv);
int cmd_doctor(int argc, char** argv);
int cmd_prices(int argc, char** argv);
/// gpumeter prices update: fetch the providers' price lists into the user catalog.
int cmd_prices_update(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_attach(int argc, char** argv);
int cmd_runs(int argc, char** argv);
int cmd_report(int argc, char** argv);
int cmd_compare(int argc, char** argv);
int cmd_trace(int argc, char** argv);
/// `gpumeter trace diff BASE NEW`: the per-step cost comparison and gate (dispatched by cmd_trace).
int cmd_trace_diff(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_agent(int argc, char** argv);
int cmd_top(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_record_job(int argc, char** argv);

}  // namespace gm::cli
