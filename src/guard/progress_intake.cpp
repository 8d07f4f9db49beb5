// Progress of a supervised run: each update moves the run's latest point and the forecaster, and becomes
// at most one stored point per second.
#include "guard/progress_intake.h"

#include <fmt/format.h>

namespace gm::guard {

void ProgressIntake::on_datagram(std::string_view datagram, std::int64_t now_ns) {
  auto u = parse_progress_message(datagram);
  if (u)
    on_progress(*u, now_ns);
  else
    ++malformed_;
}

void ProgressIntake::on_output(JobStream stream, std::string_view bytes, std::int64_t now_ns) {
  for (const auto& u :
       output_parser_.feed(bytes, st_.seconds_since_start(now_ns), stream == JobStream::err ? 1u : 0u))
    on_progress(u, now_ns);
}

void ProgressIntake::on_finish() {
  if (malformed_ > 0) st_.warn(fmt::format("{} malformed progress message(s) ignored", malformed_));
}

void ProgressIntake::on_progress(const ProgressUpdate& u, std::int64_t now_ns) {
  if (u.empty() || !st_.meter) return;
  store::RunRecord& run = st_.run;
  adopt_client_flops(run, u);
  if (u.flops_per_token && !u.step && !u.total_steps && !u.samples && !u.tokens && u.metrics.empty() &&
      !u.checkpoint)
    return;
  if (u.checkpoint) checkpoints_.seen(now_ns, *u.checkpoint, "gpumeter.checkpoint()");
  if (u.checkpoint && !u.step && !u.total_steps && !u.samples && !u.tokens && u.metrics.empty()) return;
  const double t_s = st_.seconds_since_start(now_ns);
  std::optional<std::int64_t> total = u.total_steps ? u.total_steps : st_.cfg.run.total_steps;
  if (u.step && total && *u.step > *total) {
    // Never a step past its total: the total (--total-steps, or the client's) was wrong.
    total.reset();
    st_.progress_note = "step past the given total: total unknown";
  } else if (u.step || u.ambiguity) {
    st_.progress_note = total ? std::nullopt : u.ambiguity;
  }
  if (u.nesting_changed) {
    // The unit of a step changed: no forecast mixes two units; it is withheld until it is re-estimated,
    // and the status line says so at least once.
    st_.forecaster = meter::Forecaster();
    st_.forecast.reset();
    st_.nesting_revised = true;
  }
  if (u.step) st_.forecaster.add(t_s, *u.step, total);
  store::ProgressRecord p;
  if (st_.latest_progress) p = *st_.latest_progress;  // fields not in this update keep their last value
  p.run_id = run.id;
  p.t_ms = st_.elapsed_ms(now_ns);
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
  p.cost_micros = st_.spent(now_ns, true);
  st_.latest_progress = p;
  if (st_.target_guard) st_.target_guard->on_progress(u, p.step, t_s, util::micros_to_usd(p.cost_micros));
  // At most one stored point per second per source burst: replace a pending point of the same second,
  // except the job's first step, kept at its own time (it can end the start-up, docs/run.md "Report"), and a
  // value of the --target metric (up to kTargetPointsPerSecond: `report RUN` replays the fit).
  const bool first_step = p.step && *p.step > 0 && !first_step_stored_;
  const bool keep = first_step || (st_.target_guard && st_.target_guard->keeps(u, p.t_ms));
  auto& pending = st_.pending_progress;
  if (!keep && !pending.empty() && !keep_pending_back_ && pending.back().t_ms / 1000 == p.t_ms / 1000)
    pending.back() = p;
  else
    pending.push_back(p);
  keep_pending_back_ = keep;
  first_step_stored_ = first_step_stored_ || first_step;
}

}  // namespace gm::guard
