// gpumeter budget set | list | rm: team budgets in the (shared) ledger, enforced on every run they match.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/common.h"
#include "guard/team_budget.h"
#include "util/clock.h"
#include "util/units.h"

namespace gm::cli {

namespace {

int budget_set(int argc, char** argv) {
  CLI::App app{"Set the budget of every run matching SELECTOR (a label k=v, user=NAME or host=NAME)", "budget set"};
  std::string selector, usd, per = "month";
  std::optional<std::string> location;
  app.add_option("SELECTOR", selector, "team=nlp, project=x, user=alice, host=node1")->required();
  app.add_option("USD", usd, "the budget per period, in USD")->required();
  app.add_option("--per", per, "day | week | month (UTC calendar periods; weeks start on Monday)")
      ->check(CLI::IsMember({"day", "week", "month"}));
  app.add_option("--ledger", location, "ledger: a SQLite path or postgresql://user@host:port/db");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  if (auto sel = parse_selector(selector, "SELECTOR"); !sel) return fail("budget set", sel.error());
  auto amount = parse_number(usd);
  if (!amount || !(*amount > 0))
    return fail("budget set", make_error(ErrorKind::usage, "USD '" + usd + "': expected a positive number of USD"));
  auto ledger = open_ledger_for_writing(location);
  if (!ledger) return fail("budget set", ledger.error());
  BudgetRecord b;
  b.selector = selector;
  b.limit_micros = usd_to_micros(*amount);
  b.period = per;
  if (auto r = (*ledger)->set_budget(b); !r) return fail("budget set", r.error());
  std::printf("budget %s: %s per %s (ledger %s)\n", selector.c_str(), format_usd(micros_to_usd(b.limit_micros)).c_str(),
              per.c_str(), (*ledger)->describe().c_str());
  return kExitOk;
}

int budget_list(int argc, char** argv) {
  CLI::App app{"Team budgets with what their runs spent this period, what remains and the live runs", "budget list"};
  bool json = false;
  std::optional<std::string> location;
  app.add_flag("--json", json, "JSON for machines");
  app.add_option("--ledger", location, "ledger: a SQLite path or postgresql://user@host:port/db");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  auto ledger = open_ledger_for_writing(location);
  if (!ledger) return fail("budget list", ledger.error());
  auto statuses = team_budget_statuses(**ledger, system_clock().unix_ms());
  if (!statuses) return fail("budget list", statuses.error());
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& s : *statuses)
      arr.push_back({{"selector", s.budget.selector},
                     {"per", s.budget.period},
                     {"limit_usd", micros_to_usd(s.budget.limit_micros)},
                     {"spent_usd", micros_to_usd(s.spent_micros)},
                     {"remaining_usd", micros_to_usd(s.budget.limit_micros - s.spent_micros)},
                     {"period_start_unix_ms", s.budget.period_start_unix_ms},
                     {"runs", s.runs},
                     {"live_runs", s.live_runs}});
    std::printf("%s\n", arr.dump(2).c_str());
    return kExitOk;
  }
  if (statuses->empty()) {
    std::printf("no budgets (gpumeter budget set SELECTOR USD --per day|week|month)\n");
    return kExitOk;
  }
  std::printf("%-24s  %-5s  %12s  %12s  %12s  %5s  %4s\n", "SELECTOR", "PER", "BUDGET", "SPENT", "REMAINING", "RUNS",
              "LIVE");
  for (const auto& s : *statuses)
    std::printf("%-24s  %-5s  %12s  %12s  %12s  %5lld  %4lld\n", s.budget.selector.c_str(), s.budget.period.c_str(),
                format_usd(micros_to_usd(s.budget.limit_micros)).c_str(),
                format_usd(micros_to_usd(s.spent_micros)).c_str(),
                format_usd(micros_to_usd(s.budget.limit_micros - s.spent_micros)).c_str(),
                static_cast<long long>(s.runs), static_cast<long long>(s.live_runs));
  return kExitOk;
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
  return kExitOk;
}

}  // namespace

int cmd_budget(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::printf(
        "Team budgets across machines\n"
        "Usage: budget set SELECTOR USD --per day|week|month [--ledger L]\n"
        "       budget list [--json] [--ledger L]\n"
        "       budget rm SELECTOR [--ledger L]\n\n"
        "Options:\n"
        "  -h,--help   Print this help message and exit (SUBCOMMAND --help: its options)\n\n"
        "A run (or attach) whose labels match SELECTOR (team=nlp, project=x; user=NAME and host=NAME match\n"
        "the run's user and host) counts the spend of every run of that selector on every machine writing\n"
        "the ledger: it refuses to start when the budget is spent (exit %d) and stops like --budget when it\n"
        "is reached (warnings at --warn-at).\n",
        kExitTeamBudgetSpent);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  const std::string sub = argv[1];
  if (sub == "set") return budget_set(argc - 1, argv + 1);
  if (sub == "list") return budget_list(argc - 1, argv + 1);
  if (sub == "rm") return budget_rm(argc - 1, argv + 1);
  return fail("budget", make_error(ErrorKind::usage, "unknown subcommand '" + sub + "': expected set, list or rm"));
}

}  // namespace gm::cli
