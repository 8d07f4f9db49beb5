// gpumeter idle: whether every GPU of the node has been idle for a duration, asked of the node's agent
// (GET /v1/idle?for=D). Exit 0 idle, 1 busy or held, 3 unknown (fail-safe for schedulers: only 0 is idle).
#include <cstdio>

#include "agent/idle.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "report/idle_render.h"
#include "util/units.h"

namespace gm::cli {

int cmd_idle(int argc, char** argv) {
  CLI::App app{
      "Has every GPU of this node been idle (no process, under 5% utilization) for DURATION? "
      "Asks the node's agent. Exit 0 idle, 1 busy or held by a process, 3 unknown "
      "(agent unreachable, history shorter than DURATION, a GPU not readable)",
      "idle"};
  std::string agent_url = "http://127.0.0.1:9835";
  std::string for_text;
  bool json = false;
  app.add_option("--agent", agent_url,
                 "the agent to ask (http://HOST:PORT or HOST:PORT; default 127.0.0.1:9835)");
  app.add_option("--for", for_text, "how long every GPU must have been idle (90s, 30m, 2h)")->required();
  app.add_flag("--json", json,
               "the agent's answer as JSON (verdict, idle since, per GPU state, idle dollars)");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  const auto for_ms = util::parse_duration_ms(for_text);
  if (!for_ms || *for_ms <= 0)
    return fail("idle",
                make_error(ErrorKind::usage, "--for '" + for_text + "': " +
                                                 (for_ms ? std::string("the duration must be positive")
                                                         : for_ms.error().message)));
  auto answer = agent::ask_idle(agent_url, *for_ms, 5'000);
  if (!answer) {
    // Unknown is never idle: a scheduler reading only the exit code keeps the node.
    std::fprintf(stderr, "gpumeter idle: unknown: %s\n", answer.error().message.c_str());
    if (json) {
      agent::IdleAnswer unknown;
      unknown.verdict = agent::IdleState::unknown;
      unknown.reason = answer.error().message;
      unknown.for_ms = *for_ms;
      std::fputs(agent::idle_answer_json(unknown).c_str(), stdout);
    }
    return agent::idle_exit_code(agent::IdleState::unknown);
  }
  std::fputs((json ? agent::idle_answer_json(*answer) : report::render_idle_text(*answer)).c_str(), stdout);
  return agent::idle_exit_code(answer->verdict);
}

}  // namespace gm::cli
