// The trace page (`gpumeter trace --html`), built from the typed analyses: findings first, then per device
// the temporal split, the per-step split, a one-step stream timeline and the top kernels and operators; for
// folders of rank traces the job view (straggler cost) comes before the devices.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "findings/priced_trace.h"
#include "report/html.h"
#include "report/html_page.h"
#include "util/units.h"

namespace gm::report {
namespace {

using findings::DeviceCosts;
using findings::UsdOrNone;
using nlohmann::json;
using trace::DeviceAnalysis;
using trace::FileAnalysis;

constexpr std::size_t kTopItems = 10;
/// Characters of a bar name that fit its 340 px column (web/src/report.css, 12 px monospace).
constexpr std::size_t kBarNameChars = 46;
constexpr std::size_t kTableRows = 30;

std::string ms(std::int64_t ns) {
  return fmt::format("{:.3f} ms", static_cast<double>(ns) / 1e6);
}

/// Files named relative to the folder they share, so that names stay short.
std::string common_folder(const std::vector<FileAnalysis>& files) {
  std::string common;
  bool first = true;
  for (const auto& f : files) {
    if (f.devices.empty()) continue;
    if (first) {
      const auto slash = f.file.rfind('/');
      common = slash == std::string::npos ? std::string() : f.file.substr(0, slash + 1);
      first = false;
    }
    while (!common.empty() && f.file.compare(0, common.size(), common) != 0) {
      common.pop_back();
      const auto slash = common.rfind('/');
      common.erase(slash == std::string::npos ? 0 : slash + 1);
    }
  }
  return common;
}

/// A figure's time and, when priced, its cost ("1.234 ms · $0.01").
std::string ms_and_money(std::int64_t ns, const UsdOrNone& usd) {
  return usd ? fmt::format("{} · {}", ms(ns), util::format_usd(*usd)) : ms(ns);
}

/// A table of the largest buckets: name, class (kernels), count, attributed time, share, cost.
json bucket_table(const std::string& title, const std::vector<trace::Bucket>& buckets,
                  const std::vector<UsdOrNone>& usd, bool kernels, std::int64_t busy_ns) {
  json rows = json::array();
  for (std::size_t i = 0; i < buckets.size() && i < kTableRows; ++i) {
    const auto& b = buckets[i];
    json row = json::array({b.name});
    if (kernels) row.push_back(b.klass);
    row.push_back(std::to_string(b.count));
    row.push_back(ms(b.attributed_ns));
    row.push_back(busy_ns > 0 ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(b.attributed_ns) /
                                                           static_cast<double>(busy_ns))
                              : "-");
    row.push_back(util::format_usd_or(usd[i]));
    rows.push_back(std::move(row));
  }
  json header = kernels ? json::array({"kernel", "class", "count", "time", "share of busy", "cost"})
                        : json::array({"operator", "count", "time", "share of busy", "cost"});
  return {{"title", title}, {"header", header}, {"rows", rows}};
}

void device_charts(const DeviceAnalysis& d, const DeviceCosts& c, const std::string& id,
                   const std::string& who, json& charts, json& tables) {
  const std::vector<std::string> classes = {"compute", "communication", "memory", "idle"};
  {
    // Idle split by what the host was doing (docs/trace.md "Idle gaps").
    const std::vector<std::string> rows = {"compute",
                                           "communication",
                                           "memory",
                                           "idle: host dispatching operators",
                                           "idle: host waiting for input",
                                           "idle: in a sync call",
                                           "idle: other (queued work, graphs)"};
    const std::vector<std::pair<std::int64_t, UsdOrNone>> ns = {
        {d.compute_ns, c.compute_usd},       {d.communication_ns, c.communication_usd},
        {d.memory_ns, c.memory_usd},         {d.idle_dispatch_ns, c.idle_dispatch_usd},
        {d.idle_input_ns, c.idle_input_usd}, {d.idle_host_sync_ns, c.idle_host_sync_usd},
        {d.idle_other_ns, c.idle_other_usd}};
    std::vector<double> values;
    std::vector<std::string> text;
    for (const auto& [v, usd] : ns) {
      values.push_back(static_cast<double>(v) / 1e6);
      text.push_back(ms_and_money(v, usd));
    }
    charts.push_back(
        html::hbar_chart("split-" + id, "Where the window went: " + who, rows, values, "ms", text));
  }
  if (!d.step_split.empty()) {
    std::vector<std::string> names;
    std::vector<std::vector<double>> values(4);
    for (const auto& s : d.step_split) {
      names.push_back(s.name);
      const std::int64_t v[4] = {s.compute_ns, s.communication_ns, s.memory_ns,
                                 std::max<std::int64_t>(0, s.idle_ns)};
      for (int k = 0; k < 4; ++k)
        values[static_cast<std::size_t>(k)].push_back(static_cast<double>(v[k]) / 1e6);
    }
    charts.push_back(html::stacked_chart("steps-" + id, "Per step: what the GPU did during each step: " + who,
                                         "ms", names, classes, values));
  }
  if (d.timeline && !d.timeline->spans.empty()) {
    const auto& tl = *d.timeline;
    std::vector<html::TimelineItem> items;
    items.reserve(tl.spans.size());
    for (const auto& s : tl.spans)
      items.push_back({tl.streams[s.stream], s.start_ns, s.dur_ns, std::string(s.klass), tl.names[s.name]});
    std::string title =
        fmt::format("Streams during {} ({}, the median step): {}", tl.step, ms(tl.step_ns), who);
    if (tl.spans_left_out > 0) title += fmt::format(" (first {} activities)", tl.spans.size());
    charts.push_back(html::timeline_chart("timeline-" + id, title, tl.step_ns, items));
  }
  for (const bool kernels : {true, false}) {
    const auto& buckets = kernels ? d.kernels : d.operators;
    const auto& usd = kernels ? c.kernels.attributed_usd : c.operators.attributed_usd;
    if (buckets.empty()) continue;
    std::vector<std::string> full, texts;
    std::vector<double> vals;
    for (std::size_t i = 0; i < buckets.size() && i < kTopItems; ++i) {
      full.push_back(buckets[i].name);
      vals.push_back(static_cast<double>(buckets[i].attributed_ns) / 1e6);
      texts.push_back(usd[i] ? util::format_usd(*usd[i]) : ms(buckets[i].attributed_ns));
    }
    // Short names that tell the rows apart (two instantiations of one template keep the argument that
    // differs), as in the terminal; the whole name on hover.
    const std::string what = kernels ? "kernels" : "operators";
    // Work queued before the profiler's window has no operator: say what is left out of that chart.
    const std::string left_out =
        !kernels && d.before_window.count > 0
            ? fmt::format(" (not shown: {} activities launched before the profiler's window, {})",
                          d.before_window.count, ms(d.before_window.attributed_ns))
            : std::string();
    charts.push_back(html::hbar_chart(
        what + "-" + id, "Top " + what + (c.window_usd ? " by cost: " : " by time: ") + who + left_out,
        trace::short_names(full, kBarNameChars), vals, "ms", texts, full));
    tables.push_back(
        bucket_table((kernels ? "Kernels: " : "Operators: ") + who, buckets, usd, kernels, d.busy_ns));
  }
}

void job_view(const trace::JobAnalysis& job, const findings::JobCosts& c, std::size_t index, json& summary,
              json& charts, json& tables, json& notes) {
  const bool matched = job.instances > 0;
  std::string line = fmt::format("{} ranks, window {}, {} GPUs, cost {}", job.ranks.size(), ms(job.window_ns),
                                 job.gpus, util::format_usd_or(c.gpu_usd));
  line += matched ? fmt::format("; straggler wait {} of GPU time ({})", ms(job.wait_ns),
                                util::format_usd_or(c.wait_usd))
                  : std::string("; no collective matched across ranks");
  summary.push_back({"job " + job.group, line});
  std::vector<std::string> cats;
  std::vector<double> caused;
  std::vector<std::string> caused_text;
  json rows = json::array();
  for (std::size_t i = 0; i < job.ranks.size(); ++i) {
    const auto& r = job.ranks[i];
    const auto& caused_usd = c.rank_wait_caused_usd[i];
    const bool meta = r.collective_metadata;
    rows.push_back({std::to_string(r.rank), std::to_string(r.gpus), ms(r.busy_ns), ms(r.idle_ns),
                    meta ? std::to_string(r.collectives) : "no collective metadata",
                    meta ? std::to_string(r.arrivals_last) : "-", meta ? ms(r.wait_suffered_ns) : "-",
                    meta ? ms(r.wait_caused_ns) : "-", meta ? util::format_usd_or(caused_usd) : "-"});
    if (meta) {
      cats.push_back("rank " + std::to_string(r.rank));
      caused.push_back(static_cast<double>(r.wait_caused_ns) / 1e6);
      caused_text.push_back(ms_and_money(r.wait_caused_ns, caused_usd));
    }
  }
  const std::string id = std::to_string(index);
  if (matched && !cats.empty())
    charts.push_back(html::hbar_chart("job-" + id,
                                      "Wait each rank caused the others (straggler): " + job.group, cats,
                                      caused, "ms", caused_text));
  if (matched && !job.steps.empty()) {
    std::vector<std::string> names, text;
    std::vector<double> wait;
    for (std::size_t i = 0; i < job.steps.size(); ++i) {
      const auto& s = job.steps[i];
      names.push_back(s.step + (s.last_rank ? fmt::format(" (last: rank {})", *s.last_rank) : ""));
      wait.push_back(static_cast<double>(s.wait_ns) / 1e6);
      text.push_back(ms_and_money(s.wait_ns, c.step_wait_usd[i]));
    }
    charts.push_back(html::hbar_chart("job-" + id + "-steps",
                                      "Straggler wait per step, every rank: " + job.group, names, wait, "ms",
                                      text));
  }
  tables.push_back(
      {{"title", "Job " + job.group + ": ranks"},
       {"header", {"rank", "GPUs", "busy", "idle", "collectives", "last", "waited", "caused", "caused $"}},
       {"rows", rows}});
  for (const auto& n : job.notes) notes.push_back("job " + job.group + ": " + n);
}

/// The findings of every device as page cards. A kind found on several devices (the ranks of one job
/// usually share them) becomes one card: the highest severity, the sum of the money, the largest case.
json grouped_finding_cards(
    const std::vector<std::pair<std::string, std::vector<findings::Finding>>>& by_device) {
  std::vector<std::string> kinds;
  std::map<std::string, std::vector<std::pair<const std::string*, const findings::Finding*>>> by_kind;
  for (const auto& [who, fs] : by_device)
    for (const auto& f : fs) {
      if (!by_kind.count(f.kind)) kinds.push_back(f.kind);
      by_kind[f.kind].emplace_back(&who, &f);
    }
  json cards = json::array();
  for (const auto& kind : kinds) {
    const auto& cases = by_kind[kind];
    if (cases.size() == 1) {
      html::add_finding_cards(cards, {*cases[0].second}, *cases[0].first);
      continue;
    }
    const findings::Finding* largest = cases[0].second;
    findings::Finding sum = *largest;
    sum.cost_nano_usd.reset();
    sum.nano_usd_per_1k_steps.reset();
    sum.nano_usd_per_month.reset();
    auto add = [](std::optional<std::int64_t>& to, const std::optional<std::int64_t>& v) {
      if (v) to = to.value_or(0) + *v;
    };
    for (const auto& [who, f] : cases) {
      if (static_cast<int>(f->severity) > static_cast<int>(sum.severity)) sum.severity = f->severity;
      if (f->at_stake_ns > largest->at_stake_ns) largest = f;
      add(sum.cost_nano_usd, f->cost_nano_usd);
      add(sum.nano_usd_per_1k_steps, f->nano_usd_per_1k_steps);
      add(sum.nano_usd_per_month, f->nano_usd_per_month);
    }
    const std::string* largest_who = cases[0].first;
    for (const auto& [who, f] : cases)
      if (f == largest) largest_who = who;
    sum.summary =
        fmt::format("on {} devices; the largest, {}: {}", cases.size(), *largest_who, largest->summary);
    sum.action = largest->action;
    html::add_finding_cards(cards, {sum}, fmt::format("{} devices, money summed", cases.size()));
  }
  return cards;
}

}  // namespace

Result<std::string> render_trace_html(const std::vector<trace::FileAnalysis>& files,
                                      const TraceHtmlOptions& options) {
  return render_trace_html(findings::price_trace(
      files, {options.price_micros_per_gpu_hour, options.price_source}, options.catalog));
}

Result<std::string> render_trace_html(const findings::PricedTrace& t) {
  const std::vector<trace::FileAnalysis>& files = t.files;
  const std::optional<MicroUsd>& price = t.price.micros_per_gpu_hour;
  json spec;
  spec["title"] = "gpumeter trace";
  spec["subtitle"] = !price                   ? std::string("figures in time only (no price)")
                     : t.price.source.empty() ? fmt::format("priced at {}/GPU-h", util::format_micros(*price))
                                              : "priced: " + t.price.source;
  json notes = json::array(), charts = json::array(), summary = json::array(), tables = json::array();
  for (const auto& f : files)
    if (f.skipped) notes.push_back(f.file + ": skipped: " + *f.skipped);
  const std::string common = common_folder(files);
  if (!common.empty()) notes.push_back("files under " + common);

  // The job comes first: it is what a folder of ranks is about.
  for (std::size_t j = 0; j < t.jobs.size(); ++j)
    job_view(t.jobs[j], t.job_costs[j], j, summary, charts, tables, notes);

  std::vector<std::pair<std::string, std::vector<findings::Finding>>> device_findings;
  std::size_t index = 0;
  for (std::size_t fi = 0; fi < files.size(); ++fi) {
    const trace::FileAnalysis& f = files[fi];
    const findings::FileCosts& fc = t.costs[fi];
    std::string file = f.file;
    if (common.size() < file.size()) file.erase(0, common.size());
    for (std::size_t di = 0; di < f.devices.size(); ++di) {
      const DeviceAnalysis& d = f.devices[di];
      const DeviceCosts& c = fc.devices[di];
      const std::string who = f.rank ? fmt::format("{} · rank {} · device {}", file, *f.rank, d.device)
                                     : fmt::format("{} · device {}", file, d.device);
      std::string line =
          fmt::format("window {}, busy {}, idle {}", ms(d.window_ns), ms(d.busy_ns), ms(d.idle_ns));
      if (price)
        line += fmt::format(", cost {} (idle {})", util::format_usd_or(c.window_usd),
                            util::format_usd_or(c.idle_usd));
      if (d.step_ns.count > 0)
        line += fmt::format(", {} steps of {:.3f} ms", d.step_ns.count, d.step_ns.mean / 1e6);
      if (d.gpu_name) line += ", " + *d.gpu_name;
      summary.push_back({who, line});
      device_findings.emplace_back(who, c.findings);
      device_charts(d, c, std::to_string(index), who, charts, tables);
      ++index;
    }
    if (f.devices.empty() && fc.host && !fc.host->findings.empty())
      // a CPU-only trace: what its operators alone show (unfused attention)
      device_findings.emplace_back(file + " · host (CPU only)", fc.host->findings);
    if (f.partial) notes.push_back(f.file + ": PARTIAL results (the file is damaged): " + f.partial_error);
  }
  const findings::TraceTotals& all = t.totals;
  const std::size_t devices = all.devices;
  const std::int64_t window_ns = all.window_ns, idle_ns = all.idle_ns;
  if (devices == 0) notes.push_back("no device with GPU activity in these traces");
  const json finding_cards = grouped_finding_cards(device_findings);

  json cards = json::array(
      {{{"label", devices == 1 ? "GPU device" : "GPU devices"}, {"value", std::to_string(devices)}},
       {{"label", "cost of the windows"}, {"value", util::format_usd_or(all.window_usd, "no price")}},
       {{"label", "busy GPU time"}, {"value", ms(all.busy_ns)}},
       {{"label", "idle"},
        {"value", window_ns > 0 ? fmt::format("{:.0f}%", 100.0 * static_cast<double>(idle_ns) /
                                                             static_cast<double>(window_ns))
                                : "-"},
        {"tone", window_ns > 0 && idle_ns * 4 > window_ns ? "bad" : ""}},
       {{"label", "findings"},
        {"value", std::to_string(finding_cards.size())},
        {"tone", finding_cards.empty() ? "good" : "bad"}}});
  if (all.straggler_ns)
    cards.push_back(
        {{"label", "straggler cost"},
         {"value", all.straggler_usd ? util::format_usd(*all.straggler_usd) : ms(*all.straggler_ns)}});
  spec["cards"] = cards;
  spec["findings"] = finding_cards;
  spec["summary"] = summary;
  spec["notes"] = notes;
  spec["charts"] = charts;
  spec["tables"] = tables;
  return html::page(spec);
}

}  // namespace gm::report
