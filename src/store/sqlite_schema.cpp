// The SQLite ledger's file: opening it (mode 0600, WAL, read-only when it cannot be written), creating its
// tables from their descriptions, adding the columns added since a ledger was created, migrating its schema.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "store/tables.h"

namespace gm::store {
namespace {

// 1: the first schema. 2: runs.budget_usd REAL became runs.budget_micros INTEGER (money in micro-dollars).
// 3: team budgets and the keys of imported runs (the tables of sqlite_schema_sql(2)).
constexpr int kSchemaVersion = Ledger::kSchemaVersion;
using namespace store::detail;

/// The tables of schema version `version` (1: the first release; 2: team budgets, the keys of imported runs).
std::string sqlite_schema_sql(int version) {
  std::string sql;
  auto add = [&]<class Tbl>(Tbl) {
    if (Tbl::info.since_version == version) sql += create_sql<Tbl>(kSqlite);
  };
  for_each_table(add);
  return sql;
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

/// Adds the columns of `Tbl` added since its release that the ledger's table lacks; false on failure.
template <class Tbl>
bool add_missing_columns(sqlite3* db) {
  std::set<std::string> have;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, (std::string("PRAGMA table_info(") + Tbl::info.name + ")").c_str(), -1, &st,
                     nullptr);
  while (st && sqlite3_step(st) == SQLITE_ROW)
    if (const auto* name = sqlite3_column_text(st, 1)) have.insert(reinterpret_cast<const char*>(name));
  sqlite3_finalize(st);
  for (const Column& c : columns<Tbl>())
    if (c.added && !have.count(c.name) &&
        sqlite3_exec(db, add_column_sql(Tbl::info, c, kSqlite).c_str(), nullptr, nullptr, nullptr) !=
            SQLITE_OK)
      return false;
  return true;
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

Error open_error(const std::string& path, const std::string& what, int code) {
  std::string hint;
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
    hint = " (locked by another process; retry later or use --ledger)";
  else if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT)
    hint = " (not a gpumeter ledger or corrupt; move it aside or use --ledger)";
  return make_error(ErrorKind::unavailable, "ledger " + path + ": " + what + hint);
}

}  // namespace

namespace {

bool cannot_write(int sqlite_code) {
  return sqlite_code == SQLITE_READONLY || sqlite_code == SQLITE_CANTOPEN || sqlite_code == SQLITE_PERM ||
         sqlite_code == SQLITE_FULL || sqlite_code == SQLITE_IOERR || sqlite_code == SQLITE_AUTH;
}

std::string uri_path(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == '%' || c == '?' || c == '#')
      out += (c == '%' ? "%25" : c == '?' ? "%3f" : "%23");
    else
      out += c;
  }
  return out;
}

/// The ledger for reading only, when it exists but cannot be written (read-only directory or file, a full
/// disk): runs and reports keep working, writes fail with `why`. SQLite needs the -shm file for a WAL
/// database; in a read-only directory without one the file is read as immutable.
Result<std::unique_ptr<Ledger>> open_read_only(const std::string& path, const Error& why) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return why;
  for (const char* params : {"mode=ro", "mode=ro&immutable=1"}) {
    const std::string uri = "file:" + uri_path(path) + "?" + params;
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(uri.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX,
                        nullptr) == SQLITE_OK &&
        sqlite3_exec(db, "SELECT count(*) FROM runs", nullptr, nullptr, nullptr) == SQLITE_OK) {
      sqlite3_busy_timeout(db, 1500);
      int version = kSchemaVersion;
      sqlite3_stmt* st = nullptr;
      sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='schema_version'", -1, &st, nullptr);
      if (st && sqlite3_step(st) == SQLITE_ROW) version = sqlite3_column_int(st, 0);
      sqlite3_finalize(st);
      return std::unique_ptr<Ledger>(make_sqlite_ledger(
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
    if (ec)
      return make_error(ErrorKind::unavailable,
                        "ledger " + path + ": cannot create its directory: " + ec.message());
    chmod(p.parent_path().c_str(), 0700);
  }
  // Create the file with mode 0600 before SQLite does (SQLite would use the umask); WAL and SHM files copy
  // it.
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
  if (sqlite3_exec(db, sqlite_schema_sql(1).c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
    return fail("cannot create tables");
  {
    // Ledgers created before a column existed get it (NULL in their old rows).
    bool added = true;
    for_each_table([&]<class Tbl>(Tbl) { added = added && add_missing_columns<Tbl>(db); });
    if (!added) return fail("cannot add a column");
  }
  {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='schema_version'", -1, &st, nullptr);
    std::optional<int> version;
    if (st && sqlite3_step(st) == SQLITE_ROW) version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (version && *version > kSchemaVersion) {
      sqlite3_close_v2(db);
      return make_error(ErrorKind::unavailable, "ledger " + path + ": schema version " +
                                                    std::to_string(*version) +
                                                    " is newer than this gpumeter understands (" +
                                                    std::to_string(kSchemaVersion) + ")");
    } else if (version && *version < kSchemaVersion && !migrate(db, *version)) {
      return fail("cannot migrate the schema");
    }
    // Migrations in order, each in the transaction that records the new version.
    if (!version || *version < kSchemaVersion) {
      if (sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK)
        return fail("cannot migrate");
      const std::string sql = sqlite_schema_sql(2) +
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
  return make_sqlite_ledger(db, path, "", kSchemaVersion);
}

}  // namespace gm::store
