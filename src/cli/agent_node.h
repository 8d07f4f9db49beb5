#pragma once
// `gpumeter agent`'s node guard flags (--autostop-*, --node-budget, --owner-budget, --preemption), turned
// into the agent's node guard (agent/node_guard.h).
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/node_guard.h"
#include "cloud/cloud.h"

namespace gm::cli {

/// The node guard's flags as given.
struct NodeGuardFlags {
  std::optional<std::string> autostop_idle;
  std::optional<std::string> autostop_command;
  bool autostop_dry_run = false;
  std::optional<std::string> stop_idle_held;
  std::optional<std::string> node_budget;
  std::vector<std::string> owner_budgets;
  std::string budget_grace = "60s";
  std::optional<std::string> notify;
  std::optional<std::string> webhook;
  std::string preemption = "auto";
  std::optional<std::string> metadata_url;
  std::string preemption_poll = "5s";
};

/// Adds the node guard's flags to `app`.
void add_node_guard_flags(CLI::App& app, NodeGuardFlags& flags);

/// The node guard the flags ask for, its events printed on stderr (the agent's log); nullptr (and no error)
/// when no guard feature is asked for and no cloud is detected. Usage error naming the flag otherwise.
/// `runs_dir`: where gpumeter runs publish their views (--stop-idle-held stops them through their
/// supervisor).
Result<std::unique_ptr<agent::NodeGuardLoop>> make_node_guard(const NodeGuardFlags& flags,
                                                              std::int64_t interval_ms,
                                                              const std::string& runs_dir);

}  // namespace gm::cli
