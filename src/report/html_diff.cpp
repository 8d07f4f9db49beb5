// The trace diff page: built from the typed trace::TraceDiff, in the report pages' shell (html_page).
#include <fmt/format.h>

#include "meter/meter.h"
#include "report/html.h"
#include "report/html_page.h"
#include "util/units.h"

namespace gm {
namespace {

using nlohmann::json;

std::string change_text(const trace::DiffRow& r) {
  if (r.status == "new" || r.status == "vanished") return r.status;
  if (!r.change) return "-";
  return fmt::format("{:+.1f}%", 100 * *r.change);
}

json rows_table(const std::string& title, const std::vector<trace::DiffRow>& rows, const char* per,
                const std::optional<MicroUsd>& price, std::size_t limit) {
  json out = json::array();
  std::vector<std::string> full_names;
  for (const auto& r : rows) full_names.push_back(r.name);
  const std::vector<std::string> display = trace::short_names(full_names, 64);
  std::size_t n = 0;
  for (const auto& r : rows) {
    // Every failing row is shown, whatever the limit: the page must name what failed the gate.
    if (n++ >= limit && !r.failed) continue;
    json row = {r.kind == "summary" ? r.name : display[n - 1], fmt::format("{:.3f}", r.base_ns / 1e6),
                fmt::format("{:.3f}", r.new_ns / 1e6), change_text(r)};
    row.push_back(price ? format_usd(gpu_ns_cost_usd(*price, r.new_ns - r.base_ns), true) : std::string("-"));
    row.push_back(fmt::format("{:.1f}%", 100 * r.new_share));
    row.push_back(r.failed ? "FAIL" : (r.gated ? "gated" : ""));
    out.push_back(std::move(row));
  }
  std::string heading = title;
  if (rows.size() > limit) heading += fmt::format(" (top {} of {})", limit, rows.size());
  return {{"title", heading},
          {"header",
           {title.substr(0, title.find(' ')), fmt::format("base ms/{}", per), fmt::format("new ms/{}", per),
            "change", price ? fmt::format("Δ $/{}", per) : std::string("Δ $"), "share (new)", "gate"}},
          {"rows", out}};
}

}  // namespace

Result<std::string> render_trace_diff_html(const TraceDiffHtmlInput& in) {
  const trace::TraceDiff& d = in.diff;
  const char* per = d.per == "step" ? "step" : "trace";
  json spec;
  spec["title"] = fmt::format("gpumeter trace diff: {}", d.pass ? "PASS" : "FAIL");
  spec["subtitle"] = fmt::format(
      "BASE {} ({} device(s), {} steps) vs NEW {} ({} device(s), {} steps); "
      "figures per {}",
      in.base_path, d.base_devices, d.base_steps, in.new_path, d.new_devices, d.new_steps, per);
  json summary = json::array();
  summary.push_back({"verdict", d.pass ? "PASS" : "FAIL"});
  summary.push_back({"gate", fmt::format("+{:.1f}% per {}; items over {:.1f}% of busy time",
                                         100 * in.max_increase, per, 100 * in.min_share)});
  summary.push_back({"price", in.price_micros_per_gpu_hour
                                  ? fmt::format("{}/GPU-hour ({})",
                                                format_micros(*in.price_micros_per_gpu_hour), in.price_source)
                                  : std::string("none: figures in time only (pass --price)")});
  for (const auto& r : d.summary) {
    if (r.name != "window" && r.name != "idle") continue;
    std::string value =
        fmt::format("{:.3f} → {:.3f} ms/{} ({})", r.base_ns / 1e6, r.new_ns / 1e6, per, change_text(r));
    if (in.price_micros_per_gpu_hour)
      value += fmt::format(", {} → {}", format_usd(gpu_ns_cost_usd(*in.price_micros_per_gpu_hour, r.base_ns)),
                           format_usd(gpu_ns_cost_usd(*in.price_micros_per_gpu_hour, r.new_ns)));
    summary.push_back(
        {r.name == "window" ? "time (and cost) per " + std::string(per) : "idle per " + std::string(per),
         value});
  }
  spec["summary"] = summary;
  {
    // Header cards: the verdict, and the time and cost per step (or trace) of both sides.
    json cards = json::array(
        {{{"label", "verdict"}, {"value", d.pass ? "PASS" : "FAIL"}, {"tone", d.pass ? "good" : "bad"}}});
    for (const auto& r : d.summary) {
      if (r.name != "window") continue;
      auto side = [&](double ns) {
        return in.price_micros_per_gpu_hour ? format_usd(gpu_ns_cost_usd(*in.price_micros_per_gpu_hour, ns))
                                            : fmt::format("{:.3f} ms", ns / 1e6);
      };
      cards.push_back({{"label", "BASE per " + std::string(per)}, {"value", side(r.base_ns)}});
      cards.push_back({{"label", "NEW per " + std::string(per)}, {"value", side(r.new_ns)}});
      cards.push_back({{"label", "change"}, {"value", change_text(r)}, {"tone", r.failed ? "bad" : ""}});
    }
    cards.push_back({{"label", "gate failures"},
                     {"value", std::to_string(d.failures.size())},
                     {"tone", d.failures.empty() ? "good" : "bad"}});
    spec["cards"] = cards;
  }
  json notes = json::array();
  for (const auto& f : d.failures) notes.push_back("FAIL: " + f);
  for (const auto& r : d.kernels)
    if (r.status == "new" || r.status == "vanished")
      notes.push_back(fmt::format("{} kernel: {} ({:.3f} ms/{})", r.status, trace::short_name(r.name, 100),
                                  (r.status == "new" ? r.new_ns : r.base_ns) / 1e6, per));
  spec["notes"] = notes;

  // Per-step time by class, one chart per side, with the same four short categories.
  const std::vector<std::string> classes = {"compute", "communication", "memory", "idle"};
  std::vector<double> base_ms(classes.size(), 0), new_ms(classes.size(), 0);
  for (const auto& r : d.summary)
    for (std::size_t i = 0; i < classes.size(); ++i)
      if (r.name == classes[i]) {
        base_ms[i] = r.base_ns / 1e6;
        new_ms[i] = r.new_ns / 1e6;
      }
  const std::string y = fmt::format("ms per {}", per);
  spec["charts"] =
      json::array({html::bar_chart("classes-base", "BASE: time per " + std::string(per) + " by class", y,
                                   classes, base_ms, "base"),
                   html::bar_chart("classes-new", "NEW: time per " + std::string(per) + " by class", y,
                                   classes, new_ms, "new")});
  json tables = json::array();
  tables.push_back(rows_table("class of time", d.summary, per, in.price_micros_per_gpu_hour, 20));
  tables.push_back(rows_table("kernel", d.kernels, per, in.price_micros_per_gpu_hour, 25));
  tables.push_back(rows_table("operator", d.operators, per, in.price_micros_per_gpu_hour, 25));
  if (!d.annotations.empty())
    tables.push_back(rows_table("annotation", d.annotations, per, in.price_micros_per_gpu_hour, 25));
  spec["tables"] = tables;
  return html::page(spec);
}

}  // namespace gm
