#pragma once
// Internal to src/serving: the LISTEN entries of /proc/net/tcp{,6} (used by the endpoint owner lookup and by
// endpoint discovery).
#include <cstdint>
#include <map>
#include <string>

namespace gm::serving::detail {

/// Adds "socket:[INODE]" (the fd link of the socket) → local port for each LISTEN (state 0A) entry of a
/// /proc/net/tcp-format table; malformed lines are skipped.
void listen_table(const std::string& table, std::map<std::string, std::uint16_t>& out);

}  // namespace gm::serving::detail
