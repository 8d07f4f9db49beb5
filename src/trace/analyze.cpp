// DESIGN §3 "Trace costs": window, temporal split, fair-share attribution, idle gaps, launch statistics.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <unordered_map>

#include "trace/internal.h"
#include "util/enum_text.h"

namespace gm::trace::detail {

namespace {

// A share of busy time in units of 1/L ns (L: see fair_share_scale).
__extension__ typedef __int128 Scaled;

/// L = lcm of the concurrency levels of a device (the number of activities running at once, over every
/// elementary busy segment), so that every fair share len/k is a whole number of 1/L ns. nullopt when
/// L × window would not fit in 126 bits (then shares are kept to the ns, see the sweep).
std::optional<Scaled> fair_share_scale(const std::vector<std::pair<std::int64_t, int>>& edges,
                                       std::int64_t window_ns) {
  Scaled lcm = 1;
  const Scaled limit = (static_cast<Scaled>(1) << 125) / (static_cast<Scaled>(window_ns) + 1);
  std::vector<bool> seen;
  int k = 0;
  for (std::size_t e = 0; e < edges.size(); ++e) {
    k += edges[e].second;
    const bool segment = e + 1 < edges.size() && edges[e + 1].first > edges[e].first;
    if (!segment || k <= 0) continue;
    if (static_cast<std::size_t>(k) >= seen.size()) seen.resize(static_cast<std::size_t>(k) + 1, false);
    if (seen[static_cast<std::size_t>(k)]) continue;
    seen[static_cast<std::size_t>(k)] = true;
    Scaled a = lcm, b = k;
    while (b != 0) {
      const Scaled t = a % b;
      a = b;
      b = t;
    }
    lcm = lcm / a * k;
    if (lcm > limit) return std::nullopt;
  }
  return lcm;
}

constexpr util::EnumText<Klass> kKlasses[] = {
    {Klass::compute, "compute"}, {Klass::communication, "communication"}, {Klass::memory, "memory"}};

const char* klass_name(Klass k) {
  return util::enum_text(kKlasses, k, "compute");
}

struct Agg {
  std::int64_t count = 0, kernel_ns = 0, attributed_ns = 0;
  Scaled scaled = 0;  // Σ exact shares, in 1/L ns
  Klass klass = Klass::compute;
};

/// Rounds the exact shares of one breakdown once, with the largest-remainder method: each bucket gets
/// floor(share) and the busy time left over goes, 1 ns each, to the buckets with the largest fractional
/// parts (ties: by name). Each result is within 1 ns of the exact share and they add up to busy_ns.
template <class Key, class NameOf>
void round_shares(std::map<Key, Agg>& aggs, Scaled scale, std::int64_t busy_ns, NameOf name_of) {
  struct Rem {
    Scaled rem;
    std::string name;
    Agg* agg;
  };
  std::vector<Rem> rems;
  std::int64_t floors = 0;
  for (auto& [key, a] : aggs) {
    a.attributed_ns = static_cast<std::int64_t>(a.scaled / scale);
    floors += a.attributed_ns;
    const Scaled r = a.scaled % scale;
    if (r != 0) rems.push_back(Rem{r, name_of(key), &a});
  }
  std::sort(rems.begin(), rems.end(),
            [](const Rem& x, const Rem& y) { return x.rem != y.rem ? x.rem > y.rem : x.name < y.name; });
  for (std::int64_t left = busy_ns - floors, i = 0; left > 0 && i < static_cast<std::int64_t>(rems.size());
       --left, ++i)
    ++rems[static_cast<std::size_t>(i)].agg->attributed_ns;
}

std::vector<Bucket> to_buckets(const std::map<std::uint32_t, Agg>& agg, const Interner& names,
                               const char* none_name, bool with_class) {
  std::vector<Bucket> out;
  out.reserve(agg.size());
  for (const auto& [id, a] : agg) {
    Bucket b;
    b.name = id == UINT32_MAX ? std::string(none_name) : unescape_json(names.str(id));
    if (with_class) b.klass = klass_name(a.klass);
    b.count = a.count;
    b.kernel_ns = a.kernel_ns;
    b.attributed_ns = a.attributed_ns;
    out.push_back(std::move(b));
  }
  std::stable_sort(out.begin(), out.end(), [](const Bucket& x, const Bucket& y) {
    if (x.attributed_ns != y.attributed_ns) return x.attributed_ns > y.attributed_ns;
    return x.name < y.name;
  });
  return out;
}

std::int64_t step_number(const std::string& name) {
  const auto hash = name.find('#');
  if (hash == std::string::npos) return -1;
  std::int64_t n = 0;
  bool any = false;
  for (std::size_t i = hash + 1; i < name.size() && name[i] >= '0' && name[i] <= '9' && n < 1'000'000'000'000;
       ++i) {
    n = n * 10 + (name[i] - '0');
    any = true;
  }
  return any ? n : -1;
}

struct StepSpan {
  std::int64_t start_ns, end_ns;
  std::uint32_t name;
};

/// The step a timeline shows: the median by wall time (the later one of an even count), leaving out the
/// first step as warm-up when there are three or more.
const StepSpan& steps_for_timeline(const std::vector<StepSpan>& steps) {
  std::vector<std::size_t> order;
  for (std::size_t k = steps.size() >= 3 ? 1 : 0; k < steps.size(); ++k) order.push_back(k);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return steps[a].end_ns - steps[a].start_ns < steps[b].end_ns - steps[b].start_ns;
  });
  return steps[order[order.size() / 2]];
}

/// The activities of `idx` (one device, by start) that start inside `step`.
StepTimeline step_timeline(const RawTrace& raw, const std::vector<std::uint32_t>& idx, const StepSpan& step) {
  StepTimeline tl;
  tl.step = unescape_json(raw.names.str(step.name));
  tl.start_ns = step.start_ns;
  tl.step_ns = step.end_ns - step.start_ns;
  auto it = std::lower_bound(idx.begin(), idx.end(), step.start_ns,
                             [&](std::uint32_t i, std::int64_t t) { return raw.activities[i].start_ns < t; });
  std::unordered_map<std::uint32_t, std::uint32_t> stream_index, name_index;
  auto index_of = [&](std::unordered_map<std::uint32_t, std::uint32_t>& map, std::vector<std::string>& table,
                      const Interner& from, std::uint32_t id) {
    auto [at, fresh] = map.emplace(id, static_cast<std::uint32_t>(table.size()));
    if (fresh) table.push_back(unescape_json(from.str(id)));
    return at->second;
  };
  for (; it != idx.end() && raw.activities[*it].start_ns < step.end_ns; ++it) {
    if (tl.spans.size() >= kTimelineMaxSpans) {
      ++tl.spans_left_out;
      continue;
    }
    const auto& a = raw.activities[*it];
    tl.spans.push_back(TimelineSpan{index_of(stream_index, tl.streams, raw.streams, a.stream),
                                    index_of(name_index, tl.names, raw.names, a.name),
                                    a.start_ns - step.start_ns, a.dur_ns, klass_name(a.klass)});
  }
  return tl;
}

}  // namespace

std::vector<DeviceAnalysis> analyze(const RawTrace& raw) {
  // Launch lookup by correlation id (the earliest launch with the id): a table indexed by the id when the
  // ids are dense (Kineto numbers them from 1), else sorted launches and a binary search.
  const std::size_t n = raw.activities.size();
  std::vector<const Launch*> launch_of(n, nullptr);
  std::int64_t max_corr = -1;
  for (const auto& l : raw.launches) max_corr = std::max(max_corr, l.correlation);
  std::vector<Launch> launches;
  if (max_corr >= 0 && static_cast<std::uint64_t>(max_corr) <= 4 * raw.launches.size() + 4096) {
    std::vector<const Launch*> by_corr(static_cast<std::size_t>(max_corr) + 1, nullptr);
    for (const auto& l : raw.launches) {
      if (l.correlation < 0) continue;
      auto& slot = by_corr[static_cast<std::size_t>(l.correlation)];
      if (slot == nullptr || l.ts_ns < slot->ts_ns) slot = &l;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const auto corr = raw.activities[i].correlation;
      if (corr >= 0 && corr <= max_corr) launch_of[i] = by_corr[static_cast<std::size_t>(corr)];
    }
  } else {
    launches = raw.launches;
    std::sort(launches.begin(), launches.end(), [](const Launch& a, const Launch& b) {
      return a.correlation != b.correlation ? a.correlation < b.correlation : a.ts_ns < b.ts_ns;
    });
    for (std::size_t i = 0; i < n; ++i) {
      const auto corr = raw.activities[i].correlation;
      if (corr < 0) continue;
      auto it = std::lower_bound(launches.begin(), launches.end(), corr,
                                 [](const Launch& l, std::int64_t c) { return l.correlation < c; });
      if (it != launches.end() && it->correlation == corr) launch_of[i] = &*it;
    }
  }

  // Operator / annotation of each activity via its launch (innermost enclosing span on the launching thread).
  std::vector<std::pair<std::uint32_t, std::int64_t>> cpu_queries;
  std::vector<std::size_t> cpu_query_activity;
  for (std::size_t i = 0; i < n; ++i) {
    if (launch_of[i] == nullptr) continue;
    cpu_queries.emplace_back(launch_of[i]->thread, launch_of[i]->ts_ns);
    cpu_query_activity.push_back(i);
  }
  std::vector<std::uint32_t> op_of(n, UINT32_MAX), ann_of(n, UINT32_MAX);
  std::vector<OpDtype> op_dtype_of(n, OpDtype::unknown);  // the launching GEMM / convolution's input dtype
  {
    std::vector<Span> storage;
    auto name_of_span = [](const Span* sp) { return sp != nullptr ? sp->name : UINT32_MAX; };
    {
      const auto ops = innermost(spans_of_kind(raw, SpanKind::op, storage), cpu_queries);
      for (std::size_t q = 0; q < cpu_queries.size(); ++q) {
        op_of[cpu_query_activity[q]] = name_of_span(ops[q]);
        if (ops[q] != nullptr) op_dtype_of[cpu_query_activity[q]] = ops[q]->dtype;
      }
    }
    const auto anns = innermost(spans_of_kind(raw, SpanKind::annotation, storage), cpu_queries);
    for (std::size_t q = 0; q < cpu_queries.size(); ++q)
      ann_of[cpu_query_activity[q]] = name_of_span(anns[q]);
    // No CPU annotation: the innermost gpu_user_annotation of the device containing the activity start.
    std::vector<std::pair<std::uint32_t, std::int64_t>> gq;
    std::vector<std::size_t> gq_activity;
    for (std::size_t i = 0; i < n; ++i) {
      if (ann_of[i] != UINT32_MAX) continue;
      gq.emplace_back(raw.activities[i].device, raw.activities[i].start_ns);
      gq_activity.push_back(i);
    }
    const auto ganns = innermost(spans_of_kind(raw, SpanKind::gpu_annotation, storage), gq);
    for (std::size_t q = 0; q < gq.size(); ++q) ann_of[gq_activity[q]] = name_of_span(ganns[q]);
  }

  // Activities launched before the profiler's window: their launch call was not recorded, and their
  // correlation id is older than every launch the trace holds (the CPU ran ahead of the GPU before recording
  // began). They are named as such and kept out of the operator, annotation and step breakdowns.
  std::vector<bool> before_window(n, false);
  {
    std::int64_t min_corr = INT64_MAX;
    for (const auto& l : raw.launches) min_corr = std::min(min_corr, l.correlation);
    for (std::size_t i = 0; i < n; ++i) {
      const auto corr = raw.activities[i].correlation;
      before_window[i] = launch_of[i] == nullptr && corr >= 0 && corr < min_corr && min_corr != INT64_MAX;
    }
  }
  // What each activity computes with (docs/findings.md fp32_math): its operator's dtype where recorded; for
  // activities without one (launched before the window), what the same kernel was under a recorded operator.
  std::vector<KernelMath> math_of(n, KernelMath::other);
  {
    std::unordered_map<std::uint32_t, KernelMath> by_name;
    for (std::size_t i = 0; i < n; ++i) {
      if (raw.activities[i].klass != Klass::compute || op_dtype_of[i] == OpDtype::unknown) continue;
      math_of[i] = activity_math(raw.names.str(raw.activities[i].name), op_dtype_of[i]);
      by_name.emplace(raw.activities[i].name, math_of[i]);
    }
    std::unordered_map<std::uint32_t, KernelMath> table;
    for (std::size_t i = 0; i < n; ++i) {
      if (raw.activities[i].klass != Klass::compute || op_dtype_of[i] != OpDtype::unknown) continue;
      const auto name = raw.activities[i].name;
      if (auto it = by_name.find(name); it != by_name.end()) {
        math_of[i] = it->second;
        continue;
      }
      auto [it, fresh] = table.emplace(name, KernelMath::other);
      if (fresh) it->second = kernel_math(raw.names.str(name));
      math_of[i] = it->second;
    }
  }

  // Profiler steps: distinct ProfilerStep#N spans ordered by start; an activity belongs to the step whose
  // span contains its launch time (its own start when it has no launch).
  std::vector<StepSpan> steps;
  {
    std::map<std::uint32_t, StepSpan> by_name;  // the longest span per step name
    for (const auto& s : raw.spans) {
      if (s.kind != SpanKind::step) continue;
      auto [it, inserted] = by_name.emplace(s.name, StepSpan{s.start_ns, s.end_ns, s.name});
      if (!inserted && s.end_ns - s.start_ns > it->second.end_ns - it->second.start_ns)
        it->second = StepSpan{s.start_ns, s.end_ns, s.name};
    }
    for (const auto& [id, s] : by_name) steps.push_back(s);
    std::sort(steps.begin(), steps.end(),
              [](const StepSpan& a, const StepSpan& b) { return a.start_ns < b.start_ns; });
  }
  auto step_of = [&](std::int64_t t) -> std::size_t {
    auto it = std::upper_bound(steps.begin(), steps.end(), t,
                               [](std::int64_t v, const StepSpan& s) { return v < s.start_ns; });
    if (it == steps.begin()) return SIZE_MAX;
    --it;
    return t <= it->end_ns ? static_cast<std::size_t>(it - steps.begin()) : SIZE_MAX;
  };

  // Group activities by device.
  std::vector<std::vector<std::uint32_t>> by_device(raw.devices.size());
  for (std::size_t i = 0; i < n; ++i)
    by_device[raw.activities[i].device].push_back(static_cast<std::uint32_t>(i));

  std::vector<DeviceAnalysis> result;
  std::vector<Scaled> share(n, 0);
  for (std::uint32_t dev = 0; dev < by_device.size(); ++dev) {
    auto& idx = by_device[dev];
    if (idx.empty()) continue;
    DeviceAnalysis d;
    d.device = raw.devices.str(dev);
    {
      std::string id = std::string(d.device);
      auto it = raw.device_names.find(id);
      if (it != raw.device_names.end())
        d.gpu_name = it->second;
      else if (raw.device_names.size() == 1 && by_device.size() == 1)
        d.gpu_name = raw.device_names.begin()->second;
      auto major = raw.device_compute_major.find(id);
      if (major != raw.device_compute_major.end())
        d.compute_major = major->second;
      else if (raw.device_compute_major.size() == 1 && by_device.size() == 1)
        d.compute_major = raw.device_compute_major.begin()->second;
    }
    {  // by start, then file order (sorting values, not indices into the table)
      std::vector<std::pair<std::int64_t, std::uint32_t>> by_start;
      by_start.reserve(idx.size());
      for (auto i : idx) by_start.emplace_back(raw.activities[i].start_ns, i);
      std::sort(by_start.begin(), by_start.end());
      for (std::size_t k = 0; k < idx.size(); ++k) idx[k] = by_start[k].second;
    }
    std::int64_t wstart = INT64_MAX, wend = INT64_MIN;
    for (auto i : idx) {
      const auto& a = raw.activities[i];
      wstart = std::min(wstart, a.start_ns);
      wend = std::max(wend, a.start_ns + a.dur_ns);
      d.kernel_ns += a.dur_ns;
      ++d.activity_count;
      if (a.dur_ns == 0) ++d.zero_length_count;
    }
    d.window_start_ns = wstart;
    d.window_ns = wend - wstart;

    // Sweep over elementary segments. Each segment of length len with k active activities gives len / k
    // to every active activity, exactly: shares are kept in units of 1/L ns (L = lcm of the concurrency
    // levels), through a running prefix sum, and rounded once per breakdown bucket (round_shares). When L
    // is too large (hundreds of overlapping activities), shares are kept in whole ns: len / k to every
    // active activity and the remainder len % k to the most recently started one (within k ns).
    std::vector<std::uint32_t> pos;  // positive-length activities in start order
    for (auto i : idx)
      if (raw.activities[i].dur_ns > 0) pos.push_back(i);
    std::vector<std::pair<std::int64_t, std::uint32_t>> ends;
    ends.reserve(pos.size());
    for (auto i : pos) ends.emplace_back(raw.activities[i].start_ns + raw.activities[i].dur_ns, i);
    std::sort(ends.begin(), ends.end());
    Scaled scale = 1;
    {
      // Starts (pos is in start order) merged with the sorted ends: the edges in (time, end first) order.
      std::vector<std::pair<std::int64_t, int>> starts, stops, edges;
      starts.reserve(pos.size());
      stops.reserve(ends.size());
      for (auto i : pos) starts.emplace_back(raw.activities[i].start_ns, 1);
      for (const auto& e : ends) stops.emplace_back(e.first, -1);
      edges.resize(starts.size() + stops.size());
      std::merge(starts.begin(), starts.end(), stops.begin(), stops.end(), edges.begin());
      const auto exact = fair_share_scale(edges, d.window_ns);
      d.fair_share_exact = exact.has_value();
      if (exact) scale = *exact;
    }
    // Host sync calls by start, with the latest end so far: "was the host blocked in a sync at t?"
    std::vector<std::pair<std::int64_t, std::int64_t>> syncs = raw.syncs;
    std::sort(syncs.begin(), syncs.end());
    std::vector<std::int64_t> sync_end_max(syncs.size());
    for (std::size_t k = 0; k < syncs.size(); ++k)
      sync_end_max[k] = std::max(syncs[k].second, k > 0 ? sync_end_max[k - 1] : INT64_MIN);
    auto in_sync = [&](std::int64_t at) {
      auto it = std::upper_bound(syncs.begin(), syncs.end(), std::make_pair(at, INT64_MAX));
      if (it == syncs.begin()) return false;
      return sync_end_max[static_cast<std::size_t>(it - syncs.begin()) - 1] > at;
    };
    std::vector<std::pair<std::int64_t, std::int64_t>> gaps;  // idle gaps inside the window
    std::vector<HostWaitGap> host_wait_gaps;                  // of which host wait, not begun in a sync
    // The GPU span of the work launched inside the profiler's steps, and what the device did in it.
    std::int64_t span_start = INT64_MAX, span_end = INT64_MIN;
    if (!steps.empty())
      for (auto i : idx) {
        if (launch_of[i] == nullptr || step_of(launch_of[i]->ts_ns) == SIZE_MAX) continue;
        span_start = std::min(span_start, raw.activities[i].start_ns);
        span_end = std::max(span_end, raw.activities[i].start_ns + raw.activities[i].dur_ns);
      }
    StepsSpan steps_span;
    std::int64_t* span_class[3] = {&steps_span.compute_ns, &steps_span.communication_ns,
                                   &steps_span.memory_ns};
    {  // CUDA graph launches that started work here
      std::vector<const Launch*> graph_calls;
      for (auto i : idx)
        if (launch_of[i] != nullptr && launch_of[i]->graph) graph_calls.push_back(launch_of[i]);
      std::sort(graph_calls.begin(), graph_calls.end());
      d.graph_launches = static_cast<std::int64_t>(std::unique(graph_calls.begin(), graph_calls.end()) -
                                                   graph_calls.begin());
    }
    std::vector<std::uint32_t> active;
    std::vector<std::size_t> slot(n, SIZE_MAX);
    std::vector<Scaled> prefix_at_start(n, 0);
    Scaled prefix = 0;
    int cls[3] = {0, 0, 0};
    // Per-step split: the busy segments of each class clipped to the ProfilerStep spans (by start).
    std::vector<StepSplit> split(steps.size());
    std::size_t first_step = 0;
    auto add_to_steps = [&](std::int64_t from, std::int64_t to, int klass) {
      while (first_step < steps.size() && steps[first_step].end_ns <= from) ++first_step;
      for (std::size_t k = first_step; k < steps.size() && steps[k].start_ns < to; ++k) {
        const std::int64_t len = std::min(to, steps[k].end_ns) - std::max(from, steps[k].start_ns);
        if (len <= 0) continue;
        if (klass == 0)
          split[k].compute_ns += len;
        else if (klass == 1)
          split[k].communication_ns += len;
        else
          split[k].memory_ns += len;
      }
    };
    std::size_t pi = 0, ei = 0;
    std::int64_t t = pos.empty() ? 0 : raw.activities[pos[0]].start_ns;
    std::vector<std::int64_t> launch_delays;
    while (ei < ends.size()) {
      const std::int64_t next_start = pi < pos.size() ? raw.activities[pos[pi]].start_ns : INT64_MAX;
      const std::int64_t next_end = ends[ei].first;
      const std::int64_t next_t = std::min(next_start, next_end);
      const std::int64_t len = next_t - t;
      if (len > 0) {
        if (!active.empty()) {
          const auto k = static_cast<std::int64_t>(active.size());
          if (d.fair_share_exact) {
            prefix += static_cast<Scaled>(len) * (scale / k);
          } else {
            prefix += len / k;
            share[active.back()] += len % k;
          }
          d.busy_ns += len;
          const int klass = cls[0] > 0 ? 0 : cls[1] > 0 ? 1 : 2;
          if (klass == 0)
            d.compute_ns += len;
          else if (klass == 1)
            d.communication_ns += len;
          else
            d.memory_ns += len;
          if (!steps.empty()) add_to_steps(t, next_t, klass);
          if (next_t > span_start && t < span_end) {
            const std::int64_t in_span = std::min(next_t, span_end) - std::max(t, span_start);
            steps_span.busy_ns += in_span;
            *span_class[klass] += in_span;
          }
          if (cls[0] > 0 && cls[1] > 0) d.overlap_ns += len;
        } else {
          // An idle gap inside the window: host wait when the next activity's launch call began after
          // the device went idle (the device was waiting for the CPU to issue work).
          ++d.idle_gap_count;
          gaps.emplace_back(t, next_t);
          const auto nxt = pos[pi];
          const bool host_wait = launch_of[nxt] != nullptr && launch_of[nxt]->ts_ns > t;
          if (host_wait) d.idle_host_wait_ns += len;
          // The GPU ran out of work while the host sat in a synchronisation: it idles until the host wakes
          // up and launches again (a sync on the critical path).
          const bool after_sync = in_sync(t);
          if (after_sync) {
            d.idle_after_sync_ns += len;
            ++d.sync_gap_count;
          }
          if (host_wait && after_sync) d.idle_host_sync_ns += len;
          if (host_wait && !after_sync) host_wait_gaps.push_back({t, next_t, launch_of[nxt]->thread});
          // Between two activities of one CUDA graph launch: the graph's own dependencies, not the host.
          const auto prev = ei > 0 ? ends[ei - 1].second : nxt;
          if (!host_wait && launch_of[nxt] != nullptr && launch_of[nxt]->graph &&
              launch_of[prev] == launch_of[nxt])
            d.idle_in_graph_ns += len;
        }
      }
      t = next_t;
      if (next_end <= next_start) {  // ends first at equal times: touching intervals do not overlap
        const auto i = ends[ei].second;
        share[i] += prefix - prefix_at_start[i];
        const std::size_t s = slot[i];
        active[s] = active.back();
        slot[active[s]] = s;
        active.pop_back();
        --cls[static_cast<int>(raw.activities[i].klass)];
        ++ei;
      } else {
        const auto i = pos[pi];
        prefix_at_start[i] = prefix;
        slot[i] = active.size();
        active.push_back(i);
        ++cls[static_cast<int>(raw.activities[i].klass)];
        ++pi;
      }
    }
    d.idle_ns = d.window_ns - d.busy_ns;
    d.idle_other_ns = d.idle_ns - d.idle_host_wait_ns;
    d.idle_cpu_ops = cpu_ops_during(raw, gaps);
    classify_host_wait(raw, host_wait_gaps, d);
    if (span_start < span_end) {
      steps_span.start_ns = span_start;
      steps_span.span_ns = span_end - span_start;
      d.steps_span = steps_span;
    }

    // Launch delay and queue depth.
    std::vector<std::int64_t> launch_ts, end_ts;
    for (auto i : idx) {
      const auto& a = raw.activities[i];
      end_ts.push_back(a.start_ns + a.dur_ns);
      if (launch_of[i] != nullptr) {
        launch_delays.push_back(a.start_ns - launch_of[i]->ts_ns);
        launch_ts.push_back(launch_of[i]->ts_ns);
      }
    }
    d.launch_delay_ns = make_stats(std::move(launch_delays));
    std::sort(launch_ts.begin(), launch_ts.end());
    std::sort(end_ts.begin(), end_ts.end());
    std::vector<std::int64_t> depths;
    depths.reserve(launch_ts.size());
    for (std::size_t i = 0; i < launch_ts.size(); ++i) {
      const auto finished = std::upper_bound(end_ts.begin(), end_ts.end(), launch_ts[i]) - end_ts.begin();
      depths.push_back(std::max<std::int64_t>(0, static_cast<std::int64_t>(i) - finished));
    }
    d.queue_depth = make_stats(std::move(depths));

    // Breakdowns. Activities launched before the window are in no operator, annotation or step row: their
    // share is rounded once (before_window), and those breakdowns add up to busy_ns less it.
    std::map<std::uint32_t, Agg> kern, ops, anns, before_kern, fp32_kern;
    std::map<int, Agg> before_or_not;  // 0: launched before the window, 1: the rest
    std::map<std::size_t, Agg> stp;
    Scaled fp32_scaled = 0, fp32_before_scaled = 0, tensor_scaled = 0;
    MatrixMath& mm = d.matrix_math;
    for (auto i : idx) {
      const auto& a = raw.activities[i];
      auto add = [&](Agg& g) {
        ++g.count;
        g.kernel_ns += a.dur_ns;
        g.scaled += share[i];
        g.klass = a.klass;
      };
      add(kern[a.name]);
      if (math_of[i] == KernelMath::fp32) {
        fp32_scaled += share[i];
        if (before_window[i]) fp32_before_scaled += share[i];
        mm.fp32_kernel_ns += a.dur_ns;
        ++mm.fp32_count;
        add(fp32_kern[a.name]);
      } else if (math_of[i] == KernelMath::tensor_core) {
        tensor_scaled += share[i];
      }
      if (math_of[i] != KernelMath::other || op_dtype_of[i] != OpDtype::unknown)
        ++(op_dtype_of[i] != OpDtype::unknown ? mm.from_dtypes_count : mm.from_names_count);
      add(before_or_not[before_window[i] ? 0 : 1]);
      if (before_window[i]) {
        add(before_kern[a.name]);
        continue;
      }
      add(ops[op_of[i]]);
      add(anns[ann_of[i]]);
      add(stp[step_of(launch_of[i] != nullptr ? launch_of[i]->ts_ns : a.start_ns)]);
    }
    mm.fp32_ns = static_cast<std::int64_t>(fp32_scaled / scale);
    mm.fp32_before_window_ns = static_cast<std::int64_t>(fp32_before_scaled / scale);
    mm.tensor_core_ns = static_cast<std::int64_t>(tensor_scaled / scale);
    {
      const Agg* largest = nullptr;
      std::uint32_t largest_name = 0;
      for (const auto& [id, g] : fp32_kern)
        if (largest == nullptr || g.scaled > largest->scaled) {
          largest = &g;
          largest_name = id;
        }
      if (largest != nullptr) mm.largest_fp32_kernel = unescape_json(raw.names.str(largest_name));
    }
    auto name_of = [&](std::uint32_t id) {
      return id == UINT32_MAX ? std::string() : unescape_json(raw.names.str(id));
    };
    round_shares(before_or_not, scale, d.busy_ns, [](int k) { return std::to_string(k); });
    std::int64_t in_rows_ns = d.busy_ns;  // what the operator, annotation and step rows add up to
    if (auto it = before_or_not.find(0); it != before_or_not.end()) {
      BeforeWindow& bw = d.before_window;
      bw.count = it->second.count;
      bw.kernel_ns = it->second.kernel_ns;
      bw.attributed_ns = it->second.attributed_ns;
      in_rows_ns -= bw.attributed_ns;
      for (auto i : idx)
        if (before_window[i])
          bw.end_ns = std::max(bw.end_ns, raw.activities[i].start_ns + raw.activities[i].dur_ns);
      round_shares(before_kern, scale, bw.attributed_ns, name_of);
      bw.kernels = to_buckets(before_kern, raw.names, "(unnamed)", true);
    }
    round_shares(kern, scale, d.busy_ns, name_of);
    round_shares(ops, scale, in_rows_ns, name_of);
    round_shares(anns, scale, in_rows_ns, name_of);
    round_shares(stp, scale, in_rows_ns, [](std::size_t s) { return fmt::format("{:020}", s); });
    d.kernels = to_buckets(kern, raw.names, "(unnamed)", true);
    d.operators = to_buckets(ops, raw.names, "(no operator)", false);
    d.annotations = to_buckets(anns, raw.names, "(no annotation)", false);
    std::vector<std::int64_t> step_durations;
    for (std::size_t s = 0; s < steps.size(); ++s) {
      Bucket b;
      b.name = unescape_json(raw.names.str(steps[s].name));
      b.step_ns = steps[s].end_ns - steps[s].start_ns;
      step_durations.push_back(b.step_ns);
      auto it = stp.find(s);
      if (it != stp.end()) {
        b.count = it->second.count;
        b.kernel_ns = it->second.kernel_ns;
        b.attributed_ns = it->second.attributed_ns;
      }
      d.steps.push_back(std::move(b));
    }
    std::stable_sort(d.steps.begin(), d.steps.end(), [](const Bucket& x, const Bucket& y) {
      return step_number(x.name) < step_number(y.name);
    });
    if (auto it = stp.find(SIZE_MAX); it != stp.end()) {
      Bucket b;
      b.name = "(outside steps)";
      b.count = it->second.count;
      b.kernel_ns = it->second.kernel_ns;
      b.attributed_ns = it->second.attributed_ns;
      d.steps.push_back(std::move(b));
    }
    d.step_ns = make_stats(std::move(step_durations));
    for (std::size_t k = 0; k < steps.size(); ++k) {
      StepSplit& sp = split[k];
      sp.name = unescape_json(raw.names.str(steps[k].name));
      sp.start_ns = steps[k].start_ns;
      sp.step_ns = steps[k].end_ns - steps[k].start_ns;
      sp.idle_ns = sp.step_ns - sp.compute_ns - sp.communication_ns - sp.memory_ns;
    }
    d.step_split = std::move(split);
    if (!steps.empty()) d.timeline = step_timeline(raw, idx, steps_for_timeline(steps));
    result.push_back(std::move(d));
  }
  std::sort(result.begin(), result.end(), [](const DeviceAnalysis& a, const DeviceAnalysis& b) {
    if (a.device.size() != b.device.size()) return a.device.size() < b.device.size();
    return a.device < b.device;
  });
  return result;
}

}  // namespace gm::trace::detail
