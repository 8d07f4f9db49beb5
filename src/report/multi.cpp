#include "report/multi.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "report/run_report.h"
#include "util/csv.h"
#include "util/json.h"
#include "util/table.h"
#include "util/units.h"

namespace gm::report {

using util::json_or_null;

Result<GroupBy> parse_group_by(std::string_view text) {
  GroupBy by;
  if (text == "user") {
    by.kind = GroupBy::Kind::user;
  } else if (text == "gpu") {
    by.kind = GroupBy::Kind::gpu;
  } else if (text == "day") {
    by.kind = GroupBy::Kind::day;
  } else if (text == "command") {
    by.kind = GroupBy::Kind::command;
  } else if (text == "host") {
    by.kind = GroupBy::Kind::host;
  } else if (text == "slurm-account" || text == "partition" || text == "slurm-partition") {
    // Runs the Slurm epilog recorded (record-job) carry these labels.
    by.kind = GroupBy::Kind::label;
    by.label_key = text == "slurm-account" ? "slurm.account" : "slurm.partition";
  } else if (text.starts_with("label:") && text.size() > 6) {
    by.kind = GroupBy::Kind::label;
    by.label_key = std::string(text.substr(6));
  } else {
    return make_error(ErrorKind::usage,
                      "--by '" + std::string(text) +
                          "': expected user, label:KEY, gpu, day, command, host, slurm-account or partition");
  }
  return by;
}

std::string group_by_name(const GroupBy& by) {
  switch (by.kind) {
    case GroupBy::Kind::none:
      return "none";
    case GroupBy::Kind::user:
      return "user";
    case GroupBy::Kind::label:
      return "label:" + by.label_key;
    case GroupBy::Kind::gpu:
      return "gpu";
    case GroupBy::Kind::day:
      return "day";
    case GroupBy::Kind::command:
      return "command";
    case GroupBy::Kind::host:
      return "host";
  }
  return "none";
}

namespace {
bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
int to_int(std::string_view s) {
  int v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return v;
}
}  // namespace

Result<std::int64_t> parse_date_utc(std::string_view text, std::string_view flag) {
  auto bad = [&] {
    return make_error(ErrorKind::usage,
                      std::string(flag) + " '" + std::string(text) + "': expected a date YYYY-MM-DD");
  };
  if (text.size() != 10 || text[4] != '-' || text[7] != '-') return bad();
  auto ys = text.substr(0, 4), ms = text.substr(5, 2), ds = text.substr(8, 2);
  if (!all_digits(ys) || !all_digits(ms) || !all_digits(ds)) return bad();
  using namespace std::chrono;
  year_month_day ymd{year{to_int(ys)}, month{static_cast<unsigned>(to_int(ms))},
                     day{static_cast<unsigned>(to_int(ds))}};
  if (!ymd.ok()) return bad();
  return static_cast<std::int64_t>(sys_days{ymd}.time_since_epoch().count()) * 86'400'000;
}

Result<std::int64_t> parse_time_point(std::string_view text, std::int64_t now_unix_ms,
                                      std::string_view flag) {
  text = util::trim(text);
  if (text.size() >= 10 && text[4] == '-') {
    GM_TRY(std::int64_t day_ms, parse_date_utc(text.substr(0, 10), flag));
    if (text.size() == 10) return day_ms;
    std::string_view rest = text.substr(10);
    if ((rest.front() == 'T' || rest.front() == ' ') && (rest.size() == 6 || rest.size() == 9)) {
      auto hh = rest.substr(1, 2), mm = rest.substr(4, 2);
      std::string_view ss = rest.size() == 9 ? rest.substr(7, 2) : std::string_view("00");
      if (rest[3] == ':' && (rest.size() == 6 || rest[6] == ':') && all_digits(hh) && all_digits(mm) &&
          all_digits(ss) && to_int(hh) < 24 && to_int(mm) < 60 && to_int(ss) < 60)
        return day_ms + (to_int(hh) * 3600 + to_int(mm) * 60 + to_int(ss)) * 1000LL;
    }
    return make_error(ErrorKind::usage,
                      std::string(flag) + " '" + std::string(text) +
                          "': expected a duration (7d, 12h), YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]");
  }
  auto d = util::parse_duration_ms(text);
  if (!d)
    return make_error(ErrorKind::usage,
                      std::string(flag) + " '" + std::string(text) +
                          "': expected a duration (7d, 12h), YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]");
  return now_unix_ms - *d;
}

std::string format_date_utc(std::int64_t unix_ms) {
  using namespace std::chrono;
  auto days =
      sys_days{std::chrono::days{unix_ms >= 0 ? unix_ms / 86'400'000 : (unix_ms - 86'399'999) / 86'400'000}};
  year_month_day ymd{days};
  return fmt::format("{:04}-{:02}-{:02}", static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                     static_cast<unsigned>(ymd.day()));
}

std::string format_time_utc(std::int64_t unix_ms) {
  std::int64_t day_ms =
      unix_ms >= 0 ? unix_ms / 86'400'000 * 86'400'000 : (unix_ms - 86'399'999) / 86'400'000 * 86'400'000;
  std::int64_t s = (unix_ms - day_ms) / 1000;
  return fmt::format("{} {:02}:{:02}:{:02}", format_date_utc(unix_ms), s / 3600, (s % 3600) / 60, s % 60);
}

std::optional<double> GroupTotals::mean_util_pct() const {
  if (util_samples <= 0) return std::nullopt;
  return util_sum_pct / static_cast<double>(util_samples);
}

Result<std::pair<std::int64_t, std::int64_t>> daily_period(const std::optional<std::string>& date,
                                                           std::int64_t now_unix_ms) {
  std::int64_t start = 0;
  if (date) {
    GM_TRY(start, parse_date_utc(*date, "--date"));
  } else {
    std::int64_t today = now_unix_ms / 86'400'000 * 86'400'000;
    start = today - 86'400'000;
  }
  return std::make_pair(start, start + 86'400'000);
}

namespace {

std::string group_key(const store::RunSummary& r, const GroupBy& by) {
  switch (by.kind) {
    case GroupBy::Kind::none:
      return "";
    case GroupBy::Kind::user:
      return r.user.empty() ? "(unknown)" : r.user;
    case GroupBy::Kind::label: {
      auto it = r.labels.find(by.label_key);
      return it == r.labels.end() ? "(no " + by.label_key + ")" : it->second;
    }
    case GroupBy::Kind::gpu:
      return r.gpu_model.empty() ? "(unknown)" : r.gpu_model;
    case GroupBy::Kind::host:
      return r.host.empty() ? "(unknown)" : r.host;
    case GroupBy::Kind::day:
      return format_date_utc(r.start_unix_ms);
    case GroupBy::Kind::command: {
      // The program, without its arguments: "python train.py --lr 3" groups as "python train.py".
      std::string_view c = r.command;
      std::size_t sp = c.find(' ');
      std::string_view prog = c.substr(0, sp);
      std::size_t slash = prog.rfind('/');
      if (slash != std::string_view::npos) prog = prog.substr(slash + 1);
      std::string key(prog);
      if (sp != std::string_view::npos &&
          (prog.starts_with("python") || prog == "torchrun" || prog == "bash" || prog == "sh" ||
           prog == "accelerate" || prog == "deepspeed")) {
        std::string_view rest = c.substr(sp + 1);
        std::string_view script = rest.substr(0, rest.find(' '));
        if (!script.empty() && script.front() != '-') key += " " + std::string(script);
      }
      return key.empty() ? "(empty)" : key;
    }
  }
  return "";
}

void add_run(GroupTotals& g, const store::RunSummary& r) {
  ++g.runs;
  if (r.stopped_by) ++g.stopped_runs;
  if (r.status == store::RunStatus::interrupted || (!r.stopped_by && r.exit_code && *r.exit_code != 0))
    ++g.failed_runs;
  g.wall_s += static_cast<double>(r.wall_ms) / 1000.0;
  g.gpu_hours += static_cast<double>(r.billed_s) * static_cast<double>(r.gpus_allocated) / 3600.0;
  g.cost_micros += r.cost_micros;
  g.idle_cost_micros += r.idle_cost_micros;
  g.unused_gpu_cost_micros += r.unused_gpu_cost_micros;
  g.energy_kwh += r.energy_j / 3.6e6;
  if (r.co2_kg) {
    g.co2_kg = g.co2_kg.value_or(0) + *r.co2_kg;
  } else {
    ++g.runs_without_co2;
  }
}

}  // namespace

Result<MultiReport> build_multi_report(const store::Ledger& ledger, const MultiOptions& options) {
  if (options.since_unix_ms && options.until_unix_ms && *options.since_unix_ms >= *options.until_unix_ms)
    return make_error(ErrorKind::usage, "--since " + format_time_utc(*options.since_unix_ms) +
                                            " is not before --until " +
                                            format_time_utc(*options.until_unix_ms));
  MultiReport rep;
  rep.since_unix_ms = options.since_unix_ms;
  rep.until_unix_ms = options.until_unix_ms;
  rep.by = options.by;
  store::RunFilter filter;
  filter.since_unix_ms = options.since_unix_ms;
  filter.until_unix_ms = options.until_unix_ms;
  GM_TRY(std::vector<store::RunSummary> runs, ledger.run_summaries(filter));
  std::erase_if(runs, [&](const store::RunSummary& r) {
    return (options.since_unix_ms && r.start_unix_ms < *options.since_unix_ms) ||
           (options.until_unix_ms && r.start_unix_ms >= *options.until_unix_ms);
  });
  std::int64_t last_end_ms = 0;
  for (const auto& r : runs) last_end_ms = std::max(last_end_ms, r.start_unix_ms + r.wall_ms + 60'000);
  std::map<std::string, GroupTotals> groups;
  std::unordered_map<std::int64_t, GroupTotals*> group_of_run;
  for (const auto& r : runs) {
    std::string key = group_key(r, options.by);
    auto& g = groups[key];
    g.key = key;
    add_run(g, r);
    add_run(rep.total, r);
    group_of_run[r.id] = &g;
  }
  if (!runs.empty()) {
    // Utilization from the per-minute rollups of the runs in the period (no per-second samples are read).
    store::RunFilter rf;
    rf.since_unix_ms = options.since_unix_ms;
    rf.until_unix_ms = last_end_ms;
    std::int64_t first_ms = runs.front().start_unix_ms, last_ms = first_ms;
    for (const auto& r : runs) {
      first_ms = std::min(first_ms, r.start_unix_ms);
      last_ms = std::max(last_ms, r.start_unix_ms + r.wall_ms);
    }
    const std::int64_t span_ms = (options.until_unix_ms ? *options.until_unix_ms : last_ms) -
                                 (options.since_unix_ms ? *options.since_unix_ms : first_ms);
    rep.bucket_ms = span_ms <= 3 * 86'400'000LL ? 3'600'000 : 86'400'000;
    // Summed per run and bucket by the database: one row per run and hour (or day), not per minute.
    GM_TRY(std::vector<store::RollupBucket> buckets, ledger.rollup_buckets(rf, rep.bucket_ms));
    std::map<std::int64_t, TimelineBucket> timeline;
    for (const auto& ru : buckets) {
      auto it = group_of_run.find(ru.run_id);
      if (it == group_of_run.end()) continue;
      auto& b = timeline[ru.start_unix_ms];
      b.start_unix_ms = ru.start_unix_ms;
      b.cost_micros += ru.cost_micros;
      b.util_samples += ru.samples;
      b.util_sum_pct += ru.utilization_sum_pct;
      b.energy_j += ru.energy_j;
      it->second->util_samples += ru.samples;
      it->second->util_sum_pct += ru.utilization_sum_pct;
      rep.total.util_samples += ru.samples;
      rep.total.util_sum_pct += ru.utilization_sum_pct;
    }
    for (auto& [k, b] : timeline) rep.timeline.push_back(b);
  }
  if (options.by.kind != GroupBy::Kind::none) {
    for (auto& [k, g] : groups) rep.groups.push_back(g);
    if (options.by.kind != GroupBy::Kind::day)
      std::stable_sort(rep.groups.begin(), rep.groups.end(), [](const GroupTotals& a, const GroupTotals& b) {
        return a.cost_micros > b.cost_micros;
      });
  }
  std::vector<const store::RunSummary*> by_cost;
  by_cost.reserve(runs.size());
  for (const auto& r : runs) by_cost.push_back(&r);
  // Cost, then id: a total order, so the first `top` are the same as after a full sort.
  const std::size_t top = std::min(options.top, by_cost.size());
  std::partial_sort(by_cost.begin(), by_cost.begin() + static_cast<std::ptrdiff_t>(top), by_cost.end(),
                    [](auto* a, auto* b) {
                      return a->cost_micros != b->cost_micros ? a->cost_micros > b->cost_micros
                                                              : a->id < b->id;
                    });
  for (std::size_t i = 0; i < top; ++i) {
    const store::RunSummary& r = *by_cost[i];
    GM_TRY(const store::RunRecord full, ledger.run(r.id));  // its status in words needs the whole record
    rep.top_runs.push_back(TopRun{r.id, r.command, r.user, r.gpu_model, r.gpus_allocated, r.start_unix_ms,
                                  static_cast<double>(r.wall_ms) / 1000.0, r.cost_micros,
                                  meter::waste_micros(r.idle_cost_micros, r.unused_gpu_cost_micros), r.status,
                                  std::nullopt, describe_status(full)});
    if (options.target) {
      GM_TRY(std::vector<store::ProgressRecord> progress, ledger.progress(r.id));
      rep.top_runs.back().target_hit = cost_to_target(progress, *options.target);
    }
  }
  rep.target = options.target;
  return rep;
}

namespace {

std::string period_text(const MultiReport& rep) {
  std::string s = rep.since_unix_ms ? format_time_utc(*rep.since_unix_ms) : std::string("the beginning");
  s += " .. ";
  s += rep.until_unix_ms ? format_time_utc(*rep.until_unix_ms) : std::string("now");
  return s + " UTC";
}

std::string pct_text(MicroUsd part, MicroUsd whole) {
  if (whole <= 0) return "-";
  return fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string opt_pct(std::optional<double> v) {
  return v ? fmt::format("{:.1f}%", *v) : "-";
}

nlohmann::json totals_json(const GroupTotals& g) {
  nlohmann::json j;
  j["runs"] = g.runs;
  j["stopped_runs"] = g.stopped_runs;
  j["failed_runs"] = g.failed_runs;
  j["wall_s"] = g.wall_s;
  j["gpu_hours"] = g.gpu_hours;
  j["cost_usd"] = util::micros_to_usd(g.cost_micros);
  j["idle_cost_usd"] = util::micros_to_usd(g.idle_cost_micros);
  j["unused_gpu_cost_usd"] = util::micros_to_usd(g.unused_gpu_cost_micros);
  j["waste_usd"] = util::micros_to_usd(g.waste_micros());
  j["energy_kwh"] = g.energy_kwh;
  j["co2_kg"] = json_or_null(g.co2_kg);
  j["runs_without_co2"] = g.runs_without_co2;
  auto u = g.mean_util_pct();
  j["mean_util_pct"] = json_or_null(u);
  return j;
}

}  // namespace

std::string render_multi_text(const MultiReport& rep) {
  std::string out = fmt::format("gpumeter report: {} run(s), {}\n\n", rep.total.runs, period_text(rep));
  const auto& t = rep.total;
  out += fmt::format("  cost        {}   ({:.2f} GPU-h, {} wall)\n",
                     util::format_usd(util::micros_to_usd(t.cost_micros)), t.gpu_hours,
                     util::format_duration_s(t.wall_s));
  out += fmt::format("  waste       {}   ({} of cost: idle {} + unused GPUs {})\n",
                     util::format_usd(util::micros_to_usd(t.waste_micros())),
                     pct_text(t.waste_micros(), t.cost_micros),
                     util::format_usd(util::micros_to_usd(t.idle_cost_micros)),
                     util::format_usd(util::micros_to_usd(t.unused_gpu_cost_micros)));
  out += fmt::format("  utilization {}   (mean over rolled-up GPU-seconds)\n", opt_pct(t.mean_util_pct()));
  out += fmt::format("  energy      {:.3f} kWh", t.energy_kwh);
  if (t.co2_kg) out += fmt::format(", CO2 {:.3f} kg", *t.co2_kg);
  if (t.runs_without_co2 > 0) out += fmt::format(" ({} run(s) without a carbon figure)", t.runs_without_co2);
  out += "\n";
  out += fmt::format("  runs        {} stopped by gpumeter, {} failed or interrupted\n", t.stopped_runs,
                     t.failed_runs);
  if (!rep.groups.empty()) {
    out += fmt::format("\nby {}\n", group_by_name(rep.by));
    util::TextTable tab;
    using A = util::TextTable::Align;
    tab.header(
        {group_by_name(rep.by), "runs", "GPU-h", "cost", "share", "waste", "util", "energy kWh", "CO2 kg"},
        {A::left, A::right, A::right, A::right, A::right, A::right, A::right, A::right, A::right});
    for (const auto& g : rep.groups)
      tab.row({util::shorten_middle(g.key, 40), std::to_string(g.runs), fmt::format("{:.2f}", g.gpu_hours),
               util::format_usd(util::micros_to_usd(g.cost_micros)), pct_text(g.cost_micros, t.cost_micros),
               util::format_usd(util::micros_to_usd(g.waste_micros())), opt_pct(g.mean_util_pct()),
               fmt::format("{:.3f}", g.energy_kwh), g.co2_kg ? fmt::format("{:.3f}", *g.co2_kg) : "-"});
    out += tab.render();
  }
  if (!rep.top_runs.empty()) {
    out += "\ntop runs by cost\n";
    util::TextTable tab;
    using A = util::TextTable::Align;
    std::vector<std::string> head = {"run",  "started (UTC)", "user",   "GPUs",   "wall",
                                     "cost", "waste",         "status", "command"};
    std::vector<A> align = {A::right, A::left,  A::left, A::right, A::right,
                            A::right, A::right, A::left, A::left};
    if (rep.target) {
      head.insert(head.begin() + 7, "$ to " + rep.target->metric + (rep.target->at_most ? "<=" : ">=") +
                                        fmt::format("{:g}", rep.target->threshold));
      align.insert(align.begin() + 7, A::right);
    }
    tab.header(head, align);
    for (const auto& r : rep.top_runs) {
      std::vector<std::string> cells = {
          std::to_string(r.id),
          format_time_utc(r.start_unix_ms),
          r.user,
          std::to_string(r.gpus) + (r.gpu_model.empty() ? "" : " x " + r.gpu_model),
          util::format_duration_s(r.wall_s),
          util::format_usd(util::micros_to_usd(r.cost_micros)),
          util::format_usd(util::micros_to_usd(r.waste_micros)),
          r.status_text.empty() ? std::string(util::text_of(r.status)) : r.status_text,
          util::shorten_middle(r.command, 48)};
      if (rep.target)
        cells.insert(cells.begin() + 7, r.target_hit
                                            ? util::format_usd(util::micros_to_usd(r.target_hit->cost_micros))
                                            : "not reached");
      tab.row(cells);
    }
    out += tab.render();
  }
  if (const auto fs = multi_findings(rep); !fs.empty()) out += "\n" + findings::to_text(fs);
  return out;
}

std::string render_multi_json(const MultiReport& rep) {
  nlohmann::json j;
  j["since_unix_ms"] = json_or_null(rep.since_unix_ms);
  j["until_unix_ms"] = json_or_null(rep.until_unix_ms);
  j["by"] =
      rep.by.kind == GroupBy::Kind::none ? nlohmann::json(nullptr) : nlohmann::json(group_by_name(rep.by));
  j["total"] = totals_json(rep.total);
  j["groups"] = nlohmann::json::array();
  for (const auto& g : rep.groups) {
    auto gj = totals_json(g);
    gj["key"] = g.key;
    j["groups"].push_back(gj);
  }
  j["target"] = rep.target ? nlohmann::json(rep.target->metric + (rep.target->at_most ? "<=" : ">=") +
                                            fmt::format("{:g}", rep.target->threshold))
                           : nlohmann::json(nullptr);
  j["bucket_s"] = rep.bucket_ms / 1000;
  j["timeline"] = nlohmann::json::array();
  for (const auto& b : rep.timeline)
    j["timeline"].push_back(
        {{"start_unix_ms", b.start_unix_ms},
         {"cost_usd", util::micros_to_usd(b.cost_micros)},
         {"mean_util_pct", b.util_samples > 0
                               ? nlohmann::json(b.util_sum_pct / static_cast<double>(b.util_samples))
                               : nlohmann::json(nullptr)},
         {"energy_kwh", b.energy_j / 3.6e6}});
  j["top_runs"] = nlohmann::json::array();
  for (const auto& r : rep.top_runs)
    j["top_runs"].push_back(
        {{"run_id", r.id},
         {"command", r.command},
         {"user", r.user},
         {"gpu_model", r.gpu_model},
         {"gpus_allocated", r.gpus},
         {"start_unix_ms", r.start_unix_ms},
         {"wall_s", r.wall_s},
         {"cost_usd", util::micros_to_usd(r.cost_micros)},
         {"waste_usd", util::micros_to_usd(r.waste_micros)},
         {"status", util::text_of(r.status)},
         {"status_text", r.status_text.empty() ? std::string(util::text_of(r.status)) : r.status_text},
         {"cost_to_target_usd", r.target_hit ? nlohmann::json(util::micros_to_usd(r.target_hit->cost_micros))
                                             : nlohmann::json(nullptr)}});
  j["findings"] = findings::to_json(multi_findings(rep));
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string render_multi_csv(const MultiReport& rep) {
  std::string out =
      "group,runs,stopped_runs,failed_runs,wall_s,gpu_hours,cost_usd,idle_cost_usd,"
      "unused_gpu_cost_usd,waste_usd,energy_kwh,co2_kg,mean_util_pct\r\n";
  auto row = [&](const std::string& key, const GroupTotals& g) {
    auto u = g.mean_util_pct();
    out += fmt::format("{},{},{},{},{:.3f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{},{}\r\n",
                       util::csv_escape(key), g.runs, g.stopped_runs, g.failed_runs, g.wall_s, g.gpu_hours,
                       util::micros_to_usd(g.cost_micros), util::micros_to_usd(g.idle_cost_micros),
                       util::micros_to_usd(g.unused_gpu_cost_micros), util::micros_to_usd(g.waste_micros()),
                       g.energy_kwh, g.co2_kg ? fmt::format("{:.6f}", *g.co2_kg) : "",
                       u ? fmt::format("{:.3f}", *u) : "");
  };
  for (const auto& g : rep.groups) row(g.key, g);
  row("TOTAL", rep.total);
  return out;
}

Result<MultiOptions> multi_options_from(const MultiFlags& flags, std::int64_t now_unix_ms) {
  MultiOptions options;
  options.top = flags.top;
  if (flags.daily || flags.date) {
    GM_TRY(const auto period, daily_period(flags.date, now_unix_ms));
    options.since_unix_ms = period.first;
    options.until_unix_ms = period.second;
    options.by.kind = GroupBy::Kind::user;
  }
  if (flags.since) {
    GM_TRY(options.since_unix_ms, parse_time_point(*flags.since, now_unix_ms, "--since"));
  }
  if (flags.until) {
    GM_TRY(options.until_unix_ms, parse_time_point(*flags.until, now_unix_ms, "--until"));
  }
  if (flags.target) {
    GM_TRY(options.target, meter::parse_metric_target(*flags.target));
  }
  if (flags.by) {
    GM_TRY(options.by, parse_group_by(*flags.by));
  }
  return options;
}

}  // namespace gm::report
