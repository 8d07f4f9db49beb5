#include "util/config.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

namespace gm::util {

std::optional<std::string> user_config_file() {
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x)
    return std::string(x) + "/gpumeter/config.toml";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.config/gpumeter/config.toml";
  return std::nullopt;
}

Result<toml::table> parse_config_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return make_error(ErrorKind::usage, path + ": no such file");
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return make_error(ErrorKind::usage, fmt::format("{}:{}:{}: {}", path, e.source().begin.line,
                                                    e.source().begin.column, e.description()));
  }
}

}  // namespace gm::util
