#include "report/listings.h"

#include <fmt/format.h>
#include <fmt/printf.h>

#include <nlohmann/json.hpp>

#include "meter/meter.h"
#include "report/multi.h"
#include "report/run_report.h"
#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::report {

using util::json_or_null;

std::string render_runs_json(const std::vector<store::RunRecord>& runs) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : runs) {
    arr.push_back({{"run_id", r.id},
                   {"command", r.command},
                   {"user", r.user},
                   {"host", r.host},
                   {"labels", r.labels},
                   {"start_unix_ms", r.start_unix_ms},
                   {"end_unix_ms", json_or_null(r.end_unix_ms)},
                   {"status", util::text_of(r.status)},
                   {"status_text", describe_status(r)},
                   {"exit_code", json_or_null(r.exit_code)},
                   {"stopped_by", json_or_null(r.stopped_by)},
                   {"wall_s", static_cast<double>(r.wall_ms) / 1000.0},
                   {"billed_s", r.billed_s},
                   {"cost_usd", util::micros_to_usd(r.cost_micros)},
                   {"price_usd_per_gpu_hour", util::micros_to_usd(r.price_micros_per_gpu_hour)},
                   {"price_source", r.price_source},
                   {"gpus_allocated", r.gpus_allocated},
                   {"gpus_used", r.gpus_used},
                   {"gpu_model", r.gpu_model}});
  }
  return arr.dump(2) + "\n";
}

std::string render_runs_text(const std::vector<store::RunRecord>& runs, const std::string& ledger) {
  if (runs.empty()) return "no runs recorded yet (ledger " + ledger + ")\n";
  std::string out =
      fmt::sprintf("%6s  %-19s  %-14s  %-22s  %10s  %12s  %4s  %-18s  %s\n", "RUN", "STARTED (UTC)", "HOST",
                   "STATUS", "WALL", "COST", "GPUS", "LABELS", "COMMAND");
  for (const auto& r : runs) {
    std::string labels;
    for (const auto& [k, v] : r.labels)
      labels.append(labels.empty() ? "" : ",").append(k).append("=").append(v);
    out += fmt::sprintf(
        "%6lld  %-19s  %-14s  %-22s  %10s  %12s  %4zu  %-18s  %s\n", static_cast<long long>(r.id),
        format_time_utc(r.start_unix_ms).c_str(),
        util::shorten_middle(r.host.empty() ? "-" : r.host, 14).c_str(), describe_status(r).c_str(),
        util::format_duration_s(static_cast<double>(r.wall_ms) / 1000.0).c_str(),
        r.price_source == "none" ? "no price" : util::format_usd(util::micros_to_usd(r.cost_micros)).c_str(),
        r.gpus_allocated.size(), util::shorten_middle(labels.empty() ? std::string("-") : labels, 18).c_str(),
        r.command.c_str());
  }
  return out;
}

std::string render_budgets_json(const std::vector<guard::TeamBudgetStatus>& statuses) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& s : statuses)
    arr.push_back({{"selector", s.budget.selector},
                   {"per", util::text_of(s.budget.period)},
                   {"limit_usd", util::micros_to_usd(s.budget.limit_micros)},
                   {"spent_usd", util::micros_to_usd(s.spent_micros)},
                   {"remaining_usd",
                    util::micros_to_usd(meter::budget_left_micros(s.budget.limit_micros, s.spent_micros))},
                   {"period_start_unix_ms", s.budget.period_start_unix_ms},
                   {"runs", s.runs},
                   {"live_runs", s.live_runs}});
  return arr.dump(2) + "\n";
}

std::string render_budgets_text(const std::vector<guard::TeamBudgetStatus>& statuses) {
  if (statuses.empty()) return "no budgets (gpumeter budget set SELECTOR USD --per day|week|month)\n";
  std::string out = fmt::sprintf("%-24s  %-5s  %12s  %12s  %12s  %5s  %4s\n", "SELECTOR", "PER", "BUDGET",
                                 "SPENT", "REMAINING", "RUNS", "LIVE");
  for (const auto& s : statuses)
    out += fmt::sprintf(
        "%-24s  %-5s  %12s  %12s  %12s  %5lld  %4lld\n", s.budget.selector.c_str(),
        util::text_of(s.budget.period), util::format_usd(util::micros_to_usd(s.budget.limit_micros)).c_str(),
        util::format_usd(util::micros_to_usd(s.spent_micros)).c_str(),
        util::format_micros(meter::budget_left_micros(s.budget.limit_micros, s.spent_micros)).c_str(),
        static_cast<long long>(s.runs), static_cast<long long>(s.live_runs));
  return out;
}

std::string render_fleet_json(const FleetReport& rep, const std::string& by, const std::string& since,
                              std::int64_t range_ms) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : rep.rows)
    rows.push_back({{"key", r.key.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.key)},
                    {"cost_usd", r.cost_usd},
                    {"energy_j", json_or_null(r.energy_j)},
                    {"gpu_seconds", json_or_null(r.gpu_seconds)}});
  const nlohmann::json j = {{"by", by},
                            {"since", since},
                            {"range_s", range_ms / 1000},
                            {"device_cost_usd", rep.device_cost_usd},
                            {"owner_cost_usd", rep.owner_cost_usd},
                            {"unallocated_cost_usd", rep.unallocated_cost_usd},
                            {"idle_cost_usd", rep.idle_cost_usd},
                            {"idle_held_cost_usd", json_or_null(rep.idle_held_cost_usd)},
                            {"rows", rows}};
  return j.dump(2) + "\n";
}

std::string render_fleet_text(const FleetReport& rep, const std::string& by, const std::string& since,
                              const std::string& url) {
  std::string out =
      fmt::sprintf("Fleet GPU cost, last %s, by %s (from %s)\n\n", since.c_str(), by.c_str(), url.c_str());
  util::TextTable t;
  const char* title = by == "job" ? "slurm job" : by.c_str();
  t.header({title, "cost", "share", "energy", "GPU-hours"},
           {util::TextTable::Align::left, util::TextTable::Align::right, util::TextTable::Align::right,
            util::TextTable::Align::right, util::TextTable::Align::right});
  const double base = by == "gpu" ? rep.device_cost_usd : rep.owner_cost_usd;
  for (const auto& r : rep.rows)
    t.row({r.key.empty() ? "(none)" : r.key, util::format_usd(r.cost_usd),
           base > 0 ? fmt::format("{:.1f} %", meter::usd_share_pct(r.cost_usd, base)) : "n/a",
           r.energy_j ? fmt::format("{:.4f} kWh", *r.energy_j / 3.6e6) : "n/a",
           r.gpu_seconds ? fmt::format("{:.4f}", *r.gpu_seconds / 3600.0) : "n/a"});
  out += t.render();
  out += fmt::sprintf("\nGPU cost            %s\n", util::format_usd(rep.device_cost_usd).c_str());
  out += fmt::sprintf("  owners            %s\n", util::format_usd(rep.owner_cost_usd).c_str());
  out += fmt::sprintf("  unallocated       %s\n", util::format_usd(rep.unallocated_cost_usd).c_str());
  out += fmt::sprintf("idle (in owners)    %s\n", util::format_usd(rep.idle_cost_usd).c_str());
  // Whole intervals in which processes held a GPU that was under the idle threshold (a waiting kernel, a
  // stuck job), beside the unallocated GPUs nobody held.
  out +=
      fmt::sprintf("idle held           %s\n",
                   rep.idle_held_cost_usd ? util::format_usd(*rep.idle_held_cost_usd).c_str()
                                          : "n/a (no agent exports gpumeter_gpu_idle_held_cost_usd_total)");
  return out;
}

std::string render_scaling_json(const ScalingStudy& study) {
  std::string out = fmt::format("{{\n  \"unit\": \"{}\",\n  \"runs\": [\n", study.unit);
  for (std::size_t i = 0; i < study.rows.size(); ++i) {
    const auto& r = study.rows[i];
    out += fmt::format(
        "    {{\"run_id\": {}, \"gpus\": {}, \"throughput_per_s\": {}, \"speedup\": {}, \"efficiency\": {}, "
        "\"usd_per_unit\": {}, \"cost_ratio\": {}}}{}\n",
        r.run_id, r.gpus, r.throughput_per_s, r.speedup, r.efficiency,
        r.usd_per_unit ? fmt::format("{}", *r.usd_per_unit) : "null",
        r.cost_ratio ? fmt::format("{}", *r.cost_ratio) : "null", i + 1 < study.rows.size() ? "," : "");
  }
  out += "  ]\n}\n";
  return out;
}

std::string render_scaling_text(const ScalingStudy& study) {
  std::string out = fmt::format(
      "scaling efficiency ({} per second; baseline: the run with the fewest GPUs)\n\n", study.unit);
  util::TextTable t;
  using A = util::TextTable::Align;
  t.header({"run", "GPUs", study.unit + "/s", "speedup", "efficiency", "$ per " + study.unit, "cost ratio"},
           {A::right, A::right, A::right, A::right, A::right, A::right, A::right});
  for (const auto& r : study.rows)
    t.row({std::to_string(r.run_id), std::to_string(r.gpus), fmt::format("{:.4g}", r.throughput_per_s),
           fmt::format("{:.2f}x", r.speedup), fmt::format("{:.1f}%", r.efficiency * 100),
           util::format_usd_or(r.usd_per_unit), r.cost_ratio ? fmt::format("{:.2f}", *r.cost_ratio) : "-"});
  out += t.render();
  return out;
}

}  // namespace gm::report
