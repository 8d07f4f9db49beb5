// `gpumeter trace diff` in the terminal and as JSON for CI, from the priced comparison.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "report/detail/trace_text.h"
#include "report/trace_render.h"
#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::report {

using util::json_or_null;
namespace {

using findings::DiffRowCosts;

nlohmann::json rows_json(const std::vector<trace::DiffRow>& rows, const std::vector<DiffRowCosts>& costs) {
  auto arr = nlohmann::json::array();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const trace::DiffRow& r = rows[i];
    nlohmann::json j{{"name", r.name},
                     {"base_ns", r.base_ns},
                     {"new_ns", r.new_ns},
                     {"delta_ns", r.new_ns - r.base_ns},
                     {"base_cost_usd", json_or_null(costs[i].base_usd)},
                     {"new_cost_usd", json_or_null(costs[i].new_usd)},
                     {"delta_cost_usd", json_or_null(costs[i].delta_usd)},
                     {"base_share", r.base_share},
                     {"new_share", r.new_share},
                     {"change", json_or_null(r.change)},
                     {"status", r.status},
                     {"gated", r.gated},
                     {"failed", r.failed}};
    if (r.kind == "kernel") j["class"] = r.klass;
    arr.push_back(std::move(j));
  }
  return arr;
}

void rows_text(std::string& out, const char* title, const std::vector<trace::DiffRow>& rows,
               const std::vector<DiffRowCosts>& costs, std::size_t top, const char* per) {
  if (rows.empty()) return;
  util::TextTable t;
  const std::string base_col = fmt::format("base ms/{}", per), new_col = fmt::format("new ms/{}", per);
  t.header({title, base_col, new_col, "change", "Δ cost", "share", ""},
           {util::TextTable::Align::left, util::TextTable::Align::right, util::TextTable::Align::right,
            util::TextTable::Align::right, util::TextTable::Align::right, util::TextTable::Align::right,
            util::TextTable::Align::left});
  const std::vector<std::string> display = detail::diff_row_names(rows, 60);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const trace::DiffRow& r = rows[i];
    if (i >= top && !r.failed) continue;
    const auto& delta = costs[i].delta_usd;
    t.row({display[i], fmt::format("{:.3f}", r.base_ns / 1e6), fmt::format("{:.3f}", r.new_ns / 1e6),
           detail::change_text(r), delta ? util::format_usd(*delta, true) : "-",
           fmt::format("{:.1f}%", 100 * r.new_share), r.failed ? "FAIL" : ""});
  }
  out += t.render();
  if (rows.size() > top) out += fmt::format("({} more)\n", rows.size() - top);
  out += "\n";
}

bool shown(const TraceDiffView& v, const char* what) {
  return v.by.empty() || std::find(v.by.begin(), v.by.end(), what) != v.by.end();
}

}  // namespace

std::string trace_diff_text(const findings::PricedDiff& p, const TraceDiffView& v) {
  const trace::TraceDiff& d = p.diff;
  const auto& price = p.price.micros_per_gpu_hour;
  std::string out;
  out += fmt::format("BASE {} ({} device(s), {} steps)\nNEW  {} ({} device(s), {} steps)\n", v.base_path,
                     d.base_devices, d.base_steps, v.new_path, d.new_devices, d.new_steps);
  out +=
      price ? fmt::format("price: {}/GPU-hour (source: {}); figures per {}\n\n", util::format_micros(*price),
                          p.price.source, d.per)
            : fmt::format("price: none (pass --price USD_PER_GPU_HOUR for costs); figures per {}\n\n", d.per);
  const char* per = d.per == "step" ? "step" : "trace";
  rows_text(out, "per-step time", d.summary, p.summary, 20, per);
  if (shown(v, "kernel")) rows_text(out, "kernel", d.kernels, p.kernels, v.top, per);
  if (shown(v, "op")) rows_text(out, "operator", d.operators, p.operators, v.top, per);
  if (shown(v, "annotation")) rows_text(out, "annotation", d.annotations, p.annotations, v.top, per);
  for (const auto& r : d.kernels)
    if (r.status == "new" || r.status == "vanished")
      out += fmt::format("{} kernel: {} ({:.3f} ms/{})\n", r.status, trace::short_name(r.name, 80),
                         (r.status == "new" ? r.new_ns : r.base_ns) / 1e6, per);
  out += d.pass ? fmt::format("\nverdict: PASS (limit +{:.1f}% per {}, items over {:.1f}% of busy time)\n",
                              100 * v.max_increase, per, 100 * v.min_share)
                : "\nverdict: FAIL\n";
  for (const auto& f : d.failures) out += "  " + f + "\n";
  return out;
}

std::string trace_diff_json(const findings::PricedDiff& p, const TraceDiffView& v) {
  const trace::TraceDiff& d = p.diff;
  const auto& price = p.price.micros_per_gpu_hour;
  nlohmann::json j{{"base", v.base_path},
                   {"new", v.new_path},
                   {"per", d.per},
                   {"base_steps", d.base_steps},
                   {"new_steps", d.new_steps},
                   {"price_usd_per_gpu_hour",
                    price ? nlohmann::json(util::micros_to_usd(*price)) : nlohmann::json(nullptr)},
                   {"price_source", price ? nlohmann::json(p.price.source) : nlohmann::json(nullptr)},
                   {"max_cost_increase", v.max_increase},
                   {"min_share", v.min_share},
                   {"summary", rows_json(d.summary, p.summary)},
                   {"kernels", rows_json(d.kernels, p.kernels)},
                   {"operators", rows_json(d.operators, p.operators)},
                   {"annotations", rows_json(d.annotations, p.annotations)},
                   {"failures", d.failures},
                   {"verdict", d.pass ? "pass" : "fail"}};
  return j.dump(2) + "\n";
}

}  // namespace gm::report
