#include "trace/trace.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <string>

#include "cli/trace_demo.h"

namespace gm::trace {
namespace {

std::int64_t sum_attributed(const std::vector<Bucket>& bs) {
  std::int64_t s = 0;
  for (const auto& b : bs) s += b.attributed_ns;
  return s;
}

const Bucket* find(const std::vector<Bucket>& bs, const std::string& name) {
  for (const auto& b : bs)
    if (b.name == name) return &b;
  return nullptr;
}

void expect_invariants(const DeviceAnalysis& d) {
  EXPECT_EQ(d.compute_ns + d.communication_ns + d.memory_ns + d.idle_ns, d.window_ns);
  EXPECT_EQ(d.busy_ns + d.idle_ns, d.window_ns);
  EXPECT_EQ(sum_attributed(d.kernels), d.busy_ns);
  // Work launched before the profiler's window is in no operator, annotation or step row (issue 38).
  EXPECT_EQ(sum_attributed(d.operators) + d.before_window.attributed_ns, d.busy_ns);
  EXPECT_EQ(sum_attributed(d.annotations) + d.before_window.attributed_ns, d.busy_ns);
  EXPECT_EQ(sum_attributed(d.steps) + d.before_window.attributed_ns, d.busy_ns);
  EXPECT_EQ(d.idle_host_wait_ns + d.idle_other_ns, d.idle_ns);
  EXPECT_EQ(d.idle_dispatch_ns + d.idle_input_ns + d.idle_host_sync_ns, d.idle_host_wait_ns);
}

// The demo's bundled sample (cli/cmd_trace_demo.cpp): a step with a CPU op launching three kernels on two
// streams, an NCCL kernel, a memcpy, a cuda_sync wait and a Triton-style CPU op with a stream argument.
const char* const kTrace = cli::demo_trace_json();

TEST(TraceAnalysis, HandMadeTraceExactFigures) {
  auto r = analyze_buffer("hand.json", kTrace);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& f = *r;
  EXPECT_EQ(f.rank, 3);
  EXPECT_FALSE(f.skipped);
  EXPECT_EQ(f.skipped_events, 1);  // negative dur
  ASSERT_EQ(f.devices.size(), 1u);
  const auto& d = f.devices[0];
  EXPECT_EQ(d.device, "0");
  EXPECT_EQ(d.gpu_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d.window_start_ns, 1'010'000);
  EXPECT_EQ(d.window_ns, 50'000);  // 1010 .. 1060 (the zero-length kernel counts for the window)
  // Busy: [1010, 1030) then [1050, 1054).
  EXPECT_EQ(d.busy_ns, 24'000);
  EXPECT_EQ(d.compute_ns, 15'001);       // [1010, 1025.001)
  EXPECT_EQ(d.communication_ns, 4'999);  // [1025.001, 1030)
  EXPECT_EQ(d.memory_ns, 4'000);
  EXPECT_EQ(d.overlap_ns, 7'001);  // [1018, 1025.001)
  EXPECT_EQ(d.idle_ns, 26'000);
  EXPECT_EQ(d.kernel_ns, 10'000 + 10'001 + 12'000 + 4'000);
  EXPECT_EQ(d.activity_count, 5);
  EXPECT_EQ(d.zero_length_count, 1);
  // Gap [1030, 1050): the memcpy was launched at 1040, after the gap began: host wait.
  // Gap [1054, 1060) before the zero-length kernel: other.
  EXPECT_EQ(d.idle_gap_count, 1);
  EXPECT_EQ(d.idle_host_wait_ns, 20'000);
  EXPECT_EQ(d.idle_other_ns, 6'000);
  expect_invariants(d);

  // Fair share: [1010,1015) gemm_a alone 5000; [1015,1018) a+b 1500 each; [1018,1020) a,b,nccl 666/667;
  // [1020,1025.001) b+nccl; [1025.001,1030) nccl alone.
  const Bucket* a = find(d.kernels, "gemm_a");
  const Bucket* b = find(d.kernels, "gemm_b");
  const Bucket* n = find(d.kernels, "ncclDevKernel_AllReduce_Sum_f32");
  ASSERT_TRUE(a && b && n);
  EXPECT_EQ(n->klass, "communication");
  EXPECT_EQ(a->klass, "compute");
  EXPECT_EQ(a->attributed_ns + b->attributed_ns + n->attributed_ns, 20'000);
  EXPECT_NEAR(static_cast<double>(a->attributed_ns), 5000 + 1500 + 666.67, 1.0);
  EXPECT_NEAR(static_cast<double>(b->attributed_ns), 1500 + 666.67 + 2500.5, 1.0);
  EXPECT_NEAR(static_cast<double>(n->attributed_ns), 666.67 + 2500.5 + 4999, 1.0);
  EXPECT_EQ(find(d.kernels, "Memcpy DtoH (Device -> Pageable)")->klass, "memory");

  // Operators: gemm kernels launched inside aten::mm; the NCCL kernel inside nccl:all_reduce.
  EXPECT_EQ(find(d.operators, "aten::mm")->attributed_ns, a->attributed_ns + b->attributed_ns);
  EXPECT_EQ(find(d.operators, "nccl:all_reduce")->attributed_ns, n->attributed_ns);
  EXPECT_EQ(find(d.operators, "(no operator)")->attributed_ns, 4'000);
  EXPECT_EQ(find(d.operators, "triton_op"), nullptr);
  // Annotations: "forward" covers launches up to 1050.5; the memcpy launch at 1040 is inside it too.
  EXPECT_EQ(find(d.annotations, "forward")->attributed_ns, 24'000);
  // Steps: everything launched inside ProfilerStep#7.
  ASSERT_EQ(d.steps.size(), 1u);
  EXPECT_EQ(d.steps[0].name, "ProfilerStep#7");
  EXPECT_EQ(d.steps[0].step_ns, 100'000);
  EXPECT_EQ(d.steps[0].attributed_ns, 24'000);
  EXPECT_EQ(d.step_ns.count, 1);
  // Launch delay: 1010-1002, 1015-1003, 1018-1031 (negative: clock skew kept as is), 1050-1040.
  EXPECT_EQ(d.launch_delay_ns.count, 4);
  EXPECT_EQ(d.launch_delay_ns.max, 12'000);
  EXPECT_EQ(d.launch_delay_ns.min, -13'000);
}

TEST(TraceAnalysis, LegacyNamesStringTidsAndMetadataFirst) {
  const char* json = R"J({"traceEvents": [
    {"ph": "X", "cat": "Operator", "name": "aten::conv2d", "pid": 5, "tid": "thread 1", "ts": 100, "dur": 50},
    {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": "thread 1", "ts": 110, "dur": 5, "args": {"correlation": 9}},
    {"ph": "X", "cat": "Kernel", "name": "implicit_gemm", "pid": 1, "tid": "stream 7", "ts": 120, "dur": 30, "args": {"correlation": 9}},
    {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 1, "tid": "stream 7", "ts": 140, "dur": 20}
  ]})J";
  auto r = analyze_buffer("old.json", json);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->devices.size(), 1u);
  const auto& d = r->devices[0];
  EXPECT_EQ(d.device, "1");
  EXPECT_EQ(d.window_ns, 40'000);
  EXPECT_EQ(d.compute_ns, 30'000);
  EXPECT_EQ(d.memory_ns, 10'000);
  EXPECT_EQ(find(d.operators, "aten::conv2d")->attributed_ns,
            25'000);  // 20 alone + half of the 10 shared with the memset
  expect_invariants(d);
}

TEST(TraceAnalysis, PerFileDevicesAreSeparate) {
  const char* json = R"J({"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": 10},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 5, "dur": 10}
  ]})J";
  auto r = analyze_buffer("two.json", json);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->devices.size(), 2u);
  EXPECT_EQ(r->devices[0].window_ns, 10'000);
  EXPECT_EQ(r->devices[1].window_start_ns, 5'000);
}

TEST(TraceAnalysis, NoGpuActivityAndNotKineto) {
  auto cpu = analyze_buffer(
      "cpu.json",
      R"J({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]})J");
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->skipped);
  EXPECT_TRUE(cpu->devices.empty());
  auto et = analyze_buffer("et.json", R"J({"schema": "1.0.2-chakra", "nodes": [{"id": 1}]})J");
  ASSERT_TRUE(et.ok());
  ASSERT_TRUE(et->skipped);
  auto arr = analyze_buffer("arr.json", "[1, 2, 3]");
  ASSERT_TRUE(arr.ok());
  EXPECT_TRUE(arr->skipped);
}

TEST(TraceAnalysis, TruncatedFileNamesFileAndOffset) {
  std::string text = kTrace;
  const std::string cut = text.substr(0, text.find("\"gemm_b\"") + 3);
  auto r = analyze_buffer("cut.json", cut);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("cut.json"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("byte"), std::string::npos) << r.error().message;

  // A well-formed prefix of events followed by damage: --partial keeps what parsed, labelled.
  std::string damaged =
      text.substr(0, text.find("{\"ph\": \"X\", \"cat\": \"gpu_memcpy\"")) + "{\"ph\": \"X\", \"cat\" ]]";
  auto strict = analyze_buffer("damaged.json", damaged);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.error().message.find("damaged.json: invalid JSON at byte"), std::string::npos)
      << strict.error().message;
  Options opt;
  opt.partial = true;
  auto part = analyze_buffer("damaged.json", damaged, opt);
  ASSERT_TRUE(part.ok()) << part.error().message;
  EXPECT_TRUE(part->partial);
  EXPECT_FALSE(part->partial_error.empty());
  ASSERT_EQ(part->devices.size(), 1u);
  EXPECT_EQ(part->devices[0].activity_count, 3);
  expect_invariants(part->devices[0]);

  auto garbage = analyze_buffer("garbage.json", "{\"traceEvents\": [ {\"ph\": \"X\",, } ] }");
  EXPECT_FALSE(garbage.ok());
  auto trailing = analyze_buffer("trailing.json", "{\"traceEvents\": []} xx");
  EXPECT_FALSE(trailing.ok());
}

TEST(TraceTimestamps, ParsesDecimalMicrosecondsExactly) {
  EXPECT_EQ(parse_us_to_ns("1"), 1000);
  EXPECT_EQ(parse_us_to_ns("1.5"), 1500);
  EXPECT_EQ(parse_us_to_ns("4203669604595.407"), 4'203'669'604'595'407);
  // Epoch-scale microseconds with nanosecond digits: beyond a double's 53 bits.
  EXPECT_EQ(parse_us_to_ns("1712345678901234.567"), 1'712'345'678'901'234'567);
  EXPECT_EQ(parse_us_to_ns("10.0019"), 10'001);  // digits beyond ns truncated
  EXPECT_EQ(parse_us_to_ns("-2.5"), -2500);
  EXPECT_EQ(parse_us_to_ns("1.5e3"), 1'500'000);
  EXPECT_EQ(parse_us_to_ns(" 7 "), 7000);
  EXPECT_FALSE(parse_us_to_ns("\"12\""));
  EXPECT_FALSE(parse_us_to_ns("abc"));
  EXPECT_FALSE(parse_us_to_ns("1."));
  EXPECT_FALSE(parse_us_to_ns(""));
  EXPECT_FALSE(parse_us_to_ns("99999999999999999999"));
}

TEST(TraceNames, ShortensTemplatesAndParameters) {
  EXPECT_EQ(
      short_name("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                 "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
                 "at::detail::Array<char*, 3>)"),
      "at::native::vectorized_elementwise_kernel<…>");
  EXPECT_EQ(short_name("aten::mm"), "aten::mm");
  const std::string long_name(200, 'x');
  EXPECT_LE(short_name(long_name, 20).size(), 20u + 3);
}

}  // namespace
}  // namespace gm::trace

namespace gm::cli {
namespace {

TEST(TraceDemo, RendersBundledSample) {
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(trace_demo_section(2.0, "demo price", f), 0);
  std::fclose(f);
  std::string text(buf, len);
  std::free(buf);
  EXPECT_NE(text.find("source: demo price"), std::string::npos) << text;
  EXPECT_NE(text.find("ncclDevKernel_AllReduce_Sum_f32"), std::string::npos) << text;
  EXPECT_NE(text.find("ProfilerStep#7"), std::string::npos) << text;
  EXPECT_NE(text.find("10000 steps"), std::string::npos) << text;
}

}  // namespace
}  // namespace gm::cli

namespace gm::trace {
namespace {

// A trace of several MB goes through the run-by-run reader; a trailing non-object element makes the
// reader fall back to the whole-document pass. Both must give identical figures.
TEST(TraceReader, RunByRunAndWholeDocumentAgree) {
  std::string events;
  for (int i = 0; i < 20000; ++i) {
    const int t = i * 10;
    events += "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::op" + std::to_string(i % 7) +
              "\", \"pid\": 1, \"tid\": 2, \"ts\": " + std::to_string(t) +
              ", \"dur\": 5, \"args\": {\"Input Dims\": [[1, 2]], \"x\": {\"y\": 1}}},\n";
    events +=
        "{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 1, \"tid\": 2, "
        "\"ts\": " +
        std::to_string(t + 1) + ", \"dur\": 1, \"args\": {\"correlation\": " + std::to_string(i) + "}},\n";
    events += "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k" + std::to_string(i % 5) +
              "\", \"pid\": 0, \"tid\": " + std::to_string(7 + i % 2) + ", \"ts\": " + std::to_string(t + 3) +
              ".5, \"dur\": 12.25, \"args\": {\"correlation\": " + std::to_string(i) + "}},\n";
  }
  const std::string head = "{\"schemaVersion\": 1, \"traceEvents\": [\n";
  const std::string tail = "], \"distributedInfo\": {\"rank\": 5}}";
  const std::string well_formed = head + events.substr(0, events.size() - 2) + "\n" + tail;
  const std::string odd = head + events + "5\n" + tail;
  ASSERT_GT(well_formed.size(), 4u << 20);
  auto a = analyze_buffer("a.json", well_formed);
  auto b = analyze_buffer("b.json", odd);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(a->rank, 5);
  EXPECT_EQ(b->rank, 5);
  EXPECT_EQ(a->event_count, 60000);
  EXPECT_EQ(b->event_count, 60001);
  ASSERT_EQ(a->devices.size(), 1u);
  ASSERT_EQ(b->devices.size(), 1u);
  const auto& x = a->devices[0];
  const auto& y = b->devices[0];
  EXPECT_EQ(x.activity_count, 20000);
  EXPECT_EQ(x.window_ns, 199'990'000 + 12'250);
  EXPECT_EQ(x.window_ns, y.window_ns);
  EXPECT_EQ(x.busy_ns, y.busy_ns);
  EXPECT_EQ(x.compute_ns, y.compute_ns);
  EXPECT_EQ(x.idle_host_wait_ns, y.idle_host_wait_ns);
  ASSERT_EQ(x.operators.size(), y.operators.size());
  for (std::size_t i = 0; i < x.operators.size(); ++i) {
    EXPECT_EQ(x.operators[i].name, y.operators[i].name);
    EXPECT_EQ(x.operators[i].attributed_ns, y.operators[i].attributed_ns);
  }
  expect_invariants(x);
  // Kernels overlap their neighbours by 2.25 us: busy < Σ durations.
  EXPECT_EQ(x.kernel_ns, 20000 * 12'250);
  EXPECT_LT(x.busy_ns, x.kernel_ns);
}

}  // namespace
}  // namespace gm::trace
