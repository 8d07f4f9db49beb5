// The node guard's stop of GPUs held idle (--stop-idle-held): warn, then stop the holders — a gpumeter run
// through its own supervisor (the stop signal, the grace for its checkpoint, then SIGKILL), any other
// process with SIGTERM and SIGKILL after the grace. Never a bare kill.
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <chrono>

#include "agent/node_guard.h"
#include "guard/control.h"
#include "meter/run_meter.h"
#include "sys/proc.h"
#include "util/units.h"

namespace gm::agent {

namespace {

bool held_idle(const NodeGpu& g) {
  return g.utilization_pct && *g.utilization_pct < meter::kIdleUtilPct && g.processes > 0;
}

std::string held_for_text(std::int64_t ms) {
  return util::format_duration_s(static_cast<double>(ms) / 1000.0);
}

std::int64_t wall_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

DirNodeRuns::DirNodeRuns(std::string runs_dir, std::string proc_root)
    : dir_(std::move(runs_dir)), proc_root_(std::move(proc_root)) {}

std::optional<RunView> DirNodeRuns::run_of(std::uint32_t pid) {
  const std::int64_t now = wall_unix_ms();
  if (now - read_unix_ms_ >= 1000) {
    views_ = read_run_views(dir_, now, process_alive);
    read_unix_ms_ = now;
  }
  if (views_.empty()) return std::nullopt;
  // The process or one of its ancestors is a run's job (its main process) or its meter (`run` starts the
  // job as its child); a few dozen levels at most.
  const sys::ProcReader proc(proc_root_);
  std::uint32_t p = pid;
  for (int depth = 0; depth < 64 && p > 1; ++depth) {
    for (const auto& v : views_)
      if (static_cast<std::int64_t>(p) == v.job_pid || static_cast<std::int64_t>(p) == v.meter_pid) return v;
    const auto info = proc.read(p);
    if (!info || info->ppid == p) break;
    p = info->ppid;
  }
  return std::nullopt;
}

Result<void> DirNodeRuns::ask_stop(const RunView& run, const std::string& reason) {
  if (run.socket.empty())
    return make_error(ErrorKind::unavailable, "the run publishes no socket (a gpumeter older than its stop)");
  return guard::send_control_datagram(run.socket,
                                      guard::stop_request_datagram({store::StopReason::idle, reason}));
}

void NodeGuard::step_idle_held(const NodeInput& in, std::vector<NodeEvent>& out) {
  const std::int64_t limit_ms = *cfg_.stop_idle_held_ms;
  held_.resize(in.gpus.size());
  // The GPUs held idle for the whole limit, and every process on a GPU that is not (a process that also
  // works on another GPU is never stopped for the one it leaves idle).
  std::vector<std::size_t> expired;
  std::set<std::uint32_t> working;
  for (std::size_t i = 0; i < in.gpus.size(); ++i) {
    const NodeGpu& g = in.gpus[i];
    HeldGpu& h = held_[i];
    if (!held_idle(g)) {
      h = HeldGpu{};
      working.insert(g.pids.begin(), g.pids.end());
      continue;
    }
    if (!h.since_ns) h.since_ns = in.now_ns;
    const std::int64_t held_ms = (in.now_ns - *h.since_ns) / 1'000'000;
    const std::int64_t remaining_ms = std::max<std::int64_t>(0, limit_ms - held_ms);
    std::string pids;
    for (auto pid : g.pids) pids += (pids.empty() ? "" : ", ") + std::to_string(pid);
    // A warning once the end is near (the last tenth, at most 5 minutes), then the stop.
    const std::int64_t warn_ms = std::min<std::int64_t>(300'000, limit_ms / 10);
    if (!h.warned && remaining_ms > 0 && remaining_ms <= warn_ms) {
      h.warned = true;
      out.push_back(event(
          "idle_held_warning",
          fmt::format("GPU {} held idle by process(es) {} for {} (under {:g}% with memory in "
                      "use): they are stopped in {} unless it gets busy",
                      i, pids, held_for_text(held_ms), meter::kIdleUtilPct, held_for_text(remaining_ms))));
    }
    if (remaining_ms == 0)
      expired.push_back(i);
    else
      working.insert(g.pids.begin(), g.pids.end());
  }
  for (std::size_t i : expired) {
    const NodeGpu& g = in.gpus[i];
    const std::int64_t held_ms = (in.now_ns - *held_[i].since_ns) / 1'000'000;
    const std::string why =
        fmt::format("GPU {} held idle for {} (under {:g}% utilization with memory in use)", i,
                    held_for_text(held_ms), meter::kIdleUtilPct);
    std::vector<std::uint32_t> pids = g.pids;
    std::sort(pids.begin(), pids.end());
    pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
    for (std::uint32_t pid : pids) {
      if (working.count(pid) || idle_kill_at_ns_.count(pid)) continue;
      std::string owner;
      for (const auto& [p, o] : in.gpu_processes)
        if (p == pid && !o.name.empty())
          owner = " (" + o.name + (o.user.empty() || o.user == o.name ? "" : ", user " + o.user) + ")";
      // A gpumeter run stops through its own supervisor: the stop signal, the grace for the checkpoint,
      // SIGKILL; the run records `stopped_by: idle`.
      if (runs_)
        if (auto run = runs_->run_of(pid)) {
          if (!idle_asked_runs_.insert(run->meter_pid).second) continue;
          auto asked = runs_->ask_stop(*run, why);
          if (asked) {
            out.push_back(
                event("idle_held_stop",
                      fmt::format("{}: asked gpumeter run {} (meter pid {}, job pid {}) to stop through its "
                                  "checkpoint (its stop signal, its grace, then SIGKILL)",
                                  why, run->run_id, run->meter_pid, run->job_pid)));
            continue;
          }
          out.push_back(
              event("idle_held_stop",
                    fmt::format("{}: gpumeter run {} could not be asked to stop ({}): its process {} "
                                "gets SIGTERM instead",
                                why, run->run_id, asked.error().message, pid)));
        }
      runner_.send_signal(static_cast<pid_t>(pid), SIGTERM, false);
      idle_kill_at_ns_[pid] = in.now_ns + cfg_.grace_ms * 1'000'000;
      out.push_back(
          event("idle_held_stop",
                fmt::format("{}: sent SIGTERM to process {}{}; SIGKILL after {} if it still holds a GPU", why,
                            pid, owner, held_for_text(cfg_.grace_ms))));
    }
  }
  // SIGKILL after the grace to those still on a GPU; a process that let go is forgotten.
  for (auto it = idle_kill_at_ns_.begin(); it != idle_kill_at_ns_.end();) {
    const std::uint32_t pid = it->first;
    const bool on_gpu = std::any_of(in.gpu_processes.begin(), in.gpu_processes.end(),
                                    [&](const auto& p) { return p.first == pid; });
    if (!on_gpu) {
      it = idle_kill_at_ns_.erase(it);
      continue;
    }
    if (in.now_ns >= it->second && it->second != INT64_MAX) {
      runner_.send_signal(static_cast<pid_t>(pid), SIGKILL, false);
      out.push_back(event(
          "sigkill", fmt::format("GPU held idle: process {} did not exit within the grace: SIGKILL", pid)));
      it->second = INT64_MAX;  // handled; kept while it is still listed
    }
    ++it;
  }
  // Runs asked to stop are forgotten once none of the GPUs is held idle any more (a later spell asks anew).
  if (expired.empty()) idle_asked_runs_.clear();
}

}  // namespace gm::agent
