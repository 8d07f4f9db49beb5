// The MCP session without a process: the tool definitions, the depth limit, the lifecycle and the error codes
// of JSON-RPC 2.0, and the argument reader's messages.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "mcp/mcp.h"
#include "mcp/tools.h"

namespace gm::mcp {
namespace {

using nlohmann::json;

ServerOptions options(bool control) {
  ServerOptions o;
  o.allow_control = control;
  o.ledger_path = "/nonexistent/gpumeter-test/ledger.db";
  o.version = "test";
  return o;
}

json answer(Session& s, const std::string& line) {
  auto a = s.handle_line_now(line);
  EXPECT_TRUE(a) << line;
  return a ? json::parse(*a) : json();
}

const std::string kInit =
    R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})";

TEST(McpSessionTest, TheToolDefinitionsAreEmbeddedWithTheirSchemas) {
  const ToolCatalog& c = tool_catalog();
  ASSERT_EQ(c.error, "");
  EXPECT_FALSE(c.instructions.empty());
  std::vector<std::string> names;
  for (const auto& t : c.tools) {
    names.push_back(t.name);
    EXPECT_EQ(t.input_schema["type"], "object") << t.name;
    EXPECT_EQ(t.output_schema["type"], "object") << t.name;
    EXPECT_FALSE(t.description.empty()) << t.name;
    EXPECT_EQ(t.control, t.name == "stop_run" || t.name == "set_budget") << t.name;
    EXPECT_EQ(t.annotations["readOnlyHint"].get<bool>(), !t.control) << t.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"list_runs", "run_status", "plan_job", "find_prices", "stop_run",
                                             "set_budget"}));
}

TEST(McpSessionTest, DepthIsCountedOutsideStrings) {
  EXPECT_EQ(json_depth(R"({"a":[1,{"b":2}]})", 64), 3);
  EXPECT_EQ(json_depth(R"({"a":"[[[[{{{{\"]]"})", 64), 1);
  EXPECT_EQ(json_depth(std::string(1000, '['), 64), 65);  // stops counting past the limit
  EXPECT_EQ(json_depth("]]]}}", 64), 0);
  EXPECT_EQ(json_depth("", 64), 0);
}

TEST(McpSessionTest, LifecycleAndErrorCodes) {
  Session s(options(false));
  EXPECT_EQ(answer(s, R"({"jsonrpc":"2.0","id":0,"method":"ping"})")["result"], json::object());
  EXPECT_EQ(answer(s, R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(answer(s, R"({"jsonrpc":"2.0","id":3,"method":"initialize","params":{}})")["error"]["code"],
            kInvalidParams);
  const json init = answer(s, kInit);
  EXPECT_EQ(init["result"]["protocolVersion"], "2025-11-25");
  EXPECT_EQ(s.protocol_version(), "2025-11-25");
  EXPECT_EQ(answer(s, kInit)["error"]["code"], kInvalidRequest);  // once only
  EXPECT_FALSE(s.handle_line_now(R"({"jsonrpc":"2.0","method":"notifications/initialized"})"));
  EXPECT_FALSE(s.handle_line_now(R"({"jsonrpc":"2.0","method":"no/such/notification"})"));
  EXPECT_FALSE(s.handle_line_now(R"({"jsonrpc":"2.0","id":5,"result":{}})"));  // a response: nothing
  EXPECT_FALSE(s.handle_line_now("   "));
  const json list = answer(s, R"({"jsonrpc":"2.0","id":"l","method":"tools/list"})");
  EXPECT_EQ(list["id"], "l");
  EXPECT_EQ(list["result"]["tools"].size(), 4u);  // no control tools without allow_control
  EXPECT_EQ(
      answer(s, R"({"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"cursor":"x"}})")["error"]["code"],
      kInvalidParams);
  EXPECT_EQ(answer(s, R"({"jsonrpc":"2.0","id":7,"method":"nope"})")["error"]["code"], kMethodNotFound);
  EXPECT_EQ(
      answer(
          s,
          R"({"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"stop_run"}})")["error"]["code"],
      kInvalidParams);
  EXPECT_EQ(
      answer(
          s,
          R"({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"list_runs","arguments":[1]}})")
          ["error"]["code"],
      kInvalidParams);
  EXPECT_EQ(answer(s, R"({"jsonrpc":"2.0","id":null,"method":"ping"})")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(answer(s, R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(answer(s, R"({"jsonrpc":"2.0","id":10,"method":7})")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(answer(s, R"({"jsonrpc":"2.0","id":11,"method":"ping","params":"x"})")["error"]["code"],
            kInvalidRequest);
  EXPECT_EQ(answer(s, "42")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(answer(s, "{")["error"]["code"], kParseError);
  EXPECT_EQ(answer(s, "\"" + std::string(kMaxMessageBytes, 'x') + "\"")["error"]["code"], kInvalidRequest);
  // A deferred tool call: its answer comes from the work the session hands back.
  auto r = s.handle_line(R"({"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"list_runs"}})");
  EXPECT_FALSE(r.now);
  ASSERT_TRUE(r.later);
  const json call = json::parse(r.later());
  EXPECT_EQ(call["id"], 12);
  EXPECT_FALSE(call["result"]["isError"].get<bool>());
  EXPECT_EQ(call["result"]["structuredContent"]["runs"], json::array());
}

TEST(McpSessionTest, ControlToolsAreListedWithTheFlagAndRefuseARunThatIsNotGoing) {
  Session s(options(true));
  answer(s, kInit);
  EXPECT_EQ(answer(s, R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})")["result"]["tools"].size(), 6u);
  const json stop = answer(
      s,
      R"({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"stop_run","arguments":{"pid":1,"reason":"x"}}})");
  EXPECT_TRUE(stop["result"]["isError"].get<bool>());
  EXPECT_NE(stop["result"]["content"][0]["text"].get<std::string>().find("no run going now"),
            std::string::npos)
      << stop.dump();
  const json bad = answer(
      s,
      R"({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"set_budget","arguments":{"pid":1,"budget_usd":"-3"}}})");
  EXPECT_TRUE(bad["result"]["isError"].get<bool>());
  const json no_reason = answer(
      s,
      R"({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"stop_run","arguments":{"pid":1}}})");
  EXPECT_NE(no_reason["result"]["content"][0]["text"].get<std::string>().find("reason"), std::string::npos);
}

TEST(McpSessionTest, ArgumentsNameWhatIsWrong) {
  const json args = {{"limit", "ten"}, {"extra", 1}, {"n", 3.0}, {"flag", "yes"}};
  Args a(args);
  EXPECT_FALSE(a.integer("limit", 1, 10));
  EXPECT_EQ(a.integer("n", 1, 10), std::optional<std::int64_t>(3));
  EXPECT_EQ(*a.finish(), "argument 'limit': expected an integer, got a string");
  const json args2 = {{"n", 30}, {"extra", 1}};
  Args b(args2);
  EXPECT_FALSE(b.integer("n", 1, 10));
  EXPECT_NE(b.finish()->find("out of range"), std::string::npos);
  const json args3 = {{"n", 3}, {"extra", 1}};
  Args c(args3);
  c.integer("n", 1, 10);
  EXPECT_EQ(*c.finish(), "unknown argument 'extra'");
}

}  // namespace
}  // namespace gm::mcp
