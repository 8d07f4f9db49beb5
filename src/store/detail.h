#pragma once
// Internals shared by the ledger's back ends (SQLite, PostgreSQL) and the spool: JSON columns, liveness.
// The tables themselves are described in store/tables.h.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"

struct sqlite3;

namespace gm::store::detail {

inline std::string json_of(const std::vector<std::string>& v) {
  return nlohmann::json(v).dump();
}
inline std::string json_of(const std::map<std::string, std::string>& v) {
  return nlohmann::json(v).dump();
}
inline std::string json_of(const std::map<std::string, double>& v) {
  return nlohmann::json(v).dump();
}

template <class T>
T parse_json_or(std::string_view text, T fallback) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return fallback;
  try {
    return j.get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

/// The list / map json_of wrote: a fast path for plain ASCII strings without escapes (every GPU UUID, most
/// labels), the JSON parser for anything else; empty for text that is not such a list / map.
std::vector<std::string> parse_string_list(std::string_view text);
std::map<std::string, std::string> parse_string_map(std::string_view text);
/// parse_string_list(text).size(), without building the list.
std::size_t count_string_list(std::string_view text);

/// `rows` moved to run `id` (an imported run's rows).
template <class T>
std::vector<T> with_run_id(std::vector<T> rows, std::int64_t id) {
  for (auto& x : rows) x.run_id = id;
  return rows;
}

std::string this_host();
std::int64_t now_unix_ms();
/// True when the meter that wrote a "running" run is gone (same host: its pid; else a stale heartbeat).
bool meter_is_dead(const RunRecord& r);
/// Fills meter_pid, meter_host and heartbeat when left empty (begin_run); `refresh` renews the heartbeat.
void stamp_meter(RunRecord& r, bool refresh);
/// An interrupted run counts at least every committed sample: `last_t_ms`, `cost`, `energy` are the
/// samples' max time and sums.
void include_committed(RunRecord& r, std::int64_t last_t_ms, MicroUsd cost, double energy_j);

/// The SQLite ledger on connection `db` (owned from now on); `read_only`: why writes fail ("" when they can);
/// `version`: the file's schema version (an older one is only read).
std::unique_ptr<Ledger> make_sqlite_ledger(sqlite3* db, std::string path, std::string read_only, int version);

/// Opens the PostgreSQL ledger at `location` (libpq URI or key=value string); `migrate` creates / migrates
/// the schema.
Result<std::unique_ptr<Ledger>> open_postgres(const std::string& location, bool migrate);

}  // namespace gm::store::detail
