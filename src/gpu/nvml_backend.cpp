// GpuBackend over NVML loaded with dlopen. Every NVML call runs through CallGuard (bounded by
// GpuBackendOptions::call_timeout_ms); a device with a hung call is reported unresponsive and skipped until
// the call returns; GPU_IS_LOST / RESET_REQUIRED mark the device lost.
#include <array>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/call_guard.h"
#include "gpu/gpu.h"
#include "gpu/nvml_abi.h"
#include "gpu/nvml_gpm.h"
#include "gpu/nvml_loader.h"

namespace gm {
namespace {

using namespace gm::nvml;

using InitFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using SysStrFn = Return (*)(char*, unsigned);
using CountFn = Return (*)(unsigned*);
using HandleFn = Return (*)(unsigned, Device*);
using DevStrFn = Return (*)(Device, char*, unsigned);
using PciFn = Return (*)(Device, PciInfo*);
using MemV1Fn = Return (*)(Device, MemoryV1*);
using MemV2Fn = Return (*)(Device, MemoryV2*);
using UIntFn = Return (*)(Device, unsigned*);
using ULLFn = Return (*)(Device, unsigned long long*);
using UIntArgFn = Return (*)(Device, unsigned, unsigned*);
using UtilFn = Return (*)(Device, Utilization*);
using MigModeFn = Return (*)(Device, unsigned*, unsigned*);
using MigHandleFn = Return (*)(Device, unsigned, Device*);
using AttributesFn = Return (*)(Device, DeviceAttributes*);
using GiProfileFn = Return (*)(Device, unsigned, GpuInstanceProfileInfo*);
using ProcFn = Return (*)(Device, unsigned*, void*);
using DetailFn = Return (*)(Device, ProcessDetailListV1*);
using ProcUtilFn = Return (*)(Device, ProcessUtilizationSample*, unsigned*, unsigned long long);

constexpr int kGlobalKey = 1 << 20;
constexpr unsigned kNameLen = 96;

/// Outcome of one guarded call.
struct Call {
  enum Kind { done, timed_out, skipped, absent } kind = absent;
  Return rc = kErrorFunctionNotFound;
  bool ok() const { return kind == done && rc == kSuccess; }
  bool lost() const { return kind == done && (rc == kErrorGpuIsLost || rc == kErrorResetRequired); }
};

// Every NVML entry point gpumeter calls, declared once: X(member, function type, exported names...). When a
// member lists several names, the first one the library exports is used (newest version first).
#define GM_NVML_SYMBOLS(X)                                                                          \
  X(init, InitFn, "nvmlInit_v2", "nvmlInit")                                                        \
  X(shutdown, InitFn, "nvmlShutdown")                                                               \
  X(error_string, ErrorStringFn, "nvmlErrorString")                                                 \
  X(driver_version, SysStrFn, "nvmlSystemGetDriverVersion")                                         \
  X(nvml_version, SysStrFn, "nvmlSystemGetNVMLVersion")                                             \
  X(count, CountFn, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount")                                  \
  X(handle, HandleFn, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex")                \
  X(name, DevStrFn, "nvmlDeviceGetName")                                                            \
  X(uuid, DevStrFn, "nvmlDeviceGetUUID")                                                            \
  X(pci, PciFn, "nvmlDeviceGetPciInfo_v3")                                                          \
  X(mem_v2, MemV2Fn, "nvmlDeviceGetMemoryInfo_v2")                                                  \
  X(mem_v1, MemV1Fn, "nvmlDeviceGetMemoryInfo")                                                     \
  X(power_limit, UIntFn, "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit")    \
  X(power, UIntFn, "nvmlDeviceGetPowerUsage")                                                       \
  X(architecture, UIntFn, "nvmlDeviceGetArchitecture")                                              \
  X(minor_number, UIntFn, "nvmlDeviceGetMinorNumber")                                               \
  X(max_mig, UIntFn, "nvmlDeviceGetMaxMigDeviceCount")                                              \
  X(gi_id, UIntFn, "nvmlDeviceGetGpuInstanceId")                                                    \
  X(energy, ULLFn, "nvmlDeviceGetTotalEnergyConsumption")                                           \
  X(temperature, UIntArgFn, "nvmlDeviceGetTemperature")                                             \
  X(clock, UIntArgFn, "nvmlDeviceGetClockInfo")                                                     \
  X(utilization, UtilFn, "nvmlDeviceGetUtilizationRates")                                           \
  X(mig_mode, MigModeFn, "nvmlDeviceGetMigMode")                                                    \
  X(mig_handle, MigHandleFn, "nvmlDeviceGetMigDeviceHandleByIndex")                                 \
  /* only the _v2 entry point fills the slice counts (the deprecated v1 struct ends before them) */ \
  X(attributes, AttributesFn, "nvmlDeviceGetAttributes_v2")                                         \
  X(gi_profile, GiProfileFn, "nvmlDeviceGetGpuInstanceProfileInfo")                                 \
  X(proc_util, ProcUtilFn, "nvmlDeviceGetProcessUtilization")

struct Symbols {
#define GM_NVML_MEMBER(member, type, ...) type member = nullptr;
  GM_NVML_SYMBOLS(GM_NVML_MEMBER)
#undef GM_NVML_MEMBER
  ProcessApi proc_api = ProcessApi::none;
  ProcFn proc = nullptr, mps_proc = nullptr;  ///< the _v3/_v2/v1 list functions of the chosen API
  DetailFn detail = nullptr;                  ///< the detail-list function when chosen
};

/// The first of `names` the library exports, typed; null when none is.
template <class F>
F first_exported(const Library& lib, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* symbol = lib.resolve(name)) return reinterpret_cast<F>(symbol);
  }
  return nullptr;
}

/// The MPS twin of each list-style process API (the detail list covers both modes itself).
const char* mps_process_api_name(ProcessApi api) {
  switch (api) {
    case ProcessApi::v3:
      return "nvmlDeviceGetMPSComputeRunningProcesses_v3";
    case ProcessApi::v2:
      return "nvmlDeviceGetMPSComputeRunningProcesses_v2";
    case ProcessApi::v1:
      return "nvmlDeviceGetMPSComputeRunningProcesses";
    case ProcessApi::detail_list:
    case ProcessApi::none:
      break;
  }
  return "";
}

Symbols resolve_all(const Library& lib) {
  Symbols s;
#define GM_NVML_RESOLVE(member, type, ...) s.member = first_exported<type>(lib, {__VA_ARGS__});
  GM_NVML_SYMBOLS(GM_NVML_RESOLVE)
#undef GM_NVML_RESOLVE
  ProcessSymbols present;
  present.detail_list = lib.resolve(process_api_name(ProcessApi::detail_list)) != nullptr;
  present.v3 = lib.resolve(process_api_name(ProcessApi::v3)) != nullptr;
  present.v2 = lib.resolve(process_api_name(ProcessApi::v2)) != nullptr;
  present.v1 = lib.resolve(process_api_name(ProcessApi::v1)) != nullptr;
  s.proc_api = choose_process_api(present);
  if (s.proc_api == ProcessApi::detail_list) {
    s.detail = lib.get<DetailFn>(process_api_name(s.proc_api));
  } else if (s.proc_api != ProcessApi::none) {
    s.proc = lib.get<ProcFn>(process_api_name(s.proc_api));
    s.mps_proc = lib.get<ProcFn>(mps_process_api_name(s.proc_api));
  }
  return s;
}
#undef GM_NVML_SYMBOLS

/// Reads one process entry at `stride` bytes per element.
ProcessSample read_process_entry(const unsigned char* base, std::size_t stride, std::size_t i) {
  ProcessInfoV1 head{};  // pid and usedGpuMemory sit at the same offsets in every layout
  std::memcpy(&head, base + i * stride, sizeof(head));
  ProcessSample p;
  p.pid = head.pid;
  if (head.used_gpu_memory != kValueNotAvailable) p.memory_bytes = head.used_gpu_memory;
  return p;
}

class NvmlBackend final : public GpuBackend {
 public:
  NvmlBackend(Library lib, Symbols syms, std::int64_t timeout_ms, Clock* clock)
      : lib_(std::move(lib)), s_(syms), guard_(timeout_ms), clock_(clock) {
    gpm_ = GpmApi::resolve(lib_);
  }

  ~NvmlBackend() override {
    bool any_hung = guard_.hung(kGlobalKey);
    for (unsigned i = 0; i < infos_.size(); ++i) any_hung = any_hung || guard_.hung(static_cast<int>(i));
    if (!any_hung) free_gpm_buffers();
    if (!any_hung && s_.shutdown != nullptr) (void)guard_.run(kGlobalKey, [f = s_.shutdown] { return f(); });
  }

  Result<void> init() {
    auto init = s_.init;
    auto r = guard_.run(kGlobalKey, [init] { return init(); });
    if (!r)
      return make_error(ErrorKind::no_gpu_library,
                        "nvmlInit did not return within " + std::to_string(guard_.timeout_ms()) + " ms");
    if (*r != kSuccess) {
      std::string why = error_text(*r);
      std::string fake = lib_.fake_last_error();
      if (!fake.empty()) why += ": " + fake;
      return make_error(ErrorKind::no_gpu_library, "nvmlInit failed (" + why + ") in " + lib_.origin());
    }
    driver_ = read_system_string(s_.driver_version);
    nvml_version_ = read_system_string(s_.nvml_version);
    auto count_fn = s_.count;
    auto count = std::make_shared<unsigned>(0);
    auto rc = guard_.run(kGlobalKey, [count_fn, count] { return count_fn(count.get()); });
    if (!rc)
      return make_error(ErrorKind::no_gpu_library, "nvmlDeviceGetCount did not return within " +
                                                       std::to_string(guard_.timeout_ms()) + " ms");
    if (*rc != kSuccess)
      return make_error(ErrorKind::no_gpu_library, "nvmlDeviceGetCount failed: " + error_text(*rc));
    for (unsigned i = 0; i < *count; ++i) open_device(i);
    return ok_result();
  }

  std::string vendor() const override { return "nvidia"; }
  std::optional<std::string> driver_version() const override { return driver_; }
  std::optional<std::string> library_version() const override { return nvml_version_; }
  const std::vector<DeviceInfo>& devices() const override { return infos_; }
  const Capabilities& capabilities(unsigned index) const override { return caps_.at(index); }
  std::string origin() const override { return lib_.origin(); }

  DeviceSample sample(unsigned index) override {
    std::lock_guard lock(sample_mu_);  // samples of several threads are serialised (NVML calls are anyway)
    DeviceSample out;
    out.index = index;
    out.t_ns = clock_ != nullptr ? clock_->monotonic_ns() : system_clock_.monotonic_ns();
    if (index >= infos_.size()) {
      out.state = DeviceState::lost;
      out.error = "no device " + std::to_string(index);
      return out;
    }
    Dev& d = devs_[index];
    const Capabilities& caps = caps_[index];
    Ctx ctx{index, &out};
    if (!d.probed && !guard_.hung(static_cast<int>(index))) probe(index);
    if (!d.probed) {
      // probe() stopped at a lost or hung device: report why
      out.state = guard_.hung(static_cast<int>(index)) ? DeviceState::unresponsive : DeviceState::lost;
      out.error = caps.notes.empty() ? "device did not answer" : caps.notes.back();
      if (out.state == DeviceState::unresponsive)
        out.error = "an earlier NVML call on this device has not returned yet";
      return out;
    }
    Device h = d.handle;
    if (caps.utilization) {
      Utilization u{};
      if (!ctx.check(call_out(index, s_.utilization, h, u), "nvmlDeviceGetUtilizationRates", this))
        return out;
      if (ctx.last_ok) {
        out.utilization_pct = u.gpu;
        out.memory_util_pct = u.memory;
      }
    }
    if (caps.memory) {
      std::optional<std::uint64_t> used;
      if (!read_memory(ctx, h, nullptr, &used)) return out;
      out.memory_used_bytes = used;
    }
    if (caps.power) {
      unsigned mw = 0;
      if (!ctx.check(call_out(index, s_.power, h, mw), "nvmlDeviceGetPowerUsage", this)) return out;
      if (ctx.last_ok) out.power_mw = mw;
    }
    if (caps.energy_counter) {
      unsigned long long mj = 0;
      if (!ctx.check(call_out(index, s_.energy, h, mj), "nvmlDeviceGetTotalEnergyConsumption", this))
        return out;
      if (ctx.last_ok) out.energy_mj = mj;
    }
    if (caps.temperature) {
      unsigned c = 0;
      if (!ctx.check(call_arg(index, s_.temperature, h, kTemperatureGpu, c), "nvmlDeviceGetTemperature",
                     this))
        return out;
      if (ctx.last_ok) out.temperature_c = c;
    }
    if (caps.clocks) {
      unsigned sm = 0, mem = 0;
      if (!ctx.check(call_arg(index, s_.clock, h, kClockSm, sm), "nvmlDeviceGetClockInfo", this)) return out;
      if (ctx.last_ok) out.sm_clock_mhz = sm;
      if (!ctx.check(call_arg(index, s_.clock, h, kClockMem, mem), "nvmlDeviceGetClockInfo", this))
        return out;
      if (ctx.last_ok) out.mem_clock_mhz = mem;
    }
    if (caps.processes) {
      if (!read_processes(ctx, h, out.processes)) return out;
    }
    if (caps.process_utilization && !out.processes.empty()) {
      if (!read_process_utilization(ctx, h, out.processes)) return out;
    }
    if (caps.gpm && !read_gpm(ctx, d.gpm, h, std::nullopt, out.gpm)) return out;
    for (const MigInstance& mi : infos_[index].mig_instances) {
      MigInstance copy = mi;
      if (mi.index < d.mig_handles.size() && d.mig_handles[mi.index] != nullptr) {
        std::optional<std::uint64_t> total, used;
        if (!read_memory(ctx, d.mig_handles[mi.index], &total, &used)) return out;
        copy.memory_used_bytes = used;
      }
      if (mi.index < d.mig_gpm.size() && d.mig_gpm[mi.index].allocated() &&
          !read_gpm(ctx, d.mig_gpm[mi.index], h, mi.gpu_instance_id, copy.gpm)) {
        return out;
      }
      out.mig_instances.push_back(std::move(copy));
    }
    return out;
  }

 private:
  struct Dev {
    Device handle = nullptr;
    bool probed = false;  ///< the last probe() ran to its end
    std::vector<Device> mig_handles;
    unsigned long long last_seen_us = 0;
    GpmPair gpm;                   ///< the board's GPM sample buffers
    std::vector<GpmPair> mig_gpm;  ///< per MIG device index (nvmlGpmMigSampleGet)
  };

  /// Bookkeeping of one sample: turns call outcomes into state.
  struct Ctx {
    unsigned index;
    DeviceSample* out;
    bool last_ok = false;
    /// False when the sample must stop (device lost or unresponsive).
    bool check(const Call& c, const char* fn, const NvmlBackend* self) {
      last_ok = c.ok();
      if (c.kind == Call::timed_out || c.kind == Call::skipped) {
        out->state = DeviceState::unresponsive;
        out->error = c.kind == Call::timed_out ? std::string(fn) + " did not return within " +
                                                     std::to_string(self->guard_.timeout_ms()) + " ms"
                                               : "an earlier NVML call on this device has not returned yet";
        return false;
      }
      if (c.lost()) {
        out->state = DeviceState::lost;
        out->error = std::string(fn) + ": " + self->error_text(c.rc);
        return false;
      }
      // Sizing answers and "nothing newer" are part of normal use, not failures.
      if (c.kind == Call::done && c.rc != kSuccess && c.rc != kErrorInsufficientSize &&
          c.rc != kErrorNotFound && out->error.empty()) {
        out->error = std::string(fn) + ": " + self->error_text(c.rc);
      }
      return true;
    }
  };

  std::string error_text(Return rc) const {
    std::string name = return_name(rc);
    std::string text = name.empty() ? "NVML error " + std::to_string(rc) : "NVML_" + name;
    return text;
  }

  template <class T, class F>
  Call guarded(int key, F fn, T& out) {
    if (guard_.hung(key)) return Call{Call::skipped, kErrorTimeout};
    auto box = std::make_shared<T>(out);
    auto r = guard_.run(key, [fn, box]() mutable { return fn(*box); });
    if (!r) return Call{Call::timed_out, kErrorTimeout};
    out = *box;
    return Call{Call::done, *r};
  }

  template <class Fn, class T>
  Call call_out(unsigned index, Fn fn, Device h, T& out) {
    if (fn == nullptr) return Call{};
    return guarded(
        static_cast<int>(index), [fn, h](T& v) { return fn(h, &v); }, out);
  }

  template <class Fn, class T>
  Call call_arg(unsigned index, Fn fn, Device h, unsigned arg, T& out) {
    if (fn == nullptr) return Call{};
    return guarded(
        static_cast<int>(index), [fn, h, arg](T& v) { return fn(h, arg, &v); }, out);
  }

  Call call_str(unsigned index, DevStrFn fn, Device h, std::string& out) {
    if (fn == nullptr) return Call{};
    std::array<char, kNameLen> buf{};
    Call c = guarded(
        static_cast<int>(index), [fn, h](std::array<char, kNameLen>& b) { return fn(h, b.data(), kNameLen); },
        buf);
    if (c.ok()) out.assign(buf.data(), strnlen(buf.data(), buf.size()));
    return c;
  }

  Call get_handle(unsigned index, Device& out) {
    auto fn = s_.handle;
    return guarded(
        static_cast<int>(index), [fn, index](Device& h) { return fn(index, &h); }, out);
  }

  std::optional<std::string> read_system_string(SysStrFn fn) {
    if (fn == nullptr) return std::nullopt;
    std::array<char, kNameLen> buf{};
    Call c = guarded(
        kGlobalKey, [fn](std::array<char, kNameLen>& b) { return fn(b.data(), kNameLen); }, buf);
    if (!c.ok()) return std::nullopt;
    return std::string(buf.data(), strnlen(buf.data(), buf.size()));
  }

  /// Memory through nvmlDeviceGetMemoryInfo_v2 (version-stamped struct), else v1.
  bool read_memory(Ctx& ctx, Device h, std::optional<std::uint64_t>* total,
                   std::optional<std::uint64_t>* used) {
    if (s_.mem_v2 != nullptr) {
      MemoryV2 m{};
      m.version = kMemoryV2Version;
      if (!ctx.check(call_out(ctx.index, s_.mem_v2, h, m), "nvmlDeviceGetMemoryInfo_v2", this)) return false;
      if (ctx.last_ok) {
        if (total != nullptr) *total = m.total;
        if (used != nullptr) *used = m.used;
        return true;
      }
    }
    MemoryV1 m{};
    if (!ctx.check(call_out(ctx.index, s_.mem_v1, h, m), "nvmlDeviceGetMemoryInfo", this)) return false;
    if (ctx.last_ok) {
      if (total != nullptr) *total = m.total;
      if (used != nullptr) *used = m.used;
    }
    return true;
  }

  struct ProcBuf {
    std::vector<unsigned char> bytes;
    unsigned count = 0;
  };

  /// One legacy process list (compute or MPS) with the chosen stride; sizes with a count-0 call first.
  bool read_legacy_list(Ctx& ctx, Device h, ProcFn fn, const char* name, std::vector<ProcessSample>& out) {
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

  struct DetailBuf {
    std::vector<ProcessDetailV1> entries;
    ProcessDetailListV1 list{};
  };

  bool read_detail_list(Ctx& ctx, Device h, unsigned mode, std::vector<ProcessSample>& out) {
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

  bool read_processes(Ctx& ctx, Device h, std::vector<ProcessSample>& out) {
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

  struct UtilBuf {
    std::vector<ProcessUtilizationSample> samples;
    unsigned count = 0;
  };

  /// SM% per process from samples newer than the last one seen on this device; >100 % is dropped.
  bool read_process_utilization(Ctx& ctx, Device h, std::vector<ProcessSample>& procs) {
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

  static bool works(const Call& c) { return c.ok(); }

  void note_failure(Capabilities& caps, const char* what, const Call& c) {
    if (c.kind == Call::absent) {
      caps.notes.push_back(std::string(what) + ": symbol not exported by this NVML");
    } else if (c.kind == Call::done && c.rc == kErrorNoPermission) {
      caps.notes.push_back(std::string(what) + ": no permission (NVML_ERROR_NO_PERMISSION)");
    } else if (c.kind == Call::done && c.rc != kSuccess && c.rc != kErrorNotSupported &&
               c.rc != kErrorInsufficientSize && c.rc != kErrorNotFound) {
      caps.notes.push_back(std::string(what) + ": " + error_text(c.rc));
    }
  }

  void open_device(unsigned index) {
    infos_.emplace_back();
    caps_.emplace_back();
    devs_.emplace_back();
    probe(index);
  }

  /// Reads the device's facts and probes each capability once. Interrupted by a lost or hung device, it
  /// runs again at the next sample() once the device answers.
  void probe(unsigned index) {
    DeviceInfo& inf = infos_[index];
    Capabilities& cap = caps_[index];
    Dev& dev = devs_[index];
    inf = DeviceInfo{};
    inf.index = index;
    cap = Capabilities{};
    dev.mig_handles.clear();
    DeviceSample scratch;
    Ctx ctx{index, &scratch};

    Device h = nullptr;
    if (!ctx.check(get_handle(index, h), "nvmlDeviceGetHandleByIndex", this) || !ctx.last_ok) {
      cap.notes.push_back("device handle: " +
                          (scratch.error.empty() ? std::string("unavailable") : scratch.error));
      return;
    }
    dev.handle = h;
    auto stop = [&](const Call& c, const char* fn) {
      if (!ctx.check(c, fn, this)) {
        cap.notes.push_back(scratch.error);
        return true;
      }
      return false;
    };
    Call c = call_str(index, s_.name, h, inf.name);
    if (stop(c, "nvmlDeviceGetName")) return;
    c = call_str(index, s_.uuid, h, inf.uuid);
    if (stop(c, "nvmlDeviceGetUUID")) return;
    PciInfo pci{};
    c = call_out(index, s_.pci, h, pci);
    if (stop(c, "nvmlDeviceGetPciInfo_v3")) return;
    if (c.ok()) inf.pci_bus_id.assign(pci.bus_id, strnlen(pci.bus_id, sizeof(pci.bus_id)));
    std::optional<std::uint64_t> total, used;
    if (!read_memory(ctx, h, &total, &used)) {
      cap.notes.push_back(scratch.error);
      return;
    }
    inf.memory_total_bytes = total;
    cap.memory = used.has_value();
    unsigned limit = 0;
    c = call_out(index, s_.power_limit, h, limit);
    if (stop(c, "nvmlDeviceGetEnforcedPowerLimit")) return;
    if (c.ok()) inf.power_limit_mw = limit;
    unsigned arch = 0;
    c = call_out(index, s_.architecture, h, arch);
    if (stop(c, "nvmlDeviceGetArchitecture")) return;
    if (c.ok() && *architecture_name(arch) != '\0') inf.architecture = architecture_name(arch);
    unsigned minor = 0;
    c = call_out(index, s_.minor_number, h, minor);
    if (stop(c, "nvmlDeviceGetMinorNumber")) return;
    if (c.ok()) inf.minor_number = minor;

    Utilization u{};
    c = call_out(index, s_.utilization, h, u);
    if (stop(c, "nvmlDeviceGetUtilizationRates")) return;
    cap.utilization = works(c);
    note_failure(cap, "utilization (nvmlDeviceGetUtilizationRates)", c);
    unsigned mw = 0;
    c = call_out(index, s_.power, h, mw);
    if (stop(c, "nvmlDeviceGetPowerUsage")) return;
    cap.power = works(c);
    note_failure(cap, "power (nvmlDeviceGetPowerUsage)", c);
    unsigned long long mj = 0;
    c = call_out(index, s_.energy, h, mj);
    if (stop(c, "nvmlDeviceGetTotalEnergyConsumption")) return;
    cap.energy_counter = works(c);
    note_failure(cap, "energy counter (nvmlDeviceGetTotalEnergyConsumption)", c);
    unsigned temp = 0;
    c = call_arg(index, s_.temperature, h, kTemperatureGpu, temp);
    if (stop(c, "nvmlDeviceGetTemperature")) return;
    cap.temperature = works(c);
    note_failure(cap, "temperature (nvmlDeviceGetTemperature)", c);
    unsigned mhz = 0;
    c = call_arg(index, s_.clock, h, kClockSm, mhz);
    if (stop(c, "nvmlDeviceGetClockInfo")) return;
    cap.clocks = works(c);
    note_failure(cap, "clocks (nvmlDeviceGetClockInfo)", c);

    unsigned current = 0;
    if (s_.mig_mode != nullptr) {
      auto fn = s_.mig_mode;
      std::pair<unsigned, unsigned> modes{0, 0};
      c = guarded(
          static_cast<int>(index),
          [fn, h](std::pair<unsigned, unsigned>& m) { return fn(h, &m.first, &m.second); }, modes);
      if (stop(c, "nvmlDeviceGetMigMode")) return;
      if (c.ok()) {
        current = modes.first;
        inf.mig_enabled = current == 1;
        cap.mig = true;
      }
    }
    if (inf.mig_enabled.value_or(false)) open_mig(ctx, inf, dev, cap);

    cap.process_api = process_api_name(s_.proc_api);
    if (s_.proc_api != ProcessApi::none) {
      std::vector<ProcessSample> procs;
      std::string before = scratch.error;
      if (!read_processes(ctx, h, procs)) {
        cap.notes.push_back(scratch.error);
        return;
      }
      cap.processes = scratch.error == before;
      if (!cap.processes) cap.notes.push_back("processes: " + scratch.error);
    } else {
      cap.notes.push_back("processes: no running-process entry point exported by this NVML");
    }
    if (s_.proc_util != nullptr) {
      if (inf.mig_enabled.value_or(false)) {
        cap.notes.push_back("process utilization: not available from NVML in MIG mode");
      } else {
        auto fn = s_.proc_util;
        UtilBuf buf;
        c = guarded(
            static_cast<int>(index), [fn, h](UtilBuf& b) { return fn(h, nullptr, &b.count, 0); }, buf);
        if (stop(c, "nvmlDeviceGetProcessUtilization")) return;
        cap.process_utilization =
            c.kind == Call::done &&
            (c.rc == kSuccess || c.rc == kErrorInsufficientSize || c.rc == kErrorNotFound);
        note_failure(cap, "process utilization (nvmlDeviceGetProcessUtilization)", c);
      }
    } else {
      cap.notes.push_back("process utilization: nvmlDeviceGetProcessUtilization not exported by this NVML");
    }
    if (!probe_gpm(ctx, inf, dev, cap)) {
      cap.notes.push_back(scratch.error);
      return;
    }
    dev.probed = true;
  }

  /// Takes one GPM sample of a board (`gi` empty) or of its MIG GPU instance `gi` into `buf`.
  Call take_gpm_sample(unsigned index, GpmSample buf, Device h, std::optional<unsigned> gi) {
    int unused = 0;
    if (gi) {
      auto fn = gpm_.mig_sample;
      const unsigned id = *gi;
      return guarded(
          static_cast<int>(index), [fn, h, id, buf](int&) { return fn(h, id, buf); }, unused);
    }
    auto fn = gpm_.sample;
    return guarded(
        static_cast<int>(index), [fn, h, buf](int&) { return fn(h, buf); }, unused);
  }

  /// Allocates a target's two GPM buffers (once) and takes its first sample; the pair is active when that
  /// worked. False when the device stopped answering.
  bool start_gpm(Ctx& ctx, GpmPair& pair, Device h, std::optional<unsigned> gi) {
    pair.newest = -1;
    pair.active = false;
    for (GpmSample& b : pair.buf) {
      if (b != nullptr) continue;
      auto fn = gpm_.alloc;
      Call c = guarded(
          static_cast<int>(ctx.index), [fn](GpmSample& out) { return fn(&out); }, b);
      if (!ctx.check(c, "nvmlGpmSampleAlloc", this)) return false;
      if (!c.ok()) {
        b = nullptr;
        return true;
      }
    }
    Call c = take_gpm_sample(ctx.index, pair.buf[0], h, gi);
    if (!ctx.check(c, gi ? "nvmlGpmMigSampleGet" : "nvmlGpmSampleGet", this)) return false;
    if (c.ok()) {
      pair.newest = 0;
      pair.active = true;
    }
    return true;
  }

  /// One new GPM sample of an active target; with the previous one, the metrics of the interval between
  /// them. False when the device stopped answering.
  bool read_gpm(Ctx& ctx, GpmPair& pair, Device h, std::optional<unsigned> gi, GpmMetrics& out) {
    if (!pair.active || !pair.allocated()) return true;
    const int into = pair.next();
    Call c = take_gpm_sample(ctx.index, pair.buf[into], h, gi);
    if (!ctx.check(c, gi ? "nvmlGpmMigSampleGet" : "nvmlGpmSampleGet", this)) return false;
    if (!c.ok()) return true;
    const int previous = pair.newest;
    pair.newest = into;
    if (previous < 0) return true;
    auto fn = gpm_.metrics;
    auto req = std::make_unique<GpmMetricsGet>();
    fill_gpm_request(*req, pair.buf[previous], pair.buf[into]);
    c = guarded(
        static_cast<int>(ctx.index), [fn](GpmMetricsGet& r) { return fn(&r); }, *req);
    if (!ctx.check(c, "nvmlGpmMetricsGet", this)) return false;
    if (c.ok()) out = decode_gpm(*req);
    return true;
  }

  /// GPM support of a device and its MIG instances; takes the first sample of each. False when the device
  /// stopped answering.
  bool probe_gpm(Ctx& ctx, const DeviceInfo& inf, Dev& dev, Capabilities& cap) {
    constexpr const char* kWhat = "GPM (SM, tensor-core, FP pipe and DRAM activity)";
    if (!gpm_.usable()) {
      cap.notes.push_back(std::string(kWhat) + ": " + gpm_.missing() + " not exported by this NVML");
      return true;
    }
    auto fn = gpm_.query;
    Device h = dev.handle;
    GpmSupport support{kGpmSupportVersion, 0};
    Call c = guarded(
        static_cast<int>(ctx.index), [fn, h](GpmSupport& sup) { return fn(h, &sup); }, support);
    if (!ctx.check(c, "nvmlGpmQueryDeviceSupport", this)) return false;
    if (!c.ok() || support.is_supported_device == 0) {
      cap.notes.push_back(std::string(kWhat) + ": not supported on this device (Hopper and newer)");
      return true;
    }
    if (!start_gpm(ctx, dev.gpm, h, std::nullopt)) return false;
    cap.gpm = dev.gpm.active;
    dev.mig_gpm.resize(dev.mig_handles.size());
    if (!inf.mig_instances.empty() && gpm_.mig_sample == nullptr) {
      cap.notes.push_back(std::string(kWhat) +
                          " per MIG instance: nvmlGpmMigSampleGet not exported by this NVML");
    } else {
      for (const MigInstance& mi : inf.mig_instances) {
        if (mi.index >= dev.mig_gpm.size()) continue;
        if (!start_gpm(ctx, dev.mig_gpm[mi.index], h, mi.gpu_instance_id)) return false;
        cap.gpm = cap.gpm || dev.mig_gpm[mi.index].active;
      }
    }
    if (!cap.gpm) cap.notes.push_back(std::string(kWhat) + ": supported, but no sample could be taken");
    return true;
  }

  void free_gpm_buffers() {
    auto fn = gpm_.free;
    if (fn == nullptr) return;
    auto release = [&](GpmPair& pair) {
      for (GpmSample& b : pair.buf) {
        if (b == nullptr) continue;
        GpmSample sample = b;
        (void)guard_.run(kGlobalKey, [fn, sample] { return fn(sample); });
        b = nullptr;
      }
    };
    for (Dev& d : devs_) {
      release(d.gpm);
      for (GpmPair& p : d.mig_gpm) release(p);
    }
  }

  void open_mig(Ctx& ctx, DeviceInfo& inf, Dev& dev, Capabilities& cap) {
    if (s_.max_mig == nullptr || s_.mig_handle == nullptr) {
      cap.notes.push_back("MIG: instance enumeration not exported by this NVML");
      return;
    }
    unsigned max = 0;
    Call c = call_out(ctx.index, s_.max_mig, dev.handle, max);
    if (!ctx.check(c, "nvmlDeviceGetMaxMigDeviceCount", this) || !c.ok()) return;
    // Slices on the board: the largest GPU instance profile it supports (7 on A100/H100, 4 on A30).
    std::optional<unsigned> board_slices;
    if (s_.gi_profile != nullptr) {
      for (unsigned p = 0; p < kGpuInstanceProfileCount; ++p) {
        GpuInstanceProfileInfo pi{};
        c = call_arg(ctx.index, s_.gi_profile, dev.handle, p, pi);
        // Profiles the board lacks answer NOT_SUPPORTED or INVALID_ARGUMENT: expected, not an error.
        if ((c.kind != Call::done || c.lost()) && !ctx.check(c, "nvmlDeviceGetGpuInstanceProfileInfo", this))
          return;
        if (c.ok() && pi.slice_count > 0 && pi.slice_count > board_slices.value_or(0))
          board_slices = pi.slice_count;
      }
    }
    if (!board_slices)
      cap.notes.push_back(
          "MIG: board slice count unknown (nvmlDeviceGetGpuInstanceProfileInfo); instances priced by memory");
    for (unsigned i = 0; i < max; ++i) {
      auto fn = s_.mig_handle;
      Device parent = dev.handle;
      Device mh = nullptr;
      c = guarded(
          static_cast<int>(ctx.index), [fn, parent, i](Device& out) { return fn(parent, i, &out); }, mh);
      if (!ctx.check(c, "nvmlDeviceGetMigDeviceHandleByIndex", this)) return;
      if (!c.ok()) continue;  // NOT_FOUND: no instance in this slot
      if (dev.mig_handles.size() <= i) dev.mig_handles.resize(i + 1, nullptr);
      dev.mig_handles[i] = mh;
      MigInstance mi;
      mi.index = i;
      if (!ctx.check(call_str(ctx.index, s_.uuid, mh, mi.uuid), "nvmlDeviceGetUUID", this)) return;
      unsigned gi = 0;
      c = call_out(ctx.index, s_.gi_id, mh, gi);
      if (!ctx.check(c, "nvmlDeviceGetGpuInstanceId", this)) return;
      if (c.ok()) mi.gpu_instance_id = gi;
      if (s_.attributes != nullptr) {
        DeviceAttributes attrs{};
        c = call_out(ctx.index, s_.attributes, mh, attrs);
        if ((c.kind != Call::done || c.lost()) && !ctx.check(c, "nvmlDeviceGetAttributes_v2", this)) return;
        if (c.ok() && attrs.gpu_instance_slice_count > 0) mi.slice_count = attrs.gpu_instance_slice_count;
      }
      if (mi.slice_count) mi.board_slices = board_slices;
      std::optional<std::uint64_t> total, used;
      if (!read_memory(ctx, mh, &total, &used)) return;
      mi.memory_total_bytes = total;
      mi.memory_used_bytes = used;
      inf.mig_instances.push_back(std::move(mi));
    }
  }

  Library lib_;
  Symbols s_;
  GpmApi gpm_;
  nvml::CallGuard guard_;
  Clock* clock_;
  SystemClock system_clock_;
  std::mutex sample_mu_;
  std::optional<std::string> driver_, nvml_version_;
  std::vector<DeviceInfo> infos_;
  std::vector<Capabilities> caps_;
  std::vector<Dev> devs_;
};

}  // namespace

Result<std::unique_ptr<GpuBackend>> open_nvml(const GpuBackendOptions& options) {
  GM_TRY(Library lib, Library::open(library_candidates(options.library_path)));
  Symbols syms = resolve_all(lib);
  std::vector<std::string> missing;
  if (syms.init == nullptr) missing.emplace_back("nvmlInit_v2/nvmlInit");
  if (syms.count == nullptr) missing.emplace_back("nvmlDeviceGetCount_v2/nvmlDeviceGetCount");
  if (syms.handle == nullptr)
    missing.emplace_back("nvmlDeviceGetHandleByIndex_v2/nvmlDeviceGetHandleByIndex");
  if (!missing.empty()) {
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    return make_error(ErrorKind::no_gpu_library, lib.origin() + " lacks required NVML symbols: " + names);
  }
  auto backend = std::make_unique<NvmlBackend>(std::move(lib), syms, options.call_timeout_ms, options.clock);
  GM_TRY_VOID(backend->init());
  return std::unique_ptr<GpuBackend>(std::move(backend));
}

}  // namespace gm
