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
// The modes of `report`, chosen by cmd_report from the flags (report_run.cpp, report_html.cpp,
// report_multi.cpp, report_fleet.cpp); each returns the exit code.
/// `report RUN|last [--json|--csv]`: one run's report from the ledger (0 ok, 2 usage, 4 unknown run,
/// 5 ledger unavailable).
int single_run_report(int argc, char** argv);
/// True when argv asks for one run's HTML page (`report RUN|last --html FILE`, no multi-run flags).
bool wants_run_html_report(int argc, char** argv);
/// `report RUN|last --html FILE [--target M=V] [--params N] [--inference]`: one run's HTML page.
int run_html_report(int argc, char** argv);
/// True when argv asks for a multi-run report (--since, --until, --by, --daily, --date or --scaling).
bool wants_multi_run_report(int argc, char** argv);
/// The multi-run report (0 ok, 2 usage, 4 unknown run or no runs in the period, 5 ledger unavailable).
int multi_run_report(int argc, char** argv);
/// True when the report arguments ask for the fleet report (a --prometheus flag is present).
bool wants_fleet_report(int argc, char** argv);
/// `report --prometheus URL --since 7d --by namespace|job|account|user|gpu`: the fleet report.
int fleet_report(int argc, char** argv);
int cmd_compare(int argc, char** argv);
int cmd_trace(int argc, char** argv);
/// `gpumeter trace diff BASE NEW`: the per-step cost comparison and gate (dispatched by cmd_trace).
int cmd_trace_diff(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_agent(int argc, char** argv);
int cmd_top(int argc, char** argv);
int cmd_idle(int argc, char** argv);
int cmd_mcp(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_record_job(int argc, char** argv);
int cmd_ledger(int argc, char** argv);
int cmd_budget(int argc, char** argv);

}  // namespace gm::cli
