// The spans of a trace in time order per thread, the innermost enclosing span of a moment, and order
// statistics: what the analyses (analyze.cpp, host.cpp, host_wait.cpp, attention.cpp) look things up with.
#include <algorithm>
#include <cmath>

#include "trace/internal.h"

namespace gm::trace::detail {

Stats make_stats(std::vector<std::int64_t> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.count = static_cast<std::int64_t>(v.size());
  long double sum = 0;
  for (auto x : v) sum += static_cast<long double>(x);
  s.mean = static_cast<double>(sum / static_cast<long double>(v.size()));
  long double sq = 0;
  for (auto x : v) sq += (static_cast<long double>(x) - s.mean) * (static_cast<long double>(x) - s.mean);
  s.stdev = static_cast<double>(std::sqrt(sq / static_cast<long double>(v.size())));
  s.min = v.front();
  s.max = v.back();
  auto pct = [&](double q) {
    const auto idx = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, idx == 0 ? 0 : idx - 1)];
  };
  s.p50 = pct(0.5);
  s.p95 = pct(0.95);
  return s;
}

/// For each query (thread, ts), the innermost of `spans` (one kind, in span_order) on that thread with
/// start <= ts < end (start <= ts <= end for zero-length spans); nullptr when none.
std::vector<const Span*> innermost(std::span<const Span> spans,
                                   const std::vector<std::pair<std::uint32_t, std::int64_t>>& queries) {
  struct Query {
    std::uint32_t thread;
    std::int64_t ts;
    std::size_t index;
    bool operator<(const Query& o) const { return thread != o.thread ? thread < o.thread : ts < o.ts; }
  };
  std::vector<Query> order;
  order.reserve(queries.size());
  for (std::size_t q = 0; q < queries.size(); ++q) order.push_back({queries[q].first, queries[q].second, q});
  std::sort(order.begin(), order.end());
  std::vector<const Span*> result(queries.size(), nullptr);
  std::vector<const Span*> stack;
  std::size_t si = 0;
  std::uint32_t current_thread = UINT32_MAX;
  for (const auto& [thread, ts, qi] : order) {
    if (thread != current_thread) {
      stack.clear();
      current_thread = thread;
      while (si < spans.size() && spans[si].thread < thread) ++si;
    }
    while (si < spans.size() && spans[si].thread == thread && spans[si].start_ns <= ts) {
      while (!stack.empty() && stack.back()->end_ns < spans[si].start_ns) stack.pop_back();
      stack.push_back(&spans[si]);
      ++si;
    }
    while (!stack.empty() && stack.back()->end_ns < ts) stack.pop_back();
    // A span on the stack may have ended before ts while an inner, later one is still open
    // only for malformed nesting; take the innermost that still contains ts.
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
      if ((*it)->start_ns <= ts && ts <= (*it)->end_ns) {
        result[qi] = *it;
        break;
      }
    }
  }
  return result;
}

bool span_order(const Span& a, const Span& b) {
  if (a.kind != b.kind) return a.kind < b.kind;
  if (a.thread != b.thread) return a.thread < b.thread;
  if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
  if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;  // outer first
  return a.name < b.name;
}

void sort_spans(RawTrace& raw) {
  // Grouped by (kind, thread) first, in one counting pass, then each group sorted by time: groups are
  // small and often already in order.
  const std::size_t threads = std::max(raw.threads.size(), raw.devices.size()) + 1;
  constexpr std::size_t kKinds = 4;
  auto group_of = [&](const Span& s) {
    return static_cast<std::size_t>(s.kind) * threads + std::min<std::size_t>(s.thread, threads - 1);
  };
  std::vector<std::size_t> first(kKinds * threads + 1, 0);
  for (const auto& s : raw.spans) ++first[group_of(s) + 1];
  for (std::size_t g = 1; g < first.size(); ++g) first[g] += first[g - 1];
  std::vector<Span> sorted(raw.spans.size());
  {
    std::vector<std::size_t> next(first.begin(), first.end() - 1);
    for (const auto& s : raw.spans) sorted[next[group_of(s)]++] = s;
  }
  for (std::size_t g = 0; g + 1 < first.size(); ++g) {
    auto b = sorted.begin() + static_cast<std::ptrdiff_t>(first[g]);
    auto e = sorted.begin() + static_cast<std::ptrdiff_t>(first[g + 1]);
    if (!std::is_sorted(b, e, span_order)) std::sort(b, e, span_order);
  }
  raw.spans = std::move(sorted);
  raw.spans_sorted = true;
}

std::span<const Span> spans_of_kind(const RawTrace& raw, SpanKind kind, std::vector<Span>& storage) {
  if (raw.spans_sorted) {
    auto [lo, hi] =
        std::equal_range(raw.spans.begin(), raw.spans.end(), kind, [](const auto& x, const auto& y) {
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>, SpanKind>)
            return x < y.kind;
          else
            return x.kind < y;
        });
    return {lo, hi};
  }
  storage.clear();
  for (const auto& s : raw.spans)
    if (s.kind == kind) storage.push_back(s);
  std::sort(storage.begin(), storage.end(), span_order);
  return storage;
}

}  // namespace gm::trace::detail
