// The Perfetto reader on hand-encoded files: PyTorch-style slices without categories, a track parent cycle.
// (Through the binary, against the JSON of the same run: tests/integration/trace_pftrace_cli_test.cpp.)
#include "trace/trace.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace gm::trace {
namespace {

// PyTorch's own encoder writes no categories: GPU work sits on tracks named "stream N", runtime calls
// carry a "cbid" annotation. A hand-encoded minimal file in that style.
void put_varint(std::string& o, std::uint64_t v) {
  while (v >= 0x80) {
    o.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  o.push_back(static_cast<char>(v));
}
void put_uint(std::string& o, std::uint32_t f, std::uint64_t v) {
  put_varint(o, f << 3);
  put_varint(o, v);
}
void put_bytes(std::string& o, std::uint32_t f, const std::string& b) {
  put_varint(o, (f << 3) | 2);
  put_varint(o, b.size());
  o += b;
}

TEST(TracePftrace, CategoryLessSlicesAreInferredFromTracksAndAnnotations) {
  auto uint_field = put_uint;
  auto bytes_field = put_bytes;
  std::string trace;
  auto packet = [&](const std::string& p) { bytes_field(trace, 1, p); };
  auto thread_track = [&](std::uint64_t uuid, int pid, int tid, const std::string& name) {
    std::string thr, td, p;
    uint_field(thr, 1, static_cast<std::uint64_t>(pid));
    uint_field(thr, 2, static_cast<std::uint64_t>(tid));
    bytes_field(thr, 5, name);
    uint_field(td, 1, uuid);
    bytes_field(td, 4, thr);
    bytes_field(p, 60, td);
    packet(p);
  };
  auto slice = [&](std::uint64_t uuid, const std::string& name, std::uint64_t ts, std::uint64_t end,
                   std::optional<std::uint64_t> corr, bool cbid) {
    std::string te, p;
    uint_field(te, 9, 1);
    uint_field(te, 11, uuid);
    bytes_field(te, 23, name);
    if (corr) {
      std::string a;
      bytes_field(a, 10, "correlation");
      uint_field(a, 4, *corr);
      bytes_field(te, 4, a);
    }
    if (cbid) {
      std::string a;
      bytes_field(a, 10, "cbid");
      uint_field(a, 4, 211);
      bytes_field(te, 4, a);
    }
    uint_field(p, 8, ts);
    bytes_field(p, 11, te);
    packet(p);
    std::string te2, p2;
    uint_field(te2, 9, 2);
    uint_field(te2, 11, uuid);
    uint_field(p2, 8, end);
    bytes_field(p2, 11, te2);
    packet(p2);
  };
  thread_track(1, 100, 100, "python3");
  thread_track(2, 0, 7, "stream 7");
  slice(1, "aten::mm", 1000, 9000, std::nullopt, false);
  slice(1, "cudaLaunchKernel", 2000, 3000, 5, true);
  slice(2, "gemm_kernel", 4000, 8000, 5, false);
  slice(2, "Memcpy HtoD (Pageable -> Device)", 8000, 10000, std::nullopt, false);
  auto r = analyze_buffer("pytorch-style.pftrace", trace);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->format, "perfetto_protobuf");
  ASSERT_EQ(r->devices.size(), 1u);
  const auto& d = r->devices[0];
  EXPECT_EQ(d.device, "0");
  EXPECT_EQ(d.window_ns, 6000);
  EXPECT_EQ(d.compute_ns, 4000);
  EXPECT_EQ(d.memory_ns, 2000);
  ASSERT_FALSE(d.operators.empty());
  EXPECT_EQ(d.operators[0].name, "aten::mm");  // the kernel's launch is inside aten::mm
  EXPECT_EQ(d.operators[0].attributed_ns, 4000);
  EXPECT_EQ(d.launch_delay_ns.count, 1);
}

// Found by fuzz_pftrace_reader: track descriptors whose parent_uuid chain cycles (1 -> 2 -> 1, neither
// with a pid) made the reader walk the chain forever.
TEST(TracePftrace, TrackParentCycleEndsAndTheSliceIsKept) {
  std::string trace;
  for (auto [uuid, parent] : {std::pair<std::uint64_t, std::uint64_t>{1, 2}, {2, 1}}) {
    std::string td, p;
    put_uint(td, 1, uuid);
    put_uint(td, 5, parent);
    put_bytes(p, 60, td);
    put_bytes(trace, 1, p);
  }
  for (auto [type, ts] : {std::pair<std::uint64_t, std::uint64_t>{1, 1000}, {2, 5000}}) {
    std::string te, p;
    put_uint(te, 9, type);
    put_uint(te, 11, 1);
    if (type == 1) put_bytes(te, 23, "aten::mm");
    put_uint(p, 8, ts);
    put_bytes(p, 11, te);
    put_bytes(trace, 1, p);
  }
  auto r = analyze_buffer("cycle.pftrace", trace);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->format, "perfetto_protobuf");
  EXPECT_EQ(r->event_count, 1);  // one slice (begin + end)
}

}  // namespace
}  // namespace gm::trace
