// Perfetto traces through the binary: a .pftrace written by the test helper from the same events as a
// shipped JSON sample gives the same --json figures as that JSON (gzip'd too); a damaged file.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "support/pftrace_writer.h"
#include "support/support.h"
#include "trace/trace.h"

namespace gm::test {
namespace {

/// The --json document without what legitimately differs between the two files of one run: the file
/// name, its folder, its size and format, the event count (JSON metadata events have no Perfetto
/// slice), and what only Kineto JSON carries (deviceProperties GPU name, distributedInfo rank, the operators'
/// `Input type` that tells fp32 from tensor-core GEMMs: the matrix-math figures and the fp32_math finding).
nlohmann::json comparable(nlohmann::json j) {
  for (auto& d : j["devices"]) {
    for (const char* k : {"file", "group", "gpu_name", "rank", "matrix_math"}) d.erase(k);
    auto& fs = d["findings"];
    fs.erase(std::remove_if(fs.begin(), fs.end(),
                            [](const nlohmann::json& f) { return f["kind"] == "fp32_math"; }),
             fs.end());
  }
  nlohmann::json hosts = nlohmann::json::array();
  for (auto& f : j["files"]) hosts.push_back(f["host"]);
  return {{"devices", j["devices"]}, {"hosts", hosts}};
}

void expect_same_as_json(const std::string& json_path) {
  SCOPED_TRACE(json_path);
  TempDir dir;
  auto text = trace::read_trace_text(json_path);
  ASSERT_TRUE(text.ok()) << text.error().message;
  const std::string pftrace = dir.write("run.pftrace", kineto_json_to_pftrace(*text));
  auto from_json = run_gpumeter({"trace", json_path, "--json", "--price", "2.5"}, {}, std::nullopt, 280);
  auto from_pf = run_gpumeter({"trace", pftrace, "--json", "--price", "2.5"}, {}, std::nullopt, 280);
  ASSERT_EQ(from_json.exit_code, 0) << from_json.err;
  ASSERT_EQ(from_pf.exit_code, 0) << from_pf.err;
  const auto a = nlohmann::json::parse(from_json.out);
  const auto b = nlohmann::json::parse(from_pf.out);
  EXPECT_EQ(b["files"][0]["format"], "perfetto_protobuf");
  ASSERT_FALSE(a["devices"].empty());
  EXPECT_EQ(comparable(a), comparable(b));
  // gzip'd, under a name that says nothing: detection by content.
  auto gz = run_command({"/bin/sh", "-c", "gzip -c '" + pftrace + "' > '" + dir.path() + "/trace.pb.gz'"});
  ASSERT_EQ(gz.exit_code, 0) << gz.err;
  auto from_gz =
      run_gpumeter({"trace", dir.path() + "/trace.pb.gz", "--json", "--price", "2.5"}, {}, std::nullopt, 280);
  ASSERT_EQ(from_gz.exit_code, 0) << from_gz.err;
  EXPECT_EQ(comparable(a), comparable(nlohmann::json::parse(from_gz.out)));
}

TEST(TracePftraceCliIntegrationTest, SameFiguresAsTheJsonOfTheSameRun) {
  expect_same_as_json(source_dir() + "/tests/data/trace/amd_mi250.json.gz");
  expect_same_as_json(source_dir() + "/tests/data/trace/triton_example.json.gz");
  expect_same_as_json(sample_traces_dir() + "/nccl_parser_config/nccl_data.json.gz");
}

TEST(TracePftraceCliIntegrationTest, DamagedFileFailsWithOffsetAndPartialKeepsWhatWasRead) {
  TempDir dir;
  auto text = trace::read_trace_text(source_dir() + "/tests/data/trace/amd_mi250.json.gz");
  ASSERT_TRUE(text.ok());
  const std::string whole = kineto_json_to_pftrace(*text);
  const std::string cut = dir.write("cut.pftrace", whole.substr(0, whole.size() * 3 / 4));
  auto r = run_gpumeter({"trace", cut});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cut.pftrace: invalid Perfetto protobuf at byte"), std::string::npos) << r.err;
  auto p = run_gpumeter({"trace", cut, "--partial", "--json"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["files"][0]["partial"], true);
}

}  // namespace
}  // namespace gm::test
