// libFuzzer target: control datagrams of a metered session (notebook cells, budget changes, stop requests of
// gpumeter mcp and the node agent; docs/cli.md, docs/mcp.md) arrive on the progress socket from the user's
// processes. A bad one is an error or "not a control datagram", never a crash, a negative cell id, an
// over-long source or reason, a stop asked for the run's own reasons, or a non-positive budget.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "guard/session.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = gm::guard::parse_session_control(text);
  if (!r) return 0;  // a progress datagram (or not JSON): the progress parser's business
  if (!*r) {
    check(!r->error().message.empty());
    return 0;
  }
  const gm::guard::SessionControl& c = **r;
  if (c.cell) {
    check(c.cell->cell_id >= 0);
    check(c.cell->source.size() <= 200);
    check(c.cell->start ||
          c.cell->status != gm::store::CellStatus::unfinished);  // an end datagram never says that
  }
  if (c.budget_micros) check(*c.budget_micros > 0);
  if (c.stop) {
    check(c.stop->reason.size() <= gm::guard::kMaxStopReasonBytes);
    check(c.stop->by == gm::store::StopReason::mcp || c.stop->by == gm::store::StopReason::idle);
  }
  check(c.by.size() <= 64);
  if (c.warn_at_pct)
    for (double p : *c.warn_at_pct) check(p > 0 && p <= 100);
  return 0;
}
