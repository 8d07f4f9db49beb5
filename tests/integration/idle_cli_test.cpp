// `gpumeter idle` against a real agent on the fake NVML (docs/agent.md "Idle"): exit 0 when every GPU has
// been idle for the duration, 1 when one was busy or held by a process within it, 3 when the agent cannot
// tell (history shorter than the duration) or does not answer; and the idle-held dollars beside the
// unallocated ones in the agent's metrics.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent_fixture.h"

namespace gm {
namespace {

using nlohmann::json;
using test::Background;

/// Asks until `gpumeter idle` exits `expected` with at least the duration's history behind its answer (the
/// agent needs a second or so of collections), at most 30 s.
test::CmdResult idle_until(int port, const std::string& for_text, int expected, double history_s) {
  const std::vector<std::string> args{"idle",  "--agent", "127.0.0.1:" + std::to_string(port),
                                      "--for", for_text,  "--json"};
  test::CmdResult r;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  do {
    r = test::run_gpumeter(args);
    if (r.exit_code == expected) {
      const json j = json::parse(r.out, nullptr, false);
      if (j.is_object() && j["history_s"].is_number() && j["history_s"].get<double>() >= history_s) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (std::chrono::steady_clock::now() < end);
  return r;
}

TEST(IdleIntegrationTest, IdleHeldBusyAndUnknownAnswerWithTheirExitCodes) {
  GM_ASSERT_BUILT();
  test::TempDir dir;
  // A process with a name of its own holds the GPU in the held scenario: a symlink's name is its comm.
  const std::string comm = "gmheld" + std::to_string(::getpid() % 100000);
  std::filesystem::create_symlink("/bin/sleep", dir.path() + "/" + comm);
  Background holder({dir.path() + "/" + comm, "120"}, {}, dir.path(), "holder");

  struct Case {
    const char* name;
    int util;
    std::string comm;
    int exit_code;
    const char* verdict;
  };
  const Case cases[] = {
      {"idle", 0, "", 0, "idle"}, {"held", 0, comm, 1, "idle_held"}, {"busy", 90, "", 1, "busy"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string home = dir.path() + "/" + c.name;
    std::filesystem::create_directories(home);
    const std::string scenario_path = home + "/scenario.json";
    test::write_text(scenario_path, test::one_gpu_scenario(c.comm, c.util));
    int port = 0;
    auto agent = test::start_agent(scenario_path, home, {"--price", "3.6", "--interval", "200ms"}, port);
    ASSERT_GT(port, 0) << agent->stderr_text();
    const auto r = idle_until(port, "1s", c.exit_code, 1.0);
    ASSERT_EQ(r.exit_code, c.exit_code) << r.out << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["verdict"], c.verdict) << j.dump(2);
    ASSERT_EQ(j["gpus"].size(), 1u);
    EXPECT_EQ(j["gpus"][0]["state_now"], c.verdict);
    EXPECT_DOUBLE_EQ(j["for_s"].get<double>(), 1.0);
    EXPECT_GE(j["history_s"].get<double>(), 1.0);
    if (std::string(c.verdict) == "idle") {
      EXPECT_TRUE(j["idle_since_unix_ms"].is_number());
      EXPECT_GT(j["idle_cost_usd"].get<double>(), 0);  // a second at $3.60/h: 1000 micro-dollars
      EXPECT_EQ(j["idle_held_cost_usd"].get<double>(), 0);
    }
    if (std::string(c.verdict) == "idle_held") {
      EXPECT_TRUE(j["idle_since_unix_ms"].is_null());
      EXPECT_GT(j["idle_held_cost_usd"].get<double>(), 0);
      EXPECT_GE(j["gpus"][0]["processes"].get<int>(), 1);
      // The same dollars as a counter, beside the unallocated one.
      const auto m = test::curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
      EXPECT_GT(test::metric(m.out, "gpumeter_gpu_idle_held_cost_usd_total{"), 0) << m.out;
      EXPECT_EQ(test::metric(m.out, "gpumeter_gpu_unallocated_cost_usd_total{"), 0);
    }
    if (std::string(c.verdict) == "busy") {
      EXPECT_GT(j["gpus"][0]["busy_s"].get<double>(), 0);
      const auto m = test::curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
      EXPECT_EQ(test::metric(m.out, "gpumeter_gpu_idle_held_cost_usd_total{"), 0) << m.out;
    }
    // The text answer says the same, with a line per GPU.
    const auto text =
        test::run_gpumeter({"idle", "--agent", "http://127.0.0.1:" + std::to_string(port), "--for", "1s"});
    EXPECT_EQ(text.exit_code, c.exit_code) << text.out << text.err;
    EXPECT_EQ(text.out.rfind(std::string(c.verdict) + ": ", 0), 0u) << text.out;
    EXPECT_NE(text.out.find("NVIDIA H100"), std::string::npos) << text.out;
    // Longer than the agent has seen: unknown (3), never idle.
    if (std::string(c.verdict) == "idle") {
      const auto longer =
          test::run_gpumeter({"idle", "--agent", "127.0.0.1:" + std::to_string(port), "--for", "1h"});
      EXPECT_EQ(longer.exit_code, 3) << longer.out << longer.err;
      EXPECT_NE(longer.out.find("unknown: the agent has seen the GPUs for"), std::string::npos) << longer.out;
    }
    std::printf("%s: exit %d, %s\n", c.name, r.exit_code, j["reason"].get<std::string>().c_str());
    std::fflush(stdout);  // before the next fork
  }

  // No agent: unknown (3), with the reason on stderr and, with --json, an answer a script can read.
  int free_port = 0;
  {
    // A port nothing listens on: one the agent bound and released.
    auto agent =
        test::start_agent(dir.path() + "/idle/scenario.json", dir.path() + "/idle", {}, free_port, "agent1");
  }
  ASSERT_GT(free_port, 0);
  const auto down = test::run_gpumeter(
      {"idle", "--agent", "127.0.0.1:" + std::to_string(free_port), "--for", "10m", "--json"});
  EXPECT_EQ(down.exit_code, 3) << down.out << down.err;
  EXPECT_NE(down.err.find("did not answer"), std::string::npos) << down.err;
  EXPECT_EQ(json::parse(down.out)["verdict"], "unknown");
  // Bad flags: usage (2).
  EXPECT_EQ(test::run_gpumeter({"idle", "--for", "soon"}).exit_code, 2);
  EXPECT_EQ(test::run_gpumeter({"idle"}).exit_code, 2);
  // The agent refuses a bad ?for= with a message.
  int port = 0;
  auto agent =
      test::start_agent(dir.path() + "/idle/scenario.json", dir.path() + "/idle", {}, port, "agent2");
  ASSERT_GT(port, 0);
  const auto bad =
      test::curl("http://127.0.0.1:" + std::to_string(port) + "/v1/idle?for=soon", {"-w", "%{http_code}"});
  EXPECT_NE(bad.out.find("400"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("for=soon"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace gm
