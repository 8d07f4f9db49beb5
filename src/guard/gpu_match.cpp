#include "guard/gpu_match.h"

#include <fmt/format.h>

#include <algorithm>

namespace gm::guard {
namespace {

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::string pid_list(const std::set<std::uint32_t>& pids) {
  std::string out;
  std::size_t n = 0;
  for (auto p : pids) {
    if (++n > 8) {
      out += ", ...";
      break;
    }
    out += (out.empty() ? "" : ", ") + std::to_string(p);
  }
  return out;
}

}  // namespace

bool visible_devices_name(const std::string& value, const gpu::DeviceInfo& info) {
  std::size_t pos = 0;
  while (pos <= value.size()) {
    std::size_t comma = value.find(',', pos);
    if (comma == std::string::npos) comma = value.size();
    const std::string item = trimmed(value.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty() || item == "all" || item == "none" || item == "void") continue;
    if (item.find_first_not_of("0123456789") == std::string::npos) {
      if (item.size() < 10 && std::stoul(item) == info.index) return true;
    } else if (!info.uuid.empty() &&
               (info.uuid.rfind(item, 0) == 0 || info.uuid.rfind("GPU-" + item, 0) == 0)) {
      return true;
    }
  }
  return false;
}

JobGpuMatcher::JobGpuMatcher(GpuMatchConfig config, const std::vector<gpu::DeviceInfo>& devices)
    : config_(std::move(config)), devices_(devices), proc_(config_.proc_root) {}

const gpu::DeviceInfo* JobGpuMatcher::device(unsigned index) const {
  for (const auto& d : devices_)
    if (d.index == index) return &d;
  return nullptr;
}

void JobGpuMatcher::begin(const std::set<std::uint32_t>& job_pids) {
  job_pids_ = job_pids;
  held_.reset();
}

void JobGpuMatcher::note(const std::string& key, const std::string& text) {
  if (said_.insert(key).second) notes_.push_back(text);
}

std::vector<std::string> JobGpuMatcher::take_notes() {
  std::vector<std::string> out;
  out.swap(notes_);
  return out;
}

GpuMatchMethod JobGpuMatcher::method(unsigned index) const {
  auto it = gpus_.find(index);
  return it == gpus_.end() ? GpuMatchMethod::none : it->second.method;
}

bool JobGpuMatcher::allocated_here(const gpu::DeviceInfo& info) const {
  const bool named =
      (config_.nvidia_visible_devices && visible_devices_name(*config_.nvidia_visible_devices, info)) ||
      (config_.cuda_visible_devices && visible_devices_name(*config_.cuda_visible_devices, info));
  return named && info.minor_number && sys::gpu_device_file_present(config_.dev_root, *info.minor_number);
}

bool JobGpuMatcher::job_on_gpu(unsigned index, const gpu::DeviceSample& sample) {
  PerGpu& g = gpus_[index];
  g = PerGpu{};
  for (const auto& p : sample.processes)
    if (job_pids_.count(p.pid)) g.matched_pids.insert(p.pid);
  if (!g.matched_pids.empty()) {
    g.method = GpuMatchMethod::pid;
    return true;
  }
  if (sample.processes.empty()) return false;
  const auto foreign = config_.pid_namespace.foreign_pids();
  if (foreign && !*foreign) return false;  // NVML's PIDs are this namespace's: the PID match is the answer
  std::set<std::uint32_t> unresolved;
  for (const auto& p : sample.processes)
    if (!proc_.exists(p.pid)) unresolved.insert(p.pid);
  if (unresolved.empty()) return false;
  const gpu::DeviceInfo* info = device(index);
  if (info == nullptr || !info->minor_number) {
    note(fmt::format("minor:{}", index),
         fmt::format(
             "GPU {}: NVML shows processes of another PID namespace on it and gives no minor number "
             "(nvmlDeviceGetMinorNumber not supported), so whether the job uses it cannot be told from "
             "its open device files",
             index));
    return false;
  }
  if (!held_) held_ = sys::held_gpu_device_files(proc_, job_pids_, config_.dev_root);
  const std::string path = sys::gpu_device_path(config_.dev_root, *info->minor_number);
  if (!held_->minors.count(*info->minor_number)) {
    if (!held_->unreadable.empty())
      note("unreadable",
           fmt::format(
               "the open files of the job's process(es) {} cannot be read (no permission): whether the job "
               "uses a GPU that NVML shows busy with processes of another PID namespace cannot be told",
               pid_list(held_->unreadable)));
    return false;
  }
  note("namespace",
       "NVML reports processes whose PIDs do not resolve here: " + config_.pid_namespace.describe());
  g.method = GpuMatchMethod::device_file;
  g.matched_pids = unresolved;

  std::set<std::uint32_t> holders = sys::gpu_device_holders(proc_, config_.dev_root, *info->minor_number);
  if (config_.self_pid) holders.erase(*config_.self_pid);
  std::set<std::uint32_t> others_here;
  for (auto p : holders)
    if (!job_pids_.count(p)) others_here.insert(p);
  const std::string gpu = fmt::format("GPU {} ({})", index, info->uuid);
  const std::string matched = fmt::format("{}: the job was matched by its open device file {}", gpu, path);
  const std::string unknown_share =
      "the job's share of its utilization, idle cost and energy cannot be known from inside the container "
      "(the figures are the whole GPU's)";
  if (unresolved.size() > holders.size()) {
    note(fmt::format("match:{}:elsewhere", index),
         fmt::format(
             "{}; NVML lists {} process(es) on it and only {} process(es) here hold it: other containers "
             "(or the host) use this GPU too, so {}",
             matched, unresolved.size(), holders.size(), unknown_share));
  } else if (!others_here.empty()) {
    note(fmt::format("match:{}:here", index),
         fmt::format("{}; processes of this container outside the job hold it too (PIDs {}), so {}", matched,
                     pid_list(others_here), unknown_share));
  } else if (allocated_here(*info)) {
    std::string why;
    if (config_.nvidia_visible_devices && visible_devices_name(*config_.nvidia_visible_devices, *info))
      why = "NVIDIA_VISIBLE_DEVICES=" + *config_.nvidia_visible_devices;
    else
      why = "CUDA_VISIBLE_DEVICES=" + config_.cuda_visible_devices.value_or("");
    note(fmt::format("match:{}:alone", index),
         fmt::format("{}; the GPU is allocated to this container ({}, {} present) and no other process here "
                     "holds it, so its use is the job's",
                     matched, why, path));
  } else {
    const std::string why =
        config_.nvidia_visible_devices && !config_.nvidia_visible_devices->empty()
            ? "NVIDIA_VISIBLE_DEVICES=" + *config_.nvidia_visible_devices
            : std::string("neither NVIDIA_VISIBLE_DEVICES nor CUDA_VISIBLE_DEVICES names it");
    note(fmt::format("match:{}:maybe", index),
         fmt::format(
             "{}; the GPU is not allocated to this container alone ({}), so other containers may use it "
             "too: {}",
             matched, why, unknown_share));
  }
  return true;
}

bool JobGpuMatcher::job_holds_memory(const gpu::DeviceSample& sample) const {
  auto it = gpus_.find(sample.index);
  const bool by_file = it != gpus_.end() && it->second.method == GpuMatchMethod::device_file;
  for (const auto& p : sample.processes)
    if (p.memory_bytes.value_or(0) > 0 &&
        (job_pids_.count(p.pid) || (by_file && it->second.matched_pids.count(p.pid))))
      return true;
  return false;
}

}  // namespace gm::guard
