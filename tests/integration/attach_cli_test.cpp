// `gpumeter attach PID` on processes gpumeter did not start: a real PyTorch loop (Debian's python3-torch
// under /usr/bin/python3) on a fake-NVML H100 whose process is python3 (issue 27).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "support/support.h"

extern char** environ;

namespace gm {
namespace {

using test::run_gpumeter;
using test::TempDir;

constexpr const char* kPython = "/usr/bin/python3";

/// A process started by the test (not by gpumeter), its stdout and stderr in a file.
class Background {
 public:
  Background(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
             const std::string& out_path) {
    std::map<std::string, std::string> all;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      const auto eq = kv.find('=');
      if (eq != std::string::npos) all[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const auto& [k, v] : env) {
      if (v == "\x01unset")
        all.erase(k);
      else
        all[k] = v;
    }
    std::vector<std::string> envs;
    for (const auto& [k, v] : all) envs.push_back(k + "=" + v);
    std::vector<std::string> a = args;
    std::vector<char*> argv, envp;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : envs) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (out >= 0) {
        dup2(out, 1);
        dup2(out, 2);
      }
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0 && !status_) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  /// The exit code (128+N for a signal), waiting at most `timeout_s`; -1 on timeout.
  int wait(double timeout_s) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (!status_) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (std::chrono::steady_clock::now() > end) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return *status_;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

bool wait_for_file(const std::string& path, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

/// The training loop: real torch steps of ~20 ms; on SIGINT it finishes the step, prints one line and
/// exits 7.
constexpr const char* kTrain =
    "import signal, sys, time, torch\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.Linear(64, 64)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
    "x = torch.randn(32, 64)\n"
    "stop = False\n"
    "def on_int(sig, frame):\n"
    "    global stop\n"
    "    stop = True\n"
    "signal.signal(signal.SIGINT, on_int)\n"
    "steps = int(sys.argv[1])\n"
    "open(sys.argv[2], 'w').close()\n"
    "for i in range(steps):\n"
    "    loss = model(x).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()\n"
    "    time.sleep(0.02)\n"
    "    if stop:\n"
    "        print(f'stopped at step {i}', flush=True)\n"
    "        sys.exit(7)\n"
    "print(f'done {steps}', flush=True)\n"
    "sys.exit(5)\n";

class AttachIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(test::fake_nvml_library())) << "fake NVML library not built";
    auto probe = test::run_command({kPython, "-c", "import torch"});
    ASSERT_EQ(probe.exit_code, 0) << "python3-torch is installed by scripts/setup.sh: " << probe.err;
    script_ = dir_.write("train.py", kTrain);
  }
  std::map<std::string, std::string> env() {
    auto e = test::fake_env(dir_.write("scenario.json", test::one_gpu_scenario("python3", 90)), dir_.path());
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    e["OMP_NUM_THREADS"] = "1";
    return e;
  }
  nlohmann::json json_file(const std::string& name) {
    return nlohmann::json::parse(test::read_file(dir_.path() + "/" + name));
  }
  /// Σ metered GPU cost ÷ wall seconds of a report ($/s metered).
  static double metered_usd_per_s(const nlohmann::json& j) {
    double usd = 0;
    for (const auto& g : j["gpus"]) usd += g["cost_usd"].get<double>();
    return usd / j["wall_s"].get<double>();
  }
  TempDir dir_;
  std::string script_;
};

TEST_F(AttachIntegrationTest, CostOfARunningTorchLoopEqualsRunOnTheSameScenario) {
  // $3.60/GPU-h is 1000 µ$/s: a millisecond of rounding is 1 µ$, under 1 µ$/s over these seconds.
  const auto e = env();
  Background job({kPython, script_, "150", dir_.path() + "/ready"}, e, dir_.path() + "/job.out");
  ASSERT_TRUE(wait_for_file(dir_.path() + "/ready", 60)) << test::read_file(dir_.path() + "/job.out");
  auto a = run_gpumeter({"attach", std::to_string(job.pid()), "--price", "3.6", "--quiet", "--json-report",
                         dir_.path() + "/attach.json"},
                        e, std::nullopt, 90);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(job.wait(10), 5) << "the job's own exit status";
  EXPECT_EQ(test::read_file(dir_.path() + "/job.out"), "done 150\n") << "the job's output is untouched";
  auto r = run_gpumeter({"run", "--price", "3.6", "--quiet", "--json-report", dir_.path() + "/run.json",
                         kPython, script_, "150", dir_.path() + "/ready2"},
                        e, std::nullopt, 90);
  ASSERT_EQ(r.exit_code, 5) << r.err;
  const auto ja = json_file("attach.json"), jr = json_file("run.json");
  EXPECT_EQ(ja["status"], "finished");
  EXPECT_TRUE(ja["exit_code"].is_null())
      << "attach cannot know the exit status of a process it did not start";
  EXPECT_EQ(ja["price_usd_per_gpu_hour"], jr["price_usd_per_gpu_hour"]);
  ASSERT_GT(ja["wall_s"].get<double>(), 1.0) << ja.dump();
  const double rate_a = metered_usd_per_s(ja), rate_r = metered_usd_per_s(jr);
  EXPECT_NEAR(rate_a, rate_r, 1e-6) << "metered $/s, attach vs run";
  EXPECT_NEAR(rate_a, 3.6 / 3600, 1e-6);
  // The bill follows the same rule: billed seconds at the price.
  EXPECT_NEAR(ja["cost_usd"].get<double>() / ja["billed_s"].get<double>(),
              jr["cost_usd"].get<double>() / jr["billed_s"].get<double>(), 1e-9);
  EXPECT_TRUE(ja["gpus"][0]["used"].get<bool>()) << "the job's process was seen on the GPU";
  EXPECT_NEAR(ja["gpus"][0]["util_avg_pct"].get<double>(), 90, 0.01);
}

TEST_F(AttachIntegrationTest, BudgetStopReachesTheProcessAndLeavesItsExitCodeAndOutputAlone) {
  const auto e = env();
  Background job({kPython, script_, "3000", dir_.path() + "/ready"}, e, dir_.path() + "/job.out");
  ASSERT_TRUE(wait_for_file(dir_.path() + "/ready", 60)) << test::read_file(dir_.path() + "/job.out");
  // $3600/GPU-h is $1/s: the $2 budget stops it about 2 s after attaching.
  auto a = run_gpumeter({"attach", std::to_string(job.pid()), "--price", "3600", "--budget", "2", "--grace",
                         "10s", "--json-report", dir_.path() + "/attach.json"},
                        e, std::nullopt, 90);
  EXPECT_EQ(a.exit_code, 86) << a.err;
  EXPECT_NE(a.err.find("[sigint] sent SIGINT to the job's main process"), std::string::npos) << a.err;
  EXPECT_EQ(job.wait(20), 7) << "the job's own handler decided its exit status";
  const std::string out = test::read_file(dir_.path() + "/job.out");
  EXPECT_TRUE(out.rfind("stopped at step ", 0) == 0 && out.find('\n') == out.size() - 1)
      << "only the job's own line: " << out;
  const auto j = json_file("attach.json");
  EXPECT_EQ(j["stopped_by"], "budget");
  EXPECT_EQ(j["status"], "stopped");
  bool stop = false;
  for (const auto& x : j["actions"]) stop = stop || x["kind"] == "stop_budget";
  EXPECT_TRUE(stop) << j["actions"].dump();
  auto runs = run_gpumeter({"runs", "--json"}, e);
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  const auto list = nlohmann::json::parse(runs.out);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["labels"]["attached_pid"], std::to_string(job.pid()));
}

TEST_F(AttachIntegrationTest, JsonLinesStreamIntervalsAndSigtermDetachesAndRecords) {
  const auto e = env();
  Background job({kPython, script_, "100000", dir_.path() + "/ready"}, e, dir_.path() + "/job.out");
  ASSERT_TRUE(wait_for_file(dir_.path() + "/ready", 60)) << test::read_file(dir_.path() + "/job.out");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const std::string lines_path = dir_.path() + "/lines.jsonl";
  Background attach({test::gpumeter_binary(), "attach", std::to_string(job.pid()), "--price", "36",
                     "--json-lines", "--from", "start"},
                    e, lines_path);
  // Wait for two intervals, then SIGTERM: attach detaches, records, and the job goes on.
  std::vector<nlohmann::json> intervals;
  for (int i = 0; i < 300 && intervals.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    intervals.clear();
    std::istringstream in(test::read_file(lines_path));
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("type", "") == "interval") intervals.push_back(j);
    }
  }
  ASSERT_GE(intervals.size(), 2u) << test::read_file(lines_path);
  kill(attach.pid(), SIGTERM);
  EXPECT_EQ(attach.wait(20), 0) << test::read_file(lines_path);
  EXPECT_EQ(kill(job.pid(), 0), 0) << "the job still runs after attach detached";

  std::vector<nlohmann::json> all;
  std::istringstream in(test::read_file(lines_path));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "every line is one JSON object: " << line;
    all.push_back(j);
  }
  ASSERT_GE(all.size(), 4u);
  EXPECT_EQ(all.front()["type"], "started");
  EXPECT_EQ(all.front()["pid"], job.pid());
  EXPECT_EQ(all.back()["type"], "end");
  EXPECT_EQ(all.back()["status"], "detached");
  const auto& iv = intervals.back();
  EXPECT_NEAR(iv["usd_per_h"].get<double>(), 36.0, 1e-9);
  EXPECT_EQ(iv["util_pct"], 90.0);
  EXPECT_NEAR(iv["memory_used_mib"].get<double>(), 61000, 0.1);
  EXPECT_NEAR(iv["memory_total_mib"].get<double>(), 81559, 0.1);
  ASSERT_EQ(iv["gpus"].size(), 1u);
  // --from start: the session counts from the process's start, more than 1.5 s before attach began.
  EXPECT_GT(intervals.front()["elapsed_s"].get<double>(), 1.5) << intervals.front().dump();
  EXPECT_NEAR(iv["spent_usd"].get<double>(), iv["elapsed_s"].get<double>() * 0.01, 0.011) << iv.dump();
  auto runs = run_gpumeter({"runs", "--json"}, e);
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  const auto list = nlohmann::json::parse(runs.out);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["status"], "detached");
  EXPECT_NEAR(list[0]["cost_usd"].get<double>(), all.back()["cost_usd"].get<double>(), 1e-9);
  kill(job.pid(), SIGINT);
  EXPECT_EQ(job.wait(20), 7);
}

TEST_F(AttachIntegrationTest, UsageErrorsAndAMissingProcess) {
  const auto e = env();
  auto r = run_gpumeter({"attach"}, e);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  r = run_gpumeter({"attach", "0"}, e);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  r = run_gpumeter({"attach", "12", "--from", "yesterday"}, e);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--from 'yesterday'"), std::string::npos) << r.err;
  r = run_gpumeter({"attach", "4194000", "--price", "1"}, e);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("no process 4194000"), std::string::npos) << r.err;
  r = run_gpumeter({"attach", std::to_string(getpid()), "--price", "1", "--grace", "soon"}, e);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--grace 'soon'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gm
