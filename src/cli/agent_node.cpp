// `gpumeter agent`'s node guard: flags, and the loop between the collector and guard/node.h.
#include "cli/agent_node.h"

#include <httplib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "util/clock.h"
#include "util/units.h"

namespace gm::cli {

void add_node_guard_flags(CLI::App& app, NodeGuardFlags& f) {
  app.add_option(
      "--autostop-idle", f.autostop_idle,
      "run --autostop-command once every GPU has been idle (under 5% and no compute process) this long "
      "(e.g. 30m); warned first");
  app.add_option(
      "--autostop-command", f.autostop_command,
      "the command autostop runs once (/bin/sh -c), e.g. 'shutdown -h now' or 'sky down mycluster'");
  app.add_flag("--autostop-dry-run", f.autostop_dry_run, "warn and record the autostop, run no command");
  app.add_option("--node-budget", f.node_budget,
                 "the node's budget, USD/day or USD/month (e.g. 200/day): notify");
  app.add_option(
      "--owner-budget", f.owner_budgets,
      "an owner's budget, KIND:NAME=USD/day|month[,stop] with KIND user, slurm-account, slurm-job, "
      "namespace, pod or container; stop: SIGTERM its GPU processes (SIGKILL after --budget-grace) "
      "(repeatable)");
  app.add_option("--budget-grace", f.budget_grace,
                 "time between SIGTERM and SIGKILL of a budget stop (default 60s)");
  app.add_option("--notify", f.notify,
                 "command run (sh -c) on every node guard action, with GPUMETER_* variables");
  app.add_option("--webhook", f.webhook, "URL receiving a JSON POST on every node guard action");
  app.add_option(
      "--preemption", f.preemption,
      "count the cloud's preemption notices: auto (the detected cloud, default), aws, gcp, azure, off");
  app.add_option(
      "--metadata-url", f.metadata_url,
      "base URL of the metadata service (default $GPUMETER_METADATA_URL, else http://169.254.169.254)");
  app.add_option("--preemption-poll", f.preemption_poll,
                 "interval between polls of the metadata service (default 5s)");
}

Result<std::unique_ptr<AgentNodeGuard>> AgentNodeGuard::create(const NodeGuardFlags& f,
                                                               std::int64_t interval_ms) {
  NodeGuardConfig cfg;
  if (f.autostop_idle || f.autostop_command || f.autostop_dry_run) {
    if (!f.autostop_idle)
      return make_error(ErrorKind::usage, "--autostop-command and --autostop-dry-run need --autostop-idle");
    auto ms = parse_duration_ms(*f.autostop_idle);
    if (!ms || *ms <= 0)
      return make_error(ErrorKind::usage,
                        "--autostop-idle '" + *f.autostop_idle + "': expected a duration such as 30m");
    if (!f.autostop_command && !f.autostop_dry_run)
      return make_error(ErrorKind::usage,
                        "--autostop-idle needs --autostop-command CMD (or --autostop-dry-run)");
    if (f.autostop_command && f.autostop_command->empty())
      return make_error(ErrorKind::usage, "--autostop-command: empty command");
    cfg.autostop_idle_ms = *ms;
    cfg.autostop_command = f.autostop_command.value_or("");
    cfg.autostop_dry_run = f.autostop_dry_run;
  }
  if (f.node_budget) {
    GM_TRY(auto b, parse_node_budget(*f.node_budget));
    cfg.budgets.push_back(b);
  }
  for (const auto& text : f.owner_budgets) {
    GM_TRY(auto b, parse_owner_budget(text));
    cfg.budgets.push_back(b);
  }
  auto grace = parse_duration_ms(f.budget_grace);
  if (!grace || *grace < 0)
    return make_error(ErrorKind::usage,
                      "--budget-grace '" + f.budget_grace + "': expected a duration such as 30s");
  cfg.grace_ms = *grace;
  if (f.webhook && f.webhook->rfind("http://", 0) != 0 && f.webhook->rfind("https://", 0) != 0)
    return make_error(ErrorKind::usage,
                      "--webhook '" + *f.webhook + "': expected an http:// or https:// URL");
  cfg.notify_command = f.notify;
  cfg.webhook_url = f.webhook;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) cfg.host = host;

  GM_TRY(auto mode, parse_preemption_mode(f.preemption));
  const char* env = std::getenv("GPUMETER_METADATA_URL");
  GM_TRY(auto base, metadata_base_url(f.metadata_url, env ? std::optional<std::string>(env) : std::nullopt));
  auto poll_ms = parse_duration_ms(f.preemption_poll);
  if (!poll_ms || *poll_ms < 10 || *poll_ms > 60'000)
    return make_error(ErrorKind::usage,
                      "--preemption-poll '" + f.preemption_poll + "': expected 10ms to 60s");
  CloudProvider provider = CloudProvider::aws;
  bool watch = false;
  if (!mode.off) {
    if (mode.provider) {
      provider = *mode.provider;
      watch = true;
    } else if (auto detected = detect_cloud_provider()) {
      provider = *detected;
      watch = true;
    }
  }

  if (!cfg.autostop_idle_ms && cfg.budgets.empty() && !watch) return std::unique_ptr<AgentNodeGuard>();
  std::unique_ptr<AgentNodeGuard> g(new AgentNodeGuard());
  g->interval_ms_ = interval_ms;
  g->guard_ = std::make_unique<NodeGuard>(cfg, g->runner_, [](const std::string& cmd, const GuardEvent& e) {
    return run_notify_command(cmd, e, e.kind == "autostop" ? 600'000 : 10'000);
  });
  if (watch)
    g->watcher_ =
        std::make_unique<NoticeWatcher>(provider, make_http_metadata_client(base, kMetadataTimeoutMs),
                                        *poll_ms, [] { return system_clock().unix_ms(); });
  return g;
}

AgentNodeGuard::~AgentNodeGuard() {
  if (thread_.joinable()) thread_.join();
}

void AgentNodeGuard::step(agent::Collector& collector) {
  agent::NodeView view = collector.node_view();
  NodeInput in;
  in.now_ns = system_clock().monotonic_ns();
  in.unix_ms = system_clock().unix_ms();
  for (const auto& d : view.gpus) {
    NodeGpu g;
    if (d.utilization_pct) g.utilization_pct = *d.utilization_pct;
    g.processes = d.processes;
    in.gpus.push_back(g);
  }
  in.node_cost_micros = view.node_cost;
  in.owner_costs = std::move(view.owner_costs);
  in.gpu_processes = std::move(view.gpu_processes);
  std::vector<NodeEvent> events = guard_->step(in);
  if (watcher_)
    for (const auto& n : watcher_->take()) events.push_back(guard_->on_notice(n));
  for (const auto& e : events)
    std::fprintf(stderr, "gpumeter agent: [%s] %s\n", e.kind.c_str(), e.message.c_str());
  const NodeGuardStatus st = guard_->status();
  agent::NodeStatus out;
  out.autostop_remaining_s = st.autostop_remaining_s;
  out.idle_s = st.idle_s;
  for (const auto& b : st.budgets) out.budgets.push_back({b.scope, b.period, b.limit_micros, b.spent_micros});
  out.notices = st.notices;
  out.events = st.events;
  out.watching_notices = watcher_ != nullptr;
  collector.set_node_status(std::move(out));
}

void AgentNodeGuard::start(agent::Collector& collector, agent::StopSignal& stop) {
  thread_ = std::thread([this, &collector, &stop] {
    while (!stop.requested()) {
      step(collector);
      if (stop.wait_ns(interval_ms_ * 1'000'000)) break;
    }
  });
}

}  // namespace gm::cli

namespace gm::cli {

std::optional<std::string> agent_autostop_text(const std::string& host_port, std::int64_t timeout_ms) {
  httplib::Client client("http://" + host_port);
  if (!client.is_valid()) return std::nullopt;
  const auto sec = static_cast<time_t>(timeout_ms / 1000);
  const auto usec = static_cast<time_t>((timeout_ms % 1000) * 1000);
  client.set_connection_timeout(sec, usec);
  client.set_read_timeout(sec, usec);
  auto res = client.Get("/metrics");
  if (!res || res->status != 200) return std::nullopt;
  auto value_of = [&](std::string_view name) -> std::optional<double> {
    const std::string& body = res->body;
    for (std::size_t pos = 0; pos < body.size();) {
      const std::size_t eol = std::min(body.find('\n', pos), body.size());
      std::string_view line(body.data() + pos, eol - pos);
      if (line.size() > name.size() && line.substr(0, name.size()) == name && line[name.size()] == ' ') {
        auto v = parse_number(trim(line.substr(name.size() + 1)));
        if (v) return *v;
      }
      pos = eol + 1;
    }
    return std::nullopt;
  };
  auto remaining = value_of("gpumeter_autostop_remaining_seconds");
  if (!remaining) return std::nullopt;
  const double idle = value_of("gpumeter_node_idle_seconds").value_or(0);
  if (*remaining <= 0) return "autostop ran (every GPU idle for " + format_duration_s(idle) + ")";
  if (idle <= 0) return "autostop armed: a GPU is busy (the countdown starts when every GPU is idle)";
  return "autostop in " + format_duration_s(*remaining) + " (every GPU idle for " + format_duration_s(idle) +
         ")";
}

}  // namespace gm::cli
