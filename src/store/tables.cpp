// The ledger's statements, generated per dialect from the table descriptions.
#include "store/tables.h"

namespace gm::store::detail {
namespace {

std::string type_name(SqlType t, const Dialect& d) {
  switch (t) {
    case SqlType::integer:
      return d.integer;
    case SqlType::real:
      return d.real;
    case SqlType::text:
      return "TEXT";
  }
  return "TEXT";
}

std::string column_definition(const Column& c, const Dialect& d) {
  return std::string(c.name) + " " + type_name(c.type, d) + (c.nullable ? "" : " NOT NULL");
}

bool keyed(const TableInfo& t) {
  return t.key == RowKey::primary_key || t.key == RowKey::unique_key;
}

}  // namespace

std::string param(const Dialect& d, int n) {
  return d.param + std::to_string(n);
}

std::string column_list(const TableInfo& t, const std::vector<Column>& cols, bool with_id, bool null_added) {
  std::string out = with_id && t.key == RowKey::id ? "id" : "";
  for (const Column& c : cols) {
    if (!out.empty()) out += ", ";
    out += null_added && c.added ? "NULL" : c.name;
  }
  return out;
}

std::string create_sql(const TableInfo& t, const std::vector<Column>& cols, const Dialect& d) {
  std::string sql = std::string("CREATE TABLE IF NOT EXISTS ") + t.name + " (\n  ";
  std::string defs;
  auto add = [&](const std::string& def) { defs += (defs.empty() ? "" : ", ") + def; };
  if (t.key == RowKey::id) add(d.id_column);
  if (t.key == RowKey::appended && *d.seq_column) add(d.seq_column);
  for (const Column& c : cols) add(column_definition(c, d));
  if (keyed(t)) add(std::string("PRIMARY KEY (") + t.primary_key + ")");
  sql += defs + ");\n";
  if (*t.index) {  // "name(columns)"
    const std::string index = t.index;
    const auto open = index.find('(');
    sql +=
        "CREATE INDEX IF NOT EXISTS " + index.substr(0, open) + " ON " + t.name + index.substr(open) + ";\n";
  }
  return sql;
}

std::string add_column_sql(const TableInfo& t, const Column& c, const Dialect& d) {
  return std::string("ALTER TABLE ") + t.name + " ADD COLUMN " + (d.param == '$' ? "IF NOT EXISTS " : "") +
         column_definition(c, d);
}

std::string insert_sql(const TableInfo& t, const std::vector<Column>& cols, const Dialect& d,
                       std::size_t rows) {
  const bool sqlite_replace = t.key == RowKey::primary_key && d.param == '?';
  std::string sql = std::string(sqlite_replace ? "INSERT OR REPLACE INTO " : "INSERT INTO ") + t.name + " (" +
                    column_list(t, cols, false) + ") VALUES ";
  int n = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    sql += r ? ",(" : "(";
    for (std::size_t c = 0; c < cols.size(); ++c) sql += (c ? "," : "") + param(d, ++n);
    sql += ")";
  }
  if (t.key == RowKey::primary_key && d.param == '$') {
    sql += std::string(" ON CONFLICT (") + t.primary_key + ") DO UPDATE SET ";
    const std::string key = std::string(", ") + t.primary_key + ",";
    bool first = true;
    for (const Column& c : cols) {
      if (key.find(std::string(" ") + c.name + ",") != std::string::npos) continue;
      sql += std::string(first ? "" : ", ") + c.name + "=EXCLUDED." + c.name;
      first = false;
    }
  }
  return sql;
}

std::string update_sql(const TableInfo& t, const std::vector<Column>& cols, const Dialect& d) {
  std::string sql = std::string("UPDATE ") + t.name + " SET ";
  int n = 0;
  for (const Column& c : cols) {
    ++n;
    sql += std::string(n > 1 ? ", " : "") + c.name + "=" + param(d, n);
  }
  return sql + " WHERE id=" + param(d, n + 1);
}

std::string select_sql(const TableInfo& t, const Dialect& d, const std::string& columns,
                       const std::string& where) {
  std::string sql = "SELECT " + columns + " FROM " + t.name;
  if (!where.empty()) sql += " WHERE " + where;
  if (*t.order) {
    sql += std::string(" ORDER BY ") + t.order;
    if (t.key == RowKey::appended) sql += std::string(", ") + d.insertion_order;
  }
  return sql;
}

Where time_where(const Dialect& d, const char* column, std::optional<std::int64_t> since,
                 std::optional<std::int64_t> until, int first) {
  Where w;
  int n = first;
  if (since) {
    w.sql += std::string(" AND ") + column + " >= " + param(d, n++);
    w.values.push_back(*since);
  }
  if (until) {
    w.sql += std::string(" AND ") + column + " < " + param(d, n++);
    w.values.push_back(*until);
  }
  return w;
}

Where runs_where(const Dialect& d, const RunFilter& filter) {
  return time_where(d, "start_unix_ms", filter.since_unix_ms, filter.until_unix_ms);
}

Where rollups_where(const Dialect& d, const RunFilter& filter, int first) {
  const auto since = filter.since_unix_ms ? std::optional(*filter.since_unix_ms / 60000) : std::nullopt;
  const auto until =
      filter.until_unix_ms ? std::optional((*filter.until_unix_ms + 59999) / 60000) : std::nullopt;
  return time_where(d, "minute_unix", since, until, first);
}

std::string limit_sql(const RunFilter& filter) {
  return filter.limit ? " LIMIT " + std::to_string(*filter.limit) : "";
}

}  // namespace gm::store::detail
