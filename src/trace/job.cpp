// The job a folder of rank traces makes: its window, per-rank busy/idle, and the straggler wait of its
// collectives (docs/trace.md "The job").
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "trace/internal.h"

namespace gm::trace {
namespace detail {

std::vector<CollectiveCall> collective_calls(const RawTrace& raw, std::int64_t& without_metadata) {
  std::vector<CollectiveCall> out;
  std::vector<bool> has_meta(raw.activities.size(), false);
  if (!raw.collectives.empty()) {
    // Launch times of the collectives' kernels only (a trace has millions of launches, a few collectives).
    std::unordered_map<std::int64_t, std::int64_t> launch_ts;
    for (const auto& c : raw.collectives)
      if (raw.activities[c.activity].correlation >= 0)
        launch_ts.emplace(raw.activities[c.activity].correlation, INT64_MIN);
    for (const auto& l : raw.launches)
      if (auto it = launch_ts.find(l.correlation); it != launch_ts.end() && it->second == INT64_MIN)
        it->second = l.ts_ns;
    std::vector<const Span*> steps;
    for (const auto& s : raw.spans)
      if (s.kind == SpanKind::step) steps.push_back(&s);
    std::sort(steps.begin(), steps.end(),
              [](const Span* a, const Span* b) { return a->start_ns < b->start_ns; });
    out.reserve(raw.collectives.size());
    for (const auto& c : raw.collectives) {
      const Activity& a = raw.activities[c.activity];
      has_meta[c.activity] = true;
      CollectiveCall call;
      call.group = unescape_json(raw.names.str(c.group));
      call.name = unescape_json(raw.names.str(c.name));
      if (c.nelems >= 0) call.nelems = c.nelems;
      if (c.seq >= 0) call.seq = c.seq;
      if (c.group_size >= 0) call.group_size = c.group_size;
      call.device = raw.devices.str(a.device);
      call.start_ns = a.start_ns;
      call.dur_ns = a.dur_ns;
      std::int64_t t = a.start_ns;
      if (auto it = launch_ts.find(a.correlation);
          a.correlation >= 0 && it != launch_ts.end() && it->second != INT64_MIN)
        t = it->second;
      // The last step starting at or before t, if t is inside it.
      auto it = std::upper_bound(steps.begin(), steps.end(), t,
                                 [](std::int64_t v, const Span* s) { return v < s->start_ns; });
      if (it != steps.begin() && t < (*std::prev(it))->end_ns)
        call.step = unescape_json(raw.names.str((*std::prev(it))->name));
      out.push_back(std::move(call));
    }
    std::stable_sort(out.begin(), out.end(), [](const CollectiveCall& a, const CollectiveCall& b) {
      return a.start_ns < b.start_ns;
    });
  }
  without_metadata = 0;
  for (std::size_t i = 0; i < raw.activities.size(); ++i)
    if (!has_meta[i] && raw.activities[i].klass == Klass::communication &&
        raw.names.str(raw.activities[i].name).starts_with("nccl"))
      ++without_metadata;
  return out;
}

}  // namespace detail

namespace {

constexpr const char* kOutsideSteps = "(outside steps)";

/// Sort key of a step label: ProfilerStep#N by N, anything else after.
std::pair<std::int64_t, std::string> step_order(const std::string& step) {
  constexpr std::string_view prefix = "ProfilerStep#";
  if (step.starts_with(prefix)) {
    std::int64_t n = 0;
    const char* b = step.data() + prefix.size();
    const char* e = step.data() + step.size();
    if (auto r = std::from_chars(b, e, n); r.ec == std::errc() && r.ptr == e) return {n, ""};
  }
  return {INT64_MAX, step};
}

/// Matches one process group's collectives across ranks and adds the waits to the job. `calls[i]` are the
/// group's calls of job.ranks[i] (empty when that rank has none).
void match_group(const std::string& group, const std::vector<std::vector<const CollectiveCall*>>& calls,
                 JobAnalysis& job, std::map<std::string, JobStep>& steps,
                 std::map<std::string, std::map<std::size_t, std::int64_t>>& last_in_step) {
  std::vector<std::size_t> members;
  for (std::size_t i = 0; i < calls.size(); ++i)
    if (!calls[i].empty()) members.push_back(i);
  if (members.size() < 2) return;
  bool by_seq = true;
  for (auto i : members)
    for (const auto* c : calls[i]) by_seq = by_seq && c->seq.has_value();
  // Instance key → the call of each member rank.
  std::map<std::int64_t, std::vector<const CollectiveCall*>> instances;
  if (by_seq) {
    for (std::size_t m = 0; m < members.size(); ++m)
      for (const auto* c : calls[members[m]]) {
        auto& slot = instances[*c->seq];
        slot.resize(members.size(), nullptr);
        if (slot[m] == nullptr) slot[m] = c;
      }
  } else {
    const std::size_t n = calls[members[0]].size();
    for (auto i : members)
      if (calls[i].size() != n) {
        job.notes.push_back(
            fmt::format("process group {}: rank {} has {} collectives and rank {} has {}, and they carry no "
                        "sequence number: "
                        "the traces do not cover the same collectives (profile the same steps on every "
                        "rank); not matched",
                        group, job.ranks[members[0]].rank, n, job.ranks[i].rank, calls[i].size()));
        return;
      }
    for (std::size_t k = 0; k < n; ++k) {
      auto& slot = instances[static_cast<std::int64_t>(k)];
      for (auto i : members) slot.push_back(calls[i][k]);
    }
  }
  // Every instance must be the same collective on every rank, or the order is not the same collective.
  for (const auto& [key, slot] : instances) {
    const CollectiveCall* first = nullptr;
    for (std::size_t m = 0; m < slot.size(); ++m) {
      const auto* c = slot[m];
      if (c == nullptr) continue;
      if (first == nullptr) {
        first = c;
        continue;
      }
      const bool same_size = !(c->name == "allreduce" || c->name == "broadcast") || !c->nelems ||
                             !first->nelems || *c->nelems == *first->nelems;
      if (c->name != first->name || !same_size) {
        job.notes.push_back(
            fmt::format("process group {}: collective {} {} is {} ({} elements) on one rank and {} ({} "
                        "elements) on rank {}: "
                        "the ranks' collectives do not line up; not matched",
                        group, by_seq ? "seq" : "#", key, first->name, first->nelems.value_or(-1), c->name,
                        c->nelems.value_or(-1), job.ranks[members[m]].rank));
        return;
      }
    }
  }
  std::int64_t group_size = 0;
  for (auto i : members)
    for (const auto* c : calls[i]) group_size = std::max(group_size, c->group_size.value_or(0));
  if (group_size > static_cast<std::int64_t>(members.size()))
    job.notes.push_back(
        fmt::format("process group {} has {} ranks and {} are traced here: waits are for the last "
                    "of the traced ranks",
                    group, group_size, members.size()));
  for (const auto& [key, slot] : instances) {
    std::size_t present = 0, last = SIZE_MAX;
    for (std::size_t m = 0; m < slot.size(); ++m) {
      if (slot[m] == nullptr) continue;
      ++present;
      if (last == SIZE_MAX || slot[m]->start_ns > slot[last]->start_ns) last = m;
    }
    if (present < 2) continue;
    ++job.instances;
    bool anyone_waited = false;
    for (const auto* c : slot)
      anyone_waited = anyone_waited || (c != nullptr && c->start_ns < slot[last]->start_ns);
    const std::int64_t arrival = slot[last]->start_ns;
    const std::size_t last_rank = members[last];
    std::int64_t caused = 0;
    for (std::size_t m = 0; m < slot.size(); ++m) {
      const auto* c = slot[m];
      if (c == nullptr) continue;
      JobRank& r = job.ranks[members[m]];
      ++r.collectives;
      // An early rank's kernel runs from its own start and waits for the last one; it cannot have waited
      // longer than it ran (clocks of different hosts that disagree).
      const std::int64_t wait = std::clamp<std::int64_t>(arrival - c->start_ns, 0, c->dur_ns);
      r.wait_suffered_ns += wait;
      caused += wait;
      const std::string step = c->step.value_or(kOutsideSteps);
      JobStep& s = steps[step];
      s.step = step;
      s.wait_by_rank_ns.resize(job.ranks.size(), 0);
      s.wait_by_rank_ns[members[m]] += wait;
      s.wait_ns += wait;
    }
    job.wait_ns += caused;
    if (!anyone_waited) continue;  // every rank arrived at the same nanosecond: nobody was last
    JobRank& lr = job.ranks[last_rank];
    ++lr.arrivals_last;
    lr.wait_caused_ns += caused;
    ++last_in_step[slot[last]->step.value_or(kOutsideSteps)][last_rank];
  }
}

std::optional<JobAnalysis> analyze_job(const std::string& group, std::vector<const FileAnalysis*> files) {
  JobAnalysis job;
  job.group = group;
  std::vector<const FileAnalysis*> ranked;
  std::set<std::int64_t> seen;
  for (const auto* f : files) {
    if (!f->rank) {
      job.notes.push_back(
          fmt::format("{}: no rank (distributedInfo.rank): not part of the job view", f->file));
      continue;
    }
    if (!seen.insert(*f->rank).second) {
      job.notes.push_back(fmt::format("{}: rank {} again (another file has it): not part of the job view",
                                      f->file, *f->rank));
      continue;
    }
    ranked.push_back(f);
  }
  if (ranked.size() < 2) return std::nullopt;
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto* a, const auto* b) { return *a->rank < *b->rank; });
  std::int64_t start = INT64_MAX, end = INT64_MIN;
  for (const auto* f : ranked)
    for (const auto& d : f->devices) {
      start = std::min(start, d.window_start_ns);
      end = std::max(end, d.window_start_ns + d.window_ns);
    }
  job.window_start_ns = start;
  job.window_ns = end - start;
  for (const auto* f : ranked) {
    JobRank r;
    r.rank = *f->rank;
    r.file = f->file;
    r.gpus = static_cast<std::int64_t>(f->devices.size());
    for (const auto& d : f->devices) r.busy_ns += d.busy_ns;
    r.idle_ns = r.gpus * job.window_ns - r.busy_ns;
    r.collective_metadata = !f->collectives.empty();
    job.gpus += r.gpus;
    job.busy_ns += r.busy_ns;
    if (!r.collective_metadata)
      job.notes.push_back(f->collective_kernels_without_metadata > 0
                              ? fmt::format("rank {}: no collective metadata (its {} NCCL kernels name no "
                                            "process group): not matched",
                                            r.rank, f->collective_kernels_without_metadata)
                              : fmt::format("rank {}: no collective kernels in its trace", r.rank));
    job.ranks.push_back(std::move(r));
  }
  job.gpu_ns = job.gpus * job.window_ns;

  std::set<std::string> groups;
  for (const auto* f : ranked)
    for (const auto& c : f->collectives) groups.insert(c.group);
  std::map<std::string, JobStep> steps;
  std::map<std::string, std::map<std::size_t, std::int64_t>> last_in_step;
  for (const auto& g : groups) {
    std::vector<std::vector<const CollectiveCall*>> calls(ranked.size());
    for (std::size_t i = 0; i < ranked.size(); ++i)
      for (const auto& c : ranked[i]->collectives)
        if (c.group == g) calls[i].push_back(&c);
    match_group(g, calls, job, steps, last_in_step);
  }
  for (auto& [name, s] : steps) {
    s.wait_by_rank_ns.resize(job.ranks.size(), 0);
    const auto& lasts = last_in_step[name];
    std::int64_t best = 0;
    for (const auto& [rank_index, count] : lasts)
      if (count > best) {
        best = count;
        s.last_rank = job.ranks[rank_index].rank;
      }
    job.steps.push_back(std::move(s));
  }
  std::stable_sort(job.steps.begin(), job.steps.end(), [](const JobStep& a, const JobStep& b) {
    return step_order(a.step) < step_order(b.step);
  });
  return job;
}

}  // namespace

std::vector<JobAnalysis> analyze_jobs(const std::vector<FileAnalysis>& files) {
  std::map<std::string, std::vector<const FileAnalysis*>> groups;
  std::vector<std::string> order;
  for (const auto& f : files) {
    if (f.skipped || f.devices.empty()) continue;
    auto [it, inserted] = groups.try_emplace(f.group);
    if (inserted) order.push_back(f.group);
    it->second.push_back(&f);
  }
  std::vector<JobAnalysis> jobs;
  for (const auto& g : order) {
    if (groups[g].size() < 2) continue;
    if (auto job = analyze_job(g, groups[g])) jobs.push_back(std::move(*job));
  }
  return jobs;
}

}  // namespace gm::trace
