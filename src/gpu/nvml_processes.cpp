// The NVML backend's process lists (detail list, or the legacy compute and MPS lists) and per-process
// SM utilization.
#include <map>

#include "gpu/nvml_backend.h"

namespace gm::gpu::nvml {

namespace {

/// Reads one process entry at `stride` bytes per element.
ProcessSample read_process_entry(const unsigned char* base, std::size_t stride, std::size_t i) {
  ProcessInfoV1 head{};  // pid and usedGpuMemory sit at the same offsets in every layout
  std::memcpy(&head, base + i * stride, sizeof(head));
  ProcessSample p;
  p.pid = head.pid;
  if (head.used_gpu_memory != kValueNotAvailable) p.memory_bytes = head.used_gpu_memory;
  return p;
}

}  // namespace

bool NvmlBackend::read_legacy_list(Ctx& ctx, Device h, ProcFn fn, const char* name,
                                   std::vector<ProcessSample>& out) {
  const std::size_t stride = process_stride(s_.proc_api);
  ProcBuf buf;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Call c = guarded(
        static_cast<int>(ctx.index),
        [fn, h](ProcBuf& b) { return fn(h, &b.count, b.bytes.empty() ? nullptr : b.bytes.data()); }, buf);
    if (!ctx.check(c, name, this)) return false;
    if (c.kind == Call::done && c.rc == kErrorInsufficientSize) {
      buf.count = buf.count * 2 + 5;  // processes come and go between the two calls
      buf.bytes.assign(buf.count * stride, 0);
      continue;
    }
    if (!c.ok()) return true;
    for (std::size_t i = 0; i < buf.count; ++i)
      out.push_back(read_process_entry(buf.bytes.data(), stride, i));
    return true;
  }
  return true;
}

bool NvmlBackend::read_detail_list(Ctx& ctx, Device h, unsigned mode, std::vector<ProcessSample>& out) {
  DetailBuf buf;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto fn = s_.detail;
    Call c = guarded(
        static_cast<int>(ctx.index),
        [fn, h, mode](DetailBuf& b) {
          b.list.version = kProcessDetailListV1Version;
          b.list.mode = mode;
          b.list.num_proc_array_entries = static_cast<unsigned>(b.entries.size());
          b.list.proc_array = b.entries.empty() ? nullptr : b.entries.data();
          return fn(h, &b.list);
        },
        buf);
    if (!ctx.check(c, "nvmlDeviceGetRunningProcessDetailList", this)) return false;
    if (c.kind == Call::done && c.rc == kErrorInsufficientSize) {
      buf.entries.assign(buf.list.num_proc_array_entries * 2 + 5, ProcessDetailV1{});
      continue;
    }
    if (!c.ok()) return true;
    for (unsigned i = 0; i < buf.list.num_proc_array_entries && i < buf.entries.size(); ++i) {
      out.push_back(read_process_entry(reinterpret_cast<const unsigned char*>(buf.entries.data()),
                                       sizeof(ProcessDetailV1), i));
    }
    return true;
  }
  return true;
}

bool NvmlBackend::read_processes(Ctx& ctx, Device h, std::vector<ProcessSample>& out) {
  std::vector<ProcessSample> all;
  if (s_.proc_api == ProcessApi::detail_list) {
    if (!read_detail_list(ctx, h, kProcessModeCompute, all)) return false;
    if (!read_detail_list(ctx, h, kProcessModeMps, all)) return false;
  } else {
    if (!read_legacy_list(ctx, h, s_.proc, process_api_name(s_.proc_api), all)) return false;
    if (s_.mps_proc != nullptr &&
        !read_legacy_list(ctx, h, s_.mps_proc, "nvmlDeviceGetMPSComputeRunningProcesses", all)) {
      return false;
    }
  }
  std::map<std::uint32_t, ProcessSample> by_pid;  // a process may appear in the compute and MPS lists
  for (auto& p : all) {
    auto [it, inserted] = by_pid.emplace(p.pid, p);
    if (!inserted && !it->second.memory_bytes) it->second.memory_bytes = p.memory_bytes;
  }
  for (auto& [pid, p] : by_pid) out.push_back(p);
  return true;
}

bool NvmlBackend::read_process_utilization(Ctx& ctx, Device h, std::vector<ProcessSample>& procs) {
  Dev& d = devs_[ctx.index];
  auto fn = s_.proc_util;
  const unsigned long long since = d.last_seen_us;
  UtilBuf buf;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Call c = guarded(
        static_cast<int>(ctx.index),
        [fn, h, since](UtilBuf& b) {
          return fn(h, b.samples.empty() ? nullptr : b.samples.data(), &b.count, since);
        },
        buf);
    if (!ctx.check(c, "nvmlDeviceGetProcessUtilization", this)) return false;
    // Sizing call: some drivers answer INSUFFICIENT_SIZE, others SUCCESS with the count.
    if (c.kind == Call::done &&
        (c.rc == kErrorInsufficientSize || (c.rc == kSuccess && buf.samples.empty() && buf.count > 0))) {
      buf.count = buf.count * 2 + 5;
      buf.samples.assign(buf.count, ProcessUtilizationSample{});
      continue;
    }
    if (!c.ok()) return true;  // NOT_FOUND: nothing newer than the last sample seen
    std::map<std::uint32_t, std::pair<unsigned long long, unsigned>> newest;
    for (unsigned i = 0; i < buf.count && i < buf.samples.size(); ++i) {
      const auto& s = buf.samples[i];
      if (s.time_stamp > d.last_seen_us) d.last_seen_us = s.time_stamp;
      if (s.sm_util > 100) continue;
      auto& slot = newest[s.pid];
      if (s.time_stamp >= slot.first) slot = {s.time_stamp, s.sm_util};
    }
    for (auto& p : procs) {
      if (auto it = newest.find(p.pid); it != newest.end()) p.sm_util_pct = it->second.second;
    }
    return true;
  }
  return true;
}

}  // namespace gm::gpu::nvml
