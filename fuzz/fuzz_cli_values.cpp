// libFuzzer target: the values hurried users type into flags (--grace 90s, --warn-at 50%,80%, --since 7d,
// --listen :9835, --min-gain acc=2%, --target loss<=1.8, --weights cost=0.5,...). Any text: a usage error
// with a message, or a value in the flag's range — never a negative duration or an out-of-range percent.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/agent.h"
#include "agent/node_guard.h"
#include "fuzz_util.h"
#include "guard/guard.h"
#include "plan/plan.h"
#include "report/gate.h"
#include "report/kpi.h"
#include "report/multi.h"
#include "sys/spawn.h"
#include "util/units.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::int64_t now_ms = 1'790'000'000'000;

  if (auto v = gm::util::parse_duration_ms(text)) check(*v >= 0);
  if (auto v = gm::util::parse_number(text)) check(std::isfinite(*v) && *v >= 0);
  if (auto v = gm::util::parse_percent(text)) check(*v >= 0 && *v <= 100);
  if (auto v = gm::guard::parse_warn_at(text))
    for (double p : *v) check(p > 0 && p <= 100);
  if (auto v = gm::sys::parse_signal(std::string(text))) check(*v > 0 && *v < 65);
  if (auto v = gm::agent::parse_listen(text)) check(v->port >= 0 && v->port <= 65535);
  if (auto v = gm::report::parse_time_point(text, now_ms, "--since")) (void)gm::report::format_date_utc(*v);
  if (auto v = gm::report::parse_date_utc(text, "--until")) (void)gm::report::format_date_utc(*v);
  if (auto v = gm::report::parse_group_by(text)) (void)gm::report::group_by_name(*v);
  if (auto v = gm::report::parse_min_gain(text)) check(std::isfinite(v->amount) && !v->metric.empty());
  if (auto v = gm::report::parse_cost_increase_pct(text)) check(std::isfinite(*v));
  if (auto v = gm::meter::parse_metric_target(text)) check(std::isfinite(v->threshold) && !v->metric.empty());
  if (auto v = gm::agent::parse_node_budget(text)) check(v->limit_micros > 0 && v->kind.empty());
  if (auto v = gm::agent::parse_owner_budget(text))
    check(v->limit_micros > 0 && !v->kind.empty() && !v->name.empty());
  if (auto v = gm::plan::parse_weights(text)) {
    for (double w : {v->cost, v->perf, v->memory, v->risk, v->carbon}) check(std::isfinite(w) && w >= 0);
  }
  return 0;
}
