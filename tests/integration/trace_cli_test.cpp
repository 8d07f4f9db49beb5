#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "support/support.h"

namespace gm::test {
namespace {

namespace fs = std::filesystem;

std::string data_file(const std::string& name) { return source_dir() + "/tests/data/trace/" + name; }

std::int64_t sum_attributed(const nlohmann::json& arr) {
  std::int64_t s = 0;
  for (const auto& b : arr) s += b.at("attributed_ns").get<std::int64_t>();
  return s;
}

void expect_exact_sums(const nlohmann::json& d, const std::string& what) {
  const auto window = d.at("window_ns").get<std::int64_t>();
  const auto busy = d.at("busy_ns").get<std::int64_t>();
  EXPECT_EQ(d.at("compute_ns").get<std::int64_t>() + d.at("communication_ns").get<std::int64_t>() +
                d.at("memory_ns").get<std::int64_t>() + d.at("idle_ns").get<std::int64_t>(),
            window)
      << what;
  EXPECT_EQ(sum_attributed(d.at("kernels")), busy) << what;
  // Work launched before the profiler's window is in no operator, annotation or step row (issue 38).
  const auto before = d.at("before_window").at("attributed_ns").get<std::int64_t>();
  EXPECT_EQ(sum_attributed(d.at("before_window").at("kernels")), before) << what;
  EXPECT_EQ(sum_attributed(d.at("operators")) + before, busy) << what;
  EXPECT_EQ(sum_attributed(d.at("annotations")) + before, busy) << what;
  EXPECT_EQ(sum_attributed(d.at("steps")) + before, busy) << what;
}

TEST(TraceCliIntegrationTest, GoldenAmdMi250) {
  auto r = run_gpumeter({"trace", data_file("amd_mi250.json.gz"), "--price", "3.6", "--json", "--steps", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["devices"].size(), 1u);
  const auto& d = j["devices"][0];
  EXPECT_EQ(d["device"], "2");
  EXPECT_EQ(d["gpu_name"], "AMD Radeon Graphics");
  // Independently checked with Python (Decimal) over the same file.
  EXPECT_EQ(d["window_ns"], 8911887);
  EXPECT_EQ(d["busy_ns"], 149042);
  EXPECT_EQ(d["compute_ns"], 110881);
  EXPECT_EQ(d["memory_ns"], 38161);
  EXPECT_EQ(d["communication_ns"], 0);
  EXPECT_EQ(d["kernel_ns"], 149042);
  EXPECT_EQ(d["activity_count"], 16);
  EXPECT_EQ(d["price_source"].get<std::string>().rfind("--price", 0), 0u) << d["price_source"];
  EXPECT_DOUBLE_EQ(d["price_usd_per_gpu_hour"].get<double>(), 3.6);
  // $3.6/h = $1e-12 per ns.
  EXPECT_NEAR(d["cost_usd"].get<double>(), 8911887e-12, 1e-15);
  EXPECT_NEAR(d["idle_cost_usd"].get<double>(), 8762845e-12, 1e-15);
  EXPECT_EQ(d["step_count"], 2);
  EXPECT_FALSE(d["projected_cost_usd"].is_null());
  expect_exact_sums(d, "amd");
  EXPECT_EQ(j["files"][0]["skipped"], nullptr);
}

TEST(TraceCliIntegrationTest, GoldenTritonStreamTaggedCpuOpIsNotGpuWork) {
  auto r = run_gpumeter({"trace", data_file("triton_example.json.gz"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["devices"].size(), 1u);
  const auto& d = j["devices"][0];
  EXPECT_EQ(d["activity_count"], 1);
  EXPECT_EQ(d["window_ns"], 1760);
  EXPECT_EQ(d["kernels"][0]["name"], "triton_poi_fused_add_cos_sin_0");
  // no pricing flag: the catalog reference price of the GPU in deviceProperties, with its source
  ASSERT_FALSE(d["cost_usd"].is_null());
  EXPECT_NE(d["price_source"].get<std::string>().find("catalog reference"), std::string::npos) << d["price_source"];
  // Trace costs are meter's integer pico-dollars: within half a pico-dollar of the exact product.
  EXPECT_NEAR(d["cost_usd"].get<double>(), 1760e-9 / 3600 * d["price_usd_per_gpu_hour"].get<double>(),
              0.5e-12);
  expect_exact_sums(d, "triton");
}

TEST(TraceCliIntegrationTest, GoldenLegacyInferenceRank1) {
  auto r = run_gpumeter({"trace", data_file("inference_rank_1.json.gz"), "--json", "--price", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["files"][0]["rank"], 1);
  const auto& d = j["devices"][0];
  EXPECT_EQ(d["window_ns"], 1629000);
  EXPECT_EQ(d["busy_ns"], 30000);
  EXPECT_EQ(d["activity_count"], 4);
  expect_exact_sums(d, "legacy");
}

TEST(TraceCliIntegrationTest, CpuOnlyTraceGivesHostFiguresAndNamedNonTraceFails) {
  auto r = run_gpumeter({"trace", data_file("cpu_only_rank34.json.gz"), data_file("execution_trace_et.json.gz"), "--json",
                         "--price", "3.6"});
  EXPECT_EQ(r.exit_code, 1) << r.err;  // the execution trace was named explicitly
  EXPECT_NE(r.err.find("execution_trace_et.json.gz: not a trace: a Chakra execution trace"), std::string::npos) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["devices"].empty());
  ASSERT_EQ(j["files"].size(), 2u);
  EXPECT_EQ(j["files"][0]["rank"], 34);
  EXPECT_EQ(j["files"][0]["skipped"], nullptr);
  EXPECT_EQ(j["files"][0]["note"], "no GPU activity");
  EXPECT_EQ(j["files"][0]["format"], "kineto_json");
  const auto& host = j["files"][0]["host"];
  ASSERT_TRUE(host.is_object()) << j["files"][0];
  EXPECT_EQ(host["label"], "CPU only");
  EXPECT_GT(host["window_ns"].get<std::int64_t>(), 0);
  EXPECT_NEAR(host["cost_usd"].get<double>(), host["window_ns"].get<double>() * 1e-12, 1e-15);
  EXPECT_FALSE(host["operators"].empty());
  EXPECT_NE(j["files"][1]["skipped"], nullptr);
  auto text = run_gpumeter({"trace", data_file("cpu_only_rank34.json.gz"), "--price", "3.6"});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("CPU only"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("host window"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("self CPU time"), std::string::npos) << text.out;
}

TEST(TraceCliIntegrationTest, NamedFilesThatAreNotTracesFailWithWhatTheyAre) {
  TempDir dir;
  struct Case {
    std::string name, content, what;
  };
  const std::vector<Case> cases = {
      {"plot.png", std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16), "a PNG image"},
      {"x.json", "{\"a\": 1}", "JSON without trace events"},
      {"snapshot.pickle", std::string("\x80\x04\x95\x10\0\0\0\0\0\0\0}\x94", 13), "Python pickle"},
      {"empty.json", "", "an empty file"},
  };
  for (const auto& c : cases) {
    const auto path = dir.write(c.name, c.content);
    auto r = run_gpumeter({"trace", path});
    EXPECT_EQ(r.exit_code, 1) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(path + ": not a trace: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.what), std::string::npos) << r.err;
  }
  auto et = run_gpumeter({"trace", sample_traces_dir() + "/execution_trace/benchmark_simple_add_et.json.gz"});
  EXPECT_EQ(et.exit_code, 1);
  EXPECT_NE(et.err.find("Chakra execution trace"), std::string::npos) << et.err;
  auto mem = run_gpumeter({"trace", sample_traces_dir() + "/memory_analysis/memory_timeline.raw.gz"});
  EXPECT_EQ(mem.exit_code, 1);
  EXPECT_NE(mem.err.find("JSON array without trace events"), std::string::npos) << mem.err;
  // A folder with nothing analysable fails too; one with a trace among other files does not.
  fs::create_directories(dir.path() + "/empty");
  auto empty = run_gpumeter({"trace", dir.path() + "/empty"});
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_NE(empty.err.find("no files in this folder"), std::string::npos) << empty.err;
  auto junk = run_gpumeter({"trace", dir.path()});
  EXPECT_EQ(junk.exit_code, 1);
  EXPECT_NE(junk.err.find("nothing to analyse"), std::string::npos) << junk.err;
  auto mixed = run_gpumeter({"trace", sample_traces_dir() + "/execution_trace", "--json"});
  EXPECT_EQ(mixed.exit_code, 0) << mixed.err;
}

TEST(TraceCliIntegrationTest, PartialFileCutBeforeItsFirstGpuEventSaysSo) {
  TempDir dir;
  std::string events;
  for (int i = 0; i < 50; ++i)
    events += "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::op\", \"pid\": 1, \"tid\": 1, \"ts\": " +
              std::to_string(i * 10) + ", \"dur\": 5},\n";
  const std::string kernel = "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"pid\": 0, \"tid\": 7, \"ts\": 600, \"dur\": 10}";
  const std::string whole = "{\"traceEvents\": [\n" + events + kernel + "\n]}";
  const std::string cut = dir.write("cut.json", whole.substr(0, whole.find("\"ts\": 300")));
  auto strict = run_gpumeter({"trace", cut});
  EXPECT_EQ(strict.exit_code, 1);
  auto p = run_gpumeter({"trace", cut, "--partial", "--price", "1"});
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("PARTIAL — the file is cut before its first GPU event"), std::string::npos) << p.out;
  auto pj = run_gpumeter({"trace", cut, "--partial", "--json"});
  auto j = nlohmann::json::parse(pj.out);
  EXPECT_EQ(j["files"][0]["partial"], true);
  EXPECT_EQ(j["files"][0]["note"], "no GPU activity before the damage (PARTIAL)");
}

// The real PyTorch of this machine (Debian python3-torch 1.13, built without Kineto) writes the legacy
// bare-array chrome trace; gpumeter reads it as a CPU-only trace.
TEST(TraceCliIntegrationTest, LegacyTraceRecordedWithSystemPytorchIsCpuOnly) {
  TempDir dir;
  auto rec = run_command({"/usr/bin/python3", source_dir() + "/tests/data/trace_formats/record_torch113_cpu_only.py",
                          dir.path() + "/log"},
                         {}, std::nullopt, 240);
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  auto r = run_gpumeter({"trace", dir.path() + "/log", "--json", "--price", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["files"].size(), 1u);
  const auto& f = j["files"][0];
  EXPECT_EQ(f["format"], "chrome_json_array");
  EXPECT_EQ(f["gpu_activity"], false);
  EXPECT_EQ(f["host"]["label"], "CPU only");
  EXPECT_EQ(f["host"]["step_count"], 3);
  EXPECT_GT(f["host"]["operators"].size(), 5u);
  EXPECT_FALSE(f["host"]["cost_per_step_usd"].is_null());
  auto text = run_gpumeter({"trace", dir.path() + "/log", "--price", "0.5"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("CPU only"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("aten::"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("cost per step"), std::string::npos) << text.out;
}

TEST(TraceCliIntegrationTest, TensorboardPluginLayoutReportsEachRunFolder) {
  const std::string root = sample_traces_dir() + "/kineto_tb_plugin_samples";
  auto r = run_gpumeter({"trace", root, "--json", "--price", "2"}, {}, std::nullopt, 280);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  std::set<std::string> groups;
  for (const auto& d : j["devices"]) groups.insert(d["group"].get<std::string>());
  EXPECT_EQ(groups.size(), 2u) << r.out.substr(0, 2000);
  EXPECT_TRUE(groups.contains(root + "/resnet50_num_workers_0"));
  auto text = run_gpumeter({"trace", root, "--by", "kernel", "--top", "2"}, {}, std::nullopt, 280);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("=== " + root + "/resnet50_num_workers_4 ==="), std::string::npos) << text.out;
}

TEST(TraceCliIntegrationTest, FolderIsOneTracePerRank) {
  auto r = run_gpumeter({"trace", source_dir() + "/tests/data/trace", "--json", "--price", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  // Nine traces (three CPU-only), an execution trace and the README: eleven files, six GPUs.
  EXPECT_EQ(j["files"].size(), 11u);
  EXPECT_EQ(j["devices"].size(), 6u);
  auto csv = run_gpumeter({"trace", data_file("amd_mi250.json.gz"), "--csv", "--price", "1"});
  ASSERT_EQ(csv.exit_code, 0);
  EXPECT_EQ(csv.out.rfind("file,rank,device,breakdown,name,class,count,kernel_ns,attributed_ns,cost_usd", 0), 0u);
  EXPECT_NE(csv.out.find(",kernel,Memcpy HtoD (Host -> Device),memory,2,38161,38161,"), std::string::npos) << csv.out;
  auto text = run_gpumeter({"trace", data_file("amd_mi250.json.gz"), "--price", "1", "--by", "kernel", "--top", "3"});
  ASSERT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("source: --price"), std::string::npos);
  EXPECT_NE(text.out.find("(10 more)"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("operator"), std::string::npos);
}

TEST(TraceCliIntegrationTest, TruncatedAndInvalidFilesFailWithOffset) {
  TempDir dir;
  auto full = run_command({"/bin/sh", "-c", "zcat " + data_file("amd_mi250.json.gz")});
  ASSERT_EQ(full.exit_code, 0);
  const std::string cut = dir.write("cut.json", full.out.substr(0, 52000));
  auto r = run_gpumeter({"trace", cut, "--price", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(cut), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("byte"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  auto p = run_gpumeter({"trace", cut, "--price", "1", "--partial", "--json"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["files"][0]["partial"], true);
  ASSERT_EQ(j["devices"].size(), 1u);
  EXPECT_EQ(j["devices"][0]["partial"], true);
  expect_exact_sums(j["devices"][0], "partial");
  EXPECT_NE(p.err.find("PARTIAL"), std::string::npos);
  const std::string bad = dir.write("bad.json", "{\"traceEvents\": [ {\"ph\": \"X\", \"ts\": 1,, } ] }");
  auto b = run_gpumeter({"trace", bad});
  EXPECT_EQ(b.exit_code, 1);
  EXPECT_NE(b.err.find("bad.json: invalid JSON at byte"), std::string::npos) << b.err;
  const std::string gz = dir.write("bad.json.gz", std::string("\x1f\x8b\x08\x00garbage", 12));
  auto g = run_gpumeter({"trace", gz});
  EXPECT_EQ(g.exit_code, 1);
  EXPECT_NE(g.err.find("bad.json.gz"), std::string::npos) << g.err;
  auto missing = run_gpumeter({"trace", dir.path() + "/nope.json"});
  EXPECT_NE(missing.exit_code, 0);
}

// Every real sample of tests/data/sample_traces: no crash, exact sums on every device.
TEST(TraceCliIntegrationTest, EveryRealSampleAnalysesWithExactSums) {
  const std::string root = sample_traces_dir();
  ASSERT_TRUE(fs::is_directory(root)) << root;
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) files.push_back(e.path().string());
  ASSERT_GT(files.size(), 20u);
  auto r = run_gpumeter({"trace", "--json", "--price", "2.5", root}, {}, std::nullopt, 280);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["files"].size(), files.size());
  EXPECT_GT(j["devices"].size(), 20u);
  for (const auto& d : j["devices"]) {
    expect_exact_sums(d, d["file"].get<std::string>() + " device " + d["device"].get<std::string>());
    EXPECT_TRUE(d["fair_share_exact"].get<bool>()) << d["file"];
  }
  int no_gpu = 0, skipped = 0;
  for (const auto& f : j["files"]) {
    if (!f["skipped"].is_null()) ++skipped;
    else if (!f["gpu_activity"].get<bool>()) ++no_gpu;
  }
  EXPECT_GE(no_gpu, 4);   // cpu_only, rank_non_gpu, rank_unavailable, distributed_info_unavailable, ...
  EXPECT_GE(skipped, 2);  // the execution trace and the memory timeline
}

}  // namespace
}  // namespace gm::test
