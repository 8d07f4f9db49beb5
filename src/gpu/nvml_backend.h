#pragma once
// The NVML GpuBackend, shared by its parts: nvml_backend.cpp (open, probe, sample), nvml_processes.cpp
// (process lists and per-process utilization) and nvml_mig_gpm.cpp (MIG instances and GPM activity).
// Every NVML call runs through CallGuard (bounded by GpuBackendOptions::call_timeout_ms); a device with a
// hung call is reported unresponsive and skipped until the call returns; GPU_IS_LOST / RESET_REQUIRED mark
// the device lost.
#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gpu/call_guard.h"
#include "gpu/gpu.h"
#include "gpu/nvml_abi.h"
#include "gpu/nvml_gpm.h"
#include "gpu/nvml_loader.h"

namespace gm::gpu::nvml {

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

/// Resolves every entry point the library exports (absent ones stay null).
Symbols resolve_all(const Library& lib);

class NvmlBackend final : public GpuBackend {
 public:
  NvmlBackend(Library lib, Symbols syms, std::int64_t timeout_ms, util::Clock* clock)
      : lib_(std::move(lib)), s_(syms), guard_(timeout_ms), clock_(clock) {
    gpm_ = GpmApi::resolve(lib_);
  }

  ~NvmlBackend() override {
    bool any_hung = guard_.hung(kGlobalKey);
    for (unsigned i = 0; i < infos_.size(); ++i) any_hung = any_hung || guard_.hung(static_cast<int>(i));
    if (!any_hung) free_gpm_buffers();
    if (!any_hung && s_.shutdown != nullptr) (void)guard_.run(kGlobalKey, [f = s_.shutdown] { return f(); });
  }

  Result<void> init();

  std::string vendor() const override { return "nvidia"; }
  std::optional<std::string> driver_version() const override { return driver_; }
  std::optional<std::string> library_version() const override { return nvml_version_; }
  const std::vector<DeviceInfo>& devices() const override { return infos_; }
  const Capabilities& capabilities(unsigned index) const override { return caps_.at(index); }
  std::string origin() const override { return lib_.origin(); }

  DeviceSample sample(unsigned index) override;

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
                   std::optional<std::uint64_t>* used);

  struct ProcBuf {
    std::vector<unsigned char> bytes;
    unsigned count = 0;
  };

  /// One legacy process list (compute or MPS) with the chosen stride; sizes with a count-0 call first.
  bool read_legacy_list(Ctx& ctx, Device h, ProcFn fn, const char* name, std::vector<ProcessSample>& out);

  struct DetailBuf {
    std::vector<ProcessDetailV1> entries;
    ProcessDetailListV1 list{};
  };

  bool read_detail_list(Ctx& ctx, Device h, unsigned mode, std::vector<ProcessSample>& out);

  bool read_processes(Ctx& ctx, Device h, std::vector<ProcessSample>& out);

  struct UtilBuf {
    std::vector<ProcessUtilizationSample> samples;
    unsigned count = 0;
  };

  /// SM% per process from samples newer than the last one seen on this device; >100 % is dropped.
  bool read_process_utilization(Ctx& ctx, Device h, std::vector<ProcessSample>& procs);

  static bool works(const Call& c) { return c.ok(); }

  void note_failure(Capabilities& caps, const char* what, const Call& c);

  void open_device(unsigned index);

  /// Reads the device's facts and probes each capability once. Interrupted by a lost or hung device, it
  /// runs again at the next sample() once the device answers.
  void probe(unsigned index);

  /// Takes one GPM sample of a board (`gi` empty) or of its MIG GPU instance `gi` into `buf`.
  Call take_gpm_sample(unsigned index, GpmSample buf, Device h, std::optional<unsigned> gi);

  /// Allocates a target's two GPM buffers (once) and takes its first sample; the pair is active when that
  /// worked. False when the device stopped answering.
  bool start_gpm(Ctx& ctx, GpmPair& pair, Device h, std::optional<unsigned> gi);

  /// One new GPM sample of an active target; with the previous one, the metrics of the interval between
  /// them. False when the device stopped answering.
  bool read_gpm(Ctx& ctx, GpmPair& pair, Device h, std::optional<unsigned> gi, GpmMetrics& out);

  /// GPM support of a device and its MIG instances; takes the first sample of each. False when the device
  /// stopped answering.
  bool probe_gpm(Ctx& ctx, const DeviceInfo& inf, Dev& dev, Capabilities& cap);

  void free_gpm_buffers();

  void open_mig(Ctx& ctx, DeviceInfo& inf, Dev& dev, Capabilities& cap);

  Library lib_;
  Symbols s_;
  GpmApi gpm_;
  nvml::CallGuard guard_;
  util::Clock* clock_;
  util::SystemClock system_clock_;
  std::mutex sample_mu_;
  std::optional<std::string> driver_, nvml_version_;
  std::vector<DeviceInfo> infos_;
  std::vector<Capabilities> caps_;
  std::vector<Dev> devs_;
};

}  // namespace gm::gpu::nvml
