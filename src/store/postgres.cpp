// The PostgreSQL ledger (libpq): the same tables as the SQLite ledger, shared by many machines. Passwords come
// from the URI, PGPASSFILE / ~/.pgpass or PGPASSWORD as libpq reads them, TLS as libpq negotiates it; no
// message carries the password (redact_location).
#include <fmt/format.h>
#include <libpq-fe.h>

#include <cstdlib>
#include <optional>
#include <unordered_map>

#include "store/detail.h"

namespace gm::store_detail {
namespace {

/// Schema version 1 as PostgreSQL types (the SQLite ledger's version 1), then version 2.
const char* kPgSchemaV1 = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
  id BIGSERIAL PRIMARY KEY,
  command TEXT NOT NULL, "user" TEXT NOT NULL, host TEXT NOT NULL, labels_json TEXT NOT NULL,
  start_unix_ms BIGINT NOT NULL, end_unix_ms BIGINT, status TEXT NOT NULL, exit_code BIGINT,
  stopped_by TEXT, price_micros_per_gpu_hour BIGINT NOT NULL, price_source TEXT NOT NULL,
  provider TEXT NOT NULL, region TEXT NOT NULL, billing_granularity_s BIGINT NOT NULL,
  billing_minimum_s BIGINT NOT NULL, gpus_allocated_json TEXT NOT NULL, gpus_used_json TEXT NOT NULL,
  gpu_model TEXT NOT NULL, budget_micros BIGINT, total_steps BIGINT, wall_ms BIGINT NOT NULL,
  billed_s BIGINT NOT NULL, cost_micros BIGINT NOT NULL, idle_cost_micros BIGINT NOT NULL,
  unused_gpu_cost_micros BIGINT NOT NULL, energy_j DOUBLE PRECISION NOT NULL, energy_method TEXT NOT NULL,
  co2_kg DOUBLE PRECISION, carbon_source TEXT NOT NULL, forecast_cost_usd DOUBLE PRECISION,
  meter_pid BIGINT NOT NULL, meter_host TEXT NOT NULL, heartbeat_unix_ms BIGINT NOT NULL, steps BIGINT,
  samples_done BIGINT, tokens_done BIGINT, preempt_provider TEXT, preempt_notice_unix_ms BIGINT,
  preempt_deadline_unix_ms BIGINT, last_checkpoint_ms BIGINT, lost_work_micros BIGINT);
CREATE INDEX IF NOT EXISTS runs_start ON runs(start_unix_ms);
CREATE TABLE IF NOT EXISTS samples (
  seq BIGSERIAL, run_id BIGINT NOT NULL, t_ms BIGINT NOT NULL, gpu_index BIGINT NOT NULL, gpu_uuid TEXT NOT NULL,
  utilization_pct DOUBLE PRECISION, memory_used_bytes BIGINT, power_w DOUBLE PRECISION,
  temperature_c DOUBLE PRECISION, energy_j DOUBLE PRECISION NOT NULL, cost_micros BIGINT NOT NULL,
  job_present BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS samples_run ON samples(run_id, t_ms);
CREATE TABLE IF NOT EXISTS progress (
  seq BIGSERIAL, run_id BIGINT NOT NULL, t_ms BIGINT NOT NULL, step BIGINT, total_steps BIGINT, samples BIGINT,
  tokens BIGINT, metrics_json TEXT NOT NULL, cost_micros BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS progress_run ON progress(run_id, t_ms);
CREATE TABLE IF NOT EXISTS actions (
  seq BIGSERIAL, run_id BIGINT NOT NULL, t_ms BIGINT NOT NULL, kind TEXT NOT NULL, cost_micros BIGINT NOT NULL,
  message TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS actions_run ON actions(run_id, t_ms);
CREATE TABLE IF NOT EXISTS rollups (
  run_id BIGINT NOT NULL, minute_unix BIGINT NOT NULL, gpu_index BIGINT NOT NULL, samples BIGINT NOT NULL,
  utilization_sum_pct DOUBLE PRECISION NOT NULL, memory_max_bytes DOUBLE PRECISION NOT NULL,
  energy_j DOUBLE PRECISION NOT NULL, cost_micros BIGINT NOT NULL, PRIMARY KEY (run_id, minute_unix, gpu_index));
CREATE INDEX IF NOT EXISTS rollups_minute ON rollups(minute_unix);
CREATE TABLE IF NOT EXISTS inference (
  seq BIGSERIAL, run_id BIGINT NOT NULL, t_ms BIGINT NOT NULL, model TEXT NOT NULL, engine TEXT NOT NULL,
  prompt_tokens DOUBLE PRECISION, generated_tokens DOUBLE PRECISION, cached_tokens DOUBLE PRECISION,
  requests DOUBLE PRECISION, cost_micros BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS inference_run ON inference(run_id, t_ms);
CREATE TABLE IF NOT EXISTS cells (
  seq BIGSERIAL, run_id BIGINT NOT NULL, cell_id BIGINT NOT NULL, start_ms BIGINT NOT NULL, end_ms BIGINT NOT NULL,
  cost_micros BIGINT NOT NULL, utilization_pct DOUBLE PRECISION, status TEXT NOT NULL, source TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS cells_run ON cells(run_id, start_ms);
)sql";

/// Columns added to existing tables after they were created (idempotent): MFU and GPM activity (issue 37).
const char* kPgColumnsAdded = R"sql(
ALTER TABLE runs ADD COLUMN IF NOT EXISTS flops_per_token DOUBLE PRECISION,
  ADD COLUMN IF NOT EXISTS mfu_basis TEXT, ADD COLUMN IF NOT EXISTS mfu_precision TEXT;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS gpm_sm_active_pct DOUBLE PRECISION,
  ADD COLUMN IF NOT EXISTS gpm_sm_occupancy_pct DOUBLE PRECISION,
  ADD COLUMN IF NOT EXISTS gpm_tensor_active_pct DOUBLE PRECISION,
  ADD COLUMN IF NOT EXISTS gpm_fp32_active_pct DOUBLE PRECISION,
  ADD COLUMN IF NOT EXISTS gpm_fp16_active_pct DOUBLE PRECISION,
  ADD COLUMN IF NOT EXISTS gpm_fp64_active_pct DOUBLE PRECISION,
  ADD COLUMN IF NOT EXISTS gpm_dram_bw_util_pct DOUBLE PRECISION;
)sql";

const char* kPgSchemaV2 = R"sql(
CREATE TABLE IF NOT EXISTS budgets (
  selector TEXT PRIMARY KEY, limit_micros BIGINT NOT NULL, period TEXT NOT NULL, updated_unix_ms BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS imports (
  import_key TEXT PRIMARY KEY, run_id BIGINT NOT NULL, imported_unix_ms BIGINT NOT NULL);
)sql";

/// Text parameters of one statement, bound by position ($1 = bind(1, …)).
class Params {
 public:
  void bind(int i, std::int64_t v) { set(i, std::to_string(v)); }
  void bind(int i, int v) { set(i, std::to_string(v)); }
  void bind(int i, unsigned v) { set(i, std::to_string(v)); }
  void bind(int i, double v) { set(i, fmt::format("{}", v)); }  // shortest text that reads back exactly
  void bind(int i, const std::string& v) { set(i, v); }
  void bind(int i, const char* v) { set(i, std::string(v)); }
  template <class T>
  void bind(int i, const std::optional<T>& v) {
    if (v)
      bind(i, *v);
    else
      set(i, std::nullopt);
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
    GM_TRY(Rows r, query("SELECT value FROM meta WHERE key='schema_version'", nullptr, "read schema version"));
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
      if (auto r = exec(kPgSchemaV1, "create the tables"); !r) return fail(r.error());
    if (version < 2)
      if (auto r = exec(kPgSchemaV2, "migrate the schema to version 2"); !r) return fail(r.error());
    if (auto r = exec(kPgColumnsAdded, "add the GPM sample columns"); !r) return fail(r.error());
    if (version == kSchemaVersion) return exec("COMMIT", "commit");
    Params p;
    p.bind(1, std::to_string(kSchemaVersion));
    auto w = command(
        "INSERT INTO meta (key, value) VALUES ('schema_version', $1) ON CONFLICT (key) DO UPDATE SET value=$1", &p,
        "write the schema version");
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
    if (rollups.empty()) return ok_result();
    if (rollups.size() <= kRowsPerInsert) return insert_rollups(rollups);  // one statement: atomic by itself
    return in_transaction([&]() { return insert_rollups(rollups); });
  }

  Result<void> append_inference(const std::vector<InferenceRecord>& records) override {
    if (records.empty()) return ok_result();
    if (records.size() <= kRowsPerInsert) return insert_inference(records);
    return in_transaction([&]() { return insert_inference(records); });
  }

  Result<void> append_cells(const std::vector<CellRecord>& cells) override {
    if (cells.empty()) return ok_result();
    if (cells.size() <= kRowsPerInsert) return insert_cells(cells);
    return in_transaction([&]() { return insert_cells(cells); });
  }

  Result<std::vector<CellRecord>> cells(std::int64_t run_id) const override {
    Params p;
    p.bind(1, run_id);
    GM_TRY(Rows r, query("SELECT run_id, cell_id, start_ms, end_ms, cost_micros, utilization_pct, status, source "
                         "FROM cells WHERE run_id=$1 ORDER BY start_ms, seq",
                         &p, "select cells"));
    std::vector<CellRecord> out;
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      out.push_back(CellRecord{r.i64(0), r.i64(1), r.i64(2), r.i64(3), r.i64(4), r.of64(5), r.text(6), r.text(7)});
    }
    return out;
  }

  Result<RunRecord> run(std::int64_t id) const override {
    Params p;
    p.bind(1, id);
    GM_TRY(Rows r, query("SELECT " + run_columns(true) + " FROM runs WHERE id=$1", &p, "select run"));
    if (r.count() == 0) return make_error(ErrorKind::not_found, "no run " + std::to_string(id) + " in " + location_);
    return fix_status(read_run(r));
  }

  Result<RunRecord> last_run() const override {
    GM_TRY(std::vector<RunRecord> all, runs(RunFilter{std::nullopt, std::nullopt, 1}));
    if (all.empty()) return make_error(ErrorKind::not_found, "no runs in the ledger " + location_);
    return all.front();
  }

  Result<std::vector<RunRecord>> runs(const RunFilter& filter) const override {
    GM_TRY(Rows r, select_runs(run_columns(true), filter));
    std::vector<RunRecord> out;
    out.reserve(static_cast<std::size_t>(r.count()));
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      out.push_back(fix_status(read_run(r)));
    }
    return out;
  }

  Result<std::vector<RunSummary>> run_summaries(const RunFilter& filter) const override {
    GM_TRY(Rows r, select_runs(kSummaryColumns, filter));
    std::vector<RunSummary> out;
    out.reserve(static_cast<std::size_t>(r.count()));
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      out.push_back(read_summary(r));
      if (out.back().status == "running") {  // live, or its meter died: the run's own read decides
        GM_TRY(RunRecord full, run(out.back().id));
        out.back() = summarize(full);
      }
    }
    return out;
  }

  Result<std::vector<SampleRecord>> samples(std::int64_t run_id) const override {
    Params p;
    p.bind(1, run_id);
    GM_TRY(Rows r,
           query("SELECT run_id, t_ms, gpu_index, gpu_uuid, utilization_pct, memory_used_bytes, power_w, "
                 "temperature_c, energy_j, cost_micros, job_present, " GM_GPM_COLUMNS
                 " FROM samples WHERE run_id=$1 "
                 "ORDER BY t_ms, gpu_index, seq",
                 &p, "select samples"));
    std::vector<SampleRecord> out;
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      SampleRecord x;
      x.run_id = r.i64(0);
      x.t_ms = r.i64(1);
      x.gpu_index = static_cast<unsigned>(r.i64(2));
      x.gpu_uuid = r.text(3);
      x.utilization_pct = r.of64(4);
      if (auto m = r.oi64(5)) x.memory_used_bytes = static_cast<std::uint64_t>(*m);
      x.power_w = r.of64(6);
      x.temperature_c = r.of64(7);
      x.energy_j = r.f64(8);
      x.cost_micros = r.i64(9);
      x.job_present = r.i64(10) != 0;
      x.gpm = {r.of64(11), r.of64(12), r.of64(13), r.of64(14), r.of64(15), r.of64(16), r.of64(17)};
      out.push_back(std::move(x));
    }
    return out;
  }

  Result<std::vector<ProgressRecord>> progress(std::int64_t run_id) const override {
    Params p;
    p.bind(1, run_id);
    GM_TRY(Rows r, query("SELECT run_id, t_ms, step, total_steps, samples, tokens, metrics_json, cost_micros "
                         "FROM progress WHERE run_id=$1 ORDER BY t_ms, seq",
                         &p, "select progress"));
    std::vector<ProgressRecord> out;
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      ProgressRecord x;
      x.run_id = r.i64(0);
      x.t_ms = r.i64(1);
      x.step = r.oi64(2);
      x.total_steps = r.oi64(3);
      x.samples = r.oi64(4);
      x.tokens = r.oi64(5);
      x.metrics = parse_json_or<std::map<std::string, double>>(r.text(6), {});
      x.cost_micros = r.i64(7);
      out.push_back(std::move(x));
    }
    return out;
  }

  Result<std::vector<ActionRecord>> actions(std::int64_t run_id) const override {
    Params p;
    p.bind(1, run_id);
    GM_TRY(Rows r, query("SELECT run_id, t_ms, kind, cost_micros, message FROM actions WHERE run_id=$1 "
                         "ORDER BY t_ms, seq",
                         &p, "select actions"));
    std::vector<ActionRecord> out;
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      out.push_back(ActionRecord{r.i64(0), r.i64(1), r.text(2), r.i64(3), r.text(4)});
    }
    return out;
  }

  Result<std::vector<InferenceRecord>> inference(std::int64_t run_id) const override {
    Params p;
    p.bind(1, run_id);
    GM_TRY(Rows r, query("SELECT run_id, t_ms, model, engine, prompt_tokens, generated_tokens, cached_tokens, "
                         "requests, cost_micros FROM inference WHERE run_id=$1 ORDER BY t_ms, seq",
                         &p, "select inference"));
    std::vector<InferenceRecord> out;
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      out.push_back(InferenceRecord{r.i64(0), r.i64(1), r.text(2), r.text(3), r.of64(4), r.of64(5), r.of64(6),
                                    r.of64(7), r.i64(8)});
    }
    return out;
  }

  Result<std::vector<RollupRecord>> rollups(const RunFilter& filter) const override {
    std::string sql =
        "SELECT run_id, minute_unix, gpu_index, samples, utilization_sum_pct, memory_max_bytes, energy_j, "
        "cost_micros FROM rollups WHERE true";
    Params p;
    int n = 0;
    if (filter.since_unix_ms) {
      p.bind(++n, *filter.since_unix_ms / 60000);
      sql += fmt::format(" AND minute_unix >= ${}", n);
    }
    if (filter.until_unix_ms) {
      p.bind(++n, (*filter.until_unix_ms + 59999) / 60000);
      sql += fmt::format(" AND minute_unix < ${}", n);
    }
    sql += " ORDER BY minute_unix, run_id, gpu_index";
    if (filter.limit) sql += " LIMIT " + std::to_string(*filter.limit);
    GM_TRY(Rows r, query(sql, &p, "select rollups"));
    std::vector<RollupRecord> out;
    out.reserve(static_cast<std::size_t>(r.count()));
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      out.push_back(RollupRecord{r.i64(0), r.i64(1), static_cast<unsigned>(r.i64(2)), r.i64(3), r.f64(4),
                                 r.f64(5), r.f64(6), r.i64(7)});
    }
    return out;
  }

  Result<std::vector<RollupBucket>> rollup_buckets(const RunFilter& filter, std::int64_t bucket_ms) const override {
    Params p;
    p.bind(1, std::max<std::int64_t>(60'000, bucket_ms));
    std::string sql =
        "SELECT run_id, minute_unix * 60000 / $1 * $1 AS bucket, SUM(samples), SUM(utilization_sum_pct), "
        "SUM(energy_j), SUM(cost_micros) FROM rollups WHERE true";
    int n = 1;
    if (filter.since_unix_ms) {
      p.bind(++n, *filter.since_unix_ms / 60000);
      sql += fmt::format(" AND minute_unix >= ${}", n);
    }
    if (filter.until_unix_ms) {
      p.bind(++n, (*filter.until_unix_ms + 59999) / 60000);
      sql += fmt::format(" AND minute_unix < ${}", n);
    }
    sql += " GROUP BY run_id, bucket ORDER BY bucket, run_id";
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
      RunRecord run = b.run;
      std::int64_t id = into_run_id;
      if (id > 0) {
        run.id = id;
        GM_TRY_VOID(write_run(run));
      } else {
        GM_TRY(id, insert_run(run));
      }
      RunBundle local = b;
      for (auto& x : local.samples) x.run_id = id;
      for (auto& x : local.progress) x.run_id = id;
      for (auto& x : local.actions) x.run_id = id;
      for (auto& x : local.rollups) x.run_id = id;
      for (auto& x : local.inference) x.run_id = id;
      for (auto& x : local.cells) x.run_id = id;
      GM_TRY_VOID(insert_cells(local.cells));
      GM_TRY_VOID(insert_rows(local.samples, local.progress, local.actions));
      GM_TRY_VOID(insert_rollups(local.rollups));
      GM_TRY_VOID(insert_inference(local.inference));
      Params p;
      p.bind(1, import_key);
      p.bind(2, id);
      p.bind(3, now_unix_ms());
      GM_TRY_VOID(command("INSERT INTO imports (import_key, run_id, imported_unix_ms) VALUES ($1,$2,$3)", &p,
                          "record the import"));
      out = ImportOutcome{id, true};
      return ok_result();
    });
    if (!r) return r.error();
    return out;
  }

  Result<void> set_budget(const BudgetRecord& b) override {
    Params p;
    p.bind(1, b.selector);
    p.bind(2, b.limit_micros);
    p.bind(3, b.period);
    p.bind(4, b.updated_unix_ms ? b.updated_unix_ms : now_unix_ms());
    return command(
        "INSERT INTO budgets (selector, limit_micros, period, updated_unix_ms) VALUES ($1,$2,$3,$4) "
        "ON CONFLICT (selector) DO UPDATE SET limit_micros=$2, period=$3, updated_unix_ms=$4",
        &p, "write budget");
  }

  Result<std::vector<BudgetRecord>> budgets() const override {
    GM_TRY(Rows r, query("SELECT selector, limit_micros, period, updated_unix_ms FROM budgets ORDER BY selector",
                         nullptr, "select budgets"));
    std::vector<BudgetRecord> out;
    for (int i = 0; i < r.count(); ++i) {
      r.at(i);
      out.push_back(BudgetRecord{r.text(0), r.i64(1), r.text(2), r.i64(3)});
    }
    return out;
  }

  Result<void> remove_budget(const std::string& selector) override {
    Params p;
    p.bind(1, selector);
    GM_TRY(Rows r, query("DELETE FROM budgets WHERE selector=$1 RETURNING selector", &p, "remove budget"));
    if (r.count() == 0) return make_error(ErrorKind::not_found, "no budget for " + selector + " in the ledger " + location_);
    return ok_result();
  }

  Result<SelectorSpend> selector_spend(const std::string& key, const std::string& value, std::int64_t since_unix_ms,
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
                         "FROM runs WHERE start_unix_ms >= $2 AND id <> $3 AND " + match + " AND $4::text <> ''",
                         &p, "selector spend"));
    return SelectorSpend{r.i64(0), r.i64(1), r.i64(2)};
  }

 private:
  /// SELECT `columns` of the runs of `filter`, newest first.
  Result<Rows> select_runs(const std::string& columns, const RunFilter& filter) const {
    std::string sql = "SELECT " + columns + " FROM runs WHERE true";
    Params p;
    int n = 0;
    if (filter.since_unix_ms) {
      p.bind(++n, *filter.since_unix_ms);
      sql += fmt::format(" AND start_unix_ms >= ${}", n);
    }
    if (filter.until_unix_ms) {
      p.bind(++n, *filter.until_unix_ms);
      sql += fmt::format(" AND start_unix_ms < ${}", n);
    }
    sql += " ORDER BY start_unix_ms DESC, id DESC";
    if (filter.limit) sql += " LIMIT " + std::to_string(*filter.limit);
    return query(sql, &p, "select runs");
  }

  /// One statement; a broken connection is reset once (the server restarted) before giving up. `prepare`: a
  /// statement run every interval, parsed and planned by the server once per connection.
  Result<Rows> query(const std::string& sql, Params* p, const char* what, bool prepare = false) const {
    for (int attempt = 0;; ++attempt) {
      const std::string* name = prepare && p ? prepared(sql) : nullptr;
      PGresult* res =
          name ? PQexecPrepared(conn_, name->c_str(), p->size(), p->pointers(), nullptr, nullptr, 0)
          : p  ? PQexecParams(conn_, sql.c_str(), p->size(), nullptr, p->pointers(), nullptr, nullptr, 0)
               : PQexec(conn_, sql.c_str());
      const auto status = PQresultStatus(res);
      if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) return Rows(res);
      PQclear(res);
      if (PQstatus(conn_) == CONNECTION_BAD && attempt == 0 && PQtransactionStatus(conn_) != PQTRANS_INTRANS &&
          depth_ == 0) {
        PQreset(conn_);
        prepared_.clear();  // a new session: its statements are gone
        if (PQstatus(conn_) == CONNECTION_OK) continue;
      }
      return error(what);
    }
  }
  Result<void> command(const std::string& sql, Params* p, const char* what, bool prepare = false) const {
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
  Result<void> exec(const char* sql, const char* what) const { return command(sql, nullptr, what); }

  Error error(const char* what) const {
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
    std::string marks;
    for (int i = 1; i <= kRunColumnCount; ++i) marks += fmt::format("{}${}", i > 1 ? "," : "", i);
    Params p;
    bind_run(p, r);
    GM_TRY(Rows rows, query("INSERT INTO runs (" + run_columns(false) + ") VALUES (" + marks + ") RETURNING id", &p,
                            "insert run"));
    return rows.i64(0);
  }

  Result<void> write_run(const RunRecord& r) {
    std::string sql = "UPDATE runs SET ";
    for (int i = 0; i < kRunColumnCount; ++i) sql += fmt::format("{}{}=${}", i ? ", " : "", kRunColumnNames[i], i + 1);
    sql += fmt::format(" WHERE id=${} RETURNING id", kRunColumnCount + 1);
    Params p;
    bind_run(p, r);
    p.bind(kRunColumnCount + 1, r.id);
    GM_TRY(Rows rows, query(sql, &p, "update run", true));
    if (rows.count() == 0) return make_error(ErrorKind::not_found, "no run " + std::to_string(r.id));
    return ok_result();
  }

  /// Multi-row INSERTs of `rows`, kRowsPerInsert at a time; `bind_row` binds one row from parameter `first`.
  template <class T, class B>
  Result<void> insert_many(const std::string& head, int columns, const std::vector<T>& rows, B bind_row,
                           const std::string& tail, const char* what) {
    for (std::size_t start = 0; start < rows.size(); start += kRowsPerInsert) {
      const std::size_t end = std::min(rows.size(), start + kRowsPerInsert);
      std::string sql = head + " VALUES ";
      Params p;
      int n = 0;
      for (std::size_t i = start; i < end; ++i) {
        sql += i > start ? ",(" : "(";
        for (int c = 0; c < columns; ++c) sql += fmt::format("{}${}", c ? "," : "", n + c + 1);
        sql += ")";
        bind_row(p, rows[i], n + 1);
        n += columns;
      }
      GM_TRY_VOID(command(sql + tail, &p, what, true));
    }
    return ok_result();
  }

  Result<void> insert_rows(const std::vector<SampleRecord>& samples, const std::vector<ProgressRecord>& progress,
                           const std::vector<ActionRecord>& actions) {
    GM_TRY_VOID(insert_many(
        "INSERT INTO samples (run_id, t_ms, gpu_index, gpu_uuid, utilization_pct, memory_used_bytes, "
        "power_w, "
        "temperature_c, energy_j, cost_micros, job_present, " GM_GPM_COLUMNS ")",
        18, samples,
        [](Params& p, const SampleRecord& x, int i) {
          p.bind(i, x.run_id);
          p.bind(i + 1, x.t_ms);
          p.bind(i + 2, x.gpu_index);
          p.bind(i + 3, x.gpu_uuid);
          p.bind(i + 4, x.utilization_pct);
          if (x.memory_used_bytes)
            p.bind(i + 5, static_cast<std::int64_t>(*x.memory_used_bytes));
          else
            p.bind(i + 5, std::optional<std::int64_t>());
          p.bind(i + 6, x.power_w);
          p.bind(i + 7, x.temperature_c);
          p.bind(i + 8, x.energy_j);
          p.bind(i + 9, x.cost_micros);
          p.bind(i + 10, std::int64_t{x.job_present ? 1 : 0});
          p.bind(i + 11, x.gpm.sm_active);
          p.bind(i + 12, x.gpm.sm_occupancy);
          p.bind(i + 13, x.gpm.tensor_active);
          p.bind(i + 14, x.gpm.fp32_active);
          p.bind(i + 15, x.gpm.fp16_active);
          p.bind(i + 16, x.gpm.fp64_active);
          p.bind(i + 17, x.gpm.dram_bw_util);
        },
        "", "insert samples"));
    GM_TRY_VOID(insert_many(
        "INSERT INTO progress (run_id, t_ms, step, total_steps, samples, tokens, metrics_json, cost_micros)", 8,
        progress,
        [](Params& p, const ProgressRecord& x, int i) {
          p.bind(i, x.run_id);
          p.bind(i + 1, x.t_ms);
          p.bind(i + 2, x.step);
          p.bind(i + 3, x.total_steps);
          p.bind(i + 4, x.samples);
          p.bind(i + 5, x.tokens);
          p.bind(i + 6, json_of(x.metrics));
          p.bind(i + 7, x.cost_micros);
        },
        "", "insert progress"));
    return insert_many(
        "INSERT INTO actions (run_id, t_ms, kind, cost_micros, message)", 5, actions,
        [](Params& p, const ActionRecord& x, int i) {
          p.bind(i, x.run_id);
          p.bind(i + 1, x.t_ms);
          p.bind(i + 2, x.kind);
          p.bind(i + 3, x.cost_micros);
          p.bind(i + 4, x.message);
        },
        "", "insert actions");
  }

  Result<void> insert_rollups(const std::vector<RollupRecord>& rollups) {
    return insert_many(
        "INSERT INTO rollups (run_id, minute_unix, gpu_index, samples, utilization_sum_pct, memory_max_bytes, "
        "energy_j, cost_micros)",
        8, rollups,
        [](Params& p, const RollupRecord& x, int i) {
          p.bind(i, x.run_id);
          p.bind(i + 1, x.minute_unix);
          p.bind(i + 2, x.gpu_index);
          p.bind(i + 3, x.samples);
          p.bind(i + 4, x.utilization_sum_pct);
          p.bind(i + 5, x.memory_max_bytes);
          p.bind(i + 6, x.energy_j);
          p.bind(i + 7, x.cost_micros);
        },
        " ON CONFLICT (run_id, minute_unix, gpu_index) DO UPDATE SET samples=EXCLUDED.samples, "
        "utilization_sum_pct=EXCLUDED.utilization_sum_pct, memory_max_bytes=EXCLUDED.memory_max_bytes, "
        "energy_j=EXCLUDED.energy_j, cost_micros=EXCLUDED.cost_micros",
        "insert rollups");
  }

  Result<void> insert_cells(const std::vector<CellRecord>& cells) {
    return insert_many(
        "INSERT INTO cells (run_id, cell_id, start_ms, end_ms, cost_micros, utilization_pct, status, source)", 8,
        cells,
        [](Params& p, const CellRecord& x, int i) {
          p.bind(i, x.run_id);
          p.bind(i + 1, x.cell_id);
          p.bind(i + 2, x.start_ms);
          p.bind(i + 3, x.end_ms);
          p.bind(i + 4, x.cost_micros);
          p.bind(i + 5, x.utilization_pct);
          p.bind(i + 6, x.status);
          p.bind(i + 7, x.source);
        },
        "", "insert cells");
  }

  Result<void> insert_inference(const std::vector<InferenceRecord>& records) {
    return insert_many(
        "INSERT INTO inference (run_id, t_ms, model, engine, prompt_tokens, generated_tokens, cached_tokens, "
        "requests, cost_micros)",
        9, records,
        [](Params& p, const InferenceRecord& x, int i) {
          p.bind(i, x.run_id);
          p.bind(i + 1, x.t_ms);
          p.bind(i + 2, x.model);
          p.bind(i + 3, x.engine);
          p.bind(i + 4, x.prompt_tokens);
          p.bind(i + 5, x.generated_tokens);
          p.bind(i + 6, x.cached_tokens);
          p.bind(i + 7, x.requests);
          p.bind(i + 8, x.cost_micros);
        },
        "", "insert inference");
  }

  RunRecord fix_status(RunRecord r) const {
    if (r.status == "running" && meter_is_dead(r)) {
      r.status = "interrupted";
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
  if (!conn) return make_error(ErrorKind::unavailable, "ledger " + redact_location(location) + ": out of memory");
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
      return make_error(ErrorKind::unavailable,
                        fmt::format("ledger {}: schema version {}, this gpumeter writes {}: run `gpumeter ledger "
                                    "migrate --ledger {}` with a role that may alter its tables",
                                    redact_location(location), version, Ledger::kSchemaVersion,
                                    redact_location(location)));
  }
  return std::unique_ptr<Ledger>(std::move(ledger));
}

}  // namespace gm::store_detail
