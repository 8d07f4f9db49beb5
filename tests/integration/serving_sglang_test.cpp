// An SGLang server started without --enable-metrics serves no /metrics: `doctor --inference-endpoint` and the
// discovery of `run --inference-endpoint auto` say so and name the flag (the real binary; the server is a
// loopback stand-in answering /get_server_info as SGLang's http_server.py does, since SGLang needs a GPU).
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "support/support.h"

namespace gm::test {
namespace {

constexpr const char* kServerInfo =
    R"({"model_path": "Qwen/Qwen2.5-7B-Instruct", "tp_size": 1, "enable_metrics": false, "version": "0.4.6"})";

// The job of `gpumeter run`: an HTTP server like SGLang's without --enable-metrics, for argv[1] seconds.
constexpr const char* kJob = R"PY(
import http.server, json, sys, threading, time
INFO = json.dumps({"model_path": "Qwen/Qwen2.5-7B-Instruct", "enable_metrics": False}).encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/get_server_info":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(INFO)))
        self.end_headers()
        self.wfile.write(INFO)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
time.sleep(float(sys.argv[1]))
)PY";

class ServingSglangIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(fake_nvml_library())) << "fake NVML library not built";
  }
  std::map<std::string, std::string> env() {
    auto e = fake_env(dir_.write("scenario.json", one_gpu_scenario("python3", 90)), dir_.path());
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    return e;
  }
  TempDir dir_;
};

TEST_F(ServingSglangIntegrationTest, DoctorNamesTheFlagForAnSglangEndpointWithoutMetrics) {
  httplib::Server server;
  server.Get("/get_server_info", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kServerInfo, "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread thread([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  const CmdResult doc =
      run_gpumeter({"doctor", "--preemption", "off", "--inference-endpoint", endpoint}, env());
  server.stop();
  thread.join();
  EXPECT_NE(doc.out.find("inference endpoint  " + endpoint + ": NOT USABLE: http: HTTP status 404\n"),
            std::string::npos)
      << doc.out;
  EXPECT_NE(doc.out.find("inference endpoint  " + endpoint + ": http://127.0.0.1:" + std::to_string(port) +
                         " is an SGLang server (Qwen/Qwen2.5-7B-Instruct) started without --enable-metrics: "
                         "it serves no /metrics; restart it with --enable-metrics\n"),
            std::string::npos)
      << doc.out;
}

TEST_F(ServingSglangIntegrationTest, RunDiscoveryNamesTheFlagWhenTheJobIsSglangWithoutMetrics) {
  const std::string job = dir_.write("sglang_without_metrics.py", kJob);
  const CmdResult r = run_gpumeter(
      {"run", "--price", "3.6", "--inference-endpoint", "auto", "--", "/usr/bin/python3", job, "4"}, env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("no engine metrics were read from the server"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is an SGLang server (Qwen/Qwen2.5-7B-Instruct) started without --enable-metrics"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace gm::test
