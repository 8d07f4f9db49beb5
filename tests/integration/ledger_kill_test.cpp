// The ledger under faults, with the real binary on the fake NVML: `gpumeter run` SIGKILLed at random points
// (before the ledger is open, inside its transactions, right after a commit, while another connection runs
// WAL checkpoints) 100 times; the ledger directory read-only; the file size limit reached (a full disk).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/support.h"

namespace gm {
namespace {

using test::run_gpumeter;
using test::TempDir;
using Clock = std::chrono::steady_clock;

std::string scenario() {
  return R"({"driver_version": "580.95.05", "devices": [{"name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-11111111-2222-3333-4444-555555555555", "memory_total_mib": 81559, "power_limit_w": 700,
    "timeline": [{"t": 0, "util": 97, "mem_used_mib": 61000, "power_w": 650, "temp_c": 60,
                  "processes": [{"comm": "sleep", "mem_mib": 60500, "sm_util": 97}]}]}]})";
}

std::map<std::string, std::string> lane_env(const TempDir& dir) {
  auto e = test::fake_env(dir.write("scenario.json", scenario()), dir.path());
  e["CUDA_VISIBLE_DEVICES"] = "\x01unset";
  return e;
}

/// A run that ended by itself and was recorded to its end ("finished"; "succeeded" in newer ledgers).
bool ended_by_itself(const nlohmann::json& status) { return status == "finished" || status == "succeeded"; }

/// argv and envp prepared before fork(), so the child of a multi-threaded test only calls async-signal-safe
/// functions before exec.
struct Exec {
  std::vector<std::string> args, envs;
  std::vector<char*> argv, envp;
  Exec(const std::vector<std::string>& a, const std::map<std::string, std::string>& env) : args(a) {
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
    for (const auto& [k, v] : all) envs.push_back(k + "=" + v);
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : envs) envp.push_back(s.data());
    envp.push_back(nullptr);
  }
  pid_t start(const std::string& out_path) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (out >= 0) {
        dup2(out, 1);
        dup2(out, 2);
      }
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    return pid;
  }
};

/// What a reader saw committed in the ledger: the newest run and its samples.
struct Committed {
  std::int64_t run_id = 0;
  std::int64_t samples = 0;
  std::int64_t last_t_ms = -1;
  std::int64_t cost_micros = 0;
};

/// Reads the committed state with a plain SQLite connection (as any reader would); nullopt if unreadable.
std::optional<Committed> read_committed(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return std::nullopt;
  }
  sqlite3_busy_timeout(db, 2000);
  Committed c;
  sqlite3_stmt* st = nullptr;
  bool ok = true;
  // One read transaction: the run and its samples from the same snapshot.
  sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
  if (sqlite3_prepare_v2(
          db,
          "SELECT r.id, count(s.t_ms), coalesce(max(s.t_ms), -1), coalesce(sum(s.cost_micros), 0) "
          "FROM (SELECT id FROM runs ORDER BY id DESC LIMIT 1) r LEFT JOIN samples s ON s.run_id = r.id "
          "GROUP BY r.id",
          -1, &st, nullptr) == SQLITE_OK) {
    const int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
      c.run_id = sqlite3_column_int64(st, 0);
      c.samples = sqlite3_column_int64(st, 1);
      c.last_t_ms = sqlite3_column_int64(st, 2);
      c.cost_micros = sqlite3_column_int64(st, 3);
    } else if (rc != SQLITE_DONE) {
      ok = false;
    }
  } else {
    // No tables yet: the ledger was never opened by gpumeter (killed before), nothing committed.
    const std::string msg = sqlite3_errmsg(db);
    ok = msg.find("no such table") != std::string::npos;
  }
  sqlite3_finalize(st);
  sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  if (!ok) return std::nullopt;
  return c;
}

std::string integrity(const std::string& path) {
  sqlite3* db = nullptr;
  std::string out = "cannot open";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 2000);
    sqlite3_stmt* st = nullptr;
    out = "cannot check";
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return out;
}

/// One lane: its own ledger, killed `kills` times; failures are collected as text.
void kill_lane(int lane, int kills, std::atomic<int>& done_kills, std::vector<std::string>& failures,
               std::mutex& mu) {
  TempDir dir;
  const auto env = lane_env(dir);
  const std::string ledger = dir.path() + "/ledger.db";
  std::mt19937 rng(static_cast<unsigned>(1234 + lane));
  auto fail = [&](int i, const std::string& what) {
    std::lock_guard lock(mu);
    failures.push_back("lane " + std::to_string(lane) + " kill " + std::to_string(i) + ": " + what);
  };
  // WAL checkpoints racing the writer from another connection, as a backup tool or a report would.
  std::atomic<bool> stop{false};
  std::thread checkpointer([&] {
    std::mt19937 r2(static_cast<unsigned>(99 + lane));
    while (!stop) {
      sqlite3* db = nullptr;
      if (std::filesystem::exists(ledger) &&
          sqlite3_open_v2(ledger.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 200);
        sqlite3_exec(db, r2() % 4 == 0 ? "PRAGMA wal_checkpoint(TRUNCATE)" : "PRAGMA wal_checkpoint(PASSIVE)",
                     nullptr, nullptr, nullptr);
      }
      sqlite3_close(db);
      std::this_thread::sleep_for(std::chrono::milliseconds(40 + r2() % 80));
    }
  });

  std::int64_t runs_seen = 0;
  for (int i = 0; i < kills; ++i) {
    // The job ends by itself once its gpumeter is gone (or after 30 s): no orphan outlives the test.
    Exec run({test::gpumeter_binary(), "run", "--price", "3600", "--quiet", "--", "sh", "-c",
              "p=$PPID; i=0; while [ $p != 1 ] && [ $i -lt 150 ] && kill -0 $p 2>/dev/null; do i=$((i+1)); "
              "sleep 0.2; done"},
             env);
    const auto before_start = read_committed(ledger);
    const pid_t pid = run.start(dir.path() + "/run.out");
    if (pid < 0) {
      fail(i, "fork failed");
      break;
    }
    // Where to kill: during start-up (ledger open, schema, first insert), at a random time, or right after
    // the n-th committed second (when the run totals and rollups are being written).
    const auto how = static_cast<unsigned>(rng() % 3);
    std::optional<Committed> seen;
    if (how == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 150'000));
      seen = read_committed(ledger);
    } else if (how == 1) {
      const auto until = Clock::now() + std::chrono::microseconds(rng() % 2'400'000);
      while (Clock::now() < until) {
        seen = read_committed(ledger);
        std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 40));
      }
      seen = read_committed(ledger);
    } else {
      const auto want = static_cast<std::int64_t>(1 + rng() % 2);
      const auto give_up = Clock::now() + std::chrono::seconds(4);
      while (Clock::now() < give_up) {
        seen = read_committed(ledger);
        if (seen && seen->run_id > (before_start ? before_start->run_id : 0) && seen->samples >= want) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ++done_kills;
    if (!WIFSIGNALED(status)) {
      fail(i, "gpumeter ended before the kill: " + test::read_file(dir.path() + "/run.out"));
      continue;
    }
    // Killed before it created the ledger file: nothing was written, nothing to check.
    if (!std::filesystem::exists(ledger)) continue;
    // The ledger opens and is intact; `runs` lists the run as interrupted; what was committed is still there.
    const std::string check = integrity(ledger);
    if (std::filesystem::exists(ledger) && check != "ok") fail(i, "integrity_check: " + check);
    const auto runs = run_gpumeter({"runs", "--json"}, env, std::nullopt, 30);
    if (runs.exit_code != 0) {
      fail(i, "runs exit " + std::to_string(runs.exit_code) + ": " + runs.err);
      continue;
    }
    const auto list = nlohmann::json::parse(runs.out, nullptr, false);
    if (!list.is_array()) {
      fail(i, "runs --json is not an array: " + runs.out);
      continue;
    }
    const auto after = read_committed(ledger);
    if (seen && seen->run_id > 0 && (!after || after->run_id < seen->run_id)) {
      fail(i, "run " + std::to_string(seen->run_id) + " was committed and is gone");
      continue;
    }
    if (list.size() < static_cast<std::size_t>(runs_seen)) fail(i, "runs were lost");
    runs_seen = static_cast<std::int64_t>(list.size());
    if (list.empty()) continue;  // killed before its first insert
    const auto& newest = list.front();
    if (newest["status"] != "interrupted") fail(i, "the killed run reads as " + newest["status"].dump());
    if (seen && after && seen->run_id == after->run_id) {
      if (after->samples < seen->samples || after->last_t_ms < seen->last_t_ms)
        fail(i, "committed seconds lost: " + std::to_string(seen->samples) +
                    " samples seen before the kill, " + std::to_string(after->samples) + " after");
      if (newest["run_id"].get<std::int64_t>() == seen->run_id) {
        // The interrupted run's figures include every committed second.
        if (newest["wall_s"].get<double>() * 1000.0 + 0.5 < static_cast<double>(seen->last_t_ms))
          fail(i, "wall_s " + newest["wall_s"].dump() + " is short of the last committed second");
        if (newest["cost_usd"].get<double>() * 1e6 + 0.5 < static_cast<double>(seen->cost_micros))
          fail(i, "cost_usd " + newest["cost_usd"].dump() + " is short of the committed samples");
      }
    }
  }
  stop = true;
  checkpointer.join();
  // The next run works and is recorded in full.
  const auto r =
      run_gpumeter({"run", "--price", "3600", "--quiet", "--", "sleep", "1.2"}, env, std::nullopt, 60);
  if (r.exit_code != 0) fail(kills, "the next run failed: " + r.err);
  const auto runs = run_gpumeter({"runs", "--json"}, env, std::nullopt, 30);
  const auto list = nlohmann::json::parse(runs.out, nullptr, false);
  if (!list.is_array() || list.empty() || !ended_by_itself(list.front()["status"]))
    fail(kills, "the next run is not listed as finished: " + runs.out + runs.err);
  else if (list.front()["billed_s"].get<std::int64_t>() < 2)
    fail(kills, "the next run was billed " + list.front()["billed_s"].dump() + " s");
  const std::string check = integrity(ledger);
  if (check != "ok") fail(kills, "integrity_check at the end: " + check);
}

class LedgerKillIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { GM_ASSERT_BUILT(); }
};

TEST_F(LedgerKillIntegrationTest, HundredKillsLoseNoCommittedSecond) {
  constexpr int kLanes = 4, kKillsPerLane = 25;
  const auto start = Clock::now();
  std::atomic<int> kills{0};
  std::vector<std::string> failures;
  std::mutex mu;
  std::vector<std::thread> lanes;
  for (int l = 0; l < kLanes; ++l)
    lanes.emplace_back([&, l] { kill_lane(l, kKillsPerLane, kills, failures, mu); });
  for (auto& t : lanes) t.join();
  const double took_s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(kills.load(), kLanes * kKillsPerLane);
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_LT(took_s, 90.0) << "the kill loop must stay bounded";
  RecordProperty("kills", kills.load());
  RecordProperty("seconds", std::to_string(took_s));
}

/// Runs `gpumeter run` with RLIMIT_FSIZE set to `limit_bytes` (a full disk, as the kernel reports it to a
/// writer).
test::CmdResult run_with_file_limit(const std::vector<std::string>& args,
                                    const std::map<std::string, std::string>& env, rlim_t limit_bytes,
                                    double timeout_s) {
  std::vector<std::string> argv{"/bin/sh", "-c",
                                "ulimit -f " + std::to_string(limit_bytes / 512) + " && exec \"$@\"", "sh",
                                test::gpumeter_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return test::run_command(argv, env, std::nullopt, timeout_s);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

TEST_F(LedgerKillIntegrationTest, FullDiskKeepsTheJobRunningAndWhatWasWritten) {
  TempDir dir;
  const auto env = lane_env(dir);
  const std::string ledger = dir.path() + "/ledger.db";
  // A first run fills the ledger with what must survive.
  auto first =
      run_gpumeter({"run", "--price", "3600", "--quiet", "--", "sleep", "1.5"}, env, std::nullopt, 60);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto kept = read_committed(ledger);
  ASSERT_TRUE(kept && kept->samples >= 1);
  // Check-point it so the database file holds it, then let the files grow by no more than a few KiB.
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(ledger.c_str(), &db), SQLITE_OK);
    sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  const auto size = std::filesystem::file_size(ledger);
  // The job writes its own output and exits 3 after 4 s: its status and bytes must come through unchanged.
  const auto r = run_with_file_limit({"run", "--price", "3600", "--quiet", "--", "sh", "-c",
                                      "for i in 1 2 3 4; do echo tick $i; sleep 1; done; exit 3"},
                                     env, static_cast<rlim_t>(size), 60);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, "tick 1\ntick 2\ntick 3\ntick 4\n");
  EXPECT_GE(r.wall_s, 3.5);
  EXPECT_NE(lower(r.err).find("not recorded"), std::string::npos) << r.err;
  EXPECT_LE(count_of(r.err, "warning"), 2u) << "said once:\n" << r.err;
  // Nothing already written is lost; the ledger is intact and the next run (no limit) is recorded.
  EXPECT_EQ(integrity(ledger), "ok");
  const auto runs = run_gpumeter({"runs", "--json"}, env);
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  const auto list = nlohmann::json::parse(runs.out);
  bool found = false;
  for (const auto& run : list) found = found || run["run_id"].get<std::int64_t>() == kept->run_id;
  EXPECT_TRUE(found) << runs.out;
  const auto after = read_committed(ledger);
  ASSERT_TRUE(after.has_value());
  auto next = run_gpumeter({"run", "--price", "3600", "--quiet", "--", "true"}, env);
  EXPECT_EQ(next.exit_code, 0) << next.err;
  const auto runs2 = nlohmann::json::parse(run_gpumeter({"runs", "--json"}, env).out);
  EXPECT_TRUE(ended_by_itself(runs2.front()["status"])) << runs2.front()["status"];
}

TEST_F(LedgerKillIntegrationTest, ReadOnlyLedgerDirectoryKeepsTheJobRunningAndTheRuns) {
  TempDir dir;
  auto env = lane_env(dir);
  const std::string ledger_dir = dir.path() + "/ledger";
  const std::string ledger = ledger_dir + "/ledger.db";
  env["GPUMETER_LEDGER"] = ledger;
  auto first =
      run_gpumeter({"run", "--price", "3600", "--quiet", "--", "sleep", "1.2"}, env, std::nullopt, 60);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto kept = read_committed(ledger);
  ASSERT_TRUE(kept && kept->samples >= 1);
  // Read-only for the user running gpumeter: root ignores permission bits, so as root gpumeter runs as nobody
  // (the files stay root's); otherwise the directory and file lose their write bits.
  std::vector<std::string> as_user{test::gpumeter_binary()};
  if (geteuid() == 0) {
    as_user = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", test::gpumeter_binary()};
    chmod(dir.path().c_str(), 0755);
    chmod(ledger_dir.c_str(), 0755);
    chmod(ledger.c_str(), 0644);
  } else {
    chmod(ledger_dir.c_str(), 0500);
    chmod(ledger.c_str(), 0400);
  }
  auto cmd = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = as_user;
    argv.insert(argv.end(), args.begin(), args.end());
    return test::run_command(argv, env, std::nullopt, 60);
  };
  const auto r =
      cmd({"run", "--price", "3600", "--quiet", "--", "sh", "-c", "echo job-ran; sleep 1; exit 5"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_EQ(r.out, "job-ran\n");
  EXPECT_NE(lower(r.err).find("not recorded"), std::string::npos) << r.err;
  EXPECT_LE(count_of(r.err, "warning"), 2u) << "said once:\n" << r.err;
  // The runs already written can still be listed from the read-only ledger.
  const auto listed = cmd({"runs", "--json"});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  const auto list = nlohmann::json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(list.is_array()) << listed.out;
  ASSERT_EQ(list.size(), 1u) << listed.out;
  EXPECT_EQ(list.front()["run_id"].get<std::int64_t>(), kept->run_id);
  EXPECT_TRUE(ended_by_itself(list.front()["status"])) << list.front()["status"];
  chmod(ledger_dir.c_str(), 0700);
  chmod(ledger.c_str(), 0600);
  EXPECT_EQ(integrity(ledger), "ok");
  const auto after = read_committed(ledger);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->samples, kept->samples);
}

}  // namespace
}  // namespace gm
