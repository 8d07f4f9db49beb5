#pragma once
// `gpumeter agent`'s node guard flags (--autostop-*, --node-budget, --owner-budget, --preemption) and the
// loop that feeds guard/node.h from the collector's collections and hands its status to the exposition.
#include <CLI/CLI.hpp>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "cloud/cloud.h"
#include "guard/node.h"
#include "sys/spawn.h"

namespace gm::cli {

/// The node guard's flags as given.
struct NodeGuardFlags {
  std::optional<std::string> autostop_idle;
  std::optional<std::string> autostop_command;
  bool autostop_dry_run = false;
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

/// What the agent listening at `host_port` (HOST:PORT) says about its autostop: "autostop in 4m 10s (every
/// GPU idle for 25m 50s)", "autostop ran", or nullopt when no agent answers within `timeout_ms` or it has no
/// autostop. For `top` and `doctor`.
std::optional<std::string> agent_autostop_text(const std::string& host_port, std::int64_t timeout_ms);

/// The running node guard: a thread that, every interval, reads the collector's last collection (owners as
/// the collector resolved them), steps the guard,
/// prints its events on stderr (the agent's log) and exports its status.
class AgentNodeGuard {
 public:
  /// Validates the flags; nullptr (and no error) when no guard feature is asked for and no cloud is
  /// detected. Usage error naming the flag otherwise.
  static Result<std::unique_ptr<AgentNodeGuard>> create(const NodeGuardFlags& flags,
                                                        std::int64_t interval_ms);
  ~AgentNodeGuard();
  /// Starts the loop over `collector` until `stop`.
  void start(agent::Collector& collector, agent::StopSignal& stop);
  /// One step now (for --once and tests of the loop).
  void step(agent::Collector& collector);

 private:
  AgentNodeGuard() = default;
  std::unique_ptr<NodeGuard> guard_;
  std::unique_ptr<NoticeWatcher> watcher_;
  PosixProcessRunner runner_;
  std::int64_t interval_ms_ = 1000;
  std::thread thread_;
};

}  // namespace gm::cli
