// Team budgets read from the ledger: which budgets guard a run, and what their selectors spent.
#include "guard/team_budget.h"

#include "guard/run_state.h"

namespace gm::guard {

namespace {
Result<TeamBudgetStatus> status_of(const store::Ledger& ledger, const store::BudgetRecord& b,
                                   std::int64_t now_unix_ms) {
  TeamBudgetStatus s;
  GM_TRY(auto kv, store::parse_selector(b.selector, "budget"));
  s.budget.selector = b.selector;
  s.budget.key = kv.first;
  s.budget.value = kv.second;
  s.budget.period = b.period;
  s.budget.limit_micros = b.limit_micros;
  s.budget.period_start_unix_ms = period_start_unix_ms(b.period, now_unix_ms);
  GM_TRY(store::SelectorSpend spend,
         ledger.selector_spend(kv.first, kv.second, s.budget.period_start_unix_ms, 0));
  s.spent_micros = spend.spent_micros;
  s.runs = spend.runs;
  s.live_runs = spend.live_runs;
  return s;
}
}  // namespace

Result<std::vector<TeamBudgetStatus>> team_budget_statuses(const store::Ledger& ledger,
                                                           std::int64_t now_unix_ms) {
  GM_TRY(std::vector<store::BudgetRecord> budgets, ledger.budgets());
  std::vector<TeamBudgetStatus> out;
  for (const auto& b : budgets) {
    GM_TRY(TeamBudgetStatus s, status_of(ledger, b, now_unix_ms));
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<TeamBudgetStatus>> team_budgets_matching(const store::Ledger& ledger,
                                                            const store::RunRecord& run,
                                                            std::int64_t now_unix_ms) {
  GM_TRY(std::vector<store::BudgetRecord> budgets, ledger.budgets());
  std::vector<TeamBudgetStatus> out;
  for (const auto& b : budgets) {
    auto kv = store::parse_selector(b.selector, "budget");
    if (!kv || !store::run_matches(run, kv->first, kv->second)) continue;
    GM_TRY(TeamBudgetStatus s, status_of(ledger, b, now_unix_ms));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace gm::guard

namespace gm::guard {

std::vector<std::optional<MicroUsd>> TeamBudgets::others() {
  const auto& budgets = st_.cfg.guard.team_budgets;
  std::vector<std::optional<MicroUsd>> out(budgets.size());
  unchecked_.resize(budgets.size(), false);
  for (std::size_t i = 0; i < budgets.size(); ++i) {
    const TeamBudget& b = budgets[i];
    Result<store::SelectorSpend> spend =
        st_.ledger ? st_.ledger->selector_spend(b.key, b.value, b.period_start_unix_ms, st_.run.id)
                   : Result<store::SelectorSpend>(make_error(ErrorKind::unavailable, "no ledger"));
    if (spend) {
      out[i] = spend->spent_micros;
      if (unchecked_[i]) st_.sink.message("team budget " + b.selector + " can be checked again", false);
      unchecked_[i] = false;
    } else if (!unchecked_[i]) {
      unchecked_[i] = true;
      st_.warn("team budget " + b.selector + " cannot be checked now (" + spend.error().message + "): " +
               (st_.cfg.guard.budget_micros ? "this run falls back to its own --budget"
                                            : "this run has no --budget to fall back to"));
    }
  }
  return out;
}

}  // namespace gm::guard
