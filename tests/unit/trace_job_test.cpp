// The job view of the ranks of one job: synthetic 4-rank Kineto traces with known delays give exactly those
// waits per rank and step; sequence numbers match ranks whose profiles start at different collectives; ranks
// without metadata and collectives that do not line up are reported, not guessed. (Through the binary:
// tests/integration/trace_job_test.cpp.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meter/meter.h"
#include "support/job_traces.h"
#include "trace/trace.h"

namespace gm::test {
namespace {

TEST(TraceJob, KnownDelaysGiveExactlyThoseWaitsPerRankAndStep) {
  const auto colls = four_collectives();
  std::vector<std::string> texts;
  for (int r = 0; r < 4; ++r) texts.push_back(rank_trace(r, colls));
  const auto files = analyse(texts);
  ASSERT_EQ(files.size(), 4u);
  ASSERT_EQ(files[0].collectives.size(), 4u);
  EXPECT_EQ(files[0].collectives[0].group, "0");
  EXPECT_EQ(files[0].collectives[0].name, "allreduce");
  EXPECT_EQ(files[0].collectives[0].step, "ProfilerStep#1");
  EXPECT_EQ(files[0].collectives[3].step, "ProfilerStep#2");
  const auto jobs = trace::analyze_jobs(files);
  ASSERT_EQ(jobs.size(), 1u);
  const auto& job = jobs[0];
  EXPECT_EQ(job.group, "job");
  EXPECT_EQ(job.instances, 4);
  EXPECT_EQ(job.gpus, 4);
  // Window: the first activity (the gemm at 1500 µs) to the last collective's end (15000 + 400 + 100 µs).
  EXPECT_EQ(job.window_ns, (15500 - 1500) * 1000);
  EXPECT_EQ(job.gpu_ns, 4 * job.window_ns);
  // 3 × 50 + 3 × 250 + 0 + 3 × 400 µs of GPU time spent waiting.
  EXPECT_EQ(job.wait_ns, 2'100'000);
  ASSERT_EQ(job.ranks.size(), 4u);
  const std::int64_t suffered[4] = {700'000, 650'000, 700'000, 50'000};
  const std::int64_t caused[4] = {0, 150'000, 0, 1'950'000};
  const std::int64_t last[4] = {0, 1, 0, 2};
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(job.ranks[r].rank, r);
    EXPECT_TRUE(job.ranks[r].collective_metadata);
    EXPECT_EQ(job.ranks[r].collectives, 4);
    EXPECT_EQ(job.ranks[r].wait_suffered_ns, suffered[r]);
    EXPECT_EQ(job.ranks[r].wait_caused_ns, caused[r]);
    EXPECT_EQ(job.ranks[r].arrivals_last, last[r]);
  }
  ASSERT_EQ(job.steps.size(), 2u);
  EXPECT_EQ(job.steps[0].step, "ProfilerStep#1");
  EXPECT_EQ(job.steps[0].wait_ns, 900'000);
  EXPECT_EQ(job.steps[0].last_rank, 1);  // ranks 1 and 3 are last once each: the lower
  EXPECT_EQ(job.steps[0].wait_by_rank_ns, (std::vector<std::int64_t>{300'000, 250'000, 300'000, 50'000}));
  EXPECT_EQ(job.steps[1].step, "ProfilerStep#2");
  EXPECT_EQ(job.steps[1].wait_ns, 1'200'000);
  EXPECT_EQ(job.steps[1].last_rank, 3);
  EXPECT_TRUE(job.notes.empty()) << job.notes[0];
}

TEST(TraceJob, SequenceNumbersMatchRanksWhoseProfilesStartAtDifferentCollectives) {
  // Rank 2's profile begins one collective earlier (an extra, unmatched first call, Seq 9): with "Seq" the
  // instances still line up; the same files without Seq are reported as not matched.
  auto colls = four_collectives();
  Coll early;
  early.start_us = {{2, 2500}};
  early.end_us = 2600;
  std::vector<Coll> with_extra{early};
  with_extra.insert(with_extra.end(), colls.begin(), colls.end());
  std::vector<std::string> texts;
  for (int r = 0; r < 4; ++r)
    texts.push_back(r == 2 ? rank_trace(r, with_extra, true, 9) : rank_trace(r, colls, true, 10));
  auto jobs = trace::analyze_jobs(analyse(texts));
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].instances, 4);  // Seq 9 is on one rank only
  EXPECT_EQ(jobs[0].wait_ns, 2'100'000);

  texts.clear();
  for (int r = 0; r < 4; ++r) texts.push_back(r == 2 ? rank_trace(r, with_extra) : rank_trace(r, colls));
  jobs = trace::analyze_jobs(analyse(texts));
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].instances, 0);
  ASSERT_EQ(jobs[0].notes.size(), 1u);
  EXPECT_NE(jobs[0].notes[0].find("do not cover the same collectives"), std::string::npos)
      << jobs[0].notes[0];
}

TEST(TraceJob, RanksWithoutMetadataAndMisalignedCollectivesAreReportedNotGuessed) {
  const auto colls = four_collectives();
  std::vector<std::string> texts;
  for (int r = 0; r < 4; ++r) texts.push_back(rank_trace(r, colls, r != 2));
  auto jobs = trace::analyze_jobs(analyse(texts));
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_FALSE(jobs[0].ranks[2].collective_metadata);
  EXPECT_EQ(jobs[0].ranks[2].collectives, 0);
  bool noted = false;
  for (const auto& n : jobs[0].notes)
    noted = noted ||
            n == "rank 2: no collective metadata (its 4 NCCL kernels name no process group): not matched";
  EXPECT_TRUE(noted);
  // The three others are still matched among themselves.
  EXPECT_EQ(jobs[0].instances, 4);
  EXPECT_EQ(jobs[0].wait_ns, 2 * 50'000 + 2 * 250'000 + 2 * 400'000);

  // Rank 1's second collective is a broadcast where the others have an allreduce: the order is not the same
  // collective, nothing is matched.
  auto other = colls;
  other[1].name = "broadcast";
  texts.clear();
  for (int r = 0; r < 4; ++r) texts.push_back(rank_trace(r, r == 1 ? other : colls));
  jobs = trace::analyze_jobs(analyse(texts));
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].instances, 0);
  ASSERT_FALSE(jobs[0].notes.empty());
  EXPECT_NE(jobs[0].notes[0].find("do not line up"), std::string::npos) << jobs[0].notes[0];
}

}  // namespace
}  // namespace gm::test
