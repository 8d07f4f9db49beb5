// gpumeter trace reader vs a bare simdjson On-Demand pass over the same file, in the same run; .json.gz
// against `zcat FILE > /dev/null`. File: $GPUMETER_BENCH_TRACE (a .json; its .gz is used when
// $GPUMETER_BENCH_TRACE_GZ is set), else the bundled sample tests/data/trace/amd_mi250.json.gz.
#include <benchmark/benchmark.h>
#include <simdjson.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
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

void BM_BareSimdjsonOnDemand(benchmark::State& state) {
  const auto path = bench_file();
  std::size_t bytes = 0;
  std::int64_t events = 0;
  for (auto _ : state) events = bare_pass(path, bytes);
  if (events < 0) state.SkipWithError(("cannot parse " + path).c_str());
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
  state.SetItemsProcessed(events * state.iterations());
}
BENCHMARK(BM_BareSimdjsonOnDemand)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);

void BM_GpumeterTrace(benchmark::State& state) {
  const auto path = bench_file();
  std::int64_t bytes = 0, events = 0;
  for (auto _ : state) {
    auto r = gm::trace::analyze_file(path);
    if (!r) {
      state.SkipWithError(r.error().message.c_str());
      return;
    }
    bytes = r->bytes;
    events = r->event_count;
    benchmark::DoNotOptimize(r->devices.size());
  }
  state.SetBytesProcessed(bytes * state.iterations());
  state.SetItemsProcessed(events * state.iterations());
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  state.counters["peak_rss_mb"] = static_cast<double>(ru.ru_maxrss) / 1024.0;
}
BENCHMARK(BM_GpumeterTrace)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);

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

void BM_GpumeterTraceGz(benchmark::State& state) {
  const auto path = gz_file();
  std::int64_t bytes = 0;
  for (auto _ : state) {
    auto r = gm::trace::analyze_file(path);
    if (!r) {
      state.SkipWithError(r.error().message.c_str());
      return;
    }
    bytes = r->bytes;
  }
  state.SetBytesProcessed(bytes * state.iterations());
}
BENCHMARK(BM_GpumeterTraceGz)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);

}  // namespace

BENCHMARK_MAIN();
