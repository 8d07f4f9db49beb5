// A fake libnvidia-ml.so.1: exports the NVML functions gpumeter calls (C linkage, NVML's names and ABI),
// answering from the scenario file named by $FAKE_NVML_SCENARIO (format: docs/fake-nvml.md).
#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "scenario.h"

namespace {

using fake_nvml::DeviceSpec;
using fake_nvml::Scenario;
using fake_nvml::Segment;

constexpr int kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6,
              kInsufficientSize = 7, kUnknown = 999, kVersionMismatch = 25;

/// A device handle: a board (mig < 0) or one of its MIG instances.
struct Handle {
  std::size_t device = 0;
  int mig = -1;
};

struct State {
  std::mutex mu;
  bool loaded = false;
  std::string loaded_path;
  const Scenario* scenario = nullptr;  ///< never freed (see load_locked)
  std::string error;
  std::string missing_csv;
  bool initialised = false;
  std::chrono::steady_clock::time_point t0;
  std::optional<double> frozen_t_s;            ///< fakeNvmlFreezeTime (tests)
  std::vector<Handle*> boards;                 ///< one per device
  std::vector<std::vector<Handle*>> migs;      ///< per device, per instance
  std::vector<const Scenario*> retired_scenarios;  ///< earlier scenarios, kept for calls still running
  std::vector<Handle*> retired_handles;
};

/// Never destroyed: a call abandoned by gpumeter's watchdog may still be running at exit.
State& state() {
  static State* s = new State();
  return *s;
}

/// Loads $FAKE_NVML_SCENARIO; again while NVML is not initialised or when the variable names another file, so one process may run
/// several scenarios. Earlier scenarios and handles are kept alive for calls still running on them.
void load_locked(State& s) {
  const char* env = std::getenv("FAKE_NVML_SCENARIO");
  std::string wanted = env != nullptr ? env : "";
  if (s.loaded && s.initialised && wanted == s.loaded_path) return;
  if (s.loaded && wanted != s.loaded_path) s.initialised = false;  // a new scenario starts a new clock
  s.loaded = true;
  s.loaded_path = wanted;
  if (s.scenario != nullptr) s.retired_scenarios.push_back(s.scenario);
  for (auto* b : s.boards) s.retired_handles.push_back(b);
  for (auto& list : s.migs) s.retired_handles.insert(s.retired_handles.end(), list.begin(), list.end());
  s.scenario = nullptr;
  s.error.clear();
  s.missing_csv.clear();
  s.boards.clear();
  s.migs.clear();
  const char* path = std::getenv("FAKE_NVML_SCENARIO");
  if (path == nullptr || *path == '\0') {
    s.error = "FAKE_NVML_SCENARIO is not set (it names the scenario JSON file)";
    return;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    s.error = std::string("scenario ") + path + ": cannot open: " + std::strerror(errno);
    return;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  auto parsed = fake_nvml::parse_scenario(buf.str(), path, s.error);
  if (!parsed) return;
  s.scenario = new Scenario(std::move(*parsed));
  for (const auto& name : s.scenario->missing_symbols) s.missing_csv += (s.missing_csv.empty() ? "" : ",") + name;
  for (std::size_t i = 0; i < s.scenario->devices.size(); ++i) {
    s.boards.push_back(new Handle{i, -1});
    s.migs.emplace_back();
    for (std::size_t m = 0; m < s.scenario->devices[i].mig_instances.size(); ++m) {
      s.migs.back().push_back(new Handle{i, static_cast<int>(m)});
    }
  }
}

double now_s(const State& s) {
  if (s.frozen_t_s) return *s.frozen_t_s;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - s.t0).count();
}

/// Checks initialisation, resolves the handle and applies the device's faults for `fn` at the current time.
/// Returns kSuccess to go on (with *dev, *t set), or the code to return.
int enter(const char* fn, void* raw, const DeviceSpec** dev, Handle** handle, double* t) {
  State& s = state();
  std::int64_t hang_ms = 0;
  std::optional<int> ret;
  {
    std::lock_guard lock(s.mu);
    if (!s.initialised) return kUninitialized;
    auto* h = static_cast<Handle*>(raw);
    if (h == nullptr) return kInvalidArgument;
    bool known = false;
    for (auto* b : s.boards) known = known || b == h;
    for (auto& list : s.migs) {
      for (auto* m : list) known = known || m == h;
    }
    if (!known) return kInvalidArgument;
    *handle = h;
    *dev = &s.scenario->devices[h->device];
    *t = now_s(s);
    for (const auto& f : (*dev)->faults) {
      if (*t < f.t_s || *t >= f.until_s) continue;
      if (f.function != "*" && f.function != fn) continue;
      hang_ms += f.hang_ms;
      if (f.ret && !ret) ret = f.ret;
    }
  }
  if (hang_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hang_ms));
  if (ret) return *ret;
  return kSuccess;
}

template <class T>
int put(std::optional<double> v, T* out) {
  if (!v) return kNotSupported;
  if (out == nullptr) return kInvalidArgument;
  *out = static_cast<T>(std::llround(*v));
  return kSuccess;
}

int copy_string(const std::string& text, char* out, unsigned len) {
  if (out == nullptr) return kInvalidArgument;
  if (text.size() + 1 > len) return kInsufficientSize;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return kSuccess;
}

constexpr unsigned long long kMiB = 1024ULL * 1024ULL;

struct Proc {
  unsigned pid;
  unsigned long long mem_bytes;
  std::optional<double> sm_util;
};

/// PIDs of live processes whose /proc/PID/comm is `comm`.
std::vector<unsigned> pids_with_comm(const std::string& comm) {
  std::vector<unsigned> pids;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return pids;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    unsigned long pid = std::strtoul(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/comm");
    std::string line;
    if (std::getline(in, line) && line == comm) pids.push_back(static_cast<unsigned>(pid));
  }
  closedir(dir);
  return pids;
}

std::vector<Proc> processes_of(const Segment& seg) {
  std::vector<Proc> out;
  for (const auto& p : seg.processes) {
    auto mem = static_cast<unsigned long long>(std::llround(p.mem_mib.value_or(0) * static_cast<double>(kMiB)));
    std::vector<unsigned> pids = p.pid ? std::vector<unsigned>{*p.pid} : pids_with_comm(*p.comm);
    for (unsigned pid : pids)
      out.push_back(Proc{p.foreign_pid ? pid + fake_nvml::kForeignPidOffset : pid, p.mem_mib ? mem : ~0ULL, p.sm_util});
  }
  return out;
}

template <class Entry>
int fill_processes(void* raw, unsigned* count, Entry* infos, const char* fn, bool mps) {
  const DeviceSpec* dev = nullptr;
  Handle* h = nullptr;
  double t = 0;
  if (int rc = enter(fn, raw, &dev, &h, &t); rc != kSuccess) return rc;
  if (count == nullptr) return kInvalidArgument;
  std::vector<Proc> procs = mps || h->mig >= 0 ? std::vector<Proc>{} : processes_of(fake_nvml::segment_at(*dev, t));
  if (*count < procs.size() || (infos == nullptr && !procs.empty())) {
    *count = static_cast<unsigned>(procs.size());
    return kInsufficientSize;
  }
  *count = static_cast<unsigned>(procs.size());
  for (std::size_t i = 0; i < procs.size(); ++i) {
    Entry e{};
    e.pid = procs[i].pid;
    e.usedGpuMemory = procs[i].mem_bytes;
    if constexpr (requires { e.gpuInstanceId; }) {
      e.gpuInstanceId = 0xFFFFFFFFU;
      e.computeInstanceId = 0xFFFFFFFFU;
    }
    infos[i] = e;
  }
  return kSuccess;
}

}  // namespace

// ---- NVML's types, as NVML declares them -------------------------------------------------------
extern "C" {

typedef struct { unsigned int gpu; unsigned int memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessDetail_v1_t;
typedef struct {
  unsigned int version, mode, numProcArrayEntries;
  nvmlProcessDetail_v1_t* procArray;
} nvmlProcessDetailList_v1_t;
typedef struct {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

#define FAKE_EXPORT __attribute__((visibility("default")))
#define ENTER(fn)                                             \
  const DeviceSpec* dev = nullptr;                            \
  Handle* h = nullptr;                                        \
  double t = 0;                                               \
  if (int rc_ = enter(fn, device, &dev, &h, &t); rc_ != kSuccess) return rc_

/// Comma-separated functions the scenario declares missing (gpumeter's loader treats them as absent).
FAKE_EXPORT const char* fakeNvmlMissingSymbols(void) {
  State& s = state();
  std::lock_guard lock(s.mu);
  load_locked(s);
  return s.missing_csv.c_str();
}

/// Test hook: from now on the scenario clock reads `t_s` seconds since nvmlInit (a negative value unfreezes it).
FAKE_EXPORT void fakeNvmlFreezeTime(double t_s) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (t_s < 0) {
    s.frozen_t_s.reset();
  } else {
    s.frozen_t_s = t_s;
  }
}

/// Why the last nvmlInit failed ("" when it did not).
FAKE_EXPORT const char* fakeNvmlLastError(void) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.error.c_str();
}

FAKE_EXPORT int nvmlInit_v2(void) {
  State& s = state();
  std::lock_guard lock(s.mu);
  load_locked(s);
  if (!s.scenario) return kUnknown;
  if (!s.initialised) s.t0 = std::chrono::steady_clock::now();
  s.initialised = true;
  return kSuccess;
}
FAKE_EXPORT int nvmlInit(void) { return nvmlInit_v2(); }
FAKE_EXPORT int nvmlShutdown(void) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!s.initialised) return kUninitialized;
  s.initialised = false;
  return kSuccess;
}

FAKE_EXPORT const char* nvmlErrorString(int rc) {
  switch (rc) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 25: return "Argument version mismatch";
    default: return "Unknown Error";
  }
}

FAKE_EXPORT int nvmlSystemGetDriverVersion(char* version, unsigned int len) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!s.initialised) return kUninitialized;
  if (!s.scenario->driver_version) return kNotSupported;
  return copy_string(*s.scenario->driver_version, version, len);
}

FAKE_EXPORT int nvmlSystemGetNVMLVersion(char* version, unsigned int len) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!s.initialised) return kUninitialized;
  return copy_string("fake-nvml", version, len);
}

FAKE_EXPORT int nvmlDeviceGetCount_v2(unsigned int* count) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!s.initialised) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  *count = static_cast<unsigned>(s.scenario->devices.size());
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }

FAKE_EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  void* handle = nullptr;
  {
    State& s = state();
    std::lock_guard lock(s.mu);
    if (!s.initialised) return kUninitialized;
    if (index >= s.boards.size() || device == nullptr) return kInvalidArgument;
    handle = s.boards[index];
  }
  const DeviceSpec* dev = nullptr;
  Handle* h = nullptr;
  double t = 0;
  if (int rc = enter("nvmlDeviceGetHandleByIndex", handle, &dev, &h, &t); rc != kSuccess) return rc;
  *device = handle;
  return kSuccess;
}
FAKE_EXPORT int nvmlDeviceGetHandleByIndex(unsigned int index, void** device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

FAKE_EXPORT int nvmlDeviceGetName(void* device, char* name, unsigned int len) {
  ENTER("nvmlDeviceGetName");
  return copy_string(h->mig >= 0 ? "MIG " + dev->name : dev->name, name, len);
}

FAKE_EXPORT int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int len) {
  ENTER("nvmlDeviceGetUUID");
  return copy_string(h->mig >= 0 ? dev->mig_instances[static_cast<std::size_t>(h->mig)].uuid : dev->uuid, uuid, len);
}

FAKE_EXPORT int nvmlDeviceGetPciInfo_v3(void* device, nvmlPciInfo_t* pci) {
  ENTER("nvmlDeviceGetPciInfo_v3");
  if (pci == nullptr) return kInvalidArgument;
  *pci = nvmlPciInfo_t{};
  std::strncpy(pci->busId, dev->pci_bus_id.c_str(), sizeof(pci->busId) - 1);
  std::strncpy(pci->busIdLegacy, dev->pci_bus_id.c_str() + (dev->pci_bus_id.size() > 12 ? 4 : 0),
               sizeof(pci->busIdLegacy) - 1);
  return kSuccess;
}

static int memory_of(const DeviceSpec* dev, const Handle* h, double t, unsigned long long* total,
                     unsigned long long* used) {
  std::optional<double> total_mib, used_mib;
  if (h->mig >= 0) {
    const auto& m = dev->mig_instances[static_cast<std::size_t>(h->mig)];
    total_mib = m.memory_total_mib;
    used_mib = m.mem_used_mib;
  } else {
    total_mib = dev->memory_total_mib;
    used_mib = fake_nvml::segment_at(*dev, t).mem_used_mib;
  }
  if (!total_mib || !used_mib) return kNotSupported;
  *total = static_cast<unsigned long long>(std::llround(*total_mib * static_cast<double>(kMiB)));
  *used = static_cast<unsigned long long>(std::llround(*used_mib * static_cast<double>(kMiB)));
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetMemoryInfo(void* device, nvmlMemory_t* memory) {
  ENTER("nvmlDeviceGetMemoryInfo");
  if (memory == nullptr) return kInvalidArgument;
  unsigned long long total = 0, used = 0;
  if (int rc = memory_of(dev, h, t, &total, &used); rc != kSuccess) return rc;
  *memory = nvmlMemory_t{total, total > used ? total - used : 0, used};
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetMemoryInfo_v2(void* device, nvmlMemory_v2_t* memory) {
  ENTER("nvmlDeviceGetMemoryInfo_v2");
  if (memory == nullptr) return kInvalidArgument;
  if (memory->version != (static_cast<unsigned>(sizeof(nvmlMemory_v2_t)) | (2U << 24U))) return kVersionMismatch;
  unsigned long long total = 0, used = 0;
  if (int rc = memory_of(dev, h, t, &total, &used); rc != kSuccess) return rc;
  memory->total = total;
  memory->reserved = 0;
  memory->used = used;
  memory->free = total > used ? total - used : 0;
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetEnforcedPowerLimit(void* device, unsigned int* limit_mw) {
  ENTER("nvmlDeviceGetEnforcedPowerLimit");
  return put(dev->power_limit_w ? std::optional<double>(*dev->power_limit_w * 1000.0) : std::nullopt, limit_mw);
}
FAKE_EXPORT int nvmlDeviceGetPowerManagementLimit(void* device, unsigned int* limit_mw) {
  ENTER("nvmlDeviceGetPowerManagementLimit");
  return put(dev->power_limit_w ? std::optional<double>(*dev->power_limit_w * 1000.0) : std::nullopt, limit_mw);
}

FAKE_EXPORT int nvmlDeviceGetPowerUsage(void* device, unsigned int* power_mw) {
  ENTER("nvmlDeviceGetPowerUsage");
  if (h->mig >= 0) return kNotSupported;
  auto w = fake_nvml::segment_at(*dev, t).power_w;
  return put(w ? std::optional<double>(*w * 1000.0) : std::nullopt, power_mw);
}

FAKE_EXPORT int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* energy_mj) {
  ENTER("nvmlDeviceGetTotalEnergyConsumption");
  if (!dev->energy_counter || h->mig >= 0) return kNotSupported;
  bool has_power = false;  // a device without power readings has no energy counter either
  for (const auto& seg : dev->timeline) has_power = has_power || seg.power_w.has_value();
  if (!has_power) return kNotSupported;
  if (energy_mj == nullptr) return kInvalidArgument;
  // The counter wraps nowhere in practice; a scenario of absurd power for years saturates instead of overflowing.
  *energy_mj = static_cast<unsigned long long>(std::min(std::floor(fake_nvml::energy_mj_at(*dev, t)), 1.8e19));
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetArchitecture(void* device, unsigned int* arch) {
  ENTER("nvmlDeviceGetArchitecture");
  return put(dev->architecture ? std::optional<double>(*dev->architecture) : std::nullopt, arch);
}

FAKE_EXPORT int nvmlDeviceGetMinorNumber(void* device, unsigned int* minor) {
  ENTER("nvmlDeviceGetMinorNumber");
  (void)h;
  return put(dev->minor ? std::optional<double>(*dev->minor) : std::nullopt, minor);
}

FAKE_EXPORT int nvmlDeviceGetTemperature(void* device, unsigned int sensor, unsigned int* temp_c) {
  ENTER("nvmlDeviceGetTemperature");
  if (sensor != 0) return kInvalidArgument;
  return put(fake_nvml::segment_at(*dev, t).temp_c, temp_c);
}

FAKE_EXPORT int nvmlDeviceGetClockInfo(void* device, unsigned int type, unsigned int* mhz) {
  ENTER("nvmlDeviceGetClockInfo");
  const Segment& seg = fake_nvml::segment_at(*dev, t);
  if (type == 1) return put(seg.sm_clock_mhz, mhz);
  if (type == 2) return put(seg.mem_clock_mhz, mhz);
  return kNotSupported;
}

FAKE_EXPORT int nvmlDeviceGetUtilizationRates(void* device, nvmlUtilization_t* util) {
  ENTER("nvmlDeviceGetUtilizationRates");
  if (util == nullptr) return kInvalidArgument;
  if (h->mig >= 0) return kNotSupported;
  const Segment& seg = fake_nvml::segment_at(*dev, t);
  if (!seg.util) return kNotSupported;
  util->gpu = static_cast<unsigned>(std::llround(*seg.util));
  util->memory = static_cast<unsigned>(std::llround(seg.mem_util.value_or(0)));
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetMigMode(void* device, unsigned int* current, unsigned int* pending) {
  ENTER("nvmlDeviceGetMigMode");
  if (!dev->mig) return kNotSupported;
  if (current == nullptr || pending == nullptr) return kInvalidArgument;
  *current = *pending = *dev->mig ? 1U : 0U;
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetMaxMigDeviceCount(void* device, unsigned int* count) {
  ENTER("nvmlDeviceGetMaxMigDeviceCount");
  if (!dev->mig.value_or(false)) return kNotSupported;
  if (count == nullptr) return kInvalidArgument;
  *count = 7;
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetMigDeviceHandleByIndex(void* device, unsigned int index, void** mig) {
  ENTER("nvmlDeviceGetMigDeviceHandleByIndex");
  if (!dev->mig.value_or(false) || h->mig >= 0) return kNotSupported;
  if (mig == nullptr) return kInvalidArgument;
  if (index >= dev->mig_instances.size()) return kNotFound;
  State& s = state();
  std::lock_guard lock(s.mu);
  *mig = s.migs[h->device][index];
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetGpuInstanceId(void* device, unsigned int* id) {
  ENTER("nvmlDeviceGetGpuInstanceId");
  if (h->mig < 0) return kNotSupported;
  if (id == nullptr) return kInvalidArgument;
  *id = dev->mig_instances[static_cast<std::size_t>(h->mig)].gpu_instance_id;
  return kSuccess;
}

/// nvmlDeviceAttributes_t: only the GPU instance slice count and memory size are filled.
struct FakeDeviceAttributes {
  unsigned multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount, sharedJpegCount,
      sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
  unsigned long long memorySizeMB;
};

FAKE_EXPORT int nvmlDeviceGetAttributes_v2(void* device, FakeDeviceAttributes* attributes) {
  ENTER("nvmlDeviceGetAttributes_v2");
  if (attributes == nullptr) return kInvalidArgument;
  if (h->mig < 0) return kNotSupported;
  const auto& m = dev->mig_instances[static_cast<std::size_t>(h->mig)];
  if (!m.slices) return kNotSupported;
  *attributes = FakeDeviceAttributes{};
  attributes->gpuInstanceSliceCount = *m.slices;
  attributes->computeInstanceSliceCount = *m.slices;
  attributes->memorySizeMB = static_cast<unsigned long long>(m.memory_total_mib.value_or(0));
  return kSuccess;
}

/// nvmlGpuInstanceProfileInfo_t (v1).
struct FakeGpuInstanceProfileInfo {
  unsigned id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount, decoderCount,
      encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
};

FAKE_EXPORT int nvmlDeviceGetGpuInstanceProfileInfo(void* device, unsigned int profile, FakeGpuInstanceProfileInfo* info) {
  ENTER("nvmlDeviceGetGpuInstanceProfileInfo");
  if (info == nullptr) return kInvalidArgument;
  if (h->mig >= 0 || !dev->mig.value_or(false)) return kNotSupported;
  // NVML_GPU_INSTANCE_PROFILE_1_SLICE .. _7_SLICE, _8_SLICE, _6_SLICE, then the REV variants.
  static constexpr unsigned kSlices[] = {1, 2, 3, 4, 7, 8, 6, 1, 2, 1};
  if (profile >= std::size(kSlices)) return kInvalidArgument;
  const unsigned slices = kSlices[profile];
  const unsigned board = dev->mig_board_slices;
  const bool supported = profile <= 4 ? slices <= board && (slices != 3 || board >= 7) : slices == board && profile == 5;
  if (!supported) return kNotSupported;
  *info = FakeGpuInstanceProfileInfo{};
  info->id = profile;
  info->sliceCount = slices;
  info->instanceCount = board / slices;
  info->memorySizeMB = static_cast<unsigned long long>(dev->memory_total_mib.value_or(0) * slices / board);
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count, nvmlProcessInfo_t* infos) {
  return fill_processes(device, count, infos, "nvmlDeviceGetComputeRunningProcesses_v3", false);
}
FAKE_EXPORT int nvmlDeviceGetComputeRunningProcesses_v2(void* device, unsigned int* count, nvmlProcessInfo_t* infos) {
  return fill_processes(device, count, infos, "nvmlDeviceGetComputeRunningProcesses_v2", false);
}
FAKE_EXPORT int nvmlDeviceGetComputeRunningProcesses(void* device, unsigned int* count, nvmlProcessInfo_v1_t* infos) {
  return fill_processes(device, count, infos, "nvmlDeviceGetComputeRunningProcesses", false);
}
FAKE_EXPORT int nvmlDeviceGetMPSComputeRunningProcesses_v3(void* device, unsigned int* count, nvmlProcessInfo_t* infos) {
  return fill_processes(device, count, infos, "nvmlDeviceGetMPSComputeRunningProcesses_v3", true);
}
FAKE_EXPORT int nvmlDeviceGetMPSComputeRunningProcesses_v2(void* device, unsigned int* count, nvmlProcessInfo_t* infos) {
  return fill_processes(device, count, infos, "nvmlDeviceGetMPSComputeRunningProcesses_v2", true);
}
FAKE_EXPORT int nvmlDeviceGetMPSComputeRunningProcesses(void* device, unsigned int* count, nvmlProcessInfo_v1_t* infos) {
  return fill_processes(device, count, infos, "nvmlDeviceGetMPSComputeRunningProcesses", true);
}

FAKE_EXPORT int nvmlDeviceGetRunningProcessDetailList(void* device, nvmlProcessDetailList_v1_t* list) {
  ENTER("nvmlDeviceGetRunningProcessDetailList");
  if (list == nullptr) return kInvalidArgument;
  if (list->version != (static_cast<unsigned>(sizeof(nvmlProcessDetailList_v1_t)) | (1U << 24U))) return kVersionMismatch;
  if (list->mode > 2) return kInvalidArgument;
  std::vector<Proc> procs = list->mode != 0 || h->mig >= 0 ? std::vector<Proc>{} : processes_of(fake_nvml::segment_at(*dev, t));
  if (list->numProcArrayEntries < procs.size() || (list->procArray == nullptr && !procs.empty())) {
    list->numProcArrayEntries = static_cast<unsigned>(procs.size());
    return kInsufficientSize;
  }
  list->numProcArrayEntries = static_cast<unsigned>(procs.size());
  for (std::size_t i = 0; i < procs.size(); ++i) {
    list->procArray[i] = nvmlProcessDetail_v1_t{procs[i].pid, procs[i].mem_bytes, 0xFFFFFFFFU, 0xFFFFFFFFU, 0};
  }
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetProcessUtilization(void* device, nvmlProcessUtilizationSample_t* samples,
                                                unsigned int* count, unsigned long long last_seen_us) {
  ENTER("nvmlDeviceGetProcessUtilization");
  if (count == nullptr) return kInvalidArgument;
  if (dev->mig.value_or(false)) return kNotSupported;
  auto now_us = static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::system_clock::now().time_since_epoch()).count());
  std::vector<Proc> procs;
  for (const Proc& p : processes_of(fake_nvml::segment_at(*dev, t))) {
    if (p.sm_util) procs.push_back(p);
  }
  if (procs.empty() || now_us <= last_seen_us) {
    *count = 0;
    return kNotFound;
  }
  if (samples == nullptr || *count < procs.size()) {
    *count = static_cast<unsigned>(procs.size());
    return kInsufficientSize;
  }
  *count = static_cast<unsigned>(procs.size());
  for (std::size_t i = 0; i < procs.size(); ++i) {
    samples[i] = nvmlProcessUtilizationSample_t{procs[i].pid, now_us,
                                                static_cast<unsigned>(std::llround(*procs[i].sm_util)), 0, 0, 0};
  }
  return kSuccess;
}

}  // extern "C"

// ---- GPM (GPU Performance Monitoring) ----------------------------------------------------------
namespace {

/// A GPM sample buffer: which target it sampled, and when (scenario seconds).
struct FakeGpmSample {
  bool taken = false;
  std::size_t device = 0;
  int mig = -1;  ///< MIG instance index, -1 for the board
  double t_s = 0;
};

std::mutex& gpm_mu() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::vector<FakeGpmSample*>& gpm_samples() {
  static auto* list = new std::vector<FakeGpmSample*>();
  return *list;
}
bool gpm_known(const FakeGpmSample* s) {
  const auto& list = gpm_samples();
  return std::find(list.begin(), list.end(), s) != list.end();
}

using GpmField = std::optional<double> fake_nvml::GpmSpec::*;

/// The scenario key of an nvmlGpmMetricId_t gpumeter may ask for; null for ids the fake does not model.
GpmField gpm_field(unsigned id) {
  switch (id) {
    case 2:
      return &fake_nvml::GpmSpec::sm_util;  // NVML_GPM_METRIC_SM_UTIL
    case 3:
      return &fake_nvml::GpmSpec::sm_occupancy;  // NVML_GPM_METRIC_SM_OCCUPANCY
    case 5:
      return &fake_nvml::GpmSpec::tensor_util;  // NVML_GPM_METRIC_ANY_TENSOR_UTIL
    case 10:
      return &fake_nvml::GpmSpec::dram_bw_util;  // NVML_GPM_METRIC_DRAM_BW_UTIL
    case 11:
      return &fake_nvml::GpmSpec::fp64_util;  // NVML_GPM_METRIC_FP64_UTIL
    case 12:
      return &fake_nvml::GpmSpec::fp32_util;  // NVML_GPM_METRIC_FP32_UTIL
    case 13:
      return &fake_nvml::GpmSpec::fp16_util;  // NVML_GPM_METRIC_FP16_UTIL
    default:
      return nullptr;
  }
}

const char* gpm_short_name(unsigned id) {
  switch (id) {
    case 2:
      return "sm_util";
    case 3:
      return "sm_occupancy";
    case 5:
      return "any_tensor_util";
    case 10:
      return "dram_bw_util";
    case 11:
      return "fp64_util";
    case 12:
      return "fp32_util";
    case 13:
      return "fp16_util";
    default:
      return nullptr;
  }
}

/// A board metric over [t1, t2]: the time-weighted mean of the segments that carry it (the segment in force
/// at t2 when the window is empty); nullopt when none does.
std::optional<double> gpm_board_value(const DeviceSpec& dev, GpmField field, double t1, double t2) {
  if (t2 <= t1) {
    const Segment& seg = fake_nvml::segment_at(dev, t2);
    return seg.gpm ? (*seg.gpm).*field : std::nullopt;
  }
  double sum = 0, weight = 0;
  for (std::size_t i = 0; i < dev.timeline.size(); ++i) {
    const Segment& seg = dev.timeline[i];
    const double start = std::max(t1, i == 0 ? -1e300 : seg.t_s);
    const double end = std::min(t2, i + 1 < dev.timeline.size() ? dev.timeline[i + 1].t_s : 1e300);
    if (end <= start || !seg.gpm || !((*seg.gpm).*field)) continue;
    sum += *((*seg.gpm).*field) * (end - start);
    weight += end - start;
  }
  if (weight <= 0) return std::nullopt;
  return sum / weight;
}

}  // namespace

extern "C" {

typedef struct {
  unsigned int version;
  unsigned int isSupportedDevice;
} nvmlGpmSupport_t;
typedef struct {
  unsigned int metricId;
  int nvmlReturn;
  double value;
  struct {
    const char* shortName;
    const char* longName;
    const char* unit;
  } metricInfo;
} nvmlGpmMetric_t;
/// The smallest NVML_GPM_METRIC_MAX of any header (98): callers allocate at least this many entries.
typedef struct {
  unsigned int version;
  unsigned int numMetrics;
  FakeGpmSample* sample1;
  FakeGpmSample* sample2;
  nvmlGpmMetric_t metrics[98];
} nvmlGpmMetricsGet_t;

FAKE_EXPORT int nvmlGpmQueryDeviceSupport(void* device, nvmlGpmSupport_t* support) {
  ENTER("nvmlGpmQueryDeviceSupport");
  if (support == nullptr) return kInvalidArgument;
  if (support->version != 1) return kVersionMismatch;
  support->isSupportedDevice = fake_nvml::gpm_supported(*dev) ? 1U : 0U;
  return kSuccess;
}

FAKE_EXPORT int nvmlGpmSampleAlloc(FakeGpmSample** sample) {
  if (sample == nullptr) return kInvalidArgument;
  std::lock_guard lock(gpm_mu());
  *sample = new FakeGpmSample();
  gpm_samples().push_back(*sample);
  return kSuccess;
}

FAKE_EXPORT int nvmlGpmSampleFree(FakeGpmSample* sample) {
  std::lock_guard lock(gpm_mu());
  auto& list = gpm_samples();
  auto it = std::find(list.begin(), list.end(), sample);
  if (it == list.end()) return kInvalidArgument;
  list.erase(it);
  delete sample;
  return kSuccess;
}

FAKE_EXPORT int nvmlGpmSampleGet(void* device, FakeGpmSample* sample) {
  ENTER("nvmlGpmSampleGet");
  if (h->mig >= 0 || !fake_nvml::gpm_supported(*dev)) return kNotSupported;
  if (!fake_nvml::segment_at(*dev, t).gpm) return kNotSupported;
  std::lock_guard lock(gpm_mu());
  if (!gpm_known(sample)) return kInvalidArgument;
  *sample = FakeGpmSample{true, h->device, -1, t};
  return kSuccess;
}

FAKE_EXPORT int nvmlGpmMigSampleGet(void* device, unsigned int gpu_instance_id, FakeGpmSample* sample) {
  ENTER("nvmlGpmMigSampleGet");
  if (h->mig >= 0 || !dev->mig.value_or(false)) return kNotSupported;
  int found = -1;
  for (std::size_t m = 0; m < dev->mig_instances.size(); ++m) {
    if (dev->mig_instances[m].gpu_instance_id == gpu_instance_id) found = static_cast<int>(m);
  }
  if (found < 0) return kNotFound;
  if (!dev->mig_instances[static_cast<std::size_t>(found)].gpm) return kNotSupported;
  std::lock_guard lock(gpm_mu());
  if (!gpm_known(sample)) return kInvalidArgument;
  *sample = FakeGpmSample{true, h->device, found, t};
  return kSuccess;
}

FAKE_EXPORT int nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* req) {
  if (req == nullptr) return kInvalidArgument;
  if (req->version != 1) return kVersionMismatch;
  if (req->numMetrics > 98) return kInvalidArgument;
  FakeGpmSample a, b;
  {
    std::lock_guard lock(gpm_mu());
    if (!gpm_known(req->sample1) || !gpm_known(req->sample2)) return kInvalidArgument;
    a = *req->sample1;
    b = *req->sample2;
  }
  if (!a.taken || !b.taken || a.device != b.device || a.mig != b.mig) return kInvalidArgument;
  void* board = nullptr;
  {
    State& s = state();
    std::lock_guard lock(s.mu);
    if (!s.initialised) return kUninitialized;
    if (a.device >= s.boards.size()) return kInvalidArgument;
    board = s.boards[a.device];
  }
  const DeviceSpec* dev = nullptr;
  Handle* h = nullptr;
  double t = 0;
  if (int rc = enter("nvmlGpmMetricsGet", board, &dev, &h, &t); rc != kSuccess) return rc;
  const double t1 = std::min(a.t_s, b.t_s), t2 = std::max(a.t_s, b.t_s);
  for (unsigned i = 0; i < req->numMetrics; ++i) {
    nvmlGpmMetric_t& m = req->metrics[i];
    m.value = 0;
    m.metricInfo = {gpm_short_name(m.metricId), gpm_short_name(m.metricId), "%"};
    GpmField field = gpm_field(m.metricId);
    std::optional<double> v;
    if (field != nullptr) {
      v = a.mig >= 0 ? (*dev->mig_instances[static_cast<std::size_t>(a.mig)].gpm).*field
                     : gpm_board_value(*dev, field, t1, t2);
    }
    m.nvmlReturn = v ? kSuccess : kNotSupported;
    if (v) m.value = *v;
  }
  return kSuccess;
}

}  // extern "C"
