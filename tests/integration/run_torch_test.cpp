// `gpumeter run` against real PyTorch and real tqdm (Debian's python3-torch and python3-tqdm under
// /usr/bin/python3, installed by scripts/setup.sh), on a fake-NVML H100 whose process is `python3` (issue
// 19).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "support/support.h"

namespace gm {
namespace {

using test::run_gpumeter;
using test::TempDir;

constexpr const char* kPython = "/usr/bin/python3";

class RunTorchIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(test::fake_nvml_library())) << "fake NVML library not built";
    auto probe = test::run_command({kPython, "-c", "import torch, tqdm, numpy"});
    ASSERT_EQ(probe.exit_code, 0) << "python3-torch, python3-tqdm and python3-numpy are installed by "
                                     "scripts/setup.sh: "
                                  << probe.err;
  }
  std::map<std::string, std::string> env() {
    auto e = test::fake_env(dir_.write("scenario.json", test::one_gpu_scenario("python3", 90)), dir_.path());
    e["PYTHONPATH"] = test::source_dir() + "/python";
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    e["OMP_NUM_THREADS"] = "1";
    return e;
  }
  nlohmann::json report_json() { return nlohmann::json::parse(test::read_file(dir_.path() + "/r.json")); }
  std::string script(const std::string& name, const std::string& text) { return dir_.write(name, text); }
  TempDir dir_;
};

TEST_F(RunTorchIntegrationTest, FlagsAfterTheJobNameReachTheJob) {
  const std::string job = script("showargs.py",
                                 "import json, sys, torch\n"
                                 "print(json.dumps(sys.argv[1:]))\n");
  auto r = run_gpumeter({"run", "--price", "4", "--quiet", kPython, job, "--config", "cfg.yaml", "--quiet",
                         "--total-steps", "5", "--", "-x"},
                        env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out),
            nlohmann::json({"--config", "cfg.yaml", "--quiet", "--total-steps", "5", "--", "-x"}));
  // `--` still ends gpumeter's options.
  r = run_gpumeter({"run", "--price", "4", "--quiet", "--", kPython, job, "--budget", "1"}, env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out), nlohmann::json({"--budget", "1"}));
  // An option gpumeter does not know, before the job: a usage error that says how to fix it.
  r = run_gpumeter({"run", "--price", "4", "--config-file", "x.yaml", kPython, job}, env());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--config-file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("after the job's command"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("not expected"), std::string::npos) << r.err;
}

TEST_F(RunTorchIntegrationTest, NestedTqdmBarsGiveAGlobalForecastWithinTenPercent) {
  // An epoch bar around a step bar (leave=False), real tqdm, a real torch step, 3 × 100 steps of 40 ms.
  const std::string job =
      script("nested.py",
             "import time, torch\n"
             "from tqdm import tqdm, trange\n"
             "torch.manual_seed(0)\n"
             "model = torch.nn.Linear(64, 64)\n"
             "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
             "x = torch.randn(32, 64)\n"
             "t0 = time.monotonic(); n = 0\n"
             "for epoch in trange(3, desc='epoch'):\n"
             "    for i in tqdm(range(100), leave=False, mininterval=0):\n"
             "        loss = model(x).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()\n"
             "        n += 1\n"
             "        time.sleep(max(0.0, t0 + n * 0.04 - time.monotonic()))\n");
  auto r = run_gpumeter({"run", "--price", "3600", "--quiet", "--status-every", "1s", "--json-report",
                         dir_.path() + "/r.json", kPython, job},
                        env(), std::nullopt, 90);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = report_json();
  EXPECT_EQ(j["steps"], 300) << "3 epochs × 100 steps, not the epoch bar's 3";
  EXPECT_EQ(j["total_steps"], 300);
  const double final_usd = j["wall_s"].get<double>();  // $1/s before billing rounds up
  std::regex line_re(R"(step (\d+)/(\d+) · forecast \$([0-9.,]+) \[\$([0-9.,]+)–\$([0-9.,]+)\])");
  auto num = [](std::string v) {
    v.erase(std::remove(v.begin(), v.end(), ','), v.end());
    return std::stod(v);
  };
  std::optional<double> forecast, low, high;
  std::int64_t last_step = -1;
  for (auto it = std::sregex_iterator(r.err.begin(), r.err.end(), line_re); it != std::sregex_iterator();
       ++it) {
    const int step = std::stoi((*it)[1]);
    EXPECT_EQ(std::stoi((*it)[2]), 300) << it->str();
    EXPECT_GE(step, last_step) << "the global step never jumps back: " << it->str();
    last_step = step;
    if (!forecast && step >= 60 && step <= 120) {
      forecast = num((*it)[3]);
      low = num((*it)[4]);
      high = num((*it)[5]);
    }
  }
  ASSERT_TRUE(forecast) << r.err;
  EXPECT_NEAR(*forecast, final_usd, 0.10 * final_usd) << r.err;
  EXPECT_LE(*low, final_usd * 1.001) << r.err;
  EXPECT_GE(*high, final_usd * 0.999) << r.err;
}

TEST_F(RunTorchIntegrationTest, DataLoaderWorkersSurviveTheStopAndTheCheckpointResumes) {
  // The usual flag-style handler: note the signal, finish the step, torch.save, exit. Workers (num_workers=2)
  // must still be alive when the main process asks them for the next batch.
  const std::string job = script(
      "train.py",
      "import os, signal, sys, time, torch\n"
      "from torch.utils.data import DataLoader, Dataset\n"
      "class Data(Dataset):\n"
      "    def __len__(self): return 100000\n"
      "    def __getitem__(self, i):\n"
      "        time.sleep(0.01)\n"
      "        return torch.randn(16), torch.randn(1)\n"
      "ckpt = sys.argv[1]\n"
      "stop = False\n"
      "def on_term(*_):\n"
      "    global stop\n"
      "    stop = True\n"
      "signal.signal(signal.SIGTERM, on_term)\n"
      "model = torch.nn.Linear(16, 1)\n"
      "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
      "start = 0\n"
      "if os.path.exists(ckpt):\n"
      "    state = torch.load(ckpt)\n"
      "    model.load_state_dict(state['model']); opt.load_state_dict(state['opt']); start = state['step']\n"
      "    print(f'resumed from step {start}', flush=True)\n"
      "loader = DataLoader(Data(), batch_size=8, num_workers=2)\n"
      "step = start\n"
      "for x, y in loader:\n"
      "    loss = torch.nn.functional.mse_loss(model(x), y)\n"
      "    opt.zero_grad(); loss.backward(); opt.step()\n"
      "    step += 1\n"
      "    if stop or step >= start + 2000:\n"
      "        break\n"
      "    if len(sys.argv) > 2 and step >= start + int(sys.argv[2]):\n"
      "        break\n"
      "torch.save({'step': step, 'model': model.state_dict(), 'opt': opt.state_dict()}, ckpt)\n"
      "print(f'checkpoint at step {step}', flush=True)\n");
  const std::string ckpt = dir_.path() + "/ckpt.pt";
  auto r = run_gpumeter({"run", "--price", "3600", "--budget", "6", "--grace", "20s", "--json-report",
                         dir_.path() + "/r.json", kPython, job, ckpt},
                        env(), std::nullopt, 90);
  EXPECT_EQ(r.exit_code, 86) << r.out << r.err;
  EXPECT_EQ(r.err.find("DataLoader worker"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("checkpoint at step"), std::string::npos) << r.out << r.err;
  ASSERT_TRUE(std::filesystem::exists(ckpt)) << r.err;
  auto j = report_json();
  EXPECT_EQ(j["stopped_by"], "budget");
  bool killed = false;
  for (const auto& a : j["actions"]) killed |= a["kind"] == "sigkill";
  EXPECT_FALSE(killed) << "the job checkpointed within the grace period";

  // Resume from the checkpoint for a few steps.
  r = run_gpumeter({"run", "--price", "3600", "--quiet", kPython, job, ckpt, "5"}, env(), std::nullopt, 90);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(resumed from step (\d+))"))) << r.out;
  EXPECT_GT(std::stoi(m[1]), 0);
}

TEST_F(RunTorchIntegrationTest, ClientTakesNumpyAndTorchScalarsInsideAndOutsideRun) {
  const std::string job =
      script("client.py",
             "import math, numpy as np, torch, gpumeter\n"
             "for i in range(1, 6):\n"
             "    gpumeter.progress(step=np.int64(i), total_steps=torch.tensor(5),\n"
             "                      samples=np.uint32(32 * i), tokens=torch.tensor(4096 * i),\n"
             "                      metrics={'loss': torch.tensor(2.0 / i), 'acc': np.float32(0.5),\n"
             "                               'nan': float('nan'), 'inf': torch.tensor(math.inf)})\n"
             "gpumeter.progress(step=torch.ones(3))\n"
             "print('dropped', gpumeter.dropped())\n");
  auto r = run_gpumeter(
      {"run", "--price", "3600", "--quiet", "--json-report", dir_.path() + "/r.json", kPython, job}, env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = report_json();
  EXPECT_EQ(j["steps"], 5);
  EXPECT_EQ(j["total_steps"], 5);
  EXPECT_EQ(j["tokens"], 4096 * 5);
  EXPECT_NEAR(j["metrics"]["loss"].get<double>(), 0.4, 1e-6) << "a float32 tensor's value";
  EXPECT_DOUBLE_EQ(j["metrics"]["acc"].get<double>(), 0.5);
  EXPECT_FALSE(j["metrics"].contains("nan"));
  EXPECT_NE(r.out.find("'metrics': 10"), std::string::npos) << r.out;
  // Outside gpumeter run: silent no-ops, never an exception.
  auto e = env();
  e["GPUMETER_SOCKET"] = "\x01unset";
  auto plain = test::run_command({kPython, job}, e);
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
}

TEST_F(RunTorchIntegrationTest, WithoutNvmlTheJobRunsAndWallTimeTimesPriceIsMetered) {
  const std::string job = script("cpu.py",
                                 "import torch, time\n"
                                 "a = torch.randn(256, 256)\n"
                                 "t0 = time.monotonic()\n"
                                 "while time.monotonic() - t0 < 2.5:\n"
                                 "    a = (a @ a).tanh()\n"
                                 "print('trained', flush=True)\n");
  auto e = env();
  e["GPUMETER_NVML_LIBRARY"] = dir_.path() + "/no-such-libnvidia-ml.so.1";
  auto r =
      run_gpumeter({"run", "--price", "3600", "--json-report", dir_.path() + "/r.json", kPython, job}, e);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "trained\n");
  EXPECT_NE(r.err.find("no GPU telemetry"), std::string::npos) << r.err;
  auto j = report_json();
  EXPECT_EQ(j["telemetry"], "none");
  EXPECT_EQ(j["gpus_allocated"].size(), 0u);
  const auto billed = j["billed_s"].get<std::int64_t>();
  EXPECT_GE(billed, 3);
  EXPECT_DOUBLE_EQ(j["cost_usd"].get<double>(), static_cast<double>(billed)) << "$1/s × billed seconds";
  // No price either: the job runs and its time is recorded.
  r = run_gpumeter({"run", "--json-report", dir_.path() + "/r.json", kPython, job}, e);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = report_json();
  EXPECT_EQ(j["price_source"], "none");
  EXPECT_GE(j["wall_s"].get<double>(), 2.5);
  auto runs = run_gpumeter({"runs"}, e);
  EXPECT_NE(runs.out.find("no price"), std::string::npos) << runs.out;
}

TEST_F(RunTorchIntegrationTest, FailedAndInterruptedJobsSayWhatHappened) {
  const std::string crash =
      script("crash.py", "import torch\nraise RuntimeError('CUDA out of memory (simulated)')\n");
  auto r = run_gpumeter(
      {"run", "--price", "3600", "--quiet", "--json-report", dir_.path() + "/r.json", kPython, crash}, env());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(report_json()["status"], "failed");
  EXPECT_EQ(report_json()["status_text"], "failed (exit 1)");
  const std::string ctrl_c =
      script("ctrlc.py", "import os, signal, torch\nos.kill(os.getpid(), signal.SIGINT)\n");
  r = run_gpumeter(
      {"run", "--price", "3600", "--quiet", "--json-report", dir_.path() + "/r.json", kPython, ctrl_c},
      env());
  EXPECT_EQ(r.exit_code, 130);
  EXPECT_EQ(report_json()["status"], "interrupted");
  EXPECT_EQ(report_json()["status_text"], "interrupted (SIGINT)");
  const std::string ok = script("ok.py", "import torch\n");
  r = run_gpumeter({"run", "--price", "3600", "--quiet", kPython, ok}, env());
  EXPECT_EQ(r.exit_code, 0);
  auto runs = run_gpumeter({"runs"}, env());
  EXPECT_NE(runs.out.find("failed (exit 1)"), std::string::npos) << runs.out;
  EXPECT_NE(runs.out.find("interrupted (SIGINT)"), std::string::npos) << runs.out;
  EXPECT_NE(runs.out.find("succeeded"), std::string::npos) << runs.out;
  auto report = run_gpumeter({"report", "last"}, env());
  EXPECT_NE(report.out.find("succeeded"), std::string::npos) << report.out;
  // A mistyped --ledger is an error, and no file is created there.
  auto bad = run_gpumeter({"runs", "--ledger", dir_.path() + "/typo.db"}, env());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/typo.db"));
}

TEST_F(RunTorchIntegrationTest, StatusLinesStartOnTheirOwnLineAfterTqdmAndKeepTheirCadence) {
  const std::string job = script("bar.py",
                                 "import time, torch\n"
                                 "from tqdm import tqdm\n"
                                 "for i in tqdm(range(100), mininterval=0):\n"
                                 "    torch.ones(8).sum()\n"
                                 "    time.sleep(0.06)\n");
  auto r = run_gpumeter({"run", "--price", "3600", "--budget", "1000", "--warn-at", "0.2%", "--status-every",
                         "2s", kPython, job},
                        env(), std::nullopt, 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<double> at_s;
  std::size_t start = 0;
  while (start < r.err.size()) {
    std::size_t end = r.err.find('\n', start);
    if (end == std::string::npos) end = r.err.size();
    const std::string line = r.err.substr(start, end - start);
    start = end + 1;
    if (line.find("gpumeter") == std::string::npos) continue;
    EXPECT_EQ(line.find("it/s]"), std::string::npos) << "glued to a tqdm line: " << line;
    if (line.rfind("gpumeter ", 0) == 0 && line.find(" · $") != std::string::npos) {
      std::smatch m;
      if (std::regex_search(line, m, std::regex(R"(^gpumeter ([0-9.]+)s)"))) at_s.push_back(std::stod(m[1]));
    }
  }
  EXPECT_NE(r.err.find("gpumeter: [warn]"), std::string::npos) << r.err;
  ASSERT_GE(at_s.size(), 2u) << r.err;
  for (std::size_t i = 0; i < at_s.size(); ++i)
    EXPECT_NEAR(at_s[i], 2.0 * static_cast<double>(i + 1), 1.1) << r.err;
}

// Debian 12's torchrun (torch 1.13 on Python 3.11) fails at start-up before it starts a worker
// (AttributeError in torch.distributed.elastic.multiprocessing.api.to_map), so this launcher stands in for
// it, doing what torch's elastic agent does on SIGTERM: forward the signal to every worker, wait for them,
// exit non-zero.
TEST_F(RunTorchIntegrationTest, TorchrunStandInLauncherForwardsTheStopToEveryRank) {
  const std::string worker =
      script("worker.py",
             "import os, signal, sys, time\n"
             "stop = False\n"
             "def on_term(*_):\n"
             "    global stop\n"
             "    stop = True\n"
             "signal.signal(signal.SIGTERM, on_term)  # before torch's import (seconds on a loaded machine)\n"
             "import torch\n"
             "m = torch.nn.Linear(4, 4)\n"
             "while not stop:\n"
             "    time.sleep(0.05)\n"
             "torch.save(m.state_dict(), sys.argv[1] + '/rank' + os.environ['RANK'] + '.pt')\n");
  const std::string launcher =
      script("launcher.py",
             "import os, signal, subprocess, sys\n"
             "procs = [subprocess.Popen([sys.executable] + sys.argv[1:],\n"
             "                          env={**os.environ, 'RANK': str(r)}) for r in range(2)]\n"
             "def forward(sig, _):\n"
             "    for p in procs: p.send_signal(sig)\n"
             "signal.signal(signal.SIGTERM, forward)\n"
             "codes = [p.wait() for p in procs]\n"
             "sys.exit(1 if any(codes) else 0)\n");
  auto r = run_gpumeter({"run", "--price", "3600", "--budget", "5", "--grace", "20s", "--quiet", kPython,
                         launcher, worker, dir_.path()},
                        env(), std::nullopt, 60);
  EXPECT_EQ(r.exit_code, 86) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/rank0.pt")) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/rank1.pt")) << r.err;
}

}  // namespace
}  // namespace gm
