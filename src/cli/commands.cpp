#include "cli/cli.h"

namespace gm::cli {

namespace {
const Command kCommands[] = {
    {"gpus", "devices now: model, utilization, memory, power, processes, $/h", cmd_gpus},
    {"doctor", "what works here: NVML, driver, energy counter, MIG, permissions, catalog age", cmd_doctor},
    {"prices", "GPU offers from the catalog, cheapest first, with source and date", cmd_prices},
    {"run", "run a command metered: live cost, forecast, budget guard, report", cmd_run},
    {"attach", "meter a running process gpumeter did not start (a notebook kernel, a job)", cmd_attach},
    {"runs", "the ledger's runs", cmd_runs},
    {"report", "report on one run, many runs, or the fleet (Prometheus)", cmd_report},
    {"compare", "compare two runs: cost, time, KPIs; a release gate for CI", cmd_compare},
    {"trace", "PyTorch profiler traces in dollars per kernel, operator, annotation, step", cmd_trace},
    {"plan", "memory, time and cost of a training or inference job across GPUs and clouds", cmd_plan},
    {"agent", "per-owner cost on this node as Prometheus metrics", cmd_agent},
    {"top", "live view of devices and owners with $/h and $ so far", cmd_top},
    {"idle", "has every GPU here been idle for a duration? (asks the agent; exit 0 idle, 1 busy, 3 unknown)",
     cmd_idle},
    {"demo", "the main job on this machine, end to end (simulated GPU when there is none)", cmd_demo},
    {"mcp", "an MCP server on stdio for AI agents: runs, spend, forecasts, plans, offers; stop and budget",
     cmd_mcp},
    {"record-job", "record a job metered elsewhere (the Slurm epilog) as a run in the ledger",
     cmd_record_job},
    {"budget", "team budgets across machines: set, list, rm (runs whose labels match are guarded)",
     cmd_budget},
    {"ledger", "the ledger: migrate its schema, copy it to PostgreSQL", cmd_ledger},
};
}  // namespace

std::span<const Command> commands() {
  return kCommands;
}

}  // namespace gm::cli
