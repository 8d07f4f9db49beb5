#include <cstdio>

#include "cli/cli.h"
#include "cli/common.h"
#include "report/gate.h"
#include "report/load.h"
#include "store/store.h"
#include "util/exit_codes.h"

namespace gm::cli {

int cmd_compare(int argc, char** argv) {
  CLI::App app{
      "Release gate: compare run B (candidate) with run A (baseline) on cost, time, KPIs and metrics. "
      "Exit 0 pass, 1 fail, 2 usage error (e.g. a metric missing from a run), 4 unknown run.",
      "compare"};
  std::string ref_a, ref_b;
  std::optional<std::string> max_cost, max_token_cost, ledger_path;
  std::vector<std::string> min_gains;
  bool json = false;
  app.add_option("RUN_A", ref_a, "baseline run id (or 'last')")->required();
  app.add_option("RUN_B", ref_b, "candidate run id (or 'last')")->required();
  app.add_option("--max-cost-increase", max_cost, "fail when B costs more than A by over this, e.g. 20%");
  app.add_option("--max-token-cost-increase", max_token_cost,
                 "served runs: fail when B's $ per 1M generated tokens exceeds A's by over this, e.g. 10%");
  app.add_option("--min-gain", min_gains,
                 "fail unless METRIC changes by at least this from A to B: acc=2% (relative), acc=+0.02 "
                 "(absolute), loss=-5% (must fall); repeatable");
  app.add_option("--ledger", ledger_path, "ledger file (default $GPUMETER_LEDGER or the XDG data directory)");
  app.add_flag("--json", json, "JSON verdict for CI");
  if (auto rc = parse_args(app, argc, argv)) return *rc;

  report::GateOptions gate;
  if (max_cost) {
    auto pct = report::parse_cost_increase_pct(*max_cost);
    if (!pct) return fail("compare", pct.error());
    gate.max_cost_increase_pct = *pct;
  }
  if (max_token_cost) {
    auto pct = report::parse_cost_increase_pct(*max_token_cost);
    if (!pct) return fail("compare", pct.error());
    gate.max_token_cost_increase_pct = *pct;
  }
  for (const auto& g : min_gains) {
    auto parsed = report::parse_min_gain(g);
    if (!parsed) return fail("compare", parsed.error());
    gate.min_gains.push_back(*parsed);
  }
  for (const std::string* ref : {&ref_a, &ref_b})
    if (*ref != "last" && (ref->empty() || ref->find_first_not_of("0123456789") != std::string::npos))
      return fail("compare",
                  make_error(ErrorKind::usage,
                             "run '" + *ref + "': expected a run id (see `gpumeter runs`) or 'last'"));
  auto ledger = open_ledger_for_reading(ledger_path);
  if (!ledger) return fail("compare", ledger.error());
  auto a = report::load_compare_side(**ledger, ref_a);
  if (!a) return fail("compare", a.error());
  auto b = report::load_compare_side(**ledger, ref_b);
  if (!b) return fail("compare", b.error());
  auto result = report::compare_runs(*a, *b, gate);
  if (!result) return fail("compare", result.error());
  const std::string out = json ? report::render_compare_json(*result) : report::render_compare_text(*result);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return result->pass ? util::kExitOk : util::kExitFailure;
}

}  // namespace gm::cli
