#pragma once
// The node guard of `gpumeter agent`: autostop of an idle node (a command run once when every GPU has been
// idle long enough), node and owner budgets per day or month (the run's BudgetGuard policy on the period's
// spend; actions notify, or stop the owner's GPU processes), and the count of the cloud's preemption notices.
// NodeGuard decides on one collection; NodeGuardLoop runs it beside the collector, on the collector's own
// state (node_view), and hands its status back for the exposition. Acts through ProcessRunner and a command
// seam; prints nothing.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "agent/collector.h"
#include "agent/run_view.h"
#include "cloud/cloud.h"
#include "guard/guard.h"
#include "sys/owner.h"
#include "sys/spawn.h"
#include "util/http_client.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::agent {

/// One budget of `--node-budget USD/day|month` or `--owner-budget KIND:NAME=USD/day|month[,stop]`.
struct NodeBudget {
  std::string
      kind;  ///< "" for the whole node; user | slurm-account | slurm-job | namespace | pod | container
  std::string name;  ///< the owner's value for that kind
  MicroUsd limit_micros = 0;
  store::BudgetPeriod period = store::BudgetPeriod::day;
  bool stop = false;  ///< over the budget: SIGTERM the owner's GPU processes (SIGKILL after the grace)
  /// "node" or "user:alice" (the `scope` label).
  std::string scope() const { return kind.empty() ? "node" : kind + ":" + name; }
};

/// Parses `--node-budget` ("200/day", "5000/month"); usage error naming the flag otherwise.
Result<NodeBudget> parse_node_budget(std::string_view text);
/// Parses `--owner-budget` ("user:alice=50/day", "namespace:ml=900/month,stop").
Result<NodeBudget> parse_owner_budget(std::string_view text);
/// True when `owner` is what the budget names (user, slurm-account, slurm-job, namespace, pod "ns/pod",
/// container).
bool budget_matches(const NodeBudget& budget, const sys::Owner& owner);

/// The node guard's settings.
struct NodeGuardConfig {
  std::optional<std::int64_t> autostop_idle_ms;  ///< --autostop-idle
  std::string autostop_command;                  ///< --autostop-command (run once with /bin/sh -c)
  bool autostop_dry_run = false;                 ///< --autostop-dry-run: warn and record, run nothing
  std::vector<NodeBudget> budgets;
  /// --stop-idle-held: stop the processes that have held a GPU idle (memory in use, under the idle
  /// threshold) this long, every GPU they hold being so; a gpumeter run is asked to stop through its own
  /// supervisor (its checkpoint), any other process gets SIGTERM, SIGKILL after grace_ms.
  std::optional<std::int64_t> stop_idle_held_ms;
  std::int64_t grace_ms = 60'000;  ///< stop action: SIGTERM, then SIGKILL after this
  std::optional<std::string> notify_command;
  std::optional<std::string> webhook_url;
  std::string host;
};

/// One GPU as the guard sees it at a collection.
struct NodeGpu {
  std::optional<double> utilization_pct;  ///< nullopt: unreadable (counts as busy: never stop on doubt)
  std::size_t processes = 0;              ///< compute processes on it
  std::vector<std::uint32_t> pids;        ///< those processes
};

/// What the guard looks at, once per collection.
struct NodeInput {
  std::int64_t now_ns = 0;   ///< monotonic
  std::int64_t unix_ms = 0;  ///< wall time (budget periods)
  std::vector<NodeGpu> gpus;
  MicroUsd node_cost_micros = 0;                                    ///< cumulative cost of every priced GPU
  std::vector<std::pair<sys::Owner, MicroUsd>> owner_costs;         ///< cumulative cost per owner
  std::vector<std::pair<std::uint32_t, sys::Owner>> gpu_processes;  ///< PIDs on GPUs now and their owners
};

/// One thing the guard did or saw (printed by the CLI, notified, counted in the metrics).
struct NodeEvent {
  std::string kind;  ///< autostop_warning | autostop | autostop_dry_run | budget_warn | budget_over |
                     ///< budget_stop | sigkill | preempted | preemption_warning
  std::string message;
};

/// The gpumeter runs of the node (their live views, agent/run_view.h), for stops that go through the job's
/// own supervisor and so its checkpoint. The real one reads the runs directory; tests use a fake.
class NodeRuns {
 public:
  virtual ~NodeRuns() = default;
  /// The run whose job process `pid` is (its main process or a descendant), if a gpumeter run meters it.
  virtual std::optional<RunView> run_of(std::uint32_t pid) = 0;
  /// Asks the run's supervisor to stop it (the stop signal, its grace for the checkpoint, then SIGKILL).
  virtual Result<void> ask_stop(const RunView& run, const std::string& reason) = 0;
};

/// NodeRuns over a runs directory (`--runs-dir`): views re-read at most once a second, a process's
/// ancestors read from /proc, the stop sent as a control datagram on the run's socket.
class DirNodeRuns final : public NodeRuns {
 public:
  explicit DirNodeRuns(std::string runs_dir, std::string proc_root = "/proc");
  std::optional<RunView> run_of(std::uint32_t pid) override;
  Result<void> ask_stop(const RunView& run, const std::string& reason) override;

 private:
  std::string dir_, proc_root_;
  std::vector<RunView> views_;
  std::int64_t read_unix_ms_ = 0;
};

/// Runs a shell command for an event (the autostop command, --notify); the real one is run_notify_command.
using NodeCommandRunner =
    std::function<Result<void>(const std::string& command, const guard::GuardEvent& event)>;

/// The guard. Call step() once per collection; on_notice() when the metadata watcher reports.
class NodeGuard {
 public:
  /// `runs` (may be null: no process is taken for a gpumeter run) must outlive the guard.
  NodeGuard(NodeGuardConfig config, sys::ProcessRunner& runner, NodeCommandRunner command_runner,
            NodeRuns* runs = nullptr);
  /// Evaluates autostop and budgets on this collection; returns what happened.
  std::vector<NodeEvent> step(const NodeInput& in);
  /// A preemption notice of the node's cloud: counted, notified, returned as an event.
  NodeEvent on_notice(const cloud::CloudNotice& notice);
  /// What the agent exports (autostop, budgets, notices and event counts).
  NodeStatus status() const { return status_; }
  /// The idle threshold: a GPU under this utilization with no compute process is idle.
  static constexpr double kIdleUtilPct = 5.0;

 private:
  struct BudgetState {
    std::int64_t period_key = -1;  ///< start (unix ms) of the period being counted
    MicroUsd baseline = 0;         ///< cumulative cost when the period (or the agent) started
    guard::BudgetGuard policy{guard::GuardConfig{}};
    std::map<std::uint32_t, std::int64_t> kill_at_ns;  ///< PIDs signalled, SIGKILL due
    bool over = false;  ///< over the budget with the stop action, for the rest of the period
    bool over_reported = false;
    std::string over_message;
  };
  NodeEvent event(const std::string& kind, const std::string& message);
  /// --stop-idle-held on this collection (node_idle_stop.cpp).
  void step_idle_held(const NodeInput& in, std::vector<NodeEvent>& out);

  NodeGuardConfig cfg_;
  sys::ProcessRunner& runner_;
  NodeCommandRunner command_runner_;
  NodeRuns* runs_ = nullptr;
  struct HeldGpu {
    std::optional<std::int64_t> since_ns;  ///< start of its current held-idle stretch
    bool warned = false;
  };
  std::vector<HeldGpu> held_;
  std::map<std::uint32_t, std::int64_t> idle_kill_at_ns_;  ///< processes sent SIGTERM, SIGKILL due
  std::set<std::int64_t> idle_asked_runs_;                 ///< meter PIDs asked to stop
  std::vector<BudgetState> budgets_;
  std::optional<std::int64_t> idle_since_ns_;
  bool autostop_warned_ = false;
  NodeStatus status_;
};

/// The running node guard: a thread that, every interval, reads the collector's last collection (its own
/// state: GPUs, owners as the collector resolved them, costs), steps the guard, adds the metadata watcher's
/// notices, reports each event to `on_event` (the agent's log) and hands the guard's status to the collector
/// (exported with the agent's metrics).
class NodeGuardLoop {
 public:
  using EventSink = std::function<void(const NodeEvent& event)>;
  /// `watcher` may be null (no notices watched).
  /// `runs_dir`: where gpumeter runs publish their views ("" none: --stop-idle-held signals every process).
  NodeGuardLoop(NodeGuardConfig config, std::unique_ptr<cloud::NoticeWatcher> watcher,
                std::int64_t interval_ms, EventSink on_event, const std::string& runs_dir = {});
  ~NodeGuardLoop();
  NodeGuardLoop(const NodeGuardLoop&) = delete;
  NodeGuardLoop& operator=(const NodeGuardLoop&) = delete;
  /// Starts the loop over `collector` until `stop`.
  void start(Collector& collector, StopSignal& stop);
  /// One step now (for --once and tests of the loop).
  void step(Collector& collector);

 private:
  sys::PosixProcessRunner runner_;
  std::unique_ptr<DirNodeRuns> runs_;
  NodeGuard guard_;
  std::unique_ptr<cloud::NoticeWatcher> watcher_;
  std::int64_t interval_ms_;
  EventSink on_event_;
  std::thread thread_;
};

/// What the agent listening at `host_port` (HOST:PORT) says about its autostop, read from its /metrics with
/// serving's exposition parser: "autostop in 4m 10s (every GPU idle for 25m 50s)", "autostop ran", or
/// nullopt when no agent answers within `timeout_ms` or it has no autostop. For `top` and `doctor`.
std::optional<std::string> autostop_text(const std::string& host_port, std::int64_t timeout_ms,
                                         util::HttpClient& http = util::system_http());

}  // namespace gm::agent
