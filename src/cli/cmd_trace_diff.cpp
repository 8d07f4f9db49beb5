// gpumeter trace diff: two runs' traces compared per step in dollars; a CI gate (exit 0 pass, 1 fail).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "cli/cli.h"
#include "cli/common.h"
#include "findings/priced_trace.h"
#include "report/html.h"
#include "report/trace_render.h"
#include "trace/trace.h"
#include "util/exit_codes.h"
#include "util/units.h"

namespace gm::cli {

int cmd_trace_diff(int argc, char** argv) {
  CLI::App app{
      "Compare two runs' traces per profiler step: time and cost per class, kernel, operator and "
      "annotation, new and vanished kernels, and a gate. Exit 0 pass, 1 fail, 2 usage error.",
      "trace diff"};
  report::TraceDiffView view;
  meter::PricingOptions pricing;
  std::string max_increase = "5%", min_share = "1%";
  bool json = false;
  std::optional<std::string> html;
  app.add_option("BASE", view.base_path, "the baseline: a trace file or a run folder")->required();
  app.add_option("NEW", view.new_path, "the candidate: a trace file or a run folder")->required();
  add_pricing_flags(app, pricing);
  app.add_option(
      "--max-cost-increase", max_increase,
      "fail when the cost per step, or that of a kernel or operator over --min-share, rises by more "
      "(default 5%)");
  app.add_option("--min-share", min_share,
                 "gate only kernels and operators holding at least this share of busy "
                 "time in either run (default 1%)");
  app.add_option("--by", view.by, "breakdowns to show: kernel, op, annotation (repeatable; default all)")
      ->check(CLI::IsMember({"kernel", "op", "annotation", "step"}));
  app.add_option("--top", view.top, "rows per breakdown in the terminal report (default 10)")
      ->check(positive_number());
  app.add_flag("--json", json, "JSON verdict for CI");
  app.add_option("--html", html, "also write the comparison as a self-contained HTML page to FILE");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  trace::DiffOptions options;
  {
    auto inc = util::parse_percent(max_increase);
    if (!inc)
      return fail("trace diff", make_error(ErrorKind::usage, "--max-cost-increase: " + inc.error().message));
    auto share = util::parse_percent(min_share);
    if (!share)
      return fail("trace diff", make_error(ErrorKind::usage, "--min-share: " + share.error().message));
    options.max_increase = *inc / 100.0;
    options.min_share = *share / 100.0;
    view.max_increase = options.max_increase;
    view.min_share = options.min_share;
  }
  // Input problems (a missing or damaged file, a non-trace) exit 2, so that 1 always means "the gate failed".
  auto base = trace::analyze_inputs({view.base_path});
  if (!base) return fail("trace diff", make_error(ErrorKind::usage, base.error().message));
  auto now = trace::analyze_inputs({view.new_path});
  if (!now) return fail("trace diff", make_error(ErrorKind::usage, now.error().message));
  for (const auto* set : {&*base, &*now}) {
    for (const auto& p : set->problems) std::fprintf(stderr, "gpumeter trace diff: warning: %s\n", p.c_str());
    if (!set->errors.empty()) return fail("trace diff", make_error(ErrorKind::usage, set->errors.front()));
  }
  auto d = trace::diff_traces(base->files, now->files, options);
  if (!d) return fail("trace diff", make_error(ErrorKind::usage, d.error().message));

  auto prices = meter::PricingContext::open(pricing, nullptr);
  if (!prices) return fail("trace diff", prices.error());
  auto device_price = prices->price_for(findings::first_gpu_name(base->files));
  if (!device_price) return fail("trace diff", device_price.error());
  findings::TracePrice price;
  if (device_price->quote) price = {device_price->quote->micros_per_gpu_hour, device_price->quote->source};
  const findings::PricedDiff priced = findings::price_diff(std::move(*d), price);
  if (html) {
    auto page = report::render_trace_diff_html(priced, view);
    if (!page) return fail("trace diff", page.error());
    std::ofstream out(*html, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(page->data(), static_cast<std::streamsize>(page->size())) || !out.flush())
      return fail("trace diff", make_error(ErrorKind::usage,
                                           "--html: cannot write " + *html + ": " + std::strerror(errno)));
    std::fprintf(stderr, "gpumeter trace diff: wrote %s\n", html->c_str());
  }
  std::fputs((json ? report::trace_diff_json(priced, view) : report::trace_diff_text(priced, view)).c_str(),
             stdout);
  return priced.diff.pass ? util::kExitOk : util::kExitFailure;
}

}  // namespace gm::cli
