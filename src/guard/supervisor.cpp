// The supervisor state machine of `gpumeter run`: events in, metering, guard decisions, process actions
// (through ProcessRunner), ledger records and status snapshots out. No descriptors, no printing.
#include <fmt/format.h>
#include <glob.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "guard/session.h"
#include "serving/serving.h"
#include "util/exit_codes.h"
#include "util/units.h"

namespace gm {
namespace {

/// Status of a finished run (issue 19): succeeded, failed, interrupted (by a signal, or the shell
/// conventions 129/130/143 for HUP/INT/TERM), stopped (by gpumeter).
std::string final_status(bool preempted, bool stopped, int wait_status) {
  if (preempted) return "preempted";
  if (stopped) return "stopped";
  if (WIFSIGNALED(wait_status)) return "interrupted";
  const int code = exit_code_of_wait_status(wait_status);
  if (code == 128 + SIGINT || code == 128 + SIGTERM || code == 128 + SIGHUP) return "interrupted";
  return code == 0 ? "succeeded" : "failed";
}

/// Models of one engine that get counters (an engine's labels are input, not trusted).
constexpr std::size_t kMaxServedModels = 64;

/// Notebook cells started and not ended that an attached session keeps (the oldest are dropped).
constexpr std::size_t kMaxOpenCells = 64;

/// How long a finished run waits for its notifications (a --notify command or webhook still running).
constexpr std::int64_t kNotifySettleMs = 2000;

}  // namespace

struct Supervisor::Impl {
  Impl(const SessionConfig& c, GpuBackend* b, Ledger* l, const Catalog* cat, Clock& clk, ProcessRunner& r,
       SessionSink& s)
      : cfg(c),
        backend(b ? b : &no_gpu),
        ledger(l),
        catalog(cat),
        clock(clk),
        runner(r),
        sink(s),
        guard(c.guard) {}

  const SessionConfig cfg;
  StaticGpuBackend no_gpu;  ///< no devices: a run without GPU telemetry meters wall time × price
  GpuBackend* backend;
  Ledger* ledger;
  const Catalog* catalog;
  Clock& clock;
  ProcessRunner& runner;
  SessionSink& sink;
  BudgetGuard guard;
  Forecaster forecaster;
  std::optional<TargetGuard> target_guard =
      cfg.target ? std::optional<TargetGuard>(std::in_place, *cfg.target, cfg.guard) : std::nullopt;
  OutputProgressParser output_parser;  ///< one tracker for both streams: bars nest across them
  std::optional<RunMeter> meter;
  std::optional<JobGpuMatcher> gpu_match;  ///< which allocated GPUs the job uses (guard/gpu_match.h)
  SessionOutcome outcome;
  RunRecord run;
  pid_t pid = -1;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t next_tick_ns = 0;
  std::int64_t next_status_every_ns = 0;
  std::vector<SampleRecord> pending_samples;
  std::vector<ProgressRecord> pending_progress;
  std::vector<ActionRecord> pending_actions;
  std::vector<ActionRecord> all_actions;
  std::map<std::pair<std::int64_t, unsigned>, RollupRecord> rollups;
  std::set<std::pair<std::int64_t, unsigned>> dirty_rollups;
  std::optional<ProgressRecord> latest_progress;
  bool first_step_stored = false;  ///< the first point with a step past 0 is pending or stored
  bool keep_pending_back = false;  ///< the last pending point is that first step: not to be replaced
  std::optional<Forecast> forecast;
  std::optional<std::string> progress_note;  ///< why the progress is ambiguous, for the status line
  bool nesting_revised = false;  ///< the nesting changed and the status line has not shown a new forecast
  std::int64_t malformed = 0;
  /// Notifications in flight: detached threads share this, so a hanging webhook never holds the run.
  struct Notifications {
    std::mutex mutex;
    std::condition_variable done;
    int pending = 0;
    std::vector<std::string> errors;
  };
  std::shared_ptr<Notifications> notifications = std::make_shared<Notifications>();
  // Serving counters (--inference-endpoint), per model: cumulative since the run's start, restarts folded in.
  struct ModelServed {
    std::array<serving::CounterDelta, 4> deltas;  // prompt, generated, cached, requests
    std::array<double, 4> total{};
    std::array<bool, 4> has{};
  };
  std::map<std::string, ModelServed> served;
  std::string serving_engine, serving_endpoint, serving_error;
  std::optional<double> serving_start_time_s;
  std::int64_t serving_ok = 0, serving_failed = 0, serving_restarts = 0;
  bool served_changed = false;
  std::vector<InferenceRecord> pending_inference, all_inference;
  struct ServingPoint {
    std::int64_t t_ns = 0;
    MicroUsd spent = 0;
    double generated = 0, requests = 0;
  };
  std::deque<ServingPoint> serving_window;
  std::vector<bool> team_unchecked;  ///< per team budget: it could not be checked at the last tick
  // attach: notebook cells, the idle-with-memory-held watch, detaching.
  struct OpenCell {
    std::int64_t start_ns = 0;
    MicroUsd spent_start = 0;
    double util_sum = 0;
    std::int64_t util_n = 0;
    std::string source;
  };
  std::map<std::int64_t, OpenCell> open_cells;
  std::vector<CellRecord> pending_cells, all_cells;
  std::optional<std::int64_t> idle_held_ms;  ///< current stretch of idle GPUs with memory held
  bool idle_held_recorded = false;
  bool detached = false;
  // Preemption notices and checkpoints (issue 28).
  bool preempted = false;
  std::set<std::string> warned_notices;
  std::optional<std::int64_t> last_checkpoint_ns;
  MicroUsd checkpoint_spent = 0;                    ///< spend when the last checkpoint was seen
  std::optional<std::int64_t> checkpoint_mtime_ns;  ///< newest mtime matching --checkpoint-glob
  bool checkpoint_gap_warned = false;
  bool stopping = false;
  bool killed = false;
  std::int64_t kill_deadline_ns = 0;
  int wait_status = 0;

  MicroUsd price_micros() const { return cfg.price ? cfg.price->micros_per_gpu_hour : 0; }
  std::int64_t elapsed_ms(std::int64_t now_ns) const { return (now_ns - start_ns) / 1'000'000; }
  double seconds_since_start(std::int64_t now_ns) const {
    return static_cast<double>(now_ns - start_ns) / 1e9;
  }

  /// Spend so far: metered GPU cost, or without GPU telemetry the wall time at the price (one unit).
  MicroUsd spent(std::int64_t now_ns, bool extrapolate) const {
    if (!cfg.telemetry) return CostIntegrator(price_micros()).add_ns(now_ns - start_ns);
    return extrapolate ? meter->spent_at(now_ns) : meter->spent_micros();
  }
  double burn_usd_per_s() const {
    if (!cfg.telemetry) return gm::burn_usd_per_s(price_micros(), 1);
    return meter->burn_usd_per_s();
  }

  void warn(const std::string& msg) {
    outcome.warnings.push_back(msg);
    sink.message(msg, true);
  }
  void ledger_failed(const Error& e) {
    warn("ledger write failed, the rest of this run is not recorded: " + e.message);
    ledger = nullptr;
    outcome.recorded = false;
  }

  void on_progress(const ProgressUpdate& u, std::int64_t now_ns) {
    if (u.empty() || !meter) return;
    adopt_client_flops(run, u);
    if (u.flops_per_token && !u.step && !u.total_steps && !u.samples && !u.tokens && u.metrics.empty() &&
        !u.checkpoint)
      return;
    if (u.checkpoint) checkpoint_seen(now_ns, *u.checkpoint, "gpumeter.checkpoint()");
    if (u.checkpoint && !u.step && !u.total_steps && !u.samples && !u.tokens && u.metrics.empty()) return;
    const double t_s = static_cast<double>(now_ns - start_ns) / 1e9;
    std::optional<std::int64_t> total = u.total_steps ? u.total_steps : cfg.run.total_steps;
    if (u.step && total && *u.step > *total) {
      // Never a step past its total: the total (--total-steps, or the client's) was wrong.
      total.reset();
      progress_note = "step past the given total: total unknown";
    } else if (u.step || u.ambiguity) {
      progress_note = total ? std::nullopt : u.ambiguity;
    }
    if (u.nesting_changed) {
      // The unit of a step changed: no forecast mixes two units; it is withheld until it is re-estimated,
      // and the status line says so at least once.
      forecaster = Forecaster();
      forecast.reset();
      nesting_revised = true;
    }
    if (u.step) forecaster.add(t_s, *u.step, total);
    ProgressRecord p;
    if (latest_progress) p = *latest_progress;  // fields not in this update keep their last value
    p.run_id = run.id;
    p.t_ms = elapsed_ms(now_ns);
    if (u.step) {
      p.step = u.step;
      // A step from the job's output comes with its whole context: no total carried over from before.
      if (u.total_steps || u.ambiguity || u.nesting_changed) p.total_steps.reset();
    }
    if (total) p.total_steps = total;
    if (p.step && p.total_steps && *p.step > *p.total_steps) p.total_steps.reset();
    if (u.samples) p.samples = u.samples;
    if (u.tokens) p.tokens = u.tokens;
    for (const auto& [k, v] : u.metrics) p.metrics[k] = v;
    p.cost_micros = spent(now_ns, true);
    latest_progress = p;
    if (target_guard) target_guard->on_progress(u, p.step, t_s, micros_to_usd(p.cost_micros));
    // At most one stored point per second per source burst: replace a pending point of the same second,
    // except the job's first step, kept at its own time (it can end the start-up, docs/run.md "Report"), and a
    // value of the --target metric (up to kTargetPointsPerSecond: `report RUN` replays the fit).
    const bool first_step = p.step && *p.step > 0 && !first_step_stored;
    const bool keep = first_step || (target_guard && target_guard->keeps(u, p.t_ms));
    if (!keep && !pending_progress.empty() && !keep_pending_back &&
        pending_progress.back().t_ms / 1000 == p.t_ms / 1000)
      pending_progress.back() = p;
    else
      pending_progress.push_back(p);
    keep_pending_back = keep;
    first_step_stored = first_step_stored || first_step;
  }

  void notify(const GuardEvent& e) {
    auto start = [this](std::function<Result<void>()> send) {
      auto state = notifications;
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        ++state->pending;
      }
      std::thread([state, send = std::move(send)] {
        auto r = send();
        std::lock_guard<std::mutex> lock(state->mutex);
        if (!r) state->errors.push_back(r.error().message);
        --state->pending;
        state->done.notify_all();
      }).detach();
    };
    if (cfg.notify_command) start([cmd = *cfg.notify_command, e] { return run_notify_command(cmd, e); });
    if (cfg.webhook_url) start([url = *cfg.webhook_url, e] { return post_webhook(url, e); });
  }

  /// Waits for notifications still in flight, at most `wait_ms` after the job ended; returns the problems.
  std::vector<std::string> settle_notifications(std::int64_t wait_ms) {
    std::unique_lock<std::mutex> lock(notifications->mutex);
    notifications->done.wait_for(lock, std::chrono::milliseconds(wait_ms),
                                 [&] { return notifications->pending == 0; });
    std::vector<std::string> problems = std::move(notifications->errors);
    notifications->errors.clear();
    if (notifications->pending > 0)
      problems.push_back(fmt::format("{} notification(s) still in flight when the job ended were abandoned",
                                     notifications->pending));
    return problems;
  }

  /// Records, shows and notifies an action; `spent_micros` is the figure its message quotes.
  void record_action(const std::string& kind, const std::string& message, std::int64_t now_ns,
                     MicroUsd spent_micros) {
    pending_actions.push_back(ActionRecord{run.id, elapsed_ms(now_ns), kind, spent_micros, message});
    all_actions.push_back(pending_actions.back());
    sink.message(fmt::format("[{}] {}", kind, message), false);
    sink.action(all_actions.back());
    GuardEvent e;
    e.run_id = run.id;
    e.kind = kind;
    e.message = message;
    e.cost_micros = spent_micros;
    e.budget_micros = guard.config().budget_micros;
    if (forecast) e.forecast_usd = forecast->total_usd;
    e.command = run.command;
    e.host = run.host;
    notify(e);
  }

  /// A fact about how the run was metered, kept with its actions (the report shows it as a note): shown
  /// once, never notified.
  void record_note(const std::string& kind, const std::string& message, std::int64_t now_ns) {
    pending_actions.push_back(ActionRecord{run.id, elapsed_ms(now_ns), kind, spent(now_ns, false), message});
    all_actions.push_back(pending_actions.back());
    sink.message(fmt::format("note: {}", message), false);
    sink.action(all_actions.back());
  }

  void update_totals(std::int64_t now_ns) {
    run.wall_ms = elapsed_ms(now_ns);
    run.billed_s = billed_seconds(run.wall_ms, cfg.price ? cfg.price->billing : BillingRule{});
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

  void on_inference(const InferenceScrape& scrape) {
    if (!scrape.endpoint.empty()) serving_endpoint = scrape.endpoint;
    if (!scrape.error.empty()) {
      ++serving_failed;
      serving_error = scrape.error;
      return;
    }
    ++serving_ok;
    serving_engine = scrape.engine;
    // The server is the run's own: its counters count from zero. A counter below its last value, or a new
    // process start time, is an engine restart: the new value counts from zero (never negative, never twice).
    const bool restarted =
        scrape.start_time_s && serving_start_time_s && *scrape.start_time_s != *serving_start_time_s;
    if (scrape.start_time_s) serving_start_time_s = scrape.start_time_s;
    bool dropped = false;
    for (const auto& [name, counts] : scrape.models) {
      if (!served.count(name) && served.size() >= kMaxServedModels) continue;
      auto [it, added] = served.try_emplace(name);
      ModelServed& m = it->second;
      if (added) {
        served_changed = true;
        for (auto& d : m.deltas) d.start_from_zero();  // the run's own server: everything it served counts
      }
      const std::array<std::optional<double>, 4> now{counts.prompt_tokens, counts.generated_tokens,
                                                     counts.cached_tokens, counts.requests};
      for (std::size_t k = 0; k < 4; ++k) {
        if (!now[k] || !std::isfinite(*now[k])) continue;
        const unsigned resets = m.deltas[k].resets();
        const double delta = m.deltas[k].add(std::max(0.0, *now[k]), restarted);
        dropped = dropped || m.deltas[k].resets() > resets;
        if (!m.has[k]) served_changed = true;
        m.has[k] = true;
        if (delta > 0) {
          m.total[k] += delta;
          served_changed = true;
        }
      }
    }
    if (restarted || dropped) ++serving_restarts;
  }

  /// Live serving window and ledger rows at a tick.
  void tick_serving(std::int64_t now_ns, MicroUsd spent_now) {
    if (served.empty()) return;
    ServingPoint p{now_ns, spent_now, 0, 0};
    for (const auto& [name, m] : served) {
      p.generated += m.total[1];
      p.requests += m.total[3];
    }
    serving_window.push_back(p);
    while (serving_window.size() > 2 && now_ns - serving_window[1].t_ns >= kServingWindowMs * 1'000'000)
      serving_window.pop_front();
    if (!served_changed) return;
    served_changed = false;
    for (const auto& [name, m] : served) {
      InferenceRecord r;
      r.run_id = run.id;
      r.t_ms = elapsed_ms(now_ns);
      r.model = name;
      r.engine = serving_engine;
      if (m.has[0]) r.prompt_tokens = m.total[0];
      if (m.has[1]) r.generated_tokens = m.total[1];
      if (m.has[2]) r.cached_tokens = m.total[2];
      if (m.has[3]) r.requests = m.total[3];
      r.cost_micros = spent_now;
      pending_inference.push_back(r);
      all_inference.push_back(r);
    }
  }

  void flush(bool final) {
    if (!ledger) {
      pending_inference.clear();
      pending_cells.clear();
      pending_samples.clear();
      pending_progress.clear();
      pending_actions.clear();
      return;
    }
    if (auto r = ledger->append(pending_samples, pending_progress, pending_actions); !r)
      return ledger_failed(r.error());
    pending_samples.clear();
    pending_progress.clear();
    pending_actions.clear();
    if (auto r = ledger->append_inference(pending_inference); !r) return ledger_failed(r.error());
    pending_inference.clear();
    if (auto r = ledger->append_cells(pending_cells); !r) return ledger_failed(r.error());
    pending_cells.clear();
    if (final || !dirty_rollups.empty()) {
      std::vector<RollupRecord> rs;
      for (const auto& k : dirty_rollups) rs.push_back(rollups[k]);
      if (auto r = ledger->append_rollups(rs); !r) return ledger_failed(r.error());
      dirty_rollups.clear();
      // Minutes that are complete are never touched again.
      const std::int64_t current = clock.unix_ms() / 60'000;
      for (auto it = rollups.begin(); it != rollups.end();)
        it = it->first.first < current ? rollups.erase(it) : std::next(it);
    }
    if (auto r = ledger->update_run(run); !r) return ledger_failed(r.error());
  }

  /// The job wrote a checkpoint (a datagram or a file matching --checkpoint-glob).
  void checkpoint_seen(std::int64_t now_ns, const std::string& path, const std::string& how) {
    last_checkpoint_ns = now_ns;
    checkpoint_spent = spent(now_ns, true);
    checkpoint_gap_warned = false;
    run.last_checkpoint_ms = elapsed_ms(now_ns);
    // Recorded (the report's history and gaps), neither printed nor notified: jobs checkpoint often.
    pending_actions.push_back(
        ActionRecord{run.id, elapsed_ms(now_ns), "checkpoint", checkpoint_spent,
                     path.empty() ? "checkpoint (" + how + ")" : path + " (" + how + ")"});
    all_actions.push_back(pending_actions.back());
  }

  /// Newest mtime of the files matching --checkpoint-glob; a newer one than before is a checkpoint.
  void scan_checkpoint_glob(std::int64_t now_ns) {
    if (!cfg.checkpoint_glob) return;
    std::string pattern = *cfg.checkpoint_glob;
    if (pattern.empty() || pattern.front() != '/') pattern = cfg.checkpoint_dir + "/" + pattern;
    glob_t g{};
    std::optional<std::int64_t> newest;
    std::string newest_path;
    if (::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g) == 0) {
      for (std::size_t i = 0; i < g.gl_pathc && i < 100'000; ++i) {
        struct stat st {};
        if (::stat(g.gl_pathv[i], &st) != 0 || !S_ISREG(st.st_mode)) continue;
        const std::int64_t m =
            static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
        if (!newest || m > *newest) {
          newest = m;
          newest_path = g.gl_pathv[i];
        }
      }
    }
    globfree(&g);
    if (!newest) return;
    // Files older than the run (a previous run's checkpoint) set the baseline without counting.
    const bool first = !checkpoint_mtime_ns;
    if (!first && *newest <= *checkpoint_mtime_ns) return;
    const bool before_run = *newest / 1'000'000 < run.start_unix_ms;
    checkpoint_mtime_ns = newest;
    if (first && before_run) return;
    checkpoint_seen(now_ns, newest_path, "--checkpoint-glob");
  }

  /// Warns once per gap when a spot job goes longer than its checkpoint interval without one.
  void check_checkpoint_gap(std::int64_t now_ns) {
    if (!cfg.checkpoint_interval_ms || checkpoint_gap_warned || stopping) return;
    const std::int64_t since_ns = last_checkpoint_ns.value_or(start_ns);
    const std::int64_t gap_ms = (now_ns - since_ns) / 1'000'000;
    if (gap_ms <= *cfg.checkpoint_interval_ms) return;
    checkpoint_gap_warned = true;
    const MicroUsd at_risk =
        cost_between_micros(spent(now_ns, false), last_checkpoint_ns ? checkpoint_spent : 0);
    record_action("no_recent_checkpoint",
                  fmt::format("no checkpoint for {} (the expected interval on this spot capacity is {}): "
                              "{} of work would be lost if the machine were taken now",
                              format_duration_s(static_cast<double>(gap_ms) / 1000.0),
                              format_duration_s(static_cast<double>(*cfg.checkpoint_interval_ms) / 1000.0),
                              format_usd(micros_to_usd(std::max<MicroUsd>(0, at_risk)))),
                  now_ns, spent(now_ns, false));
  }

  void on_notice(const CloudNotice& n, std::int64_t now_ns) {
    const std::string provider(provider_name(n.provider));
    const std::int64_t now_unix = clock.unix_ms();
    std::string when;
    if (n.deadline_unix_ms)
      when = fmt::format(
          " (deadline {}, in {})", format_iso8601(*n.deadline_unix_ms),
          format_duration_s(static_cast<double>(std::max<std::int64_t>(0, *n.deadline_unix_ms - now_unix)) /
                            1000.0));
    if (!n.stop) {
      if (!warned_notices.insert(n.id).second) return;
      record_action("preemption_warning", n.detail + when, now_ns, spent(now_ns, false));
      return;
    }
    if (preempted) return;
    preempted = true;
    run.preemption_provider = provider;
    run.preemption_notice_unix_ms = now_unix;
    run.preemption_deadline_unix_ms = n.deadline_unix_ms;
    const MicroUsd spent_now = spent(now_ns, false);
    record_action("preempted", n.detail + when, now_ns, spent_now);
    if (!stopping) {
      GuardDecision d;
      d.kind = "preempted";
      d.stopped_by = "preemption";
      stop_job(d, now_ns, spent_now);
    } else {
      run.stopped_by = "preemption";
    }
    // SIGKILL after the grace or just before the provider's deadline, whichever comes first (never before
    // one second after the stop signal: a deadline already past is a clock problem, not a reason to give
    // the job no time at all).
    if (n.deadline_unix_ms) {
      const std::int64_t before_deadline_ns =
          now_ns + (*n.deadline_unix_ms - kPreemptionKillMarginMs - now_unix) * 1'000'000;
      kill_deadline_ns = std::min(kill_deadline_ns, std::max(before_deadline_ns, now_ns + 1'000'000'000));
    }
    flush(false);
  }

  void stop_job(const GuardDecision& d, std::int64_t now_ns, MicroUsd spent_micros) {
    stopping = true;
    run.stopped_by = d.stopped_by;
    const bool group = cfg.stop_to == StopTarget::group;
    runner.send_signal(pid, cfg.stop_signal, group);
    const std::string target = group ? (cfg.attached ? "process tree" : "process group") : "main process";
    if (!cfg.kill_after_grace) {
      killed = true;  // the signal is the whole action: nothing follows
      record_action(
          to_lower(signal_name(cfg.stop_signal)),
          fmt::format("sent {} to the job's {} (no SIGKILL follows)", signal_name(cfg.stop_signal), target),
          now_ns, spent_micros);
      return;
    }
    record_action(to_lower(signal_name(cfg.stop_signal)),
                  fmt::format("sent {} to the job's {}; {} grace before SIGKILL to its {}",
                              signal_name(cfg.stop_signal), target,
                              format_duration_s(static_cast<double>(cfg.grace_ms) / 1000.0),
                              cfg.attached ? "process tree" : "process group"),
                  now_ns, spent_micros);
    kill_deadline_ns = now_ns + cfg.grace_ms * 1'000'000;
  }

  /// Mean utilization of the allocated GPUs' latest samples (nullopt when none is known).
  std::optional<double> mean_util() const {
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

  /// The idle_gpus_held watch at a tick: every allocated GPU idle while a process of the job holds memory.
  void watch_idle_held(std::int64_t now_ns, MicroUsd spent_now) {
    if (!cfg.idle_held_ms || !cfg.telemetry) return;
    bool held = false;
    for (const auto& d : meter->latest())
      if (gpu_match->job_holds_memory(d)) held = true;
    const auto idle = meter->idle_for_ms(now_ns);
    if (!held || !idle || *idle < *cfg.idle_held_ms) {
      idle_held_ms.reset();
      idle_held_recorded = false;
      return;
    }
    idle_held_ms = *idle;
    if (idle_held_recorded) return;
    idle_held_recorded = true;
    record_action(
        "idle_gpus_held",
        fmt::format("the GPUs have been under {:.0f}% utilization for {} while the job holds memory "
                    "on them: {}/h for nothing (free the memory or shut the kernel down)",
                    kIdleUtilPct, format_duration_s(static_cast<double>(*idle) / 1000.0),
                    format_usd(usd_per_hour_of_burn(burn_usd_per_s()))),
        now_ns, spent_now);
  }

  void cell_event(const CellEvent& c, std::int64_t now_ns) {
    if (c.start) {
      // Cells are sequential in a kernel; starts without ends (a sender gone wrong) must not grow without
      // end.
      if (open_cells.size() >= kMaxOpenCells && !open_cells.count(c.cell_id))
        open_cells.erase(open_cells.begin());
      OpenCell& o = open_cells[c.cell_id];
      o = OpenCell{now_ns, spent(now_ns, true), 0, 0, c.source};
      return;
    }
    auto it = open_cells.find(c.cell_id);
    if (it == open_cells.end()) {
      if (c.status != "refused") return;  // an end without a start: nothing was metered
      it = open_cells.emplace(c.cell_id, OpenCell{now_ns, spent(now_ns, true), 0, 0, c.source}).first;
    }
    end_cell(it->first, it->second, c.status, now_ns);
    open_cells.erase(it);
  }

  void end_cell(std::int64_t id, const OpenCell& o, const std::string& status, std::int64_t now_ns) {
    CellRecord r;
    r.run_id = run.id;
    r.cell_id = id;
    r.start_ms = elapsed_ms(o.start_ns);
    r.end_ms = elapsed_ms(now_ns);
    r.cost_micros = std::max<MicroUsd>(0, cost_between_micros(spent(now_ns, true), o.spent_start));
    if (o.util_n > 0)
      r.utilization_pct = o.util_sum / static_cast<double>(o.util_n);
    else if (cfg.telemetry)
      r.utilization_pct = mean_util();
    r.status = status;
    r.source = o.source;
    pending_cells.push_back(r);
    all_cells.push_back(r);
    sink.cell(r);
  }

  void control(const SessionControl& c, std::int64_t now_ns) {
    if (c.cell) cell_event(*c.cell, now_ns);
    if (c.budget_micros || c.warn_at_pct) {
      GuardConfig g = guard.config();
      if (c.budget_micros) g.budget_micros = *c.budget_micros;
      if (c.warn_at_pct) g.warn_at_pct = *c.warn_at_pct;
      guard = BudgetGuard(g);  // a latched stop is released: the new budget is evaluated afresh
      if (stopping && !cfg.kill_after_grace) stopping = false;
      killed = !cfg.kill_after_grace;
      run.budget_micros = g.budget_micros;
      record_action("budget",
                    g.budget_micros ? fmt::format("budget set to {}", format_micros(*g.budget_micros))
                                 : std::string("warning percentages changed"),
                    now_ns, spent(now_ns, true));
    }
  }

  void tick(std::int64_t now_ns, bool evaluate_guard) {
    const auto pids = pid > 0 ? runner.job_pids(pid) : std::set<std::uint32_t>{};
    gpu_match->begin(pids);
    auto samples = meter->tick_with(
        now_ns, [this](unsigned index, const DeviceSample& s) { return gpu_match->job_on_gpu(index, s); });
    for (const auto& text : gpu_match->take_notes()) record_note(kGpuMatchNoteKind, text, now_ns);
    if (const auto util = mean_util())
      for (auto& [id, o] : open_cells) {
        o.util_sum += *util;
        ++o.util_n;
      }
    const std::int64_t minute = clock.unix_ms() / 60'000;
    for (auto& s : samples) {
      s.run_id = run.id;
      auto key = std::make_pair(minute, s.gpu_index);
      RollupRecord& r = rollups[key];
      r.run_id = run.id;
      r.minute_unix = minute;
      r.gpu_index = s.gpu_index;
      ++r.samples;
      r.utilization_sum_pct += s.utilization_pct.value_or(0);
      if (s.memory_used_bytes)
        r.memory_max_bytes = std::max(r.memory_max_bytes, static_cast<double>(*s.memory_used_bytes));
      r.energy_j += s.energy_j;
      r.cost_micros += s.cost_micros;
      dirty_rollups.insert(key);
      pending_samples.push_back(s);
    }
    const MicroUsd spent_now = spent(now_ns, false);
    forecast = forecaster.forecast(static_cast<double>(now_ns - start_ns) / 1e9, micros_to_usd(spent_now),
                                   burn_usd_per_s());
    // The end is seen at the next sample and the bill rounds up to its billing unit: the upper end of the
    // interval carries one sampling interval for it.
    if (forecast)
      forecast->high_usd += usd_over_ms(burn_usd_per_s(), static_cast<double>(cfg.sample_interval_ms));
    GuardInput in;
    in.elapsed_ms = elapsed_ms(now_ns);
    in.spent_micros = spent_now;
    in.forecast = forecast;
    in.forecast_intervals = forecaster.intervals();
    if (cfg.telemetry && !cfg.attached) in.idle_for_ms = meter->idle_for_ms(now_ns);
    in.team_others_micros = team_others();
    for (const auto& d : evaluate_guard ? guard.evaluate(in) : std::vector<GuardDecision>{}) {
      record_action(d.kind, d.message, now_ns, spent_now);
      if (!d.stopped_by.empty() && !stopping) stop_job(d, now_ns, spent_now);
    }
    if (target_guard && evaluate_guard)
      for (const auto& d : target_guard->tick(
               target_inputs(seconds_since_start(now_ns), latest_progress, forecast, spent_now,
                             burn_usd_per_s(), guard.config().budget_micros, cfg.price.has_value()),
               in.elapsed_ms, in.forecast_intervals, spent_now)) {
        record_action(d.kind, d.message, now_ns, spent_now);
        if (!d.stopped_by.empty() && !stopping) stop_job(d, now_ns, spent_now);
      }
    watch_idle_held(now_ns, spent_now);
    tick_serving(now_ns, spent_now);
    if (evaluate_guard) {
      scan_checkpoint_glob(now_ns);
      check_checkpoint_gap(now_ns);
    }
    update_totals(now_ns);
    flush(false);
  }

  /// What the other runs of each team budget's selector spent, from the shared ledger (every machine's
  /// runs write their spend there at every tick); nullopt for a budget that cannot be checked now, said once.
  std::vector<std::optional<MicroUsd>> team_others() {
    const auto& budgets = cfg.guard.team_budgets;
    std::vector<std::optional<MicroUsd>> out(budgets.size());
    team_unchecked.resize(budgets.size(), false);
    for (std::size_t i = 0; i < budgets.size(); ++i) {
      const TeamBudget& b = budgets[i];
      Result<SelectorSpend> spend = ledger ? ledger->selector_spend(b.key, b.value, b.period_start_unix_ms, run.id)
                                           : Result<SelectorSpend>(make_error(ErrorKind::unavailable, "no ledger"));
      if (spend) {
        out[i] = spend->spent_micros;
        if (team_unchecked[i]) sink.message("team budget " + b.selector + " can be checked again", false);
        team_unchecked[i] = false;
      } else if (!team_unchecked[i]) {
        team_unchecked[i] = true;
        warn("team budget " + b.selector + " cannot be checked now (" + spend.error().message + "): " +
             (cfg.guard.budget_micros ? "this run falls back to its own --budget" : "this run has no --budget to fall back to"));
      }
    }
    return out;
  }

  StatusSnapshot snapshot(std::int64_t now_ns) const {
    StatusSnapshot s;
    s.simulated = cfg.simulated;
    s.telemetry = cfg.telemetry;
    s.elapsed_s = static_cast<double>(now_ns - start_ns) / 1e9;
    if (cfg.price) {
      s.spent_micros = spent(now_ns, true);
      s.burn_usd_per_h = usd_per_hour_of_burn(burn_usd_per_s());
      if (guard.config().budget_micros)
        s.budget_left_micros = budget_left_micros(*guard.config().budget_micros, *s.spent_micros);
    }
    s.run_id = run.id;
    s.budget_micros = guard.config().budget_micros;
    if (cfg.price && cfg.telemetry) s.idle_cost_micros = run.idle_cost_micros;
    if (idle_held_ms) {
      s.idle_held_s = static_cast<double>(*idle_held_ms) / 1000.0;
      if (cfg.price) s.idle_held_usd_per_h = usd_per_hour_of_burn(burn_usd_per_s());
    }
    if (latest_progress) {
      s.step = latest_progress->step;
      s.total_steps = latest_progress->total_steps;
    }
    s.progress_note = progress_note;
    if (nesting_revised && !s.progress_note)
      s.progress_note = forecast ? "progress nesting revised" : "progress nesting revised: forecast restarts";
    s.forecast = forecast;
    if (target_guard) s.target = target_guard->status();
    if (meter) s.gpus = meter->latest();
    if (meter)
      s.mfu = live_mfu(run, latest_progress, meter->usage(), cfg.mfu_peak_tflops, cfg.allocated.size(),
                       s.elapsed_s);
    s.stopping = stopping;
    if (serving_window.size() >= 2) {
      const ServingPoint& a = serving_window.front();
      const ServingPoint& b = serving_window.back();
      const double generated = b.generated - a.generated, requests = b.requests - a.requests;
      if (cfg.price && generated > 0)
        s.usd_per_1m_generated_tokens = usd_per_units(cost_between_micros(b.spent, a.spent), generated, 1e6);
      if (cfg.price && requests > 0)
        s.usd_per_1k_requests = usd_per_units(cost_between_micros(b.spent, a.spent), requests, 1e3);
      if (b.t_ns > a.t_ns)
        s.generated_tokens_per_s = generated / (static_cast<double>(b.t_ns - a.t_ns) / 1e9);
    }
    return s;
  }
};

Supervisor::Supervisor(const SessionConfig& config, GpuBackend* backend, Ledger* ledger,
                       const Catalog* catalog, Clock& clock, ProcessRunner& runner, SessionSink& sink)
    : impl_(std::make_unique<Impl>(config, backend, ledger, catalog, clock, runner, sink)) {}

Supervisor::~Supervisor() = default;

std::int64_t Supervisor::begin() {
  Impl& m = *impl_;
  m.run = m.cfg.run;
  m.run.status = "running";
  if (m.cfg.price) {
    m.run.price_micros_per_gpu_hour = m.cfg.price->micros_per_gpu_hour;
    m.run.price_source = m.cfg.price->source;
    m.run.provider = m.cfg.price->provider;
    m.run.region = m.cfg.price->region;
    m.run.billing_granularity_s = m.cfg.price->billing.granularity_s;
    m.run.billing_minimum_s = m.cfg.price->billing.minimum_s;
  } else {
    m.run.price_source = "none";
  }
  m.run.budget_micros = m.cfg.guard.budget_micros;
  const std::int64_t ago_ms = std::max<std::int64_t>(0, m.cfg.started_ago_ms);
  m.run.start_unix_ms = m.clock.unix_ms() - ago_ms;
  m.run.energy_method = "none";
  for (unsigned idx : m.cfg.allocated)
    for (const auto& d : m.backend->devices())
      if (d.index == idx) m.run.gpus_allocated.push_back(d.uuid);
  if (m.ledger) {
    if (auto id = m.ledger->begin_run(m.run)) {
      m.run.id = *id;
      m.outcome.recorded = true;
    } else {
      m.warn("this run is not recorded in the ledger (the report is still printed): " + id.error().message);
      m.ledger = nullptr;
    }
  }
  const std::int64_t now_ns = m.clock.monotonic_ns();
  m.start_ns = now_ns - ago_ms * 1'000'000;
  if (m.target_guard)
    m.pending_actions.push_back(target_set_action(m.run.id, *m.cfg.target));  // report RUN replays it
  m.meter.emplace(*m.backend, m.cfg.telemetry ? m.cfg.allocated : std::vector<unsigned>{}, m.price_micros(),
                  m.start_ns);
  m.gpu_match.emplace(m.cfg.gpu_match, m.backend->devices());
  m.next_tick_ns = now_ns + m.cfg.sample_interval_ms * 1'000'000;
  if (m.cfg.status_every_ms) m.next_status_every_ns = now_ns + *m.cfg.status_every_ms * 1'000'000;
  if (!m.cfg.telemetry)
    m.warn(m.cfg.price ? "no GPU telemetry here (no NVIDIA GPU library): metering wall time × the price"
                       : "no GPU telemetry and no price: recording the run's time only");
  return m.run.id;
}

void Supervisor::start_failed(const Error& error) {
  Impl& m = *impl_;
  exited_ = true;
  m.run.status = "failed";
  m.run.exit_code = error.kind == ErrorKind::not_found ? 127 : 126;
  m.run.end_unix_ms = m.clock.unix_ms();
  if (m.ledger) (void)m.ledger->update_run(m.run);
  m.outcome.exit_code = *m.run.exit_code;
  m.outcome.start_error = error.message;
}

void Supervisor::started(pid_t pid) {
  impl_->pid = pid;
}

void Supervisor::on_datagram(std::string_view datagram) {
  if (impl_->cfg.control_datagrams && !exited_)
    if (auto c = parse_session_control(datagram)) {
      if (*c)
        impl_->control(**c, impl_->clock.monotonic_ns());
      else
        ++impl_->malformed;
      return;
    }
  auto u = parse_progress_message(datagram);
  if (u)
    impl_->on_progress(*u, impl_->clock.monotonic_ns());
  else
    ++impl_->malformed;
}

void Supervisor::on_output(JobStream stream, std::string_view bytes) {
  Impl& m = *impl_;
  m.sink.job_output(stream, bytes);
  const std::int64_t now = m.clock.monotonic_ns();
  for (const auto& u : m.output_parser.feed(bytes, static_cast<double>(now - m.start_ns) / 1e9,
                                            stream == JobStream::err ? 1u : 0u))
    m.on_progress(u, now);
}

void Supervisor::on_signal(int sig) {
  Impl& m = *impl_;
  if (exited_ || m.pid <= 0) return;
  // Forwarded like a stop: to the main process by default, so its workers live while it checkpoints.
  m.runner.send_signal(m.pid, sig, m.cfg.stop_to == StopTarget::group);
}

void Supervisor::on_time() {
  Impl& m = *impl_;
  if (exited_) return;
  const std::int64_t now = m.clock.monotonic_ns();
  if (now >= m.next_tick_ns) {
    m.tick(now, true);
    m.next_tick_ns += m.cfg.sample_interval_ms * 1'000'000;
    if (m.next_tick_ns <= now) m.next_tick_ns = now + m.cfg.sample_interval_ms * 1'000'000;
    bool periodic = false;
    if (m.cfg.status_every_ms && now >= m.next_status_every_ns) {
      periodic = true;
      // The cadence stays on the grid start + k × every, whatever the tick jitter.
      while (m.next_status_every_ns <= now) m.next_status_every_ns += *m.cfg.status_every_ms * 1'000'000;
    }
    m.sink.status(m.snapshot(now), periodic);
    if (m.forecast) m.nesting_revised = false;  // shown, and the forecast is back
  }
  if (m.stopping && !m.killed && now >= m.kill_deadline_ns) {
    m.killed = true;
    m.runner.send_signal(m.pid, SIGKILL, true);
    m.record_action("sigkill",
                    "the job did not exit within the grace period: sent SIGKILL to its process group", now,
                    m.spent(now, false));
  }
}

std::int64_t Supervisor::next_wake_ns() const {
  const Impl& m = *impl_;
  std::int64_t wake = m.next_tick_ns;
  if (m.stopping && !m.killed) wake = std::min(wake, m.kill_deadline_ns);
  return wake;
}

void Supervisor::on_inference(const InferenceScrape& scrape) {
  if (!exited_) impl_->on_inference(scrape);
}

void Supervisor::on_notice(const CloudNotice& notice) {
  if (!exited_ && impl_->meter && impl_->pid > 0) impl_->on_notice(notice, impl_->clock.monotonic_ns());
}

void Supervisor::on_exit(int wait_status) {
  Impl& m = *impl_;
  if (exited_) return;
  exited_ = true;
  m.wait_status = wait_status;
  m.end_ns = m.clock.monotonic_ns();
  m.tick(m.end_ns, false);
  m.scan_checkpoint_glob(m.end_ns);  // the checkpoint written on the stop signal, just before exiting
}

void Supervisor::on_detach() {
  Impl& m = *impl_;
  if (exited_) return;
  m.detached = true;
  on_exit(0);
}

StatusSnapshot Supervisor::snapshot() const {
  return impl_->snapshot(impl_->clock.monotonic_ns());
}

SessionOutcome Supervisor::finish() {
  Impl& m = *impl_;
  if (m.outcome.start_error) return m.outcome;
  // Final figures: the bill is the billing rule on the wall time, for every allocated GPU.
  const int job_exit = exit_code_of_wait_status(m.wait_status);
  m.run.exit_code = job_exit;
  m.run.end_unix_ms = m.clock.unix_ms();
  m.run.status = final_status(m.preempted, m.run.stopped_by.has_value(), m.wait_status);
  if (m.cfg.attached) {
    // Not gpumeter's child: its exit status is unknown.
    m.run.exit_code.reset();
    m.run.status = m.preempted         ? "preempted"
                   : m.run.stopped_by ? "stopped"
                   : m.detached       ? "detached"
                                      : "finished";
  }
  for (const auto& [id, o] : m.open_cells) m.end_cell(id, o, "unfinished", m.end_ns);
  m.open_cells.clear();
  m.update_totals(m.end_ns);
  // Work lost: the spend since the last checkpoint of a run that did not succeed (all of it without one).
  if (m.run.status != "succeeded" && m.cfg.price)
    m.run.lost_work_micros = std::max<MicroUsd>(
        0, cost_between_micros(m.spent(m.end_ns, false), m.last_checkpoint_ns ? m.checkpoint_spent : 0));
  if (m.cfg.price) {
    const auto n_alloc = static_cast<unsigned>(m.cfg.telemetry ? m.cfg.allocated.size() : 1);
    m.run.cost_micros = billed_cost(*m.cfg.price, m.run.billed_s, n_alloc);
    const auto n_unused =
        m.cfg.telemetry
            ? static_cast<unsigned>(n_alloc - std::min<std::size_t>(n_alloc, m.run.gpus_used.size()))
            : 0u;
    m.run.unused_gpu_cost_micros = billed_cost(*m.cfg.price, m.run.billed_s, n_unused);
  }
  if (m.catalog && m.run.energy_method != "none") {
    if (auto c = estimate_carbon(m.run.energy_j / 3.6e6, *m.catalog, m.run.provider, m.run.region)) {
      m.run.co2_kg = c->co2_kg;
      m.run.carbon_source = c->intensity_source + (c->pue_source.empty() ? "" : ", PUE " + c->pue_source);
    }
  }
  if (m.cfg.inference && m.serving_ok == 0)
    m.warn("no engine metrics were read from the server" +
           (m.serving_endpoint.empty() ? std::string(" (no listening port of the job answered /metrics)")
                                       : " at " + m.serving_endpoint) +
           (m.serving_error.empty() ? std::string() : ": " + m.serving_error));
  if (m.serving_restarts > 0)
    m.warn(fmt::format("the serving engine restarted {} time(s): its counters were continued from zero",
                       m.serving_restarts));
  if (m.malformed > 0) m.warn(fmt::format("{} malformed progress message(s) ignored", m.malformed));
  if (m.cfg.notices) {
    const WatcherHealth h = m.cfg.notices->health();
    if (h.polls_failed > 0)
      m.warn(
          fmt::format("the {} metadata service did not give a usable answer to {} of {} polls (last: {}): "
                      "preemption notices may have been missed; `gpumeter doctor` checks it",
                      provider_name(m.cfg.notices->provider()), h.polls_failed, h.polls_failed + h.polls_ok,
                      h.last_error.empty() ? "answered later" : h.last_error));
  }
  m.flush(true);
  for (const auto& problem : m.settle_notifications(kNotifySettleMs)) m.warn(problem);
  m.outcome.run = m.run;
  m.outcome.gpus = m.meter->usage();
  if (m.latest_progress) m.outcome.progress.push_back(*m.latest_progress);
  m.outcome.actions = m.all_actions;
  m.outcome.inference = m.all_inference;
  m.outcome.cells = m.all_cells;
  if (m.target_guard) m.outcome.target = m.target_guard->outcome();
  m.outcome.exit_code = m.preempted          ? kExitPreempted
                        : m.run.stopped_by   ? kExitGuardStop
                        : m.cfg.attached     ? kExitOk
                                             : job_exit;
  return m.outcome;
}

}  // namespace gm
