// The node guard of `gpumeter agent`: autostop on idle, node and owner budgets, preemption notices.
#include "agent/node_guard.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <thread>

#include "serving/serving.h"
#include "util/clock.h"
#include "util/http_client.h"
#include "util/units.h"

namespace gm::agent {
namespace {

/// "200/day" → (200 USD, day); the message names `flag`.
Result<std::pair<MicroUsd, store::BudgetPeriod>> parse_amount(std::string_view text, std::string_view flag,
                                                              std::string_view whole) {
  const auto slash = text.rfind('/');
  auto bad = [&] {
    return make_error(ErrorKind::usage, fmt::format("{} '{}': expected USD/day or USD/month (e.g. 200/day)",
                                                    std::string(flag), std::string(whole)));
  };
  if (slash == std::string_view::npos) return bad();
  const std::string_view unit = util::trim(text.substr(slash + 1));
  store::BudgetPeriod period;
  if (unit == "day" || unit == "d")
    period = store::BudgetPeriod::day;
  else if (unit == "month" || unit == "mo")
    period = store::BudgetPeriod::month;
  else
    return bad();
  // Exact decimal, as --budget: "0.10" is 100000 micro-dollars, not a binary double's neighbour; at most
  // $1e9.
  constexpr MicroUsd kMaxBudgetMicros = 1'000'000'000'000'000;
  auto micros = util::parse_usd_micros(util::trim(text.substr(0, slash)));
  if (!micros || *micros <= 0 || *micros > kMaxBudgetMicros) return bad();
  return std::make_pair(*micros, period);
}

}  // namespace

Result<NodeBudget> parse_node_budget(std::string_view text) {
  GM_TRY(auto amount, parse_amount(text, "--node-budget", text));
  NodeBudget b;
  b.limit_micros = amount.first;
  b.period = amount.second;
  return b;
}

Result<NodeBudget> parse_owner_budget(std::string_view whole) {
  std::string_view text = whole;
  NodeBudget b;
  if (const auto comma = text.rfind(','); comma != std::string_view::npos) {
    const std::string_view action = util::trim(text.substr(comma + 1));
    if (action == "stop")
      b.stop = true;
    else if (action != "notify")
      return make_error(ErrorKind::usage,
                        fmt::format("--owner-budget '{}': the action after ',' must be notify "
                                    "or stop",
                                    std::string(whole)));
    text = text.substr(0, comma);
  }
  const auto colon = text.find(':');
  const auto eq = text.find('=');
  if (colon == std::string_view::npos || eq == std::string_view::npos || eq < colon || colon == 0 ||
      eq == colon + 1)
    return make_error(ErrorKind::usage,
                      fmt::format("--owner-budget '{}': expected KIND:NAME=USD/day|month[,stop] (e.g. "
                                  "user:alice=50/day)",
                                  std::string(whole)));
  b.kind = std::string(util::trim(text.substr(0, colon)));
  b.name = std::string(util::trim(text.substr(colon + 1, eq - colon - 1)));
  if (b.name.empty())
    return make_error(ErrorKind::usage, fmt::format("--owner-budget '{}': no owner name after '{}:'",
                                                    std::string(whole), b.kind));
  static constexpr const char* kKinds[] = {"user",      "slurm-account", "slurm-job",
                                           "namespace", "pod",           "container"};
  if (std::none_of(std::begin(kKinds), std::end(kKinds), [&](const char* k) { return b.kind == k; }))
    return make_error(
        ErrorKind::usage,
        fmt::format("--owner-budget '{}': unknown owner kind '{}' (user, slurm-account, slurm-job, "
                    "namespace, pod, container)",
                    std::string(whole), b.kind));
  GM_TRY(auto amount, parse_amount(text.substr(eq + 1), "--owner-budget", whole));
  b.limit_micros = amount.first;
  b.period = amount.second;
  return b;
}

bool budget_matches(const NodeBudget& b, const sys::Owner& o) {
  if (b.kind.empty()) return true;
  if (b.kind == "user") return o.user == b.name;
  if (b.kind == "slurm-account") return o.slurm_account == b.name;
  if (b.kind == "slurm-job") return o.slurm_job == b.name;
  if (b.kind == "namespace") return o.pod_namespace == b.name;
  if (b.kind == "pod") return !o.pod.empty() && (o.pod_namespace + "/" + o.pod == b.name || o.pod == b.name);
  if (b.kind == "container") return !o.container.empty() && o.container == b.name;
  return false;
}

NodeGuard::NodeGuard(NodeGuardConfig config, sys::ProcessRunner& runner, NodeCommandRunner command_runner,
                     NodeRuns* runs)
    : cfg_(std::move(config)), runner_(runner), command_runner_(std::move(command_runner)), runs_(runs) {
  budgets_.resize(cfg_.budgets.size());
}

NodeEvent NodeGuard::event(const std::string& kind, const std::string& message) {
  ++status_.events[kind];
  guard::GuardEvent e;
  e.kind = kind;
  e.message = message;
  e.host = cfg_.host;
  e.command = "gpumeter agent";
  // Notifications never hold the collection: each runs on its own detached thread, bounded by its timeout.
  if (cfg_.notify_command && command_runner_)
    std::thread([run = command_runner_, cmd = *cfg_.notify_command, e] { (void)run(cmd, e); }).detach();
  if (cfg_.webhook_url)
    std::thread([url = *cfg_.webhook_url, e] { (void)guard::post_webhook(url, e); }).detach();
  return NodeEvent{kind, message};
}

NodeEvent NodeGuard::on_notice(const cloud::CloudNotice& n) {
  ++status_.notices[{std::string(cloud::provider_name(n.provider)), n.kind}];
  return event(
      n.stop ? "preempted" : "preemption_warning",
      n.detail +
          (n.deadline_unix_ms ? " (deadline " + cloud::format_iso8601(*n.deadline_unix_ms) + ")" : ""));
}

std::vector<NodeEvent> NodeGuard::step(const NodeInput& in) {
  std::vector<NodeEvent> out;
  // ---- autostop: every GPU under 5 % and without a compute process, for the whole duration.
  if (cfg_.autostop_idle_ms) {
    const bool idle = !in.gpus.empty() && std::all_of(in.gpus.begin(), in.gpus.end(), [](const NodeGpu& g) {
      return g.utilization_pct && *g.utilization_pct < kIdleUtilPct && g.processes == 0;
    });
    if (!idle) {
      idle_since_ns_.reset();
      autostop_warned_ = false;
      if (status_.autostop_done) status_.autostop_done = false;  // busy again: a later idle spell counts anew
    } else if (!idle_since_ns_) {
      idle_since_ns_ = in.now_ns;
    }
    const std::int64_t idle_ms = idle_since_ns_ ? (in.now_ns - *idle_since_ns_) / 1'000'000 : 0;
    const std::int64_t remaining_ms = std::max<std::int64_t>(0, *cfg_.autostop_idle_ms - idle_ms);
    status_.idle_s = static_cast<double>(idle_ms) / 1000.0;
    status_.autostop_remaining_s = static_cast<double>(remaining_ms) / 1000.0;
    // A warning once the end is near (the last tenth, at most 5 minutes), then the command once.
    const std::int64_t warn_ms = std::min<std::int64_t>(300'000, *cfg_.autostop_idle_ms / 10);
    if (idle_since_ns_ && !status_.autostop_done && !autostop_warned_ && remaining_ms <= warn_ms &&
        remaining_ms > 0) {
      autostop_warned_ = true;
      out.push_back(
          event("autostop_warning",
                fmt::format("every GPU idle for {}: {} in {} unless a GPU gets busy",
                            util::format_duration_s(status_.idle_s),
                            cfg_.autostop_dry_run ? "autostop (dry run)" : "'" + cfg_.autostop_command + "'",
                            util::format_duration_s(static_cast<double>(remaining_ms) / 1000.0))));
    }
    if (idle_since_ns_ && !status_.autostop_done && remaining_ms == 0) {
      status_.autostop_done = true;
      const std::string why = fmt::format("every GPU idle (under {:g}% and no compute process) for {}",
                                          kIdleUtilPct, util::format_duration_s(status_.idle_s));
      if (cfg_.autostop_dry_run) {
        out.push_back(
            event("autostop_dry_run", why + ": would run '" + cfg_.autostop_command + "' (dry run)"));
      } else {
        out.push_back(event("autostop", why + ": running '" + cfg_.autostop_command + "'"));
        guard::GuardEvent e;
        e.kind = "autostop";
        e.message = out.back().message;
        e.host = cfg_.host;
        e.command = cfg_.autostop_command;
        if (command_runner_)
          std::thread([run = command_runner_, cmd = cfg_.autostop_command, e] {
            (void)run(cmd, e);
          }).detach();
      }
    }
  }
  // ---- GPUs held idle: their processes stopped, a gpumeter run through its own checkpoint.
  if (cfg_.stop_idle_held_ms) step_idle_held(in, out);
  // ---- budgets: the run's BudgetGuard on this period's spend.
  status_.budgets.clear();
  for (std::size_t i = 0; i < cfg_.budgets.size(); ++i) {
    const NodeBudget& b = cfg_.budgets[i];
    BudgetState& st = budgets_[i];
    MicroUsd cumulative = 0;
    if (b.kind.empty()) {
      cumulative = in.node_cost_micros;
    } else {
      for (const auto& [owner, cost] : in.owner_costs)
        if (budget_matches(b, owner)) cumulative += cost;
    }
    const std::int64_t key = store::period_start_unix_ms(b.period, in.unix_ms);
    if (key != st.period_key) {
      // A new period (or the agent's first look): spend counts from here.
      st.period_key = key;
      st.baseline = cumulative;
      guard::GuardConfig g;
      g.budget_micros = b.limit_micros;
      g.warn_at_pct = {80.0};
      st.policy = guard::BudgetGuard(g);
      st.kill_at_ns.clear();
      st.over = false;
      st.over_reported = false;
    }
    const MicroUsd spent = std::max<MicroUsd>(0, cumulative - st.baseline);
    status_.budgets.push_back({b.scope(), b.period, b.limit_micros, spent});
    guard::GuardInput gi;
    gi.spent_micros = spent;
    for (const auto& d : st.policy.evaluate(gi)) {
      const std::string what =
          fmt::format("{} budget {}/{}: {}", b.scope(), util::format_usd(util::micros_to_usd(b.limit_micros)),
                      util::text_of(b.period), d.message);
      if (!d.stopped_by) {
        out.push_back(event("budget_warn", what));
        continue;
      }
      if (!b.stop || b.kind.empty()) {
        out.push_back(event("budget_over", what));
        continue;
      }
      st.over = true;
      st.over_message = what;
    }
    // Over a budget with the stop action: every GPU process of the owner gets SIGTERM (new ones too, for the
    // rest of the period), SIGKILL after the grace.
    if (st.over) {
      std::vector<std::uint32_t> pids;
      for (const auto& [pid, owner] : in.gpu_processes)
        if (budget_matches(b, owner) && !st.kill_at_ns.count(pid)) pids.push_back(pid);
      std::sort(pids.begin(), pids.end());
      pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
      if (!pids.empty() || !st.over_reported) {
        std::string list;
        for (auto pid : pids) {
          runner_.send_signal(static_cast<pid_t>(pid), SIGTERM, false);
          st.kill_at_ns[pid] = in.now_ns + cfg_.grace_ms * 1'000'000;
          list += (list.empty() ? "" : ", ") + std::to_string(pid);
        }
        st.over_reported = true;
        out.push_back(
            event("budget_stop",
                  fmt::format("{}: sent SIGTERM to its GPU process(es) {}; SIGKILL after {}", st.over_message,
                              list.empty() ? "(none now)" : list,
                              util::format_duration_s(static_cast<double>(cfg_.grace_ms) / 1000.0))));
      }
    }
    // SIGKILL after the grace to those still on a GPU.
    for (auto it = st.kill_at_ns.begin(); it != st.kill_at_ns.end();) {
      if (in.now_ns < it->second) {
        ++it;
        continue;
      }
      const std::uint32_t pid = it->first;
      const bool alive = std::any_of(in.gpu_processes.begin(), in.gpu_processes.end(),
                                     [&](const auto& p) { return p.first == pid; });
      if (alive) {
        runner_.send_signal(static_cast<pid_t>(pid), SIGKILL, false);
        out.push_back(event(
            "sigkill",
            fmt::format("{} budget: process {} did not exit within the grace: SIGKILL", b.scope(), pid)));
      }
      it->second = INT64_MAX;  // handled; kept so the PID is not signalled again this period
      ++it;
    }
  }
  return out;
}

NodeGuardLoop::NodeGuardLoop(NodeGuardConfig config, std::unique_ptr<cloud::NoticeWatcher> watcher,
                             std::int64_t interval_ms, EventSink on_event, const std::string& runs_dir)
    : runs_(runs_dir.empty() ? nullptr : std::make_unique<DirNodeRuns>(runs_dir)),
      guard_(
          std::move(config), runner_,
          [](const std::string& cmd, const guard::GuardEvent& e) {
            return guard::run_notify_command(cmd, e, e.kind == "autostop" ? 600'000 : 10'000);
          },
          runs_.get()),
      watcher_(std::move(watcher)),
      interval_ms_(interval_ms),
      on_event_(std::move(on_event)) {}

NodeGuardLoop::~NodeGuardLoop() {
  if (thread_.joinable()) thread_.join();
}

void NodeGuardLoop::step(Collector& collector) {
  NodeView view = collector.node_view();
  NodeInput in;
  in.now_ns = util::system_clock().monotonic_ns();
  in.unix_ms = util::system_clock().unix_ms();
  for (const auto& d : view.gpus) {
    NodeGpu g;
    if (d.utilization_pct) g.utilization_pct = *d.utilization_pct;
    g.processes = d.processes;
    g.pids = d.pids;
    in.gpus.push_back(g);
  }
  in.node_cost_micros = view.node_cost;
  in.owner_costs = std::move(view.owner_costs);
  in.gpu_processes = std::move(view.gpu_processes);
  std::vector<NodeEvent> events = guard_.step(in);
  if (watcher_)
    for (const auto& n : watcher_->take()) events.push_back(guard_.on_notice(n));
  if (on_event_)
    for (const auto& e : events) on_event_(e);
  NodeStatus status = guard_.status();
  status.watching_notices = watcher_ != nullptr;
  collector.set_node_status(std::move(status));
}

void NodeGuardLoop::start(Collector& collector, StopSignal& stop) {
  thread_ = std::thread([this, &collector, &stop] {
    while (!stop.requested()) {
      step(collector);
      if (stop.wait_ns(interval_ms_ * 1'000'000)) break;
    }
  });
}

std::optional<std::string> autostop_text(const std::string& host_port, std::int64_t timeout_ms,
                                         util::HttpClient& http) {
  util::HttpRequest request;
  request.scheme_host_port = "http://" + host_port;
  request.path = "/metrics";
  request.connect_timeout = request.read_timeout = std::chrono::milliseconds(timeout_ms);
  const auto res = http.send(request);
  if (!res || res->status != 200) return std::nullopt;
  auto exposition = serving::parse_exposition(res->body);
  if (!exposition) return std::nullopt;
  auto value_of = [&](std::string_view name) -> std::optional<double> {
    for (const auto& s : exposition->samples)
      if (s.name == name && s.labels.empty()) return s.value;
    return std::nullopt;
  };
  auto remaining = value_of("gpumeter_autostop_remaining_seconds");
  if (!remaining) return std::nullopt;
  const double idle = value_of("gpumeter_node_idle_seconds").value_or(0);
  if (*remaining <= 0) return "autostop ran (every GPU idle for " + util::format_duration_s(idle) + ")";
  if (idle <= 0) return "autostop armed: a GPU is busy (the countdown starts when every GPU is idle)";
  return "autostop in " + util::format_duration_s(*remaining) + " (every GPU idle for " +
         util::format_duration_s(idle) + ")";
}

}  // namespace gm::agent
