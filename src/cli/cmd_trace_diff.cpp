// gpumeter trace diff: two runs' traces compared per step in dollars; a CI gate (exit 0 pass, 1 fail).
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/common.h"
#include "meter/meter.h"
#include "report/html.h"
#include "trace/trace.h"
#include "util/exit_codes.h"
#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::cli {
namespace {

std::optional<double> usd(const std::optional<MicroUsd>& price, double ns) {
  if (!price) return std::nullopt;
  return gpu_ns_cost_usd(*price, ns);
}

std::string change_text(const trace::DiffRow& r) {
  if (r.status == "new") return "new";
  if (r.status == "vanished") return "vanished";
  if (!r.change) return "-";
  return fmt::format("{:+.1f}%", 100 * *r.change);
}

nlohmann::json rows_json(const std::vector<trace::DiffRow>& rows, const std::optional<MicroUsd>& price) {
  auto arr = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json j{{"name", r.name},
                     {"base_ns", r.base_ns},
                     {"new_ns", r.new_ns},
                     {"delta_ns", r.new_ns - r.base_ns},
                     {"base_cost_usd", json_or_null(usd(price, r.base_ns))},
                     {"new_cost_usd", json_or_null(usd(price, r.new_ns))},
                     {"delta_cost_usd", json_or_null(usd(price, r.new_ns - r.base_ns))},
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
               const std::optional<MicroUsd>& price, std::size_t top, const char* per) {
  if (rows.empty()) return;
  TextTable t;
  const std::string base_col = fmt::format("base ms/{}", per), new_col = fmt::format("new ms/{}", per);
  t.header({title, base_col, new_col, "change", "Δ cost", "share", ""},
           {TextTable::Align::left, TextTable::Align::right, TextTable::Align::right, TextTable::Align::right,
            TextTable::Align::right, TextTable::Align::right, TextTable::Align::left});
  std::vector<std::string> full_names;
  for (const auto& r : rows) full_names.push_back(r.name);
  const std::vector<std::string> display = trace::short_names(full_names, 60);
  std::size_t n = 0;
  for (const auto& r : rows) {
    if (n++ >= top && !r.failed) continue;
    const auto delta = usd(price, r.new_ns - r.base_ns);
    t.row({display[n - 1], fmt::format("{:.3f}", r.base_ns / 1e6), fmt::format("{:.3f}", r.new_ns / 1e6),
           change_text(r), delta ? (*delta < 0 ? "-" + format_usd(-*delta) : "+" + format_usd(*delta)) : "-",
           fmt::format("{:.1f}%", 100 * r.new_share), r.failed ? "FAIL" : ""});
  }
  out += t.render();
  if (rows.size() > top) out += fmt::format("({} more)\n", rows.size() - top);
  out += "\n";
}

}  // namespace

int cmd_trace_diff(int argc, char** argv) {
  CLI::App app{
      "Compare two runs' traces per profiler step: time and cost per class, kernel, operator and "
      "annotation, new and vanished kernels, and a gate. Exit 0 pass, 1 fail, 2 usage error.",
      "trace diff"};
  std::string base_path, new_path;
  PricingOptions pricing;
  std::string max_increase = "5%", min_share = "1%";
  std::vector<std::string> by;
  std::size_t top = 10;
  bool json = false;
  std::optional<std::string> html;
  app.add_option("BASE", base_path, "the baseline: a trace file or a run folder")->required();
  app.add_option("NEW", new_path, "the candidate: a trace file or a run folder")->required();
  add_pricing_flags(app, pricing);
  app.add_option(
      "--max-cost-increase", max_increase,
      "fail when the cost per step, or that of a kernel or operator over --min-share, rises by more "
      "(default 5%)");
  app.add_option("--min-share", min_share,
                 "gate only kernels and operators holding at least this share of busy "
                 "time in either run (default 1%)");
  app.add_option("--by", by, "breakdowns to show: kernel, op, annotation (repeatable; default all)")
      ->check(CLI::IsMember({"kernel", "op", "annotation", "step"}));
  app.add_option("--top", top, "rows per breakdown in the terminal report (default 10)")
      ->check(positive_number());
  app.add_flag("--json", json, "JSON verdict for CI");
  app.add_option("--html", html, "also write the comparison as a self-contained HTML page to FILE");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  trace::DiffOptions options;
  {
    auto inc = parse_percent(max_increase);
    if (!inc)
      return fail("trace diff", make_error(ErrorKind::usage, "--max-cost-increase: " + inc.error().message));
    auto share = parse_percent(min_share);
    if (!share)
      return fail("trace diff", make_error(ErrorKind::usage, "--min-share: " + share.error().message));
    options.max_increase = *inc / 100.0;
    options.min_share = *share / 100.0;
  }
  // Input problems (a missing or damaged file, a non-trace) exit 2, so that 1 always means "the gate failed".
  auto base = trace::analyze_inputs({base_path});
  if (!base) return fail("trace diff", make_error(ErrorKind::usage, base.error().message));
  auto now = trace::analyze_inputs({new_path});
  if (!now) return fail("trace diff", make_error(ErrorKind::usage, now.error().message));
  for (const auto* set : {&*base, &*now}) {
    for (const auto& p : set->problems) std::fprintf(stderr, "gpumeter trace diff: warning: %s\n", p.c_str());
    if (!set->errors.empty()) return fail("trace diff", make_error(ErrorKind::usage, set->errors.front()));
  }
  auto d = trace::diff_traces(base->files, now->files, options);
  if (!d) return fail("trace diff", make_error(ErrorKind::usage, d.error().message));

  std::optional<std::string> gpu_name;
  for (const auto& f : base->files)
    for (const auto& dev : f.devices)
      if (!gpu_name && dev.gpu_name) gpu_name = dev.gpu_name;
  std::optional<MicroUsd> price;
  std::string price_source;
  auto prices = PricingContext::open(pricing, nullptr);
  if (!prices) return fail("trace diff", prices.error());
  auto device_price = prices->price_for(gpu_name);
  if (!device_price) return fail("trace diff", device_price.error());
  if (device_price->quote) {
    price = device_price->quote->micros_per_gpu_hour;
    price_source = device_price->quote->source;
  }
  if (html) {
    TraceDiffHtmlInput page_input{
        *d, base_path, new_path, price, price_source, options.max_increase, options.min_share};
    auto page = render_trace_diff_html(page_input);
    if (!page) return fail("trace diff", page.error());
    std::ofstream out(*html, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(page->data(), static_cast<std::streamsize>(page->size())) || !out.flush())
      return fail("trace diff", make_error(ErrorKind::usage,
                                           "--html: cannot write " + *html + ": " + std::strerror(errno)));
    std::fprintf(stderr, "gpumeter trace diff: wrote %s\n", html->c_str());
  }
  const bool show_kernels = by.empty() || std::find(by.begin(), by.end(), "kernel") != by.end();
  const bool show_ops = by.empty() || std::find(by.begin(), by.end(), "op") != by.end();
  const bool show_anns = by.empty() || std::find(by.begin(), by.end(), "annotation") != by.end();
  if (json) {
    nlohmann::json j{
        {"base", base_path},
        {"new", new_path},
        {"per", d->per},
        {"base_steps", d->base_steps},
        {"new_steps", d->new_steps},
        {"price_usd_per_gpu_hour", price ? nlohmann::json(micros_to_usd(*price)) : nlohmann::json(nullptr)},
        {"price_source", price ? nlohmann::json(price_source) : nlohmann::json(nullptr)},
        {"max_cost_increase", options.max_increase},
        {"min_share", options.min_share},
        {"summary", rows_json(d->summary, price)},
        {"kernels", rows_json(d->kernels, price)},
        {"operators", rows_json(d->operators, price)},
        {"annotations", rows_json(d->annotations, price)},
        {"failures", d->failures},
        {"verdict", d->pass ? "pass" : "fail"}};
    std::fputs((j.dump(2) + "\n").c_str(), stdout);
  } else {
    std::string out;
    out += fmt::format("BASE {} ({} device(s), {} steps)\nNEW  {} ({} device(s), {} steps)\n", base_path,
                       d->base_devices, d->base_steps, new_path, d->new_devices, d->new_steps);
    out += price ? fmt::format("price: {}/GPU-hour (source: {}); figures per {}\n\n", format_micros(*price),
                               price_source, d->per)
                 : fmt::format("price: none (pass --price USD_PER_GPU_HOUR for costs); figures per {}\n\n",
                               d->per);
    const char* per = d->per == "step" ? "step" : "trace";
    rows_text(out, "per-step time", d->summary, price, 20, per);
    if (show_kernels) rows_text(out, "kernel", d->kernels, price, top, per);
    if (show_ops) rows_text(out, "operator", d->operators, price, top, per);
    if (show_anns) rows_text(out, "annotation", d->annotations, price, top, per);
    for (const auto& r : d->kernels)
      if (r.status == "new" || r.status == "vanished")
        out += fmt::format("{} kernel: {} ({:.3f} ms/{})\n", r.status, trace::short_name(r.name, 80),
                           (r.status == "new" ? r.new_ns : r.base_ns) / 1e6, per);
    out += d->pass ? fmt::format("\nverdict: PASS (limit +{:.1f}% per {}, items over {:.1f}% of busy time)\n",
                                 100 * options.max_increase, per, 100 * options.min_share)
                   : "\nverdict: FAIL\n";
    for (const auto& f : d->failures) out += "  " + f + "\n";
    std::fputs(out.c_str(), stdout);
  }
  return d->pass ? kExitOk : kExitFailure;
}

}  // namespace gm::cli
