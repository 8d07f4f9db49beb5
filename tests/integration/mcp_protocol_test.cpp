// `gpumeter mcp` on its stdin, byte for byte: the JSON-RPC framing, version negotiation, and what a client
// that sends garbage, an oversized line or a deeply nested message gets (an error, and the server goes on).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/support.h"

namespace gm {
namespace {

using nlohmann::json;

/// The answers `gpumeter mcp` writes for `lines` (one per line of its stdout).
std::vector<json> converse(const std::vector<std::string>& lines,
                           const std::vector<std::string>& flags = {}) {
  test::TempDir dir;
  std::string input;
  for (const auto& l : lines) input += l + "\n";
  std::vector<std::string> args{"mcp", "--runs-dir", dir.path() + "/runs", "--ledger",
                                dir.path() + "/ledger.db"};
  args.insert(args.end(), flags.begin(), flags.end());
  const auto r = test::run_gpumeter(args, {{"HOME", dir.path()}}, input, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.timed_out);
  std::vector<json> out;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line.substr(0, 200);
    out.push_back(std::move(j));
  }
  return out;
}

std::string init(const std::string& version, int id = 1) {
  return json({{"jsonrpc", "2.0"},
               {"id", id},
               {"method", "initialize"},
               {"params",
                {{"protocolVersion", version},
                 {"capabilities", json::object()},
                 {"clientInfo", {{"name", "test"}, {"version", "1"}}}}}})
      .dump();
}

TEST(McpProtocolIntegrationTest, GarbageOversizedAndDeepInputGetErrorsAndTheServerGoesOn) {
  GM_ASSERT_BUILT();
  const std::string huge = "{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"ping\",\"params\":{\"pad\":\"" +
                           std::string(5 * 1024 * 1024, 'x') + "\"}}";
  const auto out = converse({
      R"({"jsonrpc":"2.0","id":"p0","method":"ping"})",  // ping before initialize
      "this is not JSON at all",
      huge,
      std::string(100'000, '[') + std::string(100'000, ']'),
      R"({"jsonrpc":"2.0","id":5,"method":"tools/list"})",  // before initialize
      init("2025-06-18", 6),
      R"({"jsonrpc":"2.0","method":"notifications/initialized"})",
      R"({"jsonrpc":"1.0","id":7,"method":"ping"})",
      R"({"jsonrpc":"2.0","id":8,"method":"resources/list"})",
      R"({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"stop_run","arguments":{"pid":1,"reason":"x"}}})",
      R"({"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"no_such_tool"}})",
      R"({"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"list_runs","arguments":{"limit":"ten"}}})",
      R"([{"jsonrpc":"2.0","id":12,"method":"ping"}])",  // batches belong to 2025-03-26 only
      R"({"jsonrpc":"2.0","id":{"a":1},"method":"ping"})",
      "\xff\xfe{\"jsonrpc\"",
      R"({"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"list_runs","arguments":{}}})",
      R"({"jsonrpc":"2.0","id":14,"method":"ping"})",
  });
  ASSERT_EQ(out.size(), 16u);  // every line but the notification gets one answer
  // Tool calls are answered from a worker (a ping is never held behind one): match answers by id; those
  // without an id (the message could not be read) come in input order.
  std::map<std::string, json> by_id;
  std::vector<json> no_id;
  for (const auto& a : out) {
    if (a["id"].is_null())
      no_id.push_back(a);
    else
      by_id[a["id"].dump()] = a;
  }
  auto code = [](const json& j) { return j.contains("error") ? j["error"]["code"].get<int>() : 0; };
  auto id = [&](const json& key) { return by_id[key.dump()]; };
  EXPECT_TRUE(id("p0")["result"].is_object());  // ping before initialize
  ASSERT_EQ(no_id.size(), 6u);
  EXPECT_EQ(code(no_id[0]), -32700);  // not JSON
  EXPECT_EQ(code(no_id[1]), -32600);  // over 4 MiB: refused unread
  EXPECT_NE(no_id[1]["error"]["message"].get<std::string>().find("MiB"), std::string::npos);
  EXPECT_EQ(code(no_id[2]), -32600);  // nested 100 000 deep: refused unparsed
  EXPECT_NE(no_id[2]["error"]["message"].get<std::string>().find("nested"), std::string::npos);
  EXPECT_EQ(code(no_id[3]), -32600);  // a batch under 2025-06-18
  EXPECT_EQ(code(no_id[4]), -32600);  // an object id
  EXPECT_EQ(code(no_id[5]), -32700);  // bytes that are not JSON
  EXPECT_EQ(code(id(5)), -32600);     // tools/list before initialize
  EXPECT_NE(id(5)["error"]["message"].get<std::string>().find("initialize"), std::string::npos);
  EXPECT_EQ(id(6)["result"]["protocolVersion"], "2025-06-18");
  EXPECT_EQ(id(6)["result"]["serverInfo"]["name"], "gpumeter");
  EXPECT_TRUE(id(6)["result"]["capabilities"].contains("tools"));
  EXPECT_EQ(code(id(7)), -32600);  // jsonrpc 1.0
  EXPECT_EQ(code(id(8)), -32601);  // no resources
  EXPECT_EQ(code(id(9)), -32602);  // a control tool without --allow-control
  EXPECT_NE(id(9)["error"]["message"].get<std::string>().find("--allow-control"), std::string::npos);
  EXPECT_EQ(code(id(10)), -32602);  // unknown tool
  // Bad arguments: a tool result with isError, which a model reads and corrects.
  EXPECT_TRUE(id(11)["result"]["isError"].get<bool>());
  EXPECT_NE(id(11)["result"]["content"][0]["text"].get<std::string>().find("limit"), std::string::npos);
  EXPECT_FALSE(id(13)["result"]["isError"].get<bool>());
  EXPECT_TRUE(id(13)["result"]["structuredContent"]["runs"].is_array());
  EXPECT_TRUE(id(14)["result"].is_object());  // and the server still answers
}

TEST(McpProtocolIntegrationTest, EachProtocolVersionIsNegotiatedAndAnUnknownOneGetsTheNewest) {
  GM_ASSERT_BUILT();
  for (const char* v : {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "1999-01-01"}) {
    SCOPED_TRACE(v);
    const auto out = converse(
        {init(v), R"({"jsonrpc":"2.0","id":2,"method":"tools/list"})",
         R"({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"find_prices","arguments":{"gpu":"H100","limit":3}}})"},
        {"--allow-control"});
    ASSERT_EQ(out.size(), 3u);
    const std::string expected = std::string(v).starts_with("2025") ? v : "2025-11-25";
    EXPECT_EQ(out[0]["result"]["protocolVersion"], expected);
    const json& tools = out[1]["result"]["tools"];
    ASSERT_EQ(tools.size(), 6u) << tools.dump();
    const bool structured = expected != "2025-03-26";
    for (const auto& t : tools) {
      EXPECT_EQ(t["inputSchema"]["type"], "object") << t.dump();
      EXPECT_EQ(t.contains("outputSchema"), structured) << t.dump();
      EXPECT_EQ(t.contains("title"), structured) << t.dump();
    }
    const json& call = out[2]["result"];
    EXPECT_FALSE(call["isError"].get<bool>()) << call.dump();
    EXPECT_EQ(call.contains("structuredContent"), structured);
    // The serialized JSON is in the text content for clients that do not read structuredContent.
    ASSERT_EQ(call["content"].size(), 2u);
    const json text = json::parse(call["content"][1]["text"].get<std::string>());
    EXPECT_LE(text["offers"].size(), 3u);
    EXPECT_GE(text["total"].get<int>(), 1);
  }
  // 2025-03-26 takes batches: one answer array, notifications unanswered.
  const auto out = converse(
      {init("2025-03-26"),
       R"([{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":3,"method":"nope"}])"});
  ASSERT_EQ(out.size(), 2u);
  ASSERT_TRUE(out[1].is_array()) << out[1].dump();
  ASSERT_EQ(out[1].size(), 2u);
  EXPECT_EQ(out[1][0]["id"], 2);
  EXPECT_EQ(out[1][1]["error"]["code"], -32601);
}

}  // namespace
}  // namespace gm
