#pragma once
// Inside meter: the config file's TOML, read once the same way by the price resolution and the contract
// rates.
#include <toml++/toml.h>

#include <string>

#include "util/result.h"

namespace gm::detail {

/// The config file at `path` as TOML; error (usage) "FILE:LINE:COLUMN: what" for a syntax error.
Result<toml::table> parse_config_toml(const std::string& path);

}  // namespace gm::detail
