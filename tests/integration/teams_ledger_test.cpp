// Teams on one shared ledger (issue 29), end to end with the real binary, the fake NVML and a real
// PostgreSQL 15 server (tests/support/postgres_server.h): two machines in one report, a team budget across
// concurrent runs, the server going away mid-run, FOCUS export, passwords never printed, ledger copy.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "store/store.h"
#include "support/postgres_server.h"
#include "support/support.h"
#include "util/csv.h"

namespace gm {
namespace {

using test::CmdResult;
using test::PostgresServer;
using test::run_gpumeter;

/// True when this process may give a child its own hostname (a UTS namespace: root).
bool can_unshare_uts() {
  static const bool ok = test::run_command({"unshare", "--uts", "true"}).exit_code == 0;
  return ok;
}

class TeamsLedgerIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GM_ASSERT_BUILT();
    ASSERT_TRUE(PostgresServer::shared().ok()) << PostgresServer::shared().error();
    db_ = PostgresServer::shared().create_database();
    ASSERT_FALSE(db_.empty());
    uri_ = PostgresServer::shared().uri(db_);
  }
  std::map<std::string, std::string> env() {
    auto e = test::fake_env(dir_.write("scenario.json", test::one_gpu_scenario("sleep", 90)), dir_.path());
    e["GPUMETER_LEDGER"] = uri_;
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    return e;
  }
  /// `gpumeter ARGS` as if on machine `host`: its own hostname (unshare --uts) when possible, else the
  /// host label, which overrides the hostname the same way.
  CmdResult on_host(const std::string& host, std::vector<std::string> args,
                    std::map<std::string, std::string> extra = {}) {
    auto e = env();
    for (auto& [k, v] : extra) e[k] = v;
    if (!can_unshare_uts()) {
      args.insert(args.begin() + 1, {"--label", "host=" + host});
      return run_gpumeter(args, e, std::nullopt, 180);
    }
    std::vector<std::string> argv = {"unshare", "--uts", "sh", "-c", "hostname \"$0\" && exec \"$@\"", host,
                                     test::gpumeter_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::run_command(argv, e, std::nullopt, 180);
  }
  nlohmann::json runs_json() {
    auto r = run_gpumeter({"runs", "--json"}, env());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  }
  test::TempDir dir_;
  std::string db_, uri_;
};

TEST_F(TeamsLedgerIntegrationTest, TwoMachinesWriteOneLedgerAndOneReportShowsBoth) {
  auto a = on_host("alpha", {"run", "--price", "36", "--label", "team=nlp", "--", "sleep", "1"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto b = on_host("beta", {"run", "--price", "36", "--label", "team=cv", "--", "sleep", "1"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto runs = runs_json();
  ASSERT_EQ(runs.size(), 2u);
  std::set<std::string> hosts;
  for (const auto& r : runs) hosts.insert(r["host"].get<std::string>());
  EXPECT_EQ(hosts, (std::set<std::string>{"alpha", "beta"}));
  auto text = run_gpumeter({"runs"}, env());
  EXPECT_NE(text.out.find("HOST"), std::string::npos);
  EXPECT_NE(text.out.find("alpha"), std::string::npos);

  auto rep = run_gpumeter({"report", "--since", "1d", "--by", "host", "--json"}, env());
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  auto j = nlohmann::json::parse(rep.out);
  EXPECT_EQ(j["total"]["runs"], 2);
  std::set<std::string> groups;
  for (const auto& g : j["groups"]) groups.insert(g["key"].get<std::string>());
  EXPECT_EQ(groups, (std::set<std::string>{"alpha", "beta"}));
  auto by_label = run_gpumeter({"report", "--since", "1d", "--by", "label:team", "--json"}, env());
  ASSERT_EQ(by_label.exit_code, 0) << by_label.err;
  EXPECT_EQ(nlohmann::json::parse(by_label.out)["groups"].size(), 2u);
}

TEST_F(TeamsLedgerIntegrationTest, TeamBudgetStopsTwoConcurrentRunsAndRefusesAThird) {
  // $360/GPU-h = $0.10 per second per run; the team's $0.50 a day is reached by both runs together in ~2.5 s.
  auto set = run_gpumeter({"budget", "set", "team=nlp", "0.50", "--per", "day"}, env());
  ASSERT_EQ(set.exit_code, 0) << set.err;
  const std::vector<std::string> job = {"run", "--price", "360", "--grace", "2s", "--label", "team=nlp",
                                        "--", "sleep", "60"};
  auto first = std::async(std::launch::async, [&] { return on_host("alpha", job); });
  auto second = std::async(std::launch::async, [&] { return on_host("beta", job); });
  const CmdResult a = first.get(), b = second.get();
  EXPECT_EQ(a.exit_code, 86) << a.err;
  EXPECT_EQ(b.exit_code, 86) << b.err;
  EXPECT_NE(a.err.find("team budget team=nlp"), std::string::npos) << a.err;
  auto runs = runs_json();
  ASSERT_EQ(runs.size(), 2u);
  double total = 0;
  for (const auto& r : runs) {
    EXPECT_EQ(r["status"], "stopped");
    EXPECT_EQ(r["stopped_by"], "budget");
    total += r["cost_usd"].get<double>();
    EXPECT_LT(r["wall_s"].get<double>(), 30) << "stopped long before the job's 60 s";
  }
  // At most one interval ($0.10) of overspend per run, plus each bill's rounding up to the second.
  EXPECT_GE(total, 0.50);
  EXPECT_LE(total, 0.50 + 2 * 0.10 + 2 * 0.10 + 1e-9);

  auto list = run_gpumeter({"budget", "list", "--json"}, env());
  ASSERT_EQ(list.exit_code, 0) << list.err;
  auto lj = nlohmann::json::parse(list.out);
  ASSERT_EQ(lj.size(), 1u);
  EXPECT_EQ(lj[0]["selector"], "team=nlp");
  EXPECT_NEAR(lj[0]["spent_usd"].get<double>(), total, 1e-6);
  EXPECT_EQ(lj[0]["runs"], 2);
  EXPECT_EQ(lj[0]["live_runs"], 0);

  auto third = on_host("gamma", job);
  EXPECT_EQ(third.exit_code, 88) << third.err;
  EXPECT_NE(third.err.find("is spent"), std::string::npos) << third.err;
  EXPECT_EQ(runs_json().size(), 2u) << "a refused run is not started";
  // Another team is not held back.
  auto other = on_host("gamma", {"run", "--price", "36", "--label", "team=cv", "--", "true"});
  EXPECT_EQ(other.exit_code, 0) << other.err;

  ASSERT_EQ(run_gpumeter({"budget", "rm", "team=nlp"}, env()).exit_code, 0);
  EXPECT_EQ(run_gpumeter({"budget", "rm", "team=nlp"}, env()).exit_code, 4);
}

TEST_F(TeamsLedgerIntegrationTest, ServerStoppedMidRunKeepsTheJobAndTheRunIsReplayedOnce) {
  PostgresServer own;  // a server of its own: this test stops it
  ASSERT_TRUE(own.ok()) << own.error();
  const std::string db = own.create_database();
  ASSERT_FALSE(db.empty());
  auto e = env();
  e["GPUMETER_LEDGER"] = own.uri(db);
  ASSERT_EQ(run_gpumeter({"ledger", "migrate"}, e).exit_code, 0);
  ASSERT_EQ(run_gpumeter({"budget", "set", "team=nlp", "1000", "--per", "month"}, e).exit_code, 0);
  const std::string out_file = dir_.path() + "/job.out";
  auto job = std::async(std::launch::async, [&] {
    return run_gpumeter({"run", "--price", "36", "--label", "team=nlp", "--", "sh", "-c",
                         "sleep 4; echo done > " + out_file + "; exit 3"},
                        e, std::nullopt, 120);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_TRUE(own.stop());
  const CmdResult r = job.get();
  EXPECT_EQ(r.exit_code, 3) << "the job's own exit code is kept\n" << r.err;
  EXPECT_EQ(test::read_file(out_file), "done\n");
  EXPECT_NE(r.err.find("spooled"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("team budget team=nlp cannot be checked"), std::string::npos) << r.err;

  // Still down: reading fails clearly; the run waits in the spool.
  auto down = run_gpumeter({"runs", "--json"}, e);
  EXPECT_EQ(down.exit_code, 5) << down.err;
  ASSERT_TRUE(own.start()) << own.error();
  auto back = run_gpumeter({"runs", "--json"}, e);
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_NE(back.err.find("replayed 1 spooled run"), std::string::npos) << back.err;
  auto runs = nlohmann::json::parse(back.out);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["exit_code"], 3);
  EXPECT_EQ(runs[0]["status"], "failed");
  EXPECT_GE(runs[0]["wall_s"].get<double>(), 4.0);
  // Its samples from before and after the server went away, each once.
  auto report = run_gpumeter({"report", "last", "--json"}, e);
  ASSERT_EQ(report.exit_code, 0) << report.err;
  auto again = run_gpumeter({"runs", "--json"}, e);
  EXPECT_EQ(nlohmann::json::parse(again.out).size(), 1u) << "a replay is never counted twice";
  EXPECT_EQ(again.err.find("replayed"), std::string::npos);
}

TEST_F(TeamsLedgerIntegrationTest, ServerDownAtStartStillRunsTheJobAndReplaysAtItsEnd) {
  PostgresServer own;
  ASSERT_TRUE(own.ok()) << own.error();
  const std::string db = own.create_database();
  auto e = env();
  e["GPUMETER_LEDGER"] = own.uri(db);
  ASSERT_TRUE(own.stop());
  auto job = std::async(std::launch::async, [&] {
    return run_gpumeter({"run", "--price", "36", "--budget", "5", "--label", "team=nlp", "--", "sh", "-c",
                         "sleep 3; exit 0"},
                        e, std::nullopt, 120);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ASSERT_TRUE(own.start()) << own.error();
  const CmdResult r = job.get();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("spooled"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("recorded there as run"), std::string::npos) << r.err;
  auto runs = run_gpumeter({"runs", "--json"}, e);
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  EXPECT_EQ(nlohmann::json::parse(runs.out).size(), 1u);
}

TEST_F(TeamsLedgerIntegrationTest, FocusBilledCostAddsUpToTheReportTotalExactly) {
  // Odd micro-dollar amounts split over 3 GPUs: the rows carry the remainders.
  const std::int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  const std::vector<std::string> costs = {"1.000001", "0.333334", "7.123457"};
  for (std::size_t i = 0; i < costs.size(); ++i) {
    auto r = run_gpumeter({"record-job", "--name", "job" + std::to_string(i), "--user", "alice", "--start-unix",
                           std::to_string(now_s - 3600), "--end-unix", std::to_string(now_s - 1800),
                           "--gpus-allocated", "GPU-a,GPU-b,GPU-c", "--cost-usd", costs[i], "--label",
                           "team=nlp", "--label", "host=node" + std::to_string(i)},
                          env());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const std::string focus = dir_.path() + "/focus.csv";
  auto rep = run_gpumeter({"report", "--since", "1d", "--json", "--focus", focus}, env());
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const auto total_micros =
      static_cast<std::int64_t>(std::llround(nlohmann::json::parse(rep.out)["total"]["cost_usd"].get<double>() * 1e6));
  auto table = util::parse_csv(test::read_file(focus), "focus.csv");
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(table->rows.size(), 9u);
  const int billed = table->column("BilledCost");
  ASSERT_GE(billed, 0);
  for (const char* c : {"EffectiveCost", "ListCost", "BillingCurrency", "ChargePeriodStart", "ChargePeriodEnd",
                        "ChargeCategory", "ResourceId", "ResourceName", "ServiceName", "ProviderName", "RegionId",
                        "SkuId", "ConsumedQuantity", "ConsumedUnit", "Tags"})
    EXPECT_GE(table->column(c), 0) << c;
  std::int64_t sum = 0;
  for (const auto& row : table->rows) {
    const std::string& v = row.fields[static_cast<std::size_t>(billed)];
    const auto dot = v.find('.');
    ASSERT_NE(dot, std::string::npos);
    ASSERT_EQ(v.size() - dot - 1, 6u) << v;
    sum += std::stoll(v.substr(0, dot)) * 1'000'000 + std::stoll(v.substr(dot + 1));
    EXPECT_EQ(row.fields[static_cast<std::size_t>(table->column("BillingCurrency"))], "USD");
    EXPECT_EQ(row.fields[static_cast<std::size_t>(table->column("ConsumedUnit"))], "GPU-Hours");
    EXPECT_EQ(row.fields[static_cast<std::size_t>(table->column("ConsumedQuantity"))], "0.500000");
    auto tags = nlohmann::json::parse(row.fields[static_cast<std::size_t>(table->column("Tags"))]);
    EXPECT_EQ(tags["team"], "nlp");
  }
  EXPECT_EQ(sum, total_micros);
  EXPECT_EQ(sum, 1'000'001 + 333'334 + 7'123'457);
}

TEST_F(TeamsLedgerIntegrationTest, PasswordsAreNeverPrinted) {
  ASSERT_EQ(PostgresServer::shared().exec(db_, "CREATE ROLE alice LOGIN PASSWORD 's3cretpw'; "
                                               "GRANT ALL ON SCHEMA public TO alice;"),
            "");
  const std::string base = "127.0.0.1:" + std::to_string(PostgresServer::shared().port()) + "/" + db_;
  auto e = env();
  e.erase("GPUMETER_LEDGER");
  auto ok = run_gpumeter({"ledger", "migrate", "--ledger", "postgresql://alice:s3cretpw@" + base}, e);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("postgresql://alice:***@"), std::string::npos) << ok.out;
  auto wrong = run_gpumeter({"runs", "--ledger", "postgresql://alice:wrongpw9@" + base}, e);
  EXPECT_EQ(wrong.exit_code, 5);
  EXPECT_NE(wrong.err.find("password authentication failed"), std::string::npos) << wrong.err;
  for (const auto* r : {&ok, &wrong}) {
    EXPECT_EQ(r->out.find("s3cretpw"), std::string::npos);
    EXPECT_EQ(r->err.find("s3cretpw"), std::string::npos);
    EXPECT_EQ(r->err.find("wrongpw9"), std::string::npos) << r->err;
  }
  // From the environment, as libpq reads it: nothing in the location at all.
  e["PGPASSWORD"] = "s3cretpw";
  auto env_pw = run_gpumeter({"runs", "--json", "--ledger", "postgresql://alice@" + base}, e);
  EXPECT_EQ(env_pw.exit_code, 0) << env_pw.err;
}

TEST_F(TeamsLedgerIntegrationTest, LedgerCopyMovesASqliteLedgerToPostgres) {
  auto e = env();
  const std::string sqlite = dir_.path() + "/old.db";
  e["GPUMETER_LEDGER"] = sqlite;
  for (int i = 0; i < 2; ++i) {
    auto r = run_gpumeter({"run", "--price", "36", "--label", "team=nlp", "--", "sleep", "0.5"}, e);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  auto copy = run_gpumeter({"ledger", "copy", "--from", "sqlite:" + sqlite, "--to", uri_}, e);
  ASSERT_EQ(copy.exit_code, 0) << copy.err;
  EXPECT_NE(copy.out.find("copied 2 run(s)"), std::string::npos) << copy.out;
  auto twice = run_gpumeter({"ledger", "copy", "--from", "sqlite:" + sqlite, "--to", uri_}, e);
  EXPECT_NE(twice.out.find("copied 0 run(s)"), std::string::npos) << twice.out;
  auto from = nlohmann::json::parse(run_gpumeter({"report", "--since", "1d", "--json"}, e).out);
  e["GPUMETER_LEDGER"] = uri_;
  auto to = nlohmann::json::parse(run_gpumeter({"report", "--since", "1d", "--json"}, e).out);
  EXPECT_EQ(from["total"]["runs"], to["total"]["runs"]);
  EXPECT_EQ(from["total"]["cost_usd"], to["total"]["cost_usd"]);
  auto last = run_gpumeter({"report", "last", "--json"}, e);
  ASSERT_EQ(last.exit_code, 0) << last.err;
}

}  // namespace
}  // namespace gm
