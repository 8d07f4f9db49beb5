// Issue 35 end to end on the fake NVML: start-up lasts until the job's GPU first does work, not until its
// process appears on it (a CUDA context is not work), and a run stopped during its start-up gets no advice
// drawn from a steady state it never reached.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/support.h"

namespace gm {
namespace {

using test::run_gpumeter;
using test::TempDir;

/// One H100: nothing on it until `process_s`, then the job's process (every process named `comm`) holding
/// `mem_mib` at 0 % utilization, then from `work_s` (when >= 0) computing at 95 %.
std::string context_then_work_scenario(const std::string& comm, int process_s, int work_s, int mem_mib) {
  auto segment = [&](int t, int util, bool process) {
    nlohmann::json procs = nlohmann::json::array();
    if (process) procs.push_back({{"comm", comm}, {"mem_mib", mem_mib}, {"sm_util", util}});
    return nlohmann::json{{"t", t},
                          {"util", util},
                          {"mem_used_mib", process ? mem_mib + 500 : 500},
                          {"power_w", util > 0 ? 600 : 90},
                          {"temp_c", 40},
                          {"processes", procs}};
  };
  nlohmann::json timeline = {segment(0, 0, false), segment(process_s, 0, true)};
  if (work_s >= 0) timeline.push_back(segment(work_s, 95, true));
  nlohmann::json j = {{"driver_version", "580.95.05"},
                      {"devices",
                       {{{"name", "NVIDIA H100 80GB HBM3"},
                         {"uuid", "GPU-35353535-2222-3333-4444-555555555555"},
                         {"pci_bus_id", "00000000:18:00.0"},
                         {"memory_total_mib", 81559},
                         {"power_limit_w", 700},
                         {"energy_counter", true},
                         {"mig", false},
                         {"timeline", timeline}}}}};
  return j.dump();
}

const nlohmann::json* finding(const nlohmann::json& fs, const std::string& kind) {
  for (const auto& f : fs)
    if (f["kind"] == kind) return &f;
  return nullptr;
}

class StartupSteadyStateIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { GM_ASSERT_BUILT(); }
  std::map<std::string, std::string> env(const std::string& scenario) {
    auto e = test::fake_env(dir_.write("scenario.json", scenario), dir_.path());
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    return e;
  }
  TempDir dir_;
};

TEST_F(StartupSteadyStateIntegrationTest, StartupLastsUntilTheGpuComputesNotUntilTheProcessAppears) {
  // The job's process holds a CUDA context from 3 s; the GPU computes from 8 s. $1 a second.
  auto e = env(context_then_work_scenario("sleep", 3, 8, 9000));
  const std::string json_report = dir_.path() + "/r.json";
  auto r = run_gpumeter({"run", "--price", "3600", "--json-report", json_report, "--", "sleep", "11"}, e);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(test::read_file(json_report));
  // The first sample that shows a change closes the metering interval (1 s) in which it began.
  const double startup_s = j["startup_s"].get<double>();
  EXPECT_GE(startup_s, 8.0 - 1.1) << j.dump();
  EXPECT_LE(startup_s, 8.0 + 0.1) << j.dump();
  const double process_s = j["process_on_gpu_s"].get<double>();
  EXPECT_GE(process_s, 3.0 - 1.1) << j.dump();
  EXPECT_LE(process_s, 3.0 + 0.1) << j.dump();
  EXPECT_EQ(j["steady_state"], true);
  const auto* f = finding(j["findings"], "startup_overhead");
  ASSERT_NE(f, nullptr) << j["findings"].dump();
  EXPECT_NEAR((*f)["cost_usd"].get<double>(), startup_s, 1e-9) << "the finding prices startup_s";
  EXPECT_NE(r.err.find("a process of the job from"), std::string::npos) << r.err;
  // `report` from the ledger says the same.
  auto rep = run_gpumeter({"report", "last", "--json"}, e);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const auto l = nlohmann::json::parse(rep.out);
  EXPECT_EQ(l["startup_s"], j["startup_s"]);
  EXPECT_EQ(l["process_on_gpu_s"], j["process_on_gpu_s"]);
}

TEST_F(StartupSteadyStateIntegrationTest, ARunStoppedDuringItsStartupGetsNoUtilizationOrRightsizingAdvice) {
  // The process holds 17.5 GiB from 1 s and the GPU never computes; the budget stops the job at $4 (4 s).
  auto e = env(context_then_work_scenario("sleep", 1, -1, 17920));
  const std::string json_report = dir_.path() + "/r.json";
  auto r = run_gpumeter({"run", "--price", "3600", "--budget", "4", "--grace", "1s", "--json-report",
                         json_report, "--", "sleep", "60"},
                        e, std::nullopt, 60);
  ASSERT_EQ(r.exit_code, 86) << r.err;
  const auto j = nlohmann::json::parse(test::read_file(json_report));
  EXPECT_EQ(j["stopped_by"], "budget");
  EXPECT_EQ(j["steady_state"], false) << j.dump();
  EXPECT_TRUE(j["startup_s"].is_null()) << "the start-up never ended: " << j.dump();
  EXPECT_FALSE(j["process_on_gpu_s"].is_null()) << j.dump();
  EXPECT_TRUE(j["rightsizing"].is_null()) << "no rightsizing from the memory reached so far: " << j.dump();
  EXPECT_EQ(finding(j["findings"], "low_utilization"), nullptr) << j["findings"].dump();
  EXPECT_EQ(finding(j["findings"], "idle_stretch"), nullptr) << j["findings"].dump();
  for (const auto& f : j["findings"]) EXPECT_TRUE(f["usd_per_month"].is_null()) << f.dump();
  bool said = false;
  for (const auto& n : j["notes"])
    said = said || n.get<std::string>().find("start-up only") != std::string::npos;
  EXPECT_TRUE(said) << j["notes"].dump();
  EXPECT_NE(r.err.find("steady state    not reached"), std::string::npos) << r.err;

  // The same GPU through a job that ends by itself: it ran as it runs, and the idle GPU is advice.
  auto ok = run_gpumeter({"run", "--price", "3600", "--json-report", json_report, "--", "sleep", "3"}, e);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const auto k = nlohmann::json::parse(test::read_file(json_report));
  EXPECT_EQ(k["steady_state"], true) << k.dump();
  EXPECT_NE(finding(k["findings"], "low_utilization"), nullptr) << k["findings"].dump();
}

}  // namespace
}  // namespace gm
