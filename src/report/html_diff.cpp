// The trace diff page: built from the typed trace::TraceDiff, in the report pages' shell (html_page).
#include <fmt/format.h>

#include "report/detail/trace_text.h"
#include "report/html.h"
#include "report/html_page.h"
#include "util/units.h"

namespace gm::report {
namespace {

using detail::change_text;
using findings::DiffRowCosts;
using nlohmann::json;

json rows_table(const std::string& title, const std::vector<trace::DiffRow>& rows,
                const std::vector<DiffRowCosts>& costs, const char* per, bool priced, std::size_t limit) {
  json out = json::array();
  const std::vector<std::string> display = detail::diff_row_names(rows, 64);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const trace::DiffRow& r = rows[i];
    // Every failing row is shown, whatever the limit: the page must name what failed the gate.
    if (i >= limit && !r.failed) continue;
    json row = {r.kind == "summary" ? r.name : display[i], fmt::format("{:.3f}", r.base_ns / 1e6),
                fmt::format("{:.3f}", r.new_ns / 1e6), change_text(r)};
    row.push_back(costs[i].delta_usd ? util::format_usd(*costs[i].delta_usd, true) : std::string("-"));
    row.push_back(fmt::format("{:.1f}%", 100 * r.new_share));
    row.push_back(r.failed ? "FAIL" : (r.gated ? "gated" : ""));
    out.push_back(std::move(row));
  }
  std::string heading = title;
  if (rows.size() > limit) heading += fmt::format(" (top {} of {})", limit, rows.size());
  return {{"title", heading},
          {"header",
           {title.substr(0, title.find(' ')), fmt::format("base ms/{}", per), fmt::format("new ms/{}", per),
            "change", priced ? fmt::format("Δ $/{}", per) : std::string("Δ $"), "share (new)", "gate"}},
          {"rows", out}};
}

}  // namespace

Result<std::string> render_trace_diff_html(const findings::PricedDiff& p, const report::TraceDiffView& in) {
  const trace::TraceDiff& d = p.diff;
  const std::optional<MicroUsd>& price = p.price.micros_per_gpu_hour;
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
  summary.push_back(
      {"price", price ? fmt::format("{}/GPU-hour ({})", util::format_micros(*price), p.price.source)
                      : std::string("none: figures in time only (pass --price)")});
  for (std::size_t i = 0; i < d.summary.size(); ++i) {
    const trace::DiffRow& r = d.summary[i];
    const DiffRowCosts& c = p.summary[i];
    if (r.name != "window" && r.name != "idle") continue;
    std::string value =
        fmt::format("{:.3f} → {:.3f} ms/{} ({})", r.base_ns / 1e6, r.new_ns / 1e6, per, change_text(r));
    if (price) value += fmt::format(", {} → {}", util::format_usd(*c.base_usd), util::format_usd(*c.new_usd));
    summary.push_back(
        {r.name == "window" ? "time (and cost) per " + std::string(per) : "idle per " + std::string(per),
         value});
  }
  spec["summary"] = summary;
  {
    // Header cards: the verdict, and the time and cost per step (or trace) of both sides.
    json cards = json::array(
        {{{"label", "verdict"}, {"value", d.pass ? "PASS" : "FAIL"}, {"tone", d.pass ? "good" : "bad"}}});
    for (std::size_t i = 0; i < d.summary.size(); ++i) {
      const trace::DiffRow& r = d.summary[i];
      if (r.name != "window") continue;
      auto side = [](double ns, const findings::UsdOrNone& usd) {
        return usd ? util::format_usd(*usd) : fmt::format("{:.3f} ms", ns / 1e6);
      };
      cards.push_back(
          {{"label", "BASE per " + std::string(per)}, {"value", side(r.base_ns, p.summary[i].base_usd)}});
      cards.push_back(
          {{"label", "NEW per " + std::string(per)}, {"value", side(r.new_ns, p.summary[i].new_usd)}});
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
  const bool priced = price.has_value();
  tables.push_back(rows_table("class of time", d.summary, p.summary, per, priced, 20));
  tables.push_back(rows_table("kernel", d.kernels, p.kernels, per, priced, 25));
  tables.push_back(rows_table("operator", d.operators, p.operators, per, priced, 25));
  if (!d.annotations.empty())
    tables.push_back(rows_table("annotation", d.annotations, p.annotations, per, priced, 25));
  spec["tables"] = tables;
  return html::page(spec);
}

}  // namespace gm::report
