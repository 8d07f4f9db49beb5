// The MCP protocol over JSON-RPC 2.0: the request reader (size and depth limits, the message's shape), the
// lifecycle (initialize and version negotiation, ping at any time), tools/list and tools/call.
#include <algorithm>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>

#include "mcp/mcp.h"
#include "mcp/tools.h"
#include "util/json_in.h"

namespace gm::mcp {

namespace {

using nlohmann::json;

/// The batch form (a JSON array of messages) belongs to this version only; later versions removed it.
constexpr std::string_view kBatchVersion = "2025-03-26";
/// Versions from which tools carry title and outputSchema and results carry structuredContent.
bool structured_version(std::string_view version) {
  return version != "2025-03-26";
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json error_object(const json& id, int code, const std::string& message) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

json result_object(const json& id, json result) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

/// A JSON-RPC id: a string or an integer (MCP: never null).
bool valid_id(const json& id) {
  return id.is_string() || id.is_number_integer() || id.is_number_unsigned();
}

bool known_method(std::string_view m) {
  return m == "initialize" || m == "ping" || m == "tools/list" || m == "tools/call";
}

}  // namespace

int json_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

struct Session::Impl {
  explicit Impl(ServerOptions o) : options(std::move(o)) {}
  ServerOptions options;
  mutable std::mutex mu;
  std::string version;  // negotiated; "" before initialize

  std::string negotiated() const {
    std::lock_guard lock(mu);
    return version;
  }

  /// One message (an element of a batch or a whole line): an answer, nothing, or deferred work.
  Reply handle(const json& m) {
    if (!m.is_object())
      return now(error_object(nullptr, kInvalidRequest, "Invalid Request: not a JSON object"));
    const json* id = util::json_member(m, "id");
    if (id && !valid_id(*id))
      return now(
          error_object(nullptr, kInvalidRequest, "Invalid Request: \"id\" must be a string or an integer"));
    const json reply_id = id ? *id : json(nullptr);
    if (util::json_string(m, "jsonrpc") != std::optional<std::string>("2.0"))
      return now(error_object(reply_id, kInvalidRequest, "Invalid Request: \"jsonrpc\" must be \"2.0\""));
    const json* method = util::json_member(m, "method");
    if (!method) {
      // A response from the client (the server sends no requests): nothing to answer.
      if (id && (util::json_member(m, "result") || util::json_member(m, "error"))) return {};
      return now(error_object(reply_id, kInvalidRequest, "Invalid Request: no \"method\""));
    }
    if (!method->is_string())
      return now(error_object(reply_id, kInvalidRequest, "Invalid Request: \"method\" must be a string"));
    const std::string name = util::json_string(method).value_or("");
    const json* params = util::json_member(m, "params");
    if (params && !params->is_object() && !params->is_array())
      return now(
          error_object(reply_id, kInvalidRequest, "Invalid Request: \"params\" must be an object or array"));
    if (!id)
      return {};  // a notification (notifications/initialized, notifications/cancelled, ...): no answer
    if (name == "ping") return now(result_object(reply_id, json::object()));
    if (!known_method(name)) return now(error_object(reply_id, kMethodNotFound, "Method not found: " + name));
    if (name == "initialize") return now(initialize(reply_id, params));
    const std::string v = negotiated();
    if (v.empty())
      return now(error_object(reply_id, kInvalidRequest,
                              "Invalid Request: the session is not initialized (send initialize first)"));
    if (params && !params->is_object())
      return now(error_object(reply_id, kInvalidParams, "Invalid params: " + name + " takes an object"));
    if (name == "tools/list") return now(tools_list(reply_id, params, v));
    return tools_call(reply_id, params, v);
  }

  static Reply now(const json& answer) { return Reply{dump(answer), {}}; }

  json initialize(const json& id, const json* params) {
    const auto requested = params ? util::json_string(*params, "protocolVersion") : std::nullopt;
    if (!requested)
      return error_object(id, kInvalidParams,
                          "Invalid params: initialize needs \"protocolVersion\" (a string)");
    // The client's version when the server speaks it, else the newest the server speaks (the client then
    // decides whether it can go on).
    std::string chosen(kProtocolVersions[0]);
    for (auto v : kProtocolVersions)
      if (*requested == v) chosen = std::string(v);
    {
      std::lock_guard lock(mu);
      if (!version.empty())
        return error_object(id, kInvalidRequest, "Invalid Request: the session is already initialized");
      version = chosen;
    }
    json server = {{"name", "gpumeter"}, {"version", options.version}};
    if (structured_version(chosen)) server["title"] = "gpumeter: what GPU work costs";
    return result_object(id, {{"protocolVersion", chosen},
                              {"capabilities", {{"tools", {{"listChanged", false}}}}},
                              {"serverInfo", server},
                              {"instructions", tool_catalog().instructions}});
  }

  json tools_list(const json& id, const json* params, const std::string& v) const {
    if (params)
      if (const json* cursor = util::json_member(*params, "cursor"); cursor && !cursor->is_null())
        return error_object(id, kInvalidParams,
                            "Invalid params: unknown cursor (the tool list has one page)");
    json tools = json::array();
    for (const ToolDef& def : tool_catalog().tools) {
      if (def.control && !options.allow_control) continue;
      json t = {{"name", def.name},
                {"description", def.description},
                {"inputSchema", def.input_schema},
                {"annotations", def.annotations}};
      if (structured_version(v)) {
        t["title"] = def.title;
        t["outputSchema"] = def.output_schema;
      } else {
        t["annotations"]["title"] = def.title;
      }
      tools.push_back(std::move(t));
    }
    return result_object(id, {{"tools", tools}});
  }

  Reply tools_call(const json& id, const json* params, const std::string& v) {
    const auto name = params ? util::json_string(*params, "name") : std::nullopt;
    if (!name)
      return now(error_object(id, kInvalidParams, "Invalid params: tools/call needs \"name\" (a string)"));
    const ToolDef* def = tool_definition(*name);
    if (!def) return now(error_object(id, kInvalidParams, "Invalid params: unknown tool '" + *name + "'"));
    if (def->control && !options.allow_control)
      return now(error_object(id, kInvalidParams,
                              "Invalid params: '" + *name +
                                  "' changes a run and is refused: gpumeter mcp was started without "
                                  "--allow-control, so its control tools are neither listed nor callable"));
    const json* args = util::json_member(*params, "arguments");
    if (args && !args->is_null() && !args->is_object())
      return now(error_object(id, kInvalidParams, "Invalid params: \"arguments\" must be an object"));
    json arguments = args && args->is_object() ? *args : json::object();
    const bool structured = structured_version(v);
    return Reply{
        std::nullopt, [this, id, tool = *name, arguments = std::move(arguments), structured] {
          ToolResult r;
          try {
            r = call_tool(tool, arguments, options);
          } catch (const std::exception& e) {
            r = tool_error(std::string("internal error: ") + e.what());
          }
          json result;
          if (r.is_error) {
            result = {{"content", json::array({{{"type", "text"}, {"text", r.text}}})}, {"isError", true}};
          } else {
            // The short text for people and models, the serialized JSON for clients that do not
            // read structuredContent (the specification's advice), and the structured content.
            result = {{"content", json::array({{{"type", "text"}, {"text", r.text}},
                                               {{"type", "text"}, {"text", dump(r.structured)}}})},
                      {"isError", false}};
            if (structured) result["structuredContent"] = std::move(r.structured);
          }
          return dump(result_object(id, std::move(result)));
        }};
  }
};

Session::Session(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Session::~Session() = default;

std::string Session::protocol_version() const {
  return impl_->negotiated();
}

std::string Session::oversized_reply() const {
  return dump(error_object(nullptr, kInvalidRequest,
                           "Invalid Request: the message is over " +
                               std::to_string(kMaxMessageBytes / (1024 * 1024)) +
                               " MiB (one JSON-RPC message per line); it was skipped unread"));
}

Session::Reply Session::handle_line(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
    line.remove_suffix(1);
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  if (line.empty()) return {};
  if (line.size() > kMaxMessageBytes) return Reply{oversized_reply(), {}};
  if (json_depth(line, kMaxJsonDepth) > kMaxJsonDepth)
    return Reply{dump(error_object(nullptr, kInvalidRequest,
                                   "Invalid Request: nested deeper than " + std::to_string(kMaxJsonDepth) +
                                       " levels; refused unparsed")),
                 {}};
  auto parsed = util::json_parse(line, "the line");
  if (!parsed)
    return Reply{dump(error_object(nullptr, kParseError, "Parse error: " + parsed.error().message)), {}};
  if (!parsed->is_array()) return impl_->handle(*parsed);
  // A batch: only in protocol 2025-03-26, each message answered in one array (notifications: nothing).
  const std::string v = impl_->negotiated();
  if (v != kBatchVersion)
    return Reply{
        dump(error_object(nullptr, kInvalidRequest,
                          "Invalid Request: a batch (JSON array) is only accepted under protocol version " +
                              std::string(kBatchVersion) +
                              (v.empty() ? " (and after initialize)" : ", not " + v))),
        {}};
  if (parsed->empty())
    return Reply{dump(error_object(nullptr, kInvalidRequest, "Invalid Request: an empty batch")), {}};
  json answers = json::array();
  for (const auto& m : *parsed) {
    Reply r = impl_->handle(m);
    if (r.later) r.now = r.later();
    if (r.now) {
      auto one = util::json_parse(*r.now, "answer");
      if (one) answers.push_back(std::move(*one));
    }
  }
  if (answers.empty()) return {};
  return Reply{dump(answers), {}};
}

std::optional<std::string> Session::handle_line_now(std::string_view line) {
  Reply r = handle_line(line);
  if (r.later) return r.later();
  return r.now;
}

}  // namespace gm::mcp
