// `gpumeter agent`'s node guard flags, turned into the agent's node guard.
#include "cli/agent_node.h"

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
  app.add_option(
      "--stop-idle-held", f.stop_idle_held,
      "stop the processes that have held a GPU idle (under 5% with memory in use) this long (e.g. 2h), "
      "warned "
      "first: a gpumeter run through its own checkpoint (its stop signal and grace), any other process with "
      "SIGTERM, SIGKILL after --budget-grace");
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

Result<std::unique_ptr<agent::NodeGuardLoop>> make_node_guard(const NodeGuardFlags& f,
                                                              std::int64_t interval_ms,
                                                              const std::string& runs_dir) {
  agent::NodeGuardConfig cfg;
  if (f.autostop_idle || f.autostop_command || f.autostop_dry_run) {
    if (!f.autostop_idle)
      return make_error(ErrorKind::usage, "--autostop-command and --autostop-dry-run need --autostop-idle");
    auto ms = util::parse_duration_ms(*f.autostop_idle);
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
  if (f.stop_idle_held) {
    auto ms = util::parse_duration_ms(*f.stop_idle_held);
    if (!ms || *ms <= 0)
      return make_error(ErrorKind::usage,
                        "--stop-idle-held '" + *f.stop_idle_held + "': expected a duration such as 2h");
    cfg.stop_idle_held_ms = *ms;
  }
  if (f.node_budget) {
    GM_TRY(auto b, agent::parse_node_budget(*f.node_budget));
    cfg.budgets.push_back(b);
  }
  for (const auto& text : f.owner_budgets) {
    GM_TRY(auto b, agent::parse_owner_budget(text));
    cfg.budgets.push_back(b);
  }
  auto grace = util::parse_duration_ms(f.budget_grace);
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

  GM_TRY(auto mode, cloud::parse_preemption_mode(f.preemption));
  const char* env = std::getenv("GPUMETER_METADATA_URL");
  GM_TRY(auto base,
         cloud::metadata_base_url(f.metadata_url, env ? std::optional<std::string>(env) : std::nullopt));
  auto poll_ms = util::parse_duration_ms(f.preemption_poll);
  if (!poll_ms || *poll_ms < 10 || *poll_ms > 60'000)
    return make_error(ErrorKind::usage,
                      "--preemption-poll '" + f.preemption_poll + "': expected 10ms to 60s");
  cloud::CloudProvider provider = cloud::CloudProvider::aws;
  bool watch = false;
  if (!mode.off) {
    if (mode.provider) {
      provider = *mode.provider;
      watch = true;
    } else if (auto detected = cloud::detect_cloud_provider()) {
      provider = *detected;
      watch = true;
    }
  }

  if (!cfg.autostop_idle_ms && !cfg.stop_idle_held_ms && cfg.budgets.empty() && !watch)
    return std::unique_ptr<agent::NodeGuardLoop>();
  std::unique_ptr<cloud::NoticeWatcher> watcher;
  if (watch)
    watcher = std::make_unique<cloud::NoticeWatcher>(
        provider, cloud::make_http_metadata_client(base, cloud::kMetadataTimeoutMs), *poll_ms,
        [] { return util::system_clock().unix_ms(); });
  return std::make_unique<agent::NodeGuardLoop>(
      cfg, std::move(watcher), interval_ms,
      [](const agent::NodeEvent& e) {
        std::fprintf(stderr, "gpumeter agent: [%s] %s\n", e.kind.c_str(), e.message.c_str());
      },
      runs_dir);
}

}  // namespace gm::cli
