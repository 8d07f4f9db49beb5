// The ledger suite, run against both back ends: SQLite and a real PostgreSQL 15 server started by the tests
// (tests/support/postgres_server.h; never a mock).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include "store/store.h"
#include "support/postgres_server.h"
#include "support/support.h"

namespace gm {
namespace {

struct SqliteBackend {
  test::TempDir dir;
  std::string location() const { return dir.path() + "/ledger.db"; }
  /// Runs SQL directly on the ledger (test set-up: an older schema).
  void sql(const std::string& text) const {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(location().c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, text.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  static constexpr const char* kName = "Sqlite";
};

struct PostgresBackend {
  std::string db;
  PostgresBackend() {
    auto& server = test::PostgresServer::shared();
    if (server.ok()) db = server.create_database();
  }
  std::string location() const { return test::PostgresServer::shared().uri(db); }
  void sql(const std::string& text) const {
    const std::string err = test::PostgresServer::shared().exec(db, text);
    ASSERT_EQ(err, "");
  }
  static constexpr const char* kName = "Postgres";
};

template <class B>
class LedgerBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if constexpr (std::is_same_v<B, PostgresBackend>) {
      ASSERT_TRUE(test::PostgresServer::shared().ok()) << test::PostgresServer::shared().error();
      ASSERT_FALSE(backend.db.empty()) << "CREATE DATABASE failed";
    }
    auto l = store::Ledger::open(backend.location());
    ASSERT_TRUE(l.ok()) << l.error().message;
    ledger = std::move(*l);
  }
  B backend;
  std::unique_ptr<store::Ledger> ledger;
};

struct BackendNames {
  template <class T>
  static std::string GetName(int) {
    return T::kName;
  }
};
using Backends = ::testing::Types<SqliteBackend, PostgresBackend>;
TYPED_TEST_SUITE(LedgerBackendTest, Backends, BackendNames);

store::RunRecord sample_run() {
  store::RunRecord r;
  r.command = "python train.py --lr 1e-4 'quoted' \"x\"";
  r.user = "alice";
  r.host = "box1";
  r.labels = {{"team", "nlp"}, {"exp", "42"}};
  r.start_unix_ms = 1'700'000'000'000;
  r.price_micros_per_gpu_hour = 3'600'000'000;
  r.price_source = "--price";
  r.provider = "aws";
  r.region = "us-east-1";
  r.billing_granularity_s = 1;
  r.billing_minimum_s = 60;
  r.gpus_allocated = {"GPU-a", "GPU-b"};
  r.gpu_model = "H100 SXM 80GB";
  r.budget_micros = 40'000'000;  // $40
  r.total_steps = 1000;
  r.energy_j = 0.1 + 0.2;  // a double that needs 17 digits
  r.co2_kg = 1.0 / 3.0;
  return r;
}

TYPED_TEST(LedgerBackendTest, RoundTripsEveryRecordExactly) {
  store::Ledger& l = *this->ledger;
  auto id = l.begin_run(sample_run());
  ASSERT_TRUE(id.ok()) << id.error().message;
  auto r = l.run(*id);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->status, store::RunStatus::running);  // this process is alive
  EXPECT_EQ(r->command, sample_run().command);
  EXPECT_EQ(r->labels, sample_run().labels);
  EXPECT_EQ(r->gpus_allocated, (std::vector<std::string>{"GPU-a", "GPU-b"}));
  EXPECT_EQ(r->meter_pid, getpid());
  EXPECT_FALSE(r->end_unix_ms.has_value());
  EXPECT_FALSE(r->exit_code.has_value());
  EXPECT_EQ(*r->budget_micros, 40'000'000);
  EXPECT_EQ(r->energy_j, 0.1 + 0.2);
  EXPECT_EQ(*r->co2_kg, 1.0 / 3.0);
  EXPECT_EQ(r->price_micros_per_gpu_hour, 3'600'000'000);

  store::SampleRecord s;
  s.run_id = *id;
  s.t_ms = 1000;
  s.gpu_index = 1;
  s.gpu_uuid = "GPU-b";
  s.utilization_pct = 97.25;
  s.memory_used_bytes = 61'000ull << 20;
  s.energy_j = 650.125;
  s.cost_micros = 1'000'001;
  s.job_present = true;
  store::ProgressRecord p{*id, 1500, 10, 1000, std::nullopt, 5000, {{"loss", 2.5}}, 1'500'000};
  store::ActionRecord a{*id, 2000, store::ActionKind::warn, 2'000'000, "80% of budget, 'quoted'"};
  ASSERT_TRUE(l.append({s}, {p}, {a}).ok());
  store::InferenceRecord inf{*id, 3000, "llama", "vllm", 10.0, 20.0, std::nullopt, 3.0, 2'500'000};
  ASSERT_TRUE(l.append_inference({inf}).ok());
  ASSERT_TRUE(l.append_cells({store::CellRecord{*id, 7, 100, 900, 12'345, std::nullopt, store::CellStatus::ok,
                                                "model.fit(x)"}})
                  .ok());
  store::RollupRecord ru{*id, 28'333'333, 1, 60, 5820.5, 6.4e10, 39000.0, 60'000'060};
  ASSERT_TRUE(l.append_rollups({ru}).ok());

  store::RunRecord done = *r;
  done.status = store::RunStatus::succeeded;
  done.end_unix_ms = r->start_unix_ms + 5000;
  done.exit_code = 0;
  done.cost_micros = 5'000'000;
  done.billed_s = 60;
  done.gpus_used = {"GPU-b"};
  done.stopped_by = std::nullopt;
  ASSERT_TRUE(l.update_run(done).ok());

  auto back = l.run(*id);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->status, store::RunStatus::succeeded);
  EXPECT_EQ(back->cost_micros, 5'000'000);
  EXPECT_EQ(*back->exit_code, 0);
  EXPECT_EQ(back->gpus_used, (std::vector<std::string>{"GPU-b"}));
  auto ss = l.samples(*id);
  ASSERT_TRUE(ss.ok());
  ASSERT_EQ(ss->size(), 1u);
  EXPECT_EQ(ss->at(0).memory_used_bytes, 61'000ull << 20);
  EXPECT_FALSE(ss->at(0).power_w.has_value());
  EXPECT_EQ(*ss->at(0).utilization_pct, 97.25);
  EXPECT_TRUE(ss->at(0).job_present);
  EXPECT_EQ(ss->at(0).cost_micros, 1'000'001);
  auto ps = l.progress(*id);
  ASSERT_EQ(ps->size(), 1u);
  EXPECT_EQ(*ps->at(0).step, 10);
  EXPECT_FALSE(ps->at(0).samples.has_value());
  EXPECT_EQ(ps->at(0).metrics.at("loss"), 2.5);
  auto as = l.actions(*id);
  ASSERT_EQ(as->size(), 1u);
  EXPECT_EQ(as->at(0).message, "80% of budget, 'quoted'");
  auto is = l.inference(*id);
  ASSERT_EQ(is->size(), 1u);
  EXPECT_EQ(*is->at(0).generated_tokens, 20.0);
  EXPECT_FALSE(is->at(0).cached_tokens.has_value());
  auto cs = l.cells(*id);
  ASSERT_EQ(cs->size(), 1u);
  EXPECT_EQ(cs->at(0).cell_id, 7);
  EXPECT_EQ(cs->at(0).source, "model.fit(x)");
  EXPECT_FALSE(cs->at(0).utilization_pct.has_value());
  auto rs = l.rollups(store::RunFilter{});
  ASSERT_EQ(rs->size(), 1u);
  EXPECT_EQ(rs->at(0).cost_micros, 60'000'060);
  EXPECT_EQ(rs->at(0).utilization_sum_pct, 5820.5);
}

TYPED_TEST(LedgerBackendTest, ListsNewestFirstFiltersAndReplacesRollups) {
  store::Ledger& l = *this->ledger;
  EXPECT_EQ(l.last_run().error().kind, ErrorKind::not_found);
  std::int64_t first = 0;
  for (int i = 0; i < 3; ++i) {
    store::RunRecord r = sample_run();
    r.start_unix_ms += i * 60'000;
    r.command = "job" + std::to_string(i);
    auto id = l.begin_run(r);
    ASSERT_TRUE(id.ok());
    if (i == 0) first = *id;
  }
  auto all = l.runs();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ(all->front().command, "job2");
  EXPECT_EQ(l.last_run()->command, "job2");
  store::RunFilter f;
  f.since_unix_ms = sample_run().start_unix_ms + 60'000;
  EXPECT_EQ(l.runs(f)->size(), 2u);
  f.limit = 1;
  EXPECT_EQ(l.runs(f)->size(), 1u);
  EXPECT_EQ(l.run(999'999).error().kind, ErrorKind::not_found);
  store::RunRecord missing = sample_run();
  missing.id = 999'999;
  EXPECT_EQ(l.update_run(missing).error().kind, ErrorKind::not_found);

  ASSERT_TRUE(l.append_rollups({store::RollupRecord{first, 100, 0, 30, 10, 1, 1, 500}}).ok());
  ASSERT_TRUE(l.append_rollups({store::RollupRecord{first, 100, 0, 60, 20, 2, 2, 1000},
                                store::RollupRecord{first, 101, 0, 5, 1, 1, 1, 7}})
                  .ok());
  auto rs = l.rollups(store::RunFilter{});
  ASSERT_EQ(rs->size(), 2u);
  EXPECT_EQ(rs->at(0).samples, 60);
  EXPECT_EQ(rs->at(0).cost_micros, 1000);
  store::RunFilter since;
  since.since_unix_ms = 101 * 60'000;
  EXPECT_EQ(l.rollups(since)->size(), 1u);
  // Summed per run and hour in the database, as the default implementation sums them.
  auto hours = l.rollup_buckets(store::RunFilter{}, 3'600'000);
  ASSERT_TRUE(hours.ok()) << hours.error().message;
  ASSERT_EQ(hours->size(), 1u);
  EXPECT_EQ(hours->at(0).run_id, first);
  EXPECT_EQ(hours->at(0).start_unix_ms, 3'600'000);
  EXPECT_EQ(hours->at(0).samples, 65);
  EXPECT_EQ(hours->at(0).cost_micros, 1007);
  EXPECT_EQ(hours->at(0).utilization_sum_pct, 21.0);
  auto by_default = l.Ledger::rollup_buckets(store::RunFilter{}, 3'600'000);
  ASSERT_EQ(by_default->size(), 1u);
  EXPECT_EQ(by_default->at(0).cost_micros, 1007);
  EXPECT_EQ(l.rollup_buckets(since, 3'600'000)->at(0).samples, 5);
}

TYPED_TEST(LedgerBackendTest, ImportIsIdempotentPerKey) {
  store::Ledger& l = *this->ledger;
  store::RunBundle b;
  b.run = sample_run();
  b.run.status = store::RunStatus::succeeded;
  b.run.cost_micros = 123'456;
  b.samples.push_back(
      store::SampleRecord{77, 1000, 0, "GPU-a", 50.0, std::nullopt, 300.0, 60.0, 300.0, 123'456, true, {}});
  b.actions.push_back(store::ActionRecord{77, 1000, store::ActionKind::warn, 1, "m"});
  b.cells.push_back(store::CellRecord{77, 1, 0, 500, 9, 50.0, store::CellStatus::ok, "x = 1"});
  b.rollups.push_back(store::RollupRecord{77, 28'333'333, 0, 1, 50, 0, 300, 123'456});
  auto first = l.import_run(b, "spool:abc#1", 0);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_TRUE(first->imported);
  auto again = l.import_run(b, "spool:abc#1", 0);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->imported);
  EXPECT_EQ(again->run_id, first->run_id);
  EXPECT_EQ(l.runs()->size(), 1u);
  auto ss = l.samples(first->run_id);
  ASSERT_EQ(ss->size(), 1u);
  EXPECT_EQ(ss->at(0).run_id, first->run_id);
  ASSERT_EQ(l.cells(first->run_id)->size(), 1u);
  EXPECT_EQ(l.cells(first->run_id)->at(0).run_id, first->run_id);

  // Into a run begun before the ledger went away: its row is updated, the spooled rows appended.
  auto begun = l.begin_run(sample_run());
  ASSERT_TRUE(begun.ok());
  ASSERT_TRUE(l.append({store::SampleRecord{
                           *begun, 1000, 0, "GPU-a", 1.0, std::nullopt, 1.0, 1.0, 1.0, 10, true, {}}},
                       {}, {})
                  .ok());
  store::RunBundle rest;
  rest.run = sample_run();
  rest.run.status = store::RunStatus::succeeded;
  rest.run.cost_micros = 30;
  rest.samples.push_back(
      store::SampleRecord{1, 2000, 0, "GPU-a", 1.0, std::nullopt, 1.0, 1.0, 1.0, 20, true, {}});
  auto into = l.import_run(rest, "spool:def#1", *begun);
  ASSERT_TRUE(into.ok()) << into.error().message;
  EXPECT_EQ(into->run_id, *begun);
  EXPECT_EQ(l.run(*begun)->status, store::RunStatus::succeeded);
  EXPECT_EQ(l.run(*begun)->cost_micros, 30);
  EXPECT_EQ(l.samples(*begun)->size(), 2u);
  EXPECT_EQ(l.runs()->size(), 2u);
}

TYPED_TEST(LedgerBackendTest, BudgetsSetReplaceListRemove) {
  store::Ledger& l = *this->ledger;
  EXPECT_TRUE(l.budgets()->empty());
  ASSERT_TRUE(l.set_budget(store::BudgetRecord{"team=nlp", 10'000'000, store::BudgetPeriod::day, 0}).ok());
  ASSERT_TRUE(l.set_budget(store::BudgetRecord{"project=x", 5'000'000, store::BudgetPeriod::month, 0}).ok());
  ASSERT_TRUE(l.set_budget(store::BudgetRecord{"team=nlp", 20'000'000, store::BudgetPeriod::week, 0}).ok());
  auto all = l.budgets();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ(all->at(0).selector, "project=x");
  EXPECT_EQ(all->at(1).selector, "team=nlp");
  EXPECT_EQ(all->at(1).limit_micros, 20'000'000);
  EXPECT_EQ(all->at(1).period, store::BudgetPeriod::week);
  EXPECT_GT(all->at(1).updated_unix_ms, 0);
  ASSERT_TRUE(l.remove_budget("project=x").ok());
  EXPECT_EQ(l.remove_budget("project=x").error().kind, ErrorKind::not_found);
  EXPECT_EQ(l.budgets()->size(), 1u);
}

TYPED_TEST(LedgerBackendTest, SelectorSpendCountsMatchingRunsSinceThePeriodStart) {
  store::Ledger& l = *this->ledger;
  const std::int64_t since = 1'700'000'000'000;
  auto add = [&](std::map<std::string, std::string> labels, const std::string& user, const std::string& host,
                 std::int64_t start, MicroUsd cost, bool live) {
    store::RunRecord r = sample_run();
    r.labels = std::move(labels);
    r.user = user;
    r.host = host;
    r.start_unix_ms = start;
    if (!live) r.status = store::RunStatus::succeeded;
    auto id = l.begin_run(r);
    EXPECT_TRUE(id.ok());
    r.id = *id;
    r.cost_micros = cost;
    EXPECT_TRUE(l.update_run(r).ok());
    return *id;
  };
  const auto a = add({{"team", "nlp"}}, "alice", "h1", since, 1'000'000, true);
  add({{"team", "nlp"}}, "bob", "h2", since + 5, 2'000'000, false);
  add({{"team", "cv"}}, "alice", "h1", since + 5, 4'000'000, false);
  add({{"team", "nlp"}}, "bob", "h2", since - 1, 8'000'000, false);  // before the period
  add({{"team", "nlp'x"}}, "eve", "h3", since, 16'000'000, false);

  auto nlp = l.selector_spend("team", "nlp", since, 0);
  ASSERT_TRUE(nlp.ok()) << nlp.error().message;
  EXPECT_EQ(nlp->spent_micros, 3'000'000);
  EXPECT_EQ(nlp->runs, 2);
  EXPECT_EQ(nlp->live_runs, 1);
  auto others = l.selector_spend("team", "nlp", since, a);
  EXPECT_EQ(others->spent_micros, 2'000'000);
  EXPECT_EQ(others->live_runs, 0);
  EXPECT_EQ(l.selector_spend("user", "alice", since, 0)->spent_micros, 5'000'000);
  EXPECT_EQ(l.selector_spend("host", "h2", since, 0)->spent_micros, 2'000'000);
  EXPECT_EQ(l.selector_spend("team", "nlp'x", since, 0)->spent_micros, 16'000'000);
  EXPECT_EQ(l.selector_spend("project", "x", since, 0)->runs, 0);
}

TYPED_TEST(LedgerBackendTest, SummariesAreTheRunsSummarizedInTheirOrder) {
  store::Ledger& l = *this->ledger;
  const auto add = [&](store::RunRecord r) {
    auto id = l.begin_run(r);
    EXPECT_TRUE(id.ok()) << id.error().message;
    r.id = *id;
    if (r.status != store::RunStatus::running) {
      EXPECT_TRUE(l.update_run(r).ok());
    }
    return *id;
  };
  store::RunRecord plain = sample_run();
  plain.status = store::RunStatus::succeeded;
  plain.exit_code = 0;
  plain.cost_micros = 7'000'000;
  plain.idle_cost_micros = 1'000'000;
  plain.unused_gpu_cost_micros = 500'000;
  plain.wall_ms = 61'000;
  plain.billed_s = 61;
  add(plain);
  // GPU lists and labels the fast path leaves to the JSON parser: escapes, non-ASCII, an empty list.
  store::RunRecord odd = plain;
  odd.start_unix_ms += 60'000;
  odd.gpus_allocated = {"GPU-\"quoted\"", "GPU-é", "GPU-back\\slash", "GPU-tab\t"};
  odd.labels = {{"team", "n\"l\\p"}, {"ünï", "cødé"}, {"empty", ""}};
  odd.status = store::RunStatus::stopped;
  odd.stopped_by = "budget";
  odd.exit_code = 143;
  odd.co2_kg = std::nullopt;
  add(odd);
  store::RunRecord none = plain;
  none.start_unix_ms += 120'000;
  none.gpus_allocated.clear();
  none.labels.clear();
  add(none);
  // A run whose meter died on another machine: interrupted, with its committed samples counted.
  store::RunRecord dead = sample_run();
  dead.start_unix_ms += 180'000;
  dead.meter_host = "elsewhere";
  dead.meter_pid = 42;
  dead.heartbeat_unix_ms = 1;
  const auto dead_id = add(dead);
  store::SampleRecord s;
  s.run_id = dead_id;
  s.t_ms = 30'000;
  s.gpu_uuid = "GPU-a";
  s.energy_j = 9.5;
  s.cost_micros = 2'500'000;
  ASSERT_TRUE(l.append({s}, {}, {}).ok());
  // And one still running here (this process).
  store::RunRecord live = sample_run();
  live.start_unix_ms += 240'000;
  add(live);

  for (store::RunFilter f :
       {store::RunFilter{}, store::RunFilter{sample_run().start_unix_ms + 60'000, std::nullopt, std::nullopt},
        store::RunFilter{std::nullopt, sample_run().start_unix_ms + 180'000, std::nullopt},
        store::RunFilter{std::nullopt, std::nullopt, 2}}) {
    auto runs = l.runs(f);
    auto summaries = l.run_summaries(f);
    ASSERT_TRUE(runs.ok() && summaries.ok());
    std::vector<store::RunSummary> expected;
    for (const auto& r : *runs) expected.push_back(store::summarize(r));
    EXPECT_EQ(*summaries, expected);
    EXPECT_EQ(*summaries, *l.Ledger::run_summaries(f));
  }
  auto all = l.run_summaries(store::RunFilter{});
  ASSERT_EQ(all->size(), 5u);
  EXPECT_EQ(all->at(0).status, store::RunStatus::running);
  EXPECT_EQ(all->at(1).status, store::RunStatus::interrupted);
  EXPECT_EQ(all->at(1).cost_micros, 2'500'000);
  EXPECT_EQ(all->at(1).wall_ms, 30'000);
  EXPECT_EQ(all->at(2).gpus_allocated, 0u);
  EXPECT_EQ(all->at(3).gpus_allocated, 4u);
  EXPECT_EQ(all->at(3).labels.at("team"), "n\"l\\p");
  EXPECT_EQ(all->at(3).labels.at("ünï"), "cødé");
  EXPECT_EQ(all->at(4).gpus_allocated, 2u);
  EXPECT_EQ(l.runs(store::RunFilter{})->at(3).gpus_allocated, odd.gpus_allocated);
}

/// Every field of a bucket, for comparing lists of them.
std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t, double, double, MicroUsd>> fields(
    const std::vector<store::RollupBucket>& buckets) {
  std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t, double, double, MicroUsd>> out;
  for (const auto& b : buckets)
    out.emplace_back(b.run_id, b.start_unix_ms, b.samples, b.utilization_sum_pct, b.energy_j, b.cost_micros);
  return out;
}

TYPED_TEST(LedgerBackendTest, RollupBucketsAreTheDefaultSumsInBucketThenRunOrder) {
  store::Ledger& l = *this->ledger;
  std::vector<store::RollupRecord> rows;
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 3; ++i) {
    store::RunRecord r = sample_run();
    r.start_unix_ms = 1'700'000'000'000 + i * 1'800'000;
    ids.push_back(*l.begin_run(r));
  }
  // Three runs over 2.5 hours, two GPUs each: minutes on both sides of hour and day boundaries.
  const std::int64_t minute0 = 1'700'000'000'000 / 60'000;
  for (int i = 0; i < 3; ++i)
    for (std::int64_t m = minute0 + i * 30; m < minute0 + i * 30 + 90; m += 7)
      for (unsigned g = 0; g < 2; ++g)
        rows.push_back(store::RollupRecord{ids[static_cast<std::size_t>(i)], m, g, 60,
                                           50.0 * static_cast<double>(g + 1), 1e9, 100.5, 1'000 + i});
  ASSERT_TRUE(l.append_rollups(rows).ok());
  for (std::int64_t bucket_ms : {std::int64_t{60'000}, std::int64_t{3'600'000}, std::int64_t{86'400'000}})
    for (store::RunFilter f :
         {store::RunFilter{},
          store::RunFilter{(minute0 + 40) * 60'000, (minute0 + 100) * 60'000, std::nullopt}}) {
      auto got = l.rollup_buckets(f, bucket_ms);
      auto want = l.Ledger::rollup_buckets(f, bucket_ms);
      ASSERT_TRUE(got.ok() && want.ok());
      EXPECT_FALSE(got->empty());
      EXPECT_EQ(fields(*got), fields(*want)) << "bucket " << bucket_ms;
    }
}

TYPED_TEST(LedgerBackendTest, MigratesAnOlderSchemaOnOpen) {
  auto id = this->ledger->begin_run(sample_run());
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*this->ledger->schema_version(), store::Ledger::kSchemaVersion);
  this->ledger.reset();
  // A version-1 ledger: no budgets, no imports.
  this->backend.sql("DROP TABLE budgets; DROP TABLE imports; UPDATE meta SET value='1' WHERE key='schema_version';");
  auto again = store::Ledger::open(this->backend.location());
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(*(*again)->schema_version(), store::Ledger::kSchemaVersion);
  EXPECT_EQ((*again)->run(*id)->command, sample_run().command);
  EXPECT_TRUE((*again)->set_budget(store::BudgetRecord{"team=nlp", 1, store::BudgetPeriod::day, 0}).ok());
  // A newer ledger than this gpumeter is refused, not damaged.
  (*again).reset();
  this->backend.sql("UPDATE meta SET value='99' WHERE key='schema_version';");
  auto newer = store::Ledger::open(this->backend.location());
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.error().message.find("newer"), std::string::npos) << newer.error().message;
}

TYPED_TEST(LedgerBackendTest, CopyFromSqliteLosesNothingAndIsIdempotent) {
  test::TempDir dir;
  auto src = store::Ledger::open("sqlite:" + dir.path() + "/old.db");
  ASSERT_TRUE(src.ok());
  for (int i = 0; i < 3; ++i) {
    store::RunRecord r = sample_run();
    r.start_unix_ms += i * 1000;
    r.command = "job" + std::to_string(i);
    auto id = (*src)->begin_run(r);
    ASSERT_TRUE(id.ok());
    r.id = *id;
    r.status = store::RunStatus::succeeded;
    r.cost_micros = 1'000'003 * (i + 1);
    ASSERT_TRUE((*src)->update_run(r).ok());
    ASSERT_TRUE((*src)
                    ->append({store::SampleRecord{
                                 *id, 1000, 0, "GPU-a", 50.5, 1ull << 40, 300.0, 60.0, 300.0, 17, true, {}}},
                             {store::ProgressRecord{*id, 900, 5, 10, 1, 2, {{"acc", 0.25}}, 3}},
                             {store::ActionRecord{*id, 950, store::ActionKind::warn, 4, "w"}})
                    .ok());
    ASSERT_TRUE(
        (*src)->append_rollups({store::RollupRecord{*id, 28'333'333 + i, 0, 60, 3030, 1e9, 18000, 17}}).ok());
  }
  ASSERT_TRUE(
      (*src)->set_budget(store::BudgetRecord{"team=nlp", 9'000'000, store::BudgetPeriod::month, 1}).ok());
  auto copied = store::copy_ledger(**src, *this->ledger);
  ASSERT_TRUE(copied.ok()) << copied.error().message;
  EXPECT_EQ(*copied, 3u);
  EXPECT_EQ(*store::copy_ledger(**src, *this->ledger), 0u);  // a second copy adds nothing

  auto from = (*src)->runs();
  auto to = this->ledger->runs();
  ASSERT_EQ(to->size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const store::RunRecord& a = from->at(i);
    const store::RunRecord& b = to->at(i);
    EXPECT_EQ(a.command, b.command);
    EXPECT_EQ(a.cost_micros, b.cost_micros);
    EXPECT_EQ(a.labels, b.labels);
    EXPECT_EQ(a.energy_j, b.energy_j);
    EXPECT_EQ(*a.co2_kg, *b.co2_kg);
    EXPECT_EQ(a.start_unix_ms, b.start_unix_ms);
    auto sa = (*src)->samples(a.id);
    auto sb = this->ledger->samples(b.id);
    ASSERT_EQ(sb->size(), 1u);
    EXPECT_EQ(sa->at(0).memory_used_bytes, sb->at(0).memory_used_bytes);
    EXPECT_EQ(sa->at(0).utilization_pct, sb->at(0).utilization_pct);
    EXPECT_EQ(this->ledger->progress(b.id)->at(0).metrics.at("acc"), 0.25);
    EXPECT_EQ(this->ledger->actions(b.id)->size(), 1u);
  }
  EXPECT_EQ(this->ledger->rollups(store::RunFilter{})->size(), 3u);
  ASSERT_EQ(this->ledger->budgets()->size(), 1u);
  EXPECT_EQ(this->ledger->budgets()->at(0).limit_micros, 9'000'000);
}

TEST(LedgerLocationTest, RedactsPasswordsAndTellsBackEnds) {
  EXPECT_EQ(store::redact_location("postgresql://alice:s3cret@db.example:5432/gm"),
            "postgresql://alice:***@db.example:5432/gm");
  EXPECT_EQ(store::redact_location("postgresql://alice@db/gm?sslmode=require&password=s3cret"),
            "postgresql://alice@db/gm?sslmode=require&password=***");
  EXPECT_EQ(store::redact_location("host=db dbname=gm password='a b' user=x"),
            "host=db dbname=gm password=*** user=x");
  EXPECT_EQ(store::redact_location("/var/lib/gm/ledger.db"), "/var/lib/gm/ledger.db");
  EXPECT_TRUE(store::is_postgres_location("postgresql://alice@db/gm"));
  EXPECT_TRUE(store::is_postgres_location("postgres://alice@db/gm"));
  EXPECT_TRUE(store::is_postgres_location("host=db dbname=gm"));
  EXPECT_FALSE(store::is_postgres_location("sqlite:/tmp/x.db"));
  EXPECT_FALSE(store::is_postgres_location("/tmp/postgresql.db"));
}

TEST(LedgerLocationTest, BudgetPeriodsAndSelectors) {
  // 2026-11-25 (a Wednesday) 13:45:10 UTC.
  const std::int64_t now = 1'795'614'310'000;
  EXPECT_EQ(store::period_start_unix_ms(store::BudgetPeriod::day, now),
            1'795'564'800'000);  // 2026-11-25 00:00
  EXPECT_EQ(store::period_start_unix_ms(store::BudgetPeriod::week, now),
            1'795'392'000'000);  // Monday 2026-11-23
  EXPECT_EQ(store::period_start_unix_ms(store::BudgetPeriod::month, now), 1'793'491'200'000);  // 2026-11-01
  EXPECT_EQ(util::parse_enum<store::BudgetPeriod>("year", "--per").error().kind, ErrorKind::usage);
  auto kv = store::parse_selector("team=nlp", "SELECTOR");
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ(kv->first, "team");
  EXPECT_EQ(kv->second, "nlp");
  EXPECT_FALSE(store::parse_selector("team", "SELECTOR").ok());
  EXPECT_FALSE(store::parse_selector("=nlp", "SELECTOR").ok());
  EXPECT_FALSE(store::parse_selector("te\"am=nlp", "SELECTOR").ok());
  store::RunRecord r;
  r.user = "alice";
  r.host = "h1";
  r.labels = {{"team", "nlp"}};
  EXPECT_TRUE(store::run_matches(r, "team", "nlp"));
  EXPECT_TRUE(store::run_matches(r, "user", "alice"));
  EXPECT_TRUE(store::run_matches(r, "host", "h1"));
  EXPECT_FALSE(store::run_matches(r, "team", "cv"));
  EXPECT_FALSE(store::run_matches(r, "project", "nlp"));
}

}  // namespace
}  // namespace gm
