#pragma once
// Which allocated GPUs a supervised job (`run`, `attach`, a notebook kernel) uses, tick by tick. First by
// PID: a process of the job's tree in NVML's process list. Where gpumeter's PIDs are not the driver's (a
// container, a pod: NVML reports host PIDs), by device file: the job's tree holding /dev/nvidia<minor>
// open while NVML shows the GPU busy with processes gpumeter cannot resolve. Such a GPU is the job's alone
// when only this container can hold it; otherwise the job's share cannot be known from inside, and the
// notes say so (never a silent 0 or a silent 100 %).
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpu/gpu.h"
#include "sys/pid_namespace.h"
#include "sys/proc.h"

namespace gm::guard {

/// Where the matcher reads and what it knows of the environment (`run` and `attach` fill it; the
/// defaults match by PID only where the namespace says PIDs are this machine's).
struct GpuMatchConfig {
  std::string proc_root = "/proc";
  std::string dev_root = "/dev";  ///< the device files' folder ($GPUMETER_DEV_ROOT, resolved)
  /// The host's by default (match by PID only); `run` and `attach` read the real one.
  sys::PidNamespaceFacts pid_namespace = sys::PidNamespaceFacts::host();
  std::optional<std::string> nvidia_visible_devices;  ///< the container runtime's allocation
  std::optional<std::string> cuda_visible_devices;
  std::optional<std::uint32_t> self_pid;  ///< gpumeter itself (its NVML holds device files open too)
};

/// How the job was found on a GPU.
enum class GpuMatchMethod { none, pid, device_file };

/// The job's GPUs, decided at every tick (see the file comment).
class JobGpuMatcher {
 public:
  JobGpuMatcher(GpuMatchConfig config, const std::vector<gpu::DeviceInfo>& devices);
  /// Starts a tick: the job's processes now (their open files are read only when a GPU needs them).
  void begin(const std::set<std::uint32_t>& job_pids);
  /// Whether the job used GPU `index` in `sample` (one call per allocated GPU per tick).
  bool job_on_gpu(unsigned index, const gpu::DeviceSample& sample);
  /// Whether the job holds memory on the GPU of `sample` (the processes it was matched by hold some).
  bool job_holds_memory(const gpu::DeviceSample& sample) const;
  /// How the job was last found on GPU `index`.
  GpuMatchMethod method(unsigned index) const;
  /// Sentences new since the last call: how the job was matched and what cannot be known, each said once.
  std::vector<std::string> take_notes();

 private:
  struct PerGpu {
    GpuMatchMethod method = GpuMatchMethod::none;
    std::set<std::uint32_t> matched_pids;  ///< the processes of NVML's list the job was matched by
  };
  bool allocated_here(const gpu::DeviceInfo& info) const;
  void note(const std::string& key, const std::string& text);
  const gpu::DeviceInfo* device(unsigned index) const;

  GpuMatchConfig config_;
  std::vector<gpu::DeviceInfo> devices_;
  sys::ProcReader proc_;
  std::set<std::uint32_t> job_pids_;
  std::optional<sys::HeldDeviceFiles> held_;  ///< read at most once per tick
  std::map<unsigned, PerGpu> gpus_;
  std::set<std::string> said_;
  std::vector<std::string> notes_;
};

/// Whether a CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES value names `info` explicitly (an index, a UUID
/// or a UUID prefix; "all", "none", "void" and empty values name none).
bool visible_devices_name(const std::string& value, const gpu::DeviceInfo& info);

}  // namespace gm::guard
