// The shared state of a supervised run: spend, actions, warnings, the stop sequence and the running totals.
#include "guard/run_state.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <utility>

#include "util/units.h"

namespace gm::guard {

namespace {

/// The action each named stop signal is recorded as (a signal given by number: ActionKind::signal).
constexpr std::pair<int, store::ActionKind> kSignalActions[] = {
    {SIGTERM, store::ActionKind::sigterm}, {SIGINT, store::ActionKind::sigint},
    {SIGHUP, store::ActionKind::sighup},   {SIGQUIT, store::ActionKind::sigquit},
    {SIGKILL, store::ActionKind::sigkill}, {SIGUSR1, store::ActionKind::sigusr1},
    {SIGUSR2, store::ActionKind::sigusr2}};

store::ActionKind signal_action(int sig) {
  for (const auto& [s, kind] : kSignalActions)
    if (s == sig) return kind;
  return store::ActionKind::signal;
}

}  // namespace

RunState::RunState(const SessionConfig& c, gpu::GpuBackend* b, store::Ledger* l, util::Clock& clk,
                   sys::ProcessRunner& r, SessionSink& s)
    : cfg(c),
      backend(b ? b : &no_gpu),
      ledger(l),
      clock(clk),
      runner(r),
      sink(s),
      policy(c.guard),
      target_guard(c.target ? std::optional<TargetGuard>(std::in_place, *c.target, c.guard) : std::nullopt),
      notifications(c.notify_command, c.webhook_url) {}

MicroUsd RunState::spent(std::int64_t now_ns, bool extrapolate) const {
  if (!cfg.telemetry) return meter::CostIntegrator(price_micros()).add_ns(now_ns - start_ns);
  return extrapolate ? meter->spent_at(now_ns) : meter->spent_micros();
}

double RunState::burn_usd_per_s() const {
  if (!cfg.telemetry) return gm::meter::burn_usd_per_s(price_micros(), 1);
  return meter->burn_usd_per_s();
}

std::optional<double> RunState::mean_util() const {
  double sum = 0;
  int n = 0;
  for (const auto& d : meter->latest())
    if (d.utilization_pct) {
      sum += std::min<double>(100.0, *d.utilization_pct);
      ++n;
    }
  if (n == 0) return std::nullopt;
  return sum / n;
}

void RunState::warn(const std::string& msg) {
  outcome.warnings.push_back(msg);
  sink.message(msg, true);
}

void RunState::ledger_failed(const Error& e) {
  warn("ledger write failed, the rest of this run is not recorded: " + e.message);
  ledger = nullptr;
  outcome.recorded = false;
}

void RunState::record_action(store::ActionKind kind, const std::string& message, std::int64_t now_ns,
                             MicroUsd spent_micros) {
  pending_actions.push_back(store::ActionRecord{run.id, elapsed_ms(now_ns), kind, spent_micros, message});
  all_actions.push_back(pending_actions.back());
  sink.message(fmt::format("[{}] {}", util::text_of(kind), message), false);
  sink.action(all_actions.back());
  GuardEvent e;
  e.run_id = run.id;
  e.kind = util::text_of(kind);
  e.message = message;
  e.cost_micros = spent_micros;
  e.budget_micros = policy.config().budget_micros;
  if (forecast) e.forecast_usd = forecast->total_usd;
  e.command = run.command;
  e.host = run.host;
  notifications.send(e);
}

void RunState::record_note(store::ActionKind kind, const std::string& message, std::int64_t now_ns) {
  pending_actions.push_back(
      store::ActionRecord{run.id, elapsed_ms(now_ns), kind, spent(now_ns, false), message});
  all_actions.push_back(pending_actions.back());
  sink.message(fmt::format("note: {}", message), false);
  sink.action(all_actions.back());
}

void RunState::record_quiet(store::ActionRecord action) {
  pending_actions.push_back(std::move(action));
  all_actions.push_back(pending_actions.back());
}

void RunState::stop_job(const GuardDecision& d, std::int64_t now_ns, MicroUsd spent_micros) {
  stopping = true;
  if (d.stopped_by) run.stopped_by = util::text_of(*d.stopped_by);
  const bool group = cfg.stop_to == StopTarget::group;
  runner.send_signal(pid, cfg.stop_signal, group);
  const std::string target = group ? (cfg.attached ? "process tree" : "process group") : "main process";
  if (!cfg.kill_after_grace) {
    killed = true;  // the signal is the whole action: nothing follows
    record_action(signal_action(cfg.stop_signal),
                  fmt::format("sent {} to the job's {} (no SIGKILL follows)",
                              sys::signal_name(cfg.stop_signal), target),
                  now_ns, spent_micros);
    return;
  }
  record_action(signal_action(cfg.stop_signal),
                fmt::format("sent {} to the job's {}; {} grace before SIGKILL to its {}",
                            sys::signal_name(cfg.stop_signal), target,
                            util::format_duration_s(static_cast<double>(cfg.grace_ms) / 1000.0),
                            cfg.attached ? "process tree" : "process group"),
                now_ns, spent_micros);
  kill_deadline_ns = now_ns + cfg.grace_ms * 1'000'000;
}

void RunState::update_totals(std::int64_t now_ns) {
  run.wall_ms = elapsed_ms(now_ns);
  run.billed_s = meter::billed_seconds(run.wall_ms, cfg.price ? cfg.price->billing : catalog::BillingRule{});
  run.cost_micros = spent(now_ns, false);
  MicroUsd idle = 0;
  for (const auto& g : meter->usage())
    if (g.used) idle += g.idle_cost_micros;
  run.idle_cost_micros = idle;
  run.gpus_used = meter->used_uuids();
  run.energy_j = meter->energy_j();
  run.energy_method = meter->energy_method();
  if (forecast) run.forecast_cost_usd = forecast->total_usd;
  if (latest_progress) {
    run.steps = latest_progress->step;
    run.samples_done = latest_progress->samples;
    run.tokens_done = latest_progress->tokens;
    if (latest_progress->total_steps) run.total_steps = latest_progress->total_steps;
  }
}

}  // namespace gm::guard
