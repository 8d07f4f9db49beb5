// gpumeter trace diff: per-step comparison of two runs and the CI gate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "support/pftrace_writer.h"
#include "support/support.h"
#include "trace/trace.h"

namespace gm::test {
namespace {

const nlohmann::json* find_row(const nlohmann::json& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r["name"] == name) return &r;
  return nullptr;
}

TEST(TraceDiffCliIntegrationTest, MoreDataLoaderWorkersCutIdleCostPerStepAndPass) {
  const std::string root = sample_traces_dir() + "/kineto_tb_plugin_samples/";
  const std::string base = root + "resnet50_num_workers_0", now = root + "resnet50_num_workers_4";
  auto r = run_gpumeter({"trace", "diff", base, now, "--price", "3", "--json"}, {}, std::nullopt, 280);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out.substr(0, 3000);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["verdict"], "pass");
  EXPECT_EQ(j["per"], "step");
  const auto* idle = find_row(j["summary"], "idle");
  ASSERT_NE(idle, nullptr);
  EXPECT_LT((*idle)["new_ns"].get<double>(), (*idle)["base_ns"].get<double>()) << *idle;
  EXPECT_LT((*idle)["delta_cost_usd"].get<double>(), 0) << *idle;
  const auto* window = find_row(j["summary"], "window");
  ASSERT_NE(window, nullptr);
  EXPECT_TRUE((*window)["gated"].get<bool>());
  auto text = run_gpumeter({"trace", "diff", base, now, "--price", "3"}, {}, std::nullopt, 280);
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("verdict: PASS"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("idle"), std::string::npos) << text.out;
}

/// Nanoseconds as the decimal microseconds text of a trace.
std::string fmt_us(std::int64_t ns) {
  std::string frac = std::to_string(ns % 1000);
  return std::to_string(ns / 1000) + "." + std::string(3 - frac.size(), '0') + frac;
}

/// The JSON text back with numbers where json_with_quoted_times put strings (one pass over nlohmann's
/// compact dump, where a quoted time reads "ts":"123.5").
std::string unquote_times(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  std::size_t next[2] = {0, 0};  // next occurrence of each key at or after i (found once per occurrence)
  bool searched[2] = {false, false};
  while (i < text.size()) {
    std::size_t best = std::string::npos, key_len = 0;
    const char* keys[2] = {"\"ts\":\"", "\"dur\":\""};
    for (int j = 0; j < 2; ++j) {
      if (!searched[j] || (next[j] != std::string::npos && next[j] < i)) {
        next[j] = text.find(keys[j], i);
        searched[j] = true;
      }
      if (next[j] < best) {
        best = next[j];
        key_len = std::strlen(keys[j]);
      }
    }
    if (best == std::string::npos) {
      out.append(text, i, std::string::npos);
      break;
    }
    out.append(text, i, best + key_len - 1 - i);  // up to the opening quote
    const std::size_t close = text.find('"', best + key_len);
    out.append(text, best + key_len, close - (best + key_len));
    i = close + 1;
  }
  return out;
}

/// A copy of `base` (in `dir`) with the largest compute kernel 30 % slower in every launch; its name.
std::pair<std::string, std::string> thirty_percent_slower(const TempDir& dir, const std::string& base) {
  auto text = trace::read_trace_text(base);
  EXPECT_TRUE(text.ok());
  auto doc = nlohmann::json::parse(json_with_quoted_times(*text));
  auto analysed = trace::analyze_inputs({base});
  EXPECT_TRUE(analysed.ok());
  std::string victim;
  for (const auto& b : analysed->files.at(0).devices.at(0).kernels)
    if (b.klass == "compute") {
      victim = b.name;
      break;
    }
  int changed = 0;
  for (auto& e : doc["traceEvents"]) {
    if (!e.is_object() || e.value("name", "") != victim || e.value("cat", "") == "cpu_op") continue;
    if (!e.contains("dur") || !e["dur"].is_string()) continue;
    const auto dur = trace::parse_us_to_ns(e["dur"].get<std::string>());
    if (!dur) continue;
    e["dur"] = fmt_us(*dur * 13 / 10);
    ++changed;
  }
  EXPECT_GT(changed, 0);
  return {dir.write("slower.json", unquote_times(doc.dump())), victim};
}

TEST(TraceDiffCliIntegrationTest, OneKernelThirtyPercentSlowerFailsAndIsNamed) {
  const std::string resnet =
      sample_traces_dir() +
      "/kineto_tb_plugin_samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz";
  for (const std::string& base : {source_dir() + "/tests/data/trace/amd_mi250.json.gz", resnet}) {
    SCOPED_TRACE(base);
    TempDir dir;
    const auto [slower, victim] = thirty_percent_slower(dir, base);
    ASSERT_FALSE(victim.empty());
    auto r = run_gpumeter({"trace", "diff", base, slower, "--price", "3", "--json"}, {}, std::nullopt, 280);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["verdict"], "fail");
    bool named = false;
    for (const auto& f : j["failures"])
      named = named || f.get<std::string>().find(victim) != std::string::npos;
    EXPECT_TRUE(named) << j["failures"];
    const auto* row = find_row(j["kernels"], victim);
    ASSERT_NE(row, nullptr);
    EXPECT_TRUE((*row)["failed"].get<bool>());
    EXPECT_GT((*row)["change"].get<double>(), 0.05);
    auto t = run_gpumeter({"trace", "diff", base, slower, "--price", "3"}, {}, std::nullopt, 280);
    EXPECT_EQ(t.exit_code, 1);
    EXPECT_NE(t.out.find("verdict: FAIL"), std::string::npos) << t.out;
    EXPECT_NE(t.out.find("slower"), std::string::npos) << t.out;
  }
  const std::string base = source_dir() + "/tests/data/trace/amd_mi250.json.gz";
  TempDir dir;
  const auto [slower, victim] = thirty_percent_slower(dir, base);
  // The same trace against itself passes; a generous threshold passes too.
  EXPECT_EQ(run_gpumeter({"trace", "diff", base, base}).exit_code, 0);
  EXPECT_EQ(run_gpumeter({"trace", "diff", base, slower, "--max-cost-increase", "80%"}).exit_code, 0);
  // Usage errors: exit 2.
  EXPECT_EQ(run_gpumeter({"trace", "diff", base}).exit_code, 2);
  EXPECT_EQ(run_gpumeter({"trace", "diff", base, dir.path() + "/missing.json"}).exit_code, 2);
  EXPECT_EQ(run_gpumeter({"trace", "diff", base, slower, "--max-cost-increase", "lots"}).exit_code, 2);
  const std::string cpu = source_dir() + "/tests/data/trace/cpu_only_rank34.json.gz";
  EXPECT_EQ(run_gpumeter({"trace", "diff", base, cpu}).exit_code, 2);
}

}  // namespace
}  // namespace gm::test
