#pragma once
// `gpumeter report` over many runs (--since/--until/--by/--daily/--scaling), called from cmd_report.

namespace gm::cli {

/// True when argv asks for a multi-run report (--since, --until, --by, --daily, --date or --scaling).
bool wants_multi_run_report(int argc, char** argv);

/// Runs the multi-run report; returns the exit code (0 ok, 2 usage, 4 unknown run or no runs in the period,
/// 5 ledger unavailable).
int multi_run_report(int argc, char** argv);

}  // namespace gm::cli

namespace gm::cli {

/// True when argv asks for one run's HTML page (`report RUN|last --html FILE`, no multi-run flags).
bool wants_run_html_report(int argc, char** argv);

/// Writes one run's HTML page: `report RUN|last --html FILE [--target M=V] [--params N] [--inference]`.
int run_html_report(int argc, char** argv);

}  // namespace gm::cli
