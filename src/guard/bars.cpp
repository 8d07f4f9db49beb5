// Progress recognised in a job's own output: tqdm-style bars, "Epoch e/E" lines and Trainer log dicts, and
// their combination into one global progress when bars are nested (DESIGN §5, issue 19).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "guard/guard.h"
#include "util/units.h"

namespace gm {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/// The line without terminal escape sequences (CSI "ESC [ ... final", two-byte ESC sequences) and other
/// control characters: tqdm moves between nested bars with ESC[A.
std::string strip_ansi(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (std::size_t i = 0; i < line.size(); ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c == 0x1b) {
      if (i + 1 < line.size() && line[i + 1] == '[') {
        i += 2;
        while (i < line.size() && !(line[i] >= 0x40 && line[i] <= 0x7e)) ++i;
      } else {
        ++i;
      }
      continue;
    }
    if (c < 0x20 && c != '\t') continue;
    out.push_back(static_cast<char>(c));
  }
  return out;
}

std::optional<double> parse_double(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<std::int64_t> parse_count(std::string_view s) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

/// "key=value, key=value" (tqdm postfix) into numeric metrics.
void parse_postfix(std::string_view s, std::map<std::string, double>& metrics) {
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t comma = s.find(',', pos);
    if (comma == std::string_view::npos) comma = s.size();
    std::string_view item = s.substr(pos, comma - pos);
    const auto eq = item.find('=');
    if (eq != std::string_view::npos) {
      const std::string_view key = trim(item.substr(0, eq));
      if (auto v = parse_double(item.substr(eq + 1)); v && !key.empty() && key != "v_num")
        metrics[std::string(key)] = *v;
    }
    pos = comma + 1;
  }
}

/// Hugging Face Trainer log line: {'loss': 2.31, 'learning_rate': 5e-05, 'epoch': 0.12}
std::optional<BarReading> parse_hf_dict(std::string_view line) {
  line = trim(line);
  if (line.size() < 4 || line.substr(0, 2) != "{'" || line.back() != '}') return std::nullopt;
  BarReading r;
  std::string_view body = line.substr(1, line.size() - 2);
  std::size_t pos = 0;
  while (pos < body.size()) {
    std::size_t comma = body.find(',', pos);
    if (comma == std::string_view::npos) comma = body.size();
    std::string_view item = body.substr(pos, comma - pos);
    const auto q1 = item.find('\'');
    const auto q2 = q1 == std::string_view::npos ? q1 : item.find('\'', q1 + 1);
    const auto colon = q2 == std::string_view::npos ? q2 : item.find(':', q2);
    if (colon != std::string_view::npos) {
      const std::string key(item.substr(q1 + 1, q2 - q1 - 1));
      if (auto v = parse_double(item.substr(colon + 1))) r.metrics[key] = *v;
    }
    pos = comma + 1;
  }
  if (r.metrics.empty()) return std::nullopt;
  return r;
}

/// Finds "epoch <e>[/<E>]" (any case) in `text`; replaces the numbers by '#' in `key` when found.
bool find_epoch(std::string_view text, BarReading& r, std::string* key) {
  const std::string lower = to_lower(text);
  std::size_t at = 0;
  while ((at = lower.find("epoch", at)) != std::string::npos) {
    if (at > 0 && std::isalpha(static_cast<unsigned char>(lower[at - 1]))) {
      at += 5;
      continue;
    }
    std::size_t i = at + 5;
    while (i < lower.size() && (lower[i] == ' ' || lower[i] == '=' || lower[i] == ':')) ++i;
    const std::size_t e0 = i;
    while (i < lower.size() && is_digit(lower[i])) ++i;
    if (i == e0) {
      at += 5;
      continue;
    }
    const std::size_t e1 = i;
    std::size_t t0 = 0, t1 = 0;
    std::size_t j = i;
    while (j < lower.size() && lower[j] == ' ') ++j;
    if (j < lower.size() && lower[j] == '/') {
      ++j;
      while (j < lower.size() && lower[j] == ' ') ++j;
      t0 = j;
      while (j < lower.size() && is_digit(lower[j])) ++j;
      t1 = j;
    }
    r.epoch = parse_count(text.substr(e0, e1 - e0));
    if (t1 > t0) r.epochs = parse_count(text.substr(t0, t1 - t0));
    if (!r.epoch || (r.epochs && *r.epochs <= 0)) return false;
    if (key) {
      const std::size_t end = t1 > t0 ? t1 : e1;
      *key = std::string(text.substr(0, e0)) + "#" + (t1 > t0 ? "/#" : "") + std::string(text.substr(end));
    }
    return true;
  }
  return false;
}

/// The description of a tqdm bar from the text before its counter: "Epoch 1:  45%|████▌     | " -> "Epoch 1".
std::string bar_description(std::string_view prefix) {
  prefix = trim(prefix);
  if (!prefix.empty() && prefix.back() == '|') {
    const auto open = prefix.substr(0, prefix.size() - 1).rfind('|');
    prefix = trim(open == std::string_view::npos ? std::string_view() : prefix.substr(0, open));
  }
  if (!prefix.empty() && prefix.back() == '%') {
    prefix.remove_suffix(1);
    while (!prefix.empty() && (is_digit(prefix.back()) || prefix.back() == '.')) prefix.remove_suffix(1);
    prefix = trim(prefix);
  }
  if (!prefix.empty() && prefix.back() == ':') prefix = trim(prefix.substr(0, prefix.size() - 1));
  return std::string(prefix);
}

}  // namespace

std::optional<BarReading> parse_bar_line(std::string_view raw) {
  const std::string clean = strip_ansi(raw);
  const std::string_view line = clean;
  // The last "N/M [" in the line (a tqdm bar redrawn with \r ends in its latest state).
  std::optional<BarReading> found;
  std::size_t search = 0;
  while (true) {
    const auto slash = line.find('/', search);
    if (slash == std::string_view::npos) break;
    search = slash + 1;
    std::size_t a = slash;
    while (a > 0 && is_digit(line[a - 1])) --a;
    std::size_t b = slash + 1;
    while (b < line.size() && is_digit(line[b])) ++b;
    if (a == slash || b == slash + 1 || b + 1 >= line.size() || line[b] != ' ' || line[b + 1] != '[')
      continue;
    if (a > 0 && (std::isalnum(static_cast<unsigned char>(line[a - 1])) || line[a - 1] == '.')) continue;
    auto step = parse_count(line.substr(a, slash - a));
    auto total = parse_count(line.substr(slash + 1, b - slash - 1));
    if (!step || !total || *total <= 0 || *step > *total) continue;
    BarReading r;
    r.n = step;
    r.total = total;
    const auto close = line.find(']', b);
    if (close != std::string_view::npos) {
      std::string_view inside = line.substr(b + 2, close - b - 2);
      // "00:01<00:02, 30.1it/s, loss=2.3" -> the postfix after the rate
      const auto first_comma = inside.find(',');
      if (first_comma != std::string_view::npos) {
        const auto second = inside.find(',', first_comma + 1);
        if (second != std::string_view::npos) parse_postfix(inside.substr(second + 1), r.metrics);
      }
    }
    r.key = bar_description(line.substr(0, a));
    std::string key;
    if (find_epoch(r.key, r, &key)) r.key = key;
    found = std::move(r);
  }
  if (found) return found;
  // "Epoch 2/3" alone at the start of a line (Keras, accelerate-style scripts): an epoch marker.
  const std::string_view t = trim(line);
  if (t.size() >= 9 && to_lower(t.substr(0, 6)) == "epoch ") {
    BarReading r;
    if (find_epoch(t.substr(0, std::min<std::size_t>(t.size(), 40)), r, nullptr) && r.epochs) return r;
  }
  return parse_hf_dict(line);
}

std::optional<ProgressUpdate> parse_output_line(std::string_view line) {
  auto r = parse_bar_line(line);
  if (!r || (!r->n && r->metrics.empty())) return std::nullopt;
  ProgressUpdate u;
  u.step = r->n;
  u.total_steps = r->total;
  u.metrics = std::move(r->metrics);
  return u;
}

std::optional<ProgressUpdate> ProgressTracker::add(const BarReading& r) {
  if (r.epoch) {
    if (!epoch_base_) epoch_base_ = (*r.epoch == 0 || !r.epochs) ? 0 : 1;
    const std::int64_t e = std::max<std::int64_t>(0, *r.epoch - *epoch_base_);
    if (r.epochs) epochs_ = r.epochs;
    // A new epoch closes the bars of the last one (a Lightning bar is one per epoch).
    if (epoch_ && e != *epoch_) open_.clear();
    epoch_ = e;
  }
  if (!r.n) {
    if (r.epoch) return global(r.metrics);
    if (r.metrics.empty()) return std::nullopt;
    ProgressUpdate u;
    u.metrics = r.metrics;
    return u;
  }
  const std::int64_t n = *r.n;
  auto it = std::find_if(open_.begin(), open_.end(),
                         [&](const Bar& b) { return b.key == r.key && b.total == r.total; });
  if (it != open_.end()) {
    const auto i = static_cast<std::size_t>(it - open_.begin());
    const bool had_children = i + 1 < open_.size();
    if (n < it->n) {
      // The bar restarted: its loop ran once more inside the bar around it.
      if (i > 0 && !it->side) ++open_[i - 1].children_done;
      open_.resize(i + 1);
      open_[i].n = n;
      open_[i].children_done = 0;
    } else if (n > it->n) {
      if (!had_children) it->advanced_alone = true;
      it->n = n;
      it->children_done = 0;
      open_.resize(i + 1);
    }
  } else {
    while (!open_.empty() && open_.back().total && open_.back().n >= *open_.back().total) open_.pop_back();
    Bar b;
    b.key = r.key;
    b.n = n;
    b.total = r.total;
    b.side = !open_.empty() && (open_.back().side || open_.back().advanced_alone);
    // A different bar where an established step level was (Lightning's validation bar after the epoch's
    // training bar completed, a val bar after a train bar) is a side bar: the step level comes back.
    const std::size_t depth = open_.size();
    if (depth < levels_.size() && (levels_[depth].key != b.key || levels_[depth].total != b.total))
      b.side = true;
    open_.push_back(std::move(b));
  }
  const Bar& bar = *std::find_if(open_.begin(), open_.end(),
                                 [&](const Bar& b) { return b.key == r.key && b.total == r.total; });
  if (bar.side) {
    if (r.metrics.empty()) return std::nullopt;
    ProgressUpdate u;
    u.metrics = r.metrics;
    return u;
  }
  return global(r.metrics);
}

std::optional<ProgressUpdate> ProgressTracker::global(std::map<std::string, double> metrics) {
  // The step levels open now, outermost first; they extend or replace the nesting seen so far.
  std::size_t depth = 0;
  while (depth < open_.size() && !open_[depth].side) ++depth;
  bool same = depth <= levels_.size();
  for (std::size_t i = 0; same && i < depth; ++i)
    same = levels_[i].key == open_[i].key && levels_[i].total == open_[i].total;
  if (!same) {
    levels_.clear();
    for (std::size_t i = 0; i < depth; ++i) levels_.push_back({open_[i].key, open_[i].total});
  }
  // Global step: the levels' counts as digits of a mixed-radix number (outer × inner); levels not open now
  // (an inner bar between two epochs) count 0. An epoch level from "Epoch e" is the outermost digit.
  constexpr std::int64_t kMax = std::int64_t{1} << 50;
  std::int64_t step = epoch_.value_or(0);
  std::optional<std::int64_t> total = epoch_ ? epochs_ : std::optional<std::int64_t>(1);
  for (std::size_t i = 0; i < levels_.size(); ++i) {
    std::int64_t n = 0;
    if (i < depth) {
      n = open_[i].n + open_[i].children_done;
      if (open_[i].total) n = std::min(n, *open_[i].total);
    }
    if (i > 0 || epoch_) {
      if (!levels_[i].total || step > kMax / *levels_[i].total)
        return std::nullopt;  // no total inside: no count
      step = step * *levels_[i].total;
    }
    step += n;
    if (total) {
      if (!levels_[i].total || *total > kMax / *levels_[i].total)
        total.reset();
      else
        total = *total * *levels_[i].total;
    }
  }
  ProgressUpdate u;
  u.step = step;
  if (total && *total > 0 && step <= *total) u.total_steps = total;
  u.metrics = std::move(metrics);
  return u;
}

std::vector<ProgressUpdate> OutputProgressParser::feed(std::string_view bytes) {
  constexpr std::size_t kMaxLine = 64 * 1024;
  std::vector<ProgressUpdate> out;
  for (char c : bytes) {
    if (c == '\n' || c == '\r') {
      if (!overlong_ && !line_.empty()) {
        if (auto r = parse_bar_line(line_))
          if (auto u = tracker_.add(*r)) out.push_back(std::move(*u));
      }
      line_.clear();
      overlong_ = false;
      continue;
    }
    if (overlong_) continue;
    if (line_.size() >= kMaxLine) {
      overlong_ = true;
      line_.clear();
      continue;
    }
    line_.push_back(c);
  }
  return out;
}

}  // namespace gm
