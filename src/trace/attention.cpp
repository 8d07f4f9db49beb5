// Attention written as separate operators: batched matmul → softmax → batched matmul on one thread, under
// the same parent operator and annotation, in a step without a fused attention kernel or SDPA operator
// (docs/findings.md `unfused_attention`).
#include <algorithm>
#include <map>
#include <unordered_map>

#include "trace/internal.h"

namespace gm::trace::detail {
namespace {

enum class Role : std::uint8_t { none, matmul, softmax, fused };

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

Role role_of(std::string_view name) {
  if (name.find("scaled_dot_product") != std::string_view::npos ||
      name.find("flash_attention") != std::string_view::npos ||
      name.find("efficient_attention") != std::string_view::npos ||
      name.find("_fused_sdp") != std::string_view::npos ||
      name.find("ScaledDotProduct") != std::string_view::npos ||
      name.find("_native_multi_head_attention") != std::string_view::npos)
    return Role::fused;
  if (name == "aten::bmm" || name == "aten::matmul" || name == "aten::baddbmm" ||
      ends_with(name, " BmmBackward0") || ends_with(name, " BaddbmmBackward0"))
    return Role::matmul;
  if (name == "aten::softmax" || name == "aten::_softmax" || name == "aten::_safe_softmax" ||
      name == "aten::_softmax_backward_data" || ends_with(name, " SoftmaxBackward0"))
    return Role::softmax;
  return Role::none;
}

/// An outermost matmul / softmax operator with what it runs under.
struct Piece {
  const Span* span;
  Role role;
  std::uint32_t parent;      // innermost enclosing operator name, UINT32_MAX at the top
  std::uint32_t annotation;  // innermost enclosing user annotation name, UINT32_MAX without
};

struct AttentionChain {
  std::uint32_t thread;
  std::int64_t start_ns, end_ns;                     // first matmul start to last matmul end
  std::pair<std::int64_t, std::int64_t> matmuls[2];  // the two matmul operators [start, end]
  std::uint32_t names[3];
};

/// The chains of a parsed trace by (thread, start), and the start times of fused attention (SDPA operators,
/// fused kernels at their launch), sorted.
std::vector<AttentionChain> attention_chains(const RawTrace& raw, std::vector<std::int64_t>& fused_starts) {
  std::vector<Span> op_storage, ann_storage;
  const auto ops = spans_of_kind(raw, SpanKind::op, op_storage);
  const auto anns = spans_of_kind(raw, SpanKind::annotation, ann_storage);
  std::vector<Role> roles(raw.names.size(), Role::none);
  for (std::size_t i = 0; i < raw.names.size(); ++i)
    roles[i] = role_of(raw.names.str(static_cast<std::uint32_t>(i)));

  std::vector<AttentionChain> chains;
  std::size_t ai = 0;
  for (std::size_t i = 0; i < ops.size();) {
    const std::uint32_t thread = ops[i].thread;
    std::vector<Piece> pieces;
    std::vector<const Span*> stack, ann_stack;
    while (ai < anns.size() && anns[ai].thread < thread) ++ai;
    for (; i < ops.size() && ops[i].thread == thread; ++i) {
      const Span& s = ops[i];
      while (!stack.empty() && stack.back()->end_ns <= s.start_ns &&
             stack.back()->end_ns > stack.back()->start_ns)
        stack.pop_back();
      while (!stack.empty() && stack.back()->end_ns < s.start_ns) stack.pop_back();
      while (ai < anns.size() && anns[ai].thread == thread && anns[ai].start_ns <= s.start_ns) {
        while (!ann_stack.empty() && ann_stack.back()->end_ns < anns[ai].start_ns) ann_stack.pop_back();
        ann_stack.push_back(&anns[ai]);
        ++ai;
      }
      while (!ann_stack.empty() && ann_stack.back()->end_ns < s.start_ns) ann_stack.pop_back();
      const Role role = roles[s.name];
      bool nested = false;
      for (const Span* open : stack)
        if (roles[open->name] != Role::none) nested = true;
      if (role == Role::fused) fused_starts.push_back(s.start_ns);
      if (!nested && (role == Role::matmul || role == Role::softmax))
        pieces.push_back({&s, role, stack.empty() ? UINT32_MAX : stack.back()->name,
                          ann_stack.empty() ? UINT32_MAX : ann_stack.back()->name});
      stack.push_back(&s);
    }
    while (ai < anns.size() && anns[ai].thread == thread) ++ai;
    // matmul, softmax, matmul: consecutive among this thread's pieces, siblings of one parent and annotation.
    for (std::size_t k = 1; k + 1 < pieces.size(); ++k) {
      const Piece &a = pieces[k - 1], &b = pieces[k], &c = pieces[k + 1];
      if (b.role != Role::softmax || a.role != Role::matmul || c.role != Role::matmul) continue;
      if (a.parent != b.parent || b.parent != c.parent || a.annotation != b.annotation ||
          b.annotation != c.annotation)
        continue;
      AttentionChain ch;
      ch.thread = thread;
      ch.start_ns = a.span->start_ns;
      ch.end_ns = c.span->end_ns;
      ch.matmuls[0] = {a.span->start_ns, a.span->end_ns};
      ch.matmuls[1] = {c.span->start_ns, c.span->end_ns};
      ch.names[0] = a.span->name;
      ch.names[1] = b.span->name;
      ch.names[2] = c.span->name;
      chains.push_back(ch);
    }
  }
  // Fused attention kernels count as fused where they were launched (their own start without a launch).
  std::vector<char> fused_name(raw.names.size(), 0);
  bool any_fused_kernel = false;
  for (const auto& a : raw.activities) {
    if (fused_name[a.name] == 0)
      fused_name[a.name] = is_fused_attention_kernel(unescape_json(raw.names.str(a.name))) ? 2 : 1;
    any_fused_kernel = any_fused_kernel || fused_name[a.name] == 2;
  }
  if (any_fused_kernel) {
    std::unordered_map<std::int64_t, std::int64_t> launch_ts;
    for (const auto& a : raw.activities) {
      if (fused_name[a.name] != 2) continue;
      if (a.correlation < 0)
        fused_starts.push_back(a.start_ns);
      else
        launch_ts.emplace(a.correlation, a.start_ns);
    }
    for (const auto& l : raw.launches) {
      auto it = launch_ts.find(l.correlation);
      if (it != launch_ts.end()) it->second = std::min(it->second, l.ts_ns);
    }
    for (const auto& [corr, ts] : launch_ts) fused_starts.push_back(ts);
  }
  std::sort(fused_starts.begin(), fused_starts.end());
  return chains;
}

}  // namespace

void add_attention(const RawTrace& raw, std::vector<DeviceAnalysis>& devices,
                   std::optional<HostAnalysis>& host) {
  std::vector<std::int64_t> fused_starts;
  std::vector<AttentionChain> found = attention_chains(raw, fused_starts);
  if (found.empty() && fused_starts.empty()) return;
  // Steps: the longest span per ProfilerStep name; a chain belongs to the step holding its start.
  std::map<std::uint32_t, std::pair<std::int64_t, std::int64_t>> by_name;
  for (const auto& s : raw.spans) {
    if (s.kind != SpanKind::step) continue;
    auto [it, inserted] = by_name.emplace(s.name, std::make_pair(s.start_ns, s.end_ns));
    if (!inserted && s.end_ns - s.start_ns > it->second.second - it->second.first)
      it->second = {s.start_ns, s.end_ns};
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> steps;
  for (const auto& [id, se] : by_name) steps.push_back(se);
  std::sort(steps.begin(), steps.end());
  // The step of a time: its index, steps.size() outside every step (one more "step": the rest of the trace).
  auto step_of = [&](std::int64_t t) {
    auto it = std::upper_bound(steps.begin(), steps.end(), std::make_pair(t, INT64_MAX));
    if (it == steps.begin()) return steps.size();
    --it;
    return t <= it->second ? static_cast<std::size_t>(it - steps.begin()) : steps.size();
  };
  std::vector<char> step_fused(steps.size() + 1, 0);
  for (auto t : fused_starts) step_fused[step_of(t)] = 1;

  AttentionFigures figures;
  figures.fused = static_cast<std::int64_t>(fused_starts.size());
  std::vector<AttentionChain> chains;
  for (const auto& ch : found) {
    if (!chains.empty() && chains.back().thread == ch.thread && ch.start_ns < chains.back().end_ns) continue;
    if (step_fused[step_of(ch.start_ns)] != 0) {
      ++figures.chains_in_fused_steps;
      continue;
    }
    if (figures.pattern.empty())
      figures.pattern = unescape_json(raw.names.str(ch.names[0])) + " → " +
                        unescape_json(raw.names.str(ch.names[1])) + " → " +
                        unescape_json(raw.names.str(ch.names[2]));
    ++figures.chains;
    figures.host_ns += ch.end_ns - ch.start_ns;
    figures.host_matmul_ns +=
        (ch.matmuls[0].second - ch.matmuls[0].first) + (ch.matmuls[1].second - ch.matmuls[1].first);
    chains.push_back(ch);
  }
  if (host) host->attention = figures;

  // GPU activities launched from inside a chain (on its thread), per device.
  std::unordered_map<std::int64_t, const Launch*> launch_of;
  if (!chains.empty())
    for (const auto& l : raw.launches) {
      auto [it, inserted] = launch_of.emplace(l.correlation, &l);
      if (!inserted && l.ts_ns < it->second->ts_ns) it->second = &l;
    }
  std::map<std::string, AttentionFigures> per_device;
  for (const auto& a : raw.activities) {
    if (a.correlation < 0 || chains.empty()) continue;
    auto li = launch_of.find(a.correlation);
    if (li == launch_of.end()) continue;
    const Launch& l = *li->second;
    auto it = std::upper_bound(chains.begin(), chains.end(), std::make_pair(l.thread, l.ts_ns),
                               [](const std::pair<std::uint32_t, std::int64_t>& q, const AttentionChain& c) {
                                 return q.first != c.thread ? q.first < c.thread : q.second < c.start_ns;
                               });
    if (it == chains.begin()) continue;
    --it;
    if (it->thread != l.thread || l.ts_ns > it->end_ns) continue;
    auto& f = per_device[raw.devices.str(a.device)];
    f.kernel_ns += a.dur_ns;
    for (const auto& [m0, m1] : it->matmuls)
      if (l.ts_ns >= m0 && l.ts_ns <= m1) f.matmul_kernel_ns += a.dur_ns;
  }
  for (auto& d : devices) {
    d.attention = figures;
    d.attention.host_ns = 0;
    d.attention.host_matmul_ns = 0;
    auto it = per_device.find(d.device);
    if (it != per_device.end()) {
      d.attention.kernel_ns = it->second.kernel_ns;
      d.attention.matmul_kernel_ns = it->second.matmul_kernel_ns;
    }
  }
}

}  // namespace gm::trace::detail
