// The ledger's words as enums (store/store.h): each text table round-trips, an unknown word from a flag is a
// usage error listing the valid ones, the ledger stores exactly the texts it stored as strings, and a row
// holding a word this gpumeter does not know reads as a clear error, never a crash or a silent default.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <set>
#include <string>

#include "store/store.h"
#include "support/support.h"

namespace gm {
namespace {

/// Every value's text reads back as that value, and no two values share a text.
template <class E, std::size_t N>
void expect_round_trip(const util::EnumText<E> (&table)[N], std::size_t expected_values) {
  EXPECT_EQ(N, expected_values) << "a value was added without its text (or the other way round)";
  std::set<std::string> texts;
  for (const auto& row : table) {
    EXPECT_TRUE(texts.insert(row.text).second) << "duplicate text '" << row.text << "'";
    EXPECT_STREQ(util::text_of(row.value), row.text);
    const auto back = util::value_of<E>(row.text);
    ASSERT_TRUE(back.has_value()) << row.text;
    EXPECT_EQ(*back, row.value) << row.text;
  }
}

TEST(StoreEnumTest, EveryTableRoundTrips) {
  expect_round_trip(store::kRunStatusTexts, 8);
  expect_round_trip(store::kStopReasonTexts, 6);
  expect_round_trip(store::kRunEnergyMethodTexts, 6);
  expect_round_trip(store::kActionKindTexts, 23);
  expect_round_trip(store::kCellStatusTexts, 5);
  expect_round_trip(store::kBudgetPeriodTexts, 3);
  // The texts the ledger has always held (existing ledgers and tools read them).
  EXPECT_STREQ(util::text_of(store::RunStatus::interrupted), "interrupted");
  EXPECT_STREQ(util::text_of(store::RunEnergyMethod::power_integration), "power_integration");
  EXPECT_STREQ(util::text_of(store::RunEnergyMethod::not_recorded), "");
  EXPECT_STREQ(util::text_of(store::ActionKind::stop_budget), "stop_budget");
  EXPECT_STREQ(util::text_of(store::ActionKind::sigterm), "sigterm");
  EXPECT_STREQ(util::text_of(store::CellStatus::unfinished), "unfinished");
  EXPECT_STREQ(util::text_of(store::BudgetPeriod::week), "week");
}

TEST(StoreEnumTest, UnknownTextIsAnErrorListingTheValidOnes) {
  EXPECT_FALSE(util::value_of<store::RunStatus>("paused").has_value());
  EXPECT_FALSE(util::value_of<store::RunStatus>("Running").has_value()) << "texts match exactly";
  const auto bad = util::parse_enum<store::BudgetPeriod>("year", "--per");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::usage);
  EXPECT_EQ(bad.error().message, "--per 'year' is not one of day, week, month");
  const auto status = util::parse_enum<store::RunStatus>("paused", "--status", ErrorKind::failure);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().kind, ErrorKind::failure);
  EXPECT_NE(
      status.error().message.find("running, succeeded, failed, stopped, preempted, interrupted, finished, "
                                  "detached"),
      std::string::npos)
      << status.error().message;
}

/// One SQL statement on the ledger file, outside gpumeter (an edited ledger, a newer gpumeter's row).
void exec_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

/// The text of the first row's first column of `sql`.
std::string text_sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return "<no ledger>";
  sqlite3_stmt* s = nullptr;
  std::string out = "<no row>";
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

/// Writes a ledger at `path` with one stopped run, one action, one cell and one budget; the run's id.
std::int64_t fill_ledger(const std::string& path) {
  auto opened = store::Ledger::open(path);
  EXPECT_TRUE(opened.ok()) << opened.error().message;
  if (!opened) return 0;
  store::Ledger& l = **opened;
  store::RunRecord r;
  r.command = "train";
  r.start_unix_ms = 1'700'000'000'000;
  auto id = l.begin_run(r);
  EXPECT_TRUE(id.ok());
  r.id = *id;
  r.status = store::RunStatus::stopped;
  r.stopped_by = util::text_of(store::StopReason::budget);
  r.energy_method = store::RunEnergyMethod::power_integration;
  EXPECT_TRUE(l.update_run(r).ok());
  EXPECT_TRUE(
      l.append({}, {}, {store::ActionRecord{*id, 1000, store::ActionKind::sigterm, 5, "sent SIGTERM"}}).ok());
  EXPECT_TRUE(
      l.append_cells({store::CellRecord{*id, 3, 0, 900, 7, std::nullopt, store::CellStatus::refused, "x"}})
          .ok());
  EXPECT_TRUE(l.set_budget(store::BudgetRecord{"team=nlp", 1'000'000, store::BudgetPeriod::week, 0}).ok());
  return *id;
}

TEST(StoreEnumTest, LedgerStoresTheSameTexts) {
  test::TempDir dir;
  const std::string path = dir.path() + "/ledger.db";
  const std::int64_t id = fill_ledger(path);
  {
    auto l = store::Ledger::open(path);  // read back through a fresh connection
    ASSERT_TRUE(l.ok()) << l.error().message;
    auto back = (*l)->run(id);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->status, store::RunStatus::stopped);
    EXPECT_EQ(back->energy_method, store::RunEnergyMethod::power_integration);
    auto actions = (*l)->actions(id);
    ASSERT_TRUE(actions.ok());
    ASSERT_EQ(actions->size(), 1u);
    EXPECT_EQ(actions->at(0).kind, store::ActionKind::sigterm);
    auto cells = (*l)->cells(id);
    ASSERT_TRUE(cells.ok());
    ASSERT_EQ(cells->size(), 1u);
    EXPECT_EQ(cells->at(0).status, store::CellStatus::refused);
    auto budgets = (*l)->budgets();
    ASSERT_TRUE(budgets.ok());
    ASSERT_EQ(budgets->size(), 1u);
    EXPECT_EQ(budgets->at(0).period, store::BudgetPeriod::week);
  }
  const std::string run = " WHERE id=" + std::to_string(id);
  EXPECT_EQ(text_sql(path, "SELECT status FROM runs" + run), "stopped");
  EXPECT_EQ(text_sql(path, "SELECT stopped_by FROM runs" + run), "budget");
  EXPECT_EQ(text_sql(path, "SELECT energy_method FROM runs" + run), "power_integration");
  EXPECT_EQ(text_sql(path, "SELECT kind FROM actions"), "sigterm");
  EXPECT_EQ(text_sql(path, "SELECT status FROM cells"), "refused");
  EXPECT_EQ(text_sql(path, "SELECT period FROM budgets"), "week");
}

TEST(StoreEnumTest, UnknownLedgerTextIsAClearError) {
  test::TempDir dir;
  const std::string path = dir.path() + "/ledger.db";
  const std::int64_t id = fill_ledger(path);
  exec_sql(path,
           "UPDATE runs SET status='paused'; UPDATE actions SET kind='teleport'; "
           "UPDATE cells SET status='exploded'; UPDATE budgets SET period='fortnight'");
  auto l = store::Ledger::open(path);
  ASSERT_TRUE(l.ok()) << l.error().message;
  const auto expect_clear = [](const Error& e, const std::string& where, const std::string& word) {
    EXPECT_EQ(e.kind, ErrorKind::unavailable) << "as a corrupt ledger: exit code 5";
    EXPECT_NE(e.message.find(where), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("'" + word + "' is not one of"), std::string::npos) << e.message;
  };
  auto run = (*l)->run(id);
  ASSERT_FALSE(run.ok());
  expect_clear(run.error(), "ledger table runs row " + std::to_string(id) + ": column status holds",
               "paused");
  EXPECT_NE(run.error().message.find("running, succeeded"), std::string::npos) << run.error().message;
  auto runs = (*l)->runs();
  ASSERT_FALSE(runs.ok());
  expect_clear(runs.error(), "ledger table runs", "paused");
  auto summaries = (*l)->run_summaries(store::RunFilter{});
  ASSERT_FALSE(summaries.ok());
  expect_clear(summaries.error(), "ledger table runs", "paused");
  auto actions = (*l)->actions(id);
  ASSERT_FALSE(actions.ok());
  expect_clear(actions.error(), "ledger table actions: column kind holds", "teleport");
  auto cells = (*l)->cells(id);
  ASSERT_FALSE(cells.ok());
  expect_clear(cells.error(), "ledger table cells: column status holds", "exploded");
  auto budgets = (*l)->budgets();
  ASSERT_FALSE(budgets.ok());
  expect_clear(budgets.error(), "ledger table budgets: column period holds", "fortnight");
}

}  // namespace
}  // namespace gm
