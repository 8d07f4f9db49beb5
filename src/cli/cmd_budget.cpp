// gpumeter budget set | list | rm: team budgets in the (shared) ledger, enforced on every run they match.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>

#include "cli/cli.h"
#include "cli/common.h"
#include "guard/team_budget.h"
#include "report/listings.h"
#include "util/clock.h"
#include "util/units.h"

namespace gm::cli {

namespace {

int budget_set(int argc, char** argv) {
  CLI::App app{"Set the budget of every run matching SELECTOR (a label k=v, user=NAME or host=NAME)",
               "budget set"};
  std::string selector, usd, per = "month";
  std::optional<std::string> location;
  app.add_option("SELECTOR", selector, "team=nlp, project=x, user=alice, host=node1")->required();
  app.add_option("USD", usd, "the budget per period, in USD")->required();
  app.add_option(
      "--per", per,
      util::enum_texts(store::kBudgetPeriodTexts) + " (UTC calendar periods; weeks start on Monday)");
  app.add_option("--ledger", location, "ledger: a SQLite path or postgresql://user@host:port/db");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  if (auto sel = store::parse_selector(selector, "SELECTOR"); !sel) return fail("budget set", sel.error());
  const auto period = util::parse_enum<store::BudgetPeriod>(per, "--per");
  if (!period) return fail("budget set", period.error());
  auto amount = util::parse_usd_micros(usd);
  if (!amount || *amount <= 0)
    return fail("budget set",
                make_error(ErrorKind::usage, fmt::format("USD '{}': expected a positive number of USD "
                                                         "written in decimal (e.g. 500 or 12.50)",
                                                         usd)));
  auto ledger = open_ledger_for_writing(location);
  if (!ledger) return fail("budget set", ledger.error());
  store::BudgetRecord b;
  b.selector = selector;
  b.limit_micros = *amount;
  b.period = *period;
  if (auto r = (*ledger)->set_budget(b); !r) return fail("budget set", r.error());
  std::printf("budget %s: %s per %s (ledger %s)\n", selector.c_str(),
              util::format_usd(util::micros_to_usd(b.limit_micros)).c_str(), per.c_str(),
              (*ledger)->describe().c_str());
  return util::kExitOk;
}

int budget_list(int argc, char** argv) {
  CLI::App app{"Team budgets with what their runs spent this period, what remains and the live runs",
               "budget list"};
  bool json = false;
  std::optional<std::string> location;
  app.add_flag("--json", json, "JSON for machines");
  app.add_option("--ledger", location, "ledger: a SQLite path or postgresql://user@host:port/db");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  auto ledger = open_ledger_for_writing(location);
  if (!ledger) return fail("budget list", ledger.error());
  auto statuses = guard::team_budget_statuses(**ledger, util::system_clock().unix_ms());
  if (!statuses) return fail("budget list", statuses.error());
  std::fputs((json ? report::render_budgets_json(*statuses) : report::render_budgets_text(*statuses)).c_str(),
             stdout);
  return util::kExitOk;
}

int budget_rm(int argc, char** argv) {
  CLI::App app{"Remove the budget of SELECTOR", "budget rm"};
  std::string selector;
  std::optional<std::string> location;
  app.add_option("SELECTOR", selector, "as given to budget set")->required();
  app.add_option("--ledger", location, "ledger: a SQLite path or postgresql://user@host:port/db");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  auto ledger = open_ledger_for_writing(location);
  if (!ledger) return fail("budget rm", ledger.error());
  if (auto r = (*ledger)->remove_budget(selector); !r) return fail("budget rm", r.error());
  std::printf("removed the budget of %s\n", selector.c_str());
  return util::kExitOk;
}

}  // namespace

int cmd_budget(int argc, char** argv) {
  const Subcommand subcommands[] = {{"set", budget_set}, {"list", budget_list}, {"rm", budget_rm}};
  return dispatch_subcommands(
      "budget", argc, argv,
      fmt::format(
          "Team budgets across machines\n"
          "Usage: budget set SELECTOR USD --per day|week|month [--ledger L]\n"
          "       budget list [--json] [--ledger L]\n"
          "       budget rm SELECTOR [--ledger L]\n\n"
          "Options:\n"
          "  -h,--help   Print this help message and exit (SUBCOMMAND --help: its options)\n\n"
          "A run (or attach) whose labels match SELECTOR (team=nlp, project=x; user=NAME and host=NAME "
          "match\n"
          "the run's user and host) counts the spend of every run of that selector on every machine writing\n"
          "the ledger: it refuses to start when the budget is spent (exit {}) and stops like --budget when "
          "it\n"
          "is reached (warnings at --warn-at).\n",
          util::kExitTeamBudgetSpent),
      subcommands);
}

}  // namespace gm::cli
