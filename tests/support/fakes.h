#pragma once
// The tests' fakes, in one place: hand-made GPUs and prices, a process runner that never runs anything, a
// session sink that records what a run shows, a supervisor driven on a fake clock, a fake /proc tree and an
// in-memory ledger; the one fake HTTP client is in fake_http.h (header-only, for the fuzz targets too). The
// library's own fakes (FakeClock, StaticGpuBackend) sit next to their interfaces under src/.
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu.h"
#include "guard/supervisor.h"
#include "meter/meter.h"
#include "store/store.h"
#include "support/fake_http.h"
#include "sys/spawn.h"
#include "util/clock.h"
#include "util/money.h"

namespace gm::test {

// The ledger's record types, named unqualified in the fakes and in the tests that use them.
using store::ActionRecord;
using store::BudgetRecord;
using store::ProgressRecord;
using store::RollupRecord;
using store::RunRecord;
using store::SampleRecord;

// --- GPUs and prices ------------------------------------------------------------------------------

/// GPU `index` of a test node: an 80 GiB H100 named "GPU-<index>".
inline gpu::DeviceInfo h100_info(unsigned index) {
  gpu::DeviceInfo info;
  info.index = index;
  info.name = "NVIDIA H100 80GB HBM3";
  info.uuid = "GPU-" + std::to_string(index);
  info.memory_total_bytes = 80ull << 30;
  return info;
}

/// A one-GPU in-memory backend whose every sample reads `util_pct` and 1 GiB used.
inline gpu::StaticGpuBackend one_static_gpu(std::uint32_t util_pct) {
  gpu::StaticGpuBackend b;
  b.infos.push_back(h100_info(0));
  b.caps.emplace_back();
  gpu::DeviceSample s;
  s.utilization_pct = util_pct;
  s.memory_used_bytes = 1ull << 30;
  b.samples.push_back(s);
  return b;
}

/// A price as `--price usd_per_hour` gives it.
inline meter::PriceQuote flag_price(double usd_per_hour) {
  meter::PriceQuote q;
  q.micros_per_gpu_hour = util::usd_to_micros(usd_per_hour);
  q.origin = meter::PriceOrigin::flag_price;
  q.source = "--price";
  return q;
}

// --- supervised runs ----------------------------------------------------------------------------

/// A run of `argv` on GPU 0 at $1 per GPU-second (so a cost in dollars reads as GPU-seconds).
inline guard::SessionConfig dollar_per_second_session(std::vector<std::string> argv) {
  guard::SessionConfig c;
  for (const auto& a : argv) c.run.command += (c.run.command.empty() ? "" : " ") + a;
  c.argv = std::move(argv);
  meter::PriceQuote price;
  price.micros_per_gpu_hour = 3'600'000'000;
  price.source = "test";
  c.price = price;
  c.allocated = {0};
  return c;
}

/// A process runner that never starts anything: it records the signals sent and reports the job (`pid`
/// alone) as running until the test says otherwise through the supervisor.
class RecordingRunner final : public sys::ProcessRunner {
 public:
  struct Signal {
    pid_t pid;
    int sig;
    bool group;
  };
  Result<sys::SpawnedChild> spawn(const sys::SpawnOptions&) override { return make_error("not used"); }
  bool send_signal(pid_t pid, int sig, bool group) override {
    sent.push_back({pid, sig, group});
    return true;
  }
  std::optional<int> try_wait(pid_t) override { return std::nullopt; }
  std::set<std::uint32_t> job_pids(pid_t pid) override { return {static_cast<std::uint32_t>(pid)}; }
  std::vector<Signal> sent;  ///< in the order sent
};

/// Records what a run shows: the job's output, gpumeter's messages and warnings, the status, actions, cells.
struct RecordingSink final : guard::SessionSink {
  std::string out, err;                ///< the job's output per stream
  std::vector<std::string> messages;   ///< action lines and other messages that are not warnings
  std::vector<std::string> warnings;   ///< gpumeter's own problems
  std::optional<guard::StatusSnapshot> last;  ///< the latest status
  std::vector<double> periodic_at_s;   ///< elapsed seconds of each --status-every line
  std::vector<ActionRecord> actions;
  std::vector<store::CellRecord> cells;
  void job_output(guard::JobStream s, std::string_view b) override {
    (s == guard::JobStream::err ? err : out).append(b);
  }
  void message(const std::string& text, bool warning) override {
    (warning ? warnings : messages).push_back(text);
  }
  void status(const guard::StatusSnapshot& s, bool periodic) override {
    last = s;
    if (periodic) periodic_at_s.push_back(s.elapsed_s);
  }
  void action(const ActionRecord& a) override { actions.push_back(a); }
  void cell(const store::CellRecord& c) override { cells.push_back(c); }
};

/// Advances the fake clock from wake-up to wake-up, calling on_time at each, until `until_s` or the end.
inline void run_until(guard::Supervisor& s, util::FakeClock& clock, double until_s) {
  const auto until = static_cast<std::int64_t>(until_s * 1e9);
  while (!s.done()) {
    const std::int64_t wake = s.next_wake_ns();
    if (wake > until) break;
    clock.advance_ns(wake - clock.monotonic_ns());
    s.on_time();
  }
  if (clock.monotonic_ns() < until) clock.advance_ns(until - clock.monotonic_ns());
}

// --- a fake /proc tree ----------------------------------------------------------------------------

/// A process of a fake /proc tree, as ProcReader and OwnerResolver read it.
struct FakeProcess {
  std::uint32_t pid = 0;
  std::string comm = "python3";
  std::string cgroup;  ///< the text of /proc/PID/cgroup
  std::uint32_t ppid = 1;
  std::uint32_t pgrp = 1;
  std::uint32_t uid = 0;
  std::uint64_t start_ticks = 42;
  /// NUL-separated; holds a secret that must never reach any output.
  std::string cmdline = std::string("python3\0train.py\0--api-key=TOPSECRET\0", 38);
  std::string environ;  ///< NUL-separated; no environ file when empty (unreadable)
};

/// Writes `p` under `proc_root`: stat, comm, status, cgroup, cmdline, environ (when set) and an empty fd/.
inline void write_fake_process(const std::string& proc_root, const FakeProcess& p) {
  const std::string dir = proc_root + "/" + std::to_string(p.pid);
  std::filesystem::create_directories(dir + "/fd");
  auto write = [&](const char* name, const std::string& text) {
    std::ofstream(dir + "/" + name, std::ios::binary) << text;
  };
  write("stat", std::to_string(p.pid) + " (" + p.comm + ") S " + std::to_string(p.ppid) + " " +
                    std::to_string(p.pgrp) + " 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " +
                    std::to_string(p.start_ticks) + " 0 0\n");
  write("comm", p.comm + "\n");
  const std::string uid = std::to_string(p.uid);
  write("status", "Name:\t" + p.comm + "\nUid:\t" + uid + "\t" + uid + "\t" + uid + "\t" + uid + "\n");
  write("cgroup", p.cgroup);
  write("cmdline", p.cmdline);
  if (!p.environ.empty()) write("environ", p.environ);
}

/// Writes process `pid` named `comm` in `cgroup` under `proc_root` (the other fields as FakeProcess has
/// them).
inline void write_fake_process(const std::string& proc_root, std::uint32_t pid, const std::string& comm,
                               const std::string& cgroup) {
  FakeProcess p;
  p.pid = pid;
  p.comm = comm;
  p.cgroup = cgroup;
  write_fake_process(proc_root, p);
}

// --- an in-memory ledger --------------------------------------------------------------------------

/// An in-memory Ledger for tests of reports and budgets (the SQLite and PostgreSQL ledgers are tested on
/// their own).
class MemoryLedger : public store::Ledger {
 public:
  void add_run(RunRecord r) { runs_.push_back(std::move(r)); }
  void add_rollup(RollupRecord r) { rollups_.push_back(r); }
  void add_progress(ProgressRecord p) { progress_.push_back(std::move(p)); }

  std::string describe() const override { return "memory"; }
  std::string backend() const override { return "memory"; }
  Result<int> schema_version() const override { return store::Ledger::kSchemaVersion; }
  Result<store::ImportOutcome> import_run(const store::RunBundle& b, const std::string&,
                                          std::int64_t) override {
    GM_TRY(std::int64_t id, begin_run(b.run));
    return store::ImportOutcome{id, true};
  }
  Result<void> set_budget(const BudgetRecord& b) override {
    budgets_.push_back(b);
    return ok_result();
  }
  Result<std::vector<BudgetRecord>> budgets() const override { return budgets_; }
  Result<void> remove_budget(const std::string&) override { return make_error(ErrorKind::not_found, "none"); }
  Result<store::SelectorSpend> selector_spend(const std::string& key, const std::string& value,
                                              std::int64_t since, std::int64_t exclude) const override {
    store::SelectorSpend s;
    for (const auto& r : runs_)
      if (r.id != exclude && r.start_unix_ms >= since && store::run_matches(r, key, value)) {
        s.spent_micros += r.cost_micros;
        ++s.runs;
      }
    return s;
  }

  Result<std::int64_t> begin_run(const RunRecord& run) override {
    runs_.push_back(run);
    runs_.back().id = static_cast<std::int64_t>(runs_.size());
    return runs_.back().id;
  }
  Result<void> update_run(const RunRecord& run) override {
    for (auto& r : runs_)
      if (r.id == run.id) r = run;
    return ok_result();
  }
  Result<void> append(const std::vector<SampleRecord>& s, const std::vector<ProgressRecord>& p,
                      const std::vector<ActionRecord>& a) override {
    samples_.insert(samples_.end(), s.begin(), s.end());
    progress_.insert(progress_.end(), p.begin(), p.end());
    actions_.insert(actions_.end(), a.begin(), a.end());
    return ok_result();
  }
  Result<void> append_rollups(const std::vector<RollupRecord>& r) override {
    rollups_.insert(rollups_.end(), r.begin(), r.end());
    return ok_result();
  }
  Result<RunRecord> run(std::int64_t id) const override {
    for (const auto& r : runs_)
      if (r.id == id) return r;
    return make_error(ErrorKind::not_found, "no run " + std::to_string(id));
  }
  Result<RunRecord> last_run() const override {
    if (runs_.empty()) return make_error(ErrorKind::not_found, "the ledger has no runs");
    return *std::max_element(runs_.begin(), runs_.end(), [](auto& a, auto& b) { return a.id < b.id; });
  }
  Result<std::vector<RunRecord>> runs(const store::RunFilter& f) const override {
    std::vector<RunRecord> out;
    for (const auto& r : runs_) {
      if (f.since_unix_ms && r.start_unix_ms < *f.since_unix_ms) continue;
      if (f.until_unix_ms && r.start_unix_ms >= *f.until_unix_ms) continue;
      out.push_back(r);
    }
    std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.id > b.id; });
    return out;
  }
  Result<std::vector<SampleRecord>> samples(std::int64_t id) const override { return filter(samples_, id); }
  Result<std::vector<ProgressRecord>> progress(std::int64_t id) const override {
    return filter(progress_, id);
  }
  Result<std::vector<ActionRecord>> actions(std::int64_t id) const override { return filter(actions_, id); }
  Result<std::vector<RollupRecord>> rollups(const store::RunFilter& f) const override {
    std::vector<RollupRecord> out;
    for (const auto& r : rollups_) {
      if (f.since_unix_ms && r.minute_unix * 60'000 < *f.since_unix_ms / 60'000 * 60'000) continue;
      if (f.until_unix_ms && r.minute_unix * 60'000 >= *f.until_unix_ms) continue;
      out.push_back(r);
    }
    return out;
  }

 private:
  template <class T>
  static std::vector<T> filter(const std::vector<T>& v, std::int64_t id) {
    std::vector<T> out;
    for (const auto& x : v)
      if (x.run_id == id) out.push_back(x);
    return out;
  }
  std::vector<RunRecord> runs_;
  std::vector<SampleRecord> samples_;
  std::vector<ProgressRecord> progress_;
  std::vector<ActionRecord> actions_;
  std::vector<RollupRecord> rollups_;
  std::vector<BudgetRecord> budgets_;
};

}  // namespace gm::test
