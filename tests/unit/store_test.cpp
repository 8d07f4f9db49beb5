#include "store/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "store/detail.h"
#include "support/support.h"

namespace gm {
namespace {

store::RunRecord sample_run() {
  store::RunRecord r;
  r.command = "python train.py --lr 1e-4";
  r.user = "alice";
  r.host = "box1";
  r.labels = {{"team", "nlp"}, {"exp", "42"}};
  r.start_unix_ms = 1'700'000'000'000;
  r.price_micros_per_gpu_hour = 3'600'000'000;
  r.price_source = "--price";
  r.provider = "aws";
  r.billing_granularity_s = 1;
  r.billing_minimum_s = 60;
  r.gpus_allocated = {"GPU-a", "GPU-b"};
  r.gpu_model = "H100 SXM 80GB";
  r.budget_micros = 40 * util::kMicrosPerUsd;
  r.total_steps = 1000;
  return r;
}

TEST(StoreTest, StringListsAndMapsReadAsTheJsonParserReadsThem) {
  // The fast path (plain ASCII without escapes) and the parser's fallback give what nlohmann gives, for what
  // the ledger writes and for text it never writes.
  const std::vector<std::string> lists = {"[]",
                                          "[\"GPU-a\"]",
                                          "[\"GPU-a\",\"GPU-b\"]",
                                          "[\"\"]",
                                          "[\"a\\\"b\"]",
                                          "[\"é\"]",
                                          "[\"a\\u0041\"]",
                                          "[ \"a\" ]",
                                          "[\"a\",]",
                                          "[\"a\"",
                                          "",
                                          "null",
                                          "{}",
                                          "[1,2]",
                                          "[\"a\",\"b\"] ",
                                          "[\"tab\\t\"]",
                                          "[\"a\"]x",
                                          "[\"a\" , \"b\"]",
                                          "[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\"]"};
  for (const auto& text : lists) {
    auto j = nlohmann::json::parse(text, nullptr, false);
    std::vector<std::string> want;
    if (!j.is_discarded()) {
      try {
        want = j.get<std::vector<std::string>>();
      } catch (const nlohmann::json::exception&) {
      }
    }
    EXPECT_EQ(store::detail::parse_string_list(text), want) << text;
    EXPECT_EQ(store::detail::count_string_list(text), want.size()) << text;
  }
  const std::vector<std::string> maps = {"{}",
                                         "{\"team\":\"nlp\"}",
                                         "{\"a\":\"1\",\"b\":\"2\"}",
                                         "{\"a\":\"1\",\"a\":\"2\"}",
                                         "{\"k\":\"v\\\\\"}",
                                         "{\"ü\":\"x\"}",
                                         "{ \"a\":\"1\"}",
                                         "{\"a\":1}",
                                         "{\"a\"}",
                                         "{\"a\":\"1\",}",
                                         "[]",
                                         "",
                                         "{\"a\":\"1\"}}"};
  for (const auto& text : maps) {
    auto j = nlohmann::json::parse(text, nullptr, false);
    std::map<std::string, std::string> want;
    if (!j.is_discarded()) {
      try {
        want = j.get<std::map<std::string, std::string>>();
      } catch (const nlohmann::json::exception&) {
      }
    }
    EXPECT_EQ(store::detail::parse_string_map(text), want) << text;
  }
}

TEST(StoreTest, RoundTripsRunsSamplesProgressActions) {
  test::TempDir dir;
  const std::string path = dir.path() + "/sub/ledger.db";
  auto ledger = store::Ledger::open(path);
  ASSERT_TRUE(ledger.ok()) << ledger.error().message;
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto id = (*ledger)->begin_run(sample_run());
  ASSERT_TRUE(id.ok()) << id.error().message;
  auto r = (*ledger)->run(*id);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, store::RunStatus::running);  // this process is alive
  EXPECT_EQ(r->command, "python train.py --lr 1e-4");
  EXPECT_EQ(r->labels.at("team"), "nlp");
  EXPECT_EQ(r->gpus_allocated, (std::vector<std::string>{"GPU-a", "GPU-b"}));
  EXPECT_EQ(r->meter_pid, getpid());
  EXPECT_FALSE(r->end_unix_ms.has_value());
  EXPECT_EQ(*r->budget_micros, 40 * util::kMicrosPerUsd);

  store::SampleRecord s;
  s.run_id = *id;
  s.t_ms = 1000;
  s.gpu_index = 1;
  s.gpu_uuid = "GPU-b";
  s.utilization_pct = 97;
  s.memory_used_bytes = 61'000ull << 20;
  s.power_w = std::nullopt;
  s.energy_j = 650;
  s.cost_micros = 1'000'000;
  s.job_present = true;
  store::ProgressRecord p;
  p.run_id = *id;
  p.t_ms = 1500;
  p.step = 10;
  p.total_steps = 1000;
  p.tokens = 5000;
  p.metrics = {{"loss", 2.5}};
  p.cost_micros = 1'500'000;
  store::ActionRecord a{*id, 2000, store::ActionKind::warn, 2'000'000, "80% of budget"};
  ASSERT_TRUE((*ledger)->append({s}, {p}, {a}).ok());

  store::RunRecord done = *r;
  done.status = store::RunStatus::finished;
  done.end_unix_ms = r->start_unix_ms + 5000;
  done.exit_code = 0;
  done.cost_micros = 5'000'000;
  done.billed_s = 5;
  done.gpus_used = {"GPU-b"};
  ASSERT_TRUE((*ledger)->update_run(done).ok());

  auto back = (*ledger)->run(*id);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->status, store::RunStatus::finished);
  EXPECT_EQ(back->cost_micros, 5'000'000);
  EXPECT_EQ(*back->exit_code, 0);
  EXPECT_EQ(back->gpus_used, (std::vector<std::string>{"GPU-b"}));

  auto ss = (*ledger)->samples(*id);
  ASSERT_TRUE(ss.ok());
  ASSERT_EQ(ss->size(), 1u);
  EXPECT_EQ(ss->at(0).memory_used_bytes, 61'000ull << 20);
  EXPECT_FALSE(ss->at(0).power_w.has_value());
  EXPECT_TRUE(ss->at(0).job_present);
  auto ps = (*ledger)->progress(*id);
  ASSERT_TRUE(ps.ok());
  ASSERT_EQ(ps->size(), 1u);
  EXPECT_EQ(*ps->at(0).step, 10);
  EXPECT_FALSE(ps->at(0).samples.has_value());
  EXPECT_DOUBLE_EQ(ps->at(0).metrics.at("loss"), 2.5);
  auto as = (*ledger)->actions(*id);
  ASSERT_TRUE(as.ok());
  ASSERT_EQ(as->size(), 1u);
  EXPECT_EQ(as->at(0).kind, store::ActionKind::warn);
  EXPECT_EQ(as->at(0).message, "80% of budget");
}

TEST(StoreTest, ListsNewestFirstAndFilters) {
  test::TempDir dir;
  auto ledger = store::Ledger::open(dir.path() + "/l.db");
  ASSERT_TRUE(ledger.ok());
  EXPECT_EQ((*ledger)->last_run().error().kind, ErrorKind::not_found);
  for (int i = 0; i < 3; ++i) {
    store::RunRecord r = sample_run();
    r.start_unix_ms += i * 60'000;
    r.command = "job" + std::to_string(i);
    ASSERT_TRUE((*ledger)->begin_run(r).ok());
  }
  auto all = (*ledger)->runs();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ(all->front().command, "job2");
  EXPECT_EQ((*ledger)->last_run()->command, "job2");
  store::RunFilter f;
  f.since_unix_ms = sample_run().start_unix_ms + 60'000;
  EXPECT_EQ((*ledger)->runs(f)->size(), 2u);
  f.limit = 1;
  EXPECT_EQ((*ledger)->runs(f)->size(), 1u);
  EXPECT_EQ((*ledger)->run(999).error().kind, ErrorKind::not_found);
}

TEST(StoreTest, RollupsReplacePerMinute) {
  test::TempDir dir;
  auto ledger = store::Ledger::open(dir.path() + "/l.db");
  ASSERT_TRUE(ledger.ok());
  auto id = (*ledger)->begin_run(sample_run());
  ASSERT_TRUE(id.ok());
  store::RollupRecord r{*id, 28'333'333, 0, 30, 1500, 1e9, 100, 30'000'000};
  ASSERT_TRUE((*ledger)->append_rollups({r}).ok());
  r.samples = 60;
  r.cost_micros = 60'000'000;
  ASSERT_TRUE((*ledger)->append_rollups({r}).ok());
  auto rs = (*ledger)->rollups({});
  ASSERT_TRUE(rs.ok());
  ASSERT_EQ(rs->size(), 1u);
  EXPECT_EQ(rs->at(0).samples, 60);
  EXPECT_EQ(rs->at(0).cost_micros, 60'000'000);
}

TEST(StoreTest, RunOfDeadMeterReadsInterrupted) {
  test::TempDir dir;
  const std::string path = dir.path() + "/l.db";
  // A child opens the ledger, begins a run and dies without finishing it.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto l = store::Ledger::open(path);
    if (!l.ok()) _exit(1);
    auto id = (*l)->begin_run(sample_run());
    _exit(id.ok() ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto ledger = store::Ledger::open(path);
  ASSERT_TRUE(ledger.ok());
  auto r = (*ledger)->last_run();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, store::RunStatus::interrupted);
  EXPECT_EQ(r->meter_pid, pid);
}

TEST(StoreTest, OtherHostUsesHeartbeat) {
  test::TempDir dir;
  auto ledger = store::Ledger::open(dir.path() + "/l.db");
  ASSERT_TRUE(ledger.ok());
  store::RunRecord r = sample_run();
  r.meter_host = "another-host";
  r.meter_pid = 1;
  r.heartbeat_unix_ms = 1000;  // long ago
  auto id = (*ledger)->begin_run(r);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ((*ledger)->run(*id)->status, store::RunStatus::interrupted);
}

TEST(StoreTest, CorruptFileIsUnavailableWithClearMessage) {
  test::TempDir dir;
  const std::string path = dir.write("bad.db", std::string(8192, 'x'));
  auto ledger = store::Ledger::open(path);
  ASSERT_FALSE(ledger.ok());
  EXPECT_EQ(ledger.error().kind, ErrorKind::unavailable);
  EXPECT_NE(ledger.error().message.find(path), std::string::npos);
  EXPECT_NE(ledger.error().message.find("not a gpumeter ledger or corrupt"), std::string::npos)
      << ledger.error().message;
}

TEST(StoreTest, LockedFileIsUnavailable) {
  test::TempDir dir;
  const std::string path = dir.path() + "/l.db";
  { ASSERT_TRUE(store::Ledger::open(path).ok()); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; DELETE FROM meta WHERE 0;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  auto ledger = store::Ledger::open(path);
  ASSERT_FALSE(ledger.ok());
  EXPECT_EQ(ledger.error().kind, ErrorKind::unavailable);
  EXPECT_NE(ledger.error().message.find("locked"), std::string::npos) << ledger.error().message;
  sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(db);
}

TEST(StoreTest, MigratesVersion1BudgetDollarsToMicros) {
  test::TempDir dir;
  const std::string path = dir.path() + "/old.db";
  std::int64_t id = 0;
  {
    auto ledger = store::Ledger::open(path);
    ASSERT_TRUE(ledger.ok()) << ledger.error().message;
    store::RunRecord r = sample_run();
    r.budget_micros = std::nullopt;
    ASSERT_TRUE((*ledger)->begin_run(r).ok());
    id = *(*ledger)->begin_run(sample_run());
  }
  // Turn the file back into a schema-1 ledger: the budget in dollars as REAL.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "ALTER TABLE runs ADD COLUMN budget_usd REAL;"
                         "UPDATE runs SET budget_usd = 12.345678 WHERE budget_micros IS NOT NULL;"
                         "ALTER TABLE runs DROP COLUMN budget_micros;"
                         "UPDATE meta SET value='1' WHERE key='schema_version';",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);

  auto ledger = store::Ledger::open(path);
  ASSERT_TRUE(ledger.ok()) << ledger.error().message;
  auto r = (*ledger)->run(id);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r->budget_micros, 12'345'678);
  EXPECT_FALSE((*ledger)->run(id - 1)->budget_micros.has_value());
  auto next = (*ledger)->begin_run(sample_run());
  ASSERT_TRUE(next.ok()) << next.error().message;
  EXPECT_EQ(*(*ledger)->run(*next)->budget_micros, 40 * util::kMicrosPerUsd);
  ledger->reset();

  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "SELECT (SELECT value FROM meta WHERE key='schema_version'), "
                               "(SELECT count(*) FROM pragma_table_info('runs') WHERE name='budget_usd'), "
                               "(SELECT type FROM pragma_table_info('runs') WHERE name='budget_micros')",
                               -1, &st, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), store::Ledger::kSchemaVersion) << "migrated to the current schema";
  EXPECT_EQ(sqlite3_column_int(st, 1), 0) << "the dollar column is gone";
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 2)), "INTEGER");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST(StoreTest, DefaultPathFollowsEnvironment) {
  const char* old_l = std::getenv("GPUMETER_LEDGER");
  const std::string saved = old_l ? old_l : "";
  setenv("GPUMETER_LEDGER", "/x/y.db", 1);
  EXPECT_EQ(store::Ledger::default_path(), "/x/y.db");
  unsetenv("GPUMETER_LEDGER");
  setenv("XDG_DATA_HOME", "/data", 1);
  EXPECT_EQ(store::Ledger::default_path(), "/data/gpumeter/ledger.db");
  unsetenv("XDG_DATA_HOME");
  if (old_l) setenv("GPUMETER_LEDGER", saved.c_str(), 1);
}

}  // namespace
}  // namespace gm
