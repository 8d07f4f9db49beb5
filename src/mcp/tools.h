#pragma once
// gpumeter's MCP tools (internal to mcp): their definitions (data/mcp/tools.json, embedded at build time) and
// their calls, each over the library (the ledger, the runs' live views, report's JSON, plan, the catalog,
// guard's control datagrams).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/run_view.h"
#include "mcp/mcp.h"

namespace gm::mcp {

/// What a tool call answers: structured content (an object matching the tool's outputSchema) and a short
/// text; or, with is_error, a message (a tool failure the caller can act on, never a protocol error).
struct ToolResult {
  nlohmann::json structured = nlohmann::json::object();
  std::string text;
  bool is_error = false;
};
/// A failed call: `message` for the caller.
ToolResult tool_error(std::string message);

/// One tool's definition.
struct ToolDef {
  std::string name, title, description;
  bool control = false;  ///< listed and callable with allow_control only
  nlohmann::json input_schema, output_schema, annotations;
};
/// The embedded definitions (data/mcp/tools.json), read once.
struct ToolCatalog {
  std::string instructions;  ///< initialize's `instructions`
  std::vector<ToolDef> tools;
  std::string error;  ///< why the file could not be read ("" when it was): a broken build
};
const ToolCatalog& tool_catalog();
/// The definition of the tool `name`; nullptr when there is none.
const ToolDef* tool_definition(std::string_view name);

/// Calls tool `name` (a defined one) with `args` (an object).
ToolResult call_tool(std::string_view name, const nlohmann::json& args, const ServerOptions& options);

/// Reads a tool's arguments with messages that name the argument: each getter returns nullopt when the
/// argument is absent and records the first error when it has the wrong type or range; finish() reports
/// that error, or an argument the tool does not take.
class Args {
 public:
  explicit Args(const nlohmann::json& args) : args_(args) {}
  std::optional<std::int64_t> integer(std::string_view key, std::int64_t min, std::int64_t max);
  std::optional<std::string> string(std::string_view key, std::size_t max_bytes = 1000);
  std::optional<bool> boolean(std::string_view key);
  /// The argument itself (any JSON type), marked as read.
  const nlohmann::json* raw(std::string_view key);
  /// The error of the arguments read so far, or one not read (unknown); nullopt when all is well.
  std::optional<std::string> finish();
  /// Records an error about `key` (the first one wins).
  void fail(std::string_view key, const std::string& why);

 private:
  const nlohmann::json& args_;
  std::vector<std::string> read_;
  std::optional<std::string> error_;
};

/// A run named by its ledger id or a PID (the meter's or the job's).
struct RunRef {
  std::optional<std::int64_t> run_id;
  std::optional<std::int64_t> pid;
};
/// The run the arguments `run_id` and `pid` name (either may be absent).
RunRef read_run_ref(Args& args);
/// The live view of the run `ref` names in the runs directory, if it is going now.
std::optional<agent::RunView> find_live_run(const ServerOptions& options, const RunRef& ref);
/// The live views going now, by meter PID.
std::vector<agent::RunView> live_runs(const ServerOptions& options);
/// A live view's figures as run_status's `live` object.
nlohmann::json live_json(const agent::RunView& view);

// The tools (run_tools.cpp, plan_tools.cpp, control_tools.cpp).
ToolResult list_runs(const nlohmann::json& args, const ServerOptions& options);
ToolResult run_status(const nlohmann::json& args, const ServerOptions& options);
ToolResult plan_job(const nlohmann::json& args, const ServerOptions& options);
ToolResult find_prices(const nlohmann::json& args, const ServerOptions& options);
ToolResult stop_run(const nlohmann::json& args, const ServerOptions& options);
ToolResult set_budget(const nlohmann::json& args, const ServerOptions& options);

}  // namespace gm::mcp
