// The job view of a folder of rank traces through the binary: synthetic 4-rank Kineto traces with known
// delays (support/job_traces.h) give those waits and their cost in JSON, text and HTML, and from Perfetto
// files of the same events; the real two-rank sample and ranks made from the real NCCL trace.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "meter/meter.h"
#include "support/job_traces.h"
#include "support/pftrace_writer.h"
#include "support/support.h"
#include "trace/trace.h"

namespace gm::test {
namespace {

using nlohmann::json;

TEST(TraceJobIntegrationTest, FolderOfRanksGivesTheJobWithStragglerCostInJsonAndText) {
  TempDir dir;
  const auto colls = four_collectives();
  for (int r = 0; r < 4; ++r) dir.write("run/rank" + std::to_string(r) + ".json", rank_trace(r, colls));
  auto res = run_gpumeter({"trace", dir.path() + "/run", "--json", "--price", "2.5"});
  ASSERT_EQ(res.exit_code, 0) << res.err;
  const auto doc = json::parse(res.out);
  ASSERT_TRUE(doc["job"].is_object()) << res.out.substr(0, 400);
  const auto& job = doc["job"];
  EXPECT_EQ(job["window_ns"], 14'000'000);
  EXPECT_EQ(job["straggler_wait_ns"], 2'100'000);
  EXPECT_DOUBLE_EQ(job["cost_usd"].get<double>(), meter::gpu_ns_cost_usd(2'500'000, 4 * 14'000'000.0));
  EXPECT_DOUBLE_EQ(job["straggler_cost_usd"].get<double>(), meter::gpu_ns_cost_usd(2'500'000, 2'100'000.0));
  ASSERT_EQ(job["ranks"].size(), 4u);
  EXPECT_EQ(job["ranks"][3]["rank"], 3);
  EXPECT_EQ(job["ranks"][3]["arrivals_last"], 2);
  EXPECT_EQ(job["ranks"][3]["wait_caused_ns"], 1'950'000);
  EXPECT_EQ(job["ranks"][0]["wait_suffered_ns"], 700'000);
  EXPECT_DOUBLE_EQ(job["ranks"][3]["wait_caused_cost_usd"].get<double>(),
                   meter::gpu_ns_cost_usd(2'500'000, 1'950'000.0));
  EXPECT_EQ(job["steps"][1]["last_rank"], 3);

  auto text = run_gpumeter({"trace", dir.path() + "/run", "--price", "2.5"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("straggler wait: 2.100 ms of GPU time in 4 collectives"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("most often last: rank 3: last in 2 of 4 collectives; the others waited 1.950 ms"),
            std::string::npos)
      << text.out;

  // The page: the job first, a straggler chart and the rank table.
  auto html =
      run_gpumeter({"trace", dir.path() + "/run", "--price", "2.5", "--html", dir.path() + "/job.html"});
  ASSERT_EQ(html.exit_code, 0) << html.err;
  const std::string page = read_file(dir.path() + "/job.html");
  EXPECT_NE(page.find("Wait each rank caused the others (straggler)"), std::string::npos);
  EXPECT_NE(page.find("Job " + dir.path() + "/run: ranks"), std::string::npos);
  EXPECT_NE(page.find("straggler wait 2.100 ms of GPU time"), std::string::npos);

  // The same events as Perfetto files: the same collectives, steps and job (Perfetto files carry no
  // distributedInfo, so the rank is taken from the JSON file of the same rank).
  std::vector<trace::FileAnalysis> from_pf;
  for (int r = 0; r < 4; ++r) {
    auto f = trace::analyze_buffer("pf/rank" + std::to_string(r) + ".pftrace",
                                   kineto_json_to_pftrace(json_with_quoted_times(rank_trace(r, colls))));
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->format, "perfetto_protobuf");
    f->rank = r;
    from_pf.push_back(std::move(*f));
  }
  std::vector<std::string> texts;
  for (int r = 0; r < 4; ++r) texts.push_back(rank_trace(r, colls));
  const auto from_json = analyse(texts);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(from_pf[r].collectives.size(), from_json[r].collectives.size());
    for (std::size_t k = 0; k < from_pf[r].collectives.size(); ++k) {
      const auto& a = from_pf[r].collectives[k];
      const auto& b = from_json[r].collectives[k];
      EXPECT_EQ(std::tie(a.group, a.name, a.nelems, a.group_size, a.start_ns, a.dur_ns, a.step),
                std::tie(b.group, b.name, b.nelems, b.group_size, b.start_ns, b.dur_ns, b.step));
    }
  }
  const auto pj = trace::analyze_jobs(from_pf), jj = trace::analyze_jobs(from_json);
  ASSERT_EQ(pj.size(), 1u);
  ASSERT_EQ(jj.size(), 1u);
  EXPECT_EQ(pj[0].window_ns, jj[0].window_ns);
  EXPECT_EQ(pj[0].wait_ns, jj[0].wait_ns);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(pj[0].ranks[r].wait_caused_ns, jj[0].ranks[r].wait_caused_ns);
    EXPECT_EQ(pj[0].ranks[r].wait_suffered_ns, jj[0].ranks[r].wait_suffered_ns);
  }
}

// The real multi-rank sample: ranks 0 and 1 of a 128-rank job whose NCCL kernels carry no collective
// metadata (sampled traces). The job's window and cost are there; the straggler figures are null and each
// rank is reported as without collective metadata, not guessed.
TEST(TraceJobIntegrationTest, RealTwoRankSampleWithoutCollectiveMetadataIsReportedAsSuch) {
  const std::string folder = sample_traces_dir() + "/trace_filter";
  ASSERT_TRUE(std::filesystem::exists(folder + "/sampled_rank-0.json.gz")) << folder;
  auto res = run_gpumeter({"trace", folder, "--json", "--price", "2"});
  ASSERT_EQ(res.exit_code, 0) << res.err;
  const auto doc = json::parse(res.out);
  ASSERT_TRUE(doc["job"].is_object()) << res.out.substr(0, 400);
  const auto& job = doc["job"];
  // The job window spans both ranks' devices.
  std::int64_t start = INT64_MAX, end = INT64_MIN;
  for (const auto& d : doc["devices"]) {
    start = std::min(start, d["window_start_ns"].get<std::int64_t>());
    end = std::max(end, d["window_start_ns"].get<std::int64_t>() + d["window_ns"].get<std::int64_t>());
  }
  ASSERT_EQ(doc["devices"].size(), 2u);
  EXPECT_EQ(job["window_ns"], end - start);
  EXPECT_EQ(job["gpu_ns"], 2 * (end - start));
  EXPECT_DOUBLE_EQ(
      job["cost_usd"].get<double>(),
      static_cast<double>(meter::gpu_ns_cost_pico_usd(util::usd_to_micros(2.0), 2 * (end - start))) / 1e12);
  EXPECT_EQ(job["collectives_matched"], 0);
  EXPECT_TRUE(job["straggler_wait_ns"].is_null());
  EXPECT_TRUE(job["straggler_cost_usd"].is_null());
  ASSERT_EQ(job["ranks"].size(), 2u);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    const auto& rank = job["ranks"][r];
    EXPECT_EQ(rank["rank"], r);
    EXPECT_FALSE(rank["collective_metadata"].get<bool>());
    EXPECT_TRUE(rank["arrivals_last"].is_null());
    EXPECT_TRUE(rank["wait_caused_ns"].is_null());
    EXPECT_TRUE(rank["wait_suffered_ns"].is_null());
    EXPECT_EQ(rank["busy_ns"], doc["devices"][r]["busy_ns"]);
    EXPECT_EQ(rank["idle_ns"].get<std::int64_t>(), (end - start) - rank["busy_ns"].get<std::int64_t>());
  }
  const std::vector<std::string> notes = job["notes"];
  EXPECT_EQ(notes,
            (std::vector<std::string>{
                "rank 0: no collective metadata (its 10 NCCL kernels name no process group): not matched",
                "rank 1: no collective metadata (its 10 NCCL kernels name no process group): not matched"}));

  auto text = run_gpumeter({"trace", folder, "--price", "2", "--by", "step"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("straggler wait: unknown, no rank's collective kernels carry collective metadata"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("no collective metadata"), std::string::npos) << text.out;
}

/// Runs bench/make_skewed_ranks.py on the source trace itself (--copies 1) and returns what it expects.
json make_skewed_ranks(const std::string& out, const std::vector<std::string>& extra) {
  std::vector<std::string> argv{"/usr/bin/python3",
                                source_dir() + "/bench/make_skewed_ranks.py",
                                "--source",
                                sample_traces_dir() + "/nccl_parser_config/nccl_data.json.gz",
                                "--copies",
                                "1",
                                "--out",
                                out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto r = run_command(argv, {}, std::nullopt, 120);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? json::parse(r.out) : json();
}

// Four ranks made from the real DDP trace (nccl_parser_config: 21 NCCL kernels with "Collective name",
// "Process Group Name", "In msg nelems", "Group size" and no "Seq"), rank 2 late by 250 µs on every other
// collective of its process group: exactly 3 × 250 µs per skewed instance, with Seq and without it.
TEST(TraceJobIntegrationTest, SkewedRanksMadeFromTheRealNcclTraceGiveExactlyTheInjectedWait) {
  TempDir dir;
  for (bool seq : {true, false}) {
    SCOPED_TRACE(seq ? "matched by Seq" : "matched by order");
    const std::string out = dir.path() + (seq ? "/seq" : "/order");
    std::vector<std::string> extra{"--ranks", "4", "--slow-rank", "2", "--skew-us", "250", "--every", "2"};
    if (!seq) extra.push_back("--no-seq");
    const json expected = make_skewed_ranks(out, extra);
    ASSERT_TRUE(expected.is_object());
    ASSERT_EQ(expected["collectives_per_rank"], 21);
    ASSERT_EQ(expected["skewed_collectives"], 11);  // instances 0, 2, ..., 20
    const std::int64_t wait_ns = 11 * 3 * 250'000;
    ASSERT_EQ(expected["expected_straggler_wait_ns"], wait_ns);

    auto res = run_gpumeter({"trace", out, "--json", "--price", "3"});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    const auto doc = json::parse(res.out);
    ASSERT_TRUE(doc["job"].is_object()) << res.out.substr(0, 400);
    const auto& job = doc["job"];
    EXPECT_EQ(job["collectives_matched"], 21);
    EXPECT_EQ(job["straggler_wait_ns"], wait_ns);
    EXPECT_DOUBLE_EQ(
        job["straggler_cost_usd"].get<double>(),
        static_cast<double>(meter::gpu_ns_cost_pico_usd(util::usd_to_micros(3.0), wait_ns)) / 1e12);
    ASSERT_EQ(job["ranks"].size(), 4u);
    for (int r = 0; r < 4; ++r) {
      SCOPED_TRACE(r);
      const auto& rank = job["ranks"][r];
      EXPECT_TRUE(rank["collective_metadata"].get<bool>());
      EXPECT_EQ(rank["collectives"], 21);
      // Instances where every rank started at the same nanosecond have no last rank.
      EXPECT_EQ(rank["arrivals_last"], r == 2 ? 11 : 0);
      EXPECT_EQ(rank["wait_caused_ns"], r == 2 ? wait_ns : 0);
      EXPECT_EQ(rank["wait_suffered_ns"], r == 2 ? 0 : 11 * 250'000);
    }
    std::int64_t by_steps = 0;
    for (const auto& s : job["steps"]) {
      by_steps += s["wait_ns"].get<std::int64_t>();
      for (const auto& sr : s["ranks"])
        EXPECT_DOUBLE_EQ(
            sr["cost_usd"].get<double>(),
            static_cast<double>(meter::gpu_ns_cost_pico_usd(util::usd_to_micros(3.0), sr["wait_ns"])) / 1e12);
      if (s["wait_ns"].get<std::int64_t>() > 0) {
        EXPECT_EQ(s["last_rank"], 2) << s.dump();
      }
    }
    EXPECT_EQ(by_steps, wait_ns);
    EXPECT_TRUE(job["notes"].empty()) << job["notes"].dump();
  }
}

}  // namespace
}  // namespace gm::test
