// Trace inputs: detection by content, the legacy bare-array trace, CPU-only figures, folders, and the
// exact fair share checked against a brute-force computation on real sample traces.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "support/support.h"
#include "trace/trace.h"

namespace gm::trace {
namespace {

namespace fs = std::filesystem;

std::string formats_file(const std::string& name) {
  return test::source_dir() + "/tests/data/trace_formats/" + name;
}

TEST(TraceDetect, NonTracesSayWhatTheyAre) {
  struct Case {
    std::string content, expect;
  };
  const std::vector<Case> cases = {
      {std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16), "PNG image"},
      {std::string("\x80\x04\x95\x10\0\0\0\0\0\0\0}\x94", 13), "pickle"},
      {std::string("PK\x03\x04\x14\0\0\0", 8), "ZIP"},
      {"{\"a\": 1}", "top-level keys: a"},
      {"{}", "empty object"},
      {R"({"schema": "1.0.2-chakra.0.0.4", "pid": 7, "time": "x", "nodes": [{"id": 1}]})",
       "Chakra execution trace"},
      {R"({"segments": [], "device_traces": []})", "memory snapshot"},
      {"[[1, 2], [3, 4]]", "JSON array without trace events"},
      {"[]", "empty JSON array"},
      {"", "empty file"},
      {"hello world\n", "text file"},
      {R"({"traceEvents": 5})", "not an array"},
  };
  for (const auto& c : cases) {
    auto r = analyze_buffer("x", c.content);
    ASSERT_TRUE(r.ok()) << c.expect << ": " << r.error().message;
    ASSERT_TRUE(r->skipped.has_value()) << c.expect;
    EXPECT_NE(r->skipped->find(c.expect), std::string::npos) << *r->skipped;
    EXPECT_TRUE(r->devices.empty());
  }
}

// A trace recorded with the system PyTorch 1.13 (no Kineto): a bare JSON array, no categories.
TEST(TraceLegacyArray, Torch113RecordingIsReadAsCpuOnly) {
  auto r = analyze_file(formats_file("torch113_cpu_only.pt.trace.json"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->skipped);
  EXPECT_EQ(r->format, "chrome_json_array");
  EXPECT_TRUE(r->devices.empty());
  EXPECT_EQ(r->event_count, 438);
  ASSERT_TRUE(r->host.has_value());
  const auto& h = *r->host;
  EXPECT_EQ(h.window_start_ns, 146'000);
  EXPECT_EQ(h.window_ns, 1'386'000);  // 146 us .. 1532 us
  ASSERT_EQ(h.steps.size(), 3u);
  EXPECT_EQ(h.steps[0].name, "ProfilerStep#0");
  EXPECT_EQ(h.steps[0].step_ns, 700'000);
  EXPECT_EQ(h.steps[2].step_ns, 273'000);
  EXPECT_EQ(h.step_ns.count, 3);
  ASSERT_FALSE(h.operators.empty());
  for (std::size_t i = 1; i < h.operators.size(); ++i)
    EXPECT_GE(h.operators[i - 1].self_ns, h.operators[i].self_ns);
  for (const auto& op : h.operators) {
    EXPECT_LE(op.self_ns, op.total_ns) << op.name;
    EXPECT_GE(op.self_ns, 0) << op.name;
    EXPECT_NE(op.name.rfind("ProfilerStep", 0), 0u) << "steps are not operators";
  }
}

TEST(TraceHost, SelfTimeSubtractsNestedOperators) {
  const char* json = R"J({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "inner", "pid": 1, "tid": 1, "ts": 10, "dur": 30},
    {"ph": "X", "cat": "cpu_op", "name": "leaf", "pid": 1, "tid": 1, "ts": 15, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "inner", "pid": 1, "tid": 1, "ts": 50, "dur": 20},
    {"ph": "X", "cat": "cpu_op", "name": "other_thread", "pid": 1, "tid": 2, "ts": 20, "dur": 200},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 1, "tid": 1, "ts": 0, "dur": 110}
  ]})J";
  auto r = analyze_buffer("host.json", json);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->host);
  const auto& h = *r->host;
  EXPECT_EQ(h.window_ns, 220'000);
  std::map<std::string, OperatorTime> by;
  for (const auto& o : h.operators) by[o.name] = o;
  EXPECT_EQ(by["outer"].self_ns, 50'000);
  EXPECT_EQ(by["inner"].self_ns, 45'000);
  EXPECT_EQ(by["inner"].total_ns, 50'000);
  EXPECT_EQ(by["inner"].count, 2);
  EXPECT_EQ(by["leaf"].self_ns, 5'000);
  EXPECT_EQ(by["other_thread"].self_ns, 200'000);
  EXPECT_EQ(h.operators[0].name, "other_thread");
  ASSERT_EQ(h.steps.size(), 1u);
  EXPECT_EQ(h.steps[0].step_ns, 110'000);
}

TEST(TraceHost, CpuOperatorsDuringIdleGaps) {
  const char* json = R"J({"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 0, "dur": 10},
    {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 50, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "DataLoader.__next__", "pid": 1, "tid": 1, "ts": 5, "dur": 40},
    {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": 20, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 2, "ts": 40, "dur": 20}
  ]})J";
  auto r = analyze_buffer("idle.json", json);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->devices.size(), 1u);
  const auto& ops = r->devices[0].idle_cpu_ops;
  ASSERT_EQ(ops.size(), 2u);  // aten::copy_ is nested in DataLoader.__next__: not counted twice
  EXPECT_EQ(ops[0].name, "DataLoader.__next__");
  EXPECT_EQ(ops[0].overlap_ns, 35'000);  // gap [10, 50) us
  EXPECT_EQ(ops[1].name, "aten::relu");
  EXPECT_EQ(ops[1].overlap_ns, 10'000);
  EXPECT_EQ(ops[1].count, 1);
}

TEST(TraceInputs, FoldersAreRecursiveAndGroupedWithProblemsReported) {
  test::TempDir dir;
  const std::string sample = test::read_file(test::source_dir() + "/tests/data/trace/triton_example.json.gz");
  ASSERT_FALSE(sample.empty());
  fs::create_directories(dir.path() + "/runA");
  fs::create_directories(dir.path() + "/runB/deeper");
  dir.write("runA/rank0.pt.trace.json.gz", sample);
  dir.write("runA/rank1.bin", sample);  // detection by content, not by name
  dir.write("runA/plot.png", std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16));
  dir.write("runB/deeper/w.json.gz", sample);
  fs::create_directory_symlink(dir.path(), dir.path() + "/runB/loop");
  fs::create_symlink(dir.path() + "/missing", dir.path() + "/runA/dangling.json");
  auto r = analyze_inputs({dir.path()});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->errors.empty());
  std::map<std::string, int> traces_per_group;
  int skipped = 0;
  for (const auto& f : r->files) {
    if (f.skipped)
      ++skipped;
    else
      ++traces_per_group[f.group];
  }
  EXPECT_EQ(traces_per_group[dir.path() + "/runA"], 2);
  EXPECT_EQ(traces_per_group[dir.path() + "/runB/deeper"], 1);
  EXPECT_EQ(skipped, 1);  // the PNG
  bool loop = false, dangling = false;
  for (const auto& p : r->problems) {
    loop = loop || p.find("runB/loop") != std::string::npos;
    dangling = dangling || p.find("dangling.json") != std::string::npos;
  }
  EXPECT_TRUE(loop) << testing::PrintToString(r->problems);
  EXPECT_TRUE(dangling) << testing::PrintToString(r->problems);

  // A folder of non-traces, an empty folder, a named non-trace: errors (non-zero exit in the CLI).
  test::TempDir other;
  fs::create_directories(other.path() + "/empty");
  other.write("junk/a.txt", "");
  auto bad = analyze_inputs({other.path() + "/empty", dir.path() + "/runA/plot.png"});
  ASSERT_TRUE(bad.ok()) << bad.error().message;
  ASSERT_EQ(bad->errors.size(), 2u) << testing::PrintToString(bad->errors);
  EXPECT_NE(bad->errors[0].find("plot.png: not a trace: a PNG image"), std::string::npos) << bad->errors[0];
  EXPECT_NE(bad->errors[1].find("empty: no files in this folder"), std::string::npos) << bad->errors[1];
  auto missing = analyze_inputs({other.path() + "/nope"});
  EXPECT_FALSE(missing.ok());
}

// --- exact fair share against a brute-force computation ----------------------------------------

/// Quotes the number after every "ts": and "dur": so that nlohmann keeps their text (a double cannot
/// hold epoch-scale microseconds with nanosecond digits).
std::string quote_times(const std::string& text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t best = std::string::npos, key_len = 0;
    for (const char* key : {"\"ts\":", "\"dur\":"}) {
      const auto p = text.find(key, i);
      if (p < best) {
        best = p;
        key_len = std::strlen(key);
      }
    }
    if (best == std::string::npos) {
      out.append(text, i, std::string::npos);
      break;
    }
    std::size_t j = best + key_len;
    out.append(text, i, j - i);
    while (j < text.size() && text[j] == ' ') out.push_back(text[j++]);
    const std::size_t start = j;
    while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.' ||
                               text[j] == '-' || text[j] == 'e' || text[j] == 'E' || text[j] == '+'))
      ++j;
    if (j > start) out += "\"" + text.substr(start, j - start) + "\"";
    i = j;
  }
  return out;
}

__extension__ typedef __int128 Int128;

struct Exact {
  std::map<std::int64_t, Int128> by_k;  // Σ over segments with k activities running of len (per activity)
};

/// Per device and kernel name, the exact fair share as Σ_k T_k / k, from elementary segments.
std::map<std::string, std::map<std::string, Exact>> brute_force(const std::string& path) {
  auto text = read_trace_text(path);
  EXPECT_TRUE(text.ok());
  auto j = nlohmann::json::parse(quote_times(*text));
  struct Act {
    std::int64_t start, end;
    std::string name;
  };
  std::map<std::string, std::vector<Act>> by_device;
  const std::set<std::string> gpu_cats = {"kernel",     "Kernel", "mtia_ccp_events", "gpu_memcpy",
                                          "gpu_memset", "Memcpy", "Memset"};
  for (const auto& e : j.at("traceEvents")) {
    if (!e.is_object() || e.value("ph", "") != "X" || !gpu_cats.contains(e.value("cat", ""))) continue;
    if (!e.contains("ts") || !e.contains("dur") || !e["ts"].is_string() || !e["dur"].is_string()) continue;
    auto ts = parse_us_to_ns(e["ts"].get<std::string>());
    auto dur = parse_us_to_ns(e["dur"].get<std::string>());
    if (!ts || !dur || *dur <= 0) continue;
    std::string dev = e["pid"].is_string() ? e["pid"].get<std::string>() : e["pid"].dump();
    by_device[dev].push_back(Act{*ts, *ts + *dur, e.value("name", "")});
  }
  std::map<std::string, std::map<std::string, Exact>> out;
  for (auto& [dev, acts] : by_device) {
    std::vector<std::int64_t> points;
    for (const auto& a : acts) {
      points.push_back(a.start);
      points.push_back(a.end);
    }
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    std::sort(acts.begin(), acts.end(), [](const Act& a, const Act& b) { return a.start < b.start; });
    std::vector<const Act*> running;
    std::size_t next = 0;
    for (std::size_t s = 0; s + 1 < points.size(); ++s) {
      const auto lo = points[s], hi = points[s + 1];
      while (next < acts.size() && acts[next].start <= lo) running.push_back(&acts[next++]);
      std::erase_if(running, [&](const Act* a) { return a->end <= lo; });
      const auto k = static_cast<std::int64_t>(running.size());
      if (k == 0) continue;
      for (const Act* a : running) {
        EXPECT_TRUE(a->start <= lo && a->end >= hi);
        out[dev][a->name].by_k[k] += hi - lo;
      }
    }
  }
  return out;
}

void expect_exact_shares(const std::string& path) {
  SCOPED_TRACE(path);
  auto analysed = analyze_file(path);
  ASSERT_TRUE(analysed.ok()) << analysed.error().message;
  const auto exact = brute_force(path);
  ASSERT_EQ(exact.size(), analysed->devices.size());
  std::size_t checked = 0;
  for (const auto& d : analysed->devices) {
    ASSERT_TRUE(exact.contains(d.device)) << d.device;
    EXPECT_TRUE(d.fair_share_exact);
    const auto& names = exact.at(d.device);
    std::int64_t sum = 0;
    for (const auto& b : d.kernels) {
      sum += b.attributed_ns;
      if (b.attributed_ns == 0 && !names.contains(b.name)) continue;  // zero-length kernels only
      ASSERT_TRUE(names.contains(b.name)) << b.name;
      // exact = whole + frac with whole an integer and 0 <= frac < number of k's
      Int128 whole = 0;
      long double frac = 0;
      for (const auto& [k, t] : names.at(b.name).by_k) {
        whole += t / k;
        frac += static_cast<long double>(t % k) / static_cast<long double>(k);
      }
      const long double diff =
          static_cast<long double>(b.attributed_ns - static_cast<std::int64_t>(whole)) - frac;
      EXPECT_LT(diff, 1.0L) << b.name;
      EXPECT_GT(diff, -1.0L) << b.name;
      ++checked;
    }
    EXPECT_EQ(sum, d.busy_ns);
    // Work launched before the profiler's window is in no operator, annotation or step row (issue 38).
    for (const auto* bs : {&d.operators, &d.annotations, &d.steps}) {
      std::int64_t s = 0;
      for (const auto& b : *bs) s += b.attributed_ns;
      EXPECT_EQ(s + d.before_window.attributed_ns, d.busy_ns);
    }
  }
  EXPECT_GT(checked, 0u);
}

// 80 nested kernels: every concurrency level from 1 to 80 occurs, lcm(1..80) × window does not fit in
// 126 bits, so shares are kept per segment in whole ns (flagged); the sums stay exact.
TEST(TraceFairShare, FallbackForExtremeConcurrencyStillAddsUp) {
  std::string json = R"({"traceEvents": [)";
  for (int i = 0; i < 80; ++i) {
    if (i > 0) json += ",";
    json += R"({"ph": "X", "cat": "kernel", "name": "k)" + std::to_string(i % 7) + R"(", "pid": 0, "tid": )" +
            std::to_string(i) + R"(, "ts": )" + std::to_string(i) + R"(.001, "dur": )" +
            std::to_string(1000 - 2 * i) + ".003}";
  }
  json += "]}";
  auto r = analyze_buffer("nested.json", json);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->devices.size(), 1u);
  const auto& d = r->devices[0];
  EXPECT_FALSE(d.fair_share_exact);
  for (const auto* bs : {&d.kernels, &d.operators, &d.annotations, &d.steps}) {
    std::int64_t s = 0;
    for (const auto& b : *bs) s += b.attributed_ns;
    EXPECT_EQ(s, d.busy_ns);
  }
  EXPECT_EQ(d.busy_ns, d.window_ns);
}

TEST(TraceFairShare, ExactWithinOneNanosecondOnRealTraces) {
  const std::string samples = test::sample_traces_dir() + "/";
  expect_exact_shares(test::source_dir() + "/tests/data/trace/amd_mi250.json.gz");
  expect_exact_shares(samples + "nccl_parser_config/nccl_data.json.gz");
  expect_exact_shares(samples + "negative_queue_length_values_check/rank0.json.gz");
  expect_exact_shares(samples + "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz");
}

}  // namespace
}  // namespace gm::trace
