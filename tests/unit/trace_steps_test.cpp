// Per-step split (what the GPU did during each ProfilerStep's wall time) and the one-step stream timeline
// behind the trace page's stacked step bars and stream lanes (issue 14).
#include <gtest/gtest.h>

#include <string>

#include "support/support.h"
#include "trace/trace.h"

namespace gm {
namespace {

std::string gpu(const std::string& cat, const std::string& name, int stream, long ts, long dur) {
  return R"({"ph":"X","cat":")" + cat + R"(","name":")" + name + R"(","pid":0,"tid":)" +
         std::to_string(stream) + R"(,"ts":)" + std::to_string(ts) + R"(,"dur":)" + std::to_string(dur) +
         R"(,"args":{"stream":)" + std::to_string(stream) + "}}";
}
std::string step(int n, long ts, long dur) {
  return R"({"ph":"X","cat":"user_annotation","name":"ProfilerStep#)" + std::to_string(n) +
         R"(","pid":1,"tid":1,"ts":)" + std::to_string(ts) + R"(,"dur":)" + std::to_string(dur) + "}";
}

// Steps 1..3 of 1000 µs each. Step 1: gemm on stream 7 (0..600) with an all-reduce on stream 13
// (400..900), of which 300 µs are exposed; a copy (950..1100) straddles into step 2. Step 2: the copy's
// last 100 µs, then gemm 1200..1500. Step 3 (2000..3200, longer): gemm 2000..2200 and 2500..2600.
std::string three_steps() {
  return "{\"traceEvents\":[" + step(1, 0, 1000) + "," + step(2, 1000, 1000) + "," + step(3, 2000, 1200) +
         "," + gpu("kernel", "gemm", 7, 0, 600) + "," +
         gpu("kernel", "ncclDevKernel_AllReduce_Sum_f32", 13, 400, 500) + "," +
         gpu("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 7, 950, 150) + "," +
         gpu("kernel", "gemm", 7, 1200, 300) + "," + gpu("kernel", "gemm", 7, 2000, 200) + "," +
         gpu("kernel", "relu", 13, 2500, 100) + "]}";
}

TEST(TraceSteps, EachStepSplitsItsWallTimeByClassWithTheWindowsPrecedence) {
  auto r = trace::analyze_buffer("steps.json", three_steps());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->devices.size(), 1u);
  const auto& d = r->devices[0];
  ASSERT_EQ(d.step_split.size(), 3u);
  const auto& s1 = d.step_split[0];
  EXPECT_EQ(s1.name, "ProfilerStep#1");
  EXPECT_EQ(s1.start_ns, 0);
  EXPECT_EQ(s1.step_ns, 1'000'000);
  EXPECT_EQ(s1.compute_ns, 600'000);
  EXPECT_EQ(s1.communication_ns, 300'000);  // 600..900: the all-reduce not hidden under the gemm
  EXPECT_EQ(s1.memory_ns, 50'000);          // 950..1000 of the copy
  EXPECT_EQ(s1.idle_ns, 50'000);            // 900..950
  const auto& s2 = d.step_split[1];
  EXPECT_EQ(s2.memory_ns, 100'000);  // 1000..1100
  EXPECT_EQ(s2.compute_ns, 300'000);
  EXPECT_EQ(s2.communication_ns, 0);
  EXPECT_EQ(s2.idle_ns, 600'000);
  const auto& s3 = d.step_split[2];
  EXPECT_EQ(s3.step_ns, 1'200'000);
  EXPECT_EQ(s3.compute_ns, 300'000);
  EXPECT_EQ(s3.idle_ns, 900'000);
  // The steps' busy time adds up to the window's (every activity lies inside a step here).
  std::int64_t busy = 0;
  for (const auto& s : d.step_split) busy += s.compute_ns + s.communication_ns + s.memory_ns;
  EXPECT_EQ(busy, d.busy_ns);
}

TEST(TraceSteps, TheTimelineShowsTheMedianStepWithoutTheWarmUpStepOneLanePerStream) {
  auto r = trace::analyze_buffer("steps.json", three_steps());
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& d = r->devices[0];
  ASSERT_TRUE(d.timeline.has_value());
  // Steps 2 (1000 µs) and 3 (1200 µs) after leaving out step 1: the later of the two middles is step 3.
  const auto& tl = *d.timeline;
  EXPECT_EQ(tl.step, "ProfilerStep#3");
  EXPECT_EQ(tl.start_ns, 2'000'000);
  EXPECT_EQ(tl.step_ns, 1'200'000);
  ASSERT_EQ(tl.spans.size(), 2u);
  EXPECT_EQ(tl.streams[tl.spans[0].stream], "7");
  EXPECT_EQ(tl.spans[0].start_ns, 0);
  EXPECT_EQ(tl.spans[0].dur_ns, 200'000);
  EXPECT_EQ(tl.spans[0].klass, "compute");
  EXPECT_EQ(tl.names[tl.spans[0].name], "gemm");
  EXPECT_EQ(tl.streams[tl.spans[1].stream], "13");
  EXPECT_EQ(tl.spans[1].start_ns, 500'000);
  EXPECT_EQ(tl.names[tl.spans[1].name], "relu");
  EXPECT_EQ(tl.spans_left_out, 0);
}

TEST(TraceSteps, SameSplitAndTimelineThroughTheWindowedReader) {
  // Tiny windows: events straddle window boundaries; the streams are re-interned when windows merge.
  const std::string text = three_steps();
  auto whole = trace::analyze_buffer("steps.json", text);
  ASSERT_TRUE(whole.ok());
  test::TempDir dir;
  const std::string path = dir.write("steps.json", text);
  for (unsigned threads : {1u, 2u}) {
    trace::Options o;
    o.window_bytes = 97;
    o.threads = threads;
    auto windowed = trace::analyze_file(path, o);
    ASSERT_TRUE(windowed.ok()) << windowed.error().message;
    const auto& a = whole->devices[0];
    const auto& b = windowed->devices[0];
    ASSERT_EQ(a.step_split.size(), b.step_split.size());
    for (std::size_t i = 0; i < a.step_split.size(); ++i) {
      EXPECT_EQ(a.step_split[i].compute_ns, b.step_split[i].compute_ns);
      EXPECT_EQ(a.step_split[i].communication_ns, b.step_split[i].communication_ns);
      EXPECT_EQ(a.step_split[i].memory_ns, b.step_split[i].memory_ns);
      EXPECT_EQ(a.step_split[i].idle_ns, b.step_split[i].idle_ns);
    }
    ASSERT_TRUE(b.timeline.has_value());
    ASSERT_EQ(a.timeline->spans.size(), b.timeline->spans.size());
    for (std::size_t i = 0; i < a.timeline->spans.size(); ++i) {
      EXPECT_EQ(a.timeline->streams[a.timeline->spans[i].stream],
                b.timeline->streams[b.timeline->spans[i].stream]);
      EXPECT_EQ(a.timeline->spans[i].start_ns, b.timeline->spans[i].start_ns);
    }
  }
}

TEST(TraceSteps, WithoutProfilerStepsThereIsNoSplitAndNoTimeline) {
  const std::string text = "{\"traceEvents\":[" + gpu("kernel", "gemm", 7, 0, 600) + "]}";
  auto r = trace::analyze_buffer("nosteps.json", text);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->devices[0].step_split.empty());
  EXPECT_FALSE(r->devices[0].timeline.has_value());
}

}  // namespace
}  // namespace gm
