#pragma once
// Opening libnvidia-ml with dlopen and resolving its symbols (internal to src/gpu).
#include <string>
#include <unordered_set>
#include <vector>

#include "util/result.h"

namespace gm::gpu::nvml {

/// Library names tried in order: `explicit_path` if non-empty, else $GPUMETER_NVML_LIBRARY if set, else
/// libnvidia-ml.so.1 then libnvidia-ml.so.
std::vector<std::string> library_candidates(const std::string& explicit_path);

/// A dlopen'ed NVML library. Never dlclose'd (an abandoned hung call may still be running inside it).
class Library {
 public:
  /// Opens the first candidate that loads; no_gpu_library error with every dlerror() text otherwise.
  static Result<Library> open(const std::vector<std::string>& candidates);
  /// The symbol `name`, or null when absent. Test seam: when the library exports
  /// `fakeNvmlMissingSymbols` (the fake NVML does), the comma-separated names it returns are absent.
  void* resolve(const char* name) const;
  /// Typed resolve.
  template <class F>
  F get(const char* name) const {
    return reinterpret_cast<F>(resolve(name));
  }
  /// The candidate that was opened and its resolved path.
  const std::string& origin() const { return origin_; }
  /// Text of the fake library's last error (fakeNvmlLastError), "" for a real NVML.
  std::string fake_last_error() const;

 private:
  void* handle_ = nullptr;
  std::string origin_;
  std::unordered_set<std::string> missing_;
};

}  // namespace gm::gpu::nvml
