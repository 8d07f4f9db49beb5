// Tests of the fake NVML library itself: dlopen it and call its NVML entry points as a client would.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gpu/nvml_abi.h"
#include "support/support.h"

namespace gm {
namespace {

using gpu::nvml::Device;

class FakeNvmlLib {
 public:
  FakeNvmlLib() {
    handle_ = dlopen(test::fake_nvml_library().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) throw std::runtime_error(dlerror());
  }
  template <class F>
  F fn(const char* name) const {
    auto f = reinterpret_cast<F>(dlsym(handle_, name));
    if (f == nullptr) throw std::runtime_error(std::string("fake NVML lacks ") + name);
    return f;
  }

 private:
  void* handle_ = nullptr;
};

/// Writes a scenario, points $FAKE_NVML_SCENARIO at it, initialises the fake and freezes its clock.
class FakeNvmlTest : public ::testing::Test {
 protected:
  int start(const std::string& scenario, double t_s = 0) {
    path_ = dir_.write("s.json", scenario);
    setenv("FAKE_NVML_SCENARIO", path_.c_str(), 1);
    lib_.fn<void (*)(double)>("fakeNvmlFreezeTime")(-1);
    int rc = lib_.fn<int (*)()>("nvmlInit_v2")();
    freeze(t_s);
    return rc;
  }
  void freeze(double t_s) { lib_.fn<void (*)(double)>("fakeNvmlFreezeTime")(t_s); }
  void TearDown() override {
    lib_.fn<void (*)(double)>("fakeNvmlFreezeTime")(-1);
    (void)lib_.fn<int (*)()>("nvmlShutdown")();
  }
  Device handle(unsigned i) {
    Device d = nullptr;
    EXPECT_EQ(lib_.fn<int (*)(unsigned, Device*)>("nvmlDeviceGetHandleByIndex_v2")(i, &d), 0);
    return d;
  }
  int power_mw(Device d, unsigned& mw) { return lib_.fn<int (*)(Device, unsigned*)>("nvmlDeviceGetPowerUsage")(d, &mw); }
  int energy(Device d, unsigned long long& mj) {
    return lib_.fn<int (*)(Device, unsigned long long*)>("nvmlDeviceGetTotalEnergyConsumption")(d, &mj);
  }

  FakeNvmlLib lib_;
  test::TempDir dir_;
  std::string path_;
};

const char* kTimeline = R"({"driver_version": "580.95.05", "devices": [{"name": "NVIDIA H100 80GB HBM3",
  "memory_total_mib": 81559, "timeline": [
    {"t": 0, "util": 0, "mem_used_mib": 500, "power_w": 70, "temp_c": 35},
    {"t": 3, "util": 97, "mem_used_mib": 61000, "power_w": 650, "temp_c": 71},
    {"t": 10, "util": 10, "mem_used_mib": 600, "power_w": 100.5}],
  "faults": [{"t": 40, "until": 45, "function": "*", "return": "GPU_IS_LOST"},
             {"t": 50, "function": "nvmlDeviceGetPowerUsage", "return": "NVML_ERROR_NO_PERMISSION"},
             {"t": 60, "function": "nvmlDeviceGetUtilizationRates", "hang_ms": 300}]}]})";

TEST_F(FakeNvmlTest, TimelineIsPiecewiseConstant) {
  ASSERT_EQ(start(kTimeline, 2.999), 0);
  Device d = handle(0);
  unsigned mw = 0;
  ASSERT_EQ(power_mw(d, mw), 0);
  EXPECT_EQ(mw, 70000U);
  freeze(3.0);
  ASSERT_EQ(power_mw(d, mw), 0);
  EXPECT_EQ(mw, 650000U);
  gpu::nvml::Utilization u{};
  ASSERT_EQ(lib_.fn<int (*)(Device, gpu::nvml::Utilization*)>("nvmlDeviceGetUtilizationRates")(d, &u), 0);
  EXPECT_EQ(u.gpu, 97U);
  gpu::nvml::MemoryV2 m{};
  m.version = gpu::nvml::kMemoryV2Version;
  ASSERT_EQ(lib_.fn<int (*)(Device, gpu::nvml::MemoryV2*)>("nvmlDeviceGetMemoryInfo_v2")(d, &m), 0);
  EXPECT_EQ(m.used, 61000ULL << 20);
  EXPECT_EQ(m.total, 81559ULL << 20);
  m.version = 2;  // a bare version number is rejected, as NVML does
  EXPECT_EQ(lib_.fn<int (*)(Device, gpu::nvml::MemoryV2*)>("nvmlDeviceGetMemoryInfo_v2")(d, &m),
            gpu::nvml::kErrorArgumentVersionMismatch);
  freeze(30);
  ASSERT_EQ(power_mw(d, mw), 0);
  EXPECT_EQ(mw, 100500U);
}

TEST_F(FakeNvmlTest, EnergyCounterIsTheExactIntegralOfPower) {
  ASSERT_EQ(start(kTimeline, 5), 0);
  Device d = handle(0);
  unsigned long long mj = 0;
  ASSERT_EQ(energy(d, mj), 0);
  EXPECT_EQ(mj, 70ULL * 3 * 1000 + 650ULL * 2 * 1000);
  freeze(12);
  ASSERT_EQ(energy(d, mj), 0);
  EXPECT_EQ(mj, 70ULL * 3000 + 650ULL * 7000 + 201000ULL);  // 100.5 W for 2 s
}

TEST_F(FakeNvmlTest, FaultsApplyInsideTheirWindow) {
  ASSERT_EQ(start(kTimeline, 39.9), 0);
  Device d = handle(0);
  unsigned mw = 0;
  EXPECT_EQ(power_mw(d, mw), 0);
  freeze(40);
  EXPECT_EQ(power_mw(d, mw), gpu::nvml::kErrorGpuIsLost);
  Device again = nullptr;
  EXPECT_EQ(lib_.fn<int (*)(unsigned, Device*)>("nvmlDeviceGetHandleByIndex_v2")(0, &again),
            gpu::nvml::kErrorGpuIsLost);
  freeze(45);
  EXPECT_EQ(power_mw(d, mw), 0);
  freeze(50);
  EXPECT_EQ(power_mw(d, mw), gpu::nvml::kErrorNoPermission);
  unsigned long long mj = 0;
  EXPECT_EQ(energy(d, mj), 0);  // a named function's fault leaves the others alone
  freeze(60);
  gpu::nvml::Utilization u{};
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(lib_.fn<int (*)(Device, gpu::nvml::Utilization*)>("nvmlDeviceGetUtilizationRates")(d, &u), 0);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300));
}

TEST_F(FakeNvmlTest, EnergyCounterFalseIsNotSupported) {
  ASSERT_EQ(start(R"({"devices": [{"energy_counter": false, "timeline": [{"t": 0, "power_w": 50}]}]})"), 0);
  unsigned long long mj = 0;
  EXPECT_EQ(energy(handle(0), mj), gpu::nvml::kErrorNotSupported);
  char version[32];
  EXPECT_EQ(lib_.fn<int (*)(char*, unsigned)>("nvmlSystemGetDriverVersion")(version, sizeof version),
            gpu::nvml::kErrorNotSupported);  // no driver_version in the scenario
}

TEST_F(FakeNvmlTest, CommProcessesResolveToLivePidsAndPidProcessesAreKept) {
  std::string comm;
  std::ifstream("/proc/self/comm") >> comm;
  ASSERT_EQ(start(R"({"devices": [{"timeline": [{"t": 0, "processes": [
      {"comm": ")" + comm + R"(", "mem_mib": 10, "sm_util": 33}, {"pid": 77777, "mem_mib": 5}]}]}]})"), 0);
  Device d = handle(0);
  gpu::nvml::ProcessInfoV2 infos[64];
  unsigned count = 0;
  auto fn = lib_.fn<int (*)(Device, unsigned*, void*)>("nvmlDeviceGetComputeRunningProcesses_v3");
  ASSERT_EQ(fn(d, &count, nullptr), gpu::nvml::kErrorInsufficientSize);
  ASSERT_GE(count, 2U);
  count = 64;
  ASSERT_EQ(fn(d, &count, infos), 0);
  bool self = false, fixed = false;
  for (unsigned i = 0; i < count; ++i) {
    if (infos[i].pid == static_cast<unsigned>(getpid())) self = infos[i].used_gpu_memory == 10ULL << 20;
    if (infos[i].pid == 77777) fixed = infos[i].used_gpu_memory == 5ULL << 20;
  }
  EXPECT_TRUE(self);
  EXPECT_TRUE(fixed);
  gpu::nvml::ProcessUtilizationSample samples[64];
  unsigned n = 64;
  auto util = lib_.fn<int (*)(Device, gpu::nvml::ProcessUtilizationSample*, unsigned*, unsigned long long)>(
      "nvmlDeviceGetProcessUtilization");
  ASSERT_EQ(util(d, samples, &n, 0), 0);
  ASSERT_GE(n, 1U);
  EXPECT_EQ(samples[0].sm_util, 33U);
  n = 64;
  EXPECT_EQ(util(d, samples, &n, ~0ULL), gpu::nvml::kErrorNotFound);  // nothing newer than the last seen
}

TEST_F(FakeNvmlTest, MissingSymbolsAreListedForTheLoader) {
  ASSERT_EQ(start(R"({"missing_symbols": ["nvmlDeviceGetTotalEnergyConsumption", "nvmlInit_v2"],
      "devices": [{"timeline": [{"t": 0}]}]})"), 0);
  EXPECT_STREQ(lib_.fn<const char* (*)()>("fakeNvmlMissingSymbols")(),
               "nvmlDeviceGetTotalEnergyConsumption,nvmlInit_v2");
}

TEST_F(FakeNvmlTest, MalformedScenarioFailsInitWithTheFileNamed) {
  EXPECT_EQ(start(R"({"devices": [{"timeline": [{"t": 0}], "faults": [{"return": "NOT_A_CODE"}]}]})"),
            gpu::nvml::kErrorUnknown);
  std::string err = lib_.fn<const char* (*)()>("fakeNvmlLastError")();
  EXPECT_NE(err.find(path_), std::string::npos) << err;
  EXPECT_NE(err.find("devices[0].faults[0]"), std::string::npos) << err;
  EXPECT_NE(err.find("NOT_A_CODE"), std::string::npos) << err;
  EXPECT_EQ(start("{\"devices\": [}"), gpu::nvml::kErrorUnknown);
  err = lib_.fn<const char* (*)()>("fakeNvmlLastError")();
  EXPECT_NE(err.find("invalid JSON at byte"), std::string::npos) << err;
}

TEST_F(FakeNvmlTest, MigFlagDrivesMigMode) {
  ASSERT_EQ(start(R"({"devices": [{"mig": true, "timeline": [{"t": 0}]}, {"mig": false, "timeline": [{"t": 0}]},
      {"timeline": [{"t": 0}]}]})"), 0);
  auto mode = lib_.fn<int (*)(Device, unsigned*, unsigned*)>("nvmlDeviceGetMigMode");
  unsigned cur = 9, pending = 9;
  ASSERT_EQ(mode(handle(0), &cur, &pending), 0);
  EXPECT_EQ(cur, 1U);
  ASSERT_EQ(mode(handle(1), &cur, &pending), 0);
  EXPECT_EQ(cur, 0U);
  EXPECT_EQ(mode(handle(2), &cur, &pending), gpu::nvml::kErrorNotSupported);
}

}  // namespace
}  // namespace gm
