#pragma once
// GpuBackend: what gpumeter reads from GPUs. The real backend loads NVML with dlopen (no nvml.h, no CUDA
// at build time); tests point GPUMETER_NVML_LIBRARY at the fake NVML library built from tests/fake_nvml.
// Values a device cannot give are std::nullopt ("not supported" is data, never a 0).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "util/clock.h"
#include "util/result.h"

namespace gm::gpu {

/// Health of a device as seen by the last sample.
enum class DeviceState { ok, lost, unresponsive };
/// "ok", "lost", "unresponsive".
const char* to_string(DeviceState s);

/// How device energy is measured.
enum class EnergyMethod { counter, power_integration, none };
/// "counter", "power_integration", "none".
const char* to_string(EnergyMethod m);

/// Activity over the last sample interval from NVML GPM (GPU Performance Monitoring, Hopper and newer), in
/// percent 0-100. Each value is nullopt where the device (or this metric) is not supported, and on the first
/// sample of a device (GPM needs two samples, one interval apart).
struct GpmMetrics {
  std::optional<double> sm_active_pct;      ///< NVML_GPM_METRIC_SM_UTIL: SMs with a warp resident
  std::optional<double> sm_occupancy_pct;   ///< NVML_GPM_METRIC_SM_OCCUPANCY: warps resident vs maximum
  std::optional<double> tensor_active_pct;  ///< NVML_GPM_METRIC_ANY_TENSOR_UTIL: any tensor-core pipe busy
  std::optional<double> fp32_active_pct;    ///< NVML_GPM_METRIC_FP32_UTIL (non-tensor FP32 pipe)
  std::optional<double> fp16_active_pct;    ///< NVML_GPM_METRIC_FP16_UTIL (non-tensor FP16 pipe)
  std::optional<double> fp64_active_pct;    ///< NVML_GPM_METRIC_FP64_UTIL (non-tensor FP64 pipe)
  std::optional<double> dram_bw_util_pct;   ///< NVML_GPM_METRIC_DRAM_BW_UTIL: DRAM bandwidth vs peak
  /// True when at least one value is present.
  bool any() const {
    return sm_active_pct || sm_occupancy_pct || tensor_active_pct || fp32_active_pct || fp16_active_pct ||
           fp64_active_pct || dram_bw_util_pct;
  }
};

/// A MIG GPU instance of a board in MIG mode.
struct MigInstance {
  unsigned index = 0;                            ///< MIG device index on the parent
  std::string uuid;                              ///< MIG-... UUID
  unsigned gpu_instance_id = 0;
  std::optional<unsigned> slice_count;           ///< slices this instance holds (e.g. 1, 2, 3, 4, 7)
  std::optional<unsigned> board_slices;          ///< slices on the board (7 on A100/H100)
  std::optional<std::uint64_t> memory_total_bytes;
  std::optional<std::uint64_t> memory_used_bytes;
  GpmMetrics gpm;  ///< per-instance activity (nvmlGpmMigSampleGet), in samples
};

/// Static facts about a device, read once.
struct DeviceInfo {
  unsigned index = 0;
  std::string name;                              ///< NVML name, e.g. "NVIDIA H100 80GB HBM3"
  std::string uuid;                              ///< "GPU-..."
  std::string pci_bus_id;                        ///< "00000000:18:00.0"
  std::optional<std::uint64_t> memory_total_bytes;
  std::optional<std::uint32_t> power_limit_mw;
  std::optional<std::string> architecture;       ///< "Hopper", "Ampere", ...
  std::optional<unsigned> minor_number;          ///< of its device file /dev/nvidia<minor> (nullopt: unsupported)
  std::optional<bool> mig_enabled;               ///< nullopt when the board has no MIG support
  std::vector<MigInstance> mig_instances;
};

/// Which optional readings work on a device (each probed once, at open).
struct Capabilities {
  bool utilization = false;
  bool memory = false;
  bool power = false;
  bool energy_counter = false;
  bool temperature = false;
  bool clocks = false;
  bool processes = false;
  bool process_utilization = false;
  bool mig = false;
  bool gpm = false;  ///< nvmlGpmQueryDeviceSupport says supported, symbols present
  std::string process_api;                       ///< which process-list entry point was chosen
  std::vector<std::string> notes;                ///< human-readable notes for `doctor`
};

/// The energy method a device supports: the total-energy counter when it works, else integration of
/// power samples when power works, else none.
EnergyMethod energy_method(const Capabilities& caps);

/// One process on a device.
struct ProcessSample {
  std::uint32_t pid = 0;
  std::optional<std::uint64_t> memory_bytes;
  std::optional<std::uint32_t> sm_util_pct;      ///< from nvmlDeviceGetProcessUtilization; >100 dropped
};

/// One reading of a device.
struct DeviceSample {
  unsigned index = 0;
  std::int64_t t_ns = 0;                         ///< Clock::monotonic_ns() when taken
  DeviceState state = DeviceState::ok;
  std::optional<std::uint32_t> utilization_pct;  ///< nvmlUtilization_t.gpu
  std::optional<std::uint32_t> memory_util_pct;
  std::optional<std::uint64_t> memory_used_bytes;
  std::optional<std::uint32_t> power_mw;
  std::optional<std::uint64_t> energy_mj;        ///< total-energy counter (since driver load)
  std::optional<std::uint32_t> temperature_c;
  std::optional<std::uint32_t> sm_clock_mhz;
  std::optional<std::uint32_t> mem_clock_mhz;
  std::vector<ProcessSample> processes;
  GpmMetrics gpm;                                ///< activity since the previous sample of this device
  std::vector<MigInstance> mig_instances;        ///< with memory_used filled when readable
  std::string error;                             ///< why state is not ok, or a partial failure
};

/// Reads GPUs. Implementations bound every driver call (a hung call marks the device unresponsive).
class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  /// The vendor whose library this backend reads ("nvidia"), the key of the catalog's device-name table.
  virtual std::string vendor() const = 0;
  /// Driver version string ("580.95.05"), if known.
  virtual std::optional<std::string> driver_version() const = 0;
  /// Version of the vendor's management library (NVML for NVIDIA), if known.
  virtual std::optional<std::string> library_version() const = 0;
  /// Devices found at open.
  virtual const std::vector<DeviceInfo>& devices() const = 0;
  /// Capabilities of device `index` (probed once).
  virtual const Capabilities& capabilities(unsigned index) const = 0;
  /// Samples device `index` now. Never throws, never blocks longer than the per-call bound.
  virtual DeviceSample sample(unsigned index) = 0;
  /// A short description of where the backend came from ("libnvidia-ml.so.1 (/usr/lib/...)").
  virtual std::string origin() const = 0;
};

/// Options for opening a GPU backend.
struct GpuBackendOptions {
  /// Library to dlopen; empty = the vendor's default ($GPUMETER_NVML_LIBRARY, else libnvidia-ml.so.1, then
  /// libnvidia-ml.so for NVIDIA).
  std::string library_path;
  /// Bound on any single driver call; a call that takes longer marks the device unresponsive.
  std::int64_t call_timeout_ms = 1000;
  util::Clock* clock = nullptr;  ///< null = system clock
};

/// The documented bound on one driver call, in milliseconds (default of GpuBackendOptions::call_timeout_ms).
inline constexpr std::int64_t kGpuCallTimeoutMs = 1000;

/// Opens the GPU backend of this machine: NVIDIA's NVML today (another vendor's library would be one more
/// backend folder tried here). ErrorKind::no_gpu_library with every backend's reason when none loads.
Result<std::unique_ptr<GpuBackend>> open_gpu_backend(const GpuBackendOptions& options = {});

/// The NVIDIA backend: loads and initialises NVML; ErrorKind::no_gpu_library with the dlopen / nvmlInit
/// message when it cannot.
Result<std::unique_ptr<GpuBackend>> open_nvml(const GpuBackendOptions& options = {});

/// An in-memory backend for unit tests: devices and samples are set directly.
class StaticGpuBackend final : public GpuBackend {
 public:
  std::string vendor() const override { return vendor_name; }
  std::optional<std::string> driver_version() const override { return driver; }
  std::optional<std::string> library_version() const override { return std::nullopt; }
  const std::vector<DeviceInfo>& devices() const override { return infos; }
  const Capabilities& capabilities(unsigned index) const override { return caps.at(index); }
  DeviceSample sample(unsigned index) override { return samples.at(index); }
  std::string origin() const override { return "static (test)"; }

  std::string vendor_name = "nvidia";
  std::optional<std::string> driver = "test";
  std::vector<DeviceInfo> infos;
  std::vector<Capabilities> caps;
  std::vector<DeviceSample> samples;             ///< returned by sample(index)
};

}  // namespace gm::gpu
