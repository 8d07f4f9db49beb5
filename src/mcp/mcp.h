#pragma once
// `gpumeter mcp`: a Model Context Protocol server on stdio (docs/mcp.md). JSON-RPC 2.0, one message per line;
// protocol versions 2025-11-25, 2025-06-18 and 2025-03-26 negotiated at `initialize`; `ping` answered at any
// time; `tools/list` and `tools/call` over gpumeter's tools (the runs of the runs directory and the ledger, a
// run's report, plans, offers; with allow_control only, stopping a run and changing its budget through the
// run's own supervisor). A line that is not JSON gets -32700 and the server goes on; a line over
// kMaxMessageBytes or nested deeper than kMaxJsonDepth is refused, never parsed.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gm::mcp {

/// The protocol versions the server speaks, newest first (the answer to a version it does not know).
inline constexpr std::string_view kProtocolVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};
/// The longest message (one line) the server reads; a longer one is refused and skipped.
inline constexpr std::size_t kMaxMessageBytes = 4 * 1024 * 1024;
/// The deepest nesting of arrays and objects in a message the server parses.
inline constexpr int kMaxJsonDepth = 64;

/// JSON-RPC 2.0 error codes.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;

/// What the server reads and may do.
struct ServerOptions {
  std::optional<std::string> ledger_path;  ///< --ledger (nullopt: the default ledger, as every command)
  std::string runs_dir;                    ///< where run and attach publish their live views
  bool allow_control = false;              ///< --allow-control: stop_run and set_budget
  std::uint32_t uid = 0;                   ///< the caller's uid: control reaches its own runs (root: all)
  std::string version;                     ///< gpumeter's version (serverInfo)
  /// How long stop_run and set_budget wait for the run's view to show the change.
  std::int64_t confirm_timeout_ms = 5'000;
};

/// Nesting depth of the JSON text (arrays and objects, outside strings), counted up to `limit` + 1; the
/// text need not be valid JSON.
int json_depth(std::string_view text, int limit);

/// One protocol session: its state (initialized, the negotiated version) and its tools. Thread-safe: the
/// reader thread and a tool worker may call it at once.
class Session {
 public:
  explicit Session(ServerOptions options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// What to do with one line: an answer now (a JSON text without the newline), nothing (a notification,
  /// a response, a blank line), or work to run off the reading thread (a tool call) that returns its answer.
  struct Reply {
    std::optional<std::string> now;
    std::function<std::string()> later;
  };
  /// Handles one line of input (without its newline).
  Reply handle_line(std::string_view line);
  /// handle_line, with deferred work run at once (tests, fuzzing, batches).
  std::optional<std::string> handle_line_now(std::string_view line);
  /// The answer to a line that exceeded kMaxMessageBytes (it was skipped unread).
  std::string oversized_reply() const;
  /// The negotiated protocol version ("" before initialize).
  std::string protocol_version() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Serves the protocol: reads lines from `in_fd` until end of input, writes one answer per line to `out_fd`;
/// tool calls run on a worker thread so `ping` is answered while one runs. Returns when the input ends and
/// the last call has been answered; error (failure) when writing the output fails.
Result<void> serve(int in_fd, int out_fd, const ServerOptions& options);

}  // namespace gm::mcp
