// `gpumeter run --preemption` against stand-ins for the three metadata services on loopback (ephemeral
// ports), each built from its provider's documented format: AWS IMDSv2 (PUT /latest/api/token with
// X-aws-ec2-metadata-token-ttl-seconds, then GET /latest/meta-data/spot/instance-action with
// X-aws-ec2-metadata-token, 404 until a notice, {"action","time"}), GCP (GET
// /computeMetadata/v1/instance/preempted with Metadata-Flavor: Google, FALSE/TRUE) and Azure Scheduled
// Events (GET /metadata/scheduledevents?api-version=… with Metadata: true, a Preempt event). A real PyTorch
// loop checkpoints with torch.save every second and once more on SIGTERM; the notice must reach it at once
// and its final checkpoint must be written within seconds. Also a metadata service that hangs and one that
// answers garbage: the job is unharmed and gpumeter adds no delay.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "cloud/cloud.h"
#include "integration/metadata_standin.h"
#include "support/support.h"

namespace gm {
namespace {

using test::HangingService;
using test::MetadataStandIn;
using test::now_s;
using test::run_gpumeter;
using test::TempDir;

constexpr const char* kPython = "/usr/bin/python3";

const char* kTrainLoop =
    "import json, os, signal, sys, time, torch\n"
    "import gpumeter\n"
    "out, use_client = sys.argv[1], sys.argv[2] == 'client'\n"
    "signalled = []\n"
    "signal.signal(signal.SIGTERM, lambda *_: signalled.append(time.time()))\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.Linear(64, 64)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
    "x = torch.randn(32, 64)\n"
    "step, last, start = 0, 0.0, time.time()\n"
    "def save():\n"
    "    path = os.path.join(out, 'ckpt.pt')\n"
    "    torch.save({'step': step, 'model': model.state_dict(), 'opt': opt.state_dict()}, path + '.tmp')\n"
    "    os.replace(path + '.tmp', path)\n"
    "    if use_client: gpumeter.checkpoint(path)\n"
    "while not signalled and time.time() - start < 60:\n"
    "    loss = model(x).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()\n"
    "    step += 1\n"
    "    time.sleep(0.01)\n"
    "    if time.time() - last >= 1.0:\n"
    "        save(); last = time.time()\n"
    "save()\n"
    "json.dump({'signalled_at': signalled[0] if signalled else None, 'final_checkpoint_at': time.time(),\n"
    "           'step': step}, open(os.path.join(out, 'final.json'), 'w'))\n";

class RunPreemptionIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(test::fake_nvml_library())) << "fake NVML library not built";
    auto probe = test::run_command({kPython, "-c", "import torch"});
    ASSERT_EQ(probe.exit_code, 0) << "python3-torch is installed by scripts/setup.sh: " << probe.err;
  }
  std::map<std::string, std::string> env() {
    auto e = test::fake_env(dir_.write("scenario.json", test::one_gpu_scenario("python3", 90)), dir_.path());
    e["PYTHONPATH"] = test::source_dir() + "/python";
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    e["OMP_NUM_THREADS"] = "1";
    e["GPUMETER_METADATA_URL"] = "\x01unset";
    return e;
  }

  /// Runs the training loop under `gpumeter run --preemption <provider>` against a stand-in that announces
  /// the preemption once the first checkpoint is on disk; checks the final checkpoint and the report.
  void preempt(cloud::CloudProvider provider, bool client, std::int64_t notice_ms) {
    MetadataStandIn service(provider);
    const std::string job = dir_.write("train.py", kTrainLoop);
    std::atomic<bool> done{false};
    std::thread trigger([&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!done && std::chrono::steady_clock::now() < deadline) {
        if (std::filesystem::exists(dir_.path() + "/ckpt.pt")) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a second periodic checkpoint
          service.notify(notice_ms);
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    std::vector<std::string> args{"run",
                                  "--price",
                                  "3600",
                                  "--quiet",
                                  "--grace",
                                  "30s",
                                  "--preemption",
                                  std::string(cloud::provider_name(provider)),
                                  "--metadata-url",
                                  service.url(),
                                  "--preemption-poll",
                                  "500ms",
                                  "--json-report",
                                  dir_.path() + "/r.json"};
    if (!client) args.insert(args.end(), {"--checkpoint-glob", dir_.path() + "/*.pt"});
    args.insert(args.end(), {kPython, job, dir_.path(), client ? "client" : "glob"});
    auto r = run_gpumeter(args, env(), std::nullopt, 120);
    done = true;
    trigger.join();
    ASSERT_EQ(r.exit_code, 87) << r.out << r.err;
    auto final = nlohmann::json::parse(test::read_file(dir_.path() + "/final.json"));
    ASSERT_FALSE(final["signalled_at"].is_null()) << "the job never got SIGTERM";
    const double signalled = final["signalled_at"].get<double>();
    const double notice_to_signal = signalled - service.first_served_at();
    const double announce_to_signal = signalled - service.notified_at();
    const double announce_to_checkpoint = final["final_checkpoint_at"].get<double>() - service.notified_at();
    RecordProperty("notice_to_signal_ms", static_cast<int>(notice_to_signal * 1000));
    RecordProperty("announce_to_signal_ms", static_cast<int>(announce_to_signal * 1000));
    std::printf(
        "[ measure  ] %s: notice served -> SIGTERM %.0f ms; announced -> SIGTERM %.0f ms (poll 500 ms); "
        "announced -> final checkpoint %.0f ms\n",
        std::string(cloud::provider_name(provider)).c_str(), notice_to_signal * 1000,
        announce_to_signal * 1000, announce_to_checkpoint * 1000);
    EXPECT_GE(notice_to_signal, 0.0);
    EXPECT_LT(notice_to_signal, 2.0) << "the stop signal goes at once, not at the next tick";
    EXPECT_LT(announce_to_signal, 5.0) << "polled every 500 ms here (every 5 s at most by default)";
    EXPECT_LT(announce_to_checkpoint, 8.0) << "the final checkpoint within seconds of the notice";
    auto j = nlohmann::json::parse(test::read_file(dir_.path() + "/r.json"));
    EXPECT_EQ(j["status"], "preempted");
    EXPECT_NE(j["status_text"].get<std::string>().find("preempted"), std::string::npos);
    EXPECT_EQ(j["stopped_by"], "preemption");
    EXPECT_EQ(j["preemption"]["provider"], std::string(cloud::provider_name(provider)));
    EXPECT_TRUE(j["preemption"]["notice_at"].is_string());
    EXPECT_TRUE(j["preemption"]["deadline"].is_string());
    ASSERT_TRUE(j["last_checkpoint_s"].is_number()) << j.dump(2);
    ASSERT_TRUE(j["lost_work_usd"].is_number());
    // The final checkpoint came after the notice: at $1/s the work lost is what ran after it (< 3 s).
    EXPECT_LT(j["lost_work_usd"].get<double>(), 3.0) << j.dump(2);
    EXPECT_GT(j["last_checkpoint_s"].get<double>(), j["wall_s"].get<double>() - 3.0);
    bool sigkill = false;
    for (const auto& a : j["actions"]) sigkill = sigkill || a["kind"] == "sigkill";
    EXPECT_FALSE(sigkill) << "the job exited within the grace";
    // The runs list and the text report say it too.
    auto runs = run_gpumeter({"runs", "--json"}, env());
    ASSERT_EQ(runs.exit_code, 0) << runs.err;
    EXPECT_EQ(nlohmann::json::parse(runs.out)[0]["status"], "preempted");
    auto text = run_gpumeter({"report", "last"}, env());
    EXPECT_NE(text.out.find("preempted (" + std::string(cloud::provider_name(provider)) + " notice"),
              std::string::npos)
        << text.out;
  }
  TempDir dir_;
};

TEST_F(RunPreemptionIntegrationTest, AwsImdsV2DocumentedFormatSpotInstanceActionCheckpointsTorchLoop) {
  preempt(cloud::CloudProvider::aws, true, 120'000);
}

TEST_F(RunPreemptionIntegrationTest, GcpDocumentedFormatInstancePreemptedCheckpointsTorchLoop) {
  preempt(cloud::CloudProvider::gcp, false, 30'000);
}

TEST_F(RunPreemptionIntegrationTest, AzureScheduledEventsDocumentedFormatPreemptCheckpointsTorchLoop) {
  preempt(cloud::CloudProvider::azure, true, 30'000);
}

TEST_F(RunPreemptionIntegrationTest, HangingOrGarbageMetadataServiceNeverDelaysOrHarmsTheJob) {
  HangingService hanging;
  httplib::Server garbage;
  garbage.Get(".*", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("\x01<html>{{", "text/html");
  });
  garbage.Put(".*",
              [](const httplib::Request&, httplib::Response& res) { res.set_content("", "text/plain"); });
  const int port = garbage.bind_to_any_port("127.0.0.1");
  std::thread t([&] { garbage.listen_after_bind(); });
  const std::string job =
      dir_.write("job.py", "import time, sys\ntime.sleep(1.0)\nprint('job output intact')\nsys.exit(3)\n");
  for (const auto& [provider, url] : std::vector<std::pair<std::string, std::string>>{
           {"aws", hanging.url()},
           {"gcp", hanging.url()},
           {"azure", "http://127.0.0.1:" + std::to_string(port)},
           {"aws", "http://127.0.0.1:" + std::to_string(port)}}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_gpumeter({"run", "--price", "3600", "--preemption", provider, "--metadata-url", url,
                           "--preemption-poll", "200ms", kPython, job},
                          env(), std::nullopt, 60);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.exit_code, 3) << provider << " " << url << ": " << r.err;
    EXPECT_NE(r.out.find("job output intact"), std::string::npos);
    EXPECT_NE(r.err.find("metadata service did not give a usable answer"), std::string::npos) << r.err;
    EXPECT_LT(wall, 6.0) << "a 1 s job; gpumeter never waits on the metadata service";
  }
  // doctor says what is wrong, within its bound.
  auto d = run_gpumeter({"doctor", "--preemption", "aws", "--metadata-url", hanging.url()}, env(),
                        std::nullopt, 30);
  EXPECT_NE(d.out.find("preemption notices  aws metadata service at " + hanging.url() + ": NOT USABLE"),
            std::string::npos)
      << d.out;
  d = run_gpumeter(
      {"doctor", "--preemption", "gcp", "--metadata-url", "http://127.0.0.1:" + std::to_string(port)}, env(),
      std::nullopt, 30);
  EXPECT_NE(d.out.find("NOT USABLE (GCP instance/preempted: expected TRUE or FALSE"), std::string::npos)
      << d.out;
  garbage.stop();
  t.join();
}

TEST_F(RunPreemptionIntegrationTest, AutoOffTheCloudAndBadFlags) {
  HangingService hanging;
  auto e = env();
  e["GPUMETER_METADATA_URL"] = hanging.url();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_gpumeter({"run", "--price", "3600", "--", "/bin/true"}, e, std::nullopt, 30);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(wall, 4.0) << "auto never delays a run";
  r = run_gpumeter({"run", "--preemption", "oracle", "--", "/bin/true"}, env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--preemption 'oracle'"), std::string::npos) << r.err;
  r = run_gpumeter({"run", "--preemption", "aws", "--metadata-url", "ftp://x", "--", "/bin/true"}, env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--metadata-url 'ftp://x'"), std::string::npos) << r.err;
  e = env();
  e["GPUMETER_METADATA_URL"] = "169.254.169.254";
  r = run_gpumeter({"run", "--preemption", "gcp", "--", "/bin/true"}, e);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("$GPUMETER_METADATA_URL"), std::string::npos) << r.err;
  r = run_gpumeter({"run", "--preemption-poll", "30s", "--", "/bin/true"}, env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--preemption-poll"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gm
