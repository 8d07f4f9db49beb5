// The tools' definitions, their dispatch, argument reading and the runs' live views they share.
#include "mcp/tools.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "util/embedded.h"
#include "util/json.h"
#include "util/json_in.h"

namespace gm::mcp {

namespace {

using nlohmann::json;

ToolCatalog read_catalog() {
  ToolCatalog c;
  const auto text = util::embedded_file("mcp/tools.json");
  if (!text) {
    c.error = "mcp/tools.json is not embedded in this build";
    return c;
  }
  auto parsed = util::json_parse(*text, "mcp/tools.json");
  if (!parsed) {
    c.error = parsed.error().message;
    return c;
  }
  c.instructions = util::json_string(*parsed, "instructions").value_or("");
  const json* tools = util::json_array(*parsed, "tools");
  if (!tools) {
    c.error = "mcp/tools.json: no \"tools\" array";
    return c;
  }
  for (const auto& t : *tools) {
    ToolDef d;
    d.name = util::json_string(t, "name").value_or("");
    d.title = util::json_string(t, "title").value_or(d.name);
    d.description = util::json_string(t, "description").value_or("");
    d.control = util::json_bool(t, "control").value_or(false);
    const json* in = util::json_object(t, "inputSchema");
    const json* out = util::json_object(t, "outputSchema");
    const json* notes = util::json_object(t, "annotations");
    if (d.name.empty() || !in || !out) {
      c.error = "mcp/tools.json: a tool without a name, inputSchema or outputSchema";
      c.tools.clear();
      return c;
    }
    d.input_schema = *in;
    d.output_schema = *out;
    d.annotations = notes ? *notes : json::object();
    c.tools.push_back(std::move(d));
  }
  return c;
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ToolResult tool_error(std::string message) {
  ToolResult r;
  r.is_error = true;
  r.text = std::move(message);
  return r;
}

const ToolCatalog& tool_catalog() {
  static const ToolCatalog catalog = read_catalog();
  return catalog;
}

const ToolDef* tool_definition(std::string_view name) {
  for (const auto& d : tool_catalog().tools)
    if (d.name == name) return &d;
  return nullptr;
}

ToolResult call_tool(std::string_view name, const nlohmann::json& args, const ServerOptions& options) {
  if (name == "list_runs") return list_runs(args, options);
  if (name == "run_status") return run_status(args, options);
  if (name == "plan_job") return plan_job(args, options);
  if (name == "find_prices") return find_prices(args, options);
  if (name == "stop_run") return stop_run(args, options);
  if (name == "set_budget") return set_budget(args, options);
  return tool_error("no tool '" + std::string(name) + "'");
}

// ---- arguments ---------------------------------------------------------------------------------------

void Args::fail(std::string_view key, const std::string& why) {
  if (!error_) error_ = "argument '" + std::string(key) + "': " + why;
}

const nlohmann::json* Args::raw(std::string_view key) {
  read_.emplace_back(key);
  const json* v = util::json_member(args_, key);
  return v && !v->is_null() ? v : nullptr;
}

std::optional<std::int64_t> Args::integer(std::string_view key, std::int64_t min, std::int64_t max) {
  const json* v = raw(key);
  if (!v) return std::nullopt;
  auto n = util::json_int(v);
  // A whole number written as 3.0 is still the integer 3.
  if (auto d = util::json_number(v);
      !n && d && *d >= -9.0e18 && *d <= 9.0e18 && *d == static_cast<double>(static_cast<std::int64_t>(*d)))
    n = static_cast<std::int64_t>(*d);
  if (!n) {
    fail(key, std::string("expected an integer, got ") + std::string(util::json_type_name(v)));
    return std::nullopt;
  }
  if (*n < min || *n > max) {
    fail(key, fmt::format("{} is out of range ({} to {})", *n, min, max));
    return std::nullopt;
  }
  return n;
}

std::optional<std::string> Args::string(std::string_view key, std::size_t max_bytes) {
  const json* v = raw(key);
  if (!v) return std::nullopt;
  auto s = util::json_string(v);
  if (!s) {
    fail(key, std::string("expected a string, got ") + std::string(util::json_type_name(v)));
    return std::nullopt;
  }
  if (s->size() > max_bytes) {
    fail(key, fmt::format("longer than {} bytes", max_bytes));
    return std::nullopt;
  }
  return s;
}

std::optional<bool> Args::boolean(std::string_view key) {
  const json* v = raw(key);
  if (!v) return std::nullopt;
  auto b = util::json_bool(v);
  if (!b) fail(key, std::string("expected true or false, got ") + std::string(util::json_type_name(v)));
  return b;
}

std::optional<std::string> Args::finish() {
  if (error_) return error_;
  if (args_.is_object())
    for (const auto& [key, value] : args_.items())
      if (std::find(read_.begin(), read_.end(), key) == read_.end()) return "unknown argument '" + key + "'";
  return std::nullopt;
}

RunRef read_run_ref(Args& args) {
  RunRef ref;
  ref.run_id = args.integer("run_id", 1, INT64_MAX);
  ref.pid = args.integer("pid", 1, INT32_MAX);
  return ref;
}

// ---- live runs -----------------------------------------------------------------------------------

std::vector<agent::RunView> live_runs(const ServerOptions& options) {
  if (options.runs_dir.empty()) return {};
  return agent::read_run_views(options.runs_dir, now_unix_ms(), agent::process_alive);
}

std::optional<agent::RunView> find_live_run(const ServerOptions& options, const RunRef& ref) {
  for (auto& v : live_runs(options)) {
    if (ref.run_id && v.run_id == *ref.run_id) return v;
    if (ref.pid && (v.meter_pid == *ref.pid || (v.job_pid > 0 && v.job_pid == *ref.pid))) return v;
  }
  return std::nullopt;
}

nlohmann::json live_json(const agent::RunView& v) {
  auto usd = [](const std::optional<MicroUsd>& m) {
    return m ? json(util::micros_to_usd(*m)) : json(nullptr);
  };
  json j = {{"pid", v.meter_pid},
            {"job_pid", v.job_pid > 0 ? json(v.job_pid) : json(nullptr)},
            {"spent_usd", usd(v.cost_micros)},
            {"usd_per_hour", util::json_or_null(v.usd_per_hour)},
            {"forecast_usd", v.forecast ? json(v.forecast->total_usd) : json(nullptr)},
            {"forecast_low_usd", v.forecast ? json(v.forecast->low_usd) : json(nullptr)},
            {"forecast_high_usd", v.forecast ? json(v.forecast->high_usd) : json(nullptr)},
            {"eta_s", v.forecast ? json(v.forecast->remaining_s) : json(nullptr)},
            {"steps", util::json_or_null(v.steps)},
            {"total_steps", util::json_or_null(v.total_steps)},
            {"budget_usd", usd(v.budget_micros)},
            {"stopping", v.stopping},
            {"user", v.user},
            {"updated_unix_ms", v.updated_unix_ms}};
  return j;
}

}  // namespace gm::mcp
