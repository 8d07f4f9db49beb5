// The ledger keeps a run's preemption and checkpoint figures, and a ledger written before they existed gains
// their columns when opened (its old runs read them as unknown).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "store/store.h"
#include "support/support.h"

namespace gm {
namespace {

TEST(LedgerPreemptionTest, PreemptionAndCheckpointFieldsRoundTrip) {
  test::TempDir dir;
  const std::string path = dir.path() + "/ledger.db";
  auto ledger = store::Ledger::open(path);
  ASSERT_TRUE(ledger) << ledger.error().message;
  store::RunRecord r;
  r.command = "train";
  auto id = (*ledger)->begin_run(r);
  ASSERT_TRUE(id);
  r.id = *id;
  r.status = store::RunStatus::preempted;
  r.preemption_provider = "azure";
  r.preemption_notice_unix_ms = 1'700'000'000'000;
  r.preemption_deadline_unix_ms = 1'700'000'030'000;
  r.last_checkpoint_ms = 12'345;
  r.lost_work_micros = 678;
  ASSERT_TRUE((*ledger)->update_run(r));
  auto back = (*ledger)->run(*id);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->status, store::RunStatus::preempted);
  EXPECT_EQ(*back->preemption_provider, "azure");
  EXPECT_EQ(*back->preemption_deadline_unix_ms, 1'700'000'030'000);
  EXPECT_EQ(*back->last_checkpoint_ms, 12'345);
  EXPECT_EQ(*back->lost_work_micros, 678);
}

TEST(LedgerPreemptionTest, AnOlderLedgerGainsTheColumns) {
  test::TempDir dir;
  const std::string path = dir.path() + "/old.db";
  {
    auto ledger = store::Ledger::open(path);
    ASSERT_TRUE(ledger);
    store::RunRecord r;
    r.command = "old run";
    ASSERT_TRUE((*ledger)->begin_run(r));
  }
  // Make it a ledger of the previous version: the runs table without the new columns.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  for (const char* c : {"preempt_provider", "preempt_notice_unix_ms", "preempt_deadline_unix_ms",
                        "last_checkpoint_ms", "lost_work_micros"}) {
    const std::string sql = std::string("ALTER TABLE runs DROP COLUMN ") + c;
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  }
  sqlite3_close(db);
  auto ledger = store::Ledger::open(path);
  ASSERT_TRUE(ledger) << ledger.error().message;
  auto old = (*ledger)->last_run();
  ASSERT_TRUE(old) << old.error().message;
  EXPECT_EQ(old->command, "old run");
  EXPECT_FALSE(old->preemption_provider);
  EXPECT_FALSE(old->lost_work_micros);
  store::RunRecord r;
  r.command = "new run";
  r.lost_work_micros = 5;
  auto id = (*ledger)->begin_run(r);
  ASSERT_TRUE(id) << id.error().message;
  EXPECT_EQ(*(*ledger)->run(*id)->lost_work_micros, 5);
}

}  // namespace
}  // namespace gm
