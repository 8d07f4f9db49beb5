// Unit tests of src/gpu: ABI encoding, process-API choice and stride, the call watchdog, and the loader
// against the fake NVML library (the production code path, not a mock).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "gpu/call_guard.h"
#include "gpu/gpu.h"
#include "gpu/nvml_abi.h"
#include "gpu/nvml_loader.h"
#include "support/support.h"

namespace gm {
namespace {

using namespace std::chrono_literals;

TEST(NvmlAbiTest, VersionedStructsAreSizeOrVersionShifted) {
  EXPECT_EQ(gpu::nvml::struct_version(40, 2), 0x02000028U);
  EXPECT_EQ(gpu::nvml::kMemoryV2Version, static_cast<unsigned>(sizeof(gpu::nvml::MemoryV2)) | (2U << 24U));
  EXPECT_EQ(gpu::nvml::kMemoryV2Version, 0x02000028U);  // not a bare 2 (the nvtop bug)
  EXPECT_EQ(gpu::nvml::kProcessDetailListV1Version, 0x01000018U);
}

TEST(NvmlAbiTest, ProcessApiPrefersDetailListThenV3V2V1) {
  EXPECT_EQ(gpu::nvml::choose_process_api({true, true, true, true}), gpu::nvml::ProcessApi::detail_list);
  EXPECT_EQ(gpu::nvml::choose_process_api({false, true, true, true}), gpu::nvml::ProcessApi::v3);
  EXPECT_EQ(gpu::nvml::choose_process_api({false, false, true, true}), gpu::nvml::ProcessApi::v2);
  EXPECT_EQ(gpu::nvml::choose_process_api({false, false, false, true}), gpu::nvml::ProcessApi::v1);
  EXPECT_EQ(gpu::nvml::choose_process_api({false, false, false, false}), gpu::nvml::ProcessApi::none);
}

TEST(NvmlAbiTest, StrideMatchesTheStructOfEachApi) {
  EXPECT_EQ(gpu::nvml::process_stride(gpu::nvml::ProcessApi::detail_list), 32U);
  EXPECT_EQ(gpu::nvml::process_stride(gpu::nvml::ProcessApi::v3),
            24U);  // nvmlProcessInfo_t has the v2 layout
  EXPECT_EQ(gpu::nvml::process_stride(gpu::nvml::ProcessApi::v2), 24U);
  EXPECT_EQ(gpu::nvml::process_stride(gpu::nvml::ProcessApi::v1), 16U);
  EXPECT_EQ(gpu::nvml::process_stride(gpu::nvml::ProcessApi::none), 0U);
  EXPECT_STREQ(gpu::nvml::process_api_name(gpu::nvml::ProcessApi::v3),
               "nvmlDeviceGetComputeRunningProcesses_v3");
}

TEST(NvmlAbiTest, ReturnNamesAndArchitectures) {
  EXPECT_STREQ(gpu::nvml::return_name(15), "ERROR_GPU_IS_LOST");
  EXPECT_STREQ(gpu::nvml::return_name(16), "ERROR_RESET_REQUIRED");
  EXPECT_STREQ(gpu::nvml::return_name(12345), "");
  EXPECT_STREQ(gpu::nvml::architecture_name(9), "Hopper");
  EXPECT_STREQ(gpu::nvml::architecture_name(77), "");
}

TEST(NvmlCallGuardTest, ReturnsTheResultOfAPromptCall) {
  gpu::nvml::CallGuard guard(500);
  auto r = guard.run(0, [] { return 42; });
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, 42);
  EXPECT_FALSE(guard.hung(0));
}

TEST(NvmlCallGuardTest, AbandonsAnOverrunningCallAndMarksItsKeyUntilItReturns) {
  gpu::nvml::CallGuard guard(50);
  auto start = std::chrono::steady_clock::now();
  auto r = guard.run(3, [] {
    std::this_thread::sleep_for(400ms);
    return 1;
  });
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(r.has_value());
  EXPECT_LT(took, 300ms);
  EXPECT_TRUE(guard.hung(3));
  EXPECT_FALSE(guard.hung(4));
  auto other = guard.run(4, [] { return 7; });  // a fresh worker serves other keys meanwhile
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(*other, 7);
  for (int i = 0; i < 100 && guard.hung(3); ++i) std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(guard.hung(3));
}

TEST(NvmlLoaderTest, CandidatesHonourExplicitPathThenEnvThenSonames) {
  EXPECT_EQ(gpu::nvml::library_candidates("/x/lib.so"), std::vector<std::string>{"/x/lib.so"});
  setenv("GPUMETER_NVML_LIBRARY", "/y/libnvidia-ml.so.1", 1);
  EXPECT_EQ(gpu::nvml::library_candidates(""), std::vector<std::string>{"/y/libnvidia-ml.so.1"});
  unsetenv("GPUMETER_NVML_LIBRARY");
  EXPECT_EQ(gpu::nvml::library_candidates(""),
            (std::vector<std::string>{"libnvidia-ml.so.1", "libnvidia-ml.so"}));
}

TEST(NvmlLoaderTest, MissingLibraryGivesTheDlopenReason) {
  auto lib = gpu::nvml::Library::open({"/nonexistent/libnvidia-ml.so.1"});
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.error().kind, ErrorKind::no_gpu_library);
  EXPECT_NE(lib.error().message.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
  EXPECT_NE(lib.error().message.find("No such file"), std::string::npos);
}

/// Opens the fake NVML on a scenario written to a temp dir.
class FakeNvmlBackend {
 public:
  explicit FakeNvmlBackend(const std::string& scenario, std::int64_t timeout_ms = 1000) {
    path_ = dir_.write("scenario.json", scenario);
    setenv("FAKE_NVML_SCENARIO", path_.c_str(), 1);
    gpu::GpuBackendOptions options;
    options.library_path = test::fake_nvml_library();
    options.call_timeout_ms = timeout_ms;
    result_.emplace(gpu::open_nvml(options));
  }
  Result<std::unique_ptr<gpu::GpuBackend>>& result() { return *result_; }
  gpu::GpuBackend& backend() { return *result_->value(); }
  const std::string& path() const { return path_; }

 private:
  test::TempDir dir_;
  std::string path_;
  std::optional<Result<std::unique_ptr<gpu::GpuBackend>>> result_;
};

std::string one_device(const std::string& device_extra, const std::string& missing = "[]",
                       const std::string& processes = "[]") {
  return R"({"driver_version": "550.54.15", "missing_symbols": )" + missing +
         R"(, "devices": [{"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-a", "pci_bus_id": "00000000:07:00.0",
         "memory_total_mib": 40960, "power_limit_w": 400)" + device_extra +
         R"(, "timeline": [{"t": 0, "util": 55, "mem_used_mib": 2048, "power_w": 250, "temp_c": 60,
         "sm_clock_mhz": 1410, "mem_clock_mhz": 1215, "processes": )" + processes + "}]}]}";
}

std::string pid_processes() {
  auto self = std::to_string(getpid());
  return R"([{"pid": )" + self + R"(, "mem_mib": 1000, "sm_util": 40}, {"pid": 999999, "mem_mib": 24, "sm_util": 250},
            {"pid": 424242, "mem_mib": 7}])";
}

void expect_processes(const gpu::DeviceSample& s) {
  ASSERT_EQ(s.processes.size(), 3U);
  std::map<std::uint32_t, gpu::ProcessSample> by_pid;
  for (const auto& p : s.processes) by_pid[p.pid] = p;
  auto self = static_cast<std::uint32_t>(getpid());
  ASSERT_TRUE(by_pid.count(self));
  EXPECT_EQ(by_pid[self].memory_bytes, 1000ULL << 20);
  EXPECT_EQ(by_pid[self].sm_util_pct, 40U);
  EXPECT_EQ(by_pid[999999].memory_bytes, 24ULL << 20);
  EXPECT_FALSE(by_pid[999999].sm_util_pct.has_value());  // 250 % is dropped
  EXPECT_EQ(by_pid[424242].memory_bytes, 7ULL << 20);
  EXPECT_FALSE(by_pid[424242].sm_util_pct.has_value());  // no sample for it
}

TEST(NvmlBackendTest, ReadsDeviceInfoAndSampleFromTheFake) {
  FakeNvmlBackend fake(one_device("", "[]", pid_processes()));
  ASSERT_TRUE(fake.result().ok()) << fake.result().error().message;
  gpu::GpuBackend& b = fake.backend();
  EXPECT_EQ(b.driver_version(), "550.54.15");
  ASSERT_EQ(b.devices().size(), 1U);
  const gpu::DeviceInfo& info = b.devices()[0];
  EXPECT_EQ(info.name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(info.uuid, "GPU-a");
  EXPECT_EQ(info.pci_bus_id, "00000000:07:00.0");
  EXPECT_EQ(info.memory_total_bytes, 40960ULL << 20);
  EXPECT_EQ(info.power_limit_mw, 400000U);
  EXPECT_EQ(info.architecture, "Ampere");
  EXPECT_FALSE(info.mig_enabled.has_value());
  const gpu::Capabilities& caps = b.capabilities(0);
  EXPECT_TRUE(caps.utilization && caps.memory && caps.power && caps.energy_counter && caps.temperature &&
              caps.clocks && caps.processes && caps.process_utilization);
  EXPECT_EQ(caps.process_api, "nvmlDeviceGetRunningProcessDetailList");
  gpu::DeviceSample s = b.sample(0);
  EXPECT_EQ(s.state, gpu::DeviceState::ok);
  EXPECT_EQ(s.utilization_pct, 55U);
  EXPECT_EQ(s.memory_used_bytes, 2048ULL << 20);
  EXPECT_EQ(s.power_mw, 250000U);
  EXPECT_EQ(s.temperature_c, 60U);
  EXPECT_EQ(s.sm_clock_mhz, 1410U);
  EXPECT_EQ(s.mem_clock_mhz, 1215U);
  ASSERT_TRUE(s.energy_mj.has_value());
  EXPECT_LT(*s.energy_mj, 250000U * 5);  // 250 W for well under 5 s since nvmlInit
  expect_processes(s);
}

TEST(NvmlBackendTest, LegacyProcessApisUseTheirOwnStride) {
  const char* detail = R"("nvmlDeviceGetRunningProcessDetailList")";
  std::vector<std::pair<std::string, std::string>> cases = {
      {std::string("[") + detail + "]", "nvmlDeviceGetComputeRunningProcesses_v3"},
      {std::string("[") + detail + R"(, "nvmlDeviceGetComputeRunningProcesses_v3"])",
       "nvmlDeviceGetComputeRunningProcesses_v2"},
      {std::string("[") + detail + R"(, "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"])",
       "nvmlDeviceGetComputeRunningProcesses"}};
  for (const auto& [missing, expected] : cases) {
    FakeNvmlBackend fake(one_device("", missing, pid_processes()));
    ASSERT_TRUE(fake.result().ok()) << fake.result().error().message;
    EXPECT_EQ(fake.backend().capabilities(0).process_api, expected);
    expect_processes(fake.backend().sample(0));
  }
}

TEST(NvmlBackendTest, MemoryFallsBackToV1WhenV2IsMissing) {
  FakeNvmlBackend fake(one_device("", R"(["nvmlDeviceGetMemoryInfo_v2", "nvmlInit_v2", "nvmlDeviceGetCount_v2"])"));
  ASSERT_TRUE(fake.result().ok()) << fake.result().error().message;
  EXPECT_EQ(fake.backend().devices()[0].memory_total_bytes, 40960ULL << 20);
  EXPECT_EQ(fake.backend().sample(0).memory_used_bytes, 2048ULL << 20);
}

TEST(NvmlBackendTest, EnergyCounterNotSupportedMeansPowerIntegration) {
  FakeNvmlBackend fake(one_device(R"(, "energy_counter": false)"));
  ASSERT_TRUE(fake.result().ok()) << fake.result().error().message;
  EXPECT_FALSE(fake.backend().capabilities(0).energy_counter);
  EXPECT_EQ(gpu::energy_method(fake.backend().capabilities(0)), gpu::EnergyMethod::power_integration);
  EXPECT_FALSE(fake.backend().sample(0).energy_mj.has_value());
}

TEST(NvmlBackendTest, MigInstancesAreListedAndProcessUtilizationIsOff) {
  FakeNvmlBackend fake(one_device(R"(, "mig": true, "mig_instances": [
      {"uuid": "MIG-1", "gpu_instance_id": 1, "memory_total_mib": 9856, "mem_used_mib": 100},
      {"uuid": "MIG-2", "gpu_instance_id": 2, "memory_total_mib": 9856, "mem_used_mib": 200}])"));
  ASSERT_TRUE(fake.result().ok()) << fake.result().error().message;
  const gpu::DeviceInfo& info = fake.backend().devices()[0];
  EXPECT_EQ(info.mig_enabled, true);
  ASSERT_EQ(info.mig_instances.size(), 2U);
  EXPECT_EQ(info.mig_instances[1].uuid, "MIG-2");
  EXPECT_EQ(info.mig_instances[1].gpu_instance_id, 2U);
  EXPECT_EQ(info.mig_instances[1].memory_total_bytes, 9856ULL << 20);
  EXPECT_FALSE(fake.backend().capabilities(0).process_utilization);
  gpu::DeviceSample s = fake.backend().sample(0);
  ASSERT_EQ(s.mig_instances.size(), 2U);
  EXPECT_EQ(s.mig_instances[0].memory_used_bytes, 100ULL << 20);
}

TEST(NvmlBackendTest, LostDeviceIsReportedNotFatal) {
  FakeNvmlBackend fake(one_device(R"(, "faults": [{"function": "nvmlDeviceGetPowerUsage", "return": 16}])"));
  ASSERT_TRUE(fake.result().ok()) << fake.result().error().message;
  gpu::DeviceSample s = fake.backend().sample(0);
  EXPECT_EQ(s.state, gpu::DeviceState::lost);
  EXPECT_NE(s.error.find("RESET_REQUIRED"), std::string::npos);
}

TEST(NvmlBackendTest, HungCallIsBoundedAndMarksTheDeviceUnresponsive) {
  auto start = std::chrono::steady_clock::now();
  FakeNvmlBackend fake(one_device(R"(, "faults": [{"function": "nvmlDeviceGetTemperature", "hang_ms": 1500}])"), 200);
  ASSERT_TRUE(fake.result().ok()) << fake.result().error().message;
  gpu::DeviceSample s = fake.backend().sample(0);
  EXPECT_EQ(s.state, gpu::DeviceState::unresponsive);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms);
}

TEST(NvmlBackendTest, MalformedScenarioFailsInitNamingTheFile) {
  FakeNvmlBackend fake(R"({"devices": [{"name": "x", "timeline": [{"util": 3}]}]})");
  ASSERT_FALSE(fake.result().ok());
  EXPECT_EQ(fake.result().error().kind, ErrorKind::no_gpu_library);
  EXPECT_NE(fake.result().error().message.find(fake.path()), std::string::npos);
  EXPECT_NE(fake.result().error().message.find("missing \"t\""), std::string::npos);
}

TEST(NvmlBackendTest, StaticBackendServesTestsWithoutNvml) {
  gpu::StaticGpuBackend b;
  b.infos.push_back(gpu::DeviceInfo{});
  b.caps.push_back(gpu::Capabilities{});
  b.samples.push_back(gpu::DeviceSample{});
  EXPECT_EQ(b.sample(0).state, gpu::DeviceState::ok);
  EXPECT_STREQ(to_string(gpu::DeviceState::unresponsive), "unresponsive");
  EXPECT_STREQ(to_string(gpu::EnergyMethod::power_integration), "power_integration");
}

}  // namespace
}  // namespace gm
