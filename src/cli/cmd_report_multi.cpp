#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "cli/cli.h"
#include "cli/common.h"
#include "report/focus.h"
#include "report/html.h"
#include "report/kpi.h"
#include "report/listings.h"
#include "report/load.h"
#include "report/multi.h"
#include "store/store.h"
#include "util/units.h"

namespace gm::cli {

bool wants_multi_run_report(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") break;
    for (const char* flag : {"--since", "--until", "--by", "--daily", "--date", "--scaling"}) {
      const std::size_t n = std::strlen(flag);
      if (a == flag || (a.size() > n && a.substr(0, n) == flag && a[n] == '=')) return true;
    }
  }
  return false;
}

namespace {

int write_output(const char* cmd, const std::optional<std::string>& path, const std::string& text) {
  if (!path || *path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kExitOk;
  }
  std::ofstream f(*path, std::ios::binary | std::ios::trunc);
  if (!f || !f.write(text.data(), static_cast<std::streamsize>(text.size())) || !f.flush())
    return fail(cmd, make_error("cannot write " + *path + ": " + std::strerror(errno)));
  std::fprintf(stderr, "gpumeter %s: wrote %s\n", cmd, path->c_str());
  return kExitOk;
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int scaling_report(const Ledger& ledger, const std::vector<std::string>& refs, bool as_json) {
  std::vector<ScalingInput> inputs;
  for (const auto& ref : refs) {
    auto run = resolve_run(ledger, ref);
    if (!run) return fail("report", run.error());
    auto progress = ledger.progress(run->id);
    if (!progress) return fail("report", progress.error());
    inputs.push_back(ScalingInput{*run, *progress});
  }
  auto study = scaling_study(inputs);
  if (!study) return fail("report", study.error());
  std::fputs((as_json ? report::render_scaling_json(*study) : report::render_scaling_text(*study)).c_str(),
             stdout);
  return kExitOk;
}

}  // namespace

int multi_run_report(int argc, char** argv) {
  CLI::App app{"Report over many runs of the ledger: totals, groups, waste, energy, top runs", "report"};
  std::optional<std::string> since, until, by, date, html, ledger_path, target, focus;
  bool daily = false, as_json = false, csv = false;
  std::size_t top = 5;
  std::vector<std::string> scaling;
  app.add_option("--since", since,
                 "runs started at or after: a duration back (7d, 12h), YYYY-MM-DD or YYYY-MM-DDTHH:MM (UTC)");
  app.add_option("--until", until, "runs started before (same forms as --since)");
  app.add_option("--by", by, "group by user | label:KEY | gpu | day | command | host");
  app.add_option("--focus", focus, "also write the runs as FOCUS 1.x CSV (one row per run and GPU) to FILE");
  app.add_flag("--daily", daily,
               "the daily efficiency report: yesterday (UTC) by user, with top runs and waste");
  app.add_option("--date", date, "day of the daily report, YYYY-MM-DD (UTC); implies --daily");
  app.add_option("--top", top, "how many top runs to list (default 5)")->check(non_negative_number());
  app.add_option("--scaling", scaling,
                 "scaling efficiency across these runs (ids or 'last'), different GPU counts")
      ->expected(2, 1000);
  app.add_option("--target", target, "with the top runs, the $ to reach a metric target: acc=0.9, loss<=1.8");
  app.add_option("--ledger", ledger_path, "ledger file (default $GPUMETER_LEDGER or the XDG data directory)");
  auto* json_flag = app.add_flag("--json", as_json, "JSON output");
  auto* csv_flag = app.add_flag("--csv", csv, "CSV output: one row per group and a TOTAL row");
  auto* html_opt = app.add_option("--html", html, "write a self-contained HTML page with charts to FILE");
  json_flag->excludes(csv_flag)->excludes(html_opt);
  csv_flag->excludes(html_opt);
  if (auto rc = parse_args(app, argc, argv)) return *rc;

  const std::int64_t now = now_unix_ms();
  MultiOptions options;
  options.top = top;
  if (date) daily = true;
  if (daily && (since || until))
    return fail("report", make_error(ErrorKind::usage,
                                     "--daily covers one day: use --date YYYY-MM-DD, not --since/--until"));
  if (!scaling.empty() && (daily || since || until || by || csv || html))
    return fail("report", make_error(ErrorKind::usage, "--scaling takes run ids only (with --json at most)"));
  if (daily) {
    auto period = daily_period(date, now);
    if (!period) return fail("report", period.error());
    options.since_unix_ms = period->first;
    options.until_unix_ms = period->second;
    options.by.kind = GroupBy::Kind::user;
  }
  if (since) {
    auto t = parse_time_point(*since, now, "--since");
    if (!t) return fail("report", t.error());
    options.since_unix_ms = *t;
  }
  if (until) {
    auto t = parse_time_point(*until, now, "--until");
    if (!t) return fail("report", t.error());
    options.until_unix_ms = *t;
  }
  if (target) {
    auto t = parse_metric_target(*target);
    if (!t) return fail("report", t.error());
    options.target = *t;
  }
  if (by) {
    auto g = parse_group_by(*by);
    if (!g) return fail("report", g.error());
    options.by = *g;
  }

  auto ledger = open_ledger_for_reading(ledger_path);
  if (!ledger) return fail("report", ledger.error());
  if (!scaling.empty()) return scaling_report(**ledger, scaling, as_json);

  auto report = build_multi_report(**ledger, options);
  if (!report) return fail("report", report.error());
  if (report->total.runs == 0) {
    std::string period =
        (options.since_unix_ms ? format_time_utc(*options.since_unix_ms) : std::string("the beginning")) +
        " .. " + (options.until_unix_ms ? format_time_utc(*options.until_unix_ms) : std::string("now")) +
        " UTC";
    return fail("report", make_error(ErrorKind::not_found, "no runs started in " + period));
  }
  if (focus) {
    auto rows = render_focus_csv(**ledger, options);
    if (!rows) return fail("report", rows.error());
    if (int rc = write_output("report", focus, *rows); rc != kExitOk) return rc;
  }
  if (as_json) return write_output("report", std::nullopt, render_multi_json(*report));
  if (csv) return write_output("report", std::nullopt, render_multi_csv(*report));
  if (html) {
    auto page = render_multi_html(*report);
    if (!page) return fail("report", page.error());
    return write_output("report", html, *page);
  }
  std::string text = render_multi_text(*report);
  if (daily)
    text = "daily efficiency report for " + format_date_utc(*options.since_unix_ms) + " (UTC)\n" + text;
  return write_output("report", std::nullopt, text);
}

}  // namespace gm::cli
