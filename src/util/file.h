#pragma once
// Reading small files whole (configuration, catalog overrides, /proc entries, tokens).
#include <optional>
#include <string>

namespace gm::util {

/// Reads a whole small file; nullopt if it cannot be read.
std::optional<std::string> read_small_file(const std::string& path);

}  // namespace gm::util
