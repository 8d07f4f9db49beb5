// What the ledger's back ends share: run columns, liveness, selectors, budget periods, locations, copying.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <ctime>

#include "store/detail.h"
#include "util/file.h"
#include "util/time.h"

namespace gm::store {
namespace detail {

namespace {

/// Reads the JSON string at text[i] when it is plain printable ASCII without escapes (then the JSON parser
/// reads the same characters) and moves i past it; false for anything else.
bool plain_string(std::string_view text, std::size_t& i, std::string_view& out) {
  if (i >= text.size() || text[i] != '"') return false;
  const std::size_t start = ++i;
  for (; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"') {
      out = text.substr(start, i - start);
      ++i;
      return true;
    }
    if (c == '\\' || c < 0x20 || c >= 0x80) return false;
  }
  return false;
}

/// Reads `[` or `{` … `]` or `}` as json_of writes it (no whitespace): `item` reads one element at text[i];
/// false where the text is anything else.
template <class Item>
bool plain_sequence(std::string_view text, char open, char close, Item item) {
  if (text.size() < 2 || text.front() != open) return false;
  std::size_t i = 1;
  if (text[i] == close) return text.size() == 2;
  for (;;) {
    if (!item(i)) return false;
    if (i < text.size() && text[i] == ',') {
      ++i;
      continue;
    }
    return i + 1 == text.size() && text[i] == close;
  }
}

}  // namespace

std::vector<std::string> parse_string_list(std::string_view text) {
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(std::count(text.begin(), text.end(), ',')) + 1);
  const bool plain = plain_sequence(text, '[', ']', [&](std::size_t& i) {
    std::string_view v;
    if (!plain_string(text, i, v)) return false;
    out.emplace_back(v);
    return true;
  });
  if (plain) return out;
  return parse_json_or<std::vector<std::string>>(text, {});
}

std::size_t count_string_list(std::string_view text) {
  std::size_t n = 0;
  const bool plain = plain_sequence(text, '[', ']', [&](std::size_t& i) {
    std::string_view v;
    if (!plain_string(text, i, v)) return false;
    ++n;
    return true;
  });
  if (plain) return n;
  return parse_string_list(text).size();
}

std::map<std::string, std::string> parse_string_map(std::string_view text) {
  std::map<std::string, std::string> out;
  const bool plain = plain_sequence(text, '{', '}', [&](std::size_t& i) {
    std::string_view k, v;
    if (!plain_string(text, i, k) || i >= text.size() || text[i] != ':') return false;
    ++i;
    if (!plain_string(text, i, v)) return false;
    out.insert_or_assign(std::string(k), std::string(v));  // a repeated key: the last one, as the parser does
    return true;
  });
  if (plain) return out;
  return parse_json_or<std::map<std::string, std::string>>(text, {});
}

std::string this_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool meter_is_dead(const RunRecord& r) {
  if (r.meter_host == this_host()) {
    if (r.meter_pid <= 0) return true;
    const auto pid = static_cast<pid_t>(r.meter_pid);
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    // A live pid that is not a gpumeter any more was reused.
    auto comm = util::read_small_file("/proc/" + std::to_string(r.meter_pid) + "/comm");
    if (comm && comm->rfind("gpumeter", 0) != 0) return true;
    return false;
  }
  return now_unix_ms() - r.heartbeat_unix_ms > Ledger::kStaleHeartbeatMs;
}

void stamp_meter(RunRecord& r, bool refresh) {
  if (r.meter_pid == 0) r.meter_pid = getpid();
  if (r.meter_host.empty()) r.meter_host = this_host();
  if (refresh || r.heartbeat_unix_ms == 0) r.heartbeat_unix_ms = now_unix_ms();
}

void include_committed(RunRecord& r, std::int64_t last_t_ms, MicroUsd cost, double energy_j) {
  if (last_t_ms > r.wall_ms) {
    r.wall_ms = last_t_ms;
    const std::int64_t g = std::max<std::int64_t>(1, r.billing_granularity_s);
    const std::int64_t billed = (r.wall_ms + g * 1000 - 1) / (g * 1000) * g;
    r.billed_s = std::max({r.billed_s, billed, r.billing_minimum_s});
  }
  r.cost_micros = std::max(r.cost_micros, cost);
  r.energy_j = std::max(r.energy_j, energy_j);
}

}  // namespace detail

Result<std::pair<std::string, std::string>> parse_selector(const std::string& selector,
                                                           const std::string& what) {
  const auto eq = selector.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == selector.size())
    return make_error(ErrorKind::usage, what + " '" + selector + "': expected KEY=VALUE, e.g. team=nlp");
  std::string key = selector.substr(0, eq);
  for (char c : key)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '/'))
      return make_error(ErrorKind::usage,
                        what + " '" + selector + "': a key has letters, digits, _ . - / only");
  return std::make_pair(key, selector.substr(eq + 1));
}

std::int64_t period_start_unix_ms(BudgetPeriod period, std::int64_t now_unix_ms) {
  const std::int64_t day_ms = 86'400'000;
  const std::int64_t days = (now_unix_ms >= 0 ? now_unix_ms : now_unix_ms - day_ms + 1) / day_ms;
  switch (period) {
    case BudgetPeriod::day:
      return days * day_ms;
    case BudgetPeriod::week: {
      // 1970-01-01 was a Thursday: Monday-based weekday = (days + 3) mod 7.
      const std::int64_t weekday = ((days + 3) % 7 + 7) % 7;
      return (days - weekday) * day_ms;
    }
    case BudgetPeriod::month:
      break;
  }
  return util::month_start_unix_ms(days * day_ms);
}

bool run_matches(const RunRecord& run, const std::string& key, const std::string& value) {
  if (key == "user") return run.user == value;
  if (key == "host") return run.host == value;
  auto it = run.labels.find(key);
  return it != run.labels.end() && it->second == value;
}

bool is_postgres_location(const std::string& location) {
  return location.rfind("postgresql://", 0) == 0 || location.rfind("postgres://", 0) == 0 ||
         location.rfind("postgresql:", 0) == 0 || location.find("dbname=") != std::string::npos;
}

std::string redact_location(const std::string& location) {
  std::string s = location;
  // URI: scheme://user:password@host
  if (const auto scheme = s.find("://"); scheme != std::string::npos) {
    const auto at = s.find('@', scheme + 3);
    const auto slash = s.find('/', scheme + 3);
    if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
      const auto colon = s.find(':', scheme + 3);
      if (colon != std::string::npos && colon < at) s = s.substr(0, colon) + ":***" + s.substr(at);
    }
  }
  // password=… as a URI parameter or a key=value word.
  for (std::size_t pos = 0; (pos = s.find("password=", pos)) != std::string::npos;) {
    const bool word_start = pos == 0 || s[pos - 1] == '?' || s[pos - 1] == '&' || s[pos - 1] == ' ';
    pos += 9;
    if (!word_start) continue;
    std::size_t end = pos;
    if (end < s.size() && s[end] == '\'') {
      ++end;
      while (end < s.size() && s[end] != '\'') end += s[end] == '\\' ? 2 : 1;
      end = std::min(s.size(), end + 1);
    } else {
      while (end < s.size() && s[end] != '&' && s[end] != ' ') ++end;
    }
    s = s.substr(0, pos) + "***" + s.substr(end);
  }
  return s;
}

RunSummary summarize(const RunRecord& r) {
  return RunSummary{r.id,
                    r.command,
                    r.user,
                    r.host,
                    r.labels,
                    r.start_unix_ms,
                    r.status,
                    r.exit_code,
                    r.stopped_by,
                    r.gpu_model,
                    r.gpus_allocated.size(),
                    r.wall_ms,
                    r.billed_s,
                    r.cost_micros,
                    r.idle_cost_micros,
                    r.unused_gpu_cost_micros,
                    r.energy_j,
                    r.co2_kg};
}

Result<std::vector<RunSummary>> Ledger::run_summaries(const RunFilter& filter) const {
  GM_TRY(std::vector<RunRecord> all, runs(filter));
  std::vector<RunSummary> out;
  out.reserve(all.size());
  for (const auto& r : all) out.push_back(summarize(r));
  return out;
}

Result<std::vector<RollupBucket>> Ledger::rollup_buckets(const RunFilter& filter,
                                                         std::int64_t bucket_ms) const {
  RunFilter f = filter;
  f.limit.reset();
  GM_TRY(std::vector<RollupRecord> rows, rollups(f));
  std::map<std::pair<std::int64_t, std::int64_t>, RollupBucket> sums;
  for (const auto& r : rows) {
    const std::int64_t start = r.minute_unix * 60'000 / bucket_ms * bucket_ms;
    RollupBucket& b = sums[{start, r.run_id}];
    b.run_id = r.run_id;
    b.start_unix_ms = start;
    b.samples += r.samples;
    b.utilization_sum_pct += r.utilization_sum_pct;
    b.energy_j += r.energy_j;
    b.cost_micros += r.cost_micros;
  }
  std::vector<RollupBucket> out;
  out.reserve(sums.size());
  for (auto& [k, b] : sums) out.push_back(b);
  return out;
}

Result<RunBundle> load_bundle(const Ledger& ledger, std::int64_t id) {
  RunBundle b;
  GM_TRY(b.run, ledger.run(id));
  GM_TRY(b.samples, ledger.samples(id));
  GM_TRY(b.progress, ledger.progress(id));
  GM_TRY(b.actions, ledger.actions(id));
  GM_TRY(b.inference, ledger.inference(id));
  GM_TRY(b.cells, ledger.cells(id));
  RunFilter all;
  GM_TRY(std::vector<RollupRecord> rollups, ledger.rollups(all));
  for (auto& r : rollups)
    if (r.run_id == id) b.rollups.push_back(r);
  return b;
}

Result<std::size_t> copy_ledger(const Ledger& from, Ledger& to) {
  GM_TRY(std::vector<RunRecord> runs, from.runs());
  // Rollups of every run in one read (a per-run read would scan the table once per run).
  GM_TRY(std::vector<RollupRecord> rollups, from.rollups(RunFilter{}));
  std::map<std::int64_t, std::vector<RollupRecord>> rollups_of;
  for (auto& r : rollups) rollups_of[r.run_id].push_back(r);
  const std::string source = from.backend() + ":" + redact_location(from.describe());
  std::size_t copied = 0;
  // Oldest first, so the copies' ids keep the source's order.
  std::reverse(runs.begin(), runs.end());
  for (const RunRecord& r : runs) {
    RunBundle b;
    b.run = r;
    GM_TRY(b.samples, from.samples(r.id));
    GM_TRY(b.progress, from.progress(r.id));
    GM_TRY(b.actions, from.actions(r.id));
    GM_TRY(b.inference, from.inference(r.id));
    GM_TRY(b.cells, from.cells(r.id));
    b.rollups = std::move(rollups_of[r.id]);
    const std::string key = "copy:" + source + "#" + std::to_string(r.id);
    GM_TRY(ImportOutcome done, to.import_run(b, key, 0));
    if (done.imported) ++copied;
  }
  GM_TRY(std::vector<BudgetRecord> budgets, from.budgets());
  for (const auto& b : budgets) GM_TRY_VOID(to.set_budget(b));
  return copied;
}

}  // namespace gm::store
