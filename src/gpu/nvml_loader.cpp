#include "gpu/nvml_loader.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>

namespace gm::gpu::nvml {

std::vector<std::string> library_candidates(const std::string& explicit_path) {
  if (!explicit_path.empty()) return {explicit_path};
  if (const char* env = std::getenv("GPUMETER_NVML_LIBRARY"); env != nullptr && *env != '\0') return {env};
  return {"libnvidia-ml.so.1", "libnvidia-ml.so"};
}

Result<Library> Library::open(const std::vector<std::string>& candidates) {
  std::string reasons;
  for (const auto& name : candidates) {
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      if (!reasons.empty()) reasons += "; ";
      reasons += why != nullptr ? why : (name + ": cannot open");
      continue;
    }
    Library lib;
    lib.handle_ = handle;
    lib.origin_ = name;
    link_map* map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
        *map->l_name != '\0' && name != map->l_name) {
      lib.origin_ += std::string(" (") + map->l_name + ")";
    }
    using MissingFn = const char* (*)();
    if (auto fn = reinterpret_cast<MissingFn>(dlsym(handle, "fakeNvmlMissingSymbols")); fn != nullptr) {
      const char* list = fn();
      std::string text = list != nullptr ? list : "";
      std::size_t start = 0;
      while (start <= text.size()) {
        std::size_t comma = text.find(',', start);
        if (comma == std::string::npos) comma = text.size();
        if (comma > start) lib.missing_.insert(text.substr(start, comma - start));
        start = comma + 1;
      }
    }
    return lib;
  }
  return make_error(ErrorKind::no_gpu_library, "NVML could not be loaded: " + reasons);
}

void* Library::resolve(const char* name) const {
  if (handle_ == nullptr || missing_.count(name) != 0) return nullptr;
  return dlsym(handle_, name);
}

std::string Library::fake_last_error() const {
  using ErrFn = const char* (*)();
  auto fn = reinterpret_cast<ErrFn>(handle_ != nullptr ? dlsym(handle_, "fakeNvmlLastError") : nullptr);
  if (fn == nullptr) return "";
  const char* text = fn();
  return text != nullptr ? text : "";
}

}  // namespace gm::gpu::nvml
