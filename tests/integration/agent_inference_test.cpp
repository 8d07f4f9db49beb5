// `gpumeter agent --inference-endpoint` end to end: the real binary on a fake-NVML GPU whose process is a
// stand-in serving engine (a real HTTP server on loopback speaking vLLM's exposition; vLLM itself needs a
// GPU). The agent finds the engine's owner from the process listening on the endpoint's port, joins the
// owner's measured cost with the tokens served, and its output passes promtool.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "integration/agent_fixture.h"
#include "serving/serving.h"

namespace gm::test {
namespace {

// Sum of the samples of `name` whose labels include every pair in `match`.
double sum_of(const serving::Exposition& e, const std::string& name,
              const std::map<std::string, std::string>& match) {
  double total = 0;
  bool any = false;
  for (const auto& s : e.samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match) ok = ok && s.label(k) && *s.label(k) == v;
    if (ok) total += s.value, any = true;
  }
  return any ? total : std::nan("");
}

class AgentInferenceIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GM_ASSERT_BUILT();
    // The engine's process gets a name of its own (comm comes from the executable's link name), so the
    // fake NVML puts exactly this process on the GPU.
    comm_ = "gmvllm" + std::to_string(getpid() % 100000);
    const std::string link = dir_.path() + "/" + comm_;
    std::filesystem::create_symlink("/usr/bin/python3", link);
    engine_ = std::make_unique<Background>(
        std::vector<std::string>{link, source_dir() + "/tests/support/standin_engine.py",
                                 "standin/llama-3-8b"},
        std::map<std::string, std::string>{}, dir_.path(), "engine");
    for (int i = 0; i < 200 && engine_port_ == 0; ++i) {
      const std::string out = engine_->stdout_text();
      if (auto p = out.find("port "); p != std::string::npos && out.find('\n', p) != std::string::npos)
        engine_port_ = std::stoi(out.substr(p + 5));
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_GT(engine_port_, 0) << engine_->stderr_text();
  }
  std::string scenario() const {
    return R"({"driver_version": "580.95.05", "devices": [
      {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-infer-0", "pci_bus_id": "00000000:18:00.0",
       "memory_total_mib": 81559, "power_limit_w": 700, "energy_counter": true,
       "timeline": [{"t": 0, "util": 80, "mem_used_mib": 60000, "power_w": 500, "temp_c": 60,
                     "processes": [{"comm": ")" +
           comm_ + R"(", "mem_mib": 60000, "sm_util": 80}]}]}]})";
  }
  TempDir dir_;
  std::string comm_;
  std::unique_ptr<Background> engine_;
  int engine_port_ = 0;
};

TEST_F(AgentInferenceIntegrationTest, VllmStandInOnFakeGpuCostPerMillionTokensIsOwnerCostOverTokens) {
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(engine_port_) + "/metrics";
  int port = 0;
  auto agent = start_agent(dir_.write("scenario.json", scenario()), dir_.path(),
                           {"--price", "3.6", "--interval", "500ms", "--inference-endpoint", endpoint}, port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  // Wait until the endpoint is linked to its owner and has been charged. (A scrape may take half an interval:
  // 250 ms leaves the stand-in engine room on a loaded machine, where 100 ms at 200 ms intervals did not.)
  serving::Exposition a;
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const CmdResult m = curl(url);
    ASSERT_EQ(m.exit_code, 0) << m.err;
    auto parsed = serving::parse_exposition(m.out);
    ASSERT_TRUE(parsed) << parsed.error().message;
    a = *parsed;
    if (sum_of(a, "gpumeter_inference_cost_usd_total", {}) > 0) break;
  }
  ASSERT_EQ(sum_of(a, "gpumeter_inference_endpoint_up", {{"endpoint", endpoint}}), 1) << agent->stderr_text();
  ASSERT_EQ(sum_of(a, "gpumeter_inference_endpoint_linked", {{"endpoint", endpoint}}), 1);
  std::string owner;
  for (const auto& s : a.samples)
    if (s.name == "gpumeter_inference_cost_usd_total") owner = *s.label("owner");
  ASSERT_FALSE(owner.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  const CmdResult mb = curl(url);
  ASSERT_EQ(mb.exit_code, 0);
  const auto b = *serving::parse_exposition(mb.out);

  const std::map<std::string, std::string> model{{"owner", owner}, {"model", "standin/llama-3-8b"}};
  auto gen = model, prompt = model, cached = model;
  gen["kind"] = "generated", prompt["kind"] = "prompt", cached["kind"] = "cached";
  // The owner's measured GPU cost over the same intervals is what the model was charged (one model, one
  // owner).
  const double owner_cost_a = sum_of(a, "gpumeter_owner_cost_usd_total", {{"owner", owner}});
  const double owner_cost_b = sum_of(b, "gpumeter_owner_cost_usd_total", {{"owner", owner}});
  const double cost_a = sum_of(a, "gpumeter_inference_cost_usd_total", model);
  const double cost_b = sum_of(b, "gpumeter_inference_cost_usd_total", model);
  EXPECT_GT(owner_cost_b - owner_cost_a, 0.0010);  // 2 s at 3.6 $/h, all of the GPU (at least 1 s of it)
  EXPECT_NEAR(cost_b - cost_a, owner_cost_b - owner_cost_a, 2e-6) << mb.out;
  EXPECT_LE(cost_b,
            owner_cost_b + 1e-9);  // intervals before the engine's baseline are the owner's, not the model's
  // Counters advance by 100 prompt / 40 generated / 25 cached tokens and 2 requests per scrape of the engine.
  const double g = sum_of(b, "gpumeter_inference_tokens_total", gen);
  const double p = sum_of(b, "gpumeter_inference_tokens_total", prompt);
  const double r = sum_of(b, "gpumeter_inference_requests_total", model);
  EXPECT_GT(g, 0);
  EXPECT_DOUBLE_EQ(p, g * 2.5);
  EXPECT_DOUBLE_EQ(sum_of(b, "gpumeter_inference_tokens_total", cached), g * 25 / 40);
  EXPECT_DOUBLE_EQ(r, g / 20);
  // The live figures (window 60 s, longer than this test): cost ÷ tokens × 1e6 and cost ÷ requests × 1e3.
  auto gen_kind = model, total_kind = model;
  gen_kind["kind"] = "generated", total_kind["kind"] = "total";
  EXPECT_NEAR(sum_of(b, "gpumeter_inference_usd_per_1m_tokens", gen_kind), cost_b / g * 1e6,
              1e-9 * cost_b / g * 1e6);
  EXPECT_NEAR(sum_of(b, "gpumeter_inference_usd_per_1m_tokens", total_kind), cost_b / (g + p) * 1e6,
              1e-9 * cost_b / (g + p) * 1e6);
  EXPECT_NEAR(sum_of(b, "gpumeter_inference_usd_per_1k_requests", model), cost_b / r * 1e3,
              1e-9 * cost_b / r * 1e3);
  EXPECT_EQ(sum_of(b, "gpumeter_inference_scrape_errors_total", {{"endpoint", endpoint}}), 0);
  // Real promtool accepts the exposition with the new series.
  const std::string expo = dir_.write("expo.txt", mb.out);
  const CmdResult pt = run_command({"sh", "-c", "promtool check metrics < " + expo});
  EXPECT_EQ(pt.exit_code, 0) << pt.out << pt.err;
  EXPECT_EQ(agent->terminate(), 0);
  // doctor checks the endpoint with one scrape.
  const CmdResult doc = run_gpumeter({"doctor", "--inference-endpoint", endpoint},
                                     fake_env(dir_.path() + "/scenario.json", dir_.path()));
  EXPECT_NE(doc.out.find("inference endpoint  " + endpoint + ": vllm, 1 model(s): standin/llama-3-8b"),
            std::string::npos)
      << doc.out << doc.err;
}

// No --inference-endpoint: --inference-discover finds the port the GPU process listens on in /proc, probes it
// once, recognises vLLM's exposition and charges the process's owner.
TEST_F(AgentInferenceIntegrationTest, DiscoveredListeningPortOfGpuProcessIsScrapedWithoutTheFlag) {
  int port = 0;
  auto agent = start_agent(dir_.write("scenario.json", scenario()), dir_.path(),
                           {"--price", "3.6", "--interval", "200ms", "--inference-discover"}, port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(engine_port_) + "/metrics";
  serving::Exposition e;
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const CmdResult m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
    ASSERT_EQ(m.exit_code, 0) << m.err;
    e = *serving::parse_exposition(m.out);
    if (sum_of(e, "gpumeter_inference_tokens_total", {{"kind", "generated"}}) > 0) break;
  }
  EXPECT_EQ(sum_of(e, "gpumeter_inference_endpoint_up", {{"endpoint", endpoint}}), 1) << agent->stderr_text();
  EXPECT_EQ(sum_of(e, "gpumeter_inference_endpoint_linked", {{"endpoint", endpoint}}), 1);
  EXPECT_GT(
      sum_of(e, "gpumeter_inference_tokens_total", {{"model", "standin/llama-3-8b"}, {"kind", "generated"}}),
      0);
  EXPECT_EQ(agent->terminate(), 0);
}

TEST_F(AgentInferenceIntegrationTest, DownEndpointIsCountedAndTheAgentKeepsItsInterval) {
  int port = 0;
  auto agent = start_agent(dir_.write("scenario.json", scenario()), dir_.path(),
                           {"--price", "3.6", "--interval", "200ms", "--inference-endpoint",
                            "http://127.0.0.1:1/metrics,owner=" + comm_},
                           port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  const CmdResult m = curl("http://127.0.0.1:" + std::to_string(port) + "/metrics");
  const auto e = *serving::parse_exposition(m.out);
  EXPECT_EQ(sum_of(e, "gpumeter_inference_endpoint_up", {}), 0);
  EXPECT_GE(sum_of(e, "gpumeter_inference_scrape_errors_total", {{"reason", "connect"}}), 3);
  EXPECT_GE(sum_of(e, "gpumeter_agent_collections_total", {}), 4);  // the interval held at 200 ms
  const CmdResult bad = run_gpumeter({"agent", "--inference-endpoint", "localhost:8000"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--inference-endpoint 'localhost:8000'"), std::string::npos) << bad.err;
  const CmdResult doc = run_gpumeter({"doctor", "--inference-endpoint", "http://127.0.0.1:1/metrics"},
                                     fake_env(dir_.path() + "/scenario.json", dir_.path()));
  EXPECT_NE(doc.out.find("inference endpoint  http://127.0.0.1:1/metrics: NOT USABLE: connect"),
            std::string::npos)
      << doc.out << doc.err;
  EXPECT_EQ(agent->terminate(), 0);
}

}  // namespace
}  // namespace gm::test
