// The live views of a metered session: the status line of `run` and `attach`, and attach's --json-lines
// objects (an interval's figures, a cell, an action, the start).
#include "report/live_render.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "meter/meter.h"
#include "util/money.h"
#include "util/units.h"

namespace gm::report {
namespace {

/// Display width of UTF-8 text (code points; the status line uses no wide characters).
std::size_t columns(std::string_view s) {
  std::size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

std::string cut_to_columns(const std::string& s, std::size_t width) {
  std::size_t cols = 0, i = 0;
  for (; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xc0) != 0x80) {
      if (cols == width) break;
      ++cols;
    }
  }
  return s.substr(0, i);
}

}  // namespace

std::string render_target_field(const guard::TargetStatus& t) {
  const meter::TargetForecast& f = t.forecast;
  std::string s = fmt::format("{} {} → {:g}", t.target.metric,
                              f.current_value ? fmt::format("{:.4g}", *f.current_value) : std::string("?"),
                              t.target.threshold);
  auto interval = [&] {
    if (!f.cost_to_reach_usd) return std::string();
    return fmt::format(", {} in all [{}–{}]", util::format_usd(*f.cost_to_reach_usd),
                       util::format_usd(f.low_usd.value_or(*f.cost_to_reach_usd)),
                       f.high_usd ? util::format_usd(*f.high_usd) : std::string("not reached"));
  };
  switch (f.verdict) {
    case meter::TargetVerdict::too_early:
      return s + ": too early to tell";
    case meter::TargetVerdict::reached:
      return s + fmt::format(": reached at step {:.0f}", f.reached_at_step.value_or(0)) +
             (f.cost_to_reach_usd ? ", " + util::format_usd(*f.cost_to_reach_usd) : std::string());
    case meter::TargetVerdict::on_track:
      return s + fmt::format(" at ~step {:.0f}", f.reached_at_step.value_or(0)) + interval();
    case meter::TargetVerdict::unreachable_within_steps:
      return s + ": not within the planned steps";
    case meter::TargetVerdict::unreachable_within_budget:
      return s + fmt::format(": not before the budget (~step {:.0f}", f.reached_at_step.value_or(0)) +
             interval() + ")";
  }
  return s;
}

std::string render_status_line(const guard::StatusSnapshot& s, std::size_t width) {
  struct Field {
    int drop_order;  // higher goes first
    std::string text;
  };
  std::vector<Field> f;
  f.push_back({0, fmt::format("{}gpumeter {}", s.simulated ? "SIMULATED · " : "",
                              util::format_duration_s(s.elapsed_s))});
  if (s.spent_micros)
    f.push_back({0, " · " + util::format_micros(*s.spent_micros)});
  else
    f.push_back({0, " · no price"});
  if (s.burn_usd_per_h) f.push_back({5, fmt::format(" · {}/h", util::format_usd(*s.burn_usd_per_h))});
  if (s.step)
    f.push_back(
        {4, fmt::format(" · step {}{}", *s.step, s.total_steps ? fmt::format("/{}", *s.total_steps) : "")});
  if (s.progress_note) f.push_back({4, fmt::format(" ({})", *s.progress_note)});
  if (s.forecast) {
    f.push_back({2, fmt::format(" · forecast {}", util::format_usd(s.forecast->total_usd))});
    f.push_back({6, fmt::format(" [{}–{}]", util::format_usd(s.forecast->low_usd),
                                util::format_usd(s.forecast->high_usd))});
    f.push_back({1, fmt::format(" · ETA {}", util::format_duration_s(s.forecast->remaining_s))});
  }
  if (s.target) f.push_back({3, " · " + render_target_field(*s.target)});
  if (s.budget_left_micros)
    f.push_back({1, fmt::format(" · budget left {}", util::format_micros(*s.budget_left_micros))});
  if (!s.telemetry) f.push_back({3, " · no GPU telemetry"});
  if (s.usd_per_1m_generated_tokens)
    f.push_back({2, fmt::format(" · {}/1M tok", util::format_usd(*s.usd_per_1m_generated_tokens))});
  if (s.usd_per_1k_requests)
    f.push_back({3, fmt::format(" · {}/1k req", util::format_usd(*s.usd_per_1k_requests))});
  if (s.generated_tokens_per_s) f.push_back({6, fmt::format(" · {:.0f} tok/s", *s.generated_tokens_per_s)});
  if (s.mfu) f.push_back({3, fmt::format(" · MFU {:.0f}%", *s.mfu * 100.0)});
  int gpu_order = 7;
  for (const auto& d : s.gpus) {
    std::string g = fmt::format(" · GPU{} ", d.index);
    g += d.utilization_pct ? fmt::format("{}%", *d.utilization_pct) : "n/a";
    // GPM's tensor-core activity tells a bf16 matrix product (86 %) from an fp32 one (0 %) at the same util.
    if (d.gpm.tensor_active_pct) g += fmt::format(" tensor {:.0f}%", *d.gpm.tensor_active_pct);
    f.push_back({gpu_order, g});
    std::string detail;
    if (d.memory_used_bytes) detail += " " + util::format_bytes(*d.memory_used_bytes);
    if (d.power_mw) detail += fmt::format(" {:.0f}W", *d.power_mw / 1000.0);
    if (!detail.empty()) f.push_back({gpu_order + 1, detail});
    gpu_order += 2;
  }
  if (s.stopping) f.push_back({0, " · STOPPING"});
  auto join = [&] {
    std::string out;
    for (const auto& x : f) out += x.text;
    return out;
  };
  std::string line = join();
  while (columns(line) > width) {
    auto worst = f.end();
    for (auto it = f.begin(); it != f.end(); ++it)
      if (it->drop_order > 0 && (worst == f.end() || it->drop_order >= worst->drop_order)) worst = it;
    if (worst == f.end()) return cut_to_columns(line, width);
    f.erase(worst);
    line = join();
  }
  return line;
}

namespace {

double round_to(double v, double unit) {
  return std::round(v / unit) * unit;
}

}  // namespace

nlohmann::json live_started_json(pid_t pid, std::int64_t run_id, const std::string& socket_path,
                                 std::int64_t start_unix_ms) {
  return {{"type", "started"},
          {"pid", pid},
          {"run_id", run_id},
          {"socket", socket_path},
          {"start_unix_ms", start_unix_ms}};
}

nlohmann::json live_action_json(const store::ActionRecord& a) {
  return {{"type", "action"},
          {"kind", util::text_of(a.kind)},
          {"message", a.message},
          {"t_s", static_cast<double>(a.t_ms) / 1000.0},
          {"spent_usd", util::micros_to_usd(a.cost_micros)}};
}

nlohmann::json live_cell_json(const store::CellRecord& c) {
  nlohmann::json j{{"type", "cell"},
                   {"id", c.cell_id},
                   {"start_s", static_cast<double>(c.start_ms) / 1000.0},
                   {"wall_s", static_cast<double>(c.end_ms - c.start_ms) / 1000.0},
                   {"cost_usd", util::micros_to_usd(c.cost_micros)},
                   {"status", util::text_of(c.status)},
                   {"source", c.source}};
  j["util_pct"] = c.utilization_pct ? nlohmann::json(round_to(*c.utilization_pct, 0.1)) : nlohmann::json();
  return j;
}

nlohmann::json live_status_json(const guard::StatusSnapshot& s,
                                const std::map<unsigned, std::uint64_t>& memory_total) {
  nlohmann::json j{
      {"type", "interval"}, {"elapsed_s", round_to(s.elapsed_s, 0.001)}, {"stopping", s.stopping}};
  auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  auto usd = [](const std::optional<MicroUsd>& v) {
    return v ? nlohmann::json(util::micros_to_usd(*v)) : nlohmann::json();
  };
  j["spent_usd"] = usd(s.spent_micros);
  j["usd_per_h"] = opt(s.burn_usd_per_h);
  j["budget_usd"] = usd(s.budget_micros);
  j["budget_left_usd"] = usd(s.budget_left_micros);
  j["idle_cost_usd"] = usd(s.idle_cost_micros);
  j["step"] = opt(s.step);
  j["total_steps"] = opt(s.total_steps);
  j["telemetry"] = s.telemetry;
  if (s.forecast) {
    j["forecast_usd"] = s.forecast->total_usd;
    j["forecast_low_usd"] = s.forecast->low_usd;
    j["forecast_high_usd"] = s.forecast->high_usd;
    j["eta_s"] = s.forecast->remaining_s;
  } else {
    j["forecast_usd"] = nullptr;
  }
  if (s.target)
    j["target"] = {{"text", render_target_field(*s.target)},
                   {"verdict", std::string(meter::verdict_name(s.target->forecast.verdict))},
                   {"cost_to_reach_usd", opt(s.target->forecast.cost_to_reach_usd)}};
  nlohmann::json gpus = nlohmann::json::array();
  double util_sum = 0, mem_sum = 0, mem_total = 0;
  int util_n = 0;
  bool mem_known = false, total_known = true;
  for (const auto& g : s.gpus) {
    nlohmann::json d{{"index", g.index}};
    d["util_pct"] = g.utilization_pct ? nlohmann::json(*g.utilization_pct) : nlohmann::json();
    if (g.utilization_pct) {
      util_sum += *g.utilization_pct;
      ++util_n;
    }
    if (g.memory_used_bytes) {
      d["memory_used_mib"] = round_to(static_cast<double>(*g.memory_used_bytes) / 1048576.0, 0.1);
      mem_sum += static_cast<double>(*g.memory_used_bytes);
      mem_known = true;
    } else {
      d["memory_used_mib"] = nullptr;
    }
    if (auto it = memory_total.find(g.index); it != memory_total.end()) {
      d["memory_total_mib"] = round_to(static_cast<double>(it->second) / 1048576.0, 0.1);
      mem_total += static_cast<double>(it->second);
    } else {
      total_known = false;
    }
    d["power_w"] = g.power_mw ? nlohmann::json(*g.power_mw / 1000.0) : nlohmann::json();
    gpus.push_back(d);
  }
  j["gpus"] = gpus;
  j["util_pct"] = util_n > 0 ? nlohmann::json(round_to(util_sum / util_n, 0.1)) : nlohmann::json();
  j["memory_used_mib"] = mem_known ? nlohmann::json(round_to(mem_sum / 1048576.0, 0.1)) : nlohmann::json();
  j["memory_total_mib"] = total_known && !s.gpus.empty()
                              ? nlohmann::json(round_to(mem_total / 1048576.0, 0.1))
                              : nlohmann::json();
  nlohmann::json findings = nlohmann::json::array();
  if (s.idle_held_s) {
    findings.push_back({{"kind", "idle_gpus_held"},
                        {"idle_s", round_to(*s.idle_held_s, 0.001)},
                        {"usd_per_h", opt(s.idle_held_usd_per_h)}});
  }
  j["findings"] = findings;
  return j;
}

}  // namespace gm::report
