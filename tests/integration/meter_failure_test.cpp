// The job is never harmed by the meter (issue 16): with gpumeter's own parts failing — a locked ledger, a
// webhook that never answers, a --notify command that fails or hangs, a progress socket flooded by the job —
// the job's output bytes and exit status are those of a run without gpumeter, and gpumeter adds little time.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "support/support.h"

namespace gm {
namespace {

using test::run_gpumeter;
using test::TempDir;

/// One H100 running `python3`; with `hang`, every NVML call on it blocks for 5 s from the start.
std::string scenario(bool hang = false) {
  return std::string(R"({"driver_version": "580.95.05", "devices": [{"name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-99999999-2222-3333-4444-555555555555", "pci_bus_id": "00000000:18:00.0",
    "memory_total_mib": 81559, "power_limit_w": 700, "energy_counter": true, "mig": false,
    "timeline": [{"t": 0, "util": 90, "mem_used_mib": 1000, "power_w": 600, "temp_c": 50,
                  "processes": [{"comm": "python3", "mem_mib": 900, "sm_util": 90}]}])") +
         (hang ? R"(, "faults": [{"t": 0, "until": 100000, "function": "*", "hang_ms": 5000}])" : "") + "}]}";
}

/// A TCP server on loopback that accepts connections and never answers (a hung webhook endpoint).
class SilentServer {
 public:
  SilentServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(fd_, 16);
  }
  ~SilentServer() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

class MeterFailureIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(test::fake_nvml_library()));
    job_ = dir_.write("job.py",
                      "import os, socket, sys, threading, time\n"
                      "flood = len(sys.argv) > 1\n"
                      "def spam():\n"
                      "    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.setblocking(False)\n"
                      "    msg = b'{\"step\": 1, \"total_steps\": 10}'\n"
                      "    while True:\n"
                      "        try: s.sendto(msg, os.environ['GPUMETER_SOCKET'])\n"
                      "        except (BlockingIOError, KeyError, OSError): pass\n"
                      "if flood: threading.Thread(target=spam, daemon=True).start()\n"
                      "for i in range(300):\n"
                      "    print(f'line {i} ' + 'x' * (i % 50), flush=True)\n"
                      "    if i % 3 == 0: print(f'err {i}', file=sys.stderr, flush=True)\n"
                      "    time.sleep(0.005)\n"
                      "sys.exit(3)\n");
    baseline_ = test::run_command({"/usr/bin/python3", job_});
    ASSERT_EQ(baseline_.exit_code, 3) << baseline_.err;
  }
  std::map<std::string, std::string> env(bool hang = false) {
    auto e = test::fake_env(dir_.write("scenario.json", scenario(hang)), dir_.path());
    e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
    return e;
  }
  /// The job under gpumeter gives the baseline's bytes and status, within `extra_s` of its time.
  void expect_unharmed(const test::CmdResult& r, double extra_s, const std::string& row) {
    EXPECT_EQ(r.exit_code, 3) << row << ": " << r.err;
    EXPECT_EQ(r.out, baseline_.out) << row;
    std::string job_err;
    for (std::size_t at = 0; (at = r.err.find("err ", at)) != std::string::npos;) {
      const auto end = r.err.find('\n', at);
      job_err += r.err.substr(at, end - at + 1);
      at = end;
    }
    EXPECT_EQ(job_err, baseline_.err) << row;
    EXPECT_LT(r.wall_s, baseline_.wall_s + extra_s) << row;
  }
  TempDir dir_;
  std::string job_;
  test::CmdResult baseline_;
};

TEST_F(MeterFailureIntegrationTest, LockedLedger) {
  auto e = env();
  ASSERT_EQ(run_gpumeter({"run", "--price", "3600", "--quiet", "--", "true"}, e).exit_code, 0);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_.path() + "/ledger.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; DELETE FROM meta WHERE 0;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  auto r = run_gpumeter({"run", "--price", "3600", "/usr/bin/python3", job_}, e);
  sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  expect_unharmed(r, 4.0, "locked ledger");
}

TEST_F(MeterFailureIntegrationTest, HangingWebhookAndFailingOrHangingNotifyCommand) {
  SilentServer hung;
  const std::string url = "http://127.0.0.1:" + std::to_string(hung.port()) + "/hook";
  // A warning fires at once ($1/s, 0.01 % of $1000 = $0.10), so every notifier runs while the job does.
  auto r = run_gpumeter({"run", "--price", "3600", "--budget", "1000", "--warn-at", "0.01%", "--webhook", url,
                         "/usr/bin/python3", job_},
                        env());
  expect_unharmed(r, 4.0, "hanging webhook");
  r = run_gpumeter({"run", "--price", "3600", "--budget", "1000", "--warn-at", "0.01%", "--notify", "exit 9",
                    "/usr/bin/python3", job_},
                   env());
  expect_unharmed(r, 3.0, "failing notify command");
  r = run_gpumeter({"run", "--price", "3600", "--budget", "1000", "--warn-at", "0.01%", "--notify",
                    "sleep 30", "/usr/bin/python3", job_},
                   env());
  expect_unharmed(r, 4.0, "hanging notify command");
  EXPECT_NE(r.err.find("abandoned"), std::string::npos) << r.err;
}

TEST_F(MeterFailureIntegrationTest, NvmlHangingOnEveryCall) {
  // The first hung call (bounded at 1 s) marks the GPU unresponsive; no call is made on it after that.
  auto r = run_gpumeter({"run", "--price", "3600", "--quiet", "/usr/bin/python3", job_}, env(true));
  expect_unharmed(r, 3.0, "NVML hanging on every call");
}

TEST_F(MeterFailureIntegrationTest, ProgressSocketFloodedByTheJob) {
  // The job's own flooding thread costs it time with or without gpumeter: compare with the job flooding
  // alone.
  baseline_ = test::run_command({"/usr/bin/python3", job_, "flood"});
  ASSERT_EQ(baseline_.exit_code, 3);
  auto flooded =
      run_gpumeter({"run", "--price", "3600", "--quiet", "/usr/bin/python3", job_, "flood"}, env());
  expect_unharmed(flooded, 3.0, "flooded progress socket");
}

}  // namespace
}  // namespace gm
