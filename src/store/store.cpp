#include "store/store.h"

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_map>

#include "store/detail.h"

namespace gm {
namespace {

// 1: the first schema. 2: runs.budget_usd REAL became runs.budget_micros INTEGER (money in micro-dollars).
// 3: team budgets and the keys of imported runs (kSchemaV2's tables).
constexpr int kSchemaVersion = Ledger::kSchemaVersion;
using namespace store_detail;

const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  command TEXT NOT NULL, user TEXT NOT NULL, host TEXT NOT NULL, labels_json TEXT NOT NULL,
  start_unix_ms INTEGER NOT NULL, end_unix_ms INTEGER, status TEXT NOT NULL, exit_code INTEGER,
  stopped_by TEXT, price_micros_per_gpu_hour INTEGER NOT NULL, price_source TEXT NOT NULL,
  provider TEXT NOT NULL, region TEXT NOT NULL, billing_granularity_s INTEGER NOT NULL,
  billing_minimum_s INTEGER NOT NULL, gpus_allocated_json TEXT NOT NULL, gpus_used_json TEXT NOT NULL,
  gpu_model TEXT NOT NULL, budget_micros INTEGER, total_steps INTEGER, wall_ms INTEGER NOT NULL,
  billed_s INTEGER NOT NULL, cost_micros INTEGER NOT NULL, idle_cost_micros INTEGER NOT NULL,
  unused_gpu_cost_micros INTEGER NOT NULL, energy_j REAL NOT NULL, energy_method TEXT NOT NULL,
  co2_kg REAL, carbon_source TEXT NOT NULL, forecast_cost_usd REAL, meter_pid INTEGER NOT NULL,
  meter_host TEXT NOT NULL, heartbeat_unix_ms INTEGER NOT NULL, steps INTEGER, samples_done INTEGER,
  tokens_done INTEGER, preempt_provider TEXT, preempt_notice_unix_ms INTEGER, preempt_deadline_unix_ms INTEGER,
  last_checkpoint_ms INTEGER, lost_work_micros INTEGER, flops_per_token REAL, mfu_basis TEXT, mfu_precision TEXT);
CREATE INDEX IF NOT EXISTS runs_start ON runs(start_unix_ms);
CREATE TABLE IF NOT EXISTS samples (
  run_id INTEGER NOT NULL, t_ms INTEGER NOT NULL, gpu_index INTEGER NOT NULL, gpu_uuid TEXT NOT NULL,
  utilization_pct REAL, memory_used_bytes INTEGER, power_w REAL, temperature_c REAL,
  energy_j REAL NOT NULL, cost_micros INTEGER NOT NULL, job_present INTEGER NOT NULL,
  gpm_sm_active_pct REAL, gpm_sm_occupancy_pct REAL, gpm_tensor_active_pct REAL, gpm_fp32_active_pct REAL,
  gpm_fp16_active_pct REAL, gpm_fp64_active_pct REAL, gpm_dram_bw_util_pct REAL);
CREATE INDEX IF NOT EXISTS samples_run ON samples(run_id, t_ms);
CREATE TABLE IF NOT EXISTS progress (
  run_id INTEGER NOT NULL, t_ms INTEGER NOT NULL, step INTEGER, total_steps INTEGER, samples INTEGER,
  tokens INTEGER, metrics_json TEXT NOT NULL, cost_micros INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS progress_run ON progress(run_id, t_ms);
CREATE TABLE IF NOT EXISTS actions (
  run_id INTEGER NOT NULL, t_ms INTEGER NOT NULL, kind TEXT NOT NULL, cost_micros INTEGER NOT NULL,
  message TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS actions_run ON actions(run_id, t_ms);
CREATE TABLE IF NOT EXISTS rollups (
  run_id INTEGER NOT NULL, minute_unix INTEGER NOT NULL, gpu_index INTEGER NOT NULL, samples INTEGER NOT NULL,
  utilization_sum_pct REAL NOT NULL, memory_max_bytes REAL NOT NULL, energy_j REAL NOT NULL,
  cost_micros INTEGER NOT NULL, PRIMARY KEY (run_id, minute_unix, gpu_index));
CREATE INDEX IF NOT EXISTS rollups_minute ON rollups(minute_unix);
CREATE TABLE IF NOT EXISTS inference (
  run_id INTEGER NOT NULL, t_ms INTEGER NOT NULL, model TEXT NOT NULL, engine TEXT NOT NULL,
  prompt_tokens REAL, generated_tokens REAL, cached_tokens REAL, requests REAL, cost_micros INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS inference_run ON inference(run_id, t_ms);
CREATE TABLE IF NOT EXISTS cells (
  run_id INTEGER NOT NULL, cell_id INTEGER NOT NULL, start_ms INTEGER NOT NULL, end_ms INTEGER NOT NULL,
  cost_micros INTEGER NOT NULL, utilization_pct REAL, status TEXT NOT NULL, source TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS cells_run ON cells(run_id, start_ms);
)sql";

/// Schema version 2 (issue 29): team budgets, and the keys of imported runs (idempotent copy and replay).
const char* kSchemaV2 = R"sql(
CREATE TABLE IF NOT EXISTS budgets (
  selector TEXT PRIMARY KEY, limit_micros INTEGER NOT NULL, period TEXT NOT NULL, updated_unix_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS imports (
  import_key TEXT PRIMARY KEY, run_id INTEGER NOT NULL, imported_unix_ms INTEGER NOT NULL);
)sql";

/// RAII prepared statement with typed binders and readers.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) { rc_ = sqlite3_prepare_v2(db, sql, -1, &st_, nullptr); }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  void bind(int i, std::int64_t v) { sqlite3_bind_int64(st_, i, v); }
  void bind(int i, double v) { sqlite3_bind_double(st_, i, v); }
  void bind(int i, const std::string& v) { sqlite3_bind_text(st_, i, v.c_str(), -1, SQLITE_TRANSIENT); }
  void bind_null(int i) { sqlite3_bind_null(st_, i); }
  template <class T>
  void bind(int i, const std::optional<T>& v) {
    if (v) bind(i, static_cast<std::conditional_t<std::is_floating_point_v<T>, double,
                                                  std::conditional_t<std::is_integral_v<T>, std::int64_t, T>>>(*v));
    else bind_null(i);
  }
  int step() { return sqlite3_step(st_); }
  void reset() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  bool is_null(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
  std::int64_t i64(int c) const { return sqlite3_column_int64(st_, c); }
  double f64(int c) const { return sqlite3_column_double(st_, c); }
  std::string text(int c) const {
    const auto* p = sqlite3_column_text(st_, c);
    return p ? reinterpret_cast<const char*>(p) : "";
  }
  std::string_view view(int c) const {
    const auto* p = sqlite3_column_text(st_, c);
    if (!p) return {};
    return {reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(st_, c))};
  }
  std::optional<std::int64_t> oi64(int c) const { return is_null(c) ? std::nullopt : std::optional(i64(c)); }
  std::optional<double> of64(int c) const { return is_null(c) ? std::nullopt : std::optional(f64(c)); }
  std::optional<std::string> otext(int c) const { return is_null(c) ? std::nullopt : std::optional(text(c)); }
  std::string errmsg() const { return sqlite3_errmsg(db_); }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

/// Columns added to `runs` after the first release (issue 28): added to older ledgers when opened.
/// Sample columns added after their table (GPM activity, issue 37): NULL in older rows.
const char* kSampleColumnsAdded[][2] = {{"gpm_sm_active_pct", "REAL"},     {"gpm_sm_occupancy_pct", "REAL"},
                                        {"gpm_tensor_active_pct", "REAL"}, {"gpm_fp32_active_pct", "REAL"},
                                        {"gpm_fp16_active_pct", "REAL"},   {"gpm_fp64_active_pct", "REAL"},
                                        {"gpm_dram_bw_util_pct", "REAL"}};

const char* kRunColumnsAdded[][2] = {{"preempt_provider", "TEXT"},
                                     {"preempt_notice_unix_ms", "INTEGER"},
                                     {"preempt_deadline_unix_ms", "INTEGER"},
                                     {"last_checkpoint_ms", "INTEGER"},
                                     {"lost_work_micros", "INTEGER"},
                                     {"flops_per_token", "REAL"},
                                     {"mfu_basis", "TEXT"},
                                     {"mfu_precision", "TEXT"}};

/// The run columns to SELECT from a ledger of schema `version` (a version-1 ledger opened read-only still
/// holds budget_usd in dollars).
std::string run_select_columns(int version) {
  std::string cols = run_columns(true);
  if (version < 2) {
    const std::string from = "budget_micros";
    cols.replace(cols.find(from), from.size(), "CAST(ROUND(budget_usd * 1000000) AS INTEGER)");
  }
  return cols;
}

/// True when `runs` still has the dollar budget column of schema 1.
bool has_budget_usd(sqlite3* db) {
  bool found = false;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA table_info(runs)", -1, &st, nullptr);
  while (st && sqlite3_step(st) == SQLITE_ROW)
    if (const auto* name = sqlite3_column_text(st, 1))
      found = found || std::string(reinterpret_cast<const char*>(name)) == "budget_usd";
  sqlite3_finalize(st);
  return found;
}

/// Migrates a ledger from schema `from` to kSchemaVersion in one transaction; false on failure.
bool migrate(sqlite3* db, int from) {
  if (sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) return false;
  // Another gpumeter may have migrated between our read and the lock: read the version again.
  int version = from;
  {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='schema_version'", -1, &st, nullptr);
    if (st && sqlite3_step(st) == SQLITE_ROW) version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
  }
  bool ok = true;
  if (version < 2 && has_budget_usd(db)) {
    ok = sqlite3_exec(db,
                      "ALTER TABLE runs ADD COLUMN budget_micros INTEGER;"
                      "UPDATE runs SET budget_micros = CAST(ROUND(budget_usd * 1000000) AS INTEGER) "
                      "WHERE budget_usd IS NOT NULL;"
                      "ALTER TABLE runs DROP COLUMN budget_usd;",
                      nullptr, nullptr, nullptr) == SQLITE_OK;
  }
  if (ok && version < kSchemaVersion) {
    const std::string sql =
        "UPDATE meta SET value='" + std::to_string(kSchemaVersion) + "' WHERE key='schema_version'";
    ok = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK;
  }
  sqlite3_exec(db, ok ? "COMMIT" : "ROLLBACK", nullptr, nullptr, nullptr);
  return ok;
}

class SqliteLedger final : public Ledger {
 public:
  /// `read_only`: why the ledger can only be read ("" when it can be written); writes fail with it.
  /// `version`: the file's schema version (older ones are only opened read-only).
  SqliteLedger(sqlite3* db, std::string path, std::string read_only = {}, int version = kSchemaVersion)
      : db_(db),
        path_(std::move(path)),
        read_only_(std::move(read_only)),
        select_columns_(run_select_columns(version)) {}
  ~SqliteLedger() override { sqlite3_close_v2(db_); }

  std::string describe() const override { return path_; }
  std::string backend() const override { return "sqlite"; }
  Result<int> schema_version() const override {
    Stmt s(db_, "SELECT value FROM meta WHERE key='schema_version'");
    if (!s.ok() || s.step() != SQLITE_ROW) return err("read schema version");
    return static_cast<int>(s.i64(0));
  }

  Result<std::int64_t> begin_run(const RunRecord& run) override {
    if (!read_only_.empty()) return make_error(ErrorKind::unavailable, read_only_);
    RunRecord r = run;
    stamp_meter(r, false);
    return insert_run(r);
  }

  Result<void> update_run(const RunRecord& run) override {
    if (!read_only_.empty()) return make_error(ErrorKind::unavailable, read_only_);
    RunRecord r = run;
    stamp_meter(r, true);
    return write_run(r);
  }

  Result<void> append(const std::vector<SampleRecord>& samples, const std::vector<ProgressRecord>& progress,
                      const std::vector<ActionRecord>& actions) override {
    if (!read_only_.empty()) return make_error(ErrorKind::unavailable, read_only_);
    if (samples.empty() && progress.empty() && actions.empty()) return ok_result();
    if (!exec("BEGIN IMMEDIATE")) return err("begin");
    if (auto r = insert_rows(samples, progress, actions); !r) return rollback(r.error());
    if (!exec("COMMIT")) return rollback("commit");
    return ok_result();
  }

  Result<void> append_rollups(const std::vector<RollupRecord>& rollups) override {
    if (!read_only_.empty()) return make_error(ErrorKind::unavailable, read_only_);
    if (rollups.empty()) return ok_result();
    if (!exec("BEGIN IMMEDIATE")) return err("begin");
    if (auto r = insert_rollups(rollups); !r) return rollback(r.error());
    if (!exec("COMMIT")) return rollback("commit");
    return ok_result();
  }

  /// Sums while stepping through the period's rows: SQLite's GROUP BY on the computed bucket would sort every
  /// row first, which took several times as long. A period that spans most of the ledger's minutes reads the
  /// table in storage order; a shorter one its rows through the minute index (one table lookup each).
  Result<std::vector<RollupBucket>> rollup_buckets(const RunFilter& filter, std::int64_t bucket_ms) const override {
    const std::optional<std::int64_t> since_minute =
        filter.since_unix_ms ? std::optional(*filter.since_unix_ms / 60000) : std::nullopt;
    const std::optional<std::int64_t> until_minute =
        filter.until_unix_ms ? std::optional((*filter.until_unix_ms + 59999) / 60000) : std::nullopt;
    std::string sql =
        "SELECT run_id, minute_unix, samples, utilization_sum_pct, energy_j, cost_micros FROM rollups";
    if (mostly_whole_ledger(since_minute, until_minute)) sql += " NOT INDEXED";
    sql += " WHERE 1=1";
    if (since_minute) sql += " AND minute_unix >= ?1";
    if (until_minute) sql += " AND minute_unix < ?2";
    Stmt s(db_, sql.c_str());
    if (!s.ok()) return err("prepare rollup buckets");
    if (since_minute) s.bind(1, *since_minute);
    if (until_minute) s.bind(2, *until_minute);
    const std::int64_t bucket = std::max<std::int64_t>(60'000, bucket_ms);
    struct Key {
      std::int64_t run_id, start;
      bool operator==(const Key&) const = default;
    };
    struct Hash {
      std::size_t operator()(const Key& k) const {
        return std::hash<std::int64_t>()(k.run_id * 1'000'003 + k.start / 60'000);
      }
    };
    std::unordered_map<Key, std::size_t, Hash> index;
    std::vector<RollupBucket> out;
    Key last{0, 0};
    std::size_t last_at = 0;  // a run's GPUs' rows of one minute come one after the other
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) {
      const Key key{s.i64(0), s.i64(1) * 60'000 / bucket * bucket};
      if (out.empty() || !(key == last)) {
        auto [it, added] = index.try_emplace(key, out.size());
        if (added) out.push_back(RollupBucket{key.run_id, key.start, 0, 0, 0, 0});
        last = key;
        last_at = it->second;
      }
      RollupBucket& b = out[last_at];
      b.samples += s.i64(2);
      b.utilization_sum_pct += s.f64(3);
      b.energy_j += s.f64(4);
      b.cost_micros += s.i64(5);
    }
    if (rc != SQLITE_DONE) return err("select rollup buckets");
    std::sort(out.begin(), out.end(), [](const RollupBucket& a, const RollupBucket& b) {
      return a.start_unix_ms != b.start_unix_ms ? a.start_unix_ms < b.start_unix_ms : a.run_id < b.run_id;
    });
    return out;
  }

  Result<ImportOutcome> import_run(const RunBundle& b, const std::string& import_key,
                                   std::int64_t into_run_id) override {
    if (!read_only_.empty()) return make_error(ErrorKind::unavailable, read_only_);
    if (!exec("BEGIN IMMEDIATE")) return err("begin");
    {
      Stmt q(db_, "SELECT run_id FROM imports WHERE import_key=?");
      if (!q.ok()) return rollback("prepare imports");
      q.bind(1, import_key);
      if (q.step() == SQLITE_ROW) {
        const std::int64_t id = q.i64(0);
        exec("ROLLBACK");
        return ImportOutcome{id, false};
      }
    }
    RunRecord r = b.run;
    std::int64_t id = into_run_id;
    if (id > 0) {
      r.id = id;
      if (auto w = write_run(r); !w) return rollback(w.error());
    } else {
      auto ins = insert_run(r);
      if (!ins) return rollback(ins.error());
      id = *ins;
    }
    RunBundle local = b;
    for (auto& x : local.samples) x.run_id = id;
    for (auto& x : local.progress) x.run_id = id;
    for (auto& x : local.actions) x.run_id = id;
    for (auto& x : local.rollups) x.run_id = id;
    for (auto& x : local.inference) x.run_id = id;
    if (auto w = insert_rows(local.samples, local.progress, local.actions); !w) return rollback(w.error());
    if (auto w = insert_rollups(local.rollups); !w) return rollback(w.error());
    if (auto w = insert_inference(local.inference); !w) return rollback(w.error());
    {
      Stmt c(db_,
             "INSERT INTO cells (run_id, cell_id, start_ms, end_ms, cost_micros, utilization_pct, status, "
             "source) VALUES (?,?,?,?,?,?,?,?)");
      if (!c.ok()) return rollback("prepare cells");
      for (const auto& x : local.cells) {
        c.bind(1, id);
        c.bind(2, x.cell_id);
        c.bind(3, x.start_ms);
        c.bind(4, x.end_ms);
        c.bind(5, x.cost_micros);
        c.bind(6, x.utilization_pct);
        c.bind(7, x.status);
        c.bind(8, x.source);
        if (c.step() != SQLITE_DONE) return rollback("insert cells");
        c.reset();
      }
    }
    {
      Stmt k(db_, "INSERT INTO imports (import_key, run_id, imported_unix_ms) VALUES (?,?,?)");
      if (!k.ok()) return rollback("prepare imports");
      k.bind(1, import_key);
      k.bind(2, id);
      k.bind(3, now_unix_ms());
      if (k.step() != SQLITE_DONE) return rollback("insert import");
    }
    if (!exec("COMMIT")) return rollback("commit");
    return ImportOutcome{id, true};
  }

  Result<void> set_budget(const BudgetRecord& b) override {
    if (!read_only_.empty()) return make_error(ErrorKind::unavailable, read_only_);
    Stmt s(db_, "INSERT OR REPLACE INTO budgets (selector, limit_micros, period, updated_unix_ms) VALUES (?,?,?,?)");
    if (!s.ok()) return err("prepare budget");
    s.bind(1, b.selector);
    s.bind(2, b.limit_micros);
    s.bind(3, b.period);
    s.bind(4, b.updated_unix_ms ? b.updated_unix_ms : now_unix_ms());
    if (s.step() != SQLITE_DONE) return err("write budget");
    return ok_result();
  }

  Result<std::vector<BudgetRecord>> budgets() const override {
    Stmt s(db_, "SELECT selector, limit_micros, period, updated_unix_ms FROM budgets ORDER BY selector");
    if (!s.ok()) return err("prepare budgets");
    std::vector<BudgetRecord> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) out.push_back(BudgetRecord{s.text(0), s.i64(1), s.text(2), s.i64(3)});
    if (rc != SQLITE_DONE) return err("select budgets");
    return out;
  }

  Result<void> remove_budget(const std::string& selector) override {
    if (!read_only_.empty()) return make_error(ErrorKind::unavailable, read_only_);
    Stmt s(db_, "DELETE FROM budgets WHERE selector=?");
    if (!s.ok()) return err("prepare budget");
    s.bind(1, selector);
    if (s.step() != SQLITE_DONE) return err("remove budget");
    if (sqlite3_changes(db_) == 0)
      return make_error(ErrorKind::not_found, "no budget for " + selector + " in the ledger " + path_);
    return ok_result();
  }

  Result<SelectorSpend> selector_spend(const std::string& key, const std::string& value, std::int64_t since_unix_ms,
                                       std::int64_t exclude_run_id) const override {
    const std::string match = key == "user"   ? "\"user\" = ?1"
                              : key == "host" ? "host = ?1"
                                              : "json_extract(labels_json, ?4) = ?1";
    const std::string sql =
        "SELECT COALESCE(SUM(cost_micros), 0), COUNT(*), COALESCE(SUM(status = 'running' AND heartbeat_unix_ms > ?5), 0) "
        "FROM runs WHERE start_unix_ms >= ?2 AND id != ?3 AND " + match;
    Stmt s(db_, sql.c_str());
    if (!s.ok()) return err("prepare selector spend");
    s.bind(1, value);
    s.bind(2, since_unix_ms);
    s.bind(3, exclude_run_id);
    s.bind(4, "$.\"" + key + "\"");
    s.bind(5, now_unix_ms() - kStaleHeartbeatMs);
    if (s.step() != SQLITE_ROW) return err("selector spend");
    return SelectorSpend{s.i64(0), s.i64(1), s.i64(2)};
  }

  Result<RunRecord> run(std::int64_t id) const override {
    const std::string sql = "SELECT " + select_columns_ + " FROM runs WHERE id=?";
    Stmt s(db_, sql.c_str());
    if (!s.ok()) return err("prepare select run");
    s.bind(1, id);
    const int rc = s.step();
    if (rc == SQLITE_DONE) return make_error(ErrorKind::not_found, "no run " + std::to_string(id) + " in " + path_);
    if (rc != SQLITE_ROW) return err("select run");
    return fix_status(read_run(s));
  }

  /// Each run of `filter`, newest first, as `read` makes it from a row of `columns`.
  template <class T, class Read>
  Result<std::vector<T>> each_run(const std::string& columns, const RunFilter& filter, Read read) const {
    Stmt s(db_, select_runs(columns, filter).c_str());
    if (!s.ok()) return err("prepare select runs");
    if (filter.since_unix_ms) s.bind(1, *filter.since_unix_ms);
    if (filter.until_unix_ms) s.bind(2, *filter.until_unix_ms);
    std::vector<T> out;
    out.reserve(count_runs(filter));
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) {
      GM_TRY(T row, read(s));
      out.push_back(std::move(row));
    }
    if (rc != SQLITE_DONE) return err("select runs");
    return out;
  }

  Result<RunRecord> last_run() const override {
    auto all = runs(RunFilter{std::nullopt, std::nullopt, 1});
    if (!all) return all.error();
    if (all->empty()) return make_error(ErrorKind::not_found, "no runs in the ledger " + path_);
    return all->front();
  }

  Result<std::vector<RunRecord>> runs(const RunFilter& filter) const override {
    return each_run<RunRecord>(select_columns_, filter,
                               [&](const Stmt& s) -> Result<RunRecord> { return fix_status(read_run(s)); });
  }

  Result<std::vector<RunSummary>> run_summaries(const RunFilter& filter) const override {
    return each_run<RunSummary>(kSummaryColumns, filter, [&](const Stmt& s) -> Result<RunSummary> {
      RunSummary r = read_summary(s);
      if (r.status != "running") return r;
      GM_TRY(RunRecord full, run(r.id));  // live, or its meter died: the run's own read decides
      return summarize(full);
    });
  }

  Result<std::vector<SampleRecord>> samples(std::int64_t run_id) const override {
    // A ledger opened read-only from before the GPM columns has none: they read as NULL.
    Stmt with_gpm(db_,
                  "SELECT run_id, t_ms, gpu_index, gpu_uuid, utilization_pct, memory_used_bytes, power_w, "
                  "temperature_c, energy_j, cost_micros, job_present, " GM_GPM_COLUMNS
                  " FROM samples WHERE run_id=? ORDER BY t_ms, gpu_index");
    Stmt without_gpm(db_, with_gpm.ok() ? "SELECT 1"
                                        : "SELECT run_id, t_ms, gpu_index, gpu_uuid, utilization_pct, "
                                          "memory_used_bytes, power_w, temperature_c, energy_j, cost_micros, "
                                          "job_present FROM samples WHERE run_id=? ORDER BY t_ms, gpu_index");
    const bool has_gpm = with_gpm.ok();
    Stmt& s = has_gpm ? with_gpm : without_gpm;
    if (!s.ok()) return err("prepare select samples");
    s.bind(1, run_id);
    std::vector<SampleRecord> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) {
      SampleRecord x;
      x.run_id = s.i64(0);
      x.t_ms = s.i64(1);
      x.gpu_index = static_cast<unsigned>(s.i64(2));
      x.gpu_uuid = s.text(3);
      x.utilization_pct = s.of64(4);
      if (auto m = s.oi64(5)) x.memory_used_bytes = static_cast<std::uint64_t>(*m);
      x.power_w = s.of64(6);
      x.temperature_c = s.of64(7);
      x.energy_j = s.f64(8);
      x.cost_micros = s.i64(9);
      x.job_present = s.i64(10) != 0;
      if (has_gpm)
        x.gpm = {s.of64(11), s.of64(12), s.of64(13), s.of64(14), s.of64(15), s.of64(16), s.of64(17)};
      out.push_back(std::move(x));
    }
    if (rc != SQLITE_DONE) return err("select samples");
    return out;
  }

  Result<std::vector<ProgressRecord>> progress(std::int64_t run_id) const override {
    Stmt s(db_,
           "SELECT run_id, t_ms, step, total_steps, samples, tokens, metrics_json, cost_micros FROM progress "
           "WHERE run_id=? ORDER BY t_ms, rowid");
    if (!s.ok()) return err("prepare select progress");
    s.bind(1, run_id);
    std::vector<ProgressRecord> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) {
      ProgressRecord x;
      x.run_id = s.i64(0);
      x.t_ms = s.i64(1);
      x.step = s.oi64(2);
      x.total_steps = s.oi64(3);
      x.samples = s.oi64(4);
      x.tokens = s.oi64(5);
      x.metrics = parse_json_or<std::map<std::string, double>>(s.text(6), {});
      x.cost_micros = s.i64(7);
      out.push_back(std::move(x));
    }
    if (rc != SQLITE_DONE) return err("select progress");
    return out;
  }

  Result<void> append_inference(const std::vector<InferenceRecord>& records) override {
    if (!read_only_.empty()) return make_error(ErrorKind::unavailable, read_only_);
    if (records.empty()) return ok_result();
    if (!exec("BEGIN IMMEDIATE")) return err("begin");
    if (auto r = insert_inference(records); !r) return rollback(r.error());
    if (!exec("COMMIT")) return rollback("commit");
    return ok_result();
  }

  Result<void> append_cells(const std::vector<CellRecord>& cells) override {
    if (!read_only_.empty()) return make_error(ErrorKind::unavailable, read_only_);
    if (cells.empty()) return ok_result();
    if (!exec("BEGIN IMMEDIATE")) return err("begin");
    {
      Stmt s(db_,
             "INSERT INTO cells (run_id, cell_id, start_ms, end_ms, cost_micros, utilization_pct, status, "
             "source) VALUES (?,?,?,?,?,?,?,?)");
      if (!s.ok()) return rollback("prepare cells");
      for (const auto& x : cells) {
        s.bind(1, x.run_id);
        s.bind(2, x.cell_id);
        s.bind(3, x.start_ms);
        s.bind(4, x.end_ms);
        s.bind(5, x.cost_micros);
        s.bind(6, x.utilization_pct);
        s.bind(7, x.status);
        s.bind(8, x.source);
        if (s.step() != SQLITE_DONE) return rollback("insert cells");
        s.reset();
      }
    }
    if (!exec("COMMIT")) return rollback("commit");
    return ok_result();
  }

  Result<std::vector<CellRecord>> cells(std::int64_t run_id) const override {
    std::vector<CellRecord> out;
    // A ledger an older gpumeter created and opened read-only has no such table: no cells.
    Stmt s(
        db_,
        "SELECT run_id, cell_id, start_ms, end_ms, cost_micros, utilization_pct, status, source FROM cells "
        "WHERE run_id=? ORDER BY start_ms, rowid");
    if (!s.ok()) return out;
    s.bind(1, run_id);
    int rc;
    while ((rc = s.step()) == SQLITE_ROW)
      out.push_back(
          CellRecord{s.i64(0), s.i64(1), s.i64(2), s.i64(3), s.i64(4), s.of64(5), s.text(6), s.text(7)});
    if (rc != SQLITE_DONE) return err("select cells");
    return out;
  }

  Result<std::vector<InferenceRecord>> inference(std::int64_t run_id) const override {
    std::vector<InferenceRecord> out;
    // A ledger opened read-only that an older gpumeter created has no such table: no counters.
    Stmt s(db_,
           "SELECT run_id, t_ms, model, engine, prompt_tokens, generated_tokens, cached_tokens, requests, "
           "cost_micros FROM inference WHERE run_id=? ORDER BY t_ms, rowid");
    if (!s.ok()) return out;
    s.bind(1, run_id);
    int rc;
    while ((rc = s.step()) == SQLITE_ROW)
      out.push_back(InferenceRecord{s.i64(0), s.i64(1), s.text(2), s.text(3), s.of64(4), s.of64(5), s.of64(6),
                                    s.of64(7), s.i64(8)});
    if (rc != SQLITE_DONE) return err("select inference");
    return out;
  }

  Result<std::vector<ActionRecord>> actions(std::int64_t run_id) const override {
    Stmt s(db_, "SELECT run_id, t_ms, kind, cost_micros, message FROM actions WHERE run_id=? ORDER BY t_ms, rowid");
    if (!s.ok()) return err("prepare select actions");
    s.bind(1, run_id);
    std::vector<ActionRecord> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) {
      out.push_back(ActionRecord{s.i64(0), s.i64(1), s.text(2), s.i64(3), s.text(4)});
    }
    if (rc != SQLITE_DONE) return err("select actions");
    return out;
  }

  Result<std::vector<RollupRecord>> rollups(const RunFilter& filter) const override {
    std::string sql =
        "SELECT run_id, minute_unix, gpu_index, samples, utilization_sum_pct, memory_max_bytes, energy_j, "
        "cost_micros FROM rollups WHERE 1=1";
    if (filter.since_unix_ms) sql += " AND minute_unix >= ?1";
    if (filter.until_unix_ms) sql += " AND minute_unix < ?2";
    sql += " ORDER BY minute_unix, run_id, gpu_index";
    if (filter.limit) sql += " LIMIT " + std::to_string(*filter.limit);
    Stmt s(db_, sql.c_str());
    if (!s.ok()) return err("prepare select rollups");
    if (filter.since_unix_ms) s.bind(1, *filter.since_unix_ms / 60000);
    if (filter.until_unix_ms) s.bind(2, (*filter.until_unix_ms + 59999) / 60000);
    std::vector<RollupRecord> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) {
      out.push_back(RollupRecord{s.i64(0), s.i64(1), static_cast<unsigned>(s.i64(2)), s.i64(3), s.f64(4), s.f64(5),
                                 s.f64(6), s.i64(7)});
    }
    if (rc != SQLITE_DONE) return err("select rollups");
    return out;
  }

 private:
  /// SELECT `columns` of the runs of `filter`, newest first (?1 since, ?2 until).
  static std::string select_runs(const std::string& columns, const RunFilter& filter) {
    std::string sql = "SELECT " + columns + " FROM runs WHERE 1=1";
    if (filter.since_unix_ms) sql += " AND start_unix_ms >= ?1";
    if (filter.until_unix_ms) sql += " AND start_unix_ms < ?2";
    sql += " ORDER BY start_unix_ms DESC, id DESC";
    if (filter.limit) sql += " LIMIT " + std::to_string(*filter.limit);
    return sql;
  }
  /// True when [since, until) covers at least half of the minutes between the ledger's first and last rollup
  /// (two index lookups): then a scan of the table reads fewer pages than the index's lookups.
  bool mostly_whole_ledger(std::optional<std::int64_t> since_minute,
                           std::optional<std::int64_t> until_minute) const {
    // Two subqueries: min() and max() in one SELECT would scan the index.
    Stmt s(db_, "SELECT (SELECT min(minute_unix) FROM rollups), (SELECT max(minute_unix) FROM rollups)");
    if (!s.ok() || s.step() != SQLITE_ROW || s.is_null(0)) return false;
    const std::int64_t first = s.i64(0), last = s.i64(1) + 1;
    const std::int64_t lo = std::max(first, since_minute.value_or(first));
    const std::int64_t hi = std::min(last, until_minute.value_or(last));
    return 2 * (hi - lo) >= last - first;
  }
  /// How many runs `filter` selects (from the index), to size the result: growing a vector of 100 000
  /// runs moved every one of them 17 times. 0 when it cannot tell.
  std::size_t count_runs(const RunFilter& filter) const {
    std::string sql = "SELECT count(*) FROM runs WHERE 1=1";
    if (filter.since_unix_ms) sql += " AND start_unix_ms >= ?1";
    if (filter.until_unix_ms) sql += " AND start_unix_ms < ?2";
    Stmt c(db_, sql.c_str());
    if (!c.ok()) return 0;
    if (filter.since_unix_ms) c.bind(1, *filter.since_unix_ms);
    if (filter.until_unix_ms) c.bind(2, *filter.until_unix_ms);
    if (c.step() != SQLITE_ROW) return 0;
    const auto n = static_cast<std::size_t>(c.i64(0));
    return filter.limit ? std::min(n, *filter.limit) : n;
  }

  bool exec(const char* sql) const { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) == SQLITE_OK; }
  Error err(const char* what) const {
    const int code = sqlite3_errcode(db_);
    const ErrorKind kind = (code == SQLITE_BUSY || code == SQLITE_LOCKED) ? ErrorKind::unavailable : ErrorKind::failure;
    return make_error(kind, std::string("ledger ") + path_ + ": " + what + ": " + sqlite3_errmsg(db_));
  }
  Error rollback(const char* what) {
    Error e = err(what);
    exec("ROLLBACK");
    return e;
  }
  Error rollback(Error e) {
    exec("ROLLBACK");
    return e;
  }
  RunRecord fix_status(RunRecord r) const {
    if (r.status == "running" && meter_is_dead(r)) {
      r.status = "interrupted";
      include_committed_samples(r);
    }
    return r;
  }
  /// A meter killed between committing a second's samples and refreshing the run's totals leaves totals one
  /// flush behind: an interrupted run counts at least every committed sample.
  void include_committed_samples(RunRecord& r) const {
    Stmt s(db_, "SELECT max(t_ms), sum(cost_micros), sum(energy_j) FROM samples WHERE run_id=?");
    if (!s.ok()) return;
    s.bind(1, r.id);
    if (s.step() != SQLITE_ROW || s.is_null(0)) return;
    include_committed(r, s.i64(0), s.i64(1), s.f64(2));
  }

  Result<void> insert_rows(const std::vector<SampleRecord>& samples, const std::vector<ProgressRecord>& progress,
                          const std::vector<ActionRecord>& actions) {
    {
      Stmt s(db_,
             "INSERT INTO samples (run_id, t_ms, gpu_index, gpu_uuid, utilization_pct, memory_used_bytes, "
             "power_w, "
             "temperature_c, energy_j, cost_micros, job_present, " GM_GPM_COLUMNS
             ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
      if (!s.ok()) return err("prepare samples");
      for (const auto& x : samples) {
        s.bind(1, x.run_id);
        s.bind(2, x.t_ms);
        s.bind(3, static_cast<std::int64_t>(x.gpu_index));
        s.bind(4, x.gpu_uuid);
        s.bind(5, x.utilization_pct);
        if (x.memory_used_bytes) s.bind(6, static_cast<std::int64_t>(*x.memory_used_bytes));
        else s.bind_null(6);
        s.bind(7, x.power_w);
        s.bind(8, x.temperature_c);
        s.bind(9, x.energy_j);
        s.bind(10, x.cost_micros);
        s.bind(11, std::int64_t{x.job_present ? 1 : 0});
        s.bind(12, x.gpm.sm_active);
        s.bind(13, x.gpm.sm_occupancy);
        s.bind(14, x.gpm.tensor_active);
        s.bind(15, x.gpm.fp32_active);
        s.bind(16, x.gpm.fp16_active);
        s.bind(17, x.gpm.fp64_active);
        s.bind(18, x.gpm.dram_bw_util);
        if (s.step() != SQLITE_DONE) return err("insert sample");
        s.reset();
      }
      Stmt p(db_,
             "INSERT INTO progress (run_id, t_ms, step, total_steps, samples, tokens, metrics_json, cost_micros) "
             "VALUES (?,?,?,?,?,?,?,?)");
      if (!p.ok()) return err("prepare progress");
      for (const auto& x : progress) {
        p.bind(1, x.run_id);
        p.bind(2, x.t_ms);
        p.bind(3, x.step);
        p.bind(4, x.total_steps);
        p.bind(5, x.samples);
        p.bind(6, x.tokens);
        p.bind(7, nlohmann::json(x.metrics).dump());
        p.bind(8, x.cost_micros);
        if (p.step() != SQLITE_DONE) return err("insert progress");
        p.reset();
      }
      Stmt a(db_, "INSERT INTO actions (run_id, t_ms, kind, cost_micros, message) VALUES (?,?,?,?,?)");
      if (!a.ok()) return err("prepare actions");
      for (const auto& x : actions) {
        a.bind(1, x.run_id);
        a.bind(2, x.t_ms);
        a.bind(3, x.kind);
        a.bind(4, x.cost_micros);
        a.bind(5, x.message);
        if (a.step() != SQLITE_DONE) return err("insert action");
        a.reset();
      }
    }
    return ok_result();
  }

  Result<void> insert_rollups(const std::vector<RollupRecord>& rollups) {
    {
      Stmt s(db_,
             "INSERT OR REPLACE INTO rollups (run_id, minute_unix, gpu_index, samples, utilization_sum_pct, "
             "memory_max_bytes, energy_j, cost_micros) VALUES (?,?,?,?,?,?,?,?)");
      if (!s.ok()) return err("prepare rollups");
      for (const auto& x : rollups) {
        s.bind(1, x.run_id);
        s.bind(2, x.minute_unix);
        s.bind(3, static_cast<std::int64_t>(x.gpu_index));
        s.bind(4, x.samples);
        s.bind(5, x.utilization_sum_pct);
        s.bind(6, x.memory_max_bytes);
        s.bind(7, x.energy_j);
        s.bind(8, x.cost_micros);
        if (s.step() != SQLITE_DONE) return err("insert rollup");
        s.reset();
      }
    }
    return ok_result();
  }

  Result<void> insert_inference(const std::vector<InferenceRecord>& records) {
    {
      Stmt s(db_,
             "INSERT INTO inference (run_id, t_ms, model, engine, prompt_tokens, generated_tokens, "
             "cached_tokens, "
             "requests, cost_micros) VALUES (?,?,?,?,?,?,?,?,?)");
      if (!s.ok()) return err("prepare inference");
      for (const auto& x : records) {
        s.bind(1, x.run_id);
        s.bind(2, x.t_ms);
        s.bind(3, x.model);
        s.bind(4, x.engine);
        s.bind(5, x.prompt_tokens);
        s.bind(6, x.generated_tokens);
        s.bind(7, x.cached_tokens);
        s.bind(8, x.requests);
        s.bind(9, x.cost_micros);
        if (s.step() != SQLITE_DONE) return err("insert inference");
        s.reset();
      }
    }
    return ok_result();
  }

  Result<std::int64_t> insert_run(const RunRecord& r) {
    std::string marks;
    for (int i = 0; i < kRunColumnCount; ++i) marks += i ? ",?" : "?";
    const std::string sql = "INSERT INTO runs (" + run_columns(false) + ") VALUES (" + marks + ")";
    Stmt s(db_, sql.c_str());
    if (!s.ok()) return err("prepare insert run");
    bind_run(s, r);
    if (s.step() != SQLITE_DONE) return err("insert run");
    return static_cast<std::int64_t>(sqlite3_last_insert_rowid(db_));
  }

  Result<void> write_run(const RunRecord& r) {
    std::string sql = "UPDATE runs SET ";
    for (int i = 0; i < kRunColumnCount; ++i) sql += std::string(i ? ", " : "") + kRunColumnNames[i] + "=?";
    sql += " WHERE id=?";
    Stmt s(db_, sql.c_str());
    if (!s.ok()) return err("prepare update run");
    bind_run(s, r);
    s.bind(kRunColumnCount + 1, r.id);
    if (s.step() != SQLITE_DONE) return err("update run");
    if (sqlite3_changes(db_) == 0) return make_error(ErrorKind::not_found, "no run " + std::to_string(r.id));
    return ok_result();
  }

  sqlite3* db_;
  std::string path_;
  std::string read_only_;
  std::string select_columns_;
};

Error open_error(const std::string& path, const std::string& what, int code) {
  std::string hint;
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED) hint = " (locked by another process; retry later or use --ledger)";
  else if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT)
    hint = " (not a gpumeter ledger or corrupt; move it aside or use --ledger)";
  return make_error(ErrorKind::unavailable, "ledger " + path + ": " + what + hint);
}

}  // namespace

std::string Ledger::default_path() {
  if (const char* p = std::getenv("GPUMETER_LEDGER"); p && *p) return p;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/gpumeter/ledger.db";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/gpumeter/ledger.db";
}

namespace {

bool cannot_write(int sqlite_code) {
  return sqlite_code == SQLITE_READONLY || sqlite_code == SQLITE_CANTOPEN || sqlite_code == SQLITE_PERM ||
         sqlite_code == SQLITE_FULL || sqlite_code == SQLITE_IOERR || sqlite_code == SQLITE_AUTH;
}

std::string uri_path(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == '%' || c == '?' || c == '#') out += (c == '%' ? "%25" : c == '?' ? "%3f" : "%23");
    else out += c;
  }
  return out;
}

/// The ledger for reading only, when it exists but cannot be written (read-only directory or file, a full disk):
/// runs and reports keep working, writes fail with `why`. SQLite needs the -shm file for a WAL database; in a
/// read-only directory without one the file is read as immutable.
Result<std::unique_ptr<Ledger>> open_read_only(const std::string& path, const Error& why) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return why;
  for (const char* params : {"mode=ro", "mode=ro&immutable=1"}) {
    const std::string uri = "file:" + uri_path(path) + "?" + params;
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(uri.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX, nullptr) ==
            SQLITE_OK &&
        sqlite3_exec(db, "SELECT count(*) FROM runs", nullptr, nullptr, nullptr) == SQLITE_OK) {
      sqlite3_busy_timeout(db, 1500);
      int version = kSchemaVersion;
      sqlite3_stmt* st = nullptr;
      sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='schema_version'", -1, &st, nullptr);
      if (st && sqlite3_step(st) == SQLITE_ROW) version = sqlite3_column_int(st, 0);
      sqlite3_finalize(st);
      return std::unique_ptr<Ledger>(std::make_unique<SqliteLedger>(
          db, path, why.message + " (the ledger is read-only here: runs are not recorded)", version));
    }
    sqlite3_close_v2(db);
  }
  return why;
}

}  // namespace

Result<std::unique_ptr<Ledger>> Ledger::open(const std::string& location) {
  if (is_postgres_location(location)) return open_postgres(location, true);
  const std::string path = location.rfind("sqlite:", 0) == 0 ? location.substr(7) : location;
  if (path.empty()) return make_error(ErrorKind::usage, "ledger: empty path (sqlite:PATH)");
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (p.has_parent_path() && !fs::exists(p.parent_path(), ec)) {
    fs::create_directories(p.parent_path(), ec);
    if (ec) return make_error(ErrorKind::unavailable, "ledger " + path + ": cannot create its directory: " + ec.message());
    chmod(p.parent_path().c_str(), 0700);
  }
  // Create the file with mode 0600 before SQLite does (SQLite would use the umask); WAL and SHM files copy it.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    const Error e = make_error(ErrorKind::unavailable, "ledger " + path + ": " + std::strerror(err));
    if (err == EACCES || err == EROFS || err == EPERM) return open_read_only(path, e);
    return e;
  }
  ::close(fd);
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Error e = open_error(path, db ? sqlite3_errmsg(db) : "cannot open", rc);
    sqlite3_close_v2(db);
    if (cannot_write(rc & 0xff)) return open_read_only(path, e);
    return e;
  }
  sqlite3_busy_timeout(db, 1500);
  auto fail = [&](const char* what) -> Result<std::unique_ptr<Ledger>> {
    const int code = sqlite3_extended_errcode(db) & 0xff;
    Error e = open_error(path, std::string(what) + ": " + sqlite3_errmsg(db), code);
    sqlite3_close_v2(db);
    if (cannot_write(code)) return open_read_only(path, e);
    return e;
  };
  // Reading the schema first detects a file that is not a database.
  if (sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr) != SQLITE_OK)
    return fail("cannot read");
  // Switching a new file to WAL takes an exclusive lock without consulting the busy handler, so two
  // gpumeters opening one new ledger at once (two Slurm epilogs) retry here for up to 3 s.
  for (int attempt = 0;; ++attempt) {
    const int wal = sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
    if (wal == SQLITE_OK) break;
    if ((wal & 0xff) != SQLITE_BUSY && (wal & 0xff) != SQLITE_LOCKED) return fail("cannot switch to WAL");
    if (attempt >= 60) return fail("cannot switch to WAL");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  sqlite3_exec(db, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr);
  if (sqlite3_exec(db, kSchema, nullptr, nullptr, nullptr) != SQLITE_OK) return fail("cannot create tables");
  {
    // Ledgers created before a column existed get it (NULL in their old rows).
    std::set<std::string> have;
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "PRAGMA table_info(runs)", -1, &st, nullptr);
    while (st && sqlite3_step(st) == SQLITE_ROW)
      if (const auto* name = sqlite3_column_text(st, 1)) have.insert(reinterpret_cast<const char*>(name));
    sqlite3_finalize(st);
    for (const auto& [name, type] : kRunColumnsAdded)
      if (!have.count(name)) {
        const std::string sql = std::string("ALTER TABLE runs ADD COLUMN ") + name + " " + type;
        if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
          return fail("cannot add a column");
      }
    have.clear();
    sqlite3_prepare_v2(db, "PRAGMA table_info(samples)", -1, &st, nullptr);
    while (st && sqlite3_step(st) == SQLITE_ROW)
      if (const auto* name = sqlite3_column_text(st, 1)) have.insert(reinterpret_cast<const char*>(name));
    sqlite3_finalize(st);
    for (const auto& [name, type] : kSampleColumnsAdded)
      if (!have.count(name)) {
        const std::string sql = std::string("ALTER TABLE samples ADD COLUMN ") + name + " " + type;
        if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
          return fail("cannot add a column");
      }
  }
  {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='schema_version'", -1, &st, nullptr);
    std::optional<int> version;
    if (st && sqlite3_step(st) == SQLITE_ROW) version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (version && *version > kSchemaVersion) {
      sqlite3_close_v2(db);
      return make_error(ErrorKind::unavailable, "ledger " + path + ": schema version " + std::to_string(*version) +
                                                    " is newer than this gpumeter understands (" +
                                                    std::to_string(kSchemaVersion) + ")");
    } else if (version && *version < kSchemaVersion && !migrate(db, *version)) {
      return fail("cannot migrate the schema");
    }
    // Migrations in order, each in the transaction that records the new version.
    if (!version || *version < kSchemaVersion) {
      if (sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) return fail("cannot migrate");
      const std::string sql = std::string(kSchemaV2) +
                              "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', '" +
                              std::to_string(kSchemaVersion) + "');";
      if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
        sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
        return fail("cannot migrate the schema");
      }
      if (sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) return fail("cannot migrate");
    }
  }
  chmod(path.c_str(), 0600);
  return std::unique_ptr<Ledger>(std::make_unique<SqliteLedger>(db, path));
}

}  // namespace gm
