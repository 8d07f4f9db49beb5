// Every command's --help: it works, lists its options, and groups them (Pricing, Budget guard, Output, ...).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "support/support.h"

namespace gm::test {
namespace {

std::vector<std::string> commands() {
  auto r = run_gpumeter({"--help"});
  std::vector<std::string> out;
  std::istringstream in(r.out);
  bool listing = false;
  for (std::string line; std::getline(in, line);) {
    if (line == "Commands:") {
      listing = true;
      continue;
    }
    if (listing && line.starts_with("  "))
      out.push_back(line.substr(2, line.find(' ', 2) - 2));
    else if (listing && !line.empty())
      break;
  }
  return out;
}

TEST(CliHelpIntegrationTest, EveryCommandsHelpListsItsOptionsInGroups) {
  const auto cmds = commands();
  ASSERT_GE(cmds.size(), 13u);
  for (const auto& c : cmds) {
    SCOPED_TRACE(c);
    auto r = run_gpumeter({c, "--help"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("Usage: " + c), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("-h,--help"), std::string::npos) << r.out;
  }
  const std::pair<const char*, std::vector<const char*>> expected[] = {
      {"run", {"Pricing:", "Budget guard:", "Ledger and notifications:", "Output:", "Serving engines:"}},
      {"trace", {"Pricing:", "Output:"}},
      {"agent", {"Pricing:", "Server:", "Owners on this node:", "Serving engines:"}},
      {"gpus", {"Pricing:", "Output:"}},
  };
  for (const auto& [cmd, groups] : expected) {
    auto r = run_gpumeter({cmd, "--help"});
    // The command's own help, before the help of its other modes (`trace diff`).
    const std::string own = r.out.substr(0, r.out.find("\n== "));
    for (const char* g : groups)
      EXPECT_NE(own.find(std::string("\n") + g + "\n"), std::string::npos) << cmd << " " << g << "\n"
                                                                           << r.out;
    // A grouped option is listed under its group, not twice.
    const auto price = own.find("--price");
    ASSERT_NE(price, std::string::npos) << cmd;
    EXPECT_EQ(own.find("--price", price + 1), std::string::npos) << cmd;
    EXPECT_LT(own.find("Pricing:"), price) << cmd;
  }
}

// A command with several modes shows every mode and its options in its --help: a newcomer never has to guess
// a mode's flag first to learn the mode's other flags.
TEST(CliHelpIntegrationTest, HelpShowsEveryModeAndOption) {
  const std::pair<std::vector<std::string>, std::vector<const char*>> expected[] = {
      {{"report", "--help"},
       {"Usage: report", "== Many runs ==", "--since", "--until", "--by", "--daily", "--date", "--target",
        "--html", "--scaling", "--top", "--csv", "--ledger", "== The fleet (Prometheus) ==", "--prometheus",
        "== One run as an HTML page =="}},
      {{"report", "-h"}, {"== Many runs ==", "--scaling", "--prometheus"}},
      {{"trace", "--help"},
       {"Usage: trace", "gpumeter trace diff", "--max-cost-increase", "--min-share", "--steps"}},
      {{"plan", "--help"},
       {"Usage: plan", "gpumeter plan tco", "--cloud-usd-per-gpu-hour", "--usd-per-kwh", "--model"}},
  };
  for (const auto& [args, needles] : expected) {
    SCOPED_TRACE(args[0] + " " + args[1]);
    auto r = run_gpumeter(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* n : needles) EXPECT_NE(r.out.find(n), std::string::npos) << n << "\n" << r.out;
  }
  // A mode's own --help still shows that mode alone.
  auto multi = run_gpumeter({"report", "--since", "1d", "--help"});
  ASSERT_EQ(multi.exit_code, 0) << multi.err;
  EXPECT_NE(multi.out.find("--scaling"), std::string::npos);
  EXPECT_EQ(multi.out.find("--prometheus"), std::string::npos) << multi.out;
  auto diff = run_gpumeter({"trace", "diff", "--help"});
  ASSERT_EQ(diff.exit_code, 0) << diff.err;
  EXPECT_EQ(diff.out.find("== "), std::string::npos) << diff.out;
}

}  // namespace
}  // namespace gm::test
