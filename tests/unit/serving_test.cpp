// The serving module: an SGLang server started without --enable-metrics (no /metrics; its
// /get_server_info says enable_metrics false) is named by discovery and by the endpoint check; the
// per-model split and the process split are one largest-remainder split (meter's split_micros).
#include "serving/serving.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <numeric>
#include <string>
#include <thread>

#include "meter/meter.h"

namespace gm::serving {
namespace {

// A loopback HTTP server answering /get_server_info with `server_info` (404 when empty) and /metrics with
// 404, as SGLang's http_server.py does without --enable-metrics.
class NoMetricsServer {
 public:
  explicit NoMetricsServer(std::string server_info) : info_(std::move(server_info)) {
    server_.Get("/get_server_info", [this](const httplib::Request&, httplib::Response& res) {
      if (info_.empty()) {
        res.status = 404;
        return;
      }
      res.set_content(info_, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~NoMetricsServer() {
    server_.stop();
    thread_.join();
  }
  std::uint16_t port() const { return static_cast<std::uint16_t>(port_); }
  InferenceEndpointSpec spec() const {
    return *parse_inference_endpoint("http://127.0.0.1:" + std::to_string(port_) + "/metrics");
  }

 private:
  std::string info_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

// The keys of SGLang's /get_server_info that matter here (server_args are flattened into the answer).
const char* kSglangInfo =
    R"({"model_path": "Qwen/Qwen2.5-7B-Instruct", "tp_size": 1, "enable_metrics": false, "version": "0.4.6"})";

TEST(ServingSglang, WithoutEnableMetricsTheServerIsNamedWithTheFlag) {
  NoMetricsServer sglang(kSglangInfo);
  const ScrapeOutcome scrape = scrape_endpoint(sglang.spec(), 2000);
  ASSERT_FALSE(scrape.reading);
  EXPECT_EQ(scrape.error, "http");
  const auto why = metrics_disabled_reason(sglang.spec(), 2000);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("SGLang"), std::string::npos) << *why;
  EXPECT_NE(why->find("Qwen/Qwen2.5-7B-Instruct"), std::string::npos) << *why;
  EXPECT_NE(why->find("--enable-metrics"), std::string::npos) << *why;
  EXPECT_NE(why->find("http://127.0.0.1:" + std::to_string(sglang.port())), std::string::npos) << *why;
}

TEST(ServingSglang, OtherServersThatServeNoMetricsAreNotMistakenForIt) {
  NoMetricsServer plain("");  // no /get_server_info at all
  EXPECT_FALSE(metrics_disabled_reason(plain.spec(), 2000));
  NoMetricsServer enabled(R"({"model_path": "m", "enable_metrics": true})");  // its /metrics fails otherwise
  EXPECT_FALSE(metrics_disabled_reason(enabled.spec(), 2000));
  NoMetricsServer garbage("not json");
  EXPECT_FALSE(metrics_disabled_reason(garbage.spec(), 2000));
}

TEST(ServingSglang, DiscoveryProbeSaysWhyAPortServesNoMetrics) {
  NoMetricsServer sglang(kSglangInfo);
  NoMetricsServer plain("");
  const ProbeResult probe = probe_engine_ports("127.0.0.1", {plain.port(), sglang.port()}, 2000);
  EXPECT_FALSE(probe.found);
  ASSERT_EQ(probe.notes.size(), 1u) << "only the SGLang server tells why";
  EXPECT_NE(probe.notes[0].find("--enable-metrics"), std::string::npos) << probe.notes[0];
}

TEST(ServingSplit, PerModelSplitAndProcessSplitAreOneLargestRemainderSplit) {
  // The per-model split rounds token counts to integer weights and then splits like the process split.
  const std::vector<double> tokens{3, 1, 0.4, 2.5};
  EXPECT_EQ(split_cost(1001, tokens), meter::split_micros(1001, {3, 1, 0, 3}));
  const auto s = meter::split_micros(1001, {3, 1});
  EXPECT_EQ(s[0] + s[1], 1001);
  EXPECT_EQ(s[0], 751) << "the larger remainder gets the last micro-dollar";
  EXPECT_EQ(meter::split_micros(10, {0, 0, 0}), (std::vector<MicroUsd>{4, 3, 3}))
      << "equal, earlier first on ties";
  EXPECT_TRUE(meter::split_micros(5, {}).empty());
  // attribute() splits a device interval with the same function: memory weights here.
  gpu::DeviceSample sample;
  sample.processes = {{1, 300, std::nullopt}, {2, 100, std::nullopt}, {3, 100, std::nullopt}};
  const meter::Attribution a = meter::attribute(1001, 0, sample);
  const auto expect = meter::split_micros(1001, {300, 100, 100});
  ASSERT_EQ(a.shares.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(a.shares[i].cost, expect[i]);
  EXPECT_EQ(std::accumulate(expect.begin(), expect.end(), MicroUsd{0}), 1001);
}

}  // namespace
}  // namespace gm::serving
