// gpumeter trace reader vs a bare simdjson On-Demand pass over the same file, in the same run; .json.gz
// against `zcat FILE > /dev/null` and `igzip -dc FILE > /dev/null`. File: $GPUMETER_BENCH_TRACE (a .json;
// its .gz is used when $GPUMETER_BENCH_TRACE_GZ is set), else the bundled sample
// tests/data/trace/amd_mi250.json.gz.
// Every iteration runs in a forked child, so that each case's peak RSS (counter peak_rss_mb, from wait4's
// ru_maxrss of the child) is its own; the time is the child's wall time.
#include <benchmark/benchmark.h>
#include <simdjson.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "trace/trace.h"

namespace {

std::string bench_file() {
  if (const char* p = std::getenv("GPUMETER_BENCH_TRACE")) return p;
  return std::string(GPUMETER_SOURCE_DIR) + "/tests/data/trace/amd_mi250.json.gz";
}

// Bare pass: load into a padded buffer, iterate traceEvents, touch every field of every event.
std::int64_t bare_pass(const std::string& path, std::size_t& bytes) {
  simdjson::padded_string text;
  if (path.ends_with(".gz")) {
    auto t = gm::trace::read_trace_text(path);
    if (!t) return -1;
    text = simdjson::padded_string(*t);
  } else if (simdjson::padded_string::load(path).get(text)) {
    return -1;
  }
  bytes = text.size();
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  if (parser.iterate(text).get(doc)) return -1;
  std::int64_t events = 0, fields = 0;
  simdjson::ondemand::object root;
  if (doc.get_object().get(root)) return -1;
  for (auto f : root) {
    if (f.key().value() != "traceEvents") continue;
    for (auto ev : f.value().get_array()) {
      ++events;
      simdjson::ondemand::object obj;
      if (ev.get_object().get(obj)) continue;
      for (auto field : obj) {
        auto v = field.value();
        if (v.type().value() == simdjson::ondemand::json_type::object) continue;
        benchmark::DoNotOptimize(v.raw_json_token());
        ++fields;
      }
    }
  }
  benchmark::DoNotOptimize(fields);
  return events;
}

/// Runs `fn` in a forked child (its exit status: 0 when it worked); the child's wall time in seconds and
/// peak RSS in MB. False when the child failed.
bool in_child(const std::function<bool()>& fn, double& seconds, double& peak_rss_mb) {
  std::fflush(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) _exit(fn() ? 0 : 1);
  if (pid < 0) return false;
  int status = 0;
  struct rusage ru {};
  if (wait4(pid, &status, 0, &ru) != pid) return false;
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  peak_rss_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::int64_t>(st.st_size) : 0;
}

/// Times `fn` in children; bytes/s from `json_bytes`, peak RSS (max over iterations) and its ratio to the
/// file on disk.
void run_case(benchmark::State& state, const std::string& path, std::int64_t json_bytes,
              const std::function<bool()>& fn) {
  double peak = 0;
  for (auto _ : state) {
    double seconds = 0, rss = 0;
    if (!in_child(fn, seconds, rss)) {
      state.SkipWithError(("failed on " + path).c_str());
      return;
    }
    state.SetIterationTime(seconds);
    peak = std::max(peak, rss);
  }
  state.SetBytesProcessed(json_bytes * state.iterations());
  state.counters["peak_rss_mb"] = peak;
  state.counters["rss_per_file"] =
      peak * 1024.0 * 1024.0 / static_cast<double>(std::max<std::int64_t>(1, file_size(path)));
}

/// The inflated size of a trace (once per case, outside the timing).
std::int64_t json_bytes_of(const std::string& path) {
  gm::trace::Options o;
  o.threads = 1;
  auto r = gm::trace::analyze_file(path, o);
  return r ? r->bytes : 0;
}

void BM_BareSimdjsonOnDemand(benchmark::State& state) {
  const auto path = bench_file();
  run_case(state, path, json_bytes_of(path), [&] {
    std::size_t bytes = 0;
    return bare_pass(path, bytes) >= 0;
  });
}
BENCHMARK(BM_BareSimdjsonOnDemand)->Unit(benchmark::kMillisecond)->UseManualTime()->MinTime(0.5);

/// The read window: $GPUMETER_BENCH_WINDOW_KB, else gpumeter's default.
std::size_t window_bytes() {
  const char* kb = std::getenv("GPUMETER_BENCH_WINDOW_KB");
  return kb != nullptr ? static_cast<std::size_t>(std::atoll(kb)) * 1024 : 0;
}

/// gpumeter's reader and analyses; the argument is Options::threads (the windows of the one file are
/// parsed on that many threads).
void BM_GpumeterTrace(benchmark::State& state) {
  const auto path = bench_file();
  gm::trace::Options o;
  o.threads = static_cast<unsigned>(state.range(0));
  o.window_bytes = window_bytes();
  run_case(state, path, json_bytes_of(path), [&] {
    auto r = gm::trace::analyze_file(path, o);
    if (r) benchmark::DoNotOptimize(r->devices.size());
    return r.ok();
  });
}
BENCHMARK(BM_GpumeterTrace)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseManualTime()->MinTime(0.5);

// .json.gz: gpumeter (inflate + analyse) against `zcat FILE > /dev/null`.
std::string gz_file() {
  if (const char* p = std::getenv("GPUMETER_BENCH_TRACE_GZ")) return p;
  return std::string(GPUMETER_SOURCE_DIR) + "/tests/data/trace/amd_mi250.json.gz";
}

void BM_ZcatBaseline(benchmark::State& state) {
  const std::string cmd = "zcat '" + gz_file() + "' > /dev/null";
  for (auto _ : state) {
    if (std::system(cmd.c_str()) != 0) state.SkipWithError("zcat failed");
  }
}
BENCHMARK(BM_ZcatBaseline)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);

// isa-l's own command-line inflater (Debian package isal), the library gpumeter inflates with.
void BM_IgzipBaseline(benchmark::State& state) {
  if (::access("/usr/bin/igzip", X_OK) != 0) {
    state.SkipWithError("/usr/bin/igzip missing (Debian package isal)");
    return;
  }
  const std::string cmd = "igzip -dc '" + gz_file() + "' > /dev/null";
  for (auto _ : state) {
    if (std::system(cmd.c_str()) != 0) state.SkipWithError("igzip failed");
  }
}
BENCHMARK(BM_IgzipBaseline)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);

void BM_GpumeterTraceGz(benchmark::State& state) {
  const auto path = gz_file();
  gm::trace::Options o;
  o.threads = static_cast<unsigned>(state.range(0));
  o.window_bytes = window_bytes();
  run_case(state, path, json_bytes_of(path), [&] { return gm::trace::analyze_file(path, o).ok(); });
}
BENCHMARK(BM_GpumeterTraceGz)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseManualTime()->MinTime(0.5);

}  // namespace

BENCHMARK_MAIN();
