// The agent's view of runs end to end (docs/agent.md "Runs"): `gpumeter run --target` on a job with a known
// learning curve publishes its live view; `gpumeter agent` beside it, on the fake NVML, exports the target's
// series while the run goes, and drops them once the run has ended.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <thread>

#include "agent_fixture.h"

namespace gm {
namespace {

using test::Background;

TEST(AgentRunsIntegration, ARunsTargetForecastIsScrapedWhileItGoesAndDropsOutAfter) {
  GM_ASSERT_BUILT();
  test::TempDir dir;
  const std::string scenario = dir.write("scenario.json", test::one_gpu_scenario("python3", 97));
  const std::string runs_dir = dir.path() + "/runs";
  int port = 0;
  auto agent = test::start_agent(scenario, dir.path(),
                                 {"--price", "3.6", "--interval", "200ms", "--runs-dir", runs_dir}, port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";

  auto env = test::fake_env(scenario, dir.path());
  env["PYTHONPATH"] = test::source_dir() + "/python";
  env["GPUMETER_RUNS_DIR"] = runs_dir;
  Background run(
      {test::gpumeter_binary(), "run", "--price", "3600", "--target", "loss<=2.2", "--status-every", "1s",
       "--", "python3", test::source_dir() + "/tests/data/python/target_curve.py", "power", "300", "0.05",
       "1", "0.003", "1", dir.path() + "/checkpoint.txt"},
      env, dir.path(), "run");

  // Scrape until the forecast is on track with its cost and interval (the run's status line says the same).
  const std::regex on_track(
      R"re(gpumeter_run_target_verdict\{run_id="(\d+)",pid="(\d+)",verdict="on_track"\} 1)re");
  std::string text, run_id, pid;
  bool too_early_seen = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && run.running()) {
    auto r = test::curl(url);
    std::smatch m;
    too_early_seen = too_early_seen || r.out.find("verdict=\"too_early\"} 1") != std::string::npos;
    if (r.exit_code == 0 && std::regex_search(r.out, m, on_track) &&
        r.out.find("gpumeter_run_target_cost_to_reach_usd{") != std::string::npos) {
      text = r.out;
      run_id = m[1];
      pid = m[2];
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(text.empty()) << "no on_track target series while the run went\nrun:\n"
                             << run.stderr_text() << "\nagent:\n"
                             << agent->stderr_text();
  EXPECT_TRUE(too_early_seen) << "the verdict was not too_early first";
  EXPECT_EQ(pid, std::to_string(run.pid()));  // the meter's PID names the run on the node
  const std::string id = "{run_id=\"" + run_id + "\",pid=\"" + pid + "\"";
  EXPECT_NE(text.find("gpumeter_run_info" + id + ",user=\""), std::string::npos) << text;
  EXPECT_NE(text.find("gpumeter_run_target_info" + id + ",metric=\"loss\",op=\"<=\",value=\"2.2\"} 1"),
            std::string::npos)
      << text;
  EXPECT_EQ(test::metric(text, "gpumeter_run_target_reached" + id + "}"), 0);
  const double cost = test::metric(text, "gpumeter_run_target_cost_to_reach_usd" + id + "}");
  const double low = test::metric(text, "gpumeter_run_target_cost_to_reach_low_usd" + id + "}");
  const double step = test::metric(text, "gpumeter_run_target_forecast_step" + id + "}");
  EXPECT_GT(cost, 0);
  EXPECT_LE(low, cost);
  EXPECT_GT(step, 0);
  EXPECT_LE(step, 300);
  const double high = test::metric(text, "gpumeter_run_target_cost_to_reach_high_usd" + id + "}");
  if (!std::isnan(high)) {
    EXPECT_GE(high, cost);
  }
  std::printf("scraped: run %s target loss<=2.2 on_track at ~step %.0f, $%.2f [$%.2f-$%.2f]\n",
              run_id.c_str(), step, cost, low, high);

  // The target is reached on the way (at step 205 of 300): the verdict and the flag say so while it runs.
  bool reached_seen = false;
  while (!reached_seen && run.running()) {
    const std::string now = test::curl(url).out;
    reached_seen =
        test::metric(now, "gpumeter_run_target_reached" + id + "}") == 1 &&
        now.find("gpumeter_run_target_verdict" + id + ",verdict=\"reached\"} 1") != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(reached_seen) << run.stderr_text();

  // The run ends: its view is withdrawn and its series drop out.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (run.running() && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_FALSE(run.running()) << run.stderr_text();
  EXPECT_FALSE(std::filesystem::exists(runs_dir + "/run-" + pid + ".json"));
  std::string after;
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    after = test::curl(url).out;
    if (after.find("gpumeter_run_") == std::string::npos) break;
  }
  EXPECT_EQ(after.find("gpumeter_run_"), std::string::npos) << after;
  EXPECT_NE(after.find("gpumeter_gpu_"), std::string::npos);  // the agent still exports its devices
}

}  // namespace
}  // namespace gm
