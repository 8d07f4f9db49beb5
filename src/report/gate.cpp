#include "report/gate.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "meter/meter.h"
#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::report {

using util::json_or_null;

namespace {
/// Parses a signed number with an optional trailing '%'.
std::optional<std::pair<double, bool>> signed_amount(std::string_view text) {
  text = util::trim(text);
  if (text.empty()) return std::nullopt;
  bool negative = false;
  bool explicit_sign = false;
  if (text.front() == '-' || text.front() == '+') {
    negative = text.front() == '-';
    explicit_sign = true;
    text.remove_prefix(1);
  }
  (void)explicit_sign;
  bool pct = false;
  if (!text.empty() && text.back() == '%') {
    pct = true;
    text.remove_suffix(1);
  }
  auto v = util::parse_number(text);
  if (!v) return std::nullopt;
  return std::make_pair(negative ? -*v : *v, pct);
}
}  // namespace

Result<MinGain> parse_min_gain(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return make_error(ErrorKind::usage, "--min-gain '" + std::string(text) + "': " + why +
                                            " (expected METRIC=N% or METRIC=+X, e.g. acc=2%)");
  };
  auto eq = text.find('=');
  if (eq == std::string_view::npos) return bad("no '='");
  std::string name(util::trim(text.substr(0, eq)));
  if (name.empty()) return bad("no metric name");
  auto amount = signed_amount(text.substr(eq + 1));
  if (!amount) return bad("'" + std::string(text.substr(eq + 1)) + "' is not a number");
  return MinGain{name, amount->first, amount->second};
}

Result<double> parse_cost_increase_pct(std::string_view text) {
  auto amount = signed_amount(text);
  if (!amount)
    return make_error(ErrorKind::usage,
                      "--max-cost-increase '" + std::string(text) + "': expected a percentage such as 20%");
  return amount->first;
}

namespace {
CompareRow make_row(std::string name, std::optional<double> a, std::optional<double> b) {
  CompareRow row;
  row.name = std::move(name);
  row.a = a;
  row.b = b;
  if (a && b) {
    row.delta = *b - *a;
    if (*a != 0) row.delta_pct = (*b - *a) / std::fabs(*a) * 100.0;
  }
  return row;
}
std::string num(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v);
  return fmt::format("{:.6g}", v);
}
/// A row's value with the unit its name carries, formatted as `report` formats it ($, durations, kWh).
std::string display(const std::string& name, double v) {
  const auto ends = [&](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends("_usd") || name.rfind("usd_per", 0) == 0)
    return v < 0 ? "-" + util::format_usd(-v) : util::format_usd(v);
  if (ends("_per_s")) return fmt::format("{:.1f}/s", v);
  if (ends("_s")) return v < 0 ? "-" + util::format_duration_s(-v) : util::format_duration_s(v);
  if (ends("_kwh")) return fmt::format("{:.4f} kWh", v);
  if (name.rfind("metric:", 0) == 0) return fmt::format("{:.4g}", v);
  return num(v);
}
}  // namespace

Result<CompareResult> compare_runs(const CompareSide& a, const CompareSide& b, const GateOptions& gate) {
  CompareResult res;
  res.run_a = a.run.id;
  res.run_b = b.run.id;
  // Metrics required by the gate must exist on both sides: a missing one is a usage error, not a pass.
  for (const auto& g : gate.min_gains) {
    for (const CompareSide* side : {&a, &b})
      if (!progress_last_metric(side->progress, g.metric))
        return make_error(ErrorKind::usage, "--min-gain " + g.metric + ": run " +
                                                std::to_string(side->run.id) + " has no metric '" + g.metric +
                                                "' in its progress");
  }
  const auto sa = serving_kpis(a.run, a.inference);
  const auto sb = serving_kpis(b.run, b.inference);
  if (gate.max_token_cost_increase_pct)
    for (const auto& [side, k] : {std::pair{&a, &sa}, std::pair{&b, &sb}})
      if (!*k || !(*k)->usd_per_1m_generated_tokens)
        return make_error(ErrorKind::usage, "--max-token-cost-increase: run " + std::to_string(side->run.id) +
                                                " has no $ per 1M generated tokens (it served no tokens "
                                                "under gpumeter run --inference-endpoint, or has no price)");
  auto cost =
      make_row("cost_usd", util::micros_to_usd(a.run.cost_micros), util::micros_to_usd(b.run.cost_micros));
  if (gate.max_cost_increase_pct) {
    const double limit = *gate.max_cost_increase_pct;
    cost.limit = fmt::format("<= {:+g}%", limit);
    cost.pass = meter::cost_within_increase(a.run.cost_micros, b.run.cost_micros, limit);
    if (!*cost.pass)
      res.failures.push_back(
          fmt::format("cost rose {:+.1f}% (limit {:+g}%)", cost.delta_pct.value_or(INFINITY), limit));
  }
  res.rows.push_back(cost);
  res.rows.push_back(make_row("wall_s", static_cast<double>(a.run.wall_ms) / 1000.0,
                              static_cast<double>(b.run.wall_ms) / 1000.0));
  res.rows.push_back(
      make_row("billed_s", static_cast<double>(a.run.billed_s), static_cast<double>(b.run.billed_s)));
  res.rows.push_back(make_row("gpus_allocated", static_cast<double>(a.run.gpus_allocated.size()),
                              static_cast<double>(b.run.gpus_allocated.size())));
  res.rows.push_back(make_row("idle_cost_usd", util::micros_to_usd(a.run.idle_cost_micros),
                              util::micros_to_usd(b.run.idle_cost_micros)));
  res.rows.push_back(make_row("energy_kwh", a.run.energy_j / 3.6e6, b.run.energy_j / 3.6e6));
  const RunKpis ka = compute_kpis(a.run, a.progress, nullptr, {});
  const RunKpis kb = compute_kpis(b.run, b.progress, nullptr, {});
  if (ka.usd_per_1m_tokens || kb.usd_per_1m_tokens)
    res.rows.push_back(make_row("usd_per_1m_tokens", ka.usd_per_1m_tokens, kb.usd_per_1m_tokens));
  if (sa || sb) {
    using Field = std::optional<double> ServingKpis::*;
    const std::pair<const char*, Field> fields[] = {
        {"usd_per_1m_generated_tokens", &ServingKpis::usd_per_1m_generated_tokens},
        {"usd_per_1m_prompt_tokens", &ServingKpis::usd_per_1m_prompt_tokens},
        {"usd_per_1m_serving_tokens", &ServingKpis::usd_per_1m_tokens},
        {"usd_per_1k_requests", &ServingKpis::usd_per_1k_requests},
        {"generated_tokens_per_s", &ServingKpis::generated_tokens_per_s},
        {"peak_generated_tokens_per_s", &ServingKpis::peak_generated_tokens_per_s},
        {"usd_per_1m_generated_tokens_at_peak", &ServingKpis::usd_per_1m_generated_tokens_at_peak}};
    for (const auto& [name, field] : fields) {
      auto row = make_row(name, sa ? (*sa).*field : std::nullopt, sb ? (*sb).*field : std::nullopt);
      if (!row.a && !row.b) continue;
      if (gate.max_token_cost_increase_pct && std::string(name) == "usd_per_1m_generated_tokens") {
        const double limit = *gate.max_token_cost_increase_pct;
        row.limit = fmt::format("<= {:+g}%", limit);
        row.pass = *row.b <= *row.a * (1.0 + limit / 100.0) + 1e-12;
        if (!*row.pass)
          res.failures.push_back(fmt::format("$ per 1M generated tokens rose {:+.1f}% (limit {:+g}%)",
                                             row.delta_pct.value_or(INFINITY), limit));
      }
      res.rows.push_back(row);
    }
  }
  if (ka.usd_per_1k_samples || kb.usd_per_1k_samples)
    res.rows.push_back(make_row("usd_per_1k_samples", ka.usd_per_1k_samples, kb.usd_per_1k_samples));
  if (ka.usd_per_step || kb.usd_per_step)
    res.rows.push_back(make_row("usd_per_step", ka.usd_per_step, kb.usd_per_step));

  std::set<std::string> metrics;
  for (const auto* side : {&a, &b})
    for (const auto& p : side->progress)
      for (const auto& [k, v] : p.metrics) metrics.insert(k);
  for (const auto& m : metrics) {
    auto row =
        make_row("metric:" + m, progress_last_metric(a.progress, m), progress_last_metric(b.progress, m));
    for (const auto& g : gate.min_gains) {
      if (g.metric != m) continue;
      const double av = *row.a, bv = *row.b;
      const double change = g.relative ? (av != 0 ? (bv - av) / std::fabs(av) * 100.0
                                                  : (bv > av   ? INFINITY
                                                     : bv < av ? -INFINITY
                                                               : 0))
                                       : bv - av;
      const bool ok = g.amount >= 0 ? change >= g.amount - 1e-9 : change <= g.amount + 1e-9;
      row.limit = g.amount >= 0 ? fmt::format(">= {:+g}{}", g.amount, g.relative ? "%" : "")
                                : fmt::format("<= {:+g}{}", g.amount, g.relative ? "%" : "");
      row.pass = row.pass.value_or(true) && ok;
      if (!ok)
        res.failures.push_back(
            fmt::format("{} changed {:+.4g}{} (required {})", m, change, g.relative ? "%" : "", row.limit));
    }
    res.rows.push_back(row);
  }
  res.pass = res.failures.empty();
  return res;
}

std::string render_compare_text(const CompareResult& r) {
  std::string out =
      fmt::format("gpumeter compare: run {} (A, baseline) vs run {} (B, candidate)\n\n", r.run_a, r.run_b);
  util::TextTable tab;
  using A = util::TextTable::Align;
  tab.header({"", "A", "B", "change", "limit", "verdict"},
             {A::left, A::right, A::right, A::right, A::left, A::left});
  for (const auto& row : r.rows) {
    std::string change = row.delta_pct ? fmt::format("{:+.1f}%", *row.delta_pct)
                         : row.delta   ? (*row.delta >= 0 ? "+" : "") + display(row.name, *row.delta)
                                       : "-";
    tab.row({row.name, row.a ? display(row.name, *row.a) : "-", row.b ? display(row.name, *row.b) : "-",
             change, row.limit, row.pass ? (*row.pass ? "pass" : "FAIL") : ""});
  }
  out += tab.render();
  out += "\n";
  if (r.pass) {
    out += "verdict: PASS\n";
  } else {
    out += "verdict: FAIL\n";
    for (const auto& f : r.failures) out += "  - " + f + "\n";
  }
  return out;
}

std::string render_compare_json(const CompareResult& r) {
  nlohmann::json j;
  j["run_a"] = r.run_a;
  j["run_b"] = r.run_b;
  j["pass"] = r.pass;
  j["failures"] = r.failures;
  j["rows"] = nlohmann::json::array();
  for (const auto& row : r.rows)
    j["rows"].push_back({{"name", row.name},
                         {"a", json_or_null(row.a)},
                         {"b", json_or_null(row.b)},
                         {"delta", json_or_null(row.delta)},
                         {"delta_pct", json_or_null(row.delta_pct)},
                         {"limit", row.limit.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.limit)},
                         {"pass", json_or_null(row.pass)}});
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace gm::report
