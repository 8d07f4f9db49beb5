// The live status of a supervised run and the job's status file.
#include "guard/snapshot.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "util/json.h"

namespace gm::guard {

StatusSnapshot run_snapshot(const RunState& st, std::int64_t now_ns) {
  StatusSnapshot s;
  s.simulated = st.cfg.simulated;
  s.telemetry = st.cfg.telemetry;
  s.elapsed_s = st.seconds_since_start(now_ns);
  const auto budget = st.policy.config().budget_micros;
  if (st.cfg.price) {
    s.spent_micros = st.spent(now_ns, true);
    s.burn_usd_per_h = meter::usd_per_hour_of_burn(st.burn_usd_per_s());
    if (budget) s.budget_left_micros = meter::budget_left_micros(*budget, *s.spent_micros);
  }
  s.run_id = st.run.id;
  s.budget_micros = budget;
  if (st.cfg.price && st.cfg.telemetry) s.idle_cost_micros = st.run.idle_cost_micros;
  if (st.latest_progress) {
    s.step = st.latest_progress->step;
    s.total_steps = st.latest_progress->total_steps;
  }
  s.progress_note = st.progress_note;
  if (st.nesting_revised && !s.progress_note)
    s.progress_note =
        st.forecast ? "progress nesting revised" : "progress nesting revised: forecast restarts";
  s.forecast = st.forecast;
  if (st.target_guard) s.target = st.target_guard->status();
  if (st.meter) {
    s.gpus = st.meter->latest();
    s.mfu = live_mfu(st.run, st.latest_progress, st.meter->usage(), st.cfg.mfu_peak_tflops,
                     st.cfg.allocated.size(), s.elapsed_s);
  }
  s.stopping = st.stopping;
  s.job_pid = st.pid > 0 ? st.pid : 0;
  return s;
}

void write_status_file(const std::string& path, const StatusSnapshot& s, std::int64_t run_id,
                       std::int64_t unix_ms) {
  nlohmann::json j;
  j["version"] = 1;
  j["run_id"] = run_id;
  j["written_unix_ms"] = unix_ms;
  j["elapsed_s"] = s.elapsed_s;
  j["spent_micros"] = util::json_or_null(s.spent_micros);
  j["spent_usd"] =
      s.spent_micros ? nlohmann::json(util::micros_to_usd(*s.spent_micros)) : nlohmann::json(nullptr);
  j["burn_usd_per_s"] = s.burn_usd_per_h ? nlohmann::json(meter::usd_per_s_of_hourly(*s.burn_usd_per_h))
                                         : nlohmann::json(nullptr);
  j["budget_left_usd"] = s.budget_left_micros ? nlohmann::json(util::micros_to_usd(*s.budget_left_micros))
                                              : nlohmann::json(nullptr);
  j["step"] = util::json_or_null(s.step);
  j["total_steps"] = util::json_or_null(s.total_steps);
  j["forecast_usd"] = s.forecast ? nlohmann::json(s.forecast->total_usd) : nlohmann::json(nullptr);
  j["stopping"] = s.stopping;
  if (s.target) {
    // --target: what the job (the Optuna callback) can act on.
    const meter::TargetForecast& f = s.target->forecast;
    auto num = [](const std::optional<double>& v) {
      return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
    };
    j["target"] = {{"metric", s.target->target.metric},
                   {"op", s.target->target.at_most ? "<=" : ">="},
                   {"value", s.target->target.threshold},
                   {"verdict", std::string(meter::verdict_name(f.verdict))},
                   {"current_value", num(f.current_value)},
                   {"reached_at_step", num(f.reached_at_step)},
                   {"cost_to_reach_usd", num(f.cost_to_reach_usd)},
                   {"low_usd", num(f.low_usd)},
                   {"high_usd", num(f.high_usd)}};
  }
  const std::string text = j.dump() + "\n";
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  sys::write_all(fd, text);
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) unlink(tmp.c_str());
}

}  // namespace gm::guard
