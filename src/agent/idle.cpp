// The node's idleness answer: the per-GPU history of states, the verdict over a window, its JSON and the
// client that asks another agent for it.
#include "agent/idle.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "meter/meter.h"
#include "meter/run_meter.h"
#include "util/json.h"
#include "util/json_in.h"
#include "util/units.h"

namespace gm::agent {

namespace {

/// Consecutive intervals in one state closer than this merge (the collector's intervals abut; the wall
/// clock's jitter between them is milliseconds).
constexpr std::int64_t kMergeGapMs = 2'000;

/// The order of "worse" for a window: any busy interval makes the GPU busy, else any held one held, else
/// any unknown one unknown.
int idle_rank(IdleState s) {
  switch (s) {
    case IdleState::busy:
      return 3;
    case IdleState::idle_held:
      return 2;
    case IdleState::unknown:
      return 1;
    case IdleState::idle:
      break;
  }
  return 0;
}

std::string gpu_list(const std::vector<unsigned>& gpus) {
  std::string out;
  for (unsigned g : gpus) out += (out.empty() ? "" : ", ") + std::to_string(g);
  return (gpus.size() == 1 ? "GPU " : "GPUs ") + out;
}

std::string duration_text(std::int64_t ms) {
  return util::format_duration_s(static_cast<double>(ms) / 1000.0);
}

}  // namespace

IdleState classify_idle(const gpu::DeviceSample& s) {
  if (s.state != gpu::DeviceState::ok || !s.utilization_pct) return IdleState::unknown;
  if (*s.utilization_pct >= meter::kIdleUtilPct) return IdleState::busy;
  return s.processes.empty() ? IdleState::idle : IdleState::idle_held;
}

IdleHistory::IdleHistory(std::int64_t keep_ms, std::size_t max_segments)
    : keep_ms_(keep_ms), max_segments_(std::max<std::size_t>(1, max_segments)) {}

void IdleHistory::add(std::size_t gpu, IdleState state, std::int64_t end_unix_ms, std::int64_t duration_ms,
                      MicroUsd cost_micros) {
  if (duration_ms <= 0) return;
  if (gpus_.size() <= gpu) gpus_.resize(gpu + 1);
  auto& segs = gpus_[gpu];
  const std::int64_t start = end_unix_ms - duration_ms;
  if (!segs.empty() && segs.back().state == state && start - segs.back().end_unix_ms <= kMergeGapMs &&
      end_unix_ms >= segs.back().end_unix_ms) {
    segs.back().end_unix_ms = end_unix_ms;
    segs.back().cost_micros += cost_micros;
  } else {
    segs.push_back(IdleSegment{state, start, end_unix_ms, cost_micros});
  }
  while (segs.size() > max_segments_ || (!segs.empty() && segs.front().end_unix_ms < end_unix_ms - keep_ms_))
    segs.pop_front();
}

const std::deque<IdleSegment>& IdleHistory::segments(std::size_t gpu) const {
  static const std::deque<IdleSegment> kNone;
  return gpu < gpus_.size() ? gpus_[gpu] : kNone;
}

IdleAnswer answer_idle(const IdleHistory& history, const std::vector<IdleDevice>& devices,
                       std::int64_t now_unix_ms, std::int64_t for_ms,
                       std::optional<std::int64_t> last_collection_unix_ms, std::int64_t stale_ms) {
  IdleAnswer a;
  a.for_ms = for_ms;
  a.now_unix_ms = now_unix_ms;
  a.idle_threshold_pct = meter::kIdleUtilPct;
  const std::int64_t from = now_unix_ms - for_ms;
  const bool stale = !last_collection_unix_ms || now_unix_ms - *last_collection_unix_ms > stale_ms;
  bool all_priced = !devices.empty();
  std::optional<std::int64_t> covered_from;  // the latest first booked time over the GPUs
  MicroUsd idle_sum = 0, held_sum = 0;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const IdleDevice& d = devices[i];
    GpuIdle g;
    g.index = d.info.index;
    g.uuid = d.info.uuid;
    g.model = d.info.name;
    if (d.last) {
      g.state_now = stale ? IdleState::unknown : classify_idle(*d.last);
      g.processes = d.last->processes.size();
    }
    const auto& segs = history.segments(i);
    const std::int64_t first = segs.empty() ? now_unix_ms : segs.front().start_unix_ms;
    covered_from = covered_from ? std::max(*covered_from, first) : first;
    MicroUsd idle_cost = 0, held_cost = 0;
    int worst = 0;
    for (const auto& s : segs) {
      const std::int64_t lo = std::max(s.start_unix_ms, from);
      const std::int64_t hi = std::min(s.end_unix_ms, now_unix_ms);
      if (hi <= lo) continue;
      const std::int64_t len = hi - lo;
      // The segment's cost in the window, in proportion to the part of it inside (floor, exact).
      const MicroUsd part = meter::share_of_micros(
          s.cost_micros, static_cast<std::uint64_t>(len),
          static_cast<std::uint64_t>(std::max<std::int64_t>(1, s.end_unix_ms - s.start_unix_ms)));
      switch (s.state) {
        case IdleState::busy:
          g.busy_ms += len;
          break;
        case IdleState::idle_held:
          g.idle_held_ms += len;
          held_cost += part;
          break;
        case IdleState::idle:
          g.idle_ms += len;
          idle_cost += part;
          break;
        case IdleState::unknown:
          g.unknown_ms += len;
          break;
      }
      worst = std::max(worst, idle_rank(s.state));
    }
    // Time in the window the history does not cover, or since a stalled collector, is unknown.
    if (first > from || stale) worst = std::max(worst, idle_rank(IdleState::unknown));
    if (g.state_now != IdleState::idle && d.last) worst = std::max(worst, idle_rank(g.state_now));
    g.state = worst == 3   ? IdleState::busy
              : worst == 2 ? IdleState::idle_held
              : worst == 1 ? IdleState::unknown
                           : IdleState::idle;
    // The current truly idle stretch: the trailing idle segments, when the GPU is idle now.
    if (!stale && g.state_now == IdleState::idle && !segs.empty() && segs.back().state == IdleState::idle)
      g.idle_since_unix_ms = segs.back().start_unix_ms;
    if (d.priced) {
      g.idle_cost_micros = idle_cost;
      g.idle_held_cost_micros = held_cost;
      idle_sum += idle_cost;
      held_sum += held_cost;
    } else {
      all_priced = false;
    }
    a.gpus.push_back(std::move(g));
  }
  a.history_ms = covered_from ? std::max<std::int64_t>(0, now_unix_ms - *covered_from) : 0;
  if (all_priced) {
    a.idle_cost_micros = idle_sum;
    a.idle_held_cost_micros = held_sum;
  }
  std::vector<unsigned> busy, held, unknown;
  for (const auto& g : a.gpus) {
    if (g.state == IdleState::busy) busy.push_back(g.index);
    if (g.state == IdleState::idle_held) held.push_back(g.index);
    if (g.state == IdleState::unknown) unknown.push_back(g.index);
  }
  const bool all_idle_now =
      !a.gpus.empty() && std::all_of(a.gpus.begin(), a.gpus.end(),
                                     [](const GpuIdle& g) { return g.idle_since_unix_ms.has_value(); });
  if (all_idle_now)
    for (const auto& g : a.gpus)
      a.idle_since_unix_ms = a.idle_since_unix_ms ? std::max(*a.idle_since_unix_ms, *g.idle_since_unix_ms)
                                                  : *g.idle_since_unix_ms;
  const std::string window = duration_text(for_ms);
  if (a.gpus.empty()) {
    a.verdict = IdleState::unknown;
    a.reason = "no GPU on this node";
  } else if (!busy.empty()) {
    a.verdict = IdleState::busy;
    a.reason = fmt::format("{} busy (at or over {:g}% utilization) within the last {}", gpu_list(busy),
                           meter::kIdleUtilPct, window);
  } else if (!held.empty()) {
    a.verdict = IdleState::idle_held;
    a.reason = fmt::format("{} idle but held by a process (memory in use) within the last {}", gpu_list(held),
                           window);
  } else if (stale) {
    a.verdict = IdleState::unknown;
    a.reason = "the agent has not sampled the GPUs recently (its collector is stalled)";
  } else if (!unknown.empty()) {
    a.verdict = IdleState::unknown;
    a.reason = a.history_ms < for_ms
                   ? fmt::format("the agent has seen the GPUs for {} only, less than {}",
                                 duration_text(a.history_ms), window)
                   : fmt::format(
                         "{} could not be read within the last {} (lost, hung or no utilization "
                         "reading): not called idle",
                         gpu_list(unknown), window);
  } else {
    a.verdict = IdleState::idle;
    a.reason =
        fmt::format("every GPU idle (no process, under {:g}% utilization) for {}", meter::kIdleUtilPct,
                    duration_text(a.idle_since_unix_ms ? now_unix_ms - *a.idle_since_unix_ms : for_ms));
  }
  return a;
}

int idle_exit_code(IdleState verdict) {
  switch (verdict) {
    case IdleState::idle:
      return 0;
    case IdleState::busy:
    case IdleState::idle_held:
      return 1;
    case IdleState::unknown:
      break;
  }
  return 3;
}

std::string idle_answer_json(const IdleAnswer& a) {
  using nlohmann::json;
  auto usd = [](const std::optional<MicroUsd>& m) {
    return m ? json(util::micros_to_usd(*m)) : json(nullptr);
  };
  auto seconds = [](std::int64_t ms) { return static_cast<double>(ms) / 1000.0; };
  json gpus = json::array();
  for (const auto& g : a.gpus)
    gpus.push_back({{"gpu", g.index},
                    {"uuid", g.uuid},
                    {"model", g.model},
                    {"state", util::text_of(g.state)},
                    {"state_now", util::text_of(g.state_now)},
                    {"idle_since_unix_ms", util::json_or_null(g.idle_since_unix_ms)},
                    {"busy_s", seconds(g.busy_ms)},
                    {"idle_held_s", seconds(g.idle_held_ms)},
                    {"idle_s", seconds(g.idle_ms)},
                    {"unknown_s", seconds(g.unknown_ms)},
                    {"idle_cost_usd", usd(g.idle_cost_micros)},
                    {"idle_held_cost_usd", usd(g.idle_held_cost_micros)},
                    {"processes", g.processes}});
  const json j = {
      {"verdict", util::text_of(a.verdict)},
      {"reason", a.reason},
      {"for_s", seconds(a.for_ms)},
      {"now_unix_ms", a.now_unix_ms},
      {"history_s", seconds(a.history_ms)},
      {"idle_threshold_pct", a.idle_threshold_pct},
      {"idle_since_unix_ms", util::json_or_null(a.idle_since_unix_ms)},
      {"idle_s", a.idle_since_unix_ms ? json(seconds(a.now_unix_ms - *a.idle_since_unix_ms)) : json(nullptr)},
      {"idle_cost_usd", usd(a.idle_cost_micros)},
      {"idle_held_cost_usd", usd(a.idle_held_cost_micros)},
      {"gpus", gpus}};
  return j.dump(2) + "\n";
}

namespace {

Result<std::optional<MicroUsd>> read_usd(const nlohmann::json& j, std::string_view key,
                                         const util::JsonPath& path) {
  const nlohmann::json* v = util::json_member(j, key);
  if (!v || v->is_null()) return std::optional<MicroUsd>();
  const auto n = util::json_number(v);
  if (!n) return make_error(ErrorKind::failure, (path / key).wrong_type("a number or null", v));
  GM_TRY(auto micros, util::usd_micros_of_number(*n));
  return std::optional<MicroUsd>(micros);
}

std::int64_t ms_of_s(double s) {
  return static_cast<std::int64_t>(std::llround(s * 1000.0));
}

}  // namespace

Result<IdleAnswer> parse_idle_answer(std::string_view text, const std::string& source) {
  auto parsed = util::json_parse(text, source);
  if (!parsed) return make_error(ErrorKind::unavailable, parsed.error().message);
  const nlohmann::json& j = *parsed;
  auto bad = [&](const std::string& why) {
    return make_error(ErrorKind::unavailable, source + ": not an idleness answer: " + why);
  };
  if (!j.is_object()) return bad("not a JSON object");
  IdleAnswer a;
  const auto verdict = util::json_string(j, "verdict");
  const auto state = verdict ? util::enum_from_text(kIdleStateTexts, *verdict) : std::nullopt;
  if (!state) return bad("no known \"verdict\"");
  a.verdict = *state;
  a.reason = util::json_string(j, "reason").value_or("");
  const auto for_s = util::json_number(j, "for_s");
  const auto now = util::json_int(j, "now_unix_ms");
  if (!for_s || !now) return bad("no \"for_s\" or \"now_unix_ms\"");
  a.for_ms = ms_of_s(*for_s);
  a.now_unix_ms = *now;
  a.history_ms = ms_of_s(util::json_number(j, "history_s").value_or(0));
  a.idle_threshold_pct = util::json_number(j, "idle_threshold_pct").value_or(meter::kIdleUtilPct);
  if (auto since = util::json_int(j, "idle_since_unix_ms")) a.idle_since_unix_ms = *since;
  const util::JsonPath root;
  auto idle = read_usd(j, "idle_cost_usd", root);
  if (!idle) return bad(idle.error().message);
  a.idle_cost_micros = *idle;
  auto held = read_usd(j, "idle_held_cost_usd", root);
  if (!held) return bad(held.error().message);
  a.idle_held_cost_micros = *held;
  const nlohmann::json* gpus = util::json_array(j, "gpus");
  if (!gpus) return bad("no \"gpus\" array");
  std::size_t i = 0;
  for (const auto& gj : *gpus) {
    const util::JsonPath path = util::JsonPath("gpus") / i++;
    if (!gj.is_object()) return bad(path.wrong_type("an object", &gj));
    GpuIdle g;
    const auto index = util::json_uint(gj, "gpu");
    const auto st = util::json_string(gj, "state");
    const auto st_now = util::json_string(gj, "state_now");
    const auto s = st ? util::enum_from_text(kIdleStateTexts, *st) : std::nullopt;
    const auto s_now = st_now ? util::enum_from_text(kIdleStateTexts, *st_now) : std::nullopt;
    if (!index || !s || !s_now) return bad(path.str() + ": no \"gpu\", \"state\" or \"state_now\"");
    g.index = static_cast<unsigned>(*index);
    g.state = *s;
    g.state_now = *s_now;
    g.uuid = util::json_string(gj, "uuid").value_or("");
    g.model = util::json_string(gj, "model").value_or("");
    if (auto since = util::json_int(gj, "idle_since_unix_ms")) g.idle_since_unix_ms = *since;
    g.busy_ms = ms_of_s(util::json_number(gj, "busy_s").value_or(0));
    g.idle_held_ms = ms_of_s(util::json_number(gj, "idle_held_s").value_or(0));
    g.idle_ms = ms_of_s(util::json_number(gj, "idle_s").value_or(0));
    g.unknown_ms = ms_of_s(util::json_number(gj, "unknown_s").value_or(0));
    auto gi = read_usd(gj, "idle_cost_usd", path);
    if (!gi) return bad(gi.error().message);
    g.idle_cost_micros = *gi;
    auto gh = read_usd(gj, "idle_held_cost_usd", path);
    if (!gh) return bad(gh.error().message);
    g.idle_held_cost_micros = *gh;
    g.processes = static_cast<std::size_t>(util::json_uint(gj, "processes").value_or(0));
    a.gpus.push_back(std::move(g));
  }
  return a;
}

Result<IdleAnswer> ask_idle(const std::string& agent_url, std::int64_t for_ms, std::int64_t timeout_ms,
                            util::HttpClient& http) {
  std::string base = agent_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  if (base.find("://") == std::string::npos) base = "http://" + base;
  util::HttpRequest req;
  req.scheme_host_port = base;
  req.path = "/v1/idle";
  req.params = {{"for", std::to_string(for_ms) + "ms"}};
  req.connect_timeout = req.read_timeout = req.write_timeout = std::chrono::milliseconds(timeout_ms);
  const std::string url = req.url();
  const auto res = http.send(req);
  if (!res)
    return make_error(ErrorKind::unavailable,
                      "the agent at " + base + " did not answer: " + util::http_failure_text(res.failure()));
  if (res->status == 404)
    return make_error(ErrorKind::unavailable,
                      "the agent at " + base + " has no /v1/idle (an older gpumeter agent): cannot tell");
  if (res->status != 200) {
    std::string body = res->body.substr(0, 300);
    while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) body.pop_back();
    return make_error(ErrorKind::unavailable,
                      fmt::format("{}: HTTP {}{}", url, res->status, body.empty() ? "" : ": " + body));
  }
  return parse_idle_answer(res->body, url);
}

}  // namespace gm::agent
