// The windowed JSON reader gives the same analysis as the whole-file reader on every shipped sample, with
// windows so small that events straddle every boundary, with metadata before and after traceEvents,
// strings holding brackets, braces and escaped quotes, and gzip'd input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/support.h"
#include "trace/trace.h"

namespace gm::test {
namespace {

namespace fs = std::filesystem;

/// Everything an analysis says, as text (so that a difference shows where it is).
std::string canonical(const trace::FileAnalysis& f) {
  nlohmann::json j;
  j["format"] = f.format;
  j["rank"] = f.rank ? nlohmann::json(*f.rank) : nlohmann::json(nullptr);
  j["bytes"] = f.bytes;
  j["events"] = f.event_count;
  j["skipped_events"] = f.skipped_events;
  j["skipped"] = f.skipped.value_or("");
  auto buckets = [](const std::vector<trace::Bucket>& bs) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& b : bs) a.push_back({b.name, b.klass, b.count, b.kernel_ns, b.attributed_ns});
    return a;
  };
  for (const auto& d : f.devices)
    j["devices"].push_back(
        {{"device", d.device},
         {"gpu", d.gpu_name.value_or("")},
         {"window", {d.window_start_ns, d.window_ns, d.busy_ns, d.idle_ns}},
         {"split", {d.compute_ns, d.communication_ns, d.memory_ns, d.overlap_ns, d.kernel_ns}},
         {"idle", {d.idle_host_wait_ns, d.idle_other_ns, d.idle_gap_count}},
         {"sync", {d.idle_after_sync_ns, d.sync_gap_count}},
         {"counts", {d.activity_count, d.zero_length_count}},
         {"launch", {d.launch_delay_ns.count, d.launch_delay_ns.p50, d.launch_delay_ns.max}},
         {"kernels", buckets(d.kernels)},
         {"operators", buckets(d.operators)},
         {"annotations", buckets(d.annotations)},
         {"steps", buckets(d.steps)}});
  if (f.host) j["host"] = {f.host->window_ns, f.host->span_count, f.host->operators.size()};
  for (const auto& c : f.collectives)
    j["collectives"].push_back({c.group, c.name, c.start_ns, c.dur_ns, c.step.value_or("")});
  return j.dump(1);
}

/// The analysis through the whole-file reader (the buffer path).
trace::FileAnalysis whole(const std::string& path) {
  auto text = trace::read_trace_text(path);
  EXPECT_TRUE(text.ok()) << text.error().message;
  auto f = trace::analyze_buffer(path, *text);
  EXPECT_TRUE(f.ok()) << f.error().message;
  return f.ok() ? *f : trace::FileAnalysis{};
}

trace::FileAnalysis windowed(const std::string& path, std::size_t window, unsigned threads = 1) {
  trace::Options o;
  o.window_bytes = window;
  o.threads = threads;
  auto f = trace::analyze_file(path, o);
  EXPECT_TRUE(f.ok()) << f.error().message;
  return f.ok() ? *f : trace::FileAnalysis{};
}

TEST(TraceWindow, EveryShippedSampleGivesTheSameAnalysisWithAnyWindow) {
  std::vector<std::string> files;
  for (const auto& root :
       {sample_traces_dir(), source_dir() + "/tests/data/trace", source_dir() + "/tests/data/trace_formats"})
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() &&
          (e.path().string().ends_with(".json") || e.path().string().ends_with(".json.gz")) &&
          e.file_size() < 4'000'000)
        files.push_back(e.path().string());
  ASSERT_GE(files.size(), 20u);
  for (const auto& path : files) {
    SCOPED_TRACE(path);
    const auto expected = whole(path);
    if (expected.skipped)
      continue;  // not a trace (memory timelines, execution traces): whole-file reader only
    const std::string want = canonical(expected);
    for (std::size_t window : {std::size_t{4096}, std::size_t{100'003}, trace::kDefaultWindowBytes})
      for (unsigned threads : {1u, 2u, 3u})
        EXPECT_EQ(canonical(windowed(path, window, threads)), want)
            << "window " << window << ", threads " << threads;
  }
}

TEST(TraceWindow, EventsStraddlingTinyWindowsStringsWithBracketsAndMetadataAfterTheEvents) {
  TempDir dir;
  // Names with brackets, braces, commas, escaped quotes and backslashes; metadata after traceEvents.
  std::string events;
  for (int i = 0; i < 40; ++i) {
    if (i) events += ",\n";
    events += R"({"ph":"X","cat":"kernel","name":"k<{[\"]}>\\ ,)" + std::to_string(i % 3) +
              R"(","pid":0,"tid":7,"ts":)" + std::to_string(1000 + i * 10) +
              R"(,"dur":5,"args":{"correlation":)" + std::to_string(i) +
              R"(,"nested":{"a":[1,{"b":"]}"}]}}})";
    events += R"(,{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":)" +
              std::to_string(998 + i * 10) + R"(,"dur":1,"args":{"correlation":)" + std::to_string(i) + "}}";
  }
  const std::string text =
      "{\"schemaVersion\": 1, \"traceEvents\": [\n" + events +
      "\n], \"deviceProperties\": [{\"id\": 0, \"name\": \"NVIDIA H100 80GB HBM3\"}],"
      " \"distributedInfo\": {\"rank\": 3}, \"traceName\": \"a \\\"quoted\\\" [name]\"}\n";
  const std::string path = dir.write("t.json", text);
  const auto expected = whole(path);
  ASSERT_EQ(expected.rank, 3);
  ASSERT_EQ(expected.devices.size(), 1u);
  EXPECT_EQ(expected.devices[0].gpu_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(expected.devices[0].kernels.size(), 3u);
  for (std::size_t window = 1; window <= 700; window += window < 64 ? 1 : 37)
    for (unsigned threads : {1u, 2u, 5u})
      ASSERT_EQ(canonical(windowed(path, window, threads)), canonical(expected))
          << "window " << window << ", threads " << threads;
  // gzip'd, in two members.
  const std::string gz = dir.path() + "/t.json.gz";
  auto r = run_command({"/bin/sh", "-c",
                        "head -c 2000 '" + path + "' | gzip -c > '" + gz + "' && tail -c +2001 '" + path +
                            "' | gzip -c >> '" + gz + "'"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (std::size_t window : {std::size_t{7}, std::size_t{333}, trace::kDefaultWindowBytes})
    for (unsigned threads : {1u, 2u})
      EXPECT_EQ(canonical(windowed(gz, window, threads)), canonical(expected))
          << "gzip window " << window << ", threads " << threads;
}

TEST(TraceWindow, DamagedFilesKeepTheWholeFileReadersErrorsAndPartialResults) {
  TempDir dir;
  const std::string full =
      *trace::read_trace_text(sample_traces_dir() + "/nccl_parser_config/nccl_data.json.gz");
  const std::string cut = dir.write("cut.json", full.substr(0, 3'000'000));
  trace::Options o;
  o.window_bytes = 4096;
  auto strict = trace::analyze_file(cut, o);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.error().message.find("cut.json: invalid JSON at byte"), std::string::npos)
      << strict.error().message;
  o.threads = 2;  // a failed batch on a worker: the same error
  auto strict2 = trace::analyze_file(cut, o);
  ASSERT_FALSE(strict2.ok());
  EXPECT_EQ(strict2.error().message, strict.error().message);
  o.threads = 1;
  o.partial = true;
  auto partial = trace::analyze_file(cut, o);
  ASSERT_TRUE(partial.ok()) << partial.error().message;
  EXPECT_TRUE(partial->partial);
  EXPECT_GT(partial->event_count, 1000);
  o.threads = 2;
  auto partial2 = trace::analyze_file(cut, o);
  ASSERT_TRUE(partial2.ok()) << partial2.error().message;
  EXPECT_EQ(canonical(*partial2), canonical(*partial));
}

TEST(TraceWindow, ParallelBatchesMergeInFileOrderWithTheSameInternedIdsAndCollectives) {
  // A real multi-GPU trace with NCCL collectives: kernels, launches, spans and collective metadata spread
  // over many batches parsed on several threads give the sequential tables exactly.
  const std::string path = sample_traces_dir() + "/nccl_parser_config/nccl_data.json.gz";
  const auto one = windowed(path, 64 * 1024, 1);
  ASSERT_GT(one.event_count, 1000);
  ASSERT_FALSE(one.collectives.empty());
  for (unsigned threads : {2u, 4u, 8u})
    EXPECT_EQ(canonical(windowed(path, 64 * 1024, threads)), canonical(one)) << "threads " << threads;
  EXPECT_EQ(canonical(whole(path)), canonical(one));
}

TEST(TraceWindow, ManyTinyWindowsOnTwoThreadsLoseNoEventAtABoundary) {
  // 2 000 events of ~300 bytes (600 KB) read with a 4 KB window on 2 threads; the analysis needs every
  // event (a kernel per launch), which shows no event was lost at a boundary or merged twice.
  TempDir dir;
  std::string text = "{\"traceEvents\":[";
  for (int i = 0; i < 2000; ++i) {
    if (i) text += ",";
    text += R"({"ph":"X","cat":"kernel","name":"gemm_)" + std::to_string(i % 17) +
            R"(","pid":0,"tid":7,"ts":)" + std::to_string(1000 + i * 10) +
            R"(,"dur":4,"args":{"correlation":)" + std::to_string(i) + R"(,"pad":")" + std::string(200, 'x') +
            R"("}})";
  }
  text += "]}";
  const std::string path = dir.write("many.json", text);
  const auto f = windowed(path, 4096, 2);
  ASSERT_EQ(f.devices.size(), 1u);
  EXPECT_EQ(f.event_count, 2000);
  EXPECT_EQ(f.devices[0].activity_count, 2000);
  EXPECT_EQ(f.devices[0].kernels.size(), 17u);
  EXPECT_EQ(f.devices[0].busy_ns, 2000 * 4000);
  EXPECT_EQ(canonical(f), canonical(whole(path)));
  // Damage in the middle of the array that only the parser sees (a bad number inside an event), in a
  // batch parsed on a worker (a missing colon): the whole-file reader's message, whatever the threads.
  std::string bad = text;
  bad.replace(bad.find(R"("dur":4)", bad.size() / 2), 7, R"("dur" 4)");
  const std::string bad_path = dir.write("bad.json", bad);
  trace::Options o;
  o.window_bytes = 4096;
  o.threads = 1;
  auto one = trace::analyze_file(bad_path, o);
  o.threads = 2;
  auto two = trace::analyze_file(bad_path, o);
  ASSERT_FALSE(one.ok());
  ASSERT_FALSE(two.ok());
  EXPECT_NE(one.error().message.find("bad.json: invalid JSON at byte"), std::string::npos)
      << one.error().message;
  EXPECT_EQ(two.error().message, one.error().message);
}

TEST(TraceWindow, EventBoundaryLookalikesInsideStringsOrNestedObjectsAreNotCuts) {
  // Windows are cut at commas between events; here "}, {" also appears inside names and between objects
  // nested in args, which a cut there would split: the result must be the whole-file reader's.
  TempDir dir;
  std::string events;
  for (int i = 0; i < 300; ++i) {
    if (i) events += ",\n  ";
    events += R"({"ph": "X", "cat": "kernel", "name": "fused}, {op)" + std::to_string(i % 5) +
              R"(}", "pid": 0, "tid": 7, "ts": )" + std::to_string(1000 + i * 10) +
              R"(, "dur": 5, "args": {"correlation": )" + std::to_string(i) +
              R"(, "shapes": [{"a": 1}, {"b": "}, {"}, {"c": [{}, {}]}]}})";
    events +=
        R"(,{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": )" +
        std::to_string(998 + i * 10) + R"(, "dur": 1, "args": {"correlation": )" + std::to_string(i) + "}}";
  }
  const std::string path = dir.write(
      "guess.json", "{\"traceEvents\": [\n  " + events + "\n], \"distributedInfo\": {\"rank\": 1}}\n");
  const auto expected = whole(path);
  ASSERT_EQ(expected.devices.size(), 1u);
  ASSERT_EQ(expected.devices[0].kernels.size(), 5u);
  ASSERT_EQ(expected.event_count, 600);
  for (std::size_t window : {std::size_t{64}, std::size_t{150}, std::size_t{333}, std::size_t{1000},
                             std::size_t{4096}, std::size_t{30'000}})
    for (unsigned threads : {2u, 3u})
      ASSERT_EQ(canonical(windowed(path, window, threads)), canonical(expected))
          << "window " << window << ", threads " << threads;
}

}  // namespace
}  // namespace gm::test
