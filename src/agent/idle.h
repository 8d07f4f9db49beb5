#pragma once
// The node's idleness answer (`gpumeter idle`, the agent's GET /v1/idle?for=D; docs/agent.md "Idle"): the
// collector books every interval of every GPU in a bounded history of states (busy, idle but held by a
// process, truly idle, unknown) with the interval's cost; the answer for a duration D says whether every
// GPU has been truly idle for D, which GPUs were busy or held within it, and what the idle time cost.
// Fail-safe: a GPU that cannot be read, or a history shorter than D, is "unknown", never idle.
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu.h"
#include "util/enum_text.h"
#include "util/http_client.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::agent {

/// What a GPU did in an interval, and the node's verdict over a window (same words).
enum class IdleState {
  busy,       ///< utilization at or over meter::kIdleUtilPct
  idle_held,  ///< under the threshold while a process holds memory on it (a waiting kernel, a stuck job)
  idle,       ///< under the threshold with no process
  unknown,    ///< not readable (lost, hung, no utilization reading) or, for a window, not seen long enough
};
inline constexpr util::EnumText<IdleState> kIdleStateTexts[] = {{IdleState::busy, "busy"},
                                                                {IdleState::idle_held, "idle_held"},
                                                                {IdleState::idle, "idle"},
                                                                {IdleState::unknown, "unknown"}};
constexpr const auto& enum_table(IdleState) {
  return kIdleStateTexts;
}

/// The state of a GPU in the interval that ends with sample `s`.
IdleState classify_idle(const gpu::DeviceSample& s);

/// How long the history reaches back, and how many segments a GPU keeps (the oldest go first).
inline constexpr std::int64_t kIdleHistoryKeepMs = 7LL * 24 * 3600 * 1000;
inline constexpr std::size_t kIdleHistoryMaxSegments = 20'000;

/// One stretch of one GPU in one state.
struct IdleSegment {
  IdleState state = IdleState::unknown;
  std::int64_t start_unix_ms = 0;
  std::int64_t end_unix_ms = 0;
  MicroUsd cost_micros = 0;  ///< the GPU's cost over the stretch (0 without a price)
};

/// Per-GPU history of states: consecutive intervals in one state merge into one segment, so a week of
/// 1 s intervals of a GPU that changes state every few minutes stays a few thousand segments.
class IdleHistory {
 public:
  explicit IdleHistory(std::int64_t keep_ms = kIdleHistoryKeepMs,
                       std::size_t max_segments = kIdleHistoryMaxSegments);
  /// Books an interval of GPU `gpu` (its index in the collector's order) that ended at `end_unix_ms` and
  /// lasted `duration_ms`.
  void add(std::size_t gpu, IdleState state, std::int64_t end_unix_ms, std::int64_t duration_ms,
           MicroUsd cost_micros);
  /// The segments of GPU `gpu`, oldest first (empty before its first interval).
  const std::deque<IdleSegment>& segments(std::size_t gpu) const;
  std::size_t gpus() const { return gpus_.size(); }

 private:
  std::int64_t keep_ms_;
  std::size_t max_segments_;
  std::vector<std::deque<IdleSegment>> gpus_;
};

/// One GPU in an answer.
struct GpuIdle {
  unsigned index = 0;
  std::string uuid;
  std::string model;
  IdleState state = IdleState::unknown;  ///< over the window: busy, else idle_held, else unknown, else idle
  IdleState state_now = IdleState::unknown;        ///< at the last collection
  std::optional<std::int64_t> idle_since_unix_ms;  ///< start of its current truly idle stretch
  std::int64_t busy_ms = 0, idle_held_ms = 0, idle_ms = 0, unknown_ms = 0;  ///< within the window
  std::optional<MicroUsd> idle_cost_micros;       ///< truly idle time within the window; nullopt: no price
  std::optional<MicroUsd> idle_held_cost_micros;  ///< idle-held time within the window
  std::size_t processes = 0;                      ///< processes on it at the last collection
};

/// The answer to "has every GPU been idle for `for_ms`?".
struct IdleAnswer {
  IdleState verdict = IdleState::unknown;  ///< idle (exit 0), busy or idle_held (1), unknown (3)
  std::string reason;                      ///< the verdict in words
  std::int64_t for_ms = 0;
  std::int64_t now_unix_ms = 0;
  std::int64_t history_ms = 0;  ///< how far back every GPU's history reaches
  double idle_threshold_pct = 0;
  std::optional<std::int64_t> idle_since_unix_ms;  ///< every GPU truly idle since then (nullopt: not now)
  std::optional<MicroUsd> idle_cost_micros;        ///< Σ over GPUs within the window; nullopt: no price
  std::optional<MicroUsd> idle_held_cost_micros;
  std::vector<GpuIdle> gpus;
};

/// What the answer needs of each GPU besides its history.
struct IdleDevice {
  gpu::DeviceInfo info;
  bool priced = false;
  std::optional<gpu::DeviceSample> last;  ///< the last sample (nullopt before the first)
};

/// The answer over `history` for the window [now − for_ms, now]. `last_collection_unix_ms` older than
/// `stale_ms` (a stalled collector) makes every GPU unknown.
IdleAnswer answer_idle(const IdleHistory& history, const std::vector<IdleDevice>& devices,
                       std::int64_t now_unix_ms, std::int64_t for_ms,
                       std::optional<std::int64_t> last_collection_unix_ms, std::int64_t stale_ms);

/// The exit code of `gpumeter idle` for a verdict: 0 idle, 1 busy or idle_held, 3 unknown.
int idle_exit_code(IdleState verdict);

/// The answer's JSON (GET /v1/idle): verdict, reason, for_s, idle_since_unix_ms, idle_s, history_s,
/// idle_threshold_pct, idle_cost_usd, idle_held_cost_usd, gpus[] (unknown figures are null).
std::string idle_answer_json(const IdleAnswer& answer);
/// Reads an answer's JSON (another agent's); error naming `source` when it is not one.
Result<IdleAnswer> parse_idle_answer(std::string_view text, const std::string& source);

/// Asks the agent at `agent_url` (http://HOST:PORT, https://…, or HOST:PORT) for its answer over `for_ms`.
/// Errors (unavailable) name the URL: unreachable, an HTTP error, not an answer.
Result<IdleAnswer> ask_idle(const std::string& agent_url, std::int64_t for_ms, std::int64_t timeout_ms,
                            util::HttpClient& http = util::system_http());

}  // namespace gm::agent
