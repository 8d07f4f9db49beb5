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
  std::int64_t cell_id = 0;  ///< the kernel's execution count (or the extension's own counter)
  bool start = false;        ///< true: the cell starts; false: it ended
  store::CellStatus status =
      store::CellStatus::ok;  ///< at the end: how the cell ended (ok when the datagram omits it)
  std::string source;         ///< the cell's first line, at most 200 bytes
};

/// A stop asked of a run from outside it: `gpumeter mcp`'s stop_run (by mcp), the node agent's stop of a
/// GPU held idle (by idle). The run's own supervisor performs it as a budget stop.
struct StopRequest {
  store::StopReason by = store::StopReason::mcp;
  std::string reason;  ///< why, in the asker's words (at most kMaxStopReasonBytes)
};

/// The longest reason a stop request keeps.
inline constexpr std::size_t kMaxStopReasonBytes = 500;

/// A control datagram of a metered session.
struct SessionControl {
  std::optional<CellEvent> cell;
  std::optional<MicroUsd> budget_micros;           ///< a new budget (a stop latched earlier is released)
  std::optional<std::vector<double>> warn_at_pct;  ///< new warning percentages
  std::optional<StopRequest> stop;                 ///< stop the job (the stop sequence of a budget stop)
  std::string by;  ///< who changed the budget ("mcp"; "" for the notebook's own %gpumeter)
};

/// Parses `{"cell": {"id": 3, "event": "start"|"end", "status": "ok", "source": "…"}}`,
/// `{"control": {"budget_usd": 0.5, "warn_at": "80%", "by": "mcp"}}` or
/// `{"control": {"stop": {"by": "mcp", "reason": "…"}}}`; nullopt for any other datagram (progress),
/// usage error for a malformed one of these kinds.
std::optional<Result<SessionControl>> parse_session_control(std::string_view datagram);

/// The datagram that asks a run to stop.
std::string stop_request_datagram(const StopRequest& request);
/// The datagram that sets a run's budget, exactly (the amount as decimal text), naming who asked.
std::string budget_datagram(MicroUsd budget_micros, std::string_view by);
/// Sends one datagram to a run's progress socket (the path its live view names); error (unavailable)
/// naming the socket when it cannot: gone, refused, or not allowed (the socket's folder is its owner's).
Result<void> send_control_datagram(const std::string& socket_path, std::string_view datagram);

}  // namespace gm::guard
