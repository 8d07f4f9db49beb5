#pragma once
// JSON helpers shared by every --json output.
#include <nlohmann/json.hpp>

#include <optional>

namespace gm::util {

/// `v` as JSON, or null when absent: what the hardware or the data cannot give is null, never 0.
template <class T>
nlohmann::json json_or_null(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace gm::util
