#pragma once
// `gpumeter report RUN|last [--json|--csv]`: one run's report from the ledger (src/report/run_report.h).

namespace gm::cli {

/// Prints one run's report; returns the exit code (0 ok, 2 usage, 4 unknown run, 5 ledger unavailable).
int single_run_report(int argc, char** argv);

}  // namespace gm::cli
