// The supervisor state machine: it sequences the run's collaborators at each event. Metering, the budget
// policy, the stop sequence's SIGKILL and the final figures are its own; every other feature lives in its
// collaborator (guard/<feature>.cpp). No descriptors, no printing.
#include "guard/supervisor.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>

#include "guard/checkpoints.h"
#include "guard/idle_held.h"
#include "guard/notebook.h"
#include "guard/progress_intake.h"
#include "guard/run_state.h"
#include "guard/serving_counters.h"
#include "guard/snapshot.h"
#include "guard/team_budget.h"
#include "util/exit_codes.h"

namespace gm::guard {
namespace {

/// Status of a finished run (issue 19): succeeded, failed, interrupted (by a signal, or the shell
/// conventions 129/130/143 for HUP/INT/TERM), stopped (by gpumeter).
store::RunStatus final_status(bool preempted, bool stopped, int wait_status) {
  if (preempted) return store::RunStatus::preempted;
  if (stopped) return store::RunStatus::stopped;
  if (WIFSIGNALED(wait_status)) return store::RunStatus::interrupted;
  const int code = sys::exit_code_of_wait_status(wait_status);
  if (code == 128 + SIGINT || code == 128 + SIGTERM || code == 128 + SIGHUP)
    return store::RunStatus::interrupted;
  return code == 0 ? store::RunStatus::succeeded : store::RunStatus::failed;
}

}  // namespace

struct Supervisor::Impl {
  Impl(const SessionConfig& c, gpu::GpuBackend* b, store::Ledger* l, const catalog::Catalog* cat,
       util::Clock& clk, sys::ProcessRunner& r, SessionSink& s)
      : st(c, b, l, clk, r, s), catalog(cat) {}

  guard::RunState st;
  const catalog::Catalog* catalog;
  guard::Checkpoints checkpoints{st};
  guard::NotebookCells cells{st};
  guard::TeamBudgets team_budgets{st};
  guard::IdleHeldWatch idle_held{st};
  guard::ServingCounters serving{st};
  guard::ProgressIntake progress{st, checkpoints};
  /// The order of every hook: at an interval, at the finish (warnings in this order), at a flush. Team
  /// budgets have no hooks: the budget policy asks them at each tick.
  const std::array<guard::Collaborator*, 5> collaborators{&cells, &idle_held, &serving, &progress,
                                                          &checkpoints};
  meter::RollupBook rollups;
  std::int64_t next_tick_ns = 0;
  std::int64_t next_status_every_ns = 0;
  bool detached = false;
  int wait_status = 0;

  void flush(bool final) {
    if (!st.ledger) {
      st.pending_samples.clear();
      st.pending_progress.clear();
      st.pending_actions.clear();
      for (auto* c : collaborators) c->drop_pending();
      return;
    }
    if (auto r = st.ledger->append(st.pending_samples, st.pending_progress, st.pending_actions); !r)
      return st.ledger_failed(r.error());
    st.pending_samples.clear();
    st.pending_progress.clear();
    st.pending_actions.clear();
    for (auto* c : collaborators)
      if (auto r = c->flush(*st.ledger); !r) return st.ledger_failed(r.error());
    if (final || rollups.changed())
      if (auto r = st.ledger->append_rollups(rollups.take_changed(st.clock.unix_ms() / 60'000)); !r)
        return st.ledger_failed(r.error());
    if (auto r = st.ledger->update_run(st.run); !r) return st.ledger_failed(r.error());
  }

  /// Applies the policy's (or the --target guard's) decisions: recorded, and a stop acted on.
  void act(const std::vector<GuardDecision>& decisions, std::int64_t now_ns, MicroUsd spent_now) {
    for (const auto& d : decisions) {
      st.record_action(d.kind, d.message, now_ns, spent_now);
      if (d.stopped_by && !st.stopping) st.stop_job(d, now_ns, spent_now);
    }
  }

  void tick(std::int64_t now_ns, bool evaluate) {
    const auto pids = st.pid > 0 ? st.runner.job_pids(st.pid) : std::set<std::uint32_t>{};
    st.gpu_match->begin(pids);
    auto samples = st.meter->tick_with(now_ns, [this](unsigned index, const gpu::DeviceSample& s) {
      return st.gpu_match->job_on_gpu(index, s);
    });
    for (const auto& text : st.gpu_match->take_notes())
      st.record_note(store::ActionKind::gpu_match, text, now_ns);
    const std::int64_t minute = st.clock.unix_ms() / 60'000;
    for (auto& s : samples) {
      s.run_id = st.run.id;
      rollups.add(s, minute);
      st.pending_samples.push_back(s);
    }
    const MicroUsd spent_now = st.spent(now_ns, false);
    st.forecast = st.forecaster.forecast(st.seconds_since_start(now_ns), util::micros_to_usd(spent_now),
                                         st.burn_usd_per_s());
    // The end is seen at the next sample and the bill rounds up to its billing unit: the upper end of the
    // interval carries one sampling interval for it.
    if (st.forecast)
      st.forecast->high_usd +=
          meter::usd_over_ms(st.burn_usd_per_s(), static_cast<double>(st.cfg.sample_interval_ms));
    GuardInput in;
    in.elapsed_ms = st.elapsed_ms(now_ns);
    in.spent_micros = spent_now;
    in.forecast = st.forecast;
    in.forecast_intervals = st.forecaster.intervals();
    if (st.cfg.telemetry && !st.cfg.attached) in.idle_for_ms = st.meter->idle_for_ms(now_ns);
    in.team_others_micros = team_budgets.others();
    if (evaluate) act(st.policy.evaluate(in), now_ns, spent_now);
    if (st.target_guard && evaluate)
      act(st.target_guard->tick(
              target_inputs(st.seconds_since_start(now_ns), st.latest_progress, st.forecast, spent_now,
                            st.burn_usd_per_s(), st.policy.config().budget_micros, st.cfg.price.has_value()),
              in.elapsed_ms, in.forecast_intervals, spent_now),
          now_ns, spent_now);
    const guard::Tick t{now_ns, spent_now, evaluate};
    for (auto* c : collaborators) c->on_interval(t);
    st.update_totals(now_ns);
    flush(false);
  }

  /// A stop asked from outside the run (MCP's stop_run, the node agent's idle stop): the budget stop's
  /// sequence, performed here by the run's own supervisor, recorded with who asked and why.
  void stop_requested(const StopRequest& r, std::int64_t now_ns) {
    if (st.pid <= 0 || !st.meter) return;  // the job has not started: nothing to stop yet
    const MicroUsd spent_now = st.spent(now_ns, false);
    const std::string who =
        r.by == store::StopReason::mcp ? "an agent through gpumeter mcp" : "the node agent";
    const std::string why = r.reason.empty() ? "" : ": " + r.reason;
    if (st.stopping) {
      st.record_note(store::ActionKind::stop_requested,
                     fmt::format("{} asked to stop the run{} (it is already stopping)", who, why), now_ns);
      return;
    }
    GuardDecision d;
    d.kind =
        r.by == store::StopReason::mcp ? store::ActionKind::stop_requested : store::ActionKind::stop_idle;
    d.stopped_by = r.by;
    d.message = fmt::format("{} asked to stop the run{}", who, why);
    act({d}, now_ns, spent_now);
    flush(false);
  }

  StatusSnapshot snapshot(std::int64_t now_ns) const {
    StatusSnapshot s = guard::run_snapshot(st, now_ns);
    for (const auto* c : collaborators) c->fill(s);
    return s;
  }
};

Supervisor::Supervisor(const SessionConfig& config, gpu::GpuBackend* backend, store::Ledger* ledger,
                       const catalog::Catalog* catalog, util::Clock& clock, sys::ProcessRunner& runner,
                       SessionSink& sink)
    : impl_(std::make_unique<Impl>(config, backend, ledger, catalog, clock, runner, sink)) {}

Supervisor::~Supervisor() = default;

std::int64_t Supervisor::begin() {
  guard::RunState& st = impl_->st;
  const SessionConfig& cfg = st.cfg;
  st.run = cfg.run;
  st.run.status = store::RunStatus::running;
  if (cfg.price) {
    st.run.price_micros_per_gpu_hour = cfg.price->micros_per_gpu_hour;
    st.run.price_source = cfg.price->source;
    st.run.provider = cfg.price->provider;
    st.run.region = cfg.price->region;
    st.run.billing_granularity_s = cfg.price->billing.granularity_s;
    st.run.billing_minimum_s = cfg.price->billing.minimum_s;
  } else {
    st.run.price_source = "none";
  }
  st.run.budget_micros = cfg.guard.budget_micros;
  const std::int64_t ago_ms = std::max<std::int64_t>(0, cfg.started_ago_ms);
  st.run.start_unix_ms = st.clock.unix_ms() - ago_ms;
  st.run.energy_method = store::RunEnergyMethod::none;
  for (unsigned idx : cfg.allocated)
    for (const auto& d : st.backend->devices())
      if (d.index == idx) st.run.gpus_allocated.push_back(d.uuid);
  if (st.ledger) {
    if (auto id = st.ledger->begin_run(st.run)) {
      st.run.id = *id;
      st.outcome.recorded = true;
    } else {
      st.warn("this run is not recorded in the ledger (the report is still printed): " + id.error().message);
      st.ledger = nullptr;
    }
  }
  const std::int64_t now_ns = st.clock.monotonic_ns();
  st.start_ns = now_ns - ago_ms * 1'000'000;
  if (st.target_guard)
    st.pending_actions.push_back(target_set_action(st.run.id, *cfg.target));  // report RUN replays it
  st.meter.emplace(*st.backend, cfg.telemetry ? cfg.allocated : std::vector<unsigned>{}, st.price_micros(),
                   st.start_ns);
  st.gpu_match.emplace(cfg.gpu_match, st.backend->devices());
  impl_->next_tick_ns = now_ns + cfg.sample_interval_ms * 1'000'000;
  if (cfg.status_every_ms) impl_->next_status_every_ns = now_ns + *cfg.status_every_ms * 1'000'000;
  if (!cfg.telemetry)
    st.warn(cfg.price ? "no GPU telemetry here (no NVIDIA GPU library): metering wall time × the price"
                      : "no GPU telemetry and no price: recording the run's time only");
  return st.run.id;
}

void Supervisor::start_failed(const Error& error) {
  guard::RunState& st = impl_->st;
  exited_ = true;
  st.run.status = store::RunStatus::failed;
  st.run.exit_code = error.kind == ErrorKind::not_found ? 127 : 126;
  st.run.end_unix_ms = st.clock.unix_ms();
  if (st.ledger) (void)st.ledger->update_run(st.run);
  st.outcome.exit_code = *st.run.exit_code;
  st.outcome.start_error = error.message;
}

void Supervisor::started(pid_t pid) {
  impl_->st.pid = pid;
}

void Supervisor::on_datagram(std::string_view datagram) {
  Impl& m = *impl_;
  const std::int64_t now = m.st.clock.monotonic_ns();
  if (m.st.cfg.control_datagrams && !exited_)
    if (auto c = parse_session_control(datagram)) {
      if (*c) {
        m.cells.on_control(**c, now);
        if ((*c)->stop) m.stop_requested(*(*c)->stop, now);
        // A budget or a stop from outside shows at once (the run's live view, which the asker reads back).
        if (m.st.meter && ((*c)->stop || (*c)->budget_micros)) m.st.sink.status(m.snapshot(now), false);
      } else
        m.progress.malformed();
      return;
    }
  m.progress.on_datagram(datagram, now);
}

void Supervisor::on_output(JobStream stream, std::string_view bytes) {
  Impl& m = *impl_;
  m.st.sink.job_output(stream, bytes);
  m.progress.on_output(stream, bytes, m.st.clock.monotonic_ns());
}

void Supervisor::on_signal(int sig) {
  guard::RunState& st = impl_->st;
  if (exited_ || st.pid <= 0) return;
  // Forwarded like a stop: to the main process by default, so its workers live while it checkpoints.
  st.runner.send_signal(st.pid, sig, st.cfg.stop_to == StopTarget::group);
}

void Supervisor::on_time() {
  Impl& m = *impl_;
  guard::RunState& st = m.st;
  if (exited_) return;
  const std::int64_t now = st.clock.monotonic_ns();
  if (now >= m.next_tick_ns) {
    m.tick(now, true);
    m.next_tick_ns += st.cfg.sample_interval_ms * 1'000'000;
    if (m.next_tick_ns <= now) m.next_tick_ns = now + st.cfg.sample_interval_ms * 1'000'000;
    bool periodic = false;
    if (st.cfg.status_every_ms && now >= m.next_status_every_ns) {
      periodic = true;
      // The cadence stays on the grid start + k × every, whatever the tick jitter.
      while (m.next_status_every_ns <= now) m.next_status_every_ns += *st.cfg.status_every_ms * 1'000'000;
    }
    st.sink.status(m.snapshot(now), periodic);
    if (st.forecast) st.nesting_revised = false;  // shown, and the forecast is back
  }
  if (st.stopping && !st.killed && now >= st.kill_deadline_ns) {
    st.killed = true;
    st.runner.send_signal(st.pid, SIGKILL, true);
    st.record_action(store::ActionKind::sigkill,
                     "the job did not exit within the grace period: sent SIGKILL to its process group", now,
                     st.spent(now, false));
  }
}

std::int64_t Supervisor::next_wake_ns() const {
  const Impl& m = *impl_;
  std::int64_t wake = m.next_tick_ns;
  if (m.st.stopping && !m.st.killed) wake = std::min(wake, m.st.kill_deadline_ns);
  return wake;
}

void Supervisor::on_inference(const serving::InferenceScrape& scrape) {
  if (!exited_) impl_->serving.on_scrape(scrape);
}

void Supervisor::on_notice(const cloud::CloudNotice& notice) {
  Impl& m = *impl_;
  if (exited_ || !m.st.meter || m.st.pid <= 0) return;
  m.checkpoints.on_notice(notice, m.st.clock.monotonic_ns());
  m.flush(false);
}

void Supervisor::on_exit(int wait_status) {
  Impl& m = *impl_;
  if (exited_) return;
  exited_ = true;
  m.wait_status = wait_status;
  m.st.end_ns = m.st.clock.monotonic_ns();
  m.tick(m.st.end_ns, false);
  m.checkpoints.scan_glob(m.st.end_ns);  // the checkpoint written on the stop signal, just before exiting
}

void Supervisor::on_detach() {
  if (exited_) return;
  impl_->detached = true;
  on_exit(0);
}

StatusSnapshot Supervisor::snapshot() const {
  return impl_->snapshot(impl_->st.clock.monotonic_ns());
}

SessionOutcome Supervisor::finish() {
  Impl& m = *impl_;
  guard::RunState& st = m.st;
  if (st.outcome.start_error) return st.outcome;
  const int job_exit = sys::exit_code_of_wait_status(m.wait_status);
  const bool preempted = m.checkpoints.preempted();
  st.run.exit_code = job_exit;
  st.run.end_unix_ms = st.clock.unix_ms();
  st.run.status = final_status(preempted, st.run.stopped_by.has_value(), m.wait_status);
  if (st.cfg.attached) {
    // Not gpumeter's child: its exit status is unknown.
    st.run.exit_code.reset();
    st.run.status = preempted           ? store::RunStatus::preempted
                    : st.run.stopped_by ? store::RunStatus::stopped
                    : m.detached        ? store::RunStatus::detached
                                        : store::RunStatus::finished;
  }
  for (auto* c : m.collaborators) c->on_finish();
  st.update_totals(st.end_ns);
  // Final figures: the bill is the billing rule on the wall time, for every allocated GPU.
  if (st.cfg.price) {
    const auto n_alloc = static_cast<unsigned>(st.cfg.telemetry ? st.cfg.allocated.size() : 1);
    st.run.cost_micros = meter::billed_cost(*st.cfg.price, st.run.billed_s, n_alloc);
    const auto n_unused =
        st.cfg.telemetry
            ? static_cast<unsigned>(n_alloc - std::min<std::size_t>(n_alloc, st.run.gpus_used.size()))
            : 0u;
    st.run.unused_gpu_cost_micros = meter::billed_cost(*st.cfg.price, st.run.billed_s, n_unused);
  }
  if (m.catalog && st.run.energy_method != store::RunEnergyMethod::none) {
    if (auto c =
            meter::estimate_carbon(st.run.energy_j / 3.6e6, *m.catalog, st.run.provider, st.run.region)) {
      st.run.co2_kg = c->co2_kg;
      st.run.carbon_source = c->intensity_source + (c->pue_source.empty() ? "" : ", PUE " + c->pue_source);
    }
  }
  m.flush(true);
  for (const auto& problem : st.notifications.settle(guard::kNotifySettleMs)) st.warn(problem);
  st.outcome.run = st.run;
  st.outcome.gpus = st.meter->usage();
  if (st.latest_progress) st.outcome.progress.push_back(*st.latest_progress);
  st.outcome.actions = st.all_actions;
  st.outcome.inference = m.serving.records();
  st.outcome.cells = m.cells.cells();
  if (st.target_guard) st.outcome.target = st.target_guard->outcome();
  st.outcome.exit_code = preempted           ? util::kExitPreempted
                         : st.run.stopped_by ? util::kExitGuardStop
                         : st.cfg.attached   ? util::kExitOk
                                             : job_exit;
  return st.outcome;
}

}  // namespace gm::guard
