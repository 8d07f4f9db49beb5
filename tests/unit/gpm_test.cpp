// NVML GPM through the production loader against the fake NVML (issue 37): every metric, one sample pair per
// interval, GPM missing (null, never 0), MIG instances, and the decoding of NVML's answer.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "gpu/gpu.h"
#include "gpu/nvml_abi.h"
#include "gpu/nvml_gpm.h"
#include "support/support.h"

namespace gm {
namespace {

/// The fake NVML opened by the production loader on a scenario; its clock can be frozen.
class GpmFake {
 public:
  explicit GpmFake(const std::string& scenario) {
    path_ = dir_.write("scenario.json", scenario);
    setenv("FAKE_NVML_SCENARIO", path_.c_str(), 1);
    handle_ = dlopen(test::fake_nvml_library().c_str(), RTLD_NOW | RTLD_LOCAL);
    freeze(-1);
    gpu::GpuBackendOptions options;
    options.library_path = test::fake_nvml_library();
    result_.emplace(gpu::open_nvml(options));
  }
  ~GpmFake() {
    result_.reset();
    freeze(-1);
    if (handle_ != nullptr) dlclose(handle_);
  }
  /// Scenario time from now on (seconds since nvmlInit); negative: the real clock again.
  void freeze(double t_s) {
    auto fn = reinterpret_cast<void (*)(double)>(dlsym(handle_, "fakeNvmlFreezeTime"));
    ASSERT_NE(fn, nullptr);
    fn(t_s);
  }
  Result<std::unique_ptr<gpu::GpuBackend>>& result() { return *result_; }
  gpu::GpuBackend& backend() { return *result_->value(); }

 private:
  test::TempDir dir_;
  std::string path_;
  void* handle_ = nullptr;
  std::optional<Result<std::unique_ptr<gpu::GpuBackend>>> result_;
};

std::string h200(const std::string& timeline, const std::string& extra = "",
                 const std::string& missing = "[]") {
  return R"({"missing_symbols": )" + missing + R"(, "devices": [{"name": "NVIDIA H200", "uuid": "GPU-h",
    "memory_total_mib": 143771, "power_limit_w": 700)" +
         extra + R"(, "timeline": )" + timeline + "}]}";
}

// The H200's bf16 matrix product (docs: /work/shared/gpu-h200/README.md, GPM table; tests/data/gpm/).
const char* kBf16 = R"({"sm_util": 93.5, "sm_occupancy": 16.8, "tensor_util": 86.3, "fp32_util": 0.0,
    "fp16_util": 0.0, "fp64_util": 0.0, "dram_bw_util": 21.5})";
const char* kFp32 = R"({"sm_util": 96.6, "sm_occupancy": 12.5, "tensor_util": 0.0, "fp32_util": 76.1,
    "fp16_util": 0.0, "fp64_util": 0.0, "dram_bw_util": 5.2})";

TEST(GpmBackendTest, EveryMetricEqualsTheScenario) {
  // Distinct values for every metric, so a metric read into the wrong field fails.
  GpmFake fake(h200(R"([{"t": 0, "util": 98, "gpm": {"sm_util": 93.5, "sm_occupancy": 16.8,
      "tensor_util": 86.3, "fp32_util": 3.25, "fp16_util": 1.5, "fp64_util": 0.75, "dram_bw_util": 21.5}}])"));
  ASSERT_TRUE(fake.result().ok()) << fake.result().error().message;
  EXPECT_TRUE(fake.backend().capabilities(0).gpm);
  const gpu::GpmMetrics g = fake.backend().sample(0).gpm;
  ASSERT_TRUE(g.sm_active_pct && g.sm_occupancy_pct && g.tensor_active_pct && g.fp32_active_pct &&
              g.fp16_active_pct && g.fp64_active_pct && g.dram_bw_util_pct);
  // The fake answers through NVML's double fields: equal to the value up to rounding (clang's -O2 differs).
  EXPECT_DOUBLE_EQ(*g.sm_active_pct, 93.5);
  EXPECT_DOUBLE_EQ(*g.sm_occupancy_pct, 16.8);
  EXPECT_DOUBLE_EQ(*g.tensor_active_pct, 86.3);
  EXPECT_DOUBLE_EQ(*g.fp32_active_pct, 3.25);
  EXPECT_DOUBLE_EQ(*g.fp16_active_pct, 1.5);
  EXPECT_DOUBLE_EQ(*g.fp64_active_pct, 0.75);
  EXPECT_DOUBLE_EQ(*g.dram_bw_util_pct, 21.5);
}

TEST(GpmBackendTest, EachIntervalIsMeasuredFromTheSamplePairAroundIt) {
  GpmFake fake(h200(std::string(R"([{"t": 0, "util": 98, "gpm": )") + kBf16 + R"(},
      {"t": 2, "util": 100, "gpm": )" +
                    kFp32 + "}]"));
  ASSERT_TRUE(fake.result().ok()) << fake.result().error().message;
  // The first sample was taken at open (t ≈ 0); the next one at t = 5: 2 s of bf16 and 3 s of fp32.
  fake.freeze(5);
  const gpu::GpmMetrics mixed = fake.backend().sample(0).gpm;
  ASSERT_TRUE(mixed.tensor_active_pct && mixed.fp32_active_pct);
  EXPECT_NEAR(*mixed.tensor_active_pct, 86.3 * 2 / 5, 0.5);
  EXPECT_NEAR(*mixed.fp32_active_pct, 76.1 * 3 / 5, 0.5);
  // The next interval, [5, 6], is all fp32: the same utilization, no tensor-core activity at all.
  fake.freeze(6);
  const gpu::DeviceSample s = fake.backend().sample(0);
  EXPECT_EQ(s.utilization_pct, 100U);
  EXPECT_EQ(s.gpm.tensor_active_pct, 0.0);
  EXPECT_EQ(s.gpm.fp32_active_pct, 76.1);
  EXPECT_EQ(s.gpm.sm_active_pct, 96.6);
  EXPECT_EQ(s.gpm.dram_bw_util_pct, 5.2);
}

TEST(GpmBackendTest, NoGpmInTheScenarioIsNullNeverZero) {
  GpmFake fake(h200(R"([{"t": 0, "util": 50}])"));
  ASSERT_TRUE(fake.result().ok()) << fake.result().error().message;
  const gpu::Capabilities& caps = fake.backend().capabilities(0);
  EXPECT_FALSE(caps.gpm);
  bool noted = false;
  for (const auto& n : caps.notes) noted = noted || n.find("GPM") != std::string::npos;
  EXPECT_TRUE(noted);
  const gpu::DeviceSample s = fake.backend().sample(0);
  EXPECT_EQ(s.utilization_pct, 50U);
  EXPECT_FALSE(s.gpm.any());
  EXPECT_TRUE(s.error.empty()) << s.error;
}

TEST(GpmBackendTest, MissingSymbolsAndMissingMetricsAreNull) {
  GpmFake missing(
      h200(std::string(R"([{"t": 0, "util": 98, "gpm": )") + kBf16 + "}]", "", R"(["nvmlGpmMetricsGet"])"));
  ASSERT_TRUE(missing.result().ok()) << missing.result().error().message;
  EXPECT_FALSE(missing.backend().capabilities(0).gpm);
  bool named = false;
  for (const auto& n : missing.backend().capabilities(0).notes)
    named = named || n.find("nvmlGpmMetricsGet") != std::string::npos;
  EXPECT_TRUE(named);
  EXPECT_FALSE(missing.backend().sample(0).gpm.any());

  // A metric the device does not answer is null; the others are there.
  GpmFake partial(h200(R"([{"t": 0, "util": 98, "gpm": {"sm_util": 40, "tensor_util": 10}}])"));
  ASSERT_TRUE(partial.result().ok()) << partial.result().error().message;
  const gpu::GpmMetrics g = partial.backend().sample(0).gpm;
  EXPECT_EQ(g.sm_active_pct, 40.0);
  EXPECT_EQ(g.tensor_active_pct, 10.0);
  EXPECT_FALSE(g.fp32_active_pct || g.fp16_active_pct || g.fp64_active_pct || g.dram_bw_util_pct ||
               g.sm_occupancy_pct);
}

TEST(GpmBackendTest, MigInstancesHaveTheirOwnActivity) {
  GpmFake fake(h200(R"([{"t": 0, "util": 30}])", R"(, "mig": true, "mig_instances": [
      {"uuid": "MIG-a", "gpu_instance_id": 1, "memory_total_mib": 16000, "mem_used_mib": 100, "slices": 1,
       "gpm": {"sm_util": 70, "tensor_util": 55, "dram_bw_util": 30}},
      {"uuid": "MIG-b", "gpu_instance_id": 2, "memory_total_mib": 16000, "mem_used_mib": 100, "slices": 1}])"));
  ASSERT_TRUE(fake.result().ok()) << fake.result().error().message;
  EXPECT_TRUE(fake.backend().capabilities(0).gpm);
  const gpu::DeviceSample s = fake.backend().sample(0);
  EXPECT_FALSE(s.gpm.any());  // the board's timeline has no GPM: null, not 0
  ASSERT_EQ(s.mig_instances.size(), 2U);
  EXPECT_EQ(s.mig_instances[0].gpm.sm_active_pct, 70.0);
  EXPECT_EQ(s.mig_instances[0].gpm.tensor_active_pct, 55.0);
  EXPECT_EQ(s.mig_instances[0].gpm.dram_bw_util_pct, 30.0);
  EXPECT_FALSE(s.mig_instances[0].gpm.fp32_active_pct);
  EXPECT_FALSE(s.mig_instances[1].gpm.any());
}

TEST(GpmDecodeTest, FailedOrNonFiniteMetricsAreNullAndValuesStayInRange) {
  auto req = std::make_unique<gpu::nvml::GpmMetricsGet>();
  gpu::nvml::fill_gpm_request(*req, nullptr, nullptr);
  EXPECT_EQ(req->version, gpu::nvml::kGpmMetricsGetVersion);
  ASSERT_EQ(req->num_metrics, 7U);
  EXPECT_EQ(req->metrics[0].metric_id, 2U);   // NVML_GPM_METRIC_SM_UTIL
  EXPECT_EQ(req->metrics[2].metric_id, 5U);   // NVML_GPM_METRIC_ANY_TENSOR_UTIL
  EXPECT_EQ(req->metrics[6].metric_id, 10U);  // NVML_GPM_METRIC_DRAM_BW_UTIL
  for (unsigned i = 0; i < 7; ++i) {
    req->metrics[i].nvml_return = gpu::nvml::kSuccess;
    req->metrics[i].value = 50;
  }
  req->metrics[0].value = 100.0000001;  // rounding above 100
  req->metrics[1].nvml_return = gpu::nvml::kErrorNotSupported;
  req->metrics[2].value = std::nan("");
  const gpu::GpmMetrics g = gpu::nvml::decode_gpm(*req);
  EXPECT_EQ(g.sm_active_pct, 100.0);
  EXPECT_FALSE(g.sm_occupancy_pct);
  EXPECT_FALSE(g.tensor_active_pct);
  EXPECT_EQ(g.dram_bw_util_pct, 50.0);
}

}  // namespace
}  // namespace gm
