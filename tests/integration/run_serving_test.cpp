// `gpumeter run --inference-endpoint` wrapping a served model: a real /usr/bin/python3 http.server process
// (tests/support/standin_served_job.py, a stand-in for vLLM, which needs a GPU) serving the vLLM V1
// exposition with counters that advance over time, under the real gpumeter binary on a fake-NVML H100 whose
// process is `python3` (issue 13).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "support/support.h"

namespace gm {
namespace {

using test::run_gpumeter;
using test::TempDir;

constexpr const char* kPython = "/usr/bin/python3";

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

/// Generated-token totals (both models) of every body the stand-in served, in order.
std::vector<double> served_generated(const std::string& log) {
  std::vector<double> out;
  std::istringstream in(test::read_file(log));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) {
      auto j = nlohmann::json::parse(line);
      out.push_back(j["llama_gen"].get<double>() + j["lora_gen"].get<double>());
    }
  return out;
}

class RunServingStandInIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(test::fake_nvml_library())) << "fake NVML library not built";
  }
  std::map<std::string, std::string> env() {
    auto e = test::fake_env(dir_.write("scenario.json", test::one_gpu_scenario("python3", 90)), dir_.path());
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    return e;
  }
  std::string job() { return test::source_dir() + "/tests/support/standin_served_job.py"; }
  TempDir dir_;
};

void expect_ratios_exact(const nlohmann::json& report) {
  const nlohmann::json& s = report["serving"];
  const double cost = report["cost_usd"].get<double>();
  const double gen = s["generated_tokens"].get<double>();
  const double prompt = s["prompt_tokens"].get<double>();
  const double req = s["requests"].get<double>();
  ASSERT_GT(gen, 0);
  ASSERT_GT(cost, 0);
  EXPECT_DOUBLE_EQ(s["usd_per_1m_generated_tokens"].get<double>(), cost / gen * 1e6);
  EXPECT_DOUBLE_EQ(s["usd_per_1m_prompt_tokens"].get<double>(), cost / prompt * 1e6);
  EXPECT_DOUBLE_EQ(s["usd_per_1m_tokens"].get<double>(), cost / (prompt + gen) * 1e6);
  EXPECT_DOUBLE_EQ(s["usd_per_1k_requests"].get<double>(), cost / req * 1e3);
  const double wall = report["wall_s"].get<double>();
  EXPECT_DOUBLE_EQ(s["generated_tokens_per_s"].get<double>(), gen / wall);
  const double peak = s["peak_generated_tokens_per_s"].get<double>();
  EXPECT_GE(peak, s["generated_tokens_per_s"].get<double>());
  EXPECT_DOUBLE_EQ(s["usd_per_1m_generated_tokens_at_peak"].get<double>(), cost / wall / peak * 1e6);
  EXPECT_LT(s["usd_per_1m_generated_tokens_at_peak"].get<double>(),
            s["usd_per_1m_generated_tokens"].get<double>());
}

TEST_F(RunServingStandInIntegrationTest, AutoDiscoveredVllmStandInGivesCostPerTokenInStatusReportAndLedger) {
  const std::string log = dir_.path() + "/served.jsonl";
  auto r =
      run_gpumeter({"run", "--price", "3.6", "--status-every", "1s", "--json-report", dir_.path() + "/r.json",
                    "--inference-endpoint", "auto", "--", kPython, job(), "0", "7", log},
                   env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("/1M tok"), std::string::npos) << "live $ per 1M tokens in the status line\n" << r.err;
  EXPECT_NE(r.err.find("/1k req"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("$ / 1M gen tok"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("at saturation"), std::string::npos) << r.err;
  const auto report = nlohmann::json::parse(test::read_file(dir_.path() + "/r.json"));
  const nlohmann::json& s = report["serving"];
  ASSERT_TRUE(s.is_object()) << report.dump(2);
  EXPECT_EQ(s["engine"], "vllm");
  EXPECT_EQ(s["models"], nlohmann::json({"standin-llama", "standin-lora"}));
  // The counters recorded are exactly one of the bodies the server served (counted from zero).
  const auto served = served_generated(log);
  ASSERT_GE(served.size(), 4u);
  EXPECT_NE(std::find(served.begin(), served.end(), s["generated_tokens"].get<double>()), served.end())
      << s.dump(2);
  expect_ratios_exact(report);

  // The ledger keeps them: `report --json` shows the same serving figures.
  auto rep = run_gpumeter({"report", "--json", "last"}, env());
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const auto stored = nlohmann::json::parse(rep.out);
  EXPECT_EQ(stored["serving"], s) << rep.out;
  auto text = run_gpumeter({"report", "last"}, env());
  EXPECT_NE(text.out.find("$ / 1k requests"), std::string::npos) << text.out;
}

TEST_F(RunServingStandInIntegrationTest, EngineRestartUnderRunNeitherLosesNorDoublesTokensAndCompareGates) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  const std::string log = dir_.path() + "/served.jsonl";
  // The engine restarts 4 s in: its counters drop to zero and its process start time changes.
  auto r = run_gpumeter({"run", "--price", "3.6", "--quiet", "--json-report", dir_.path() + "/a.json",
                         "--inference-endpoint", url, kPython, job(), std::to_string(port), "7", log, "4"},
                        env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto a = nlohmann::json::parse(test::read_file(dir_.path() + "/a.json"));
  ASSERT_TRUE(a["serving"].is_object()) << a.dump(2);
  const double gen = a["serving"]["generated_tokens"].get<double>();
  // Before the restart the server had served up to `before`; after it, up to `after` from zero.
  const auto served = served_generated(log);
  double before = 0, after = 0, last = 0;
  bool restarted = false;
  for (double v : served) {
    if (v < last) restarted = true;
    (restarted ? after : before) = v;
    last = v;
  }
  ASSERT_TRUE(restarted);
  EXPECT_GT(gen, before * 0.8) << "tokens served before the restart are kept";
  EXPECT_GT(gen, after) << "tokens served after the restart are added";
  EXPECT_LE(gen, before + after) << "nothing is counted twice";
  expect_ratios_exact(a);

  // A second served run, then the release gate on $ per 1M generated tokens.
  std::remove(log.c_str());
  r = run_gpumeter(
      {"run", "--price", "7.2", "--quiet", "--inference-endpoint", "auto", kPython, job(), "0", "6", log},
      env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto cmp = run_gpumeter({"compare", "--json", "1", "2", "--max-token-cost-increase", "500%"}, env());
  ASSERT_EQ(cmp.exit_code, 0) << cmp.out << cmp.err;
  const auto verdict = nlohmann::json::parse(cmp.out);
  bool has_row = false;
  for (const auto& row : verdict["rows"])
    if (row["name"] == "usd_per_1m_generated_tokens") {
      has_row = true;
      EXPECT_EQ(row["pass"], true);
      EXPECT_GT(row["b"].get<double>(), row["a"].get<double>()) << "twice the price, similar load";
    }
  EXPECT_TRUE(has_row) << cmp.out;
  cmp = run_gpumeter({"compare", "1", "2", "--max-token-cost-increase", "10%"}, env());
  EXPECT_EQ(cmp.exit_code, 1) << cmp.out << cmp.err;
  EXPECT_NE(cmp.out.find("FAIL"), std::string::npos) << cmp.out;
}

}  // namespace
}  // namespace gm

namespace gm {
namespace {

// `doctor --inference-discover` finds what the agent's discovery would: the vLLM stand-in is a GPU process
// (fake NVML lists every python3) listening on a port that answers /metrics as vLLM.
TEST_F(RunServingStandInIntegrationTest, DoctorInferenceDiscoverFindsTheEngineOnTheGpuProcessPort) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  const std::string script =
      std::string(kPython) + " '" + job() + "' " + std::to_string(port) + " 20 '" + dir_.path() +
      "/served.jsonl' >/dev/null 2>&1 & job=$!\n"
      "for i in $(seq 50); do curl -sf http://127.0.0.1:" +
      std::to_string(port) + "/metrics >/dev/null && break; sleep 0.1; done\n'" + test::gpumeter_binary() +
      "' doctor --inference-discover --pod-resources-socket ''\nrc=$?\nkill $job\nexit $rc\n";
  auto r = test::run_command({"/bin/sh", "-c", script}, env(), std::nullopt, 60);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(inference discovery  found vllm at http://127\.0\.0\.1:\d+/metrics)")))
      << r.out;
  EXPECT_NE(r.out.find("standin-llama"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gm
