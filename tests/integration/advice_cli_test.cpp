// Issue 31 end to end: startup_overhead on a run whose GPU idles first (fake-NVML timeline), a real Optuna
// study under `gpumeter run` that stops at its $ budget, and the trace findings fp32_math /
// unfused_attention from `gpumeter trace` on the shipped samples.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/support.h"

namespace gm {
namespace {

using test::run_gpumeter;
using test::TempDir;

/// One H100 idle (no process) for `idle_s` seconds, then busy at 90 % with every process named `comm`.
std::string late_start_scenario(const std::string& comm, int idle_s) {
  nlohmann::json proc = {{"comm", comm}, {"mem_mib", 20000}, {"sm_util", 90}};
  nlohmann::json j = {{"driver_version", "580.95.05"},
                      {"devices",
                       {{{"name", "NVIDIA H100 80GB HBM3"},
                         {"uuid", "GPU-31313131-2222-3333-4444-555555555555"},
                         {"pci_bus_id", "00000000:18:00.0"},
                         {"memory_total_mib", 81559},
                         {"power_limit_w", 700},
                         {"energy_counter", true},
                         {"mig", false},
                         {"timeline",
                          {{{"t", 0},
                            {"util", 0},
                            {"mem_used_mib", 500},
                            {"power_w", 70},
                            {"temp_c", 35},
                            {"processes", nlohmann::json::array()}},
                           {{"t", idle_s},
                            {"util", 90},
                            {"mem_used_mib", 20500},
                            {"power_w", 600},
                            {"temp_c", 60},
                            {"processes", {proc}}}}}}}}};
  return j.dump();
}

const nlohmann::json* finding(const nlohmann::json& fs, const std::string& kind) {
  for (const auto& f : fs)
    if (f["kind"] == kind) return &f;
  return nullptr;
}

class AdviceIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { GM_ASSERT_BUILT(); }
  std::map<std::string, std::string> env(const std::string& scenario) {
    auto e = test::fake_env(dir_.write("scenario.json", scenario), dir_.path());
    e["PYTHONPATH"] = test::source_dir() + "/python";
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    return e;
  }
  TempDir dir_;
};

TEST_F(AdviceIntegrationTest, StartupOverheadIsTheBilledTimeBeforeTheGpuFirstWorks) {
  // $3600/GPU-h = $0.001 a millisecond. The GPU idles for 3 s, then the job's process runs on it.
  auto e = env(late_start_scenario("sleep", 3));
  const std::string json_report = dir_.path() + "/r.json";
  auto r = run_gpumeter({"run", "--price", "3600", "--json-report", json_report, "--", "sleep", "6"}, e);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The end of `run` shows the figure and the finding.
  EXPECT_NE(r.err.find("start-up"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("startup_overhead"), std::string::npos) << r.err;

  auto rep = run_gpumeter({"report", "last", "--json"}, e);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  auto j = nlohmann::json::parse(rep.out);
  const double startup_s = j["startup_s"].get<double>();
  // The first sample that shows work closes the interval in which the work began: its start is the
  // start-up, within one metering interval of the scenario's 3 s.
  EXPECT_GE(startup_s, 1.9) << j.dump();
  EXPECT_LE(startup_s, 3.1) << j.dump();
  // Meter's micro-dollars: exactly the start-up's milliseconds at $0.001 each, on the one allocated GPU.
  EXPECT_NEAR(j["startup_cost_usd"].get<double>(), startup_s, 1e-9);
  const auto* f = finding(j["findings"], "startup_overhead");
  ASSERT_NE(f, nullptr) << j["findings"].dump();
  EXPECT_NEAR((*f)["cost_usd"].get<double>(), startup_s, 1e-9);
  EXPECT_NE((*f)["severity"], "info");
  EXPECT_NE((*f)["action"].get<std::string>().find("prebuilt image"), std::string::npos);
  EXPECT_EQ(finding(j["findings"], "idle_stretch"), nullptr) << "the start-up is not also an idle stretch";
  // The same report from the json written by `run` itself.
  auto own = nlohmann::json::parse(test::read_file(json_report));
  EXPECT_EQ(own["startup_s"], j["startup_s"]);

  // The run page: the figure in the summary and the first-work line on the time charts.
  const std::string page_path = dir_.path() + "/run.html";
  auto page = run_gpumeter({"report", "last", "--html", page_path}, e);
  ASSERT_EQ(page.exit_code, 0) << page.err;
  const std::string html = test::read_file(page_path);
  EXPECT_NE(html.find("start-up (before the first GPU work)"), std::string::npos);
  EXPECT_NE(html.find("\"kind\":\"startup\""), std::string::npos);
}

TEST_F(AdviceIntegrationTest, NoStartupOverheadWhenTheGpuWorksFromTheStart) {
  auto e = env(test::one_gpu_scenario("sleep", 90));
  auto r = run_gpumeter({"run", "--price", "3600", "--", "sleep", "2.5"}, e);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(run_gpumeter({"report", "last", "--json"}, e).out);
  EXPECT_EQ(j["startup_s"].get<double>(), 0.0);
  EXPECT_EQ(finding(j["findings"], "startup_overhead"), nullptr);
}

TEST_F(AdviceIntegrationTest, OptunaStudyUnderRunStopsAtItsBudgetWithEachTrialsCost) {
  // Real Optuna (python3-optuna): 0.4 s trials at $3600/GPU-h ($1 a second), a $1.50 budget.
  auto e = env(test::one_gpu_scenario("python3", 90));
  const std::string study = test::source_dir() + "/tests/data/python/optuna_study.py";
  auto r = run_gpumeter(
      {"run", "--price", "3600", "--quiet", "--", "/usr/bin/python3", study, "0.4", "1.5", "0.5"}, e,
      std::nullopt, 120);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto line = r.out.substr(r.out.find('{'));
  auto j = nlohmann::json::parse(line);
  EXPECT_TRUE(j["metered"].get<bool>());
  const auto& trials = j["trials"];
  ASSERT_GE(trials.size(), 3u);
  EXPECT_LT(trials.size(), 10u) << "the study stopped at its budget, far before its 100 trials";
  double sum = 0, before_last = 0;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const auto& t = trials[i];
    ASSERT_TRUE(t["user_attrs"].contains("cost_usd")) << t.dump();
    const double c = t["user_attrs"]["cost_usd"].get<double>();
    // Each trial holds the GPU about 0.4 s: $0.40 at $1 a second (plus Optuna's own time).
    EXPECT_GE(c, 0.35) << t.dump();
    EXPECT_LE(c, 1.2) << t.dump();
    EXPECT_EQ(t["user_attrs"]["cost_source"], "gpumeter");
    if (i + 1 < trials.size()) before_last += c;
    sum += c;
  }
  EXPECT_GE(sum, 1.5) << "stopped once the spend reached the budget";
  EXPECT_LT(before_last, 1.5) << "not before";
  EXPECT_NEAR(j["spent_usd"].get<double>(), sum, 1e-6);
  EXPECT_NEAR(j["study_user_attrs"]["gpumeter_stopped_at_usd"].get<double>(), sum, 1e-6);
  // The long trials (10 steps of 0.1 s, about $1 each) are pruned once their forecast passes $0.50.
  for (const auto& t : j["pruned"]) {
    EXPECT_EQ(t["state"], "PRUNED") << t.dump();
    EXPECT_GT(t["user_attrs"]["pruned_for_cost_usd"].get<double>(), 0.5);
    EXPECT_LT(t["user_attrs"]["cost_usd"].get<double>(), 0.9);
  }
  const auto& per = j["per_improvement"];
  EXPECT_NEAR(per["cost_usd"].get<double>(), sum, 1e-6);
  if (per["improvement"].get<double>() > 0) {
    EXPECT_NEAR(per["usd_per_unit"].get<double>(), sum / per["improvement"].get<double>(), 1e-9);
  }

  // Outside gpumeter: wall time only, and it says so.
  auto bare = test::run_command({"/usr/bin/python3", study, "0.01", "1.5", "0.5"},
                                {{"PYTHONPATH", test::source_dir() + "/python"},
                                 {"GPUMETER_STATUS_FILE", "\x01unset"},
                                 {"GPUMETER_SOCKET", "\x01unset"}});
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  EXPECT_NE(bare.err.find("recording wall time only"), std::string::npos) << bare.err;
  auto b = nlohmann::json::parse(bare.out.substr(bare.out.find('{')));
  EXPECT_FALSE(b["metered"].get<bool>());
  EXPECT_EQ(b["trials"].size(), 100u) << "no budget to stop at";
  EXPECT_FALSE(b["trials"][0]["user_attrs"].contains("cost_usd"));
  EXPECT_TRUE(b["trials"][0]["user_attrs"].contains("wall_s"));
}

TEST(AdviceTraceIntegrationTest, TraceShowsFp32MathAndUnfusedAttentionWithDollars) {
  const std::string data = test::source_dir() + "/tests/data/trace/";
  auto r = run_gpumeter({"trace", data + "resnet50_v100_num_workers_0.json.gz", "--json", "--price", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto* fp32 = finding(j["devices"][0]["findings"], "fp32_math");
  ASSERT_NE(fp32, nullptr) << j["devices"][0]["findings"].dump();
  EXPECT_GT((*fp32)["cost_usd"].get<double>(), 0);
  // Without --price, the catalog prices the V100 (DGX Station board name mapped to the SXM2 V100).
  auto unpriced = run_gpumeter({"trace", data + "resnet50_v100_num_workers_0.json.gz"});
  ASSERT_EQ(unpriced.exit_code, 0) << unpriced.err;
  EXPECT_NE(unpriced.out.find("fp32_math"), std::string::npos) << unpriced.out;

  auto cpu = run_gpumeter({"trace", data + "gpt2_attention_explicit_cpu.json.gz", "--price", "3"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_NE(cpu.out.find("CPU only"), std::string::npos) << cpu.out;
  EXPECT_NE(cpu.out.find("unfused_attention"), std::string::npos) << cpu.out;
  auto sdpa = run_gpumeter({"trace", data + "gpt2_attention_sdpa_cpu.json.gz", "--json"});
  ASSERT_EQ(sdpa.exit_code, 0) << sdpa.err;
  EXPECT_EQ(nlohmann::json::parse(sdpa.out)["files"][0]["host"]["findings"].size(), 0u) << sdpa.out;
  auto gpu = run_gpumeter({"trace", data + "gpt2_attention_explicit_gpu.json.gz", "--json", "--price", "2"});
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  auto g = nlohmann::json::parse(gpu.out);
  const auto* att = finding(g["devices"][0]["findings"], "unfused_attention");
  ASSERT_NE(att, nullptr) << gpu.out.substr(0, 3000);
  EXPECT_GT((*att)["cost_usd"].get<double>(), 0);
}

}  // namespace
}  // namespace gm
