#pragma once
// The slice of NVML's C ABI that gpumeter uses, declared by hand (no nvml.h at build time). Shared by
// the loader (src/gpu) and the fake library (tests/fake_nvml), so both agree on every layout.
#include <cstddef>
#include <cstdint>

namespace gm::gpu::nvml {

using Return = int;                 ///< nvmlReturn_t
using Device = struct DeviceOpaque*;  ///< nvmlDevice_t (opaque handle)

inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorLibraryNotFound = 12;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorResetRequired = 16;
inline constexpr Return kErrorArgumentVersionMismatch = 25;
inline constexpr Return kErrorUnknown = 999;

/// NVML's name for a return code without the NVML_ prefix ("ERROR_GPU_IS_LOST"), "" if unknown.
const char* return_name(Return code);

inline constexpr unsigned kTemperatureGpu = 0;   ///< NVML_TEMPERATURE_GPU
inline constexpr unsigned kClockSm = 1;          ///< NVML_CLOCK_SM
inline constexpr unsigned kClockMem = 2;         ///< NVML_CLOCK_MEM
inline constexpr unsigned kProcessModeCompute = 0;
inline constexpr unsigned kProcessModeMps = 2;
inline constexpr std::uint64_t kValueNotAvailable = ~0ULL;  ///< NVML_VALUE_NOT_AVAILABLE

/// NVML_STRUCT_VERSION(T, N) = sizeof(T) | (N << 24).
constexpr unsigned struct_version(std::size_t size, unsigned version) {
  return static_cast<unsigned>(size) | (version << 24U);
}

struct Utilization {
  unsigned gpu;
  unsigned memory;
};
struct MemoryV1 {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct MemoryV2 {
  unsigned version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
inline constexpr unsigned kMemoryV2Version = struct_version(sizeof(MemoryV2), 2);

struct PciInfo {  ///< nvmlPciInfo_t (v3 layout)
  char bus_id_legacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pci_device_id;
  unsigned pci_subsystem_id;
  char bus_id[32];
};

struct ProcessInfoV1 {  ///< nvmlProcessInfo_v1_t
  unsigned pid;
  unsigned long long used_gpu_memory;
};
struct ProcessInfoV2 {  ///< nvmlProcessInfo_v2_t == nvmlProcessInfo_t taken by the _v3 functions
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};
struct ProcessDetailV1 {  ///< nvmlProcessDetail_v1_t
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
  unsigned long long used_gpu_cc_protected_memory;
};
struct ProcessDetailListV1 {  ///< nvmlProcessDetailList_v1_t
  unsigned version;
  unsigned mode;
  unsigned num_proc_array_entries;
  ProcessDetailV1* proc_array;
};
inline constexpr unsigned kProcessDetailListV1Version = struct_version(sizeof(ProcessDetailListV1), 1);

struct ProcessUtilizationSample {  ///< nvmlProcessUtilizationSample_t
  unsigned pid;
  unsigned long long time_stamp;  ///< CPU timestamp in microseconds
  unsigned sm_util;
  unsigned mem_util;
  unsigned enc_util;
  unsigned dec_util;
};

struct DeviceAttributes {  ///< nvmlDeviceAttributes_t, as taken by nvmlDeviceGetAttributes_v2 (no version field)
  unsigned multiprocessor_count;
  unsigned shared_copy_engine_count;
  unsigned shared_decoder_count;
  unsigned shared_encoder_count;
  unsigned shared_jpeg_count;
  unsigned shared_ofa_count;
  unsigned gpu_instance_slice_count;
  unsigned compute_instance_slice_count;
  unsigned long long memory_size_mib;
};

struct GpuInstanceProfileInfo {  ///< nvmlGpuInstanceProfileInfo_t (v1, nvmlDeviceGetGpuInstanceProfileInfo)
  unsigned id;
  unsigned is_p2p_supported;
  unsigned slice_count;
  unsigned instance_count;
  unsigned multiprocessor_count;
  unsigned copy_engine_count;
  unsigned decoder_count;
  unsigned encoder_count;
  unsigned jpeg_count;
  unsigned ofa_count;
  unsigned long long memory_size_mib;
};
/// GPU instance profiles are indexed 0 (1 slice) to 4 (7 slices) and on to the later REV variants.
inline constexpr unsigned kGpuInstanceProfileCount = 16;

static_assert(sizeof(DeviceAttributes) == 40);
static_assert(sizeof(GpuInstanceProfileInfo) == 48);
static_assert(sizeof(ProcessInfoV1) == 16);
static_assert(sizeof(ProcessInfoV2) == 24);
static_assert(sizeof(ProcessDetailV1) == 32);
static_assert(sizeof(MemoryV2) == 40);
static_assert(sizeof(PciInfo) == 68);
static_assert(sizeof(ProcessUtilizationSample) == 32);

/// GPM (GPU Performance Monitoring, Hopper and newer). A sample is an opaque buffer NVML allocates.
using GpmSample = struct GpmSampleOpaque*;  ///< nvmlGpmSample_t

struct GpmSupport {  ///< nvmlGpmSupport_t
  unsigned version;
  unsigned is_supported_device;
};
inline constexpr unsigned kGpmSupportVersion = 1;  ///< NVML_GPM_SUPPORT_VERSION

struct GpmMetricInfo {
  char* short_name;
  char* long_name;
  char* unit;
};
struct GpmMetric {  ///< nvmlGpmMetric_t
  unsigned metric_id;
  Return nvml_return;
  double value;
  GpmMetricInfo metric_info;
};
/// NVML_GPM_METRIC_MAX grew across headers (98, then 210, then 333) under the same struct version: NVML reads
/// only numMetrics entries, so the array is sized for the largest header.
inline constexpr unsigned kGpmMetricSlots = 333;
struct GpmMetricsGet {  ///< nvmlGpmMetricsGet_t
  unsigned version;
  unsigned num_metrics;
  GpmSample sample1;
  GpmSample sample2;
  GpmMetric metrics[kGpmMetricSlots];
};
inline constexpr unsigned kGpmMetricsGetVersion = 1;  ///< NVML_GPM_METRICS_GET_VERSION

/// nvmlGpmMetricId_t values gpumeter reads (percent, 0-100).
inline constexpr unsigned kGpmSmUtil = 2;         ///< NVML_GPM_METRIC_SM_UTIL
inline constexpr unsigned kGpmSmOccupancy = 3;    ///< NVML_GPM_METRIC_SM_OCCUPANCY
inline constexpr unsigned kGpmAnyTensorUtil = 5;  ///< NVML_GPM_METRIC_ANY_TENSOR_UTIL
inline constexpr unsigned kGpmDramBwUtil = 10;    ///< NVML_GPM_METRIC_DRAM_BW_UTIL
inline constexpr unsigned kGpmFp64Util = 11;      ///< NVML_GPM_METRIC_FP64_UTIL
inline constexpr unsigned kGpmFp32Util = 12;      ///< NVML_GPM_METRIC_FP32_UTIL
inline constexpr unsigned kGpmFp16Util = 13;      ///< NVML_GPM_METRIC_FP16_UTIL

static_assert(sizeof(GpmMetric) == 40);
static_assert(sizeof(GpmSupport) == 8);

/// Versions of the running-process entry points, newest first.
enum class ProcessApi { detail_list, v3, v2, v1, none };

/// Which process entry points the opened library exports.
struct ProcessSymbols {
  bool detail_list = false;  ///< nvmlDeviceGetRunningProcessDetailList
  bool v3 = false;           ///< nvmlDeviceGetComputeRunningProcesses_v3
  bool v2 = false;           ///< nvmlDeviceGetComputeRunningProcesses_v2
  bool v1 = false;           ///< nvmlDeviceGetComputeRunningProcesses
};

/// The newest process API present: detail list, else _v3, else _v2, else v1.
ProcessApi choose_process_api(const ProcessSymbols& symbols);
/// Bytes per element of the array the chosen API fills (32, 24, 24, 16; 0 for none).
std::size_t process_stride(ProcessApi api);
/// "nvmlDeviceGetRunningProcessDetailList", "nvmlDeviceGetComputeRunningProcesses_v3", ...; "" for none.
const char* process_api_name(ProcessApi api);
/// Architecture name for nvmlDeviceArchitecture_t ("Volta", "Hopper", ...), "" when unknown.
const char* architecture_name(unsigned arch);

}  // namespace gm::gpu::nvml
