// The job view of `gpumeter trace FOLDER` (a folder of rank traces): terminal text and the --json `job` keys.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "findings/priced_trace.h"
#include "report/detail/trace_text.h"
#include "report/trace_render.h"
#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::report {

using util::json_or_null;

std::string job_text(const findings::PricedTrace& priced) {
  std::string out;
  for (std::size_t ji = 0; ji < priced.jobs.size(); ++ji) {
    const trace::JobAnalysis& job = priced.jobs[ji];
    const findings::JobCosts& c = priced.job_costs[ji];
    out += fmt::format("job {} — {} ranks, {} GPUs: window {} ms, {} GPU-hours held", job.group,
                       job.ranks.size(), job.gpus, detail::ms_text(job.window_ns),
                       fmt::format("{:.6f}", static_cast<double>(job.gpu_ns) / 3.6e12));
    if (c.gpu_usd) out += fmt::format(", cost {}", util::format_usd(*c.gpu_usd));
    out += "\n";
    if (job.instances > 0) {
      out += fmt::format(
          "straggler wait: {} ms of GPU time in {} collectives waiting for the last rank ({:.1f}% of "
          "the GPU time held)",
          detail::ms_text(job.wait_ns), job.instances,
          job.gpu_ns > 0 ? 100.0 * static_cast<double>(job.wait_ns) / static_cast<double>(job.gpu_ns) : 0.0);
      if (c.wait_usd) out += fmt::format(", {}", util::format_usd(*c.wait_usd));
      out += "\n";
      std::vector<std::size_t> by_last;
      for (std::size_t i = 0; i < job.ranks.size(); ++i)
        if (job.ranks[i].arrivals_last > 0) by_last.push_back(i);
      std::stable_sort(by_last.begin(), by_last.end(), [&](std::size_t a, std::size_t b) {
        const auto &ra = job.ranks[a], &rb = job.ranks[b];
        return ra.arrivals_last != rb.arrivals_last ? ra.arrivals_last > rb.arrivals_last
                                                    : ra.wait_caused_ns > rb.wait_caused_ns;
      });
      for (std::size_t i = 0; i < by_last.size() && i < 3; ++i) {
        const auto& r = job.ranks[by_last[i]];
        const auto& caused_usd = c.rank_wait_caused_usd[by_last[i]];
        out += fmt::format("  {} rank {}: last in {} of {} collectives; the others waited {} ms for it{}\n",
                           i == 0 ? "most often last:" : "            then", r.rank, r.arrivals_last,
                           r.collectives, detail::ms_text(r.wait_caused_ns),
                           caused_usd ? fmt::format(" ({})", util::format_usd(*caused_usd)) : "");
      }
    } else {
      const bool any_metadata = std::any_of(job.ranks.begin(), job.ranks.end(),
                                            [](const trace::JobRank& r) { return r.collective_metadata; });
      out += any_metadata ? "straggler wait: unknown, no collective matched across ranks (see the notes)\n"
                          : "straggler wait: unknown, no rank's collective kernels carry collective metadata "
                            "(process group, sequence number)\n";
    }
    util::TextTable t;
    t.header({"rank", "GPUs", "busy ms", "idle ms", "collectives", "last", "waited ms", "waited $",
              "caused ms", "caused $"},
             {util::TextTable::Align::right, util::TextTable::Align::right, util::TextTable::Align::right,
              util::TextTable::Align::right, util::TextTable::Align::right, util::TextTable::Align::right,
              util::TextTable::Align::right, util::TextTable::Align::right, util::TextTable::Align::right,
              util::TextTable::Align::right});
    for (std::size_t i = 0; i < job.ranks.size(); ++i) {
      const auto& r = job.ranks[i];
      if (!r.collective_metadata) {
        t.row({std::to_string(r.rank), std::to_string(r.gpus), detail::ms_text(r.busy_ns),
               detail::ms_text(r.idle_ns), "no collective metadata", "-", "-", "-", "-", "-"});
        continue;
      }
      t.row({std::to_string(r.rank), std::to_string(r.gpus), detail::ms_text(r.busy_ns),
             detail::ms_text(r.idle_ns), std::to_string(r.collectives), std::to_string(r.arrivals_last),
             detail::ms_text(r.wait_suffered_ns), util::format_usd_or(c.rank_wait_suffered_usd[i]),
             detail::ms_text(r.wait_caused_ns), util::format_usd_or(c.rank_wait_caused_usd[i])});
    }
    out += t.render();
    if (!job.steps.empty()) {
      out += "straggler wait by step:";
      std::size_t shown = 0;
      for (const auto& s : job.steps) {
        if (shown++ == 8) {
          out += fmt::format("; … ({} steps)", job.steps.size());
          break;
        }
        out += fmt::format("{} {} {} ms", shown == 1 ? "" : ";", s.step, detail::ms_text(s.wait_ns));
        if (const auto& usd = c.step_wait_usd[shown - 1]) out += fmt::format(" {}", util::format_usd(*usd));
        if (s.last_rank) out += fmt::format(" (last: rank {})", *s.last_rank);
      }
      out += "\n";
    }
    for (const auto& n : job.notes) out += "note: " + n + "\n";
    out += "\n";
  }
  return out;
}

nlohmann::json job_json(const trace::JobAnalysis& job, const findings::JobCosts& c) {
  nlohmann::json j;
  j["group"] = job.group;
  j["window_start_ns"] = job.window_start_ns;
  j["window_ns"] = job.window_ns;
  j["gpus"] = job.gpus;
  j["gpu_ns"] = job.gpu_ns;
  j["busy_ns"] = job.busy_ns;
  j["cost_usd"] = json_or_null(c.gpu_usd);
  j["collectives_matched"] = job.instances;
  // No collective matched: the straggler figures are unknown (null), not zero.
  j["straggler_wait_ns"] = job.instances > 0 ? nlohmann::json(job.wait_ns) : nlohmann::json(nullptr);
  j["straggler_cost_usd"] = job.instances > 0 ? json_or_null(c.wait_usd) : nlohmann::json(nullptr);
  auto ranks = nlohmann::json::array();
  for (std::size_t i = 0; i < job.ranks.size(); ++i) {
    const auto& r = job.ranks[i];
    // A rank whose collectives carry no metadata has no straggler figures (null), not zeros.
    const bool m = r.collective_metadata;
    auto n = [m](std::int64_t v) { return m ? nlohmann::json(v) : nlohmann::json(nullptr); };
    ranks.push_back(
        {{"rank", r.rank},
         {"file", r.file},
         {"gpus", r.gpus},
         {"busy_ns", r.busy_ns},
         {"idle_ns", r.idle_ns},
         {"collective_metadata", m},
         {"collectives", n(r.collectives)},
         {"arrivals_last", n(r.arrivals_last)},
         {"wait_caused_ns", n(r.wait_caused_ns)},
         {"wait_caused_cost_usd", m ? json_or_null(c.rank_wait_caused_usd[i]) : nlohmann::json(nullptr)},
         {"wait_suffered_ns", n(r.wait_suffered_ns)},
         {"wait_suffered_cost_usd",
          m ? json_or_null(c.rank_wait_suffered_usd[i]) : nlohmann::json(nullptr)}});
  }
  j["ranks"] = std::move(ranks);
  auto steps = nlohmann::json::array();
  for (std::size_t si = 0; si < job.steps.size(); ++si) {
    const auto& s = job.steps[si];
    auto by_rank = nlohmann::json::array();
    for (std::size_t i = 0; i < s.wait_by_rank_ns.size() && i < job.ranks.size(); ++i)
      by_rank.push_back({{"rank", job.ranks[i].rank},
                         {"wait_ns", s.wait_by_rank_ns[i]},
                         {"cost_usd", json_or_null(c.step_rank_wait_usd[si][i])}});
    steps.push_back({{"step", s.step},
                     {"wait_ns", s.wait_ns},
                     {"cost_usd", json_or_null(c.step_wait_usd[si])},
                     {"last_rank", json_or_null(s.last_rank)},
                     {"ranks", std::move(by_rank)}});
  }
  j["steps"] = std::move(steps);
  j["notes"] = job.notes;
  return j;
}

}  // namespace gm::report
