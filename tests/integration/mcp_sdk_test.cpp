// `gpumeter mcp` driven by a real MCP client: the official TypeScript SDK (tests/mcp, installed by
// scripts/setup.sh), which validates every message and every structured result against the tool's output
// schema. A real `gpumeter run` of a job with a known pace on the fake NVML is read live, a stop is refused
// without --allow-control, and with it the run is stopped through its own supervisor: the job's checkpoint is
// written and the ledger says stopped_by "mcp" with the reason.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent_fixture.h"

namespace gm {
namespace {

using nlohmann::json;
using test::Background;

/// "" when node and the SDK are installed (scripts/setup.sh), else what is missing: a test failure, never a
/// skip, on a machine where setup ran.
std::string missing_sdk() {
  if (test::run_command({"node", "--version"}).exit_code != 0)
    return "node is not installed (scripts/setup.sh)";
  const std::string sdk =
      test::source_dir() + "/tests/mcp/node_modules/@modelcontextprotocol/sdk/package.json";
  if (!std::filesystem::exists(sdk)) return sdk + " is missing: run scripts/setup.sh (npm ci in tests/mcp)";
  return "";
}

/// Runs the SDK client in `mode` and returns the JSON object it printed.
json sdk_client(const std::string& mode, const std::string& runs_dir, const std::string& ledger,
                const std::map<std::string, std::string>& env, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv{"node",       test::source_dir() + "/tests/mcp/client.mjs",
                                mode,         test::gpumeter_binary(),
                                "--runs-dir", runs_dir,
                                "--ledger",   ledger};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const auto r = test::run_command(argv, env, std::nullopt, 120);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto eol = r.out.find('\n');
  json j = json::parse(r.out.substr(0, eol), nullptr, false);
  EXPECT_TRUE(j.is_object()) << "client output:\n" << r.out << "\nstderr:\n" << r.err;
  if (!j.is_object()) return json::object();
  EXPECT_FALSE(j.contains("error")) << j.dump(2) << "\nstderr:\n" << r.err;
  return j;
}

/// Waits until the runs directory holds a view with a forecast; returns it (null after `timeout_s`).
json wait_for_forecast(const std::string& runs_dir, Background& run, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end && run.running()) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(runs_dir, ec)) {
      const json v = json::parse(test::read_file(e.path().string()), nullptr, false);
      if (v.is_object() && v.contains("forecast") && v["forecast"].is_object()) return v;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return nullptr;
}

class McpSdkIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GM_ASSERT_BUILT();
    ASSERT_EQ(missing_sdk(), "");
    scenario_ = dir_.write("scenario.json", test::one_gpu_scenario("python3", 97));
    runs_dir_ = dir_.path() + "/runs";
    ledger_ = dir_.path() + "/ledger.db";
    checkpoint_ = dir_.path() + "/checkpoint.txt";
    env_ = test::fake_env(scenario_, dir_.path());
    env_["PYTHONPATH"] = test::source_dir() + "/python";
    env_["GPUMETER_RUNS_DIR"] = runs_dir_;
  }
  /// A run of 1200 steps of 50 ms (a minute) reporting progress, which writes its checkpoint on SIGTERM.
  std::unique_ptr<Background> start_run() {
    return std::make_unique<Background>(
        std::vector<std::string>{test::gpumeter_binary(), "run", "--price", "3.6", "--budget", "100",
                                 "--grace", "20s", "--", "python3",
                                 test::source_dir() + "/tests/data/python/target_curve.py", "power", "1200",
                                 "0.05", "10", "0.003", "1", checkpoint_},
        env_, dir_.path(), "run");
  }
  test::TempDir dir_;
  std::string scenario_, runs_dir_, ledger_, checkpoint_;
  std::map<std::string, std::string> env_;
};

TEST_F(McpSdkIntegrationTest, AnAgentReadsALiveRunsSpendAndForecastAndCannotStopItWithoutControl) {
  auto run = start_run();
  const json view = wait_for_forecast(runs_dir_, *run, 60);
  ASSERT_TRUE(view.is_object()) << "the run published no forecast\n" << run->stderr_text();

  const json out = sdk_client("read", runs_dir_, ledger_, env_);
  // The tools an agent sees without --allow-control: the four that read, each with its schemas.
  std::vector<std::string> names;
  for (const auto& t : out["tools"]) {
    names.push_back(t["name"]);
    EXPECT_TRUE(t["hasOutputSchema"].get<bool>()) << t.dump();
    EXPECT_TRUE(t["readOnly"].get<bool>()) << t.dump();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"list_runs", "run_status", "plan_job", "find_prices"}));
  EXPECT_EQ(out["server"]["name"], "gpumeter");
  EXPECT_TRUE(out["instructions"].is_string());

  // list_runs: the live run first, status running, its spend, forecast and budget.
  ASSERT_TRUE(out["list_runs"]["ok"].get<bool>()) << out["list_runs"].dump(2);
  ASSERT_GE(out["live"].size(), 1u) << out["list_runs"].dump(2);
  const json& live = out["live"][0];
  EXPECT_EQ(live["status"], "running");
  EXPECT_EQ(live["pid"], run->pid());
  EXPECT_GT(live["run_id"].get<std::int64_t>(), 0);
  EXPECT_GT(live["cost_usd"].get<double>(), 0);
  EXPECT_GT(live["forecast_cost_usd"].get<double>(), live["cost_usd"].get<double>());
  EXPECT_DOUBLE_EQ(live["budget_usd"].get<double>(), 100.0);
  EXPECT_EQ(live["total_steps"], 1200);
  EXPECT_NE(live["command"].get<std::string>().find("target_curve.py"), std::string::npos);

  // run_status by pid and by run id: the report's keys, and `live` with the forecast's interval and ETA.
  for (const char* key : {"run_status", "run_status_by_id"}) {
    const json& rs = out[key];
    ASSERT_TRUE(rs["ok"].get<bool>() && !rs["isError"].get<bool>()) << rs.dump(2);
    const json& s = rs["structured"];
    for (const char* k : {"run_id", "command", "status", "status_text", "cost_usd", "steps", "total_steps",
                          "forecast_cost_usd", "budget_usd", "effective_utilization", "mfu", "gpus",
                          "findings", "target", "actions", "startup_s", "stopped_by"})
      EXPECT_TRUE(s.contains(k)) << key << " lacks " << k << "\n" << s.dump(2);
    EXPECT_EQ(s["status"], "running");
    ASSERT_TRUE(s["live"].is_object()) << s.dump(2);
    const json& l = s["live"];
    EXPECT_GT(l["spent_usd"].get<double>(), 0);
    EXPECT_NEAR(l["usd_per_hour"].get<double>(), 3.6, 0.01);
    EXPECT_LE(l["forecast_low_usd"].get<double>(), l["forecast_usd"].get<double>());
    EXPECT_GE(l["forecast_high_usd"].get<double>(), l["forecast_usd"].get<double>());
    EXPECT_GT(l["eta_s"].get<double>(), 0);
    EXPECT_EQ(l["total_steps"], 1200);
    EXPECT_NE(rs["text"].get<std::string>().find("forecast"), std::string::npos) << rs["text"];
  }
  // Bad arguments are a tool error the agent can read, not a protocol error.
  EXPECT_TRUE(out["bad_args"]["ok"].get<bool>()) << out["bad_args"].dump();
  EXPECT_TRUE(out["bad_args"]["isError"].get<bool>());
  EXPECT_NE(out["bad_args"]["text"].get<std::string>().find("run_id"), std::string::npos);

  // Without --allow-control stop_run is not listed and a call is refused, naming the flag.
  EXPECT_FALSE(out["stop_refused"]["ok"].get<bool>()) << out["stop_refused"].dump();
  EXPECT_EQ(out["stop_refused"]["code"], -32602);
  EXPECT_NE(out["stop_refused"]["message"].get<std::string>().find("--allow-control"), std::string::npos);
  EXPECT_TRUE(run->running()) << "the run was stopped without --allow-control";
  std::printf("live run %lld: $%.4f spent, forecast $%.4f [%.4f-%.4f], ETA %.1f s\n",
              static_cast<long long>(live["run_id"].get<std::int64_t>()),
              out["run_status"]["structured"]["live"]["spent_usd"].get<double>(),
              out["run_status"]["structured"]["live"]["forecast_usd"].get<double>(),
              out["run_status"]["structured"]["live"]["forecast_low_usd"].get<double>(),
              out["run_status"]["structured"]["live"]["forecast_high_usd"].get<double>(),
              out["run_status"]["structured"]["live"]["eta_s"].get<double>());
}

TEST_F(McpSdkIntegrationTest, WithControlAnAgentChangesTheBudgetAndStopsTheRunThroughItsCheckpoint) {
  auto run = start_run();
  ASSERT_TRUE(wait_for_forecast(runs_dir_, *run, 60).is_object()) << run->stderr_text();
  const std::string reason = "the sweep found a better learning rate";
  const json out = sdk_client("stop", runs_dir_, ledger_, env_, {"--reason", reason, "--budget", "250.125"});
  std::vector<std::string> names;
  for (const auto& t : out["tools"]) names.push_back(t["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"list_runs", "run_status", "plan_job", "find_prices", "stop_run",
                                             "set_budget"}));
  // set_budget: exact dollars, confirmed by the run's own view.
  const json& sb = out["set_budget"];
  ASSERT_TRUE(sb["ok"].get<bool>() && !sb["isError"].get<bool>()) << sb.dump(2);
  EXPECT_TRUE(sb["structured"]["confirmed"].get<bool>()) << sb.dump(2);
  EXPECT_DOUBLE_EQ(sb["structured"]["budget_usd"].get<double>(), 250.125);
  EXPECT_DOUBLE_EQ(sb["structured"]["previous_budget_usd"].get<double>(), 100.0);
  // stop_run: the supervisor is stopping the run.
  const json& st = out["stop_run"];
  ASSERT_TRUE(st["ok"].get<bool>() && !st["isError"].get<bool>()) << st.dump(2);
  EXPECT_TRUE(st["structured"]["confirmed"].get<bool>()) << st.dump(2);
  EXPECT_EQ(st["structured"]["stopped_by"], "mcp");
  EXPECT_TRUE(st["structured"]["status"] == "stopping" || st["structured"]["status"] == "ended")
      << st.dump(2);

  // The job got its stop signal from its own supervisor, wrote its checkpoint and exited; gpumeter says
  // it stopped the job (86).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (run->running() && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(run->running()) << "the run did not end after stop_run\n" << run->stderr_text();
  EXPECT_EQ(run->terminate(), 86) << run->stderr_text();
  EXPECT_NE(test::read_file(checkpoint_).find("step "), std::string::npos) << "no checkpoint written";
  EXPECT_NE(run->stdout_text().find("checkpoint written"), std::string::npos) << run->stdout_text();

  // The ledger: stopped_by mcp, the reason in the stop action, the budget change recorded.
  const auto rep = test::run_gpumeter({"report", "last", "--json", "--ledger", ledger_}, env_);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const json r = json::parse(rep.out);
  EXPECT_EQ(r["stopped_by"], "mcp");
  EXPECT_EQ(r["status"], "stopped");
  bool stop_action = false, budget_action = false, checkpoint_action = false;
  for (const auto& a : r["actions"]) {
    const std::string kind = a["kind"], message = a["message"];
    if (kind == "stop_requested" && message.find(reason) != std::string::npos) stop_action = true;
    if (kind == "budget" && message.find("budget set to $250.1") != std::string::npos &&
        message.find("by mcp") != std::string::npos)
      budget_action = true;
    if (kind == "checkpoint") checkpoint_action = true;
  }
  EXPECT_TRUE(stop_action) << r["actions"].dump(2);
  EXPECT_TRUE(budget_action) << r["actions"].dump(2);
  EXPECT_TRUE(checkpoint_action) << r["actions"].dump(2);
  EXPECT_DOUBLE_EQ(r["budget_usd"].get<double>(), 250.125);
  EXPECT_TRUE(r["last_checkpoint_s"].is_number()) << r.dump(2);
}

}  // namespace
}  // namespace gm
