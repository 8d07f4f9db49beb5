// The shared ledger (issue 29): the multi-run report over N runs × 8 GPUs in SQLite and in PostgreSQL (a real
// server started by the benchmark on loopback, tests/support/postgres_server.h), each against the bare SQL
// query over the same tables in the same run; and the per-interval cost of a run's heartbeat (8 samples, the
// minute's rollups and the run's totals: what `gpumeter run` writes every second), plus the team budget's
// aggregate read. N = $GPUMETER_BENCH_RUNS (default 10 000; the issue's figure is 100 000).
//
// The runs are written once into SQLite through the ledger (one import per run, kept in /tmp per N), then
// copied column for column into PostgreSQL with COPY: the ledger's own path there (one transaction per run)
// takes minutes per 10 000 runs, and what is measured reads the tables, not how they were filled.
#include <benchmark/benchmark.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "report/multi.h"
#include "store/store.h"
#include "support/postgres_server.h"

namespace {

constexpr std::int64_t kStartMs = 20'000LL * 86'400'000;  // 2024-10-04 00:00 UTC
constexpr int kDays = 30;
constexpr unsigned kGpus = 8;
constexpr int kMinutesPerRun =
    4;  // rollup rows per run and GPU (short runs keep the build of 100k runs bounded)

std::size_t run_count() {
  const char* n = std::getenv("GPUMETER_BENCH_RUNS");
  return n ? static_cast<std::size_t>(std::atoll(n)) : 10'000;
}

/// N runs of 8 GPUs spread over 30 days, imported in bulk (one transaction per run).
void fill(gm::store::Ledger& ledger) {
  std::mt19937_64 rng(42);
  const char* users[] = {"ana", "bob", "cid", "dee", "eve", "fay"};
  const char* teams[] = {"nlp", "cv", "rl"};
  const std::size_t n = run_count();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    gm::store::RunBundle b;
    gm::store::RunRecord& r = b.run;
    r.command = "python train.py --config c" + std::to_string(rng() % 20);
    r.user = users[rng() % 6];
    r.host = "node" + std::to_string(rng() % 16);
    r.labels["team"] = teams[rng() % 3];
    r.start_unix_ms =
        kStartMs + static_cast<std::int64_t>(i) * (kDays * 86'400'000LL / static_cast<std::int64_t>(n));
    for (unsigned g = 0; g < kGpus; ++g) r.gpus_allocated.push_back("GPU-" + std::to_string(g));
    r.gpus_used = r.gpus_allocated;
    r.gpu_model = "H100 SXM 80GB";
    r.price_micros_per_gpu_hour = 3'000'000;
    r.price_source = "bench";
    r.status = gm::store::RunStatus::succeeded;
    r.exit_code = 0;
    r.wall_ms = kMinutesPerRun * 60'000;
    r.end_unix_ms = r.start_unix_ms + r.wall_ms;
    r.billed_s = kMinutesPerRun * 60;
    r.meter_pid = 1;
    r.meter_host = "bench";
    r.heartbeat_unix_ms = *r.end_unix_ms;
    for (int m = 0; m < kMinutesPerRun; ++m)
      for (unsigned g = 0; g < kGpus; ++g) {
        const double util = 30 + static_cast<double>(rng() % 70);
        b.rollups.push_back(gm::store::RollupRecord{0, r.start_unix_ms / 60'000 + m, g, 60, util * 60, 4e10,
                                                    60 * 500.0, 50'000});
        r.cost_micros += 50'000;
      }
    auto done = ledger.import_run(b, "bench#" + std::to_string(i), 0);
    if (!done) {
      std::fprintf(stderr, "bench_ledger: %s\n", done.error().message.c_str());
      std::exit(1);
    }
  }
  std::fprintf(stderr, "bench_ledger: %s: %zu runs × %u GPUs, %zu rollup rows in %.1f s\n",
               ledger.backend().c_str(), n, kGpus, n * kGpus * kMinutesPerRun,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_ledger: %s\n", what.c_str());
  std::exit(1);
}

/// Appends a SQLite value to a COPY text line (\N for NULL; backslash, tab, newline, CR escaped).
void copy_value(std::string& line, sqlite3_stmt* st, int c) {
  switch (sqlite3_column_type(st, c)) {
    case SQLITE_NULL:
      line += "\\N";
      return;
    case SQLITE_INTEGER:
      line += std::to_string(sqlite3_column_int64(st, c));
      return;
    case SQLITE_FLOAT: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", sqlite3_column_double(st, c));
      line += buf;
      return;
    }
    default:
      break;
  }
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st, c));
  for (int i = 0, n = sqlite3_column_bytes(st, c); i < n; ++i) {
    switch (p[i]) {
      case '\\':
        line += "\\\\";
        break;
      case '\t':
        line += "\\t";
        break;
      case '\n':
        line += "\\n";
        break;
      case '\r':
        line += "\\r";
        break;
      default:
        line += p[i];
    }
  }
}

/// Copies every row of `table` from the SQLite ledger into the same columns of PostgreSQL's (COPY FROM
/// STDIN).
void copy_table(sqlite3* db, PGconn* pg, const char* table) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, (std::string("SELECT * FROM ") + table).c_str(), -1, &st, nullptr) != SQLITE_OK)
    die(std::string("read ") + table + ": " + sqlite3_errmsg(db));
  std::string copy = std::string("COPY ") + table + " (";
  for (int c = 0; c < sqlite3_column_count(st); ++c)
    copy += (c ? ", \"" : "\"") + std::string(sqlite3_column_name(st, c)) + "\"";
  copy += ") FROM STDIN";
  PGresult* r = PQexec(pg, copy.c_str());
  if (PQresultStatus(r) != PGRES_COPY_IN) die(copy + ": " + PQerrorMessage(pg));
  PQclear(r);
  std::string chunk;
  const auto flush = [&] {
    if (PQputCopyData(pg, chunk.data(), static_cast<int>(chunk.size())) != 1) die(PQerrorMessage(pg));
    chunk.clear();
  };
  while (sqlite3_step(st) == SQLITE_ROW) {
    for (int c = 0; c < sqlite3_column_count(st); ++c) {
      if (c) chunk += '\t';
      copy_value(chunk, st, c);
    }
    chunk += '\n';
    if (chunk.size() > (1u << 20)) flush();
  }
  sqlite3_finalize(st);
  flush();
  if (PQputCopyEnd(pg, nullptr) != 1) die(PQerrorMessage(pg));
  r = PQgetResult(pg);
  if (PQresultStatus(r) != PGRES_COMMAND_OK) die(copy + ": " + PQerrorMessage(pg));
  PQclear(r);
}

/// The SQLite ledger's runs and rollups copied into the (empty, migrated) PostgreSQL ledger at `uri`.
void copy_into_postgres(const std::string& sqlite_path, const std::string& uri) {
  const auto t0 = std::chrono::steady_clock::now();
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(sqlite_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
    die("open " + sqlite_path);
  PGconn* pg = PQconnectdb(uri.c_str());
  if (PQstatus(pg) != CONNECTION_OK) die(PQerrorMessage(pg));
  for (const char* table : {"runs", "rollups"}) copy_table(db, pg, table);
  PGresult* r = PQexec(pg, "SELECT setval(pg_get_serial_sequence('runs', 'id'), (SELECT max(id) FROM runs))");
  if (PQresultStatus(r) != PGRES_TUPLES_OK) die(PQerrorMessage(pg));
  PQclear(r);
  PQfinish(pg);
  sqlite3_close(db);
  std::fprintf(stderr, "bench_ledger: postgres: copied from SQLite in %.1f s\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

struct Ledgers {
  gm::test::PostgresServer* server = nullptr;
  std::string pg_uri, sqlite_path;
};

Ledgers& ledgers() {
  static Ledgers l = [] {
    Ledgers out;
    out.sqlite_path = (std::filesystem::temp_directory_path() /
                       ("gpumeter-bench-ledger-" + std::to_string(run_count()) + ".db"))
                          .string();
    if (!std::filesystem::exists(
            out.sqlite_path)) {  // filled under another name: a killed fill is not reused
      const std::string partial = out.sqlite_path + ".partial";
      std::filesystem::remove(partial);
      {
        auto s = gm::store::Ledger::open(partial);
        if (!s) die(s.error().message);
        fill(**s);
      }
      for (const char* suffix : {"-wal", "-shm"}) std::filesystem::remove(partial + suffix);
      std::filesystem::rename(partial, out.sqlite_path);
    }
    out.server = new gm::test::PostgresServer();  // stopped at exit by its destructor is not needed: leaked
                                                  // deliberately, stopped below
    if (!out.server->ok()) {
      std::fprintf(stderr, "bench_ledger: %s\n", out.server->error().c_str());
      std::exit(1);
    }
    const std::string db = out.server->create_database();
    out.pg_uri = out.server->uri(db);
    {
      auto p = gm::store::Ledger::open(out.pg_uri);  // the schema
      if (!p) die(p.error().message);
    }
    copy_into_postgres(out.sqlite_path, out.pg_uri);
    out.server->exec(db, "VACUUM ANALYZE");
    std::atexit([] { delete ledgers().server; });
    return out;
  }();
  return l;
}

gm::report::MultiOptions options(const char* by) {
  gm::report::MultiOptions o;
  o.since_unix_ms = kStartMs;
  o.until_unix_ms = kStartMs + kDays * 86'400'000LL;
  if (*by) o.by = *gm::report::parse_group_by(by);
  return o;
}

void BM_Report(benchmark::State& state, bool pg, const char* by) {
  auto ledger = gm::store::Ledger::open(pg ? ledgers().pg_uri : ledgers().sqlite_path);
  if (!ledger) {
    state.SkipWithError(ledger.error().message.c_str());
    return;
  }
  for (auto _ : state) {
    auto rep = gm::report::build_multi_report(**ledger, options(by));
    if (!rep) {
      state.SkipWithError(rep.error().message.c_str());
      return;
    }
    auto text = gm::report::render_multi_json(*rep);
    benchmark::DoNotOptimize(text);
    state.counters["runs"] = static_cast<double>(rep->total.runs);
  }
}
BENCHMARK_CAPTURE(BM_Report, sqlite_by_user, false, "user")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Report, postgres_by_user, true, "user")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Report, postgres_by_host, true, "host")->Unit(benchmark::kMillisecond);

// The bare queries: the columns of the period's runs the report reads, and their rollups summed per run.
const char* kBareRuns =
    "SELECT id, command, \"user\", host, labels_json, start_unix_ms, status, exit_code, stopped_by, "
    "gpu_model, "
    "gpus_allocated_json, wall_ms, billed_s, cost_micros, idle_cost_micros, unused_gpu_cost_micros, "
    "energy_j, "
    "co2_kg FROM runs WHERE start_unix_ms >= %lld AND start_unix_ms < %lld";
const char* kBareRollups =
    "SELECT run_id, SUM(samples), SUM(utilization_sum_pct) FROM rollups WHERE minute_unix >= %lld GROUP BY "
    "run_id";

void BM_BareSql(benchmark::State& state, bool pg) {
  char runs_sql[512], rollups_sql[256];
  std::snprintf(runs_sql, sizeof runs_sql, kBareRuns, static_cast<long long>(kStartMs),
                static_cast<long long>(kStartMs + kDays * 86'400'000LL));
  std::snprintf(rollups_sql, sizeof rollups_sql, kBareRollups, static_cast<long long>(kStartMs / 60'000));
  if (pg) {
    PGconn* c = PQconnectdb(ledgers().pg_uri.c_str());
    for (auto _ : state) {
      double sum = 0;
      for (const char* sql : {runs_sql, rollups_sql}) {
        PGresult* r = PQexec(c, sql);
        for (int i = 0; i < PQntuples(r); ++i) sum += std::strtod(PQgetvalue(r, i, 1), nullptr);
        PQclear(r);
      }
      benchmark::DoNotOptimize(sum);
    }
    PQfinish(c);
    return;
  }
  sqlite3* db = nullptr;
  sqlite3_open_v2(ledgers().sqlite_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  for (auto _ : state) {
    double sum = 0;
    for (const char* sql : {runs_sql, rollups_sql}) {
      sqlite3_stmt* st = nullptr;
      sqlite3_prepare_v2(db, sql, -1, &st, nullptr);
      while (sqlite3_step(st) == SQLITE_ROW) sum += sqlite3_column_double(st, 1);
      sqlite3_finalize(st);
    }
    benchmark::DoNotOptimize(sum);
  }
  sqlite3_close(db);
}
BENCHMARK_CAPTURE(BM_BareSql, sqlite, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BareSql, postgres, true)->Unit(benchmark::kMillisecond);

/// One interval of a running run on the ledger: what the supervisor writes each second (8 GPUs), and the team
/// budget's read of the other runs' spend.
void BM_Heartbeat(benchmark::State& state, bool pg, bool team_read) {
  auto ledger = gm::store::Ledger::open(pg ? ledgers().pg_uri : ledgers().sqlite_path);
  if (!ledger) {
    state.SkipWithError(ledger.error().message.c_str());
    return;
  }
  gm::store::RunRecord r;
  r.command = "python train.py";
  r.user = "ana";
  r.host = "node0";
  r.labels["team"] = "nlp";
  r.start_unix_ms = kStartMs + kDays * 86'400'000LL - 3'600'000;
  for (unsigned g = 0; g < kGpus; ++g) r.gpus_allocated.push_back("GPU-" + std::to_string(g));
  r.price_micros_per_gpu_hour = 3'000'000;
  r.price_source = "bench";
  r.id = *(*ledger)->begin_run(r);
  std::int64_t t_ms = 0;
  for (auto _ : state) {
    t_ms += 1000;
    std::vector<gm::store::SampleRecord> samples;
    std::vector<gm::store::RollupRecord> rollups;
    for (unsigned g = 0; g < kGpus; ++g) {
      samples.push_back(gm::store::SampleRecord{
          r.id, t_ms, g, "GPU-" + std::to_string(g), 90.0, 40ull << 30, 600.0, 70.0, 600.0, 833, true, {}});
      rollups.push_back(gm::store::RollupRecord{r.id, (r.start_unix_ms + t_ms) / 60'000, g, t_ms / 1000 % 60,
                                                5400, 4e10, 36000, 50'000});
    }
    r.cost_micros += 833 * kGpus;
    r.wall_ms = t_ms;
    if (!(*ledger)->append(samples, {}, {}) || !(*ledger)->append_rollups(rollups) ||
        !(*ledger)->update_run(r)) {
      state.SkipWithError("write failed");
      return;
    }
    if (team_read) {
      auto spend = (*ledger)->selector_spend("team", "nlp", kStartMs + (kDays - 1) * 86'400'000LL, r.id);
      benchmark::DoNotOptimize(spend);
    }
  }
  if (!pg) {  // the SQLite ledger is kept for the next run of the benchmark: as filled, without this run
    sqlite3* db = nullptr;
    sqlite3_open(ledgers().sqlite_path.c_str(), &db);
    const std::string id = std::to_string(r.id);
    const std::string sql = "DELETE FROM samples WHERE run_id=" + id +
                            "; DELETE FROM rollups WHERE run_id=" + id + "; DELETE FROM runs WHERE id=" + id;
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) die(sqlite3_errmsg(db));
    sqlite3_close(db);
  }
}
BENCHMARK_CAPTURE(BM_Heartbeat, sqlite, false, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Heartbeat, postgres, true, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Heartbeat, postgres_with_team_budget, true, true)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
