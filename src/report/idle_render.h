#pragma once
// `gpumeter idle`: the agent's idleness answer (agent/idle.h) in words and a table.
#include <string>

#include "agent/idle.h"

namespace gm::report {

/// The verdict line, one row per GPU (now, over the window, idle since, time busy / held / idle, the idle
/// dollars) and the window's idle dollars.
std::string render_idle_text(const agent::IdleAnswer& answer);

}  // namespace gm::report
