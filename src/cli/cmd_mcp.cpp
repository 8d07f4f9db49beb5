// gpumeter mcp: the MCP server on stdio (docs/mcp.md). Flags here; the protocol and the tools are src/mcp.
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "agent/run_view.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "mcp/mcp.h"

namespace gm::cli {

int cmd_mcp(int argc, char** argv) {
  CLI::App app{
      "An MCP server on stdio for AI agents that launch GPU jobs: the runs going now and the "
      "ledger's, a run's spend and forecast, plans and offers; with --allow-control, stopping a run "
      "through its checkpoint and changing its budget. Register it in an MCP client as the command "
      "`gpumeter mcp` (docs/mcp.md)",
      "mcp"};
  std::optional<std::string> ledger_path;
  std::string runs_dir = agent::default_runs_dir();
  bool allow_control = false;
  app.add_option(
      "--ledger", ledger_path,
      "ledger file or PostgreSQL URL (default $GPUMETER_LEDGER or $XDG_DATA_HOME/gpumeter/ledger.db)");
  app.add_option("--runs-dir", runs_dir,
                 "where run and attach publish their live views (default $GPUMETER_RUNS_DIR, else "
                 "/run/gpumeter/runs)");
  app.add_flag("--allow-control", allow_control,
               "offer stop_run and set_budget (only for runs of the user the server runs as; root: all)");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  // Stdout is the protocol: a client that goes away must end the server with a write error, not SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  mcp::ServerOptions options;
  options.ledger_path = ledger_path;
  options.runs_dir = runs_dir;
  options.allow_control = allow_control;
  options.uid = static_cast<std::uint32_t>(::getuid());
  options.version = GPUMETER_VERSION;
  if (auto served = mcp::serve(STDIN_FILENO, STDOUT_FILENO, options); !served)
    return fail("mcp", served.error());
  return util::kExitOk;
}

}  // namespace gm::cli
