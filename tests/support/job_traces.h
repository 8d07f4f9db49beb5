#pragma once
// Synthetic Kineto traces of the ranks of one job, with collectives whose per-rank starts the test chooses
// (the arg names of real NCCL kernels: "Collective name", "Process Group Name", "In msg nelems",
// "Group size", "Seq"): the job view's waits are known exactly.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trace/trace.h"

namespace gm::test {

/// One collective instance: its start on every rank (µs) and the common end.
struct Coll {
  std::string name = "allreduce";
  std::map<int, std::int64_t> start_us;  // rank -> start
  std::int64_t end_us = 0;
  int step = 1;
};

/// A Kineto trace of rank `rank`: two ProfilerSteps, a compute kernel, and each collective's launch and
/// NCCL kernel (metadata unless `metadata` is false; "Seq" when `seq_base` >= 0).
inline std::string rank_trace(int rank, const std::vector<Coll>& colls, bool metadata = true,
                              int seq_base = -1) {
  using nlohmann::json;
  json ev = json::array();
  const int pid = 100 + rank;
  ev.push_back({{"ph", "X"},
                {"cat", "cpu_op"},
                {"name", "ProfilerStep#1"},
                {"pid", pid},
                {"tid", 1},
                {"ts", 1000},
                {"dur", 10000}});
  ev.push_back({{"ph", "X"},
                {"cat", "cpu_op"},
                {"name", "ProfilerStep#2"},
                {"pid", pid},
                {"tid", 1},
                {"ts", 11000},
                {"dur", 10000}});
  ev.push_back({{"ph", "X"},
                {"cat", "kernel"},
                {"name", "sm90_gemm"},
                {"pid", 0},
                {"tid", 7},
                {"ts", 1500},
                {"dur", 300},
                {"args", {{"correlation", 1}}}});
  ev.push_back({{"ph", "X"},
                {"cat", "cuda_runtime"},
                {"name", "cudaLaunchKernel"},
                {"pid", pid},
                {"tid", 1},
                {"ts", 1400},
                {"dur", 5},
                {"args", {{"correlation", 1}}}});
  for (std::size_t k = 0; k < colls.size(); ++k) {
    const auto& c = colls[k];
    auto it = c.start_us.find(rank);
    if (it == c.start_us.end()) continue;
    const int corr = 1000 + static_cast<int>(k);
    const std::int64_t launch =
        c.step == 1 ? 2000 + 100 * static_cast<std::int64_t>(k) : 12000 + 100 * static_cast<std::int64_t>(k);
    ev.push_back({{"ph", "X"},
                  {"cat", "cuda_runtime"},
                  {"name", "cudaLaunchKernel"},
                  {"pid", pid},
                  {"tid", 1},
                  {"ts", launch},
                  {"dur", 5},
                  {"args", {{"correlation", corr}}}});
    json args = {{"correlation", corr}};
    if (metadata) {
      args["Collective name"] = c.name;
      args["Process Group Name"] = "0";
      args["Process Group Description"] = "default_pg";
      args["In msg nelems"] = 1024;
      args["Group size"] = 4;
      if (seq_base >= 0) args["Seq"] = seq_base + static_cast<int>(k);
    }
    ev.push_back({{"ph", "X"},
                  {"cat", "kernel"},
                  {"name", "ncclKernel_AllReduce_RING_LL_Sum_float"},
                  {"pid", 0},
                  {"tid", 20},
                  {"ts", it->second},
                  {"dur", c.end_us - it->second},
                  {"args", args}});
  }
  return json{{"distributedInfo", {{"rank", rank}, {"world_size", 4}, {"backend", "nccl"}}},
              {"traceEvents", ev}}
      .dump();
}

/// The four collectives of the tests: rank 1 late by 50 µs on #0, rank 3 late by 250 µs on #1 and 400 µs
/// on #3, everyone together on #2.
inline std::vector<Coll> four_collectives() {
  std::vector<Coll> c(4);
  const std::int64_t base[4] = {3000, 5000, 13000, 15000};
  const std::int64_t late[4] = {50, 250, 0, 400};
  const int late_rank[4] = {1, 3, 3, 3};
  for (int k = 0; k < 4; ++k) {
    for (int r = 0; r < 4; ++r) c[k].start_us[r] = base[k] + (r == late_rank[k] ? late[k] : 0);
    c[k].end_us = base[k] + late[k] + 100;
    c[k].step = k < 2 ? 1 : 2;
  }
  return c;
}

/// The analyses of the rank traces `texts` (rank r named job/rankR.json).
inline std::vector<trace::FileAnalysis> analyse(const std::vector<std::string>& texts) {
  std::vector<trace::FileAnalysis> files;
  for (std::size_t r = 0; r < texts.size(); ++r) {
    auto f = trace::analyze_buffer("job/rank" + std::to_string(r) + ".json", texts[r]);
    EXPECT_TRUE(f.ok()) << f.error().message;
    if (f) files.push_back(std::move(*f));
  }
  return files;
}

}  // namespace gm::test
