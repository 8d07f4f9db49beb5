// Malformed answers of outside services (issue 34): JSON of the wrong type at every level, nulls, numbers
// past any range, non-lists. The real binary against stand-ins on loopback: the agent keeps serving
// /metrics and counts each bad answer; run keeps metering its job; one-shot commands exit with a message.
// Never an abort (a JSON library exception reaching a thread was the bug).
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "integration/agent_fixture.h"

namespace gm::test {
namespace {

// A loopback HTTP server answering every GET with `answer(path, n)` (n: the answers given so far; "" is a
// 404).
class StandIn {
 public:
  using Answer = std::function<std::string(const std::string& path, int n)>;
  explicit StandIn(Answer answer) : answer_(std::move(answer)) {
    server_.Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
      const int n = served_.fetch_add(1);
      const std::string body = answer_(req.path, n);
      if (body.empty())
        res.status = 404;
      else
        res.set_content(body, "application/json");
    });
    server_.Put(".*", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("AQAEAFakeToken==", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~StandIn() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int served() const { return served_.load(); }

 private:
  Answer answer_;
  httplib::Server server_;
  std::atomic<int> served_{0};
  int port_ = 0;
  std::thread thread_;
};

// Kubelet /pods answers that are not usable PodLists, each of them: wrong types at every level of a pod,
// nulls, numbers beyond int64 and double, non-lists, truncated and deeply nested text.
std::vector<std::string> malformed_pod_lists() {
  const std::string running = R"("status": {"phase": "Running", "podIP": "10.1.0.5"})";
  return {
      R"({"items": [{"metadata": "vllm-0", )" + running + "}]}",  // the answer that aborted the agent
      R"({"items": [{"metadata": {"name": "a", "annotations": "prometheus.io/port=8000"}, )" + running +
          "}]}",
      R"({"items": [{"metadata": {"name": 7, "namespace": ["ml"]}, )" + running + "}]}",
      R"({"items": [{"metadata": {"name": "a", "annotations": {"prometheus.io/port": 8000}}, )" + running +
          "}]}",
      R"({"items": [{"metadata": {"name": "a"}, "status": "Running"}]})",
      R"({"items": [{"metadata": {"name": "a"}, "status": {"phase": true, "podIP": 167837957}}]})",
      R"({"items": [{"metadata": null, "status": null}, null, 1, "pod", [], true]})",
      R"({"items": [{"metadata": {"name": "a", "annotations": {"prometheus.io/port": 18446744073709551616}},
                     "status": {"phase": "Running", "podIP": -9223372036854775809}}]})",
      R"({"items": [{"metadata": {"name": "a", "annotations": {"prometheus.io/port": 1e308}}, )" + running +
          "}]}",
      R"({"items": [{"metadata": {"name": "a"}, "status": {"podIP": 1e999}}]})",  // beyond a double
      R"({"items": {"metadata": {"name": "a"}}})",
      R"({"items": null})",
      R"({"kind": "Status", "status": "Failure", "message": "Unauthorized", "code": 401})",
      "[]",
      "null",
      "\"PodList\"",
      "18446744073709551616",
      R"({"items": [{"metadata": {"name": "a")",
      std::string(100000, '[') + std::string(100000, ']'),
      "<html>502 Bad Gateway</html>",
  };
}

class AgentMalformedInputIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { GM_ASSERT_BUILT(); }
  std::string scenario() {
    return dir_.write("scenario.json", R"({"driver_version": "580.95.05", "devices": [
      {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-malformed-0", "memory_total_mib": 81559,
       "timeline": [{"t": 0, "util": 50, "mem_used_mib": 1000, "power_w": 300}]}]})");
  }
  TempDir dir_;
};

TEST_F(AgentMalformedInputIntegrationTest,
       MalformedKubeletPodListsFor20sAreCountedWhileMetricsKeepAnswering) {
  const auto lists = malformed_pod_lists();
  StandIn kubelet(
      [&](const std::string&, int n) { return lists[static_cast<std::size_t>(n) % lists.size()]; });
  int port = 0;
  auto agent = start_agent(scenario(), dir_.path(),
                           {"--price", "3.6", "--interval", "500ms", "--inference-discover",
                            "--kubelet-pods-url", kubelet.url() + "/pods", "--kubelet-pods-every", "1s"},
                           port);
  ASSERT_GT(port, 0) << agent->stderr_text();
  const std::string metrics_url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  double last_errors = 0, last_collections = 0;
  int scrapes = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    ASSERT_TRUE(agent->running()) << agent->stderr_text();
    const CmdResult m = curl(metrics_url);
    ASSERT_EQ(m.exit_code, 0) << m.err;
    const double errors = metric(m.out, "gpumeter_agent_kubelet_pods_errors_total ");
    const double collections = metric(m.out, "gpumeter_agent_collections_total ");
    ASSERT_FALSE(std::isnan(errors)) << m.out;
    EXPECT_GE(errors, last_errors);
    EXPECT_GT(collections, last_collections);  // metering goes on
    EXPECT_FALSE(std::isnan(metric(m.out, "gpumeter_gpu_cost_usd_total{")));
    last_errors = errors;
    last_collections = collections;
    ++scrapes;
  }
  EXPECT_GE(scrapes, 8);
  // Each answer served is one counted error (the last may still be in flight).
  const int served = kubelet.served();
  EXPECT_GE(served, 10) << "the kubelet is asked every second";
  const CmdResult m = curl(metrics_url);
  const double errors = metric(m.out, "gpumeter_agent_kubelet_pods_errors_total ");
  std::cout << "kubelet stand-in served " << served << " answers in 20 s; the agent counted " << errors
            << " errors over " << scrapes << " scrapes of /metrics\n";
  EXPECT_GE(errors, served - 1);
  EXPECT_LE(errors, served);
  // One clear message per bad answer, naming the URL and, for a pod of the wrong shape, the part.
  const std::string err = agent->stderr_text();
  EXPECT_NE(err.find(kubelet.url() + "/pods: items[0].metadata: expected an object, got a string; those pods "
                                     "are skipped"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("items[0].metadata.annotations.prometheus.io/port: expected a string, got a number"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find(kubelet.url() + "/pods: not a kubelet PodList: items: expected an array, got an object"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("invalid JSON at byte"), std::string::npos) << err;
  EXPECT_EQ(sanitizer_report(err), "");
  EXPECT_EQ(agent->terminate(), 0) << err;
}

// An SGLang server's /get_server_info of the wrong shape: discovery notes nothing and carries on.
TEST_F(AgentMalformedInputIntegrationTest, ServingEngineServerInfoOfWrongTypesIsNoNoteAndNoCrash) {
  const std::vector<std::string> infos = {R"({"enable_metrics": "false", "model_path": 7})",
                                          R"({"enable_metrics": null})", R"(["enable_metrics", false])",
                                          R"({"enable_metrics": false, "model_path": {"a": 1}})"};
  for (const auto& info : infos) {
    StandIn engine([&](const std::string& path, int) { return path == "/get_server_info" ? info : ""; });
    const CmdResult doc =
        run_gpumeter({"doctor", "--preemption", "off", "--inference-endpoint", engine.url() + "/metrics"},
                     fake_env(scenario(), dir_.path()));
    EXPECT_LT(doc.exit_code, 128) << info << doc.err;
    EXPECT_NE(
        doc.out.find("inference endpoint  " + engine.url() + "/metrics: NOT USABLE: http: HTTP status 404"),
        std::string::npos)
        << info << doc.out;
    // Only a real `false` says the server runs without metrics; the model name only when it is a string.
    const bool said = doc.out.find("started without --enable-metrics") != std::string::npos;
    EXPECT_EQ(said, info.rfind(R"({"enable_metrics": false)", 0) == 0) << info << doc.out;
    if (said) {
      EXPECT_NE(doc.out.find("is an SGLang server started without"), std::string::npos) << doc.out;
    }
  }
}

// Metadata services answering JSON of the wrong types: the job runs to its own end with its own exit code,
// and gpumeter says the service gave no usable answer.
TEST_F(AgentMalformedInputIntegrationTest, MetadataAnswersOfWrongTypesNeverHarmTheRun) {
  const std::map<std::string, std::string> answers = {
      {"aws", R"({"action": 5, "time": ["2026-01-01T00:00:00Z"]})"},
      {"azure",
       R"({"DocumentIncarnation": 1, "Events": [{"EventId": 3, "EventType": null, "Resources": 1}]})"},
  };
  const std::string job = dir_.write("job.py",
                                     "import sys, time\ntime.sleep(1.0)\nprint('job output intact')\n"
                                     "sys.exit(3)\n");
  for (const auto& [provider, body] : answers) {
    StandIn service([answer = body](const std::string&, int) { return answer; });
    auto r = run_gpumeter({"run", "--price", "3600", "--preemption", provider, "--metadata-url",
                           service.url(), "--preemption-poll", "200ms", "/usr/bin/python3", job},
                          fake_env(scenario(), dir_.path()), std::nullopt, 60);
    EXPECT_EQ(r.exit_code, 3) << provider << ": " << r.err;
    EXPECT_NE(r.out.find("job output intact"), std::string::npos) << provider;
    EXPECT_NE(r.err.find("metadata service did not give a usable answer"), std::string::npos)
        << provider << ": " << r.err;
    EXPECT_GE(service.served(), 2) << provider;
  }
}

// A Prometheus API answering JSON of the wrong types: `report --prometheus` exits with the "unavailable"
// code and a message naming the part of the answer.
TEST_F(AgentMalformedInputIntegrationTest, PrometheusAnswersOfWrongTypesAreErrorsNamingThePart) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"status": "success", "data": []})", "data: expected an object, got an array"},
      {R"({"status": "success", "data": {"resultType": "vector", "result": {"a": 1}}})",
       "data.result: expected an array, got an object"},
      {R"({"status": "success", "data": {"resultType": "vector", "result": [{"metric": [], "value": [1, "2"]}]}})",
       "data.result[0].metric: expected an object, got an array"},
      {R"({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, 2]}]}})",
       "data.result[0].value[1]: expected a string, got a number"},
      {R"({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": null}]}})",
       "data.result[0].value[1]: expected a string, got missing"},
      {R"({"status": 1e999})", "not a Prometheus API answer"},
      {R"({"status": ["success"]})", "failed: ?"},
  };
  for (const auto& [body, needle] : cases) {
    StandIn prometheus([answer = body](const std::string&, int) { return answer; });
    auto r = run_gpumeter({"report", "--since", "1h", "--prometheus", prometheus.url()},
                          fake_env(scenario(), dir_.path()));
    EXPECT_EQ(r.exit_code, 5) << body << ": " << r.err;
    EXPECT_NE(r.err.find("--prometheus " + prometheus.url()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << body << ": " << r.err;
  }
}

// A price API answering pages of the wrong types: a page without an Items array is an error naming the
// request and nothing is written; items of the wrong types are set aside and counted; a price past any
// range is refused with its text. Never an offer from a malformed item.
TEST_F(AgentMalformedInputIntegrationTest, PriceApiPagesOfWrongTypesAreSetAsideOrRefusedNeverOffers) {
  const std::map<std::string, std::string> env = {{"GPUMETER_DATA_DIR", dir_.path() + "/data"},
                                                  {"XDG_CONFIG_HOME", dir_.path() + "/config"},
                                                  {"HOME", dir_.path()}};
  const std::string offers = dir_.path() + "/data/offers.csv";
  auto update = [&](const std::string& body) {
    StandIn api([&](const std::string&, int) { return body; });
    auto r = run_gpumeter(
        {"prices", "update", "--provider", "azure", "--region", "eastus", "--endpoint", api.url()}, env,
        std::nullopt, 60);
    r.err += "\n(endpoint " + api.url() + ")";
    return r;
  };
  auto r = update(R"({"Items": "none", "NextPageLink": 7})");
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_NE(r.err.find("no Items array: not an Azure Retail Prices page"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(offers));
  r = update(
      R"({"Items": [null, 1, {"type": 5, "armSkuName": [], "retailPrice": {"x": 1}}], "NextPageLink": 7})");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("3 price rows read, 3 set aside"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Wrote 0 offers"), std::string::npos) << r.out;
  r = update(R"({"Items": [{"type": "Consumption", "armSkuName": "Standard_NC40ads_H100_v5",
      "armRegionName": "eastus", "skuName": "NC40ads H100 v5", "productName": "NCadsH100v5 Series",
      "unitOfMeasure": "1 Hour", "currencyCode": "USD", "serviceName": "Virtual Machines",
      "retailPrice": 18446744073709551616}]})");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("on-demand price '1.8446744073709552e+19' refused: not a number"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Wrote 0 offers"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gm::test
