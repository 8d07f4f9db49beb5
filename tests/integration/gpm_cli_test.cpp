// Issue 37 end to end on the fake NVML: GPM values in `gpus --json` and /metrics (null / absent where not
// supported, MIG instances too), a run's MFU equal to its definition, and the run findings GPM alone gives.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "agent_fixture.h"
#include "plan/plan.h"
#include "support/support.h"

namespace gm::test {
namespace {

using nlohmann::json;

const char* kGpmKeys[] = {"sm_active_pct",   "sm_occupancy_pct", "tensor_active_pct", "fp32_active_pct",
                          "fp16_active_pct", "fp64_active_pct",  "dram_bw_util_pct"};

std::string h200_recorded() {
  return read_file(source_dir() + "/tests/data/gpm/h200_bf16_vs_fp32.json");
}

/// One H200 running `comm` (the job) with GPM activity `gpm` (a JSON object, or "" for none).
std::string h200_job(const std::string& comm, int util, const std::string& gpm) {
  return R"({"devices": [{"name": "NVIDIA H200", "uuid": "GPU-h200", "memory_total_mib": 143771,
    "power_limit_w": 700, "timeline": [{"t": 0, "util": )" +
         std::to_string(util) + R"(, "mem_used_mib": 30000, "power_w": 600, "temp_c": 60,
    "processes": [{"comm": ")" +
         comm + R"(", "mem_mib": 29000, "sm_util": )" + std::to_string(util) + "}]" +
         (gpm.empty() ? "" : R"(, "gpm": )" + gpm) + "}]}]}";
}

TEST(GpmCliIntegrationTest, GpusJsonGivesEveryGpmValueOfTheRecordedH200) {
  GM_ASSERT_BUILT();
  TempDir dir;
  const auto r = run_gpumeter({"gpus", "--json"}, fake_env(dir.write("s.json", h200_recorded()), dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json d = json::parse(r.out)["devices"][0];
  EXPECT_EQ(d["utilization_pct"], 98);
  // The bf16 matrix product: tensor cores 86 %, FP32 pipe idle.
  EXPECT_DOUBLE_EQ(d["sm_active_pct"].get<double>(), 93.5);
  EXPECT_DOUBLE_EQ(d["sm_occupancy_pct"].get<double>(), 16.8);
  EXPECT_DOUBLE_EQ(d["tensor_active_pct"].get<double>(), 86.3);
  EXPECT_DOUBLE_EQ(d["fp32_active_pct"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(d["fp16_active_pct"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(d["fp64_active_pct"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(d["dram_bw_util_pct"].get<double>(), 21.5);
  // The table shows a TENSOR column.
  const auto t = run_gpumeter({"gpus"}, fake_env(dir.write("s2.json", h200_recorded()), dir.path()));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("TENSOR"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("86%"), std::string::npos) << t.out;
}

TEST(GpmCliIntegrationTest, WithoutGpmEveryKeyIsNullAndDoctorSaysWhy) {
  GM_ASSERT_BUILT();
  TempDir dir;
  const std::string scen = dir.write("s.json", h200_job("nobody-here", 50, ""));
  const auto r = run_gpumeter({"gpus", "--json"}, fake_env(scen, dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json d = json::parse(r.out)["devices"][0];
  for (const char* key : kGpmKeys) {
    ASSERT_TRUE(d.contains(key)) << key;
    EXPECT_TRUE(d[key].is_null()) << key << " = " << d[key];
  }
  const auto doc = run_gpumeter({"doctor"}, fake_env(scen, dir.path()));
  EXPECT_NE((doc.out + doc.err).find("GPM"), std::string::npos) << doc.out << doc.err;
}

TEST(GpmCliIntegrationTest, MigInstancesCarryTheirOwnGpmValues) {
  GM_ASSERT_BUILT();
  TempDir dir;
  const std::string scen =
      dir.write("s.json", R"({"devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-m",
    "memory_total_mib": 81559, "mig": true, "mig_instances": [
      {"uuid": "MIG-a", "gpu_instance_id": 3, "memory_total_mib": 40192, "mem_used_mib": 10, "slices": 3,
       "gpm": {"sm_util": 61, "sm_occupancy": 9, "tensor_util": 44, "fp32_util": 2, "fp16_util": 1, "fp64_util": 0,
               "dram_bw_util": 35}},
      {"uuid": "MIG-b", "gpu_instance_id": 9, "memory_total_mib": 9856, "mem_used_mib": 10, "slices": 1}],
    "timeline": [{"t": 0, "util": 40, "mem_used_mib": 1000, "power_w": 200}]}]})");
  const auto r = run_gpumeter({"gpus", "--json"}, fake_env(scen, dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json d = json::parse(r.out)["devices"][0];
  EXPECT_TRUE(d["tensor_active_pct"].is_null());  // the board itself answers no GPM here
  const json& a = d["mig_instances"][0];
  EXPECT_DOUBLE_EQ(a["sm_active_pct"].get<double>(), 61);
  EXPECT_DOUBLE_EQ(a["sm_occupancy_pct"].get<double>(), 9);
  EXPECT_DOUBLE_EQ(a["tensor_active_pct"].get<double>(), 44);
  EXPECT_DOUBLE_EQ(a["fp32_active_pct"].get<double>(), 2);
  EXPECT_DOUBLE_EQ(a["fp16_active_pct"].get<double>(), 1);
  EXPECT_DOUBLE_EQ(a["fp64_active_pct"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(a["dram_bw_util_pct"].get<double>(), 35);
  for (const char* key : kGpmKeys) EXPECT_TRUE(d["mig_instances"][1][key].is_null()) << key;
}

TEST(GpmCliIntegrationTest, MetricsExportTheGpmSeriesAsRatiosOnlyWhereSupported) {
  GM_ASSERT_BUILT();
  TempDir dir;
  const auto r = run_gpumeter({"agent", "--once", "--interval", "200ms", "--price", "4"},
                              fake_env(dir.write("s.json", h200_recorded()), dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string dev = R"({gpu="0",uuid="GPU-h200-gpm",model="NVIDIA H200"} )";
  const std::pair<const char*, double> want[] = {
      {"gpumeter_gpu_sm_active_ratio", 0.935},     {"gpumeter_gpu_sm_occupancy_ratio", 0.168},
      {"gpumeter_gpu_tensor_active_ratio", 0.863}, {"gpumeter_gpu_fp32_active_ratio", 0.0},
      {"gpumeter_gpu_fp16_active_ratio", 0.0},     {"gpumeter_gpu_fp64_active_ratio", 0.0},
      {"gpumeter_gpu_dram_bw_util_ratio", 0.215}};
  for (const auto& [name, value] : want) {
    EXPECT_NEAR(metric(r.out, std::string(name) + dev.substr(0, dev.size() - 1)), value, 1e-9) << name << "\n"
                                                                                               << r.out;
    EXPECT_NE(r.out.find(std::string("# TYPE ") + name + " gauge"), std::string::npos) << name;
  }
  const std::string expo = dir.write("expo.txt", r.out);
  EXPECT_EQ(run_command({"sh", "-c", "promtool check metrics < " + expo}).exit_code, 0);
  // No GPM: no series at all (never a 0).
  const auto none = run_gpumeter({"agent", "--once", "--interval", "200ms", "--price", "4"},
                                 fake_env(dir.write("n.json", h200_job("nobody-here", 50, "")), dir.path()));
  ASSERT_EQ(none.exit_code, 0) << none.err;
  for (const auto& [name, value] : want) EXPECT_EQ(none.out.find(name), std::string::npos) << name;
}

/// A job that reports its FLOPs per token once and then tokens, as gpumeter.progress() does.
std::string token_job(TempDir& dir, double flops_per_token) {
  return dir.write("job.py",
                   "import time, gpumeter\n"
                   "gpumeter.progress(flops_per_token=" +
                       std::to_string(flops_per_token) +
                       ")\n"
                       "for i in range(1, 5):\n"
                       "    time.sleep(0.6)\n"
                       "    gpumeter.progress(step=i, total_steps=4, tokens=i * 2_000_000)\n");
}

std::map<std::string, std::string> run_env(TempDir& dir, const std::string& scenario) {
  auto e = fake_env(dir.write("s.json", scenario), dir.path());
  e["PYTHONPATH"] = source_dir() + "/python";
  e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
  return e;
}

/// MFU = tokens × FLOPs per token ÷ (the H200's 989.5 dense bf16 TFLOPS × GPUs × the time after start-up).
void expect_mfu_is_its_definition(const json& j, double flops_per_token) {
  ASSERT_TRUE(j["mfu"].is_number()) << j.dump(2);
  ASSERT_TRUE(j["startup_s"].is_number()) << j.dump(2);
  EXPECT_DOUBLE_EQ(j["flops_per_token"].get<double>(), flops_per_token);
  const double seconds = j["wall_s"].get<double>() - j["startup_s"].get<double>();
  const double expected = j["tokens"].get<double>() * flops_per_token /
                          (989.5e12 * static_cast<double>(j["gpus_allocated"].size()) * seconds);
  EXPECT_NEAR(j["mfu"].get<double>(), expected, expected * 1e-9);
  EXPECT_GT(j["mfu"].get<double>(), 0);
  EXPECT_LE(j["mfu"].get<double>(), 1);
}

TEST(GpmCliIntegrationTest, RunMfuFromTheClientEqualsItsDefinition) {
  GM_ASSERT_BUILT();
  TempDir dir;
  const auto env = run_env(dir, h200_job("python3", 98, R"({"sm_util": 93.5, "sm_occupancy": 16.8,
      "tensor_util": 86.3, "fp32_util": 0.0, "fp16_util": 0.0, "fp64_util": 0.0, "dram_bw_util": 21.5})"));
  // 1.5e7 FLOPs per token: 8e6 tokens in ~2.4 s is ~5 % of an H200's dense bf16 peak.
  const auto r = run_gpumeter({"run", "--price", "3.5", "--json-report", dir.path() + "/r.json", "--",
                               "python3", token_job(dir, 1.5e7)},
                              env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(read_file(dir.path() + "/r.json"));
  EXPECT_EQ(j["tokens"], 8'000'000);
  expect_mfu_is_its_definition(j, 1.5e7);
  EXPECT_NE(j["mfu_basis"].get<std::string>().find("client"), std::string::npos) << j["mfu_basis"];
  // Per GPU: GPM averages while working.
  const json& g = j["gpus"][0];
  EXPECT_DOUBLE_EQ(g["tensor_active_pct"].get<double>(), 86.3);
  EXPECT_DOUBLE_EQ(g["sm_active_pct"].get<double>(), 93.5);
  EXPECT_DOUBLE_EQ(g["dram_bw_util_pct"].get<double>(), 21.5);
  // The ledger gives the same report.
  const auto rep = run_gpumeter({"report", "last", "--json"}, env);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const json l = json::parse(rep.out);
  EXPECT_DOUBLE_EQ(l["mfu"].get<double>(), j["mfu"].get<double>());
  EXPECT_DOUBLE_EQ(l["gpus"][0]["tensor_active_pct"].get<double>(), 86.3);
  // No finding about the math of a healthy bf16 job.
  for (const auto& f : j["findings"]) {
    EXPECT_NE(f["kind"], "fp32_math");
    EXPECT_NE(f["kind"], "low_tensor_activity");
  }
}

TEST(GpmCliIntegrationTest, AnImpossibleMfuIsNotShownButExplained) {
  GM_ASSERT_BUILT();
  TempDir dir;
  const auto env = run_env(dir, h200_job("python3", 98, ""));
  // 1.5e10 FLOPs per token × 8e6 tokens in ~2.4 s would be ~50 times the H200's peak.
  const auto r = run_gpumeter({"run", "--price", "3.5", "--json-report", dir.path() + "/r.json", "--",
                               "python3", token_job(dir, 1.5e10)},
                              env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(read_file(dir.path() + "/r.json"));
  EXPECT_TRUE(j["mfu"].is_null()) << j["mfu"];
  EXPECT_DOUBLE_EQ(j["flops_per_token"].get<double>(), 1.5e10);
  EXPECT_NE(j["notes"].dump().find("too high"), std::string::npos) << j["notes"];
}

TEST(GpmCliIntegrationTest, RunModelFlopsPerTokenIsThePlannersTrainingFigure) {
  GM_ASSERT_BUILT();
  TempDir dir;
  const auto env = run_env(dir, h200_job("python3", 98, ""));
  const std::string job = dir.write("job.py",
                                    "import time, gpumeter\n"
                                    "time.sleep(1.2)\n"
                                    "gpumeter.progress(step=1, tokens=2000)\n"
                                    "time.sleep(0.3)\n");
  const auto r = run_gpumeter({"run", "--price", "3.5", "--model", "llama-3-8b", "--seq", "4096",
                               "--json-report", dir.path() + "/r.json", "--", "python3", job},
                              env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(read_file(dir.path() + "/r.json"));
  const auto model = plan::find_model("llama-3-8b");
  ASSERT_TRUE(model.ok()) << model.error().message;
  expect_mfu_is_its_definition(j, plan::training_flops_per_token(*model, 4096));
  EXPECT_NE(j["mfu_basis"].get<std::string>().find("llama-3-8b"), std::string::npos) << j["mfu_basis"];
  // Without GPM the per-GPU values are null, never 0.
  for (const char* key : kGpmKeys) EXPECT_TRUE(j["gpus"][0][key].is_null()) << key;
  // A Hugging Face config file, as `plan --model PATH` reads it (the H200's recorded Qwen2.5-0.5B).
  const std::string config = source_dir() + "/tests/data/plan/hf_configs/qwen2.5-0.5b.json";
  const auto hf = run_gpumeter({"run", "--price", "3.5", "--model", config, "--seq", "1024", "--json-report",
                                dir.path() + "/hf.json", "--", "python3", job},
                               env);
  ASSERT_EQ(hf.exit_code, 0) << hf.err;
  const json h = json::parse(read_file(dir.path() + "/hf.json"));
  const auto qwen = plan::load_hf_config(config);
  ASSERT_TRUE(qwen.ok()) << qwen.error().message;
  expect_mfu_is_its_definition(h, plan::training_flops_per_token(*qwen, 1024));
  const auto bad = run_gpumeter({"run", "--model", "no-such-model", "--", "true"}, env);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("no-such-model"), std::string::npos) << bad.err;
}

/// The kinds of a run's findings, after running `sleep 3` on a scenario with `gpm`.
json run_findings_on(TempDir& dir, int util, const std::string& gpm,
                     const std::vector<std::string>& extra = {}) {
  const auto env = run_env(dir, h200_job("sleep", util, gpm));
  std::vector<std::string> args = {"run", "--price", "3.5", "--json-report", dir.path() + "/r.json"};
  args.insert(args.end(), extra.begin(), extra.end());
  for (const char* a : {"--", "sleep", "3"}) args.emplace_back(a);
  const auto r = run_gpumeter(args, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(read_file(dir.path() + "/r.json"))["findings"];
}

const json* finding(const json& list, const std::string& kind) {
  for (const auto& f : list)
    if (f["kind"] == kind) return &f;
  return nullptr;
}

TEST(GpmCliIntegrationTest, Fp32MathOnATensorCoreGpuFromGpmAlone) {
  GM_ASSERT_BUILT();
  TempDir dir;
  // The recorded fp32 matrix product (TF32 off): util 100 %, FP32 pipe 76 %, tensor cores 0 %.
  const json list = run_findings_on(dir, 100, R"({"sm_util": 96.6, "sm_occupancy": 12.5, "tensor_util": 0.0,
      "fp32_util": 76.1, "fp16_util": 0.0, "fp64_util": 0.0, "dram_bw_util": 5.2})");
  const json* f = finding(list, "fp32_math");
  ASSERT_NE(f, nullptr) << list.dump(2);
  EXPECT_GT((*f)["cost_usd"].get<double>(), 0);
  EXPECT_NE((*f)["action"].get<std::string>().find("torch.autocast"), std::string::npos);
  EXPECT_NE((*f)["summary"].get<std::string>().find("76%"), std::string::npos) << (*f)["summary"];
  EXPECT_EQ(finding(list, "low_tensor_activity"), nullptr);
  EXPECT_EQ(finding(list, "memory_bound"), nullptr);
}

TEST(GpmCliIntegrationTest, LowTensorActivityInASixteenBitJobAndMemoryBound) {
  GM_ASSERT_BUILT();
  {
    TempDir dir;
    // bf16 (tensor cores in use), SMs busy, tensor cores mostly idle.
    const json list = run_findings_on(dir, 100, R"({"sm_util": 92, "sm_occupancy": 30, "tensor_util": 9,
        "fp32_util": 12, "fp16_util": 6, "fp64_util": 0, "dram_bw_util": 35})");
    const json* f = finding(list, "low_tensor_activity");
    ASSERT_NE(f, nullptr) << list.dump(2);
    EXPECT_GT((*f)["cost_usd"].get<double>(), 0);
    EXPECT_NE((*f)["action"].get<std::string>().find("gpumeter trace"), std::string::npos);
    EXPECT_EQ(finding(list, "fp32_math"), nullptr);
  }
  {
    TempDir dir;
    const json list = run_findings_on(dir, 100, R"({"sm_util": 30, "sm_occupancy": 8, "tensor_util": 2,
        "fp32_util": 5, "fp16_util": 0, "fp64_util": 0, "dram_bw_util": 85})");
    const json* f = finding(list, "memory_bound");
    ASSERT_NE(f, nullptr) << list.dump(2);
    EXPECT_GT((*f)["cost_usd"].get<double>(), 0);
  }
  {
    TempDir dir;  // no GPM: none of these findings, whatever the utilization says
    const json list = run_findings_on(dir, 100, "");
    for (const char* kind : {"fp32_math", "low_tensor_activity", "memory_bound"})
      EXPECT_EQ(finding(list, kind), nullptr) << kind;
  }
}

}  // namespace
}  // namespace gm::test
