#pragma once
// `gpumeter report --prometheus URL --since 7d --by namespace|job|account|user|gpu`: the fleet report.

namespace gm::cli {

/// True when the report arguments ask for the fleet report (a --prometheus flag is present).
bool wants_fleet_report(int argc, char** argv);
/// Runs the fleet report (argv[0] is "report"); returns the exit code.
int fleet_report(int argc, char** argv);

}  // namespace gm::cli
