// `gpumeter agent` guarding the node, end to end with the real binary and the fake NVML: autostop on an
// idle scenario (the command writes a file; never a real shutdown) and never on a busy one, an owner budget
// stopping a real process (SIGTERM, then SIGKILL after the grace for one that ignores it), and preemption
// notices from a loopback stand-in of AWS's documented IMDSv2 format counted in the metrics.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "integration/agent_fixture.h"
#include "integration/metadata_standin.h"

namespace gm::test {
namespace {

std::string one_gpu(const std::string& timeline_entry) {
  return R"({"driver_version": "580.95.05", "devices": [
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-guard-0", "pci_bus_id": "00000000:18:00.0",
     "memory_total_mib": 81559, "power_limit_w": 700, "energy_counter": true,
     "timeline": [)" +
         timeline_entry + "]}]}";
}

const char* kIdle =
    R"({"t": 0, "util": 0, "mem_used_mib": 500, "power_w": 60, "temp_c": 35, "processes": []})";
const char* kBusy =
    R"({"t": 0, "util": 90, "mem_used_mib": 9000, "power_w": 600, "temp_c": 70, "processes": []})";

class AgentNodeGuardIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { GM_ASSERT_BUILT(); }
  std::unique_ptr<Background> start(const std::string& scenario, const std::vector<std::string>& flags,
                                    int& port, const std::string& name = "agent") {
    auto bg = start_agent(dir_.write(name + ".json", scenario), dir_.path(), flags, port, name);
    return bg;
  }
  /// Waits until `path` exists (at most `timeout_s`).
  static bool wait_file(const std::string& path, double timeout_s) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      if (std::filesystem::exists(path)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return std::filesystem::exists(path);
  }
  TempDir dir_;
};

TEST_F(AgentNodeGuardIntegrationTest, AutostopOnAnIdleScenarioRunsTheCommandOnce) {
  const std::string marker = dir_.path() + "/autostopped";
  int port = 0;
  auto agent = start(one_gpu(kIdle),
                     {"--price", "3.6", "--interval", "100ms", "--preemption", "off", "--autostop-idle", "2s",
                      "--autostop-command", "echo \"$GPUMETER_EVENT\" >> " + marker},
                     port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  auto before = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  const double remaining = metric(before.out, "gpumeter_autostop_remaining_seconds ");
  EXPECT_GT(remaining, 0.0) << before.out;
  EXPECT_LE(remaining, 2.0);
  ASSERT_TRUE(wait_file(marker, 15)) << agent->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_EQ(read_file(marker), "autostop\n") << "the command runs once, with the event in its environment";
  const std::string err = agent->stderr_text();
  EXPECT_NE(err.find("[autostop_warning]"), std::string::npos) << err;
  EXPECT_NE(err.find("[autostop] every GPU idle"), std::string::npos) << err;
  auto after = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  EXPECT_EQ(metric(after.out, "gpumeter_autostop_remaining_seconds "), 0.0);
  EXPECT_EQ(metric(after.out, "gpumeter_node_guard_actions_total{kind=\"autostop\"} "), 1.0);
  // top and doctor show the agent's countdown.
  auto top =
      run_gpumeter({"top", "--once", "--interval", "50ms", "--agent", "127.0.0.1:" + std::to_string(port)},
                   fake_env(dir_.path() + "/agent.json", dir_.path()));
  EXPECT_NE(top.out.find("AGENT  autostop ran"), std::string::npos) << top.out << top.err;
  auto doctor =
      run_gpumeter({"doctor", "--preemption", "off", "--agent", "127.0.0.1:" + std::to_string(port)},
                   fake_env(dir_.path() + "/agent.json", dir_.path()));
  EXPECT_NE(doctor.out.find("agent autostop   autostop ran"), std::string::npos) << doctor.out;
  EXPECT_EQ(agent->terminate(), 0);
}

TEST_F(AgentNodeGuardIntegrationTest, AutostopNeverOnABusyScenarioAndDryRunRunsNothing) {
  const std::string marker = dir_.path() + "/autostopped";
  int port = 0;
  auto busy = start(one_gpu(kBusy),
                    {"--price", "3.6", "--interval", "100ms", "--preemption", "off", "--autostop-idle", "1s",
                     "--autostop-command", "touch " + marker},
                    port, "busy");
  ASSERT_GT(port, 0) << busy->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_FALSE(std::filesystem::exists(marker));
  auto m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  EXPECT_EQ(metric(m.out, "gpumeter_autostop_remaining_seconds "), 1.0) << m.out;
  auto doctor =
      run_gpumeter({"doctor", "--preemption", "off", "--agent", "127.0.0.1:" + std::to_string(port)},
                   fake_env(dir_.path() + "/busy.json", dir_.path()));
  EXPECT_NE(doctor.out.find("agent autostop   autostop armed: a GPU is busy"), std::string::npos)
      << doctor.out;
  EXPECT_EQ(busy->terminate(), 0);

  auto dry = start(one_gpu(kIdle),
                   {"--price", "3.6", "--interval", "100ms", "--preemption", "off", "--autostop-idle",
                    "500ms", "--autostop-command", "touch " + marker, "--autostop-dry-run"},
                   port, "dry");
  ASSERT_GT(port, 0) << dry->stderr_text();
  EXPECT_NE(dry->wait_stderr(R"((\[autostop_dry_run\]))", 15), "") << dry->stderr_text();
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_EQ(dry->terminate(), 0);
}

TEST_F(AgentNodeGuardIntegrationTest, OwnerBudgetStopsARealProcessAndKillsOneThatIgnoresSigterm) {
  // Two real processes with names of their own (so no other test's process matches the scenario's comm):
  // one that exits on SIGTERM, one that ignores it.
  const std::string polite = "gmpolite" + std::to_string(getpid() % 100000);
  const std::string stubborn = "gmstubborn" + std::to_string(getpid() % 100000);
  std::filesystem::copy_file("/bin/sleep", dir_.path() + "/" + polite);
  std::filesystem::copy_file("/bin/bash", dir_.path() + "/" + stubborn);
  Background p1({dir_.path() + "/" + polite, "300"}, {}, dir_.path(), "polite");
  Background p2({dir_.path() + "/" + stubborn, "-c", "trap '' TERM; while :; do sleep 0.2; done"}, {},
                dir_.path(), "stubborn");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string scenario =
      one_gpu(R"({"t": 0, "util": 90, "mem_used_mib": 9000, "power_w": 600, "temp_c": 70,
    "processes": [{"comm": ")" +
              polite + R"(", "mem_mib": 4000, "sm_util": 50},
                  {"comm": ")" +
              stubborn + R"(", "mem_mib": 4000, "sm_util": 40}]})");
  // Whose processes they are: this test's user, as the agent's owner resolver reads it from /proc.
  const std::string me = run_command({"id", "-un"}).out;
  const std::string name = me.substr(0, me.find('\n'));
  int port = 0;
  auto agent = start(scenario,
                     {"--price", "3600", "--interval", "100ms", "--preemption", "off", "--owner-budget",
                      "user:" + name + "=0.5/day,stop", "--budget-grace", "1s", "--node-budget", "1000/day"},
                     port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((p1.running() || p2.running()) && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(p1.running()) << agent->stderr_text();
  EXPECT_FALSE(p2.running()) << agent->stderr_text();
  EXPECT_EQ(p1.terminate(), 128 + SIGTERM);
  EXPECT_EQ(p2.terminate(), 128 + SIGKILL);
  const std::string err = agent->stderr_text();
  EXPECT_NE(err.find("[budget_stop] user:" + name + " budget $0.5"), std::string::npos) << err;
  EXPECT_NE(err.find("[sigkill]"), std::string::npos) << err;
  auto m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  EXPECT_EQ(metric(m.out, "gpumeter_budget_usd{scope=\"user:" + name + "\",period=\"day\"} "), 0.5) << m.out;
  EXPECT_GE(metric(m.out, "gpumeter_budget_spent_usd{scope=\"user:" + name + "\",period=\"day\"} "), 0.5);
  EXPECT_GE(metric(m.out, "gpumeter_node_guard_actions_total{kind=\"budget_stop\"} "), 1.0);
  EXPECT_EQ(agent->terminate(), 0);
}

// --stop-idle-held: a GPU held idle by a gpumeter run's job and by a bare process. The run is asked to stop
// through its own supervisor — its stop signal, the grace in which the job writes its checkpoint — and the
// ledger says stopped_by idle; the bare process gets SIGTERM. Nothing is killed bare.
TEST_F(AgentNodeGuardIntegrationTest, GpusHeldIdleStopAGpumeterRunThroughItsCheckpointAndOthersWithSigterm) {
  const std::string job = "gmidle" + std::to_string(getpid() % 100000);
  const std::string bare = "gmsleep" + std::to_string(getpid() % 100000);
  // A symlink's name is the process's comm, and python still finds its library through it.
  std::filesystem::create_symlink("/usr/bin/python3", dir_.path() + "/" + job);
  std::filesystem::copy_file("/bin/sleep", dir_.path() + "/" + bare);
  const std::string scenario =
      one_gpu(R"({"t": 0, "util": 0, "mem_used_mib": 9000, "power_w": 70, "temp_c": 40,
    "processes": [{"comm": ")" +
              job + R"(", "mem_mib": 4000, "sm_util": 0}, {"comm": ")" + bare +
              R"(", "mem_mib": 4000, "sm_util": 0}]})");
  const std::string scenario_path = dir_.write("held.json", scenario);
  const std::string runs = dir_.path() + "/runs";
  const std::string checkpoint = dir_.path() + "/checkpoint.txt";
  auto env = fake_env(scenario_path, dir_.path());
  env["PYTHONPATH"] = source_dir() + "/python";
  env["GPUMETER_RUNS_DIR"] = runs;
  Background run({gpumeter_binary(), "run", "--price", "3.6", "--grace", "20s", "--", dir_.path() + "/" + job,
                  source_dir() + "/tests/data/python/target_curve.py", "power", "1200", "0.05", "10", "0.003",
                  "1", checkpoint},
                 env, dir_.path(), "run");
  // The run publishes its view (its socket) before the agent starts looking.
  const auto published = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < published && run.running() &&
         (!std::filesystem::exists(runs) || std::filesystem::is_empty(runs)))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(std::filesystem::is_empty(runs)) << run.stderr_text();
  Background sleeper({dir_.path() + "/" + bare, "300"}, {}, dir_.path(), "sleeper");
  int port = 0;
  auto agent = start_agent(scenario_path, dir_.path(),
                           {"--price", "3.6", "--interval", "100ms", "--preemption", "off",
                            "--stop-idle-held", "2s", "--budget-grace", "10s", "--runs-dir", runs},
                           port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while ((run.running() || sleeper.running()) && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string err = agent->stderr_text();
  ASSERT_FALSE(run.running()) << err << run.stderr_text();
  ASSERT_FALSE(sleeper.running()) << err;
  EXPECT_EQ(run.terminate(), 86) << run.stderr_text();  // gpumeter stopped the job
  EXPECT_EQ(sleeper.terminate(), 128 + SIGTERM);
  EXPECT_NE(read_file(checkpoint).find("step "), std::string::npos) << "the job wrote no checkpoint";
  EXPECT_NE(err.find("[idle_held_stop] GPU 0 held idle"), std::string::npos) << err;
  EXPECT_NE(err.find("to stop through its checkpoint"), std::string::npos) << err;
  EXPECT_NE(err.find("sent SIGTERM to process"), std::string::npos) << err;
  EXPECT_EQ(err.find("[sigkill]"), std::string::npos) << err;
  const auto rep = run_gpumeter({"report", "last", "--json"}, env);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const auto j = nlohmann::json::parse(rep.out);
  EXPECT_EQ(j["stopped_by"], "idle");
  bool idle_action = false;
  for (const auto& a : j["actions"])
    idle_action = idle_action || (a["kind"] == "stop_idle" && a["message"].get<std::string>().find(
                                                                  "the node agent") != std::string::npos);
  EXPECT_TRUE(idle_action) << j["actions"].dump(2);
  auto m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  EXPECT_GE(metric(m.out, "gpumeter_node_guard_actions_total{kind=\"idle_held_stop\"} "), 2.0) << m.out;
  EXPECT_EQ(agent->terminate(), 0);
}

TEST_F(AgentNodeGuardIntegrationTest, AwsImdsV2DocumentedFormatNoticesAreCounted) {
  MetadataStandIn imds(cloud::CloudProvider::aws);
  int port = 0;
  auto agent = start(one_gpu(kBusy),
                     {"--price", "3.6", "--interval", "100ms", "--preemption", "aws", "--metadata-url",
                      imds.url(), "--preemption-poll", "100ms"},
                     port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  auto m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  EXPECT_NE(m.out.find("# TYPE gpumeter_preemption_notices_total counter"), std::string::npos) << m.out;
  imds.notify(120'000);
  EXPECT_NE(agent->wait_stderr(R"((\[preempted\] AWS spot interruption notice))", 15), "")
      << agent->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  EXPECT_EQ(metric(m.out, "gpumeter_preemption_notices_total{provider=\"aws\",kind=\"terminate\"} "), 1.0)
      << m.out;
  EXPECT_EQ(agent->terminate(), 0);
}

TEST_F(AgentNodeGuardIntegrationTest, BadGuardFlagsAreUsageErrors) {
  const std::string scenario = dir_.write("s.json", one_gpu(kIdle));
  for (const auto& [args, needle] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--autostop-idle", "10m"}, "--autostop-command"},
           {{"--autostop-command", "true"}, "--autostop-idle"},
           {{"--autostop-idle", "soon", "--autostop-command", "true"}, "--autostop-idle 'soon'"},
           {{"--node-budget", "100"}, "--node-budget '100'"},
           {{"--owner-budget", "team:x=5/day"}, "unknown owner kind 'team'"}}) {
    std::vector<std::string> argv{"agent", "--once", "--preemption", "off"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_gpumeter(argv, fake_env(scenario, dir_.path()));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace gm::test
