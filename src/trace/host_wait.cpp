// Host-wait idle by what the host was doing during each gap (docs/trace.md "Idle gaps"): waiting for input
// (a DataLoader iteration, or no operator running before a step's first or after its last operator) or
// dispatching operators (inside one on the launching thread, or in the Python between a step's operators).
#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "trace/internal.h"

namespace gm::trace::detail {
namespace {

struct Interval {
  std::int64_t start_ns;
  std::int64_t end_ns;
};

/// Sorted, merged intervals from arbitrary ones.
std::vector<Interval> merged(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start_ns < b.start_ns; });
  std::vector<Interval> out;
  for (const auto& iv : v) {
    if (iv.end_ns <= iv.start_ns) continue;
    if (!out.empty() && iv.start_ns <= out.back().end_ns)
      out.back().end_ns = std::max(out.back().end_ns, iv.end_ns);
    else
      out.push_back(iv);
  }
  return out;
}

/// Splits `pieces` into the parts inside `cover` (sorted, merged) and the parts outside it.
void split_by(const std::vector<Interval>& pieces, const std::vector<Interval>& cover,
              std::vector<Interval>& in, std::vector<Interval>& out) {
  in.clear();
  out.clear();
  for (const auto& p : pieces) {
    auto it = std::upper_bound(cover.begin(), cover.end(), p.start_ns,
                               [](std::int64_t v, const Interval& c) { return v < c.end_ns; });
    std::int64_t at = p.start_ns;
    for (; it != cover.end() && it->start_ns < p.end_ns; ++it) {
      const std::int64_t a = std::max(at, it->start_ns), b = std::min(p.end_ns, it->end_ns);
      if (a > at) out.push_back({at, a});
      if (b > a) in.push_back({a, b});
      at = std::max(at, b);
    }
    if (at < p.end_ns) out.push_back({at, p.end_ns});
  }
}

std::int64_t total(const std::vector<Interval>& v) {
  std::int64_t t = 0;
  for (const auto& iv : v) t += iv.end_ns - iv.start_ns;
  return t;
}

/// What the host was doing, over time: the operators of each launching thread, the DataLoader iterations
/// and, per profiler step, the stretch from its first to its last operator.
struct HostTimeline {
  std::unordered_map<std::uint32_t, std::vector<Interval>> ops_by_thread;  // merged
  std::vector<Interval> dataloader;                                        // merged, any thread
  std::vector<Span> dataloader_spans;                                      // for their names
  std::vector<Interval> step_ops;                                          // merged

  explicit HostTimeline(const RawTrace& raw) {
    std::unordered_set<std::uint32_t> launching;
    for (const auto& l : raw.launches) launching.insert(l.thread);
    std::vector<Span> storage;
    std::vector<Interval> all_ops;  // launching threads
    {
      std::unordered_map<std::uint32_t, std::vector<Interval>> by_thread;
      for (const Span& op : spans_of_kind(raw, SpanKind::op, storage)) {
        if (!launching.contains(op.thread) || op.end_ns <= op.start_ns) continue;
        by_thread[op.thread].push_back({op.start_ns, op.end_ns});
        all_ops.push_back({op.start_ns, op.end_ns});
      }
      for (auto& [thread, v] : by_thread) ops_by_thread.emplace(thread, merged(std::move(v)));
    }
    // DataLoader iterations: user annotations in current traces, operators in the 2021 format.
    std::vector<Interval> dl;
    for (const SpanKind kind : {SpanKind::annotation, SpanKind::op})
      for (const Span& a : spans_of_kind(raw, kind, storage)) {
        if (!raw.names.str(a.name).starts_with("enumerate(DataLoader)")) continue;
        dl.push_back({a.start_ns, a.end_ns});
        dataloader_spans.push_back(a);
      }
    dataloader = merged(std::move(dl));
    // Each step's first operator start to its last operator end (operators starting inside the step, clipped
    // to it); without ProfilerSteps the whole trace is one step.
    std::sort(all_ops.begin(), all_ops.end(),
              [](const Interval& a, const Interval& b) { return a.start_ns < b.start_ns; });
    std::vector<Interval> steps;
    for (const Span& s : spans_of_kind(raw, SpanKind::step, storage)) steps.push_back({s.start_ns, s.end_ns});
    if (steps.empty() && !all_ops.empty()) steps.push_back({INT64_MIN, INT64_MAX});
    std::vector<Interval> ranges;
    for (const auto& st : steps) {
      auto it = std::lower_bound(all_ops.begin(), all_ops.end(), st.start_ns,
                                 [](const Interval& o, std::int64_t v) { return o.start_ns < v; });
      std::int64_t first = INT64_MAX, last = INT64_MIN;
      for (; it != all_ops.end() && it->start_ns < st.end_ns; ++it) {
        first = std::min(first, it->start_ns);
        last = std::max(last, std::min(it->end_ns, st.end_ns));
      }
      if (first < last) ranges.push_back({first, last});
    }
    step_ops = merged(std::move(ranges));
  }
};

}  // namespace

void classify_host_wait(const RawTrace& raw, const std::vector<HostWaitGap>& gaps, DeviceAnalysis& d) {
  if (gaps.empty()) return;
  const HostTimeline host(raw);
  static const std::vector<Interval> kNone;
  std::vector<Interval> piece(1), in_dl, rest, in_op, rest2, in_step, edge;
  std::vector<Interval> dispatch_all, dataloader_all;
  const HostWaitGap* longest = nullptr;
  for (const auto& g : gaps) {
    piece[0] = {g.start_ns, g.end_ns};
    split_by(piece, host.dataloader, in_dl, rest);
    auto ops = host.ops_by_thread.find(g.thread);
    split_by(rest, ops != host.ops_by_thread.end() ? ops->second : kNone, in_op, rest2);
    split_by(rest2, host.step_ops, in_step, edge);
    const std::int64_t dl = total(in_dl), op = total(in_op), py = total(in_step), outside = total(edge);
    d.idle_input_dataloader_ns += dl;
    d.idle_input_ns += dl + outside;
    d.idle_dispatch_in_ops_ns += op;
    d.idle_dispatch_ns += op + py;
    if (op + py > d.longest_dispatch_gap_ns) {
      d.longest_dispatch_gap_ns = op + py;
      longest = &g;
    }
    dispatch_all.insert(dispatch_all.end(), in_op.begin(), in_op.end());
    dispatch_all.insert(dispatch_all.end(), in_step.begin(), in_step.end());
    dataloader_all.insert(dataloader_all.end(), in_dl.begin(), in_dl.end());
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> dispatch_gaps;
  for (const auto& iv : merged(std::move(dispatch_all))) dispatch_gaps.emplace_back(iv.start_ns, iv.end_ns);
  d.dispatch_cpu_ops = cpu_ops_during(raw, dispatch_gaps);
  if (longest != nullptr)
    if (const auto in_gap = cpu_ops_during(raw, {{longest->start_ns, longest->end_ns}}); !in_gap.empty())
      d.longest_dispatch_gap_op = in_gap.front().name;
  // DataLoader iterations by name: their overlap with the input idle spent inside them.
  const auto dl_idle = merged(std::move(dataloader_all));
  std::map<std::uint32_t, IdleCpuOp> frames;
  std::vector<Interval> one(1), inside, outside;
  for (const Span& s : host.dataloader_spans) {
    one[0] = {s.start_ns, s.end_ns};
    split_by(one, dl_idle, inside, outside);
    const std::int64_t overlap = total(inside);
    if (overlap <= 0) continue;
    auto& f = frames[s.name];
    ++f.count;
    f.overlap_ns += overlap;
  }
  for (auto& [id, f] : frames) {
    f.name = unescape_json(raw.names.str(id));
    d.input_frames.push_back(std::move(f));
  }
  std::stable_sort(d.input_frames.begin(), d.input_frames.end(),
                   [](const IdleCpuOp& a, const IdleCpuOp& b) { return a.overlap_ns > b.overlap_ns; });
}

}  // namespace gm::trace::detail
