// Multi-run report over a synthetic 30-day ledger of 8 GPUs: 1 s samples generated in memory and rolled up
// per minute into the ledger (345 600 rollup rows), about 2 000 runs. Measures `build_multi_report` (all
// groupings) against a bare SQL aggregation over the same rollups, in the same run.
#include <benchmark/benchmark.h>
#include <sqlite3.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "report/multi.h"
#include "store/store.h"

namespace {

constexpr std::int64_t kStartMs = 20'000LL * 86'400'000;  // 2024-10-04 00:00 UTC
constexpr int kDays = 30;
constexpr unsigned kGpus = 8;

std::string ledger_path() { return (std::filesystem::temp_directory_path() / "gpumeter-bench-report-v2.db").string(); }

void build_ledger(const std::string& path) {
  std::filesystem::remove(path);
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
  auto ledger = gm::store::Ledger::open(path);
  if (!ledger) {
    std::fprintf(stderr, "bench_report: %s\n", ledger.error().message.c_str());
    std::exit(1);
  }
  std::mt19937_64 rng(42);
  const char* users[] = {"ana", "bob", "cid", "dee", "eve", "fay"};
  const char* teams[] = {"nlp", "cv", "rl"};
  const gm::util::MicroUsd price = 3'000'000;  // $3/GPU-h
  const std::int64_t end_ms = kStartMs + kDays * 86'400'000LL;
  std::size_t runs = 0, rollup_rows = 0;
  for (unsigned g = 0; g < kGpus; ++g) {
    std::int64_t t = kStartMs;
    while (t < end_ms) {
      const std::int64_t wall_s = std::min<std::int64_t>(1800 + static_cast<std::int64_t>(rng() % 10'800), (end_ms - t) / 1000);
      if (wall_s < 60) break;
      gm::store::RunRecord r;
      r.command = "python train.py --config c" + std::to_string(rng() % 20);
      r.user = users[rng() % 6];
      r.host = "node" + std::to_string(g / 4);
      r.labels["team"] = teams[rng() % 3];
      r.start_unix_ms = t;
      r.gpus_allocated = {"GPU-" + std::to_string(g)};
      r.gpus_used = r.gpus_allocated;
      r.gpu_model = g < 4 ? "H100 SXM 80GB" : "A100 SXM 80GB";
      r.price_micros_per_gpu_hour = price;
      r.price_source = "bench";
      auto id = (*ledger)->begin_run(r);
      if (!id) std::exit(1);
      r.id = *id;
      // 1 s samples, generated and rolled up per minute (the ledger's rollups; the report reads only these).
      std::vector<gm::store::RollupRecord> rollups;
      double busy = 0.3 + 0.7 * static_cast<double>(rng() % 1000) / 1000.0;
      gm::util::MicroUsd cost = 0, idle = 0;
      double energy = 0;
      for (std::int64_t s = 0; s < wall_s; ++s) {
        const std::int64_t unix_s = t / 1000 + s;
        const double util = std::clamp(busy * 100 + 10 * std::sin(static_cast<double>(s) / 30.0), 0.0, 100.0);
        const double power_w = 80 + 6 * util;
        const gm::util::MicroUsd c = price / 3600;  // 833 µ$ per GPU-second
        if (rollups.empty() || rollups.back().minute_unix != unix_s / 60) {
          gm::store::RollupRecord ru;
          ru.run_id = r.id;
          ru.minute_unix = unix_s / 60;
          ru.gpu_index = g;
          rollups.push_back(ru);
        }
        auto& ru = rollups.back();
        ru.samples += 1;
        ru.utilization_sum_pct += util;
        ru.memory_max_bytes = std::max(ru.memory_max_bytes, 40.0e9 + 1e7 * static_cast<double>(s % 100));
        ru.energy_j += power_w;
        ru.cost_micros += c;
        cost += c;
        idle += static_cast<gm::util::MicroUsd>(static_cast<double>(c) * (1 - util / 100));
        energy += power_w;
      }
      rollup_rows += rollups.size();
      if (!(*ledger)->append_rollups(rollups)) std::exit(1);
      r.status = gm::store::RunStatus::finished;
      r.exit_code = 0;
      r.end_unix_ms = t + wall_s * 1000;
      r.wall_ms = wall_s * 1000;
      r.billed_s = wall_s;
      r.cost_micros = cost;
      r.idle_cost_micros = idle;
      r.energy_j = energy;
      r.energy_method = gm::store::RunEnergyMethod::counter;
      r.co2_kg = energy / 3.6e6 * 0.4;
      if (!(*ledger)->update_run(r)) std::exit(1);
      ++runs;
      t += wall_s * 1000 + 1000 * static_cast<std::int64_t>(rng() % 600);
    }
  }
  std::fprintf(stderr, "bench_report: built %s: %zu runs, %zu rollup rows\n", path.c_str(), runs, rollup_rows);
}

const std::string& ledger_file() {
  static const std::string path = [] {
    const std::string p = ledger_path();
    if (!std::filesystem::exists(p)) build_ledger(p);
    return p;
  }();
  return path;
}

void BM_BareSqlAggregate(benchmark::State& state) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(ledger_file().c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  for (auto _ : state) {
    double sum = 0;
    for (const char* sql : {"SELECT run_id, SUM(samples), SUM(utilization_sum_pct) FROM rollups GROUP BY run_id",
                            "SELECT * FROM runs"}) {
      sqlite3_stmt* st = nullptr;
      sqlite3_prepare_v2(db, sql, -1, &st, nullptr);
      while (sqlite3_step(st) == SQLITE_ROW) sum += sqlite3_column_double(st, 1);
      sqlite3_finalize(st);
    }
    benchmark::DoNotOptimize(sum);
  }
  sqlite3_close(db);
}
BENCHMARK(BM_BareSqlAggregate)->Unit(benchmark::kMillisecond);

void BM_Report30Days(benchmark::State& state, const char* by) {
  auto ledger = gm::store::Ledger::open(ledger_file());
  if (!ledger) {
    state.SkipWithError(ledger.error().message.c_str());
    return;
  }
  gm::report::MultiOptions o;
  o.since_unix_ms = kStartMs;
  o.until_unix_ms = kStartMs + kDays * 86'400'000LL;
  if (*by) o.by = *gm::report::parse_group_by(by);
  std::int64_t runs = 0;
  for (auto _ : state) {
    auto rep = gm::report::build_multi_report(**ledger, o);
    if (!rep) {
      state.SkipWithError(rep.error().message.c_str());
      return;
    }
    runs = rep->total.runs;
    auto text = gm::report::render_multi_json(*rep);
    benchmark::DoNotOptimize(text);
  }
  state.counters["runs"] = static_cast<double>(runs);
}
BENCHMARK_CAPTURE(BM_Report30Days, total, "")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Report30Days, by_user, "user")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Report30Days, by_day, "day")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Report30Days, by_label, "label:team")->Unit(benchmark::kMillisecond);

void BM_DailyReport(benchmark::State& state) {
  auto ledger = gm::store::Ledger::open(ledger_file());
  gm::report::MultiOptions o;
  o.since_unix_ms = kStartMs + 15 * 86'400'000LL;
  o.until_unix_ms = *o.since_unix_ms + 86'400'000LL;
  o.by.kind = gm::report::GroupBy::Kind::user;
  for (auto _ : state) {
    auto rep = gm::report::build_multi_report(**ledger, o);
    benchmark::DoNotOptimize(rep);
  }
}
BENCHMARK(BM_DailyReport)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
