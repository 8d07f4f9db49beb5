// NVML loaded with dlopen: symbol resolution, opening, probing and sampling a device (nvml_backend.h).
#include "gpu/nvml_backend.h"

#include <initializer_list>

#include "util/enum_text.h"

namespace gm::gpu::nvml {

namespace {

/// The first of `names` the library exports, typed; null when none is.
template <class F>
F first_exported(const Library& lib, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* symbol = lib.resolve(name)) return reinterpret_cast<F>(symbol);
  }
  return nullptr;
}

/// The MPS twin of each list-style process API (the detail list covers both modes itself).
constexpr util::EnumText<ProcessApi> kMpsProcessApiNames[] = {
    {ProcessApi::v3, "nvmlDeviceGetMPSComputeRunningProcesses_v3"},
    {ProcessApi::v2, "nvmlDeviceGetMPSComputeRunningProcesses_v2"},
    {ProcessApi::v1, "nvmlDeviceGetMPSComputeRunningProcesses"}};

const char* mps_process_api_name(ProcessApi api) {
  return util::enum_text(kMpsProcessApiNames, api, "");
}

}  // namespace

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

Result<void> NvmlBackend::init() {
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

DeviceSample NvmlBackend::sample(unsigned index) {
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
    if (!ctx.check(call_out(index, s_.utilization, h, u), "nvmlDeviceGetUtilizationRates", this)) return out;
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
    if (!ctx.check(call_arg(index, s_.temperature, h, kTemperatureGpu, c), "nvmlDeviceGetTemperature", this))
      return out;
    if (ctx.last_ok) out.temperature_c = c;
  }
  if (caps.clocks) {
    unsigned sm = 0, mem = 0;
    if (!ctx.check(call_arg(index, s_.clock, h, kClockSm, sm), "nvmlDeviceGetClockInfo", this)) return out;
    if (ctx.last_ok) out.sm_clock_mhz = sm;
    if (!ctx.check(call_arg(index, s_.clock, h, kClockMem, mem), "nvmlDeviceGetClockInfo", this)) return out;
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

bool NvmlBackend::read_memory(Ctx& ctx, Device h, std::optional<std::uint64_t>* total,
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

void NvmlBackend::note_failure(Capabilities& caps, const char* what, const Call& c) {
  if (c.kind == Call::absent) {
    caps.notes.push_back(std::string(what) + ": symbol not exported by this NVML");
  } else if (c.kind == Call::done && c.rc == kErrorNoPermission) {
    caps.notes.push_back(std::string(what) + ": no permission (NVML_ERROR_NO_PERMISSION)");
  } else if (c.kind == Call::done && c.rc != kSuccess && c.rc != kErrorNotSupported &&
             c.rc != kErrorInsufficientSize && c.rc != kErrorNotFound) {
    caps.notes.push_back(std::string(what) + ": " + error_text(c.rc));
  }
}

void NvmlBackend::open_device(unsigned index) {
  infos_.emplace_back();
  caps_.emplace_back();
  devs_.emplace_back();
  probe(index);
}

void NvmlBackend::probe(unsigned index) {
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
      cap.process_utilization = c.kind == Call::done && (c.rc == kSuccess || c.rc == kErrorInsufficientSize ||
                                                         c.rc == kErrorNotFound);
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

}  // namespace gm::gpu::nvml

namespace gm::gpu {

using namespace gm::gpu::nvml;

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

}  // namespace gm::gpu
