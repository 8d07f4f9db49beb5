#pragma once
// Internals shared by the ledger's back ends (SQLite, PostgreSQL) and the spool: the run row's columns in
// one order, binding and reading them through either back end's statement type, JSON columns, liveness.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"

namespace gm::store_detail {

/// The run columns after `id`, in bind order (44). `user` is quoted: a reserved word in PostgreSQL.
// clang-format off
inline constexpr const char* kRunColumnNames[] = {
    "command", "\"user\"", "host", "labels_json", "start_unix_ms", "end_unix_ms", "status", "exit_code",
    "stopped_by", "price_micros_per_gpu_hour", "price_source", "provider", "region", "billing_granularity_s",
    "billing_minimum_s", "gpus_allocated_json", "gpus_used_json", "gpu_model", "budget_micros", "total_steps",
    "wall_ms", "billed_s", "cost_micros", "idle_cost_micros", "unused_gpu_cost_micros", "energy_j",
    "energy_method", "co2_kg", "carbon_source", "forecast_cost_usd", "meter_pid", "meter_host",
    "heartbeat_unix_ms", "steps", "samples_done", "tokens_done", "preempt_provider", "preempt_notice_unix_ms",
    "preempt_deadline_unix_ms", "last_checkpoint_ms", "lost_work_micros", "flops_per_token", "mfu_basis",
    "mfu_precision"};
// clang-format on
inline constexpr int kRunColumnCount = static_cast<int>(std::size(kRunColumnNames));

/// The samples table's GPM columns, in GpmPct's field order (7).
#define GM_GPM_COLUMNS                                                                    \
  "gpm_sm_active_pct, gpm_sm_occupancy_pct, gpm_tensor_active_pct, gpm_fp32_active_pct, " \
  "gpm_fp16_active_pct, gpm_fp64_active_pct, gpm_dram_bw_util_pct"

/// "id, command, \"user\", …" (with_id) or the columns after id.
std::string run_columns(bool with_id);

inline std::string json_of(const std::vector<std::string>& v) { return nlohmann::json(v).dump(); }
inline std::string json_of(const std::map<std::string, std::string>& v) { return nlohmann::json(v).dump(); }
inline std::string json_of(const std::map<std::string, double>& v) { return nlohmann::json(v).dump(); }

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

/// Binds every run column except id, starting at parameter `first` (36 parameters). `S` has bind(int, T)
/// for std::int64_t, double, std::string and std::optional of those.
template <class S>
void bind_run(S& s, const RunRecord& r, int first = 1) {
  int i = first;
  s.bind(i++, r.command);
  s.bind(i++, r.user);
  s.bind(i++, r.host);
  s.bind(i++, json_of(r.labels));
  s.bind(i++, r.start_unix_ms);
  s.bind(i++, r.end_unix_ms);
  s.bind(i++, r.status);
  s.bind(i++, r.exit_code);
  s.bind(i++, r.stopped_by);
  s.bind(i++, r.price_micros_per_gpu_hour);
  s.bind(i++, r.price_source);
  s.bind(i++, r.provider);
  s.bind(i++, r.region);
  s.bind(i++, r.billing_granularity_s);
  s.bind(i++, r.billing_minimum_s);
  s.bind(i++, json_of(r.gpus_allocated));
  s.bind(i++, json_of(r.gpus_used));
  s.bind(i++, r.gpu_model);
  s.bind(i++, r.budget_micros);
  s.bind(i++, r.total_steps);
  s.bind(i++, r.wall_ms);
  s.bind(i++, r.billed_s);
  s.bind(i++, r.cost_micros);
  s.bind(i++, r.idle_cost_micros);
  s.bind(i++, r.unused_gpu_cost_micros);
  s.bind(i++, r.energy_j);
  s.bind(i++, r.energy_method);
  s.bind(i++, r.co2_kg);
  s.bind(i++, r.carbon_source);
  s.bind(i++, r.forecast_cost_usd);
  s.bind(i++, r.meter_pid);
  s.bind(i++, r.meter_host);
  s.bind(i++, r.heartbeat_unix_ms);
  s.bind(i++, r.steps);
  s.bind(i++, r.samples_done);
  s.bind(i++, r.tokens_done);
  s.bind(i++, r.preemption_provider);
  s.bind(i++, r.preemption_notice_unix_ms);
  s.bind(i++, r.preemption_deadline_unix_ms);
  s.bind(i++, r.last_checkpoint_ms);
  s.bind(i++, r.lost_work_micros);
  s.bind(i++, r.flops_per_token);
  s.bind(i++, r.mfu_basis);
  s.bind(i++, r.mfu_precision);
}

/// Reads a row selected with run_columns(true). `S` has i64, f64, text, view (valid until the next row),
/// oi64, of64, otext by column.
template <class S>
RunRecord read_run(const S& s) {
  RunRecord r;
  int c = 0;
  r.id = s.i64(c++);
  r.command = s.text(c++);
  r.user = s.text(c++);
  r.host = s.text(c++);
  r.labels = parse_string_map(s.view(c++));
  r.start_unix_ms = s.i64(c++);
  r.end_unix_ms = s.oi64(c++);
  r.status = s.text(c++);
  if (auto e = s.oi64(c++)) r.exit_code = static_cast<int>(*e);
  r.stopped_by = s.otext(c++);
  r.price_micros_per_gpu_hour = s.i64(c++);
  r.price_source = s.text(c++);
  r.provider = s.text(c++);
  r.region = s.text(c++);
  r.billing_granularity_s = s.i64(c++);
  r.billing_minimum_s = s.i64(c++);
  r.gpus_allocated = parse_string_list(s.view(c++));
  r.gpus_used = parse_string_list(s.view(c++));
  r.gpu_model = s.text(c++);
  r.budget_micros = s.oi64(c++);
  r.total_steps = s.oi64(c++);
  r.wall_ms = s.i64(c++);
  r.billed_s = s.i64(c++);
  r.cost_micros = s.i64(c++);
  r.idle_cost_micros = s.i64(c++);
  r.unused_gpu_cost_micros = s.i64(c++);
  r.energy_j = s.f64(c++);
  r.energy_method = s.text(c++);
  r.co2_kg = s.of64(c++);
  r.carbon_source = s.text(c++);
  r.forecast_cost_usd = s.of64(c++);
  r.meter_pid = s.i64(c++);
  r.meter_host = s.text(c++);
  r.heartbeat_unix_ms = s.i64(c++);
  r.steps = s.oi64(c++);
  r.samples_done = s.oi64(c++);
  r.tokens_done = s.oi64(c++);
  r.preemption_provider = s.otext(c++);
  r.preemption_notice_unix_ms = s.oi64(c++);
  r.preemption_deadline_unix_ms = s.oi64(c++);
  r.last_checkpoint_ms = s.oi64(c++);
  r.lost_work_micros = s.oi64(c++);
  r.flops_per_token = s.of64(c++);
  r.mfu_basis = s.otext(c++);
  r.mfu_precision = s.otext(c++);
  return r;
}

/// The columns of a run's summary, in read_summary's order.
inline constexpr const char* kSummaryColumns =
    "id, command, \"user\", host, labels_json, start_unix_ms, status, exit_code, stopped_by, gpu_model, "
    "gpus_allocated_json, wall_ms, billed_s, cost_micros, idle_cost_micros, unused_gpu_cost_micros, "
    "energy_j, "
    "co2_kg";

/// Reads a row selected with kSummaryColumns (S as for read_run).
template <class S>
RunSummary read_summary(const S& s) {
  RunSummary r;
  int c = 0;
  r.id = s.i64(c++);
  r.command = s.text(c++);
  r.user = s.text(c++);
  r.host = s.text(c++);
  r.labels = parse_string_map(s.view(c++));
  r.start_unix_ms = s.i64(c++);
  r.status = s.text(c++);
  if (auto e = s.oi64(c++)) r.exit_code = static_cast<int>(*e);
  r.stopped_by = s.otext(c++);
  r.gpu_model = s.text(c++);
  r.gpus_allocated = count_string_list(s.view(c++));
  r.wall_ms = s.i64(c++);
  r.billed_s = s.i64(c++);
  r.cost_micros = s.i64(c++);
  r.idle_cost_micros = s.i64(c++);
  r.unused_gpu_cost_micros = s.i64(c++);
  r.energy_j = s.f64(c++);
  r.co2_kg = s.of64(c++);
  return r;
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

/// Opens the PostgreSQL ledger at `location` (libpq URI or key=value string); `migrate` creates / migrates the
/// schema.
Result<std::unique_ptr<Ledger>> open_postgres(const std::string& location, bool migrate);

}  // namespace gm::store_detail
