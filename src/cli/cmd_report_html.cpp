#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "catalog/catalog.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "report/html.h"
#include "report/load.h"
#include "report/run_report.h"
#include "store/store.h"
#include "util/units.h"

namespace gm::cli {

bool wants_run_html_report(int argc, char** argv) {
  if (wants_multi_run_report(argc, argv)) return false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--html" || a.starts_with("--html=")) return true;
  }
  return false;
}

int run_html_report(int argc, char** argv) {
  CLI::App app{"One run's report as a self-contained HTML page with charts", "report"};
  std::string ref = "last", path;
  std::optional<std::string> target, ledger_path;
  std::optional<double> params;
  bool inference = false;
  app.add_option("RUN", ref, "run id or 'last' (default)");
  app.add_option("--html", path, "write the page to FILE")->required();
  app.add_option("--target", target, "$ to reach a metric target: acc=0.9, acc>=0.9, loss<=1.8");
  app.add_option("--params", params, "model parameters for MFU (else the run's label params=N)")
      ->check(positive_number());
  app.add_flag("--inference", inference,
               "MFU with 2 x params FLOPs per token (default: training, 6 x params)");
  app.add_option("--ledger", ledger_path, "ledger file (default $GPUMETER_LEDGER or the XDG data directory)");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  report::KpiOptions options;
  options.params = params;
  options.training = !inference;
  if (target) {
    auto t = meter::parse_metric_target(*target);
    if (!t) return fail("report", t.error());
    options.target = *t;
  }
  auto ledger = open_ledger_for_reading(ledger_path);
  if (!ledger) return fail("report", ledger.error());
  auto run = report::resolve_run(**ledger, ref);
  if (!run) return fail("report", run.error());
  auto input = report::load_run_page(**ledger, *run, options);
  if (!input) return fail("report", input.error());
  auto page = report::render_run_html(*input);
  if (!page) return fail("report", page.error());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !f.write(page->data(), static_cast<std::streamsize>(page->size())) || !f.flush())
    return fail("report", make_error("cannot write " + path + ": " + std::strerror(errno)));
  std::fprintf(stderr, "gpumeter report: wrote %s (run %lld)\n", path.c_str(),
               static_cast<long long>(run->id));
  return util::kExitOk;
}

}  // namespace gm::cli
