// Host-side (CPU) figures: the window of CPU activity, profiler steps and operators by self CPU time.
#include <algorithm>
#include <cmath>
#include <map>

#include "trace/internal.h"

namespace gm::trace::detail {

std::vector<IdleCpuOp> cpu_ops_during(const RawTrace& raw,
                                      const std::vector<std::pair<std::int64_t, std::int64_t>>& gaps) {
  if (gaps.empty()) return {};
  // Outermost operators per thread: sorted by (thread, start, end desc), dropping those inside the last kept.
  std::vector<Span> storage;
  std::vector<std::vector<const Span*>> threads;  // per thread: disjoint, in time order
  for (const Span& op : spans_of_kind(raw, SpanKind::op, storage)) {
    if (op.end_ns <= op.start_ns) continue;
    const Span* s = &op;
    if (threads.empty() || threads.back().back()->thread != s->thread) threads.emplace_back();
    auto& t = threads.back();
    if (!t.empty() && s->start_ns < t.back()->end_ns) continue;  // nested in (or overlapping) the last kept
    t.push_back(s);
  }
  std::map<std::uint32_t, IdleCpuOp> by_name;
  for (const auto& t : threads) {
    for (const auto& [g0, g1] : gaps) {
      // First kept op ending after the gap starts; ops are disjoint, so their ends are sorted too.
      auto it = std::upper_bound(t.begin(), t.end(), g0,
                                 [](std::int64_t v, const Span* s) { return v < s->end_ns; });
      for (; it != t.end() && (*it)->start_ns < g1; ++it) {
        const std::int64_t overlap = std::min(g1, (*it)->end_ns) - std::max(g0, (*it)->start_ns);
        if (overlap <= 0) continue;
        auto& o = by_name[(*it)->name];
        ++o.count;
        o.overlap_ns += overlap;
      }
    }
  }
  std::vector<IdleCpuOp> out;
  for (auto& [id, o] : by_name) {
    o.name = unescape_json(raw.names.str(id));
    out.push_back(std::move(o));
  }
  std::stable_sort(out.begin(), out.end(), [](const IdleCpuOp& a, const IdleCpuOp& b) {
    if (a.overlap_ns != b.overlap_ns) return a.overlap_ns > b.overlap_ns;
    return a.name < b.name;
  });
  return out;
}

std::optional<HostAnalysis> analyze_host(const RawTrace& raw) {
  HostAnalysis h;
  std::int64_t start = INT64_MAX, end = INT64_MIN;
  for (const auto& s : raw.spans) {
    if (s.kind == SpanKind::gpu_annotation) continue;
    ++h.span_count;
    start = std::min(start, s.start_ns);
    end = std::max(end, s.end_ns);
  }
  for (const auto& l : raw.launches) {
    start = std::min(start, l.ts_ns);
    end = std::max(end, l.ts_ns);
  }
  if (h.span_count == 0) return std::nullopt;
  h.window_start_ns = start;
  h.window_ns = end - start;

  // Steps: the longest span per ProfilerStep name, in step order.
  std::map<std::uint32_t, std::int64_t> step_len, step_start;
  for (const auto& s : raw.spans) {
    if (s.kind != SpanKind::step) continue;
    auto [it, inserted] = step_len.emplace(s.name, s.end_ns - s.start_ns);
    if (inserted || s.end_ns - s.start_ns > it->second) {
      it->second = s.end_ns - s.start_ns;
      step_start[s.name] = s.start_ns;
    }
  }
  std::vector<std::pair<std::int64_t, std::uint32_t>> order;
  for (const auto& [id, st] : step_start) order.emplace_back(st, id);
  std::sort(order.begin(), order.end());
  std::vector<std::int64_t> durations;
  for (const auto& [st, id] : order) {
    Bucket b;
    b.name = unescape_json(raw.names.str(id));
    b.count = 1;
    b.step_ns = step_len[id];
    durations.push_back(b.step_ns);
    h.steps.push_back(std::move(b));
  }
  h.step_ns = make_stats(std::move(durations));

  // Self time: per thread, operators nested by time; an operator's self time is its duration minus the
  // parts of it covered by its direct children (clipped to it).
  std::vector<Span> storage;
  const std::span<const Span> ops = spans_of_kind(raw, SpanKind::op, storage);
  std::vector<std::int64_t> self(ops.size(), 0);
  std::vector<std::size_t> stack;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Span& s = ops[i];
    while (!stack.empty() && (ops[stack.back()].thread != s.thread || ops[stack.back()].end_ns <= s.start_ns))
      stack.pop_back();
    self[i] = s.end_ns - s.start_ns;
    if (!stack.empty()) {
      const Span& parent = ops[stack.back()];
      self[stack.back()] -= std::min(s.end_ns, parent.end_ns) - s.start_ns;
    }
    stack.push_back(i);
  }
  std::map<std::uint32_t, OperatorTime> by_name;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    auto& o = by_name[ops[i].name];
    ++o.count;
    o.total_ns += ops[i].end_ns - ops[i].start_ns;
    o.self_ns += std::max<std::int64_t>(0, self[i]);
  }
  for (auto& [id, o] : by_name) {
    o.name = unescape_json(raw.names.str(id));
    h.operators.push_back(std::move(o));
  }
  std::stable_sort(h.operators.begin(), h.operators.end(), [](const OperatorTime& a, const OperatorTime& b) {
    if (a.self_ns != b.self_ns) return a.self_ns > b.self_ns;
    return a.name < b.name;
  });
  return h;
}

}  // namespace gm::trace::detail
