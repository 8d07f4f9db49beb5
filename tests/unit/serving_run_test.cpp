// Serving under `gpumeter run` (issue 13): the supervisor's per-model counters (restarts folded in), the live
// status figures, the serving KPIs and saturation of a run, the ledger table (and ledgers without it), and
// the release gate on $ per 1M generated tokens.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include "guard/supervisor.h"
#include "report/gate.h"
#include "report/kpi.h"
#include "report/run_report.h"
#include "store/store.h"
#include "support/fakes.h"
#include "support/support.h"

namespace gm {
namespace {

using serving::InferenceScrape;
using serving::InferenceSource;

InferenceScrape scrape(double start_time, std::map<std::string, double> generated) {
  InferenceScrape s;
  s.endpoint = "http://127.0.0.1:8000/metrics";
  serving::EngineReading r;
  r.engine = serving::InferenceEngine::vllm;
  r.start_time_s = start_time;
  for (const auto& [model, g] : generated)
    r.models[model] = serving::ModelTotals{g * 2, g, std::nullopt, g / 10, std::nullopt};
  s.reading = r;
  return s;
}

guard::SessionConfig served_config(InferenceSource* source) {
  auto c = test::dollar_per_second_session({"serve"});
  c.inference = source;
  return c;
}

class NoSource final : public InferenceSource {
 public:
  std::optional<InferenceScrape> take(const std::set<std::uint32_t>&) override { return std::nullopt; }
};

TEST(ServingRunTest, CountersCountFromZeroAndAnEngineRestartNeitherLosesNorDoubles) {
  util::FakeClock clock;
  test::RecordingRunner runner;
  test::RecordingSink sink;
  NoSource source;
  auto backend = test::one_static_gpu(90);
  auto cfg = served_config(&source);
  test::TempDir dir;
  auto ledger = store::Ledger::open(dir.path() + "/l.db");
  ASSERT_TRUE(ledger.ok());
  guard::Supervisor s(cfg, &backend, ledger->get(), nullptr, clock, runner, sink);
  s.begin();
  s.started(4242);
  auto second = [&] {
    clock.advance_ns(s.next_wake_ns() - clock.monotonic_ns());
    s.on_time();
  };
  s.on_inference(scrape(100, {{"llama", 100}}));  // counted from zero: the server is the run's own
  second();
  s.on_inference(scrape(100, {{"llama", 300}, {"lora", 40}}));  // a model that appears counts from zero
  second();
  InferenceScrape down;
  down.endpoint = "http://127.0.0.1:8000/metrics";
  down.error = "connect: refused";
  s.on_inference(down);  // a failed scrape changes nothing
  second();
  s.on_inference(scrape(200, {{"llama", 50}, {"lora", 10}}));  // restart: new start time, counts drop
  second();
  s.on_inference(scrape(200, {{"llama", 150}, {"lora", 30}}));
  second();
  // Live window: 5 s of $1/s over 300 + 50 + 100 + 40 + 20 - 100 generated tokens since the first tick.
  ASSERT_TRUE(sink.last);
  ASSERT_TRUE(sink.last->usd_per_1m_generated_tokens);
  s.on_exit(W_EXITCODE(0, 0));
  auto out = s.finish();
  const report::RunReport report = report::session_report(out, nullptr);
  ASSERT_TRUE(report.serving);
  const report::ServingKpis& k = *report.serving;
  // llama: 300 before the restart + 150 after; lora: 40 + 30.
  EXPECT_DOUBLE_EQ(*k.generated_tokens, 520);
  EXPECT_DOUBLE_EQ(*k.prompt_tokens, 1040);
  EXPECT_DOUBLE_EQ(*k.requests, 52);
  EXPECT_EQ(k.models, (std::vector<std::string>{"llama", "lora"}));
  const double cost = util::micros_to_usd(out.run.cost_micros);
  EXPECT_DOUBLE_EQ(*k.usd_per_1m_generated_tokens, cost / 520 * 1e6);
  EXPECT_DOUBLE_EQ(*k.usd_per_1k_requests, cost / 52 * 1e3);
  bool restart_warned = false;
  for (const auto& w : sink.warnings)
    restart_warned = restart_warned || w.find("restarted 1 time") != std::string::npos;
  EXPECT_TRUE(restart_warned);
  // The ledger holds the same counters.
  auto stored = (*ledger)->inference(out.run.id);
  ASSERT_TRUE(stored.ok());
  ASSERT_FALSE(stored->empty());
  EXPECT_EQ(report::serving_kpis(out.run, *stored)->generated_tokens, k.generated_tokens);
}

TEST(ServingRunTest, NoReadingAtAllIsAWarningNotAServingReport) {
  util::FakeClock clock;
  test::RecordingRunner runner;
  test::RecordingSink sink;
  NoSource source;
  auto backend = test::one_static_gpu(90);
  auto cfg = served_config(&source);
  guard::Supervisor s(cfg, &backend, nullptr, nullptr, clock, runner, sink);
  s.begin();
  s.started(4242);
  InferenceScrape down;
  down.endpoint = "http://127.0.0.1:9/metrics";
  down.error = "connect: Connection refused";
  s.on_inference(down);
  clock.advance_ns(s.next_wake_ns() - clock.monotonic_ns());
  s.on_time();
  s.on_exit(W_EXITCODE(0, 0));
  auto out = s.finish();
  EXPECT_FALSE(report::session_report(out, nullptr).serving);
  ASSERT_FALSE(sink.warnings.empty());
  EXPECT_NE(sink.warnings.back().find("127.0.0.1:9"), std::string::npos) << sink.warnings.back();
  ASSERT_TRUE(sink.last);
  EXPECT_FALSE(sink.last->usd_per_1m_generated_tokens);
}

store::InferenceRecord rec(std::int64_t t_ms, const std::string& model, double generated) {
  store::InferenceRecord r;
  r.t_ms = t_ms;
  r.model = model;
  r.engine = "vllm";
  r.generated_tokens = generated;
  r.prompt_tokens = generated * 3;
  r.requests = generated / 20;
  return r;
}

TEST(ServingRunTest, SaturationIsTheBestFiveSecondRateAndTheFloorFollowsFromIt) {
  store::RunRecord run;
  run.price_micros_per_gpu_hour = 3'600'000'000;
  run.wall_ms = 20'000;
  run.cost_micros = 20'000'000;  // $20 over 20 s
  std::vector<store::InferenceRecord> records;
  // 10 tokens/s for 10 s, then 50 tokens/s for 10 s (two models, each half).
  for (int t = 1; t <= 20; ++t) {
    const double g = t <= 10 ? 10.0 * t : 100.0 + 50.0 * (t - 10);
    records.push_back(rec(t * 1000, "a", g / 2));
    records.push_back(rec(t * 1000, "b", g / 2));
  }
  auto k = report::serving_kpis(run, records);
  ASSERT_TRUE(k);
  EXPECT_DOUBLE_EQ(*k->generated_tokens, 600);
  EXPECT_DOUBLE_EQ(*k->generated_tokens_per_s, 30);
  EXPECT_DOUBLE_EQ(*k->peak_generated_tokens_per_s, 50);
  EXPECT_DOUBLE_EQ(*k->load_ratio, 0.6);
  EXPECT_DOUBLE_EQ(*k->usd_per_1m_generated_tokens, 20.0 / 600 * 1e6);
  EXPECT_DOUBLE_EQ(*k->usd_per_1m_generated_tokens_at_peak, 1.0 / 50 * 1e6);
  EXPECT_DOUBLE_EQ(*k->usd_per_1m_tokens, 20.0 / 2400 * 1e6);
  // No price: counts and rates, no dollars (never a 0).
  run.price_micros_per_gpu_hour = 0;
  k = report::serving_kpis(run, records);
  EXPECT_FALSE(k->usd_per_1m_generated_tokens);
  EXPECT_FALSE(k->usd_per_1m_generated_tokens_at_peak);
  EXPECT_TRUE(k->peak_generated_tokens_per_s);
  EXPECT_FALSE(report::serving_kpis(run, {}));
}

TEST(ServingRunTest, LedgerWithoutTheInferenceTableGainsItAndOldRunsHaveNone) {
  test::TempDir dir;
  const std::string path = dir.path() + "/old.db";
  std::int64_t id = 0;
  {
    auto ledger = store::Ledger::open(path);
    ASSERT_TRUE(ledger.ok());
    store::RunRecord r;
    r.command = "train";
    id = *(*ledger)->begin_run(r);
  }
  // A ledger written before the table existed.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP TABLE inference", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto ledger = store::Ledger::open(path);
  ASSERT_TRUE(ledger.ok()) << ledger.error().message;
  auto none = (*ledger)->inference(id);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  store::InferenceRecord r = rec(1000, "llama", 42);
  r.run_id = id;
  r.cached_tokens = std::nullopt;
  ASSERT_TRUE((*ledger)->append_inference({r}).ok());
  auto back = (*ledger)->inference(id);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].model, "llama");
  EXPECT_EQ((*back)[0].generated_tokens, 42);
  EXPECT_FALSE((*back)[0].cached_tokens);
}

TEST(ServingRunTest, TokenCostGateFailsARiseAndNeedsTheFigureOnBothRuns) {
  auto side = [](std::int64_t id, MicroUsd cost, double generated) {
    report::CompareSide s;
    s.run.id = id;
    s.run.cost_micros = cost;
    s.run.wall_ms = 10'000;
    s.run.price_micros_per_gpu_hour = 1'000'000;
    if (generated > 0) s.inference = {rec(10'000, "m", generated)};
    return s;
  };
  report::GateOptions gate;
  gate.max_token_cost_increase_pct = 10;
  // Same cost, 20 % fewer tokens: $/1M tokens +25 %.
  auto fail = report::compare_runs(side(1, 1'000'000, 1000), side(2, 1'000'000, 800), gate);
  ASSERT_TRUE(fail.ok());
  EXPECT_FALSE(fail->pass);
  ASSERT_EQ(fail->failures.size(), 1u);
  EXPECT_NE(fail->failures[0].find("1M generated tokens"), std::string::npos);
  EXPECT_TRUE(report::compare_runs(side(1, 1'000'000, 1000), side(2, 1'050'000, 1000), gate)->pass);
  auto missing = report::compare_runs(side(1, 1'000'000, 1000), side(2, 1'000'000, 0), gate);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::usage);
}

}  // namespace
}  // namespace gm
