#pragma once
// Files compiled into the binary (data/*.csv, data/*.toml, data/demo/*, web/assets/*, web/src/*), generated
// by cmake/embed.cmake. Names are paths relative to data/, web/assets/ or web/src/ ("gpus.csv",
// "demo/job.py", "agent.html").
#include <optional>
#include <span>
#include <string_view>

namespace gm::util {

/// One embedded file: its name and contents (a string literal: content.data() is NUL-terminated).
struct EmbeddedFile {
  std::string_view name;
  std::string_view content;
};

/// All embedded files.
std::span<const EmbeddedFile> embedded_files();

/// The contents of the embedded file with this name, if any.
inline std::optional<std::string_view> embedded_file(std::string_view name) {
  for (const auto& f : embedded_files())
    if (f.name == name) return f.content;
  return std::nullopt;
}

}  // namespace gm::util
