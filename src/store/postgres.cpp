// The PostgreSQL ledger (libpq): the same tables as the SQLite ledger, shared by many machines. Passwords
// come from the URI, PGPASSFILE / ~/.pgpass or PGPASSWORD as libpq reads them, TLS as libpq negotiates it; no
// message carries the password (redact_location).
#include <fmt/format.h>
#include <libpq-fe.h>

#include <cstdlib>
#include <optional>
#include <unordered_map>

#include "store/tables.h"

namespace gm::store::detail {
namespace {

/// The tables of schema version `version`, then the columns added since (idempotent).
std::string pg_schema_sql(int version) {
  std::string sql;
  for_each_table([&]<class Tbl>(Tbl) {
    if (Tbl::info.since_version == version) sql += create_sql<Tbl>(kPostgres);
  });
  return sql;
}
std::string added_columns_sql() {
  std::string sql;
  for_each_table([&]<class Tbl>(Tbl) {
    for (const Column& c : columns<Tbl>())
      if (c.added) sql += add_column_sql(Tbl::info, c, kPostgres) + ";\n";
  });
  return sql;
}

/// Text parameters of one statement, bound by position ($1 = bind(1, …)).
class Params {
 public:
  void bind(int i, std::int64_t v) { set(i, std::to_string(v)); }
  void bind(int i, double v) { set(i, fmt::format("{}", v)); }  // shortest text that reads back exactly
  void bind(int i, const std::string& v) { set(i, v); }
  void bind_null(int i) { set(i, std::nullopt); }
  void bind_all(const std::vector<std::int64_t>& values, int first = 1) {
    for (std::size_t i = 0; i < values.size(); ++i) bind(first + static_cast<int>(i), values[i]);
  }
  int size() const { return static_cast<int>(values_.size()); }
  const char* const* pointers() {
    ptrs_.clear();
    for (const auto& v : values_) ptrs_.push_back(v ? v->c_str() : nullptr);
    return ptrs_.data();
  }

 private:
  void set(int i, std::optional<std::string> v) {
    if (static_cast<int>(values_.size()) < i) values_.resize(static_cast<std::size_t>(i));
    values_[static_cast<std::size_t>(i - 1)] = std::move(v);
  }
  std::vector<std::optional<std::string>> values_;
  std::vector<const char*> ptrs_;
};

/// A query result, read as the SQLite statement is (row set by `at`).
class Rows {
 public:
  explicit Rows(PGresult* r) : r_(r) {}
  ~Rows() { PQclear(r_); }
  Rows(Rows&& o) noexcept : r_(o.r_), row_(o.row_) { o.r_ = nullptr; }
  Rows(const Rows&) = delete;
  Rows& operator=(const Rows&) = delete;
  int count() const { return PQntuples(r_); }
  void at(int row) { row_ = row; }
  bool is_null(int c) const { return PQgetisnull(r_, row_, c) != 0; }
  std::int64_t i64(int c) const { return std::strtoll(PQgetvalue(r_, row_, c), nullptr, 10); }
  double f64(int c) const { return std::strtod(PQgetvalue(r_, row_, c), nullptr); }
  std::string text(int c) const { return PQgetvalue(r_, row_, c); }
  std::string_view view(int c) const {
    return {PQgetvalue(r_, row_, c), static_cast<std::size_t>(PQgetlength(r_, row_, c))};
  }
  std::optional<std::int64_t> oi64(int c) const { return is_null(c) ? std::nullopt : std::optional(i64(c)); }
  std::optional<double> of64(int c) const { return is_null(c) ? std::nullopt : std::optional(f64(c)); }
  std::optional<std::string> otext(int c) const { return is_null(c) ? std::nullopt : std::optional(text(c)); }

 private:
  PGresult* r_;
  int row_ = 0;
};

/// Rows per multi-row INSERT (PostgreSQL takes at most 65535 parameters per statement).
constexpr std::size_t kRowsPerInsert = 500;

class PgLedger final : public Ledger {
 public:
  PgLedger(PGconn* conn, std::string location) : conn_(conn), location_(redact_location(location)) {}
  ~PgLedger() override { PQfinish(conn_); }

  std::string describe() const override { return location_; }
  std::string backend() const override { return "postgresql"; }

  Result<int> schema_version() const override {
    GM_TRY(Rows r,
           query("SELECT value FROM meta WHERE key='schema_version'", nullptr, "read schema version"));
    if (r.count() == 0) return 0;
    return static_cast<int>(r.i64(0));
  }

  /// Creates the schema or migrates it to kSchemaVersion, under an advisory lock (two first users at once).
  Result<void> migrate() {
    GM_TRY_VOID(exec("BEGIN", "begin"));
    auto fail = [&](Error e) -> Result<void> {
      (void)exec("ROLLBACK", "rollback");
      return e;
    };
    if (auto r = exec("SELECT pg_advisory_xact_lock(7302029)", "lock the schema"); !r) return fail(r.error());
    // Quiet the NOTICEs of IF NOT EXISTS.
    if (auto r = exec("SET LOCAL client_min_messages = warning", "settings"); !r) return fail(r.error());
    int version = 0;
    {
      auto exists = query("SELECT to_regclass('meta') IS NOT NULL", nullptr, "read schema");
      if (!exists) return fail(exists.error());
      if (exists->text(0) == "t") {
        auto v = schema_version();
        if (!v) return fail(v.error());
        version = *v;
      }
    }
    if (version > kSchemaVersion)
      return fail(
          make_error(ErrorKind::unavailable,
                     fmt::format("ledger {}: schema version {} is newer than this gpumeter understands ({})",
                                 location_, version, kSchemaVersion)));
    if (version < 1)
      if (auto r = exec(pg_schema_sql(1), "create the tables"); !r) return fail(r.error());
    if (version < 2)
      if (auto r = exec(pg_schema_sql(2), "migrate the schema to version 2"); !r) return fail(r.error());
    if (auto r = exec(added_columns_sql(), "add the columns added since"); !r) return fail(r.error());
    if (version == kSchemaVersion) return exec("COMMIT", "commit");
    Params p;
    p.bind(1, std::int64_t{kSchemaVersion});
    auto w = command(
        "INSERT INTO meta (key, value) VALUES ('schema_version', $1) ON CONFLICT (key) DO UPDATE SET "
        "value=$1",
        &p, "write the schema version");
    if (!w) return fail(w.error());
    return exec("COMMIT", "commit");
  }

  Result<std::int64_t> begin_run(const RunRecord& run) override {
    RunRecord r = run;
    stamp_meter(r, false);
    return insert_run(r);
  }

  Result<void> update_run(const RunRecord& run) override {
    RunRecord r = run;
    stamp_meter(r, true);
    return write_run(r);
  }

  Result<void> append(const std::vector<SampleRecord>& samples, const std::vector<ProgressRecord>& progress,
                      const std::vector<ActionRecord>& actions) override {
    if (samples.empty() && progress.empty() && actions.empty()) return ok_result();
    // One table's rows in one statement are atomic by themselves: no BEGIN/COMMIT round trips (the
    // common tick: samples only).
    const int tables = !samples.empty() + !progress.empty() + !actions.empty();
    if (tables == 1 && samples.size() <= kRowsPerInsert && progress.size() <= kRowsPerInsert &&
        actions.size() <= kRowsPerInsert)
      return insert_rows(samples, progress, actions);
    return in_transaction([&]() { return insert_rows(samples, progress, actions); });
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

  Result<std::vector<CellRecord>> cells(std::int64_t run_id) const override {
    return rows_of_run<CellsTable>(run_id);
  }

  Result<RunRecord> run(std::int64_t id) const override {
    Params p;
    p.bind(1, id);
    GM_TRY(Rows r, query(select_sql<RunsTable>(kPostgres, "id=$1"), &p, "select run"));
    if (r.count() == 0)
      return make_error(ErrorKind::not_found, "no run " + std::to_string(id) + " in " + location_);
    GM_TRY(RunRecord run, read_row<RunsTable>(r));
    return fix_status(std::move(run));
  }

  Result<RunRecord> last_run() const override {
    GM_TRY(std::vector<RunRecord> all, runs(RunFilter{std::nullopt, std::nullopt, 1}));
    if (all.empty()) return make_error(ErrorKind::not_found, "no runs in the ledger " + location_);
    return all.front();
  }

  Result<std::vector<RunRecord>> runs(const RunFilter& filter) const override {
    GM_TRY(Rows r, select_runs(column_list(RunsTable::info, columns<RunsTable>(), true), filter));
    std::vector<RunRecord> out;
    out.reserve(static_cast<std::size_t>(r.count()));
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      GM_TRY(RunRecord run, read_row<RunsTable>(r));
      out.push_back(fix_status(std::move(run)));
    }
    return out;
  }

  Result<std::vector<RunSummary>> run_summaries(const RunFilter& filter) const override {
    GM_TRY(Rows r, select_runs(column_list(RunSummaryView::info, columns<RunSummaryView>(), true), filter));
    std::vector<RunSummary> out;
    out.reserve(static_cast<std::size_t>(r.count()));
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      GM_TRY(RunSummary summary, read_row<RunSummaryView>(r));
      out.push_back(std::move(summary));
      if (out.back().status == RunStatus::running) {  // live, or its meter died: the run's own read decides
        GM_TRY(RunRecord full, run(out.back().id));
        out.back() = summarize(full);
      }
    }
    return out;
  }

  Result<std::vector<SampleRecord>> samples(std::int64_t run_id) const override {
    return rows_of_run<SamplesTable>(run_id);
  }
  Result<std::vector<ProgressRecord>> progress(std::int64_t run_id) const override {
    return rows_of_run<ProgressTable>(run_id);
  }
  Result<std::vector<ActionRecord>> actions(std::int64_t run_id) const override {
    return rows_of_run<ActionsTable>(run_id);
  }
  Result<std::vector<InferenceRecord>> inference(std::int64_t run_id) const override {
    return rows_of_run<InferenceTable>(run_id);
  }

  Result<std::vector<RollupRecord>> rollups(const RunFilter& filter) const override {
    const Where where = rollups_where(kPostgres, filter);
    Params p;
    p.bind_all(where.values);
    GM_TRY(Rows r,
           query(select_sql<RollupsTable>(kPostgres, where.sql) + limit_sql(filter), &p, "select rollups"));
    return read_rows<RollupsTable>(r);
  }

  Result<std::vector<RollupBucket>> rollup_buckets(const RunFilter& filter,
                                                   std::int64_t bucket_ms) const override {
    Params p;
    p.bind(1, std::max<std::int64_t>(60'000, bucket_ms));
    std::string sql =
        "SELECT run_id, minute_unix * 60000 / $1 * $1 AS bucket, SUM(samples), SUM(utilization_sum_pct), "
        "SUM(energy_j), SUM(cost_micros) FROM rollups WHERE ";
    const Where where = rollups_where(kPostgres, filter, 2);
    p.bind_all(where.values, 2);
    sql += where.sql + " GROUP BY run_id, bucket ORDER BY bucket, run_id";
    GM_TRY(Rows r, query(sql, &p, "select rollup buckets"));
    std::vector<RollupBucket> out;
    out.reserve(static_cast<std::size_t>(r.count()));
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      out.push_back(RollupBucket{r.i64(0), r.i64(1), r.i64(2), r.f64(3), r.f64(4), r.i64(5)});
    }
    return out;
  }

  Result<ImportOutcome> import_run(const RunBundle& b, const std::string& import_key,
                                   std::int64_t into_run_id) override {
    ImportOutcome out;
    auto r = in_transaction([&]() -> Result<void> {
      // Two replays of one key at once: the second waits here for the first, then sees its key.
      Params k;
      k.bind(1, import_key);
      GM_TRY_VOID(command("SELECT pg_advisory_xact_lock(hashtext($1))", &k, "lock the import"));
      GM_TRY(Rows seen, query("SELECT run_id FROM imports WHERE import_key=$1", &k, "read imports"));
      if (seen.count() > 0) {
        out = ImportOutcome{seen.i64(0), false};
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
    if (!r) return r.error();
    return out;
  }

  Result<void> set_budget(const BudgetRecord& b) override {
    BudgetRecord row = b;
    if (!row.updated_unix_ms) row.updated_unix_ms = now_unix_ms();
    return insert<BudgetsTable>({row});
  }

  Result<std::vector<BudgetRecord>> budgets() const override {
    GM_TRY(Rows r, query(select_sql<BudgetsTable>(kPostgres, ""), nullptr, "select budgets"));
    return read_rows<BudgetsTable>(r);
  }

  Result<void> remove_budget(const std::string& selector) override {
    Params p;
    p.bind(1, selector);
    GM_TRY(Rows r, query("DELETE FROM budgets WHERE selector=$1 RETURNING selector", &p, "remove budget"));
    if (r.count() == 0)
      return make_error(ErrorKind::not_found, "no budget for " + selector + " in the ledger " + location_);
    return ok_result();
  }

  Result<SelectorSpend> selector_spend(const std::string& key, const std::string& value,
                                       std::int64_t since_unix_ms,
                                       std::int64_t exclude_run_id) const override {
    const std::string match = key == "user"   ? "\"user\" = $1"
                              : key == "host" ? "host = $1"
                                              : "(labels_json::jsonb ->> $4::text) = $1";
    Params p;
    p.bind(1, value);
    p.bind(2, since_unix_ms);
    p.bind(3, exclude_run_id);
    p.bind(4, key);
    p.bind(5, now_unix_ms() - kStaleHeartbeatMs);
    GM_TRY(Rows r, query("SELECT COALESCE(SUM(cost_micros), 0), COUNT(*), "
                         "COUNT(*) FILTER (WHERE status = 'running' AND heartbeat_unix_ms > $5) "
                         "FROM runs WHERE start_unix_ms >= $2 AND id <> $3 AND " +
                             match + " AND $4::text <> ''",
                         &p, "selector spend"));
    return SelectorSpend{r.i64(0), r.i64(1), r.i64(2)};
  }

 private:
  /// SELECT `columns` of the runs of `filter`, newest first.
  Result<Rows> select_runs(const std::string& columns, const RunFilter& filter) const {
    const Where where = runs_where(kPostgres, filter);
    Params p;
    p.bind_all(where.values);
    return query("SELECT " + columns + " FROM runs WHERE " + where.sql +
                     " ORDER BY start_unix_ms DESC, id DESC" + limit_sql(filter),
                 &p, "select runs");
  }

  template <class Tbl>
  static Result<std::vector<typename Tbl::Record>> read_rows(Rows& r) {
    std::vector<typename Tbl::Record> out;
    out.reserve(static_cast<std::size_t>(r.count()));
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      GM_TRY(auto row, read_row<Tbl>(r));
      out.push_back(std::move(row));
    }
    return out;
  }

  /// A run's rows of table `Tbl`, in their order.
  template <class Tbl>
  Result<std::vector<typename Tbl::Record>> rows_of_run(std::int64_t run_id) const {
    Params p;
    p.bind(1, run_id);
    GM_TRY(Rows r,
           query(select_sql<Tbl>(kPostgres, "run_id=$1"), &p, std::string("select ") + Tbl::info.name));
    return read_rows<Tbl>(r);
  }

  /// One statement; a broken connection is reset once (the server restarted) before giving up. `prepare`: a
  /// statement run every interval, parsed and planned by the server once per connection.
  Result<Rows> query(const std::string& sql, Params* p, const std::string& what, bool prepare = false) const {
    for (int attempt = 0;; ++attempt) {
      const std::string* name = prepare && p ? prepared(sql) : nullptr;
      PGresult* res =
          name ? PQexecPrepared(conn_, name->c_str(), p->size(), p->pointers(), nullptr, nullptr, 0)
          : p  ? PQexecParams(conn_, sql.c_str(), p->size(), nullptr, p->pointers(), nullptr, nullptr, 0)
               : PQexec(conn_, sql.c_str());
      const auto status = PQresultStatus(res);
      if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) return Rows(res);
      PQclear(res);
      if (PQstatus(conn_) == CONNECTION_BAD && attempt == 0 &&
          PQtransactionStatus(conn_) != PQTRANS_INTRANS && depth_ == 0) {
        PQreset(conn_);
        prepared_.clear();  // a new session: its statements are gone
        if (PQstatus(conn_) == CONNECTION_OK) continue;
      }
      return error(what);
    }
  }
  Result<void> command(const std::string& sql, Params* p, const std::string& what,
                       bool prepare = false) const {
    GM_TRY(Rows r, query(sql, p, what, prepare));
    (void)r;
    return ok_result();
  }
  /// The name of `sql` prepared on this connection (prepared now if new); null when it cannot be (too many
  /// already, a failed transaction, a lost connection): then the statement is sent with its text.
  const std::string* prepared(const std::string& sql) const {
    if (auto it = prepared_.find(sql); it != prepared_.end()) return &it->second;
    if (prepared_.size() >= kMaxPrepared || PQtransactionStatus(conn_) == PQTRANS_INERROR) return nullptr;
    std::string name = "gm_" + std::to_string(prepared_.size());
    PGresult* r = PQprepare(conn_, name.c_str(), sql.c_str(), 0, nullptr);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) return nullptr;
    return &prepared_.emplace(sql, std::move(name)).first->second;
  }
  Result<void> exec(const std::string& sql, const std::string& what) const {
    return command(sql, nullptr, what);
  }

  Error error(const std::string& what) const {
    std::string msg = PQerrorMessage(conn_);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    const bool gone = PQstatus(conn_) == CONNECTION_BAD;
    return make_error(gone ? ErrorKind::unavailable : ErrorKind::failure,
                      "ledger " + location_ + ": " + what + ": " + msg);
  }

  template <class F>
  Result<void> in_transaction(F&& body) {
    GM_TRY_VOID(exec("BEGIN", "begin"));
    ++depth_;
    auto r = body();
    --depth_;
    if (!r) {
      if (PQstatus(conn_) == CONNECTION_OK) (void)exec("ROLLBACK", "rollback");
      return r;
    }
    return exec("COMMIT", "commit");
  }

  Result<std::int64_t> insert_run(const RunRecord& r) {
    Params p;
    bind_row<RunsTable>(p, r);
    GM_TRY(Rows rows, query(insert_sql<RunsTable>(kPostgres) + " RETURNING id", &p, "insert run"));
    return rows.i64(0);
  }

  Result<void> write_run(const RunRecord& r) {
    const auto& cols = columns<RunsTable>();
    Params p;
    bind_row<RunsTable>(p, r);
    p.bind(static_cast<int>(cols.size()) + 1, r.id);
    GM_TRY(Rows rows,
           query(update_sql(RunsTable::info, cols, kPostgres) + " RETURNING id", &p, "update run", true));
    if (rows.count() == 0) return make_error(ErrorKind::not_found, "no run " + std::to_string(r.id));
    return ok_result();
  }

  template <class Tbl>
  Result<void> append_rows(const std::vector<typename Tbl::Record>& rows) {
    if (rows.empty()) return ok_result();
    if (rows.size() <= kRowsPerInsert) return insert<Tbl>(rows);  // one statement: atomic by itself
    return in_transaction([&]() { return insert<Tbl>(rows); });
  }

  /// Multi-row INSERTs of `rows`, kRowsPerInsert at a time.
  template <class Tbl>
  Result<void> insert(const std::vector<typename Tbl::Record>& rows) {
    const int columns = static_cast<int>(detail::columns<Tbl>().size());
    for (std::size_t start = 0; start < rows.size(); start += kRowsPerInsert) {
      const std::size_t end = std::min(rows.size(), start + kRowsPerInsert);
      Params p;
      for (std::size_t i = start; i < end; ++i)
        bind_row<Tbl>(p, rows[i], static_cast<int>(i - start) * columns + 1);
      GM_TRY_VOID(command(insert_sql<Tbl>(kPostgres, end - start), &p,
                          std::string("insert ") + Tbl::info.name, true));
    }
    return ok_result();
  }

  Result<void> insert_rows(const std::vector<SampleRecord>& samples,
                           const std::vector<ProgressRecord>& progress,
                           const std::vector<ActionRecord>& actions) {
    GM_TRY_VOID(insert<SamplesTable>(samples));
    GM_TRY_VOID(insert<ProgressTable>(progress));
    return insert<ActionsTable>(actions);
  }

  RunRecord fix_status(RunRecord r) const {
    if (r.status == RunStatus::running && meter_is_dead(r)) {
      r.status = RunStatus::interrupted;
      Params p;
      p.bind(1, r.id);
      auto rows = query("SELECT max(t_ms), sum(cost_micros), sum(energy_j) FROM samples WHERE run_id=$1", &p,
                        "select samples");
      if (rows && rows->count() > 0 && !rows->is_null(0))
        include_committed(r, rows->i64(0), rows->i64(1), rows->f64(2));
    }
    return r;
  }

  /// A run's statements per interval: its row and each table's INSERT of one row count.
  static constexpr std::size_t kMaxPrepared = 32;

  PGconn* conn_;
  std::string location_;  ///< redacted
  int depth_ = 0;         ///< open transactions (no reset inside one)
  mutable std::unordered_map<std::string, std::string> prepared_;  ///< SQL text → prepared statement name
};

}  // namespace

Result<std::unique_ptr<Ledger>> open_postgres(const std::string& location, bool migrate) {
  // connect_timeout first: a value in the location (expanded from dbname) overrides it.
  const std::string uri = location.rfind("postgresql:", 0) == 0 && location.rfind("postgresql://", 0) != 0
                              ? "postgresql://" + location.substr(11)
                              : location;
  const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"5", "gpumeter", uri.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, 1);
  if (!conn)
    return make_error(ErrorKind::unavailable, "ledger " + redact_location(location) + ": out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string msg = PQerrorMessage(conn);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    PQfinish(conn);
    return make_error(ErrorKind::unavailable,
                      "ledger " + redact_location(location) + ": cannot connect: " + redact_location(msg));
  }
  auto ledger = std::make_unique<PgLedger>(conn, location);
  if (migrate) {
    if (auto r = ledger->migrate(); !r) return r.error();
  } else {
    GM_TRY(int version, ledger->schema_version());
    if (version != Ledger::kSchemaVersion)
      return make_error(
          ErrorKind::unavailable,
          fmt::format("ledger {}: schema version {}, this gpumeter writes {}: run `gpumeter ledger "
                      "migrate --ledger {}` with a role that may alter its tables",
                      redact_location(location), version, Ledger::kSchemaVersion, redact_location(location)));
  }
  return std::unique_ptr<Ledger>(std::move(ledger));
}

}  // namespace gm::store::detail
