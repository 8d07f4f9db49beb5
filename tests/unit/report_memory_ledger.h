#pragma once
// An in-memory Ledger for unit tests of reports (the SQLite ledger is tested on its own).
#include <algorithm>

#include "store/store.h"

namespace gm::test {

class MemoryLedger : public Ledger {
 public:
  void add_run(RunRecord r) { runs_.push_back(std::move(r)); }
  void add_rollup(RollupRecord r) { rollups_.push_back(r); }
  void add_progress(ProgressRecord p) { progress_.push_back(std::move(p)); }

  std::string describe() const override { return "memory"; }
  std::string backend() const override { return "memory"; }
  Result<int> schema_version() const override { return Ledger::kSchemaVersion; }
  Result<ImportOutcome> import_run(const RunBundle& b, const std::string&, std::int64_t) override {
    GM_TRY(std::int64_t id, begin_run(b.run));
    return ImportOutcome{id, true};
  }
  Result<void> set_budget(const BudgetRecord& b) override {
    budgets_.push_back(b);
    return ok_result();
  }
  Result<std::vector<BudgetRecord>> budgets() const override { return budgets_; }
  Result<void> remove_budget(const std::string&) override { return make_error(ErrorKind::not_found, "none"); }
  Result<SelectorSpend> selector_spend(const std::string& key, const std::string& value, std::int64_t since,
                                       std::int64_t exclude) const override {
    SelectorSpend s;
    for (const auto& r : runs_)
      if (r.id != exclude && r.start_unix_ms >= since && run_matches(r, key, value)) {
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
  Result<std::vector<RunRecord>> runs(const RunFilter& f) const override {
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
  Result<std::vector<ProgressRecord>> progress(std::int64_t id) const override { return filter(progress_, id); }
  Result<std::vector<ActionRecord>> actions(std::int64_t id) const override { return filter(actions_, id); }
  Result<std::vector<RollupRecord>> rollups(const RunFilter& f) const override {
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
