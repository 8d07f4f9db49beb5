#pragma once
// Control datagrams of an attached session (`gpumeter attach`, the IPython extension; DESIGN §5,
// docs/notebooks.md): notebook cells and budget changes, on the same socket as progress.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"
#include "util/money.h"
#include "util/result.h"

namespace gm::guard {

/// A notebook cell as the IPython extension reports it on the progress socket.
struct CellEvent {
  std::int64_t cell_id = 0;            ///< the kernel's execution count (or the extension's own counter)
  bool start = false;                  ///< true: the cell starts; false: it ended
  store::CellStatus status =
      store::CellStatus::ok;           ///< at the end: how the cell ended (ok when the datagram omits it)
  std::string source;                  ///< the cell's first line, at most 200 bytes
};

/// A control datagram of an attached session.
struct SessionControl {
  std::optional<CellEvent> cell;
  std::optional<MicroUsd> budget_micros;           ///< a new budget (a stop latched earlier is released)
  std::optional<std::vector<double>> warn_at_pct;  ///< new warning percentages
};

/// Parses `{"cell": {"id": 3, "event": "start"|"end", "status": "ok", "source": "…"}}` or
/// `{"control": {"budget_usd": 0.5, "warn_at": "80%"}}`; nullopt for any other datagram (progress),
/// usage error for a malformed one of these kinds.
std::optional<Result<SessionControl>> parse_session_control(std::string_view datagram);

}  // namespace gm::guard
