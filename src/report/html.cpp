#include "report/html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "meter/run_meter.h"
#include "report/detail/run_activity.h"
#include "report/detail/target_render.h"
#include "report/html_page.h"
#include "report/run_report.h"
#include "util/json.h"
#include "util/units.h"

namespace gm::report {

namespace {

using nlohmann::json;

json series(const std::string& label, const std::vector<std::optional<double>>& values, bool dash = false) {
  json vals = json::array();
  for (const auto& v : values) vals.push_back(util::json_or_null(v));
  json s = {{"label", label}, {"values", vals}};
  if (dash) s["dash"] = true;
  return s;
}

/// GPU-hours with three significant digits under 10 (a few minutes of GPU time is not "0.00").
std::string gpu_hours_text(double h) {
  return h >= 10 || h == 0 ? fmt::format("{:.1f}", h) : fmt::format("{:.3g}", h);
}

/// Dollars per category as horizontal bars: whole names however many categories, the amount beside each.
nlohmann::json money_bars(const std::string& id, const std::string& title,
                          const std::vector<std::string>& categories, const std::vector<MicroUsd>& amounts,
                          const std::string& series_label) {
  std::vector<double> values;
  std::vector<std::string> text;
  for (MicroUsd m : amounts) {
    values.push_back(util::micros_to_usd(m));
    text.push_back(util::format_micros(m));
  }
  return html::hbar_chart(id, title, categories, values, series_label, text);
}

/// How far the forecast total spreads below and above its median (USD): the forecaster replayed over the
/// run's progress up to `last`, at the run's price for its allocated GPUs; nullopt when it cannot forecast.
std::optional<std::pair<double, double>> forecast_spread(const RunHtmlInput& in,
                                                         const store::ProgressRecord* last,
                                                         std::optional<std::int64_t> total) {
  if (last == nullptr || !total) return std::nullopt;
  std::vector<const store::ProgressRecord*> by_time;
  for (const auto& p : in.progress)
    if (p.step && p.t_ms <= last->t_ms) by_time.push_back(&p);
  std::stable_sort(by_time.begin(), by_time.end(), [](auto* a, auto* b) { return a->t_ms < b->t_ms; });
  meter::Forecaster replay;
  for (const auto* p : by_time)
    replay.add(static_cast<double>(p->t_ms) / 1000, *p->step, p->total_steps.value_or(*total));
  const double burn = meter::burn_usd_per_s(in.run.price_micros_per_gpu_hour,
                                            std::max<std::size_t>(1, in.run.gpus_allocated.size()));
  const auto f =
      replay.forecast(static_cast<double>(last->t_ms) / 1000, util::micros_to_usd(last->cost_micros), burn);
  if (!f) return std::nullopt;
  return meter::forecast_spread_usd(*f);
}

/// Upper bound on step marks per chart, so that they stay apart.
constexpr std::size_t kMaxStepMarks = 10;

/// Vertical marks for the time charts: the actions (warnings, stops, signals) and round step numbers
/// (the first progress point at or past each multiple of a 1-2-5 interval), with a caption naming them.
std::optional<Startup> startup_of(const RunHtmlInput& in) {
  std::optional<std::int64_t> steps, total;
  for (const auto& p : in.progress) {
    if (p.step) steps = std::max(steps.value_or(0), *p.step);
    if (p.total_steps) total = p.total_steps;
  }
  if (!total) total = in.run.total_steps;
  return run_startup(in.run, meter::gpu_usage_from_samples(in.samples), steps, total,
                     first_step_ms(in.progress));
}

std::pair<json, std::string> run_marks(const RunHtmlInput& in) {
  json marks = json::array();
  std::vector<std::string> said;
  std::string startup_note;
  if (const auto s = startup_of(in); s && s->ms > 0) {
    marks.push_back(
        {{"x", static_cast<double>(s->ms) / 1000}, {"kind", "startup"}, {"label", "first GPU work"}});
    startup_note = fmt::format("orange line: the first GPU work, {:.0f} s after the start",
                               static_cast<double>(s->ms) / 1000);
  }
  for (const auto& a : in.actions) {
    marks.push_back(
        {{"x", static_cast<double>(a.t_ms) / 1000}, {"kind", "action"}, {"label", util::text_of(a.kind)}});
    if (said.size() < 4)
      said.push_back(
          fmt::format("{} at {:.1f} s", util::text_of(a.kind), static_cast<double>(a.t_ms) / 1000));
  }
  std::string note;
  if (!said.empty()) {
    note = "red dashed lines: " + fmt::format("{}", fmt::join(said, ", "));
    if (in.actions.size() > said.size()) note += fmt::format(" and {} more", in.actions.size() - said.size());
  }
  if (!startup_note.empty()) note += (note.empty() ? "" : "; ") + startup_note;
  std::int64_t last_step = 0;
  for (const auto& p : in.progress)
    if (p.step) last_step = std::max(last_step, *p.step);
  if (last_step >= 2) {
    const auto most = static_cast<std::int64_t>(kMaxStepMarks);
    std::int64_t every = 0;
    for (std::int64_t mag = 1; every == 0; mag *= 10)
      for (std::int64_t m : {1, 2, 5})
        if (every == 0 && mag * m * most >= last_step) every = mag * m;
    std::vector<const store::ProgressRecord*> by_time;
    for (const auto& p : in.progress)
      if (p.step) by_time.push_back(&p);
    std::stable_sort(by_time.begin(), by_time.end(), [](auto* a, auto* b) { return a->t_ms < b->t_ms; });
    std::int64_t next = every;
    std::size_t n = 0;
    for (const auto* p : by_time) {
      if (*p->step < next) continue;
      marks.push_back({{"x", static_cast<double>(p->t_ms) / 1000},
                       {"kind", "step"},
                       {"label", fmt::format("step {}", *p->step)}});
      ++n;
      next = (*p->step / every + 1) * every;
    }
    if (n > 0) note += fmt::format("{}grey dotted lines: every {} steps", note.empty() ? "" : "; ", every);
  }
  return {marks, note};
}

}  // namespace

Result<std::string> render_run_html(const RunHtmlInput& in) {
  const store::RunRecord& r = in.run;
  json spec;
  spec["title"] = fmt::format("gpumeter run {}: {}", r.id, r.command);
  spec["subtitle"] = fmt::format("{} on {}, started {} UTC, {}", r.user, r.host,
                                 format_time_utc(r.start_unix_ms), describe_status(r));
  json summary = json::array();
  summary.push_back({"cost", util::format_micros(r.cost_micros)});
  summary.push_back({"price", fmt::format("{}/GPU-h ({})",
                                          util::format_usd(util::micros_to_usd(r.price_micros_per_gpu_hour)),
                                          r.price_source)});
  summary.push_back(
      {"wall / billed",
       fmt::format("{} / {} s", util::format_duration_s(static_cast<double>(r.wall_ms) / 1000), r.billed_s)});
  summary.push_back({"GPUs allocated / used",
                     fmt::format("{} / {} ({})", r.gpus_allocated.size(), r.gpus_used.size(), r.gpu_model)});
  summary.push_back({"idle cost (used GPUs)", util::format_micros(r.idle_cost_micros)});
  summary.push_back({"unused allocated GPUs", util::format_micros(r.unused_gpu_cost_micros)});
  summary.push_back(
      {"energy", fmt::format("{:.4f} kWh ({})", r.energy_j / 3.6e6, util::text_of(r.energy_method))});
  summary.push_back(
      {"CO2", r.co2_kg ? fmt::format("{:.4f} kg ({})", *r.co2_kg, r.carbon_source) : "unknown"});
  if (r.budget_micros) summary.push_back({"budget", util::format_micros(*r.budget_micros)});
  if (r.forecast_cost_usd) summary.push_back({"forecast", util::format_usd(*r.forecast_cost_usd)});
  if (r.status == store::RunStatus::preempted) summary.push_back({"preemption", describe_status(r)});
  if (r.last_checkpoint_ms)
    summary.push_back(
        {"last checkpoint",
         util::format_duration_s(static_cast<double>(*r.last_checkpoint_ms) / 1000) + " after the start"});
  if (r.lost_work_micros)
    summary.push_back({"lost work (since the last checkpoint)", util::format_micros(*r.lost_work_micros)});
  if (in.kpis) {
    const auto& k = *in.kpis;
    if (k.usd_per_step) summary.push_back({"$ per step", util::format_usd(*k.usd_per_step)});
    if (k.usd_per_1k_samples)
      summary.push_back({"$ per 1k samples", util::format_usd(*k.usd_per_1k_samples)});
    if (k.usd_per_1m_tokens) summary.push_back({"$ per 1M tokens", util::format_usd(*k.usd_per_1m_tokens)});
    if (k.mfu) summary.push_back({"MFU", fmt::format("{:.1f}% ({})", *k.mfu * 100, k.mfu_note)});
    if (k.target)
      summary.push_back(
          {"$ to reach " + k.target->metric + (k.target->at_most ? "<=" : ">=") +
               fmt::format("{:g}", k.target->threshold),
           k.target_hit
               ? fmt::format("{} (step {}, {:.1f} s)", util::format_micros(k.target_hit->cost_micros),
                             k.target_hit->step ? std::to_string(*k.target_hit->step) : "-",
                             static_cast<double>(k.target_hit->t_ms) / 1000)
               : std::string("not reached")});
  }
  if (const auto s = startup_of(in))
    summary.push_back(
        {"start-up (before the first GPU work)",
         fmt::format("{} · {} ({:.1f}% of the cost{})",
                     util::format_duration_s(static_cast<double>(s->ms) / 1000),
                     util::format_micros(s->cost_micros), 100 * s->share_of_run,
                     s->share_of_total ? fmt::format(", {:.1f}% of the whole job's", 100 * *s->share_of_total)
                                       : std::string())});
  for (const meter::GpuUsage& g : meter::gpu_usage_from_samples(in.samples))
    if (const std::string a = detail::gpm_text(g.activity.mean()); !a.empty())
      summary.push_back({fmt::format("GPU {} activity while working (GPM)", g.index), a});
  if (!in.rightsizing_hint.empty()) summary.push_back({"rightsizing", in.rightsizing_hint});
  {
    // Header cards: what it cost, at what rate, what was wasted, energy, CO2, and the verdict.
    const MicroUsd waste = meter::waste_micros(r.idle_cost_micros, r.unused_gpu_cost_micros);
    const double rate = meter::usd_per_hour_of_gpus(r.price_micros_per_gpu_hour,
                                                    static_cast<double>(r.gpus_allocated.size()));
    const bool failed = r.status == store::RunStatus::failed || r.status == store::RunStatus::interrupted ||
                        r.status == store::RunStatus::preempted;
    spec["cards"] = json::array(
        {{{"label", "cost"}, {"value", util::format_micros(r.cost_micros)}},
         {{"label", "$/h (" + std::to_string(r.gpus_allocated.size()) + " GPUs)"},
          {"value", util::format_usd(rate)}},
         {{"label", "waste: idle + unused"},
          {"value", util::format_micros(waste)},
          {"tone", r.cost_micros > 0 && waste * 5 > r.cost_micros ? "bad" : ""}},
         {{"label", "energy"}, {"value", fmt::format("{:.4f} kWh", r.energy_j / 3.6e6)}},
         {{"label", "CO2"}, {"value", r.co2_kg ? fmt::format("{:.3f} kg", *r.co2_kg) : "unknown"}},
         {{"label", "verdict"},
          {"value",
           in.findings.empty() ? describe_status(r) : fmt::format("{} finding(s)", in.findings.size())},
          {"tone", failed || !in.findings.empty() ? "bad" : "good"}}});
  }
  // --target: the forecast to reach it, replayed from the stored progress as the live run made it.
  const auto target = replay_run_target(in.run, in.progress, in.actions);
  if (target)
    summary.push_back({"target " + meter::format_metric_target(target->target),
                       guard::describe_target_forecast(target->target, target->forecast)});
  spec["summary"] = summary;
  json cards = json::array();
  html::add_finding_cards(cards, in.findings, "");
  spec["findings"] = cards;
  json notes = json::array();
  json charts = json::array();
  // (not a structured binding: clang 14 cannot capture one in a lambda)
  const auto marked = run_marks(in);
  const json& marks = marked.first;
  const std::string& marks_note = marked.second;

  // Samples on a common time axis (seconds since start), one column per GPU.
  std::set<std::int64_t> times;
  std::set<unsigned> gpus;
  for (const auto& s : in.samples) {
    times.insert(s.t_ms);
    gpus.insert(s.gpu_index);
  }
  std::vector<std::int64_t> tv(times.begin(), times.end());
  std::map<std::int64_t, std::size_t> t_index;
  for (std::size_t i = 0; i < tv.size(); ++i) t_index[tv[i]] = i;
  std::vector<double> x;
  for (auto t : tv) x.push_back(static_cast<double>(t) / 1000.0);
  if (!in.samples.empty()) {
    std::vector<MicroUsd> cost_at(tv.size(), 0);
    std::map<unsigned, std::vector<std::optional<double>>> util, mem, power, tensor, sm_active;
    for (unsigned g : gpus) {
      tensor[g].assign(tv.size(), std::nullopt);
      sm_active[g].assign(tv.size(), std::nullopt);
      util[g].assign(tv.size(), std::nullopt);
      mem[g].assign(tv.size(), std::nullopt);
      power[g].assign(tv.size(), std::nullopt);
    }
    for (const auto& s : in.samples) {
      std::size_t i = t_index[s.t_ms];
      cost_at[i] += s.cost_micros;
      util[s.gpu_index][i] = s.utilization_pct;
      if (s.memory_used_bytes)
        mem[s.gpu_index][i] = static_cast<double>(*s.memory_used_bytes) / (1024.0 * 1024 * 1024);
      power[s.gpu_index][i] = s.power_w;
      tensor[s.gpu_index][i] = s.gpm.tensor_active;
      sm_active[s.gpu_index][i] = s.gpm.sm_active;
    }
    // Long runs: at most kMaxPoints per chart, each point a bucket of consecutive seconds (cost summed,
    // utilization and power averaged, memory at its maximum), so the page stays small and quick.
    constexpr std::size_t kMaxPoints = 4000;
    if (tv.size() > kMaxPoints) {
      const std::size_t k = (tv.size() + kMaxPoints - 1) / kMaxPoints;
      auto reduce = [&](std::vector<std::optional<double>>& v, bool use_max) {
        std::vector<std::optional<double>> out;
        for (std::size_t i = 0; i < v.size(); i += k) {
          double acc_v = 0;
          std::size_t n = 0;
          std::optional<double> mx;
          for (std::size_t j = i; j < std::min(v.size(), i + k); ++j)
            if (v[j]) {
              acc_v += *v[j];
              ++n;
              mx = mx ? std::max(*mx, *v[j]) : *v[j];
            }
          out.push_back(n == 0    ? std::nullopt
                        : use_max ? mx
                                  : std::optional<double>(acc_v / static_cast<double>(n)));
        }
        v = std::move(out);
      };
      for (auto& [g, v] : util) reduce(v, false);
      for (auto& [g, v] : mem) reduce(v, true);
      for (auto& [g, v] : power) reduce(v, false);
      for (auto& [g, v] : tensor) reduce(v, false);
      for (auto& [g, v] : sm_active) reduce(v, false);
      std::vector<MicroUsd> cost_b;
      std::vector<double> x_b;
      for (std::size_t i = 0; i < tv.size(); i += k) {
        MicroUsd c = 0;
        const std::size_t end = std::min(tv.size(), i + k);
        for (std::size_t j = i; j < end; ++j) c += cost_at[j];
        cost_b.push_back(c);
        x_b.push_back(x[end - 1]);
      }
      cost_at = std::move(cost_b);
      x = std::move(x_b);
      notes.push_back(fmt::format("charts show {}-second buckets ({} samples per GPU)", k, tv.size()));
    }
    // Cost over time, the budget, and the forecast from the last sample to the projected end.
    std::vector<double> cx = x;
    std::vector<std::optional<double>> cum, budget, forecast;
    MicroUsd acc = 0;
    for (auto c : cost_at) {
      acc += c;
      cum.push_back(util::micros_to_usd(acc));
    }
    std::optional<double> end_s;
    bool reached_total = false;
    std::optional<std::int64_t> total = r.total_steps;
    const store::ProgressRecord* last = nullptr;
    if (r.forecast_cost_usd) {
      for (const auto& p : in.progress)
        if (p.step && *p.step > 0 && (!last || p.t_ms >= last->t_ms)) last = &p;
      if (last && last->total_steps) total = last->total_steps;
      if (last && total && *total > *last->step)
        end_s = static_cast<double>(last->t_ms) / 1000.0 * static_cast<double>(*total) /
                static_cast<double>(*last->step);
      reached_total = last && total && *last->step >= *total;
    }
    forecast.assign(cx.size(), std::nullopt);
    std::vector<std::optional<double>> band_low, band_high;
    if (end_s && *end_s > cx.back()) {
      forecast.back() = cum.back();
      cx.push_back(*end_s);
      cum.push_back(std::nullopt);
      forecast.push_back(*r.forecast_cost_usd);
      // The band: the forecaster replayed over the stored progress gives the spread of the total between the
      // fast (10th percentile) and slow (90th) recent step times, drawn around the stored forecast.
      if (auto spread = forecast_spread(in, last, total)) {
        band_low.assign(cx.size(), std::nullopt);
        band_high.assign(cx.size(), std::nullopt);
        band_low[cx.size() - 2] = band_high[cx.size() - 2] = cum[cx.size() - 2];
        const auto [low, high] = meter::forecast_band_usd(*r.forecast_cost_usd, *spread);
        band_low.back() = low;
        band_high.back() = high;
      }
    } else if (r.forecast_cost_usd && reached_total) {
      notes.push_back(
          fmt::format("the run reached {}/{} steps: its cost is final (the last forecast said {})",
                      *last->step, *total, util::format_usd(*r.forecast_cost_usd)));
    } else if (r.forecast_cost_usd) {
      notes.push_back(fmt::format("forecast {} (no step progress to place it in time)",
                                  util::format_usd(*r.forecast_cost_usd)));
    }
    json cs = json::array({series("cost_usd", cum)});
    if (r.budget_micros) {
      budget.assign(cx.size(), util::micros_to_usd(*r.budget_micros));
      cs.push_back(series("budget_usd", budget, true));
    }
    // The band first (its fill is drawn with its upper series), then the forecast over it.
    const bool band = !band_low.empty();
    if (band) {
      cs.push_back(series("forecast_high_usd", band_high, true));
      cs.back()["colour"] = "#ff7f0e";
      cs.push_back(series("forecast_low_usd", band_low, true));
      cs.back()["colour"] = "#ff7f0e";
    }
    if (end_s && cx.size() > x.size()) {
      cs.push_back(series("forecast_usd", forecast, true));
      cs.back()["colour"] = "#2ca02c";
    }
    charts.push_back(html::line_chart("cost", "Cost over time", "seconds", "USD", cx, cs));
    if (band) charts.back()["band"] = {{"upper", "forecast_high_usd"}, {"lower", "forecast_low_usd"}};
    charts.back()["marks"] = marks;
    charts.back()["marks_note"] = marks_note;
    auto per_gpu = [&](const std::string& id, const std::string& title, const std::string& unit,
                       std::map<unsigned, std::vector<std::optional<double>>>& m, const std::string& prefix) {
      json ss = json::array();
      for (auto& [g, v] : m)
        if (std::any_of(v.begin(), v.end(), [](auto& o) { return o.has_value(); }))
          ss.push_back(series(prefix + std::to_string(g), v));
      if (!ss.empty()) {
        charts.push_back(html::line_chart(id, title, "seconds", unit, x, ss));
        charts.back()["marks"] = marks;
        charts.back()["marks_note"] = marks_note;
      } else
        notes.push_back(title + ": not reported by the GPU");
    };
    per_gpu("util", "GPU utilization", "%", util, "gpu");
    // GPM (Hopper and newer): utilization says "busy" for fp32 and bf16 math alike; these tell them apart.
    per_gpu("tensor", "Tensor-core activity (NVML GPM)", "%", tensor, "gpu");
    per_gpu("sm_active", "SM activity (NVML GPM)", "%", sm_active, "gpu");
    per_gpu("memory", "GPU memory used", "GiB", mem, "gpu");
    per_gpu("power", "GPU power", "W", power, "gpu");
  } else {
    notes.push_back("no samples recorded for this run");
  }

  // Progress, metric curves and per-step cost.
  std::vector<const store::ProgressRecord*> prog;
  for (const auto& p : in.progress) prog.push_back(&p);
  std::stable_sort(prog.begin(), prog.end(), [](auto* a, auto* b) { return a->t_ms < b->t_ms; });
  std::vector<double> px;
  std::vector<std::optional<double>> steps;
  std::set<std::string> metric_names;
  for (auto* p : prog) {
    px.push_back(static_cast<double>(p->t_ms) / 1000.0);
    steps.push_back(p->step ? std::optional<double>(static_cast<double>(*p->step)) : std::nullopt);
    for (auto& [k, v] : p->metrics) metric_names.insert(k);
  }
  if (std::any_of(steps.begin(), steps.end(), [](auto& o) { return o.has_value(); }))
    charts.push_back(html::line_chart("progress", "Progress", "seconds", "step", px,
                                      json::array({series("step", steps)})));
  if (target) {
    std::optional<std::int64_t> total = in.run.total_steps;
    for (auto* p : prog)
      if (p->total_steps) total = p->total_steps;
    if (auto c = detail::target_chart(target->target, target->points, total)) charts.push_back(std::move(*c));
  }
  std::size_t shown = 0;
  for (const auto& m : metric_names) {
    if (++shown > 8) {
      notes.push_back(fmt::format("{} more metric(s) not charted", metric_names.size() - 8));
      break;
    }
    std::vector<std::optional<double>> v;
    for (auto* p : prog) {
      auto it = p->metrics.find(m);
      v.push_back(it == p->metrics.end() || !std::isfinite(it->second) ? std::nullopt
                                                                       : std::optional<double>(it->second));
    }
    charts.push_back(
        html::line_chart("metric-" + m, "Metric " + m, "seconds", m, px, json::array({series(m, v)})));
  }
  {
    std::vector<double> sx;
    std::vector<std::optional<double>> per_step;
    const store::ProgressRecord* prev = nullptr;
    for (auto* p : prog) {
      if (!p->step) continue;
      if (prev && *p->step > *prev->step) {
        sx.push_back(static_cast<double>(*p->step));
        per_step.push_back(meter::usd_per_units(meter::cost_between_micros(p->cost_micros, prev->cost_micros),
                                                static_cast<double>(*p->step - *prev->step), 1.0));
      }
      prev = p;
    }
    if (sx.size() >= 2)
      charts.push_back(html::line_chart("step-cost", "Cost per step", "step", "USD per step", sx,
                                        json::array({series("usd_per_step", per_step)})));
  }
  // Waste breakdown.
  {
    MicroUsd useful =
        meter::busy_micros(r.cost_micros, meter::waste_micros(r.idle_cost_micros, r.unused_gpu_cost_micros));
    charts.push_back(money_bars("waste", "Where the money went",
                                {"busy (used GPUs)", "idle (used GPUs)", "unused allocated GPUs"},
                                {useful, r.idle_cost_micros, r.unused_gpu_cost_micros}, "cost_usd"));
  }
  spec["charts"] = charts;
  spec["notes"] = notes;
  json tables = json::array();
  if (!in.actions.empty()) {
    json rows = json::array();
    for (const auto& a : in.actions)
      rows.push_back({fmt::format("{:.1f}", static_cast<double>(a.t_ms) / 1000), util::text_of(a.kind),
                      util::format_micros(a.cost_micros), a.message});
    tables.push_back(
        {{"title", "Actions"}, {"header", {"t (s)", "kind", "spent", "message"}}, {"rows", rows}});
  }
  spec["tables"] = tables;
  return html::page(spec);
}

Result<std::string> render_multi_html(const MultiReport& rep) {
  json spec;
  spec["title"] = fmt::format("gpumeter report: {} run(s)", rep.total.runs);
  spec["subtitle"] =
      (rep.since_unix_ms ? format_time_utc(*rep.since_unix_ms) : std::string("the beginning")) + " .. " +
      (rep.until_unix_ms ? format_time_utc(*rep.until_unix_ms) : std::string("now")) + " UTC";
  const auto& t = rep.total;
  auto u = t.mean_util_pct();
  spec["summary"] =
      json::array({json::array({"cost", util::format_micros(t.cost_micros)}),
                   json::array({"GPU-hours", gpu_hours_text(t.gpu_hours)}),
                   json::array({"waste", util::format_micros(t.waste_micros())}),
                   json::array({"mean utilization", u ? fmt::format("{:.1f}%", *u) : "unknown"}),
                   json::array({"energy", fmt::format("{:.3f} kWh", t.energy_kwh)}),
                   json::array({"CO2", t.co2_kg ? fmt::format("{:.3f} kg", *t.co2_kg) : "unknown"})});
  spec["cards"] = json::array(
      {{{"label", "cost"}, {"value", util::format_micros(t.cost_micros)}},
       {{"label", "runs"}, {"value", std::to_string(t.runs)}},
       {{"label", "GPU-hours"}, {"value", gpu_hours_text(t.gpu_hours)}},
       {{"label", "waste"},
        {"value", util::format_micros(t.waste_micros())},
        {"tone", t.cost_micros > 0 && meter::share_over(t.waste_micros(), t.cost_micros, 5) ? "bad" : ""}},
       {{"label", "energy"}, {"value", fmt::format("{:.3f} kWh", t.energy_kwh)}},
       {{"label", "CO2"}, {"value", t.co2_kg ? fmt::format("{:.3f} kg", *t.co2_kg) : "unknown"}}});
  {
    json cards = json::array();
    html::add_finding_cards(cards, multi_findings(rep), "");
    spec["findings"] = cards;
  }
  json charts = json::array();
  json notes = json::array();
  if (rep.total.runs == 0) notes.push_back("no runs in this period");
  if (rep.timeline.size() >= 2) {
    // Gaps between buckets without rollups stay gaps (null), not zeros.
    std::vector<double> tx;
    std::vector<std::optional<double>> cost, util;
    const double unit_s = static_cast<double>(rep.bucket_ms) / 1000.0;
    std::int64_t prev = rep.timeline.front().start_unix_ms;
    const double t0 = static_cast<double>(prev) / 1000.0;
    for (const auto& b : rep.timeline) {
      if (b.start_unix_ms - prev > rep.bucket_ms) {
        tx.push_back((static_cast<double>(prev + rep.bucket_ms) / 1000.0 - t0) / unit_s);
        cost.push_back(std::nullopt);
        util.push_back(std::nullopt);
      }
      tx.push_back((static_cast<double>(b.start_unix_ms) / 1000.0 - t0) / unit_s);
      cost.push_back(util::micros_to_usd(b.cost_micros));
      util.push_back(b.util_samples > 0
                         ? std::optional<double>(b.util_sum_pct / static_cast<double>(b.util_samples))
                         : std::nullopt);
      prev = b.start_unix_ms;
    }
    const std::string unit = rep.bucket_ms == 3'600'000 ? "hour" : "day";
    const std::string xl = unit + "s since " + format_time_utc(rep.timeline.front().start_unix_ms) + " UTC";
    charts.push_back(html::line_chart("timeline-cost", "Metered cost per " + unit, xl, "USD", tx,
                                      json::array({series("cost_usd", cost)})));
    charts.push_back(html::line_chart("timeline-util", "Mean GPU utilization per " + unit, xl, "%", tx,
                                      json::array({series("util_pct", util)})));
  }
  if (!rep.groups.empty()) {
    std::vector<std::string> cats;
    std::vector<MicroUsd> cost, waste;
    for (const auto& g : rep.groups) {
      cats.push_back(g.key);
      cost.push_back(g.cost_micros);
      waste.push_back(g.waste_micros());
    }
    const std::string by = group_by_name(rep.by);
    if (rep.by.kind == GroupBy::Kind::day) {
      std::vector<double> dx;
      std::vector<std::optional<double>> c, w;
      auto first = parse_date_utc(rep.groups.front().key, "day");
      const double d0 = first ? static_cast<double>(*first) / 86'400'000.0 : 0;
      for (const auto& g : rep.groups) {
        auto ms = parse_date_utc(g.key, "day");
        dx.push_back(ms ? static_cast<double>(*ms) / 86'400'000.0 - d0 : 0);
        c.push_back(util::micros_to_usd(g.cost_micros));
        w.push_back(util::micros_to_usd(g.waste_micros()));
      }
      if (dx.size() >= 2)
        charts.push_back(html::line_chart("cost-per-day", "Cost per day (runs by start day)",
                                          "days since " + rep.groups.front().key, "USD", dx,
                                          json::array({series("cost_usd", c), series("waste_usd", w)})));
    }
    charts.push_back(money_bars("cost-by-group", "Cost by " + by, cats, cost, "cost_usd"));
    charts.push_back(money_bars("waste-by-group", "Waste by " + by, cats, waste, "waste_usd"));
  }
  MicroUsd useful = meter::busy_micros(t.cost_micros, t.waste_micros());
  charts.push_back(money_bars("waste", "Where the money went",
                              {"busy (used GPUs)", "idle (used GPUs)", "unused allocated GPUs"},
                              {useful, t.idle_cost_micros, t.unused_gpu_cost_micros}, "cost_usd"));
  spec["charts"] = charts;
  spec["notes"] = notes;
  json rows = json::array();
  for (const auto& r : rep.top_runs)
    rows.push_back({std::to_string(r.id), format_time_utc(r.start_unix_ms), r.user, std::to_string(r.gpus),
                    util::format_duration_s(r.wall_s), util::format_micros(r.cost_micros),
                    util::format_micros(r.waste_micros),
                    r.status_text.empty() ? std::string(util::text_of(r.status)) : r.status_text, r.command});
  spec["tables"] = json::array(
      {{{"title", "Top runs by cost"},
        {"header", {"run", "started (UTC)", "user", "GPUs", "wall", "cost", "waste", "status", "command"}},
        {"rows", rows}}});
  return html::page(spec);
}

}  // namespace gm::report
