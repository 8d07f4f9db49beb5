// Synchronisations on the critical path: an idle gap that begins while the host is blocked in a sync call
// is counted (idle_after_sync_ns) and becomes the sync_stall finding; a sync the GPU outlasts is not.
#include <gtest/gtest.h>

#include <string>

#include "findings/findings.h"
#include "trace/trace.h"

namespace gm {
namespace {

std::string kernel(int corr, long ts, long dur) {
  return R"({"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":)" + std::to_string(ts) +
         R"(,"dur":)" + std::to_string(dur) + R"(,"args":{"correlation":)" + std::to_string(corr) + "}}";
}
std::string runtime(const std::string& name, int corr, long ts, long dur) {
  return R"({"ph":"X","cat":"cuda_runtime","name":")" + name + R"(","pid":1,"tid":1,"ts":)" +
         std::to_string(ts) + R"(,"dur":)" + std::to_string(dur) + R"(,"args":{"correlation":)" +
         std::to_string(corr) + "}}";
}

TEST(TraceSync, IdleThatBeginsInsideASyncCallIsOnTheCriticalPath) {
  // Kernel 1 runs 0..100 µs; the host syncs from 50 to 130 µs, then launches kernel 2 at 140, which starts
  // at 150: the 50 µs gap from 100 began inside the sync. Kernel 3 is launched long before it starts
  // (queued behind kernel 2): no sync there, the gap 300..400 is not a sync stall.
  const std::string text = "{\"traceEvents\":[" + runtime("cudaLaunchKernel", 1, -10, 5) + "," +
                           kernel(1, 0, 100) + "," + runtime("cudaDeviceSynchronize", -1, 50, 80) + "," +
                           runtime("cudaLaunchKernel", 2, 140, 5) + "," + kernel(2, 150, 150) + "," +
                           runtime("cudaLaunchKernel", 3, 160, 5) + "," + kernel(3, 400, 100) + "]}";
  auto r = trace::analyze_buffer("sync.json", text);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->devices.size(), 1u);
  const auto& d = r->devices[0];
  EXPECT_EQ(d.window_ns, 500'000);
  EXPECT_EQ(d.idle_ns, 150'000);
  EXPECT_EQ(d.idle_after_sync_ns, 50'000);
  EXPECT_EQ(d.sync_gap_count, 1);
  const auto fs = findings::for_trace_device(d, 2'500'000);
  const findings::Finding* stall = nullptr;
  for (const auto& f : fs)
    if (f.kind == "sync_stall") stall = &f;
  ASSERT_NE(stall, nullptr);
  EXPECT_EQ(stall->at_stake_ns, 50'000);
  EXPECT_NE(stall->action.find(".item()"), std::string::npos);
}

TEST(TraceSync, ASyncTheGpuOutlastsCostsNothing) {
  // The host syncs 10..40 µs while the kernel runs 0..100: the GPU never ran dry during the sync.
  const std::string text = "{\"traceEvents\":[" + runtime("cudaLaunchKernel", 1, -10, 5) + "," +
                           kernel(1, 0, 100) + "," + runtime("cudaStreamSynchronize", -1, 10, 30) + "," +
                           runtime("cudaLaunchKernel", 2, 150, 5) + "," + kernel(2, 200, 100) + "]}";
  auto r = trace::analyze_buffer("nosync.json", text);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->devices[0].idle_after_sync_ns, 0);
  for (const auto& f : findings::for_trace_device(r->devices[0], 2'500'000)) EXPECT_NE(f.kind, "sync_stall");
}

}  // namespace
}  // namespace gm
