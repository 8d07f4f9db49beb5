#pragma once
// Team budgets (`gpumeter budget set`) read from the ledger: what their selectors spent this period, which of
// them guard a run, and, during a run, what the other runs of each selector spent (the shared ledger).
#include <cstdint>
#include <optional>
#include <vector>

#include "guard/guard.h"
#include "store/store.h"

namespace gm::guard {
class RunState;
}

namespace gm::guard {

/// A team budget and what the runs of its selector spent this period.
struct TeamBudgetStatus {
  TeamBudget budget;
  MicroUsd spent_micros = 0;
  std::int64_t runs = 0;
  std::int64_t live_runs = 0;
};
/// Every budget of `ledger` with its spend this period (periods at `now_unix_ms`, UTC).
Result<std::vector<TeamBudgetStatus>> team_budget_statuses(const store::Ledger& ledger,
                                                           std::int64_t now_unix_ms);
/// The budgets of `ledger` whose selector matches `run` (its labels, user or host), with their spend now.
Result<std::vector<TeamBudgetStatus>> team_budgets_matching(const store::Ledger& ledger,
                                                            const store::RunRecord& run,
                                                            std::int64_t now_unix_ms);

}  // namespace gm::guard

namespace gm::guard {

/// The team budgets guarding a supervised run (cfg.guard.team_budgets), asked at every tick.
class TeamBudgets {
 public:
  explicit TeamBudgets(RunState& state) : st_(state) {}
  /// What the other runs of each budget's selector spent, from the shared ledger (every machine's runs write
  /// their spend there at every tick); nullopt for a budget that cannot be checked now, said once.
  std::vector<std::optional<MicroUsd>> others();

 private:
  RunState& st_;
  std::vector<bool> unchecked_;  ///< per team budget: it could not be checked at the last tick
};

}  // namespace gm::guard
