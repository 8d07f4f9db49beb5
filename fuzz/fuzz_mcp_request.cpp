// libFuzzer target: the MCP request reader of `gpumeter mcp` (docs/mcp.md). The input is a client's lines
// (split at '\n'; the first byte chooses --allow-control); each goes through one session as serve() hands it.
// Any bytes: every answer is one JSON-RPC message (or a batch of them) with "jsonrpc": "2.0", an error or a
// result never both, never a crash or an unbounded wait. Tool calls that stay in the library run (the runs,
// the reports, control: no runs directory and no ledger here); plan_job and find_prices, whose work is the
// planner's and the catalog's (fuzzed elsewhere), are read up to their dispatch.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "mcp/mcp.h"

namespace {

void check_message(const nlohmann::json& m) {
  using gm::fuzz::check;
  check(m.is_object());
  const auto v = m.find("jsonrpc");
  check(v != m.end() && v->is_string() && v->get<std::string>() == "2.0");
  check(m.contains("id"));
  check(m.contains("result") != m.contains("error"));
  if (const auto e = m.find("error"); e != m.end()) {
    check(e->is_object() && e->contains("code") && (*e)["code"].is_number_integer());
    check(e->contains("message") && (*e)["message"].is_string() &&
          !(*e)["message"].get<std::string>().empty());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using gm::fuzz::check;
  if (size == 0) return 0;
  gm::mcp::ServerOptions options;
  options.allow_control = (data[0] & 1) != 0;
  options.ledger_path = "/nonexistent/gpumeter-fuzz/ledger.db";
  options.runs_dir = "";
  options.confirm_timeout_ms = 0;
  options.version = "fuzz";
  gm::mcp::Session session(options);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto nl = text.find('\n', start);
    const std::string_view line =
        text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    auto reply = session.handle_line(line);
    check(!(reply.now && reply.later));
    std::optional<std::string> answer = reply.now;
    if (reply.later) {
      const bool heavy = line.find("plan_job") != std::string_view::npos ||
                         line.find("find_prices") != std::string_view::npos;
      if (!heavy) answer = reply.later();
    }
    if (answer) {
      check(answer->find('\n') == std::string::npos);  // one line per answer
      const auto j = nlohmann::json::parse(*answer, nullptr, false);
      check(!j.is_discarded());
      if (j.is_array()) {
        check(!j.empty());
        for (const auto& m : j) check_message(m);
      } else {
        check_message(j);
      }
    }
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  return 0;
}
