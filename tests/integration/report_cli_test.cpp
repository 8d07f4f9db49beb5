// `gpumeter report` (many runs) and `gpumeter compare` through the real binary over a SQLite ledger
// written with the store API: exact totals per group, the gate's exit codes, and bad input.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <nlohmann/json.hpp>

#include "report/load.h"
#include "store/store.h"
#include "support/support.h"

namespace gm {
namespace {

constexpr std::int64_t kDay = 86'400'000;
constexpr std::int64_t kDay0 = 20'000 * kDay;  // 2024-10-04

struct Fixture {
  test::TempDir dir;
  std::string ledger_path = dir.path() + "/ledger.db";
  std::vector<std::string> args(std::vector<std::string> a) const {
    a.push_back("--ledger");
    a.push_back(ledger_path);
    return a;
  }
};

std::int64_t add_run(store::Ledger& l, const std::string& user, const std::string& team, std::size_t gpus,
                     std::int64_t start_ms, std::int64_t billed_s, MicroUsd cost, MicroUsd idle,
                     MicroUsd unused, std::vector<store::ProgressRecord> progress = {}) {
  store::RunRecord r;
  r.command = "python train.py --seed 1";
  r.user = user;
  r.host = "node1";
  r.labels["team"] = team;
  r.start_unix_ms = start_ms;
  r.gpus_allocated.assign(gpus, "GPU-x");
  r.gpu_model = "H100 SXM 80GB";
  r.price_micros_per_gpu_hour = 3'600'000'000;
  r.price_source = "--price";
  auto id = l.begin_run(r);
  EXPECT_TRUE(id.ok()) << id.error().message;
  r.id = *id;
  r.status = store::RunStatus::finished;
  r.exit_code = 0;
  r.end_unix_ms = start_ms + billed_s * 1000;
  r.wall_ms = billed_s * 1000;
  r.billed_s = billed_s;
  r.cost_micros = cost;
  r.idle_cost_micros = idle;
  r.unused_gpu_cost_micros = unused;
  r.energy_j = 3.6e6 * static_cast<double>(billed_s) / 10.0;
  r.co2_kg = 0.5;
  EXPECT_TRUE(l.update_run(r).ok());
  for (auto& p : progress) p.run_id = r.id;
  EXPECT_TRUE(l.append({}, progress, {}).ok());
  return r.id;
}

store::ProgressRecord prog(std::int64_t t_ms, std::int64_t step, std::int64_t tokens, double acc,
                           MicroUsd cost) {
  store::ProgressRecord p;
  p.t_ms = t_ms;
  p.step = step;
  p.tokens = tokens;
  p.metrics["acc"] = acc;
  p.cost_micros = cost;
  return p;
}

class ReportCliIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = store::Ledger::open(f.ledger_path);
    ASSERT_TRUE(l.ok()) << l.error().message;
    a = add_run(**l, "ana", "nlp", 1, kDay0 + 3'600'000, 10, 10'000'000, 2'000'000, 0,
                {prog(5'000, 50, 500'000, 0.70, 5'000'000), prog(10'000, 100, 1'000'000, 0.80, 10'000'000)});
    b = add_run(**l, "ana", "nlp", 1, kDay0 + 7'200'000, 11, 11'000'000, 1'000'000, 0,
                {prog(5'000, 50, 500'000, 0.75, 5'000'000), prog(11'000, 100, 1'000'000, 0.82, 11'000'000)});
    c = add_run(**l, "bob", "cv", 2, kDay0 + kDay + 60'000, 20, 40'000'000, 4'000'000, 20'000'000,
                {prog(20'000, 10, 100, 0.5, 40'000'000)});
    d = add_run(**l, "bob", "cv", 1, kDay0 + 5 * kDay, 5, 5'000'000, 0, 0);
  }
  Fixture f;
  std::int64_t a = 0, b = 0, c = 0, d = 0;
};

TEST_F(ReportCliIntegrationTest, TotalsPerGroupAreExact) {
  auto r = test::run_gpumeter(f.args({"report", "--since", "2024-10-04", "--until", "2024-10-06", "--by", "user", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["total"]["runs"], 3);
  EXPECT_DOUBLE_EQ(j["total"]["cost_usd"].get<double>(), 61.0);
  EXPECT_DOUBLE_EQ(j["total"]["idle_cost_usd"].get<double>(), 7.0);
  EXPECT_DOUBLE_EQ(j["total"]["unused_gpu_cost_usd"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(j["total"]["waste_usd"].get<double>(), 27.0);
  EXPECT_DOUBLE_EQ(j["total"]["energy_kwh"].get<double>(), 4.1);
  EXPECT_DOUBLE_EQ(j["total"]["co2_kg"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["total"]["gpu_hours"].get<double>(), (10 + 11 + 40) / 3600.0);
  ASSERT_EQ(j["groups"].size(), 2u);
  EXPECT_EQ(j["groups"][0]["key"], "bob");
  EXPECT_DOUBLE_EQ(j["groups"][0]["cost_usd"].get<double>(), 40.0);
  EXPECT_EQ(j["groups"][1]["key"], "ana");
  EXPECT_DOUBLE_EQ(j["groups"][1]["cost_usd"].get<double>(), 21.0);
  EXPECT_EQ(j["top_runs"][0]["run_id"], c);

  auto day = test::run_gpumeter(f.args({"report", "--since", "2024-10-01", "--by", "day", "--csv"}));
  ASSERT_EQ(day.exit_code, 0) << day.err;
  EXPECT_NE(day.out.find("2024-10-04,2,0,0,21.000,"), std::string::npos) << day.out;
  EXPECT_NE(day.out.find("2024-10-05,1,0,0,20.000,"), std::string::npos) << day.out;
  EXPECT_NE(day.out.find("2024-10-09,1,"), std::string::npos) << day.out;
  EXPECT_NE(day.out.find("TOTAL,4,"), std::string::npos) << day.out;

  auto team = test::run_gpumeter(f.args({"report", "--since", "2024-10-01", "--by", "label:team", "--json"}));
  auto tj = nlohmann::json::parse(team.out);
  EXPECT_EQ(tj["groups"][0]["key"], "cv");
  EXPECT_DOUBLE_EQ(tj["groups"][0]["cost_usd"].get<double>(), 45.0);

  auto text = test::run_gpumeter(f.args({"report", "--since", "2024-10-01", "--target", "acc=0.8"}));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("$66.00"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("$ to acc>=0.8"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("not reached"), std::string::npos) << text.out;
}

TEST_F(ReportCliIntegrationTest, DailyReportCoversOneUtcDay) {
  auto r = test::run_gpumeter(f.args({"report", "--daily", "--date", "2024-10-04"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("daily efficiency report for 2024-10-04"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 run(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("$21.00"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("by user"), std::string::npos) << r.out;
  auto html_path = f.dir.path() + "/daily.html";
  auto h = test::run_gpumeter(f.args({"report", "--daily", "--date", "2024-10-04", "--html", html_path}));
  ASSERT_EQ(h.exit_code, 0) << h.err;
  auto page = test::read_file(html_path);
  EXPECT_NE(page.find("default-src 'none'"), std::string::npos);
  EXPECT_NE(page.find("uPlot"), std::string::npos);
}

TEST_F(ReportCliIntegrationTest, ScalingAcrossGpuCounts) {
  auto r = test::run_gpumeter(f.args({"report", "--scaling", std::to_string(a), std::to_string(c), "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["unit"], "tokens");
  // a: (1M − 0.5M) / 5 s = 100 000 tok/s on 1 GPU; c: 100 / 20 s = 5 tok/s on 2 GPUs.
  EXPECT_DOUBLE_EQ(j["runs"][0]["throughput_per_s"].get<double>(), 100'000.0);
  EXPECT_DOUBLE_EQ(j["runs"][1]["throughput_per_s"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(j["runs"][1]["efficiency"].get<double>(), 5.0 / 100'000.0 / 2.0);
  auto one = test::run_gpumeter(f.args({"report", "--scaling", std::to_string(a)}));
  EXPECT_EQ(one.exit_code, 2) << one.err;
}

TEST_F(ReportCliIntegrationTest, CompareGateExitCodes) {
  const std::string A = std::to_string(a), B = std::to_string(b);
  // B costs +10 % and gains 2.5 % accuracy.
  auto pass = test::run_gpumeter(f.args({"compare", A, B, "--max-cost-increase", "20%", "--min-gain", "acc=2%"}));
  EXPECT_EQ(pass.exit_code, 0) << pass.out << pass.err;
  EXPECT_NE(pass.out.find("verdict: PASS"), std::string::npos) << pass.out;
  auto fail_cost = test::run_gpumeter(f.args({"compare", A, B, "--max-cost-increase", "5%", "--json"}));
  EXPECT_EQ(fail_cost.exit_code, 1) << fail_cost.out << fail_cost.err;
  auto j = nlohmann::json::parse(fail_cost.out);
  EXPECT_FALSE(j["pass"].get<bool>());
  EXPECT_NEAR(j["rows"][0]["delta_pct"].get<double>(), 10.0, 1e-9);
  auto fail_gain = test::run_gpumeter(f.args({"compare", A, B, "--min-gain", "acc=5%"}));
  EXPECT_EQ(fail_gain.exit_code, 1) << fail_gain.out;
  EXPECT_NE(fail_gain.out.find("verdict: FAIL"), std::string::npos);
  auto missing = test::run_gpumeter(f.args({"compare", A, std::to_string(d), "--min-gain", "acc=1%"}));
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
  EXPECT_NE(missing.err.find("has no metric 'acc'"), std::string::npos) << missing.err;
  auto unknown = test::run_gpumeter(f.args({"compare", A, "999"}));
  EXPECT_EQ(unknown.exit_code, 4);
  EXPECT_NE(unknown.err.find("no run 999"), std::string::npos) << unknown.err;
  auto bad = test::run_gpumeter(f.args({"compare", A, B, "--min-gain", "acc"}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--min-gain 'acc'"), std::string::npos) << bad.err;
}

TEST_F(ReportCliIntegrationTest, BadInputGetsClearMessages) {
  auto empty = test::run_gpumeter(f.args({"report", "--since", "2020-01-01", "--until", "2020-02-01"}));
  EXPECT_EQ(empty.exit_code, 4);
  EXPECT_NE(empty.err.find("no runs started in 2020-01-01 00:00:00 .. 2020-02-01 00:00:00 UTC"), std::string::npos)
      << empty.err;
  auto target = test::run_gpumeter(f.args({"report", "--since", "2024-10-01", "--target", "acc>>0.9"}));
  EXPECT_EQ(target.exit_code, 2);
  EXPECT_NE(target.err.find("--target 'acc>>0.9'"), std::string::npos) << target.err;
  auto by = test::run_gpumeter(f.args({"report", "--since", "7d", "--by", "team"}));
  EXPECT_EQ(by.exit_code, 2);
  EXPECT_NE(by.err.find("--by 'team'"), std::string::npos) << by.err;
  auto order = test::run_gpumeter(f.args({"report", "--since", "2024-10-05", "--until", "2024-10-04"}));
  EXPECT_EQ(order.exit_code, 2);
  auto unknown = test::run_gpumeter(f.args({"report", "--scaling", "1", "12345"}));
  EXPECT_EQ(unknown.exit_code, 4);
  EXPECT_NE(unknown.err.find("no run 12345"), std::string::npos) << unknown.err;
  auto date = test::run_gpumeter(f.args({"report", "--daily", "--date", "04/10/2024"}));
  EXPECT_EQ(date.exit_code, 2);
  EXPECT_NE(date.err.find("--date '04/10/2024'"), std::string::npos) << date.err;
}

TEST_F(ReportCliIntegrationTest, RunPageInputComesFromTheLedger) {
  auto l = store::Ledger::open(f.ledger_path);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(report::resolve_run(**l, "last")->id, d);
  EXPECT_EQ(report::resolve_run(**l, "x1").error().kind, ErrorKind::usage);
  EXPECT_EQ(report::resolve_run(**l, "0").error().kind, ErrorKind::usage);
  EXPECT_EQ(report::resolve_run(**l, "777").error().kind, ErrorKind::not_found);
  auto run = report::resolve_run(**l, std::to_string(a));
  ASSERT_TRUE(run.ok());
  report::KpiOptions o;
  o.target = *meter::parse_metric_target("acc=0.8");
  auto in = report::load_run_html_input(**l, *run, o, nullptr);
  ASSERT_TRUE(in.ok()) << in.error().message;
  ASSERT_EQ(in->progress.size(), 2u);
  ASSERT_TRUE(in->kpis && in->kpis->target_hit);
  EXPECT_EQ(in->kpis->target_hit->cost_micros, 10'000'000);
  EXPECT_DOUBLE_EQ(*in->kpis->usd_per_1m_tokens, 10.0);
  auto page = report::render_run_html(*in);
  ASSERT_TRUE(page.ok());
  EXPECT_NE(page->find("\"id\":\"metric-acc\""), std::string::npos);
  EXPECT_NE(page->find("$ to reach acc>=0.8"), std::string::npos);

  const std::string out = f.dir.path() + "/run.html";
  auto r = test::run_gpumeter(f.args({"report", std::to_string(a), "--html", out, "--target", "acc=0.8"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(test::read_file(out).find("\"id\":\"metric-acc\""), std::string::npos);
  // MFU with --params and the catalog's dense peak of the run's GPU (H100 SXM 80GB).
  auto mfu = test::run_gpumeter(f.args({"report", std::to_string(a), "--html", out, "--params", "1e9"}));
  ASSERT_EQ(mfu.exit_code, 0) << mfu.err;
  EXPECT_NE(test::read_file(out).find("[\"MFU\",\""), std::string::npos);
  auto bad_target = test::run_gpumeter(f.args({"report", "last", "--html", out, "--target", "acc"}));
  EXPECT_EQ(bad_target.exit_code, 2);
  EXPECT_NE(bad_target.err.find("--target 'acc'"), std::string::npos) << bad_target.err;
  auto unknown = test::run_gpumeter(f.args({"report", "4242", "--html", out}));
  EXPECT_EQ(unknown.exit_code, 4);
  EXPECT_NE(unknown.err.find("no run 4242"), std::string::npos) << unknown.err;
}

TEST_F(ReportCliIntegrationTest, UnknownRunStatusInTheLedgerIsAClearError) {
  // A status this gpumeter has no word for (a newer gpumeter's, an edited row): exit 5 naming the run, the
  // word and the valid ones; never a crash or a guessed status.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(f.ledger_path.c_str(), &db), SQLITE_OK);
  const std::string sql = "UPDATE runs SET status='paused' WHERE id=" + std::to_string(c);
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  for (const auto& args : {std::vector<std::string>{"runs"}, std::vector<std::string>{"runs", "--json"},
                           std::vector<std::string>{"report", "--since", "2024-10-01"}}) {
    auto r = test::run_gpumeter(f.args(args));
    EXPECT_EQ(r.exit_code, 5) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("runs row " + std::to_string(c) +
                         ": column status holds 'paused' is not one of running, "
                         "succeeded"),
              std::string::npos)
        << r.err;
  }
}

}  // namespace
}  // namespace gm
