// `gpumeter top`: plain text when stdout is not a terminal; the ncurses view in a real terminal (tmux).
#include <gtest/gtest.h>

#include <regex>

#include "integration/agent_fixture.h"

namespace gm::test {
namespace {

const char* kScenario =
    R"({"devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-top", "memory_total_mib": 81559,
  "energy_counter": true, "timeline": [{"t": 0, "util": 80, "mem_used_mib": 40000, "power_w": 500, "temp_c": 60,
  "processes": [{"pid": 1001, "sm_util": 60}, {"pid": 1003, "sm_util": 20}]}]}]})";

TEST(TopCliIntegrationTest, PlainTextWithoutTerminal) {
  GM_ASSERT_BUILT();
  TempDir dir;
  fake_node(dir.path(), 1000, "ml-team", "trainer-0", "4242");
  const std::string scen = dir.write("s.json", kScenario);
  std::vector<std::string> args{"top", "--interval", "300ms", "--price", "3.6", "--sort", "cost"};
  for (const auto& f : node_flags(dir.path())) args.push_back(f);
  const CmdResult r = run_gpumeter(args, fake_env(scen, dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("NVIDIA H100 80GB HBM3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("$3.60/h"), std::string::npos);
  const auto pod = r.out.find("ml-team/trainer-0");
  const auto job = r.out.find("4242");
  ASSERT_NE(pod, std::string::npos);
  ASSERT_NE(job, std::string::npos);
  EXPECT_LT(pod, job);  // sorted by cost: the pod has 3x the job's SM share
  EXPECT_EQ(r.out.find("TOPSECRET"), std::string::npos);
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);  // no terminal escapes in plain output
  EXPECT_NE(r.out.find("HISTORY (last 40 intervals"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0   util "), std::string::npos) << r.out;
}

TEST(TopCliIntegrationTest, OwnersHoldingIdleGpusGetAFindingWithTheirRate) {
  GM_ASSERT_BUILT();
  // GPU 0: the pod keeps it 80 % busy (no finding). GPU 1: Slurm job 4242 holds it at 0 % utilization, the
  // whole $3.60/h idle: idle_gpus_held at $2,628/month.
  const char* scenario = R"({"devices": [
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-busy", "memory_total_mib": 81559, "timeline": [{"t": 0,
     "util": 80, "mem_used_mib": 40000, "power_w": 500, "processes": [{"pid": 1001, "sm_util": 80}]}]},
    {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-idle", "memory_total_mib": 81559, "timeline": [{"t": 0,
     "util": 0, "mem_used_mib": 30000, "power_w": 90, "processes": [{"pid": 1003, "sm_util": 0}]}]}]})";
  TempDir dir;
  fake_node(dir.path(), 1000, "ml-team", "trainer-0", "4242");
  const std::string scen = dir.write("s.json", scenario);
  std::vector<std::string> args{"top", "--interval", "300ms", "--price", "3.6"};
  for (const auto& f : node_flags(dir.path())) args.push_back(f);
  const CmdResult r = run_gpumeter(args, fake_env(scen, dir.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto at = r.out.find("FINDINGS (since top started)");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string findings = r.out.substr(at);
  EXPECT_NE(findings.find("[high] idle_gpus_held 4242: holds GPU 1 that stayed idle for 100%"),
            std::string::npos)
      << findings;
  // $3.60/h × 730 h, give or take the rounding of one short interval's cost to the micro-dollar.
  EXPECT_TRUE(std::regex_search(findings, std::regex(R"(\$2,6[0-3][0-9]\.[0-9]{2}/month at this rate)")))
      << findings;
  EXPECT_NE(findings.find("-> stop the process or release its GPUs"), std::string::npos) << findings;
  EXPECT_EQ(findings.find("trainer-0"), std::string::npos) << findings;  // the busy pod has none
  // The GPU table's IDLE HELD column: GPU 1's interval held idle by 4242 costs; busy GPU 0's does not.
  ASSERT_NE(r.out.find("IDLE HELD"), std::string::npos) << r.out;
  auto last_usd = [&](const std::string& row_start) {
    const auto pos = r.out.find("\n" + row_start);
    if (pos == std::string::npos) return -1.0;
    const std::string line = r.out.substr(pos + 1, r.out.find('\n', pos + 1) - pos - 1);
    const std::string cell = line.substr(line.rfind(' ') + 1);
    return cell.rfind('$', 0) == 0 ? std::stod(cell.substr(1)) : -1.0;
  };
  EXPECT_GT(last_usd("1   NVIDIA"), 0) << r.out;
  EXPECT_EQ(last_usd("0   NVIDIA"), 0) << r.out;
}

TEST(TopCliIntegrationTest, CursesViewInTmux) {
  GM_ASSERT_BUILT();
  ASSERT_EQ(run_command({"sh", "-c", "command -v tmux"}).exit_code, 0)
      << "tmux missing (scripts/setup.sh installs it)";
  TempDir dir;
  fake_node(dir.path(), 1000, "ml-team", "trainer-0", "4242");
  const std::string scen = dir.write("s.json", kScenario);
  std::string cmd = "env";
  for (const auto& [k, v] : fake_env(scen, dir.path())) cmd += " " + k + "='" + v + "'";
  cmd += " TERM=xterm " + gpumeter_binary() + " top --interval 200ms --price 3.6";
  for (const auto& f : node_flags(dir.path())) cmd += " '" + f + "'";
  cmd += "; echo EXITED=$? > " + dir.path() + "/exit";
  const std::string sock = "gm-top-" + std::to_string(getpid());
  const CmdResult start =
      run_command({"tmux", "-L", sock, "-f", "/dev/null", "new-session", "-d", "-x", "140", "-y", "30", cmd});
  ASSERT_EQ(start.exit_code, 0) << start.err;
  std::string screen;
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    screen = run_command({"tmux", "-L", sock, "capture-pane", "-p"}).out;
    if (screen.find("ml-team/trainer-0") != std::string::npos && screen.find("4242") != std::string::npos)
      break;
  }
  EXPECT_NE(screen.find("NVIDIA H100 80GB HBM3"), std::string::npos) << screen;
  EXPECT_NE(screen.find("ml-team/trainer-0"), std::string::npos) << screen;
  EXPECT_NE(screen.find("$3.60/h"), std::string::npos) << screen;
  EXPECT_NE(screen.find("[q]uit"), std::string::npos) << screen;
  // A few seconds of history: one sparkline character per interval, the device busy all along.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  screen = run_command({"tmux", "-L", sock, "capture-pane", "-p"}).out;
  EXPECT_TRUE(std::regex_search(screen, std::regex(R"(0   util [^ ]{5,})"))) << screen;
  EXPECT_TRUE(std::regex_search(screen, std::regex(R"(\$/h used [^ ]{4,})"))) << screen;
  // Sort by owner name: the Slurm job "4242" comes before "ml-team/trainer-0".
  run_command({"tmux", "-L", sock, "send-keys", "o"});
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  screen = run_command({"tmux", "-L", sock, "capture-pane", "-p"}).out;
  EXPECT_NE(screen.find("sorted by owner"), std::string::npos) << screen;
  EXPECT_LT(screen.find("4242 "), screen.find("ml-team/trainer-0")) << screen;
  run_command({"tmux", "-L", sock, "send-keys", "q"});
  std::string exit_text;
  for (int i = 0; i < 50 && exit_text.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    exit_text = read_file(dir.path() + "/exit");
  }
  EXPECT_EQ(exit_text, "EXITED=0\n");
  run_command({"tmux", "-L", sock, "kill-server"});
}

}  // namespace
}  // namespace gm::test
