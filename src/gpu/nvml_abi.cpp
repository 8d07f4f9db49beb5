#include "gpu/nvml_abi.h"

#include "util/enum_text.h"

namespace gm::gpu::nvml {

const char* return_name(Return code) {
  switch (code) {
    case kSuccess:
      return "SUCCESS";
    case kErrorUninitialized:
      return "ERROR_UNINITIALIZED";
    case kErrorInvalidArgument:
      return "ERROR_INVALID_ARGUMENT";
    case kErrorNotSupported:
      return "ERROR_NOT_SUPPORTED";
    case kErrorNoPermission:
      return "ERROR_NO_PERMISSION";
    case 5:
      return "ERROR_ALREADY_INITIALIZED";
    case kErrorNotFound:
      return "ERROR_NOT_FOUND";
    case kErrorInsufficientSize:
      return "ERROR_INSUFFICIENT_SIZE";
    case 8:
      return "ERROR_INSUFFICIENT_POWER";
    case kErrorDriverNotLoaded:
      return "ERROR_DRIVER_NOT_LOADED";
    case kErrorTimeout:
      return "ERROR_TIMEOUT";
    case 11:
      return "ERROR_IRQ_ISSUE";
    case kErrorLibraryNotFound:
      return "ERROR_LIBRARY_NOT_FOUND";
    case kErrorFunctionNotFound:
      return "ERROR_FUNCTION_NOT_FOUND";
    case 14:
      return "ERROR_CORRUPTED_INFOROM";
    case kErrorGpuIsLost:
      return "ERROR_GPU_IS_LOST";
    case kErrorResetRequired:
      return "ERROR_RESET_REQUIRED";
    case 17:
      return "ERROR_OPERATING_SYSTEM";
    case 18:
      return "ERROR_LIB_RM_VERSION_MISMATCH";
    case 19:
      return "ERROR_IN_USE";
    case 20:
      return "ERROR_MEMORY";
    case 21:
      return "ERROR_NO_DATA";
    case 22:
      return "ERROR_VGPU_ECC_NOT_SUPPORTED";
    case 23:
      return "ERROR_INSUFFICIENT_RESOURCES";
    case 24:
      return "ERROR_FREQ_NOT_SUPPORTED";
    case kErrorArgumentVersionMismatch:
      return "ERROR_ARGUMENT_VERSION_MISMATCH";
    case 26:
      return "ERROR_DEPRECATED";
    case 27:
      return "ERROR_NOT_READY";
    case kErrorUnknown:
      return "ERROR_UNKNOWN";
    default:
      return "";
  }
}

ProcessApi choose_process_api(const ProcessSymbols& symbols) {
  if (symbols.detail_list) return ProcessApi::detail_list;
  if (symbols.v3) return ProcessApi::v3;
  if (symbols.v2) return ProcessApi::v2;
  if (symbols.v1) return ProcessApi::v1;
  return ProcessApi::none;
}

std::size_t process_stride(ProcessApi api) {
  switch (api) {
    case ProcessApi::detail_list:
      return sizeof(ProcessDetailV1);
    case ProcessApi::v3:  // the _v3 functions take nvmlProcessInfo_t, which has the v2 layout
    case ProcessApi::v2:
      return sizeof(ProcessInfoV2);
    case ProcessApi::v1:
      return sizeof(ProcessInfoV1);
    case ProcessApi::none:
      break;
  }
  return 0;
}

constexpr util::EnumText<ProcessApi> kProcessApiNames[] = {
    {ProcessApi::detail_list, "nvmlDeviceGetRunningProcessDetailList"},
    {ProcessApi::v3, "nvmlDeviceGetComputeRunningProcesses_v3"},
    {ProcessApi::v2, "nvmlDeviceGetComputeRunningProcesses_v2"},
    {ProcessApi::v1, "nvmlDeviceGetComputeRunningProcesses"}};

const char* process_api_name(ProcessApi api) {
  return util::enum_text(kProcessApiNames, api, "");
}

const char* architecture_name(unsigned arch) {
  switch (arch) {
    case 2:
      return "Kepler";
    case 3:
      return "Maxwell";
    case 4:
      return "Pascal";
    case 5:
      return "Volta";
    case 6:
      return "Turing";
    case 7:
      return "Ampere";
    case 8:
      return "Ada";
    case 9:
      return "Hopper";
    case 10:
      return "Blackwell";
    default:
      return "";
  }
}

}  // namespace gm::gpu::nvml
