// `gpumeter run` end to end: the real binary on the fake NVML library (DESIGN §6 scenarios).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "support/support.h"

namespace gm {
namespace {

using test::run_gpumeter;
using test::TempDir;

class RunCliIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { GM_ASSERT_BUILT(); }
  std::map<std::string, std::string> env(const std::string& comm, int util = 97) {
    auto e = test::fake_env(dir_.write("scenario.json", test::one_gpu_scenario(comm, util)), dir_.path());
    e["PYTHONPATH"] = test::source_dir() + "/python";
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    return e;
  }
  nlohmann::json report_json() { return nlohmann::json::parse(test::read_file(dir_.path() + "/r.json")); }
  std::string script(const std::string& name, const std::string& text) { return dir_.write(name, text); }
  TempDir dir_;
};

TEST_F(RunCliIntegrationTest, CostIsBilledSecondsTimesOneDollarExactly) {
  auto r =
      run_gpumeter({"run", "--price", "3600", "--json-report", dir_.path() + "/r.json", "--", "sleep", "4.5"},
                   env("sleep"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = report_json();
  const std::int64_t billed = j["billed_s"].get<std::int64_t>();
  EXPECT_EQ(billed, static_cast<std::int64_t>(std::ceil(j["wall_s"].get<double>())));
  EXPECT_GE(billed, 5);
  EXPECT_DOUBLE_EQ(j["cost_usd"].get<double>(), static_cast<double>(billed) * 1.0);
  EXPECT_DOUBLE_EQ(j["price_usd_per_gpu_hour"].get<double>(), 3600.0);
  EXPECT_EQ(j["price_source"].get<std::string>().empty(), false);
  ASSERT_EQ(j["gpus_allocated"].size(), 1u);
  EXPECT_EQ(j["gpus_used"], j["gpus_allocated"]) << "the sleep process appeared on the GPU";
  EXPECT_DOUBLE_EQ(j["unused_gpu_cost_usd"].get<double>(), 0.0);
  EXPECT_TRUE(j["stopped_by"].is_null());
  EXPECT_EQ(j["energy_method"], "counter");
  EXPECT_GT(j["energy_kwh"].get<double>(), 0.0);
  // The ledger holds the same figure.
  auto rep = run_gpumeter({"report", "last", "--json"}, env("sleep"));
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  auto l = nlohmann::json::parse(rep.out);
  EXPECT_DOUBLE_EQ(l["cost_usd"].get<double>(), j["cost_usd"].get<double>());
  EXPECT_EQ(l["billed_s"], j["billed_s"]);
  EXPECT_EQ(l["run_id"], j["run_id"]);
  for (const char* key : {"run_id",
                          "command",
                          "exit_code",
                          "stopped_by",
                          "wall_s",
                          "billed_s",
                          "cost_usd",
                          "price_usd_per_gpu_hour",
                          "price_source",
                          "gpus_allocated",
                          "gpus_used",
                          "idle_cost_usd",
                          "unused_gpu_cost_usd",
                          "energy_kwh",
                          "energy_method",
                          "co2_kg",
                          "steps",
                          "total_steps",
                          "forecast_cost_usd",
                          "actions"})
    EXPECT_TRUE(l.contains(key)) << key;
  auto runs = run_gpumeter({"runs", "--json"}, env("sleep"));
  ASSERT_EQ(runs.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(runs.out).size(), 1u);
}

TEST_F(RunCliIntegrationTest, BudgetStopSendsTermThenTheHandlerCheckpoints) {
  const std::string job = script("job.py",
                                 "import signal, sys, time\n"
                                 "def term(*a):\n"
                                 "    open(sys.argv[1], 'w').write('checkpoint')\n"
                                 "    sys.exit(0)\n"
                                 "signal.signal(signal.SIGTERM, term)\n"
                                 "time.sleep(60)\n");
  const std::string ckpt = dir_.path() + "/ckpt";
  // 8 s of budget at 1 $/s: Python has installed its handler by then even on a loaded machine.
  auto r = run_gpumeter({"run", "--price", "3600", "--budget", "8", "--grace", "5s", "--json-report",
                         dir_.path() + "/r.json", "--", "python3", job, ckpt},
                        env("python3"), std::nullopt, 30);
  EXPECT_EQ(r.exit_code, 86) << r.err;
  EXPECT_EQ(test::read_file(ckpt), "checkpoint");
  auto j = report_json();
  EXPECT_EQ(j["stopped_by"], "budget");
  bool saw_stop = false, saw_term = false, saw_kill = false;
  for (const auto& a : j["actions"]) {
    if (a["kind"] == "stop_budget") {
      saw_stop = true;
      EXPECT_GE(a["cost_usd"].get<double>(), 8.0);
      EXPECT_LE(a["cost_usd"].get<double>(), 9.0) << "at most one second after the budget";
    }
    saw_term |= a["kind"] == "sigterm";
    saw_kill |= a["kind"] == "sigkill";
  }
  EXPECT_TRUE(saw_stop && saw_term);
  EXPECT_FALSE(saw_kill) << "the job exited within the grace period";
  EXPECT_LT(r.wall_s, 13.0);
}

TEST_F(RunCliIntegrationTest, BudgetStopKillsAJobIgnoringTermAfterGrace) {
  const std::string job = script("stubborn.sh", "trap '' TERM\nwhile true; do sleep 0.2; done\n");
  auto r = run_gpumeter({"run", "--price", "3600", "--budget", "2", "--grace", "1s", "--json-report",
                         dir_.path() + "/r.json", "--", "sh", job},
                        env("sh"), std::nullopt, 30);
  EXPECT_EQ(r.exit_code, 86) << r.err;
  auto j = report_json();
  EXPECT_EQ(j["stopped_by"], "budget");
  std::optional<double> t_term, t_kill;
  for (const auto& a : j["actions"]) {
    if (a["kind"] == "sigterm") t_term = a["t_s"].get<double>();
    if (a["kind"] == "sigkill") t_kill = a["t_s"].get<double>();
  }
  ASSERT_TRUE(t_term && t_kill) << j["actions"].dump();
  EXPECT_NEAR(*t_kill - *t_term, 1.0, 0.5);
  EXPECT_LT(r.wall_s, 8.0);
}

TEST_F(RunCliIntegrationTest, ForecastStopBeforeHalfTheBudget) {
  // 1000 steps of 0.1 s at $1/s: about $100 against a $20 budget.
  const std::string job = script("steps.py",
                                 "import time, gpumeter\n"
                                 "for i in range(1, 1001):\n"
                                 "    time.sleep(0.1)\n"
                                 "    gpumeter.progress(step=i, total_steps=1000)\n");
  auto r = run_gpumeter({"run", "--price", "3600", "--budget", "20", "--forecast-stop", "--grace", "2s",
                         "--json-report", dir_.path() + "/r.json", "--", "python3", job},
                        env("python3"), std::nullopt, 30);
  EXPECT_EQ(r.exit_code, 86) << r.err;
  auto j = report_json();
  EXPECT_EQ(j["stopped_by"], "forecast");
  EXPECT_LT(j["cost_usd"].get<double>(), 10.0);
  EXPECT_GT(j["forecast_cost_usd"].get<double>(), 80.0);
}

TEST_F(RunCliIntegrationTest, MaxIdleStopsAnIdleJob) {
  auto r = run_gpumeter({"run", "--price", "3600", "--max-idle", "3s", "--grace", "1s", "--json-report",
                         dir_.path() + "/r.json", "--", "sleep", "30"},
                        env("sleep", 0), std::nullopt, 30);
  EXPECT_EQ(r.exit_code, 86) << r.err;
  EXPECT_EQ(report_json()["stopped_by"], "idle");
  EXPECT_LT(r.wall_s, 7.0);
}

TEST_F(RunCliIntegrationTest, ProgressFromChildGrandchildAndTqdmOutput) {
  const std::string child = script("child.py",
                                   "import gpumeter\n"
                                   "gpumeter.progress(step=5, total_steps=50, samples=640, tokens=81920)\n");
  auto r = run_gpumeter(
      {"run", "--price", "3600", "--quiet", "--json-report", dir_.path() + "/r.json", "--", "python3", child},
      env("python3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = report_json();
  EXPECT_EQ(j["steps"], 5);
  EXPECT_EQ(j["total_steps"], 50);
  EXPECT_DOUBLE_EQ(j["usd_per_1m_tokens"].get<double>(), j["cost_usd"].get<double>() / 81920 * 1e6);

  // A grandchild: sh starts python, which reports.
  r = run_gpumeter({"run", "--price", "3600", "--quiet", "--json-report", dir_.path() + "/r.json", "--", "sh",
                    "-c", "python3 " + child + "; true"},
                   env("python3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(report_json()["steps"], 5);

  // tqdm-style bars on stderr, redrawn with \r.
  r = run_gpumeter(
      {"run", "--price", "3600", "--quiet", "--json-report", dir_.path() + "/r.json", "--", "sh", "-c",
       "printf ' 10%%|#         | 10/100 [00:01<00:09, 10.0it/s]\\r 37%%|###       | 37/100 "
       "[00:03<00:06, 10.0it/s]\\n' >&2"},
      env("sh"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(report_json()["steps"], 37);
  EXPECT_EQ(report_json()["total_steps"], 100);
}

TEST_F(RunCliIntegrationTest, SteadyJobForecastAfterTenPercentWithinFivePercent) {
  const std::string job = script("steady.py",
                                 "import time, gpumeter\n"
                                 "t0 = time.monotonic()\n"
                                 "for i in range(1, 121):\n"
                                 "    time.sleep(max(0.0, t0 + i * 0.05 - time.monotonic()))\n"
                                 "    gpumeter.progress(step=i, total_steps=120)\n");
  auto r = run_gpumeter({"run", "--price", "3600", "--quiet", "--status-every", "1s", "--json-report",
                         dir_.path() + "/r.json", "--", "python3", job},
                        env("python3"), std::nullopt, 30);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = report_json();
  const double final_usd = j["wall_s"].get<double>() * 1.0;  // $1/s, before billing rounds up
  std::regex line_re(R"(step (\d+)/120 · forecast \$([0-9.,]+))");
  std::optional<double> forecast;
  for (auto it = std::sregex_iterator(r.err.begin(), r.err.end(), line_re); it != std::sregex_iterator();
       ++it) {
    const int step = std::stoi((*it)[1]);
    if (step >= 12 && step < 60) {
      std::string v = (*it)[2];
      v.erase(std::remove(v.begin(), v.end(), ','), v.end());
      forecast = std::stod(v);
      break;
    }
  }
  ASSERT_TRUE(forecast) << r.err;
  EXPECT_NEAR(*forecast, final_usd, 0.05 * final_usd) << r.err;
}

TEST_F(RunCliIntegrationTest, PassesThroughBytesAndExitStatus) {
  auto r = run_gpumeter({"run", "--price", "3600", "--quiet", "--", "sh", "-c",
                         "printf 'out\\000\\377line\\n'; printf 'err\\n' >&2; exit 7"},
                        env("sh"));
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.out, std::string("out\0\xffline\n", 10));
  EXPECT_EQ(r.err, "err\n");
  r = run_gpumeter({"run", "--price", "3600", "--quiet", "--", "sh", "-c", "kill -9 $$"}, env("sh"));
  EXPECT_EQ(r.exit_code, 137);
  r = run_gpumeter({"run", "--price", "3600", "--quiet", "--", "/nonexistent/program"}, env("sh"));
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("/nonexistent/program"), std::string::npos);
}

TEST_F(RunCliIntegrationTest, KeepsTheTerminalForTheJobUnderTmux) {
  ASSERT_EQ(std::system("command -v tmux >/dev/null 2>&1"), 0)
      << "tmux missing (scripts/setup.sh installs it)";
  const std::string sock = dir_.path() + "/tmux.sock";
  const std::string out = dir_.path() + "/tty.txt";
  std::string envs;
  for (const auto& [k, v] : env("sh"))
    if (v != "\x01unset") envs += k + "='" + v + "' ";
  const std::string job =
      script("tty.sh", "if [ -t 0 ] && [ -t 1 ]; then echo TTY-OK > " + out + "; fi; stty size >> " + out +
                           "; printf '\\033[31mred\\033[0m\\n'\n");
  const std::string cmd = "env " + envs + test::gpumeter_binary() + " run --price 3600 --quiet -- sh " + job +
                          "; echo EXIT=$?; sleep 30";
  ASSERT_EQ(std::system(("tmux -S " + sock + " new-session -d -x 100 -y 30 \"" + cmd + "\"").c_str()), 0);
  std::string pane;
  for (int i = 0; i < 100 && pane.find("EXIT=") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    FILE* p = popen(("tmux -S " + sock + " capture-pane -p -e").c_str(), "r");
    pane.clear();
    char buf[4096];
    while (p && fgets(buf, sizeof buf, p)) pane += buf;
    if (p) pclose(p);
  }
  std::system(("tmux -S " + sock + " kill-server >/dev/null 2>&1").c_str());
  EXPECT_NE(pane.find("EXIT=0"), std::string::npos) << pane;
  EXPECT_NE(pane.find("\033[31mred"), std::string::npos) << "colours pass through: " << pane;
  const std::string tty = test::read_file(out);
  EXPECT_NE(tty.find("TTY-OK"), std::string::npos) << tty;
  EXPECT_NE(tty.find("30 100"), std::string::npos) << tty;
}

TEST_F(RunCliIntegrationTest, LiveStatusLineKeepsTheBottomRowUnderTmux) {
  ASSERT_EQ(std::system("command -v tmux >/dev/null 2>&1"), 0)
      << "tmux missing (scripts/setup.sh installs it)";
  const std::string sock = dir_.path() + "/tmux.sock";
  const std::string out = dir_.path() + "/size.txt";
  std::string envs;
  for (const auto& [k, v] : env("sh"))
    if (v != "\x01unset") envs += k + "='" + v + "' ";
  const std::string job =
      script("size.sh", "stty size > " + out + "; for i in 1 2 3; do echo line$i; sleep 1; done\n");
  const std::string cmd =
      "env " + envs + test::gpumeter_binary() + " run --price 3600 -- sh " + job + "; sleep 30";
  ASSERT_EQ(std::system(("tmux -S " + sock + " new-session -d -x 120 -y 20 \"" + cmd + "\"").c_str()), 0);
  std::string pane, history;
  bool saw_status = false;
  for (int i = 0; i < 60; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    FILE* p = popen(("tmux -S " + sock + " capture-pane -p").c_str(), "r");
    pane.clear();
    char buf[4096];
    while (p && fgets(buf, sizeof buf, p)) pane += buf;
    if (p) pclose(p);
    // The job's lines may scroll above the 20 visible rows once the report (with its findings) is printed.
    FILE* h = popen(("tmux -S " + sock + " capture-pane -p -S -200").c_str(), "r");
    std::string scrolled;
    while (h && fgets(buf, sizeof buf, h)) scrolled += buf;
    if (h) pclose(h);
    if (!scrolled.empty()) history = scrolled;
    // The status line is the last row while the job runs: elapsed, $ spent, $/h.
    const auto last_row = pane.rfind("gpumeter ");
    if (last_row != std::string::npos && pane.find("/h", last_row) != std::string::npos &&
        pane.find("line1") != std::string::npos && pane.find("line3") == std::string::npos) {
      std::size_t rows = 0;
      for (std::size_t k = 0; k < last_row; ++k) rows += pane[k] == '\n';
      if (rows == 19) saw_status = true;
    }
  }
  std::system(("tmux -S " + sock + " kill-server >/dev/null 2>&1").c_str());
  EXPECT_TRUE(saw_status) << pane;
  EXPECT_EQ(test::read_file(out), "19 120\n") << "the job sees the terminal less the reserved row";
  EXPECT_NE(history.find("line3"), std::string::npos) << history;
}

TEST_F(RunCliIntegrationTest, ActionsGoToNotifyCommandAndWebhook) {
  httplib::Server server;
  std::vector<std::string> bodies;
  std::mutex mu;
  server.Post("/hook", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    bodies.push_back(req.body);
    res.set_content("ok", "text/plain");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread t([&] { server.listen_after_bind(); });
  const std::string events = dir_.path() + "/events";
  auto r =
      run_gpumeter({"run", "--price", "3600", "--budget", "2", "--warn-at", "50%", "--grace", "1s", "--quiet",
                    "--notify", "echo \"$GPUMETER_EVENT $GPUMETER_BUDGET_USD\" >> " + events, "--webhook",
                    "http://127.0.0.1:" + std::to_string(port) + "/hook", "--", "sleep", "20"},
                   env("sleep"), std::nullopt, 30);
  server.stop();
  t.join();
  EXPECT_EQ(r.exit_code, 86) << r.err;
  const std::string ev = test::read_file(events);
  EXPECT_NE(ev.find("warn 2.000000"), std::string::npos) << ev;
  EXPECT_NE(ev.find("stop_budget 2.000000"), std::string::npos) << ev;
  EXPECT_NE(ev.find("sigterm"), std::string::npos) << ev;
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_GE(bodies.size(), 3u);
  bool stop_seen = false;
  for (const auto& b : bodies) {
    auto j = nlohmann::json::parse(b);
    EXPECT_TRUE(j["text"].is_string());
    stop_seen |= j["event"] == "stop_budget";
  }
  EXPECT_TRUE(stop_seen);
}

TEST_F(RunCliIntegrationTest, SimulatedDemoTripsTheForecastStopUnderAMinute) {
  auto e = env("sh");
  e["GPUMETER_FAKE_NVML"] = test::fake_nvml_library();
  e["GPUMETER_PYTHON_DIR"] = test::source_dir() + "/python";
  auto r = run_gpumeter({"demo", "--simulate"}, e, std::nullopt, 90);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_LT(r.wall_s, 60.0);
  EXPECT_NE(r.out.find("SIMULATED"), std::string::npos);
  EXPECT_NE(r.err.find("SIMULATED gpumeter: [stop_forecast]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIMULATED gpumeter run"), std::string::npos) << "the report is marked: " << r.err;
  EXPECT_NE(r.out.find("SIMULATED workload: step"), std::string::npos) << r.out;
}

TEST_F(RunCliIntegrationTest, KillNineLeavesAnInterruptedRunWithItsSeconds) {
  const std::string pidfile = dir_.path() + "/job.pid";
  auto e = env("sh");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    for (const auto& [k, v] : e) {
      if (v == "\x01unset")
        unsetenv(k.c_str());
      else
        setenv(k.c_str(), v.c_str(), 1);
    }
    const int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 1);
    dup2(devnull, 2);
    const std::string body = "echo $$ > " + pidfile + "; exec sleep 30";
    execl(test::gpumeter_binary().c_str(), "gpumeter", "run", "--price", "3600", "--quiet", "--", "sh", "-c",
          body.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string job_pid = test::read_file(pidfile);
  if (!job_pid.empty()) kill(-std::stoi(job_pid), SIGKILL);
  auto r = run_gpumeter({"report", "last", "--json"}, e);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["status"], "interrupted");
  EXPECT_GE(j["wall_s"].get<double>(), 2.0) << "committed seconds are kept";
  EXPECT_GE(j["cost_usd"].get<double>(), 2.0);
  auto runs = run_gpumeter({"runs"}, e);
  EXPECT_NE(runs.out.find("interrupted"), std::string::npos) << runs.out;
}

TEST_F(RunCliIntegrationTest, CorruptLedgerWarnsAndTheJobStillRuns) {
  auto e = env("sh");
  dir_.write("ledger.db", std::string(4096, 'z'));
  auto r = run_gpumeter({"run", "--price", "3600", "--json-report", dir_.path() + "/r.json", "--", "sh", "-c",
                         "echo job-ran; exit 4"},
                        e);
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.out, "job-ran\n");
  EXPECT_NE(r.err.find("not a gpumeter ledger or corrupt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("NOT recorded"), std::string::npos) << r.err;
  EXPECT_EQ(report_json()["exit_code"], 4);
  auto rep = run_gpumeter({"report", "last"}, e);
  EXPECT_EQ(rep.exit_code, 5);
}

TEST_F(RunCliIntegrationTest, LockedLedgerWarnsAndTheJobStillRuns) {
  auto e = env("sh");
  ASSERT_EQ(run_gpumeter({"run", "--price", "3600", "--quiet", "--", "true"}, e).exit_code,
            0);  // creates the ledger
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_.path() + "/ledger.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; DELETE FROM meta WHERE 0;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  auto r = run_gpumeter({"run", "--price", "3600", "--", "sh", "-c", "echo job-ran"}, e);
  sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "job-ran\n");
  EXPECT_NE(r.err.find("locked"), std::string::npos) << r.err;
}

TEST_F(RunCliIntegrationTest, BadInputIsAUsageError) {
  auto e = env("sh");
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"run", "--budget", "-1", "--", "true"}, "--budget"},
      {{"run", "--warn-at", "150%", "--", "true"}, "150%"},
      {{"run", "--offer", "nosuchcloud:nosuchinstance", "--", "true"}, "nosuchcloud"},
      {{"run"}, "no command"},
      {{"run", "--max-idle", "soon", "--", "true"}, "--max-idle"},
      {{"run", "--stop-signal", "NOPE", "--", "true"}, "NOPE"},
      {{"run", "--label", "novalue", "--", "true"}, "--label"},
      {{"report", "abc"}, "abc"},
  };
  for (const auto& c : cases) {
    auto r = run_gpumeter(c.args, e);
    EXPECT_EQ(r.exit_code, 2) << c.needle << ": " << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

}  // namespace
}  // namespace gm
