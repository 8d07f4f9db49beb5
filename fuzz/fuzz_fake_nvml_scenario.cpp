// libFuzzer target: the fake-NVML scenario format (DESIGN §6) is a public contract; other checks write their
// own. Any bytes: an error naming the file, or a scenario whose timeline lookups and energy integral work.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string error;
  auto s = fake_nvml::parse_scenario(text, "fuzz.json", error);
  if (!s) {
    check(error.find("fuzz.json") != std::string::npos);
    return 0;
  }
  for (const auto& d : s->devices) {
    check(!d.timeline.empty());
    double last_mj = 0;
    for (double t : {0.0, 0.5, 1.0, 3.0, 40.0, 1e6}) {
      (void)fake_nvml::segment_at(d, t);
      const double mj = fake_nvml::energy_mj_at(d, t);
      check(!std::isnan(mj) && mj >= last_mj);
      last_mj = mj;
    }
    for (const auto& f : d.faults) check(f.hang_ms >= 0 && f.until_s >= f.t_s);
    for (const auto& m : d.mig_instances) check(!m.slices || *m.slices <= d.mig_board_slices);
  }
  for (const char* name : {"GPU_IS_LOST", "NVML_ERROR_NOT_SUPPORTED", "ERROR_UNKNOWN", ""})
    (void)fake_nvml::return_code_for(name);
  return 0;
}
