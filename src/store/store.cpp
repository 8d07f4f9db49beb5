// The SQLite ledger: its rows read and written through statements generated from the table descriptions
// (store/tables.h); opening the file and its schema are in sqlite_schema.cpp.
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

#include "store/tables.h"

namespace gm::store {
namespace {

using namespace store::detail;

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
    bind_value(*this, i, v);
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
  void bind_all(const std::vector<std::int64_t>& values) {
    for (std::size_t i = 0; i < values.size(); ++i) bind(static_cast<int>(i) + 1, values[i]);
  }
  std::string errmsg() const { return sqlite3_errmsg(db_); }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

/// The run columns to SELECT from a ledger of schema `version` (a version-1 ledger opened read-only still
/// holds budget_usd in dollars).
std::string run_select_columns(int version) {
  std::string cols = column_list(RunsTable::info, columns<RunsTable>(), true);
  if (version < 2) {
    const std::string from = "budget_micros";
    cols.replace(cols.find(from), from.size(), "CAST(ROUND(budget_usd * 1000000) AS INTEGER)");
  }
  return cols;
}

class SqliteLedger final : public Ledger {
 public:
  /// `read_only`: why the ledger can only be read ("" when it can be written); writes fail with it.
  /// `version`: the file's schema version (older ones are only opened read-only).
  SqliteLedger(sqlite3* db, std::string path, std::string read_only = {},
               int version = Ledger::kSchemaVersion)
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
    if (samples.empty() && progress.empty() && actions.empty()) return writable();
    return in_transaction([&]() -> Result<void> {
      GM_TRY_VOID(insert<SamplesTable>(samples));
      GM_TRY_VOID(insert<ProgressTable>(progress));
      return insert<ActionsTable>(actions);
    });
  }
  Result<void> append_rollups(const std::vector<RollupRecord>& rollups) override {
    return append_rows<RollupsTable>(rollups);
  }
  Result<void> append_inference(const std::vector<InferenceRecord>& records) override {
    return append_rows<InferenceTable>(records);
  }
  Result<void> append_cells(const std::vector<CellRecord>& cells) override {
    return append_rows<CellsTable>(cells);
  }

  /// Sums while stepping through the period's rows: SQLite's GROUP BY on the computed bucket would sort every
  /// row first, which took several times as long. A period that spans most of the ledger's minutes reads the
  /// table in storage order; a shorter one its rows through the minute index (one table lookup each).
  Result<std::vector<RollupBucket>> rollup_buckets(const RunFilter& filter,
                                                   std::int64_t bucket_ms) const override {
    const Where where = rollups_where(kSqlite, filter);
    std::string sql =
        "SELECT run_id, minute_unix, samples, utilization_sum_pct, energy_j, cost_micros FROM rollups";
    if (mostly_whole_ledger(filter)) sql += " NOT INDEXED";
    Stmt s(db_, (sql + " WHERE " + where.sql).c_str());
    if (!s.ok()) return err("prepare rollup buckets");
    s.bind_all(where.values);
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
    ImportOutcome out;
    auto done = in_transaction([&]() -> Result<void> {
      Stmt q(db_, "SELECT run_id FROM imports WHERE import_key=?");
      if (!q.ok()) return err("prepare imports");
      q.bind(1, import_key);
      if (q.step() == SQLITE_ROW) {
        out = ImportOutcome{q.i64(0), false};
        return ok_result();
      }
      GM_TRY(const std::int64_t id,
             write_bundle(
                 b, into_run_id, import_key,
                 [this](auto table, const auto& rows) { return insert<decltype(table)>(rows); },
                 [this](const RunRecord& run) { return write_run(run); },
                 [this](const RunRecord& run) { return insert_run(run); }));
      out = ImportOutcome{id, true};
      return ok_result();
    });
    if (!done) return done.error();
    return out;
  }

  Result<void> set_budget(const BudgetRecord& b) override {
    GM_TRY_VOID(writable());
    BudgetRecord row = b;
    if (!row.updated_unix_ms) row.updated_unix_ms = now_unix_ms();
    return insert<BudgetsTable>({row});
  }

  Result<std::vector<BudgetRecord>> budgets() const override {
    return select<BudgetsTable>(select_sql<BudgetsTable>(kSqlite, ""), {}, false);
  }

  Result<void> remove_budget(const std::string& selector) override {
    GM_TRY_VOID(writable());
    Stmt s(db_, "DELETE FROM budgets WHERE selector=?");
    if (!s.ok()) return err("prepare budget");
    s.bind(1, selector);
    if (s.step() != SQLITE_DONE) return err("remove budget");
    if (sqlite3_changes(db_) == 0)
      return make_error(ErrorKind::not_found, "no budget for " + selector + " in the ledger " + path_);
    return ok_result();
  }

  Result<SelectorSpend> selector_spend(const std::string& key, const std::string& value,
                                       std::int64_t since_unix_ms,
                                       std::int64_t exclude_run_id) const override {
    const std::string match = key == "user"   ? "\"user\" = ?1"
                              : key == "host" ? "host = ?1"
                                              : "json_extract(labels_json, ?4) = ?1";
    const std::string sql =
        "SELECT COALESCE(SUM(cost_micros), 0), COUNT(*), COALESCE(SUM(status = 'running' AND "
        "heartbeat_unix_ms > ?5), 0) "
        "FROM runs WHERE start_unix_ms >= ?2 AND id != ?3 AND " +
        match;
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
    if (rc == SQLITE_DONE)
      return make_error(ErrorKind::not_found, "no run " + std::to_string(id) + " in " + path_);
    if (rc != SQLITE_ROW) return err("select run");
    GM_TRY(RunRecord r, read_row<RunsTable>(s));
    return fix_status(std::move(r));
  }

  Result<RunRecord> last_run() const override {
    auto all = runs(RunFilter{std::nullopt, std::nullopt, 1});
    if (!all) return all.error();
    if (all->empty()) return make_error(ErrorKind::not_found, "no runs in the ledger " + path_);
    return all->front();
  }

  Result<std::vector<RunRecord>> runs(const RunFilter& filter) const override {
    return each_run<RunRecord>(select_columns_, filter, [&](const Stmt& s) -> Result<RunRecord> {
      GM_TRY(RunRecord r, read_row<RunsTable>(s));
      return fix_status(std::move(r));
    });
  }

  Result<std::vector<RunSummary>> run_summaries(const RunFilter& filter) const override {
    const std::string columns =
        column_list(RunSummaryView::info, store::detail::columns<RunSummaryView>(), true);
    return each_run<RunSummary>(columns, filter, [&](const Stmt& s) -> Result<RunSummary> {
      GM_TRY(RunSummary r, read_row<RunSummaryView>(s));
      if (r.status != RunStatus::running) return r;
      GM_TRY(RunRecord full, run(r.id));  // live, or its meter died: the run's own read decides
      return summarize(full);
    });
  }

  Result<std::vector<SampleRecord>> samples(std::int64_t run_id) const override {
    return rows_of_run<SamplesTable>(run_id, false);
  }
  Result<std::vector<ProgressRecord>> progress(std::int64_t run_id) const override {
    return rows_of_run<ProgressTable>(run_id, false);
  }
  Result<std::vector<ActionRecord>> actions(std::int64_t run_id) const override {
    return rows_of_run<ActionsTable>(run_id, false);
  }
  Result<std::vector<CellRecord>> cells(std::int64_t run_id) const override {
    return rows_of_run<CellsTable>(run_id, true);
  }
  Result<std::vector<InferenceRecord>> inference(std::int64_t run_id) const override {
    return rows_of_run<InferenceTable>(run_id, true);
  }

  Result<std::vector<RollupRecord>> rollups(const RunFilter& filter) const override {
    const Where where = rollups_where(kSqlite, filter);
    return select<RollupsTable>(select_sql<RollupsTable>(kSqlite, where.sql) + limit_sql(filter),
                                where.values, false);
  }

 private:
  Result<void> writable() const {
    if (!read_only_.empty()) return make_error(ErrorKind::unavailable, read_only_);
    return ok_result();
  }

  /// `body` in one write transaction, rolled back when it fails.
  template <class F>
  Result<void> in_transaction(F&& body) {
    GM_TRY_VOID(writable());
    if (!exec("BEGIN IMMEDIATE")) return err("begin");
    if (auto r = body(); !r) return rollback(r.error());
    if (!exec("COMMIT")) return rollback("commit");
    return ok_result();
  }

  template <class Tbl>
  Result<void> append_rows(const std::vector<typename Tbl::Record>& rows) {
    if (rows.empty()) return writable();
    return in_transaction([&]() { return insert<Tbl>(rows); });
  }

  /// Inserts `rows` through one prepared statement (in the caller's transaction).
  template <class Tbl>
  Result<void> insert(const std::vector<typename Tbl::Record>& rows) {
    if (rows.empty()) return ok_result();
    Stmt s(db_, insert_sql<Tbl>(kSqlite).c_str());
    if (!s.ok()) return err(std::string("prepare ") + Tbl::info.name);
    for (const auto& x : rows) {
      bind_row<Tbl>(s, x);
      if (s.step() != SQLITE_DONE) return err(std::string("insert ") + Tbl::info.name);
      s.reset();
    }
    return ok_result();
  }

  /// The rows `sql` selects, its parameters `values`; none when it cannot be prepared and `absent_ok`.
  template <class Tbl>
  Result<std::vector<typename Tbl::Record>> select(const std::string& sql,
                                                   const std::vector<std::int64_t>& values,
                                                   bool absent_ok) const {
    std::vector<typename Tbl::Record> out;
    Stmt s(db_, sql.c_str());
    if (!s.ok()) {
      if (absent_ok) return out;
      return err(std::string("prepare select ") + Tbl::info.name);
    }
    s.bind_all(values);
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) {
      GM_TRY(auto row, read_row<Tbl>(s));
      out.push_back(std::move(row));
    }
    if (rc != SQLITE_DONE) return err(std::string("select ") + Tbl::info.name);
    return out;
  }

  /// A run's rows of table `Tbl`. A ledger that an older gpumeter created, opened read-only, may lack the
  /// columns added since (read as NULL) or, `absent_ok`, the whole table (no rows).
  template <class Tbl>
  Result<std::vector<typename Tbl::Record>> rows_of_run(std::int64_t run_id, bool absent_ok) const {
    std::string sql = select_sql<Tbl>(kSqlite, "run_id=?1");
    if (!Stmt(db_, sql.c_str()).ok()) {
      const std::string without_added = select_sql<Tbl>(kSqlite, "run_id=?1", true);
      if (Stmt(db_, without_added.c_str()).ok()) sql = without_added;
    }
    return select<Tbl>(sql, {run_id}, absent_ok);
  }

  /// Each run of `filter`, newest first, as `read` makes it from a row of `columns`.
  template <class T, class Read>
  Result<std::vector<T>> each_run(const std::string& columns, const RunFilter& filter, Read read) const {
    const Where where = runs_where(kSqlite, filter);
    const std::string sql = "SELECT " + columns + " FROM runs WHERE " + where.sql +
                            " ORDER BY start_unix_ms DESC, id DESC" + limit_sql(filter);
    Stmt s(db_, sql.c_str());
    if (!s.ok()) return err("prepare select runs");
    s.bind_all(where.values);
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

  /// True when the filter covers at least half of the minutes between the ledger's first and last rollup
  /// (two index lookups): then a scan of the table reads fewer pages than the index's lookups.
  bool mostly_whole_ledger(const RunFilter& filter) const {
    // Two subqueries: min() and max() in one SELECT would scan the index.
    Stmt s(db_, "SELECT (SELECT min(minute_unix) FROM rollups), (SELECT max(minute_unix) FROM rollups)");
    if (!s.ok() || s.step() != SQLITE_ROW || s.is_null(0)) return false;
    const std::int64_t first = s.i64(0), last = s.i64(1) + 1;
    const std::int64_t lo = std::max(first, filter.since_unix_ms ? *filter.since_unix_ms / 60000 : first);
    const std::int64_t hi =
        std::min(last, filter.until_unix_ms ? (*filter.until_unix_ms + 59999) / 60000 : last);
    return 2 * (hi - lo) >= last - first;
  }
  /// How many runs `filter` selects (from the index), to size the result: growing a vector of 100 000
  /// runs moved every one of them 17 times. 0 when it cannot tell.
  std::size_t count_runs(const RunFilter& filter) const {
    const Where where = runs_where(kSqlite, filter);
    Stmt c(db_, ("SELECT count(*) FROM runs WHERE " + where.sql).c_str());
    if (!c.ok()) return 0;
    c.bind_all(where.values);
    if (c.step() != SQLITE_ROW) return 0;
    const auto n = static_cast<std::size_t>(c.i64(0));
    return filter.limit ? std::min(n, *filter.limit) : n;
  }

  bool exec(const char* sql) const { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) == SQLITE_OK; }
  Error err(const std::string& what) const {
    const int code = sqlite3_errcode(db_);
    const ErrorKind kind =
        (code == SQLITE_BUSY || code == SQLITE_LOCKED) ? ErrorKind::unavailable : ErrorKind::failure;
    return make_error(kind, "ledger " + path_ + ": " + what + ": " + sqlite3_errmsg(db_));
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
    if (r.status == RunStatus::running && meter_is_dead(r)) {
      r.status = RunStatus::interrupted;
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

  Result<std::int64_t> insert_run(const RunRecord& r) {
    Stmt s(db_, insert_sql<RunsTable>(kSqlite).c_str());
    if (!s.ok()) return err("prepare insert run");
    bind_row<RunsTable>(s, r);
    if (s.step() != SQLITE_DONE) return err("insert run");
    return static_cast<std::int64_t>(sqlite3_last_insert_rowid(db_));
  }

  Result<void> write_run(const RunRecord& r) {
    const auto& cols = store::detail::columns<RunsTable>();
    Stmt s(db_, update_sql(RunsTable::info, cols, kSqlite).c_str());
    if (!s.ok()) return err("prepare update run");
    bind_row<RunsTable>(s, r);
    s.bind(static_cast<int>(cols.size()) + 1, r.id);
    if (s.step() != SQLITE_DONE) return err("update run");
    if (sqlite3_changes(db_) == 0) return make_error(ErrorKind::not_found, "no run " + std::to_string(r.id));
    return ok_result();
  }

  sqlite3* db_;
  std::string path_;
  std::string read_only_;
  std::string select_columns_;
};
}  // namespace

std::unique_ptr<Ledger> store::detail::make_sqlite_ledger(sqlite3* db, std::string path,
                                                          std::string read_only, int version) {
  return std::make_unique<SqliteLedger>(db, std::move(path), std::move(read_only), version);
}

std::string Ledger::default_path() {
  if (const char* p = std::getenv("GPUMETER_LEDGER"); p && *p) return p;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/gpumeter/ledger.db";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/gpumeter/ledger.db";
}

}  // namespace gm::store
