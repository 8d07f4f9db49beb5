#pragma once
// gpumeter's config file (TOML): where it is by default and how it is read, for every module that reads a
// section of it ([pricing] in meter, [ledger] in the CLI, [agent] in serving).
#include <toml++/toml.h>

#include <optional>
#include <string>

#include "util/result.h"

namespace gm::util {

/// $XDG_CONFIG_HOME/gpumeter/config.toml, else $HOME/.config/gpumeter/config.toml; nullopt when neither
/// variable is set. The file need not exist.
std::optional<std::string> user_config_file();

/// The TOML file at `path`, parsed; a usage error "PATH:LINE:COLUMN: what is wrong" when it is not TOML, or
/// "PATH: no such file".
Result<toml::table> parse_config_file(const std::string& path);

}  // namespace gm::util
