#include <fmt/format.h>

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
#include "util/clock.h"
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
    return util::kExitOk;
  }
  std::ofstream f(*path, std::ios::binary | std::ios::trunc);
  if (!f || !f.write(text.data(), static_cast<std::streamsize>(text.size())) || !f.flush())
    return fail(cmd, make_error("cannot write " + *path + ": " + std::strerror(errno)));
  std::fprintf(stderr, "gpumeter %s: wrote %s\n", cmd, path->c_str());
  return util::kExitOk;
}

int scaling_report(const store::Ledger& ledger, const std::vector<std::string>& refs, bool as_json) {
  auto inputs = report::load_scaling_inputs(ledger, refs);
  if (!inputs) return fail("report", inputs.error());
  auto study = report::scaling_study(*inputs);
  if (!study) return fail("report", study.error());
  std::fputs((as_json ? report::render_scaling_json(*study) : report::render_scaling_text(*study)).c_str(),
             stdout);
  return util::kExitOk;
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

  if (date) daily = true;
  if (daily && (since || until))
    return fail("report", make_error(ErrorKind::usage,
                                     "--daily covers one day: use --date YYYY-MM-DD, not --since/--until"));
  if (!scaling.empty() && (daily || since || until || by || csv || html))
    return fail("report", make_error(ErrorKind::usage, "--scaling takes run ids only (with --json at most)"));
  auto parsed = report::multi_options_from(report::MultiFlags{since, until, by, date, target, daily, top},
                                           util::system_clock().unix_ms());
  if (!parsed) return fail("report", parsed.error());
  const report::MultiOptions& options = *parsed;

  auto ledger = open_ledger_for_reading(ledger_path);
  if (!ledger) return fail("report", ledger.error());
  if (!scaling.empty()) return scaling_report(**ledger, scaling, as_json);

  auto report = report::build_multi_report(**ledger, options);
  if (!report) return fail("report", report.error());
  if (report->total.runs == 0) {
    std::string period =
        (options.since_unix_ms ? report::format_time_utc(*options.since_unix_ms)
                               : std::string("the beginning")) +
        " .. " +
        (options.until_unix_ms ? report::format_time_utc(*options.until_unix_ms) : std::string("now")) +
        " UTC";
    return fail("report", make_error(ErrorKind::not_found, "no runs started in " + period));
  }
  if (focus) {
    auto rows = report::render_focus_csv(**ledger, options);
    if (!rows) return fail("report", rows.error());
    if (int rc = write_output("report", focus, *rows); rc != util::kExitOk) return rc;
  }
  if (as_json) return write_output("report", std::nullopt, report::render_multi_json(*report));
  if (csv) return write_output("report", std::nullopt, report::render_multi_csv(*report));
  if (html) {
    auto page = report::render_multi_html(*report);
    if (!page) return fail("report", page.error());
    return write_output("report", html, *page);
  }
  std::string text = report::render_multi_text(*report);
  if (daily)
    text =
        "daily efficiency report for " + report::format_date_utc(*options.since_unix_ms) + " (UTC)\n" + text;
  return write_output("report", std::nullopt, text);
}

}  // namespace gm::cli
