#pragma once
// The ledger's tables, each described once: its columns in order (name, C++ field, and from the field's type
// the SQL type per dialect and NULL-ability), its key, index and row order. SQLite (store.cpp) and
// PostgreSQL (postgres.cpp) generate their CREATE / ALTER / INSERT / UPDATE / SELECT statements from these
// descriptions and bind and read rows through bind_row / read_row; they keep only connection code and the
// queries that are a dialect's own (sums, JSON lookups).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "store/detail.h"
#include "util/enum_text.h"
#include "util/result.h"

namespace gm::store::detail {

/// A column's SQL type, before the dialect names it.
enum class SqlType { integer, real, text };

/// One column of a table description.
struct Column {
  const char* name;  ///< as written in SQL (`"user"` quoted: a reserved word in PostgreSQL)
  SqlType type;
  bool nullable;  ///< the field is a std::optional
  bool added;     ///< added after its table was first released: ledgers created before get it on open
};

/// How a table's rows are identified.
enum class RowKey {
  id,           ///< an `id` primary key the database assigns (runs)
  appended,     ///< append-only rows kept in insertion order (SQLite: rowid; PostgreSQL: a `seq` column)
  primary_key,  ///< TableInfo::primary_key; an insert of an existing key replaces the row
  unique_key,   ///< TableInfo::primary_key; an insert of an existing key fails
};

/// What a table description holds besides its columns.
struct TableInfo {
  const char* name;
  RowKey key;
  int since_version;        ///< the schema version that created the table
  const char* primary_key;  ///< the key's columns (primary_key / unique_key)
  const char* index;        ///< "name(columns)" of its index, or ""
  const char* order;        ///< the row order of a run's rows, before the insertion order; or ""
};

/// The dialect's words for what differs.
struct Dialect {
  const char* integer;
  const char* real;
  const char* id_column;        ///< the runs' id column
  const char* seq_column;       ///< the insertion-order column of appended tables ("" where implicit)
  const char* insertion_order;  ///< what orders appended rows as inserted
  char param;                   ///< '?' (?N) or '$' ($N)
};
inline constexpr Dialect kSqlite{"INTEGER", "REAL", "id INTEGER PRIMARY KEY AUTOINCREMENT", "", "rowid", '?'};
inline constexpr Dialect kPostgres{
    "BIGINT", "DOUBLE PRECISION", "id BIGSERIAL PRIMARY KEY", "seq BIGSERIAL", "seq", '$'};

/// Marks a column added after its table was released (see Column::added).
inline constexpr bool kAdded = true;

/// A JSON list column read as its length only (run summaries).
struct ListCount {
  std::size_t n = 0;
};

/// The meta table's rows (schema_version).
struct MetaRow {
  std::string key;
  std::string value;
};

/// The imports table's rows: a key imported once (copies, spool replays) and the run it became.
struct ImportRow {
  std::string import_key;
  std::int64_t run_id = 0;
  std::int64_t imported_unix_ms = 0;
};

// Table descriptions: `fields(record, visit)` calls visit(column name, field[, kAdded]) in column order.

struct MetaTable {
  using Record = MetaRow;
  static constexpr TableInfo info{"meta", RowKey::primary_key, 1, "key", "", ""};
  template <class R, class V>
  static void fields(R& x, V&& v) {
    v("key", x.key);
    v("value", x.value);
  }
};

struct RunsTable {
  using Record = RunRecord;
  static constexpr TableInfo info{"runs", RowKey::id, 1, "", "runs_start(start_unix_ms)", ""};
  template <class R, class V>
  static void fields(R& x, V&& v) {
    v("command", x.command);
    v("\"user\"", x.user);
    v("host", x.host);
    v("labels_json", x.labels);
    v("start_unix_ms", x.start_unix_ms);
    v("end_unix_ms", x.end_unix_ms);
    v("status", x.status);
    v("exit_code", x.exit_code);
    v("stopped_by", x.stopped_by);
    v("price_micros_per_gpu_hour", x.price_micros_per_gpu_hour);
    v("price_source", x.price_source);
    v("provider", x.provider);
    v("region", x.region);
    v("billing_granularity_s", x.billing_granularity_s);
    v("billing_minimum_s", x.billing_minimum_s);
    v("gpus_allocated_json", x.gpus_allocated);
    v("gpus_used_json", x.gpus_used);
    v("gpu_model", x.gpu_model);
    v("budget_micros", x.budget_micros);
    v("total_steps", x.total_steps);
    v("wall_ms", x.wall_ms);
    v("billed_s", x.billed_s);
    v("cost_micros", x.cost_micros);
    v("idle_cost_micros", x.idle_cost_micros);
    v("unused_gpu_cost_micros", x.unused_gpu_cost_micros);
    v("energy_j", x.energy_j);
    v("energy_method", x.energy_method);
    v("co2_kg", x.co2_kg);
    v("carbon_source", x.carbon_source);
    v("forecast_cost_usd", x.forecast_cost_usd);
    v("meter_pid", x.meter_pid);
    v("meter_host", x.meter_host);
    v("heartbeat_unix_ms", x.heartbeat_unix_ms);
    v("steps", x.steps);
    v("samples_done", x.samples_done);
    v("tokens_done", x.tokens_done);
    v("preempt_provider", x.preemption_provider, kAdded);
    v("preempt_notice_unix_ms", x.preemption_notice_unix_ms, kAdded);
    v("preempt_deadline_unix_ms", x.preemption_deadline_unix_ms, kAdded);
    v("last_checkpoint_ms", x.last_checkpoint_ms, kAdded);
    v("lost_work_micros", x.lost_work_micros, kAdded);
    v("flops_per_token", x.flops_per_token, kAdded);
    v("mfu_basis", x.mfu_basis, kAdded);
    v("mfu_precision", x.mfu_precision, kAdded);
  }
};

/// A run's summary: the runs table read in part (never created or written through this description).
struct RunSummaryView {
  using Record = RunSummary;
  static constexpr TableInfo info{"runs", RowKey::id, 1, "", "", ""};
  template <class R, class V>
  static void fields(R& x, V&& v) {
    v("command", x.command);
    v("\"user\"", x.user);
    v("host", x.host);
    v("labels_json", x.labels);
    v("start_unix_ms", x.start_unix_ms);
    v("status", x.status);
    v("exit_code", x.exit_code);
    v("stopped_by", x.stopped_by);
    v("gpu_model", x.gpu_model);
    ListCount gpus{x.gpus_allocated};
    v("gpus_allocated_json", gpus);
    if constexpr (!std::is_const_v<R>) x.gpus_allocated = gpus.n;
    v("wall_ms", x.wall_ms);
    v("billed_s", x.billed_s);
    v("cost_micros", x.cost_micros);
    v("idle_cost_micros", x.idle_cost_micros);
    v("unused_gpu_cost_micros", x.unused_gpu_cost_micros);
    v("energy_j", x.energy_j);
    v("co2_kg", x.co2_kg);
  }
};

struct SamplesTable {
  using Record = SampleRecord;
  static constexpr TableInfo info{"samples",        RowKey::appended, 1, "", "samples_run(run_id, t_ms)",
                                  "t_ms, gpu_index"};
  template <class R, class V>
  static void fields(R& x, V&& v) {
    v("run_id", x.run_id);
    v("t_ms", x.t_ms);
    v("gpu_index", x.gpu_index);
    v("gpu_uuid", x.gpu_uuid);
    v("utilization_pct", x.utilization_pct);
    v("memory_used_bytes", x.memory_used_bytes);
    v("power_w", x.power_w);
    v("temperature_c", x.temperature_c);
    v("energy_j", x.energy_j);
    v("cost_micros", x.cost_micros);
    v("job_present", x.job_present);
    v("gpm_sm_active_pct", x.gpm.sm_active, kAdded);
    v("gpm_sm_occupancy_pct", x.gpm.sm_occupancy, kAdded);
    v("gpm_tensor_active_pct", x.gpm.tensor_active, kAdded);
    v("gpm_fp32_active_pct", x.gpm.fp32_active, kAdded);
    v("gpm_fp16_active_pct", x.gpm.fp16_active, kAdded);
    v("gpm_fp64_active_pct", x.gpm.fp64_active, kAdded);
    v("gpm_dram_bw_util_pct", x.gpm.dram_bw_util, kAdded);
  }
};

struct ProgressTable {
  using Record = ProgressRecord;
  static constexpr TableInfo info{"progress", RowKey::appended, 1, "", "progress_run(run_id, t_ms)", "t_ms"};
  template <class R, class V>
  static void fields(R& x, V&& v) {
    v("run_id", x.run_id);
    v("t_ms", x.t_ms);
    v("step", x.step);
    v("total_steps", x.total_steps);
    v("samples", x.samples);
    v("tokens", x.tokens);
    v("metrics_json", x.metrics);
    v("cost_micros", x.cost_micros);
  }
};

struct ActionsTable {
  using Record = ActionRecord;
  static constexpr TableInfo info{"actions", RowKey::appended, 1, "", "actions_run(run_id, t_ms)", "t_ms"};
  template <class R, class V>
  static void fields(R& x, V&& v) {
    v("run_id", x.run_id);
    v("t_ms", x.t_ms);
    v("kind", x.kind);
    v("cost_micros", x.cost_micros);
    v("message", x.message);
  }
};

struct RollupsTable {
  using Record = RollupRecord;
  static constexpr TableInfo info{"rollups",
                                  RowKey::primary_key,
                                  1,
                                  "run_id, minute_unix, gpu_index",
                                  "rollups_minute(minute_unix)",
                                  "minute_unix, run_id, gpu_index"};
  template <class R, class V>
  static void fields(R& x, V&& v) {
    v("run_id", x.run_id);
    v("minute_unix", x.minute_unix);
    v("gpu_index", x.gpu_index);
    v("samples", x.samples);
    v("utilization_sum_pct", x.utilization_sum_pct);
    v("memory_max_bytes", x.memory_max_bytes);
    v("energy_j", x.energy_j);
    v("cost_micros", x.cost_micros);
  }
};

struct InferenceTable {
  using Record = InferenceRecord;
  static constexpr TableInfo info{"inference", RowKey::appended, 1, "", "inference_run(run_id, t_ms)",
                                  "t_ms"};
  template <class R, class V>
  static void fields(R& x, V&& v) {
    v("run_id", x.run_id);
    v("t_ms", x.t_ms);
    v("model", x.model);
    v("engine", x.engine);
    v("prompt_tokens", x.prompt_tokens);
    v("generated_tokens", x.generated_tokens);
    v("cached_tokens", x.cached_tokens);
    v("requests", x.requests);
    v("cost_micros", x.cost_micros);
  }
};

struct CellsTable {
  using Record = CellRecord;
  static constexpr TableInfo info{"cells",   RowKey::appended, 1, "", "cells_run(run_id, start_ms)",
                                  "start_ms"};
  template <class R, class V>
  static void fields(R& x, V&& v) {
    v("run_id", x.run_id);
    v("cell_id", x.cell_id);
    v("start_ms", x.start_ms);
    v("end_ms", x.end_ms);
    v("cost_micros", x.cost_micros);
    v("utilization_pct", x.utilization_pct);
    v("status", x.status);
    v("source", x.source);
  }
};

struct BudgetsTable {
  using Record = BudgetRecord;
  static constexpr TableInfo info{"budgets", RowKey::primary_key, 2, "selector", "", "selector"};
  template <class R, class V>
  static void fields(R& x, V&& v) {
    v("selector", x.selector);
    v("limit_micros", x.limit_micros);
    v("period", x.period);
    v("updated_unix_ms", x.updated_unix_ms);
  }
};

struct ImportsTable {
  using Record = ImportRow;
  static constexpr TableInfo info{"imports", RowKey::unique_key, 2, "import_key", "", ""};
  template <class R, class V>
  static void fields(R& x, V&& v) {
    v("import_key", x.import_key);
    v("run_id", x.run_id);
    v("imported_unix_ms", x.imported_unix_ms);
  }
};

/// Calls f(Tbl{}) for every table, in the order they are created.
template <class F>
void for_each_table(F&& f) {
  f(MetaTable{});
  f(RunsTable{});
  f(SamplesTable{});
  f(ProgressTable{});
  f(ActionsTable{});
  f(RollupsTable{});
  f(InferenceTable{});
  f(CellsTable{});
  f(BudgetsTable{});
  f(ImportsTable{});
}

/// Writes an imported bundle: its run into `into_run_id` (> 0) or a new run, every row moved to that run,
/// and the import key; the caller holds the transaction. `insert(Tbl{}, rows)`, `write_run(run)` and
/// `insert_run(run)` are the back end's own.
template <class Insert, class WriteRun, class InsertRun>
Result<std::int64_t> write_bundle(const RunBundle& b, std::int64_t into_run_id, const std::string& import_key,
                                  Insert&& insert, WriteRun&& write_run, InsertRun&& insert_run) {
  RunRecord run = b.run;
  std::int64_t id = into_run_id;
  if (id > 0) {
    run.id = id;
    GM_TRY_VOID(write_run(run));
  } else {
    GM_TRY(id, insert_run(run));
  }
  GM_TRY_VOID(insert(SamplesTable{}, with_run_id(b.samples, id)));
  GM_TRY_VOID(insert(ProgressTable{}, with_run_id(b.progress, id)));
  GM_TRY_VOID(insert(ActionsTable{}, with_run_id(b.actions, id)));
  GM_TRY_VOID(insert(RollupsTable{}, with_run_id(b.rollups, id)));
  GM_TRY_VOID(insert(InferenceTable{}, with_run_id(b.inference, id)));
  GM_TRY_VOID(insert(CellsTable{}, with_run_id(b.cells, id)));
  GM_TRY_VOID(insert(ImportsTable{}, std::vector<ImportRow>{ImportRow{import_key, id, now_unix_ms()}}));
  return id;
}

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

/// The SQL type a field of type T is stored as.
template <class T>
constexpr SqlType sql_type_of() {
  if constexpr (is_optional<T>::value)
    return sql_type_of<typename T::value_type>();
  else if constexpr (std::is_integral_v<T>)
    return SqlType::integer;
  else if constexpr (std::is_floating_point_v<T>)
    return SqlType::real;
  else
    return SqlType::text;  // strings, and lists / maps as JSON
}

/// The columns of table description `Tbl`, in order (without the runs' id).
template <class Tbl>
const std::vector<Column>& columns() {
  static const std::vector<Column> cols = [] {
    std::vector<Column> out;
    typename Tbl::Record x{};
    Tbl::fields(x, [&]<class T>(const char* name, T&, bool added = false) {
      out.push_back(Column{name, sql_type_of<T>(), is_optional<T>::value, added});
    });
    return out;
  }();
  return cols;
}

/// Binds one field as parameter `i`: integers as int64, reals as double, strings, lists / maps as JSON,
/// nullopt as NULL. `S` has bind(int, std::int64_t | double | const std::string&) and bind_null(int).
template <class S, class T>
void bind_value(S& s, int i, const T& v) {
  if constexpr (is_optional<T>::value) {
    if (v)
      bind_value(s, i, *v);
    else
      s.bind_null(i);
  } else if constexpr (std::is_same_v<T, bool>) {
    s.bind(i, std::int64_t{v ? 1 : 0});
  } else if constexpr (std::is_integral_v<T>) {
    s.bind(i, static_cast<std::int64_t>(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    s.bind(i, static_cast<double>(v));
  } else if constexpr (std::is_same_v<T, std::string>) {
    s.bind(i, v);
  } else if constexpr (std::is_enum_v<T>) {
    s.bind(i, std::string(util::text_of(v)));
  } else {
    s.bind(i, json_of(v));
  }
}

/// Reads column `c` into a field. `S` has is_null, i64, f64, text and view (valid until the next row). A text
/// no value of an enum field has leaves the field as it was and sets `bad` (the row's first such column).
template <class S, class T>
void read_value(const S& s, int c, T& out, const char* column, std::optional<Error>& bad) {
  if constexpr (is_optional<T>::value) {
    if (s.is_null(c)) {
      out.reset();
    } else {
      typename T::value_type v{};
      read_value(s, c, v, column, bad);
      out = std::move(v);
    }
  } else if constexpr (std::is_same_v<T, bool>) {
    out = s.i64(c) != 0;
  } else if constexpr (std::is_integral_v<T>) {
    out = static_cast<T>(s.i64(c));
  } else if constexpr (std::is_floating_point_v<T>) {
    out = s.f64(c);
  } else if constexpr (std::is_same_v<T, std::string>) {
    out = s.text(c);
  } else if constexpr (std::is_enum_v<T>) {
    auto v =
        util::parse_enum<T>(s.view(c), std::string("column ") + column + " holds", ErrorKind::unavailable);
    if (v)
      out = *v;
    else if (!bad)
      bad = v.error();
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    out = parse_string_list(s.view(c));
  } else if constexpr (std::is_same_v<T, std::map<std::string, std::string>>) {
    out = parse_string_map(s.view(c));
  } else if constexpr (std::is_same_v<T, ListCount>) {
    out.n = count_string_list(s.view(c));
  } else {
    out = parse_json_or<T>(s.text(c), {});
  }
}

/// Binds a record's columns as parameters `first`, `first` + 1, … (the runs' id not among them).
template <class Tbl, class S>
void bind_row(S& s, const typename Tbl::Record& x, int first = 1) {
  int i = first;
  Tbl::fields(x, [&](const char*, const auto& v, bool = false) { bind_value(s, i++, v); });
}

/// Reads a row selected with select_sql<Tbl> (the runs' id first). An error naming the table, the row and
/// the column when an enum column holds a text no value has (a newer gpumeter's word, an edited ledger).
template <class Tbl, class S>
Result<typename Tbl::Record> read_row(const S& s) {
  typename Tbl::Record x{};
  int c = 0;
  if constexpr (Tbl::info.key == RowKey::id) x.id = s.i64(c++);
  std::optional<Error> bad;
  Tbl::fields(x, [&](const char* name, auto& v, bool = false) { read_value(s, c++, v, name, bad); });
  if (bad) {
    std::string where = std::string("ledger table ") + Tbl::info.name;
    if constexpr (Tbl::info.key == RowKey::id) where += " row " + std::to_string(x.id);
    return make_error(bad->kind, where + ": " + bad->message + " (written by a newer gpumeter?)");
  }
  return x;
}

/// The column list `a, b, …` (`with_id`: the runs' id first; `null_added`: NULL for the added columns, for a
/// ledger from before them that can only be read).
std::string column_list(const TableInfo& t, const std::vector<Column>& cols, bool with_id,
                        bool null_added = false);
/// CREATE TABLE IF NOT EXISTS and its index.
std::string create_sql(const TableInfo& t, const std::vector<Column>& cols, const Dialect& d);
/// ALTER TABLE … ADD COLUMN of one added column (PostgreSQL: IF NOT EXISTS).
std::string add_column_sql(const TableInfo& t, const Column& c, const Dialect& d);
/// INSERT of `rows` rows (an insert of an existing primary key replaces the row).
std::string insert_sql(const TableInfo& t, const std::vector<Column>& cols, const Dialect& d,
                       std::size_t rows = 1);
/// UPDATE of every column of the row whose id is the parameter after them.
std::string update_sql(const TableInfo& t, const std::vector<Column>& cols, const Dialect& d);
/// SELECT of every column (`columns`: those instead) `where` (in the dialect's parameters), in the table's
/// row order.
std::string select_sql(const TableInfo& t, const Dialect& d, const std::string& columns,
                       const std::string& where);
/// Parameter `n` in the dialect: ?N or $N.
std::string param(const Dialect& d, int n);

/// A WHERE clause and its integer parameters, numbered from the first one passed.
struct Where {
  std::string sql = "1=1";
  std::vector<std::int64_t> values;
};
/// `column` >= since and < until, each where given (in the dialect's parameters from `first`).
Where time_where(const Dialect& d, const char* column, std::optional<std::int64_t> since,
                 std::optional<std::int64_t> until, int first = 1);
/// The filter's runs: by start time.
Where runs_where(const Dialect& d, const RunFilter& filter);
/// The filter's rollups: by minute (the minutes that overlap [since, until)).
Where rollups_where(const Dialect& d, const RunFilter& filter, int first = 1);
/// " LIMIT n" of a filter with a limit, else "".
std::string limit_sql(const RunFilter& filter);

template <class Tbl>
std::string create_sql(const Dialect& d) {
  return create_sql(Tbl::info, columns<Tbl>(), d);
}
template <class Tbl>
std::string insert_sql(const Dialect& d, std::size_t rows = 1) {
  return insert_sql(Tbl::info, columns<Tbl>(), d, rows);
}
template <class Tbl>
std::string select_sql(const Dialect& d, const std::string& where, bool null_added = false) {
  return select_sql(Tbl::info, d,
                    column_list(Tbl::info, columns<Tbl>(), Tbl::info.key == RowKey::id, null_added), where);
}

}  // namespace gm::store::detail
