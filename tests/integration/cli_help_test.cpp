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
    for (const char* g : groups)
      EXPECT_NE(r.out.find(std::string("\n") + g + "\n"), std::string::npos) << cmd << " " << g << "\n"
                                                                             << r.out;
    // A grouped option is listed under its group, not twice.
    const auto price = r.out.find("--price");
    ASSERT_NE(price, std::string::npos) << cmd;
    EXPECT_EQ(r.out.find("--price", price + 1), std::string::npos) << cmd;
    EXPECT_LT(r.out.find("Pricing:"), price) << cmd;
  }
}

}  // namespace
}  // namespace gm::test
