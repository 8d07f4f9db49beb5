// Progress recognised in a job's own output, line by line: tqdm-style bars (Trainer, Lightning and Keras bars
// included), rich.progress bars, "Epoch e/E" lines and Trainer log dicts (DESIGN §5, issues 19 and 26). The
// combination of several bars into one global progress is progress_tracker.cpp.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "guard/guard.h"
#include "util/units.h"

namespace gm::guard {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/// The line without terminal escape sequences (CSI "ESC [ ... final", two-byte ESC sequences) and other
/// control characters. `trailing_up` gets the cursor-up moves (CSI A) after the last visible character:
/// tqdm draws a bar at `position` p by moving down p lines, drawing, and moving up p lines (ESC[A each).
std::string strip_ansi(std::string_view line, int* trailing_up) {
  std::string out;
  out.reserve(line.size());
  int up = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c == 0x1b) {
      if (i + 1 < line.size() && line[i + 1] == '[') {
        const std::size_t p0 = i + 2;
        i += 2;
        while (i < line.size() && !(line[i] >= 0x40 && line[i] <= 0x7e)) ++i;
        if (i < line.size() && line[i] == 'A') {
          int count = 0;
          bool digits = p0 < i;
          for (std::size_t k = p0; k < i; ++k) {
            if (!is_digit(line[k]) || count > 1000) {
              digits = false;
              break;
            }
            count = count * 10 + (line[k] - '0');
          }
          up += digits ? std::max(count, 1) : (p0 == i ? 1 : 0);
          up = std::min(up, 1000);
        }
      } else {
        ++i;
      }
      continue;
    }
    if (c < 0x20 && c != '\t') continue;
    if (c != ' ' && c != '\t') up = 0;
    out.push_back(static_cast<char>(c));
  }
  if (trailing_up) *trailing_up = up;
  return out;
}

std::optional<double> parse_double(std::string_view s) {
  s = util::trim(s);
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
      const std::string_view key = util::trim(item.substr(0, eq));
      if (auto v = parse_double(item.substr(eq + 1)); v && !key.empty() && key != "v_num")
        metrics[std::string(key)] = *v;
    }
    pos = comma + 1;
  }
}

/// Hugging Face Trainer log line: {'loss': 2.31, 'learning_rate': 5e-05, 'epoch': 0.12}
std::optional<BarReading> parse_hf_dict(std::string_view line) {
  line = util::trim(line);
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
  const std::string lower = util::to_lower(text);
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
  prefix = util::trim(prefix);
  if (!prefix.empty() && prefix.back() == '|') {
    const auto open = prefix.substr(0, prefix.size() - 1).rfind('|');
    prefix = util::trim(open == std::string_view::npos ? std::string_view() : prefix.substr(0, open));
  }
  if (!prefix.empty() && prefix.back() == '%') {
    prefix.remove_suffix(1);
    while (!prefix.empty() && (is_digit(prefix.back()) || prefix.back() == '.')) prefix.remove_suffix(1);
    prefix = util::trim(prefix);
  }
  if (!prefix.empty() && prefix.back() == ':') prefix = util::trim(prefix.substr(0, prefix.size() - 1));
  return std::string(prefix);
}

/// "[H:]MM:SS" into seconds.
std::optional<double> parse_clock(std::string_view s) {
  s = util::trim(s);
  double total = 0;
  int parts = 0;
  std::size_t pos = 0;
  while (pos <= s.size() && parts < 3) {
    std::size_t colon = s.find(':', pos);
    if (colon == std::string_view::npos) colon = s.size();
    const std::string_view part = s.substr(pos, colon - pos);
    if (part.empty() || part.size() > 6) return std::nullopt;
    auto v = parse_count(part);
    if (!v || *v < 0) return std::nullopt;
    total = total * 60 + static_cast<double>(*v);
    ++parts;
    pos = colon + 1;
    if (colon == s.size()) break;
  }
  if (parts < 2 || pos < s.size()) return std::nullopt;
  return total;
}

/// The unit of a tqdm rate: "30.1it/s" and "?it/s" -> "it", "1.23s/it" -> "it", "12.0samples/s" -> "samples".
std::string rate_unit(std::string_view rate) {
  rate = util::trim(rate);
  while (!rate.empty() && (is_digit(rate.front()) || rate.front() == '.' || rate.front() == '?'))
    rate.remove_prefix(1);
  if (rate.size() > 2 && rate.substr(0, 2) == "s/") return std::string(rate.substr(2));
  if (rate.size() > 2 && rate.substr(rate.size() - 2) == "/s")
    return std::string(rate.substr(0, rate.size() - 2));
  return {};
}

/// The inside of tqdm's brackets, "00:01<00:02, 30.1it/s, loss=2.3" or "00:01, 30.1it/s": elapsed time,
/// unit and postfix metrics.
void parse_bracket(std::string_view inside, BarReading& r) {
  const auto first_comma = inside.find(',');
  const std::string_view head = inside.substr(0, first_comma);
  r.elapsed_s = parse_clock(head.substr(0, head.find('<')));
  if (first_comma == std::string_view::npos) return;
  const auto second = inside.find(',', first_comma + 1);
  const std::string unit = rate_unit(inside.substr(
      first_comma + 1, second == std::string_view::npos ? std::string_view::npos : second - first_comma - 1));
  if (r.unit.empty()) r.unit = unit;
  if (second != std::string_view::npos) parse_postfix(inside.substr(second + 1), r.metrics);
}

/// Keras' " - ETA: 3s - loss: 0.4512 - accuracy: 0.8700" after its bar.
void parse_keras_metrics(std::string_view rest, std::map<std::string, double>& metrics) {
  std::size_t pos = 0;
  while ((pos = rest.find(" - ", pos)) != std::string_view::npos) {
    pos += 3;
    std::size_t end = rest.find(" - ", pos);
    const std::string_view item = rest.substr(pos, end == std::string_view::npos ? end : end - pos);
    const auto colon = item.find(':');
    if (colon != std::string_view::npos) {
      const std::string_view key = util::trim(item.substr(0, colon));
      if (auto v = parse_double(item.substr(colon + 1)); v && !key.empty() && key != "ETA")
        metrics[std::string(key)] = *v;
    }
  }
}

/// Sets the key (and epoch) of a reading from the text before its counter: the description with every
/// number as '#' ("ep0" and "ep1", "epoch 1/3" and "epoch 2/3" are passes of one loop).
void describe(BarReading& r, std::string_view prefix) {
  const std::string desc = bar_description(prefix);
  find_epoch(desc, r, nullptr);
  r.key.clear();
  for (std::size_t i = 0; i < desc.size(); ++i) {
    if (!is_digit(desc[i])) {
      r.key.push_back(desc[i]);
      continue;
    }
    r.key.push_back('#');
    while (i + 1 < desc.size() && is_digit(desc[i + 1])) ++i;
  }
}

/// The bar glyphs of rich.progress (━ ╸ ╺ ╾ ╼): returns the length of the UTF-8 glyph at `i`, 0 if none.
std::size_t rich_glyph(std::string_view s, std::size_t i) {
  if (i + 3 > s.size()) return 0;
  const auto a = static_cast<unsigned char>(s[i]), b = static_cast<unsigned char>(s[i + 1]),
             c = static_cast<unsigned char>(s[i + 2]);
  if (a != 0xE2) return 0;
  if (b == 0x94 && c == 0x81) return 3;                                           // ━
  if (b == 0x95 && (c == 0xB8 || c == 0xBA || c == 0xBE || c == 0xBC)) return 3;  // ╸ ╺ ╾ ╼
  return 0;
}

/// A rich.progress line: "desc ━━━━╺━━━ 45/100 0:00:02" (MofNCompleteColumn) or "desc ━━━╺━━ 45% 0:00:02".
std::optional<BarReading> parse_rich(std::string_view line) {
  std::size_t start = 0;
  while (start < line.size() && rich_glyph(line, start) == 0) ++start;
  if (start >= line.size()) return std::nullopt;
  std::size_t end = start;
  std::size_t glyphs = 0;
  while (end < line.size()) {
    const std::size_t g = rich_glyph(line, end);
    if (g == 0) break;
    end += g;
    ++glyphs;
  }
  if (glyphs < 3) return std::nullopt;
  std::optional<BarReading> mofn, pct;
  std::size_t pos = end;
  while (pos < line.size()) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    std::size_t tok_end = line.find(' ', pos);
    if (tok_end == std::string_view::npos) tok_end = line.size();
    const std::string_view tok = line.substr(pos, tok_end - pos);
    pos = tok_end;
    if (tok.empty()) continue;
    if (const auto slash = tok.find('/'); slash != std::string_view::npos && !mofn) {
      auto n = parse_count(tok.substr(0, slash));
      auto t = parse_count(tok.substr(slash + 1));
      if (n && t && *n >= 0 && *t > 0 && *n <= *t) {
        mofn.emplace();
        mofn->n = n;
        mofn->total = t;
      }
    } else if (tok.back() == '%' && !pct) {
      auto p = parse_count(tok.substr(0, tok.size() - 1));
      if (p && *p >= 0 && *p <= 100) {
        pct.emplace();
        pct->n = p;
        pct->total = 100;
        pct->unit = "%";
      }
    }
  }
  std::optional<BarReading> r = mofn ? mofn : pct;
  if (!r) return std::nullopt;
  describe(*r, line.substr(0, start));
  return r;
}

/// tqdm without a total: "train: 45it [00:01, 30.00it/s]" (n, unit, elapsed; no total).
std::optional<BarReading> parse_unknown_total(std::string_view line) {
  std::optional<BarReading> found;
  std::size_t search = 0;
  while (true) {
    const auto open = line.find(" [", search);
    if (open == std::string_view::npos) break;
    search = open + 1;
    std::size_t u = open;
    while (u > 0 && (std::isalpha(static_cast<unsigned char>(line[u - 1])) || line[u - 1] == '_')) --u;
    std::size_t a = u;
    while (a > 0 && is_digit(line[a - 1])) --a;
    if (u == open || a == u || u - a > 18) continue;
    if (a > 0 && line[a - 1] != ' ' && line[a - 1] != ':' && line[a - 1] != '|') continue;
    const auto close = line.find(']', open);
    if (close == std::string_view::npos) continue;
    const std::string_view inside = line.substr(open + 2, close - open - 2);
    const auto comma = inside.find(',');
    if (comma == std::string_view::npos || !parse_clock(inside.substr(0, comma))) continue;
    BarReading r;
    r.n = parse_count(line.substr(a, u - a));
    if (!r.n) continue;
    r.unit = std::string(line.substr(u, open - u));
    parse_bracket(inside, r);
    describe(r, line.substr(0, a));
    found = std::move(r);
  }
  return found;
}

}  // namespace

std::optional<BarReading> parse_bar_line(std::string_view raw) {
  int position = 0;
  const std::string clean = strip_ansi(raw, &position);
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
      const std::string_view inside = line.substr(b + 2, close - b - 2);
      if (inside.find(':') != std::string_view::npos)
        parse_bracket(inside, r);
      else
        parse_keras_metrics(line.substr(close + 1), r.metrics);  // "[=====>....] - ETA: 3s - loss: 0.5"
    }
    describe(r, line.substr(0, a));
    found = std::move(r);
  }
  if (!found) found = parse_rich(line);
  if (!found) found = parse_unknown_total(line);
  if (found) {
    found->position = position;
    return found;
  }
  // A blank redraw: tqdm erasing a bar (leave=False, or around tqdm.write).
  if (!line.empty() && line.find_first_not_of(' ') == std::string_view::npos) {
    BarReading r;
    r.cleared = true;
    r.position = position;
    return r;
  }
  // "Epoch 2/3" alone at the start of a line (Keras, accelerate-style scripts): an epoch marker.
  const std::string_view t = util::trim(line);
  if (t.size() >= 9 && util::to_lower(t.substr(0, 6)) == "epoch ") {
    BarReading r;
    if (find_epoch(t.substr(0, std::min<std::size_t>(t.size(), 40)), r, nullptr) && r.epochs) return r;
  }
  return parse_hf_dict(line);
}

std::optional<ProgressUpdate> parse_output_line(std::string_view line) {
  auto r = parse_bar_line(line);
  if (!r || r->cleared || (!r->n && r->metrics.empty())) return std::nullopt;
  ProgressUpdate u;
  u.step = r->n;
  u.total_steps = r->total;
  u.metrics = std::move(r->metrics);
  return u;
}

std::vector<ProgressUpdate> OutputProgressParser::feed(std::string_view bytes, double now_s,
                                                       unsigned stream) {
  constexpr std::size_t kMaxLine = 64 * 1024;
  Line& line = lines_[stream == 0 ? 0 : 1];
  std::vector<ProgressUpdate> out;
  for (char c : bytes) {
    if (c == '\n' || c == '\r') {
      if (!line.overlong && !line.text.empty()) {
        if (auto r = parse_bar_line(line.text))
          if (auto u = tracker_.add(*r, now_s)) out.push_back(std::move(*u));
      }
      line.text.clear();
      line.overlong = false;
      continue;
    }
    if (line.overlong) continue;
    if (line.text.size() >= kMaxLine) {
      line.overlong = true;
      line.text.clear();
      continue;
    }
    line.text.push_back(c);
  }
  return out;
}

}  // namespace gm::guard
