// gpumeter trace: Kineto traces explained in dollars (DESIGN §3 "Trace costs").
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/common.h"
#include "findings/priced_trace.h"
#include "report/html.h"
#include "report/trace_render.h"
#include "trace/trace.h"
#include "util/exit_codes.h"

namespace gm::cli {

int cmd_trace(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "diff") return cmd_trace_diff(argc - 1, argv + 1);
  CLI::App app{
      "Explain PyTorch profiler (Kineto) traces in dollars: window, compute / communication / memory / "
      "idle, cost per kernel, operator, annotation and step.",
      "trace"};
  std::vector<std::string> paths;
  report::TraceRenderOptions ro;
  std::optional<std::int64_t> project_steps;
  meter::PricingOptions pricing;
  bool json = false, csv = false, partial = false, no_progress = false;
  std::optional<std::string> html;
  app.add_option(
         "PATH", paths,
         "trace files (Kineto JSON, legacy JSON event arrays, Perfetto .pftrace/.pb; gzip'd or not) or "
         "folders (read recursively; one run = one folder of rank files)")
      ->required();
  add_pricing_flags(app, pricing);
  app.add_option("--steps", project_steps, "project the cost of N steps from the mean step cost")
      ->check(positive_number());
  app.add_option("--top", ro.top, "rows per breakdown in the terminal report (default 10)")
      ->check(positive_number());
  app.add_option("--by", ro.by, "breakdowns to show: kernel, op, annotation, step (repeatable; default all)")
      ->check(CLI::IsMember({"kernel", "op", "annotation", "step"}));
  app.add_flag("--json", json, "machine-readable JSON (integer nanoseconds)");
  app.add_flag("--csv", csv, "one CSV row per breakdown entry");
  app.add_option("--html", html, "also write a self-contained HTML page with charts to FILE");
  app.add_flag("--partial", partial, "analyse what parsed in a damaged file, labelled partial");
  app.add_flag("--no-progress", no_progress, "no progress bar");
  if (auto rc = parse_args(app, argc, argv)) {
    // `trace --help` shows the other mode too: `trace diff`.
    if (*rc == util::kExitOk && help_requested(argc, argv))
      return print_mode_help("gpumeter trace diff BASE NEW: compare two traces", cmd_trace_diff,
                             {"diff", "--help"});
    return *rc;
  }
  if (json && csv) return fail("trace", make_error(ErrorKind::usage, "--json and --csv are exclusive"));

  trace::Options options;
  options.partial = partial;
  // Progress bar on a terminal (stderr) for inputs over ~100 MB.
  std::mutex progress_mutex;
  bool progress_shown = false;
  if (!no_progress && isatty(STDERR_FILENO) == 1) {
    options.progress = [&](std::int64_t done, std::int64_t total) {
      if (total < 100'000'000) return;
      std::lock_guard lock(progress_mutex);
      const int width = 30;
      const auto filled = static_cast<int>(static_cast<double>(done) / static_cast<double>(total) * width);
      std::fprintf(stderr, "\rreading [%s%s] %3d%%",
                   std::string(static_cast<std::size_t>(filled), '#').c_str(),
                   std::string(static_cast<std::size_t>(width - filled), ' ').c_str(),
                   static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total)));
      progress_shown = true;
    };
  }
  auto set = trace::analyze_inputs(paths, options);
  if (progress_shown) std::fputs("\r\033[K", stderr);
  if (!set) return fail("trace", set.error());
  for (const auto& p : set->problems) std::fprintf(stderr, "gpumeter trace: warning: %s\n", p.c_str());

  // Price: the pricing flags / config, else the catalog reference price of the GPU named in deviceProperties.
  auto prices = meter::PricingContext::open(pricing, nullptr);
  if (!prices) return fail("trace", prices.error());
  auto price = prices->price_for(findings::first_gpu_name(set->files));
  if (!price) return fail("trace", price.error());
  findings::TracePrice trace_price;
  if (price->quote) {
    trace_price = {price->quote->micros_per_gpu_hour, price->quote->source};
  } else if (!json && !csv) {
    std::fprintf(stderr, "gpumeter trace: note: figures in time only (%s)\n", price->unpriced_reason.c_str());
  }
  const findings::PricedTrace priced =
      findings::price_trace(std::move(set->files), trace_price, &prices->catalog(), project_steps);

  if (html) {
    auto page = report::render_trace_html(priced);
    if (!page) return fail("trace", page.error());
    std::ofstream out(*html, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(page->data(), static_cast<std::streamsize>(page->size())) || !out.flush())
      return fail("trace", make_error("cannot write " + *html + ": " + std::strerror(errno)));
    std::fprintf(stderr, "gpumeter trace: wrote %s\n", html->c_str());
  }
  if (json) {
    std::fputs(report::trace_json(priced).c_str(), stdout);
    std::fputc('\n', stdout);
  } else if (csv) {
    std::fputs(report::trace_csv(priced).c_str(), stdout);
  } else {
    std::fputs(report::trace_text(priced, ro).c_str(), stdout);
  }
  for (const auto& f : priced.files)
    if (f.partial)
      std::fprintf(stderr, "gpumeter trace: warning: PARTIAL results for %s: %s\n", f.file.c_str(),
                   f.partial_error.c_str());
  // Named files that are not traces and folders with nothing to analyse fail the command (after the
  // report of what could be analysed), so that a CI job does not read them as success.
  for (const auto& e : set->errors) std::fprintf(stderr, "gpumeter trace: error: %s\n", e.c_str());
  return set->errors.empty() ? util::kExitOk : util::kExitFailure;
}

}  // namespace gm::cli
