#pragma once
// The fake NVML's model of a scenario file (format: docs/fake-nvml.md).
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace fake_nvml {

struct ProcessSpec {
  std::optional<std::uint32_t> pid;
  std::optional<std::string> comm;
  std::optional<double> mem_mib;
  std::optional<double> sm_util;
  bool foreign_pid = false;  ///< reported as PID + kForeignPidOffset (a host PID seen from a container)
};

/// What a "foreign_pid" process entry adds to the PID it matched.
inline constexpr std::uint32_t kForeignPidOffset = 4'000'000;
/// GPM metric values (percent) a device or MIG instance answers; an absent key answers NOT_SUPPORTED.
struct GpmSpec {
  std::optional<double> sm_util, sm_occupancy, tensor_util, fp32_util, fp16_util, fp64_util, dram_bw_util;
};

struct Segment {
  double t_s = 0;
  std::optional<double> util, mem_util, mem_used_mib, power_w, temp_c, sm_clock_mhz, mem_clock_mhz;
  std::vector<ProcessSpec> processes;
  std::optional<GpmSpec> gpm;  ///< absent: GPM calls answer NOT_SUPPORTED while this segment holds
};

struct Fault {
  double t_s = 0;
  double until_s = std::numeric_limits<double>::infinity();
  std::string function;       ///< NVML function name or "*"
  std::optional<int> ret;     ///< return code to give
  std::int64_t hang_ms = 0;   ///< block the call this long first
};

struct MigSpec {
  std::string uuid;
  unsigned gpu_instance_id = 0;
  std::optional<double> memory_total_mib, mem_used_mib;
  std::optional<unsigned> slices;  ///< GPU instance slice count (nvmlDeviceGetAttributes_v2)
  std::optional<GpmSpec> gpm;      ///< nvmlGpmMigSampleGet answers for this instance
};

struct DeviceSpec {
  std::string name, uuid, pci_bus_id;
  std::optional<double> memory_total_mib, power_limit_w;
  std::optional<unsigned> architecture;  ///< nvmlDeviceArchitecture_t
  bool energy_counter = true;
  std::optional<bool> mig;
  std::optional<unsigned> minor;  ///< nvmlDeviceGetMinorNumber (default: the index; nullopt: NOT_SUPPORTED)
  unsigned mig_board_slices = 7;  ///< largest GPU instance profile (7 on A100/H100, 4 on A30)
  std::vector<MigSpec> mig_instances;
  std::vector<Segment> timeline;
  std::vector<Fault> faults;
};

struct Scenario {
  std::optional<std::string> driver_version;
  std::vector<std::string> missing_symbols;
  std::vector<DeviceSpec> devices;
};

/// Parses scenario JSON; on error returns nullopt and sets `error` to a message naming `path`.
std::optional<Scenario> parse_scenario(const std::string& text, const std::string& path, std::string& error);
/// NVML return code for a name ("GPU_IS_LOST", "NVML_ERROR_GPU_IS_LOST", "ERROR_NOT_SUPPORTED") or -1.
int return_code_for(const std::string& name);
/// The segment in force at `t_s` (the first one before its start).
const Segment& segment_at(const DeviceSpec& dev, double t_s);
/// True when GPM is supported on the device: some segment (or MIG instance) carries "gpm".
bool gpm_supported(const DeviceSpec& dev);

/// Exact integral of power_w over [0, t_s], in millijoules (segments without power count as 0 W).
double energy_mj_at(const DeviceSpec& dev, double t_s);

}  // namespace fake_nvml
