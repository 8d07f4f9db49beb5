// Tests that need a real NVIDIA GPU and driver. They skip cleanly (GTEST_SKIP) on machines without one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "gpu/gpu.h"
#include "support/support.h"

namespace gm::test {
namespace {

// The environment for the real NVML: no fake library override.
std::map<std::string, std::string> real_env() {
  return {{"GPUMETER_NVML_LIBRARY", "\x01unset"}, {"FAKE_NVML_SCENARIO", "\x01unset"}};
}

bool real_nvml_available() {
  gpu::GpuBackendOptions o;
  o.library_path = "libnvidia-ml.so.1";
  return gpu::open_nvml(o).ok();
}

TEST(RealNvmlGpuTest, GpusJsonMatchesNvidiaSmi) {
  if (!real_nvml_available()) GTEST_SKIP() << "no NVIDIA driver / GPU on this machine";
  auto smi = run_command({"nvidia-smi", "--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"}, {});
  if (smi.exit_code != 0) GTEST_SKIP() << "nvidia-smi not available";
  auto r = run_gpumeter({"gpus", "--json", "--price", "1"}, real_env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  std::istringstream lines(smi.out);
  std::string line;
  std::size_t n = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    ASSERT_LT(n, j["devices"].size());
    const auto& d = j["devices"][n];
    EXPECT_NE(line.find(d["uuid"].get<std::string>()), std::string::npos) << line;
    const auto mib = std::stoull(line.substr(line.rfind(',') + 1));
    EXPECT_EQ(d["memory_total_bytes"].get<std::uint64_t>() / (1024 * 1024), mib);
    EXPECT_EQ(d["state"], "ok");
    ++n;
  }
  EXPECT_EQ(n, j["devices"].size());
}

TEST(RealNvmlGpuTest, DoctorSucceeds) {
  if (!real_nvml_available()) GTEST_SKIP() << "no NVIDIA driver / GPU on this machine";
  auto r = run_gpumeter({"doctor"}, real_env());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

}  // namespace
}  // namespace gm::test
