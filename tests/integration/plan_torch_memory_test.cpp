// `gpumeter plan`'s memory terms against real PyTorch (Debian python3-torch, CPU): weights, gradients and
// AdamW states by their tensor sizes, activations as the tensors autograd saves for backward
// (tests/torch/measure_memory.py, docs/accuracy.md). Needs /usr/bin/python3 with torch (scripts/setup.sh).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/support.h"

namespace {

using gm::test::run_command;
using gm::test::run_gpumeter;
using nlohmann::json;

TEST(PlanTorchMemoryIntegrationTest, EachTermWithinTenPercentOfRealPyTorchOnCpu) {
  const std::string script = gm::test::source_dir() + "/tests/torch/measure_memory.py";
  auto measured = run_command({"/usr/bin/python3", script, "--set", "test"}, {}, std::nullopt, 560);
  ASSERT_FALSE(measured.timed_out);
  ASSERT_EQ(measured.exit_code, 0)
      << "measure_memory.py failed (is python3-torch installed? scripts/setup.sh "
         "installs it):\n"
      << measured.err;
  std::istringstream lines(measured.out);
  std::set<std::string> styles, precisions;
  int configs = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const json m = json::parse(line);
    ++configs;
    styles.insert(m["style"].get<std::string>());
    precisions.insert(m["precision"].get<std::string>());
    const std::string what = m["model"].get<std::string>() + " seq " + std::to_string(m["seq"].get<int>()) +
                             " batch " + std::to_string(m["batch"].get<int>()) + " " +
                             m["precision"].get<std::string>();
    std::vector<std::string> args = {"plan"};
    for (const auto& a : m["plan_args"]) args.push_back(a.get<std::string>());
    for (const char* a : {"--gpus", "1", "--json"}) args.emplace_back(a);
    auto r = run_gpumeter(args);
    ASSERT_EQ(r.exit_code, 0) << what << ": " << r.err;
    const json plan = json::parse(r.out);
    ASSERT_EQ(plan["parallel"]["gpus"].get<int>(), 1) << what;
    EXPECT_NEAR(plan["model"]["params"].get<double>(), m["params"].get<double>(), 1.0) << what;
    for (const char* term : {"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes"}) {
      const double real = m[term].get<double>();
      ASSERT_GT(real, 1e6) << what << " " << term;
      const double planned = plan["memory"][term].get<double>();
      EXPECT_NEAR(planned / real, 1.0, 0.10)
          << what << ": " << term << " planned " << planned << " measured " << real
          << " (by region: " << m["activations_by_region"].dump() << ")";
    }
  }
  EXPECT_EQ(configs, 4);
  EXPECT_EQ(styles, (std::set<std::string>{"gpt", "llama"}));
  EXPECT_EQ(precisions, (std::set<std::string>{"fp32", "bf16"}));
}

}  // namespace
