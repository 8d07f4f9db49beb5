// `gpumeter idle` in words: the verdict, each GPU's states and the dollars of the idle time.
#include "report/idle_render.h"

#include <fmt/format.h>

#include "util/enum_text.h"
#include "util/table.h"
#include "util/time.h"
#include "util/units.h"

namespace gm::report {

namespace {

std::string seconds_text(std::int64_t ms) {
  return ms > 0 ? util::format_duration_s(static_cast<double>(ms) / 1000.0) : "-";
}

std::string usd_text(const std::optional<MicroUsd>& micros) {
  return micros ? util::format_micros(*micros) : "n/a";
}

}  // namespace

std::string render_idle_text(const agent::IdleAnswer& a) {
  const std::string window = util::format_duration_s(static_cast<double>(a.for_ms) / 1000.0);
  std::string out = fmt::format("{}: {}\n\n", util::text_of(a.verdict), a.reason);
  util::TextTable t;
  using A = util::TextTable::Align;
  t.header({"GPU", "MODEL", "NOW", "LAST " + window, "IDLE SINCE (UTC)", "BUSY", "HELD IDLE", "IDLE",
            "UNKNOWN", "HELD IDLE $", "IDLE $"},
           {A::left, A::left, A::left, A::left, A::left, A::right, A::right, A::right, A::right, A::right,
            A::right});
  for (const auto& g : a.gpus)
    t.row({std::to_string(g.index), util::shorten_middle(g.model, 25), util::text_of(g.state_now),
           util::text_of(g.state), g.idle_since_unix_ms ? util::iso8601_utc(*g.idle_since_unix_ms) : "-",
           seconds_text(g.busy_ms), seconds_text(g.idle_held_ms), seconds_text(g.idle_ms),
           seconds_text(g.unknown_ms), usd_text(g.idle_held_cost_micros), usd_text(g.idle_cost_micros)});
  out += t.render();
  out += fmt::format(
      "\nin the last {} (the agent has seen {}): idle GPUs held by processes cost {}, idle GPUs "
      "nobody held {}\n",
      window, util::format_duration_s(static_cast<double>(a.history_ms) / 1000.0),
      usd_text(a.idle_held_cost_micros), usd_text(a.idle_cost_micros));
  return out;
}

}  // namespace gm::report
