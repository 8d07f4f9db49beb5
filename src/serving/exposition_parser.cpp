// A tokenizer for the Prometheus text exposition format (0.0.4), used to read serving engines' own metrics.
// Grammar per line:
//   "#" HELP name docstring | "#" TYPE name type | "#" anything (comment) | blank
//   name [ "{" [ label "=" '"' value '"' { "," label "=" '"' value '"' } [ "," ] ] "}" ] value [ timestamp ]
// OpenMetrics text additionally has "# EOF", "# UNIT" and exemplars (" # {...} value") after a sample.
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "serving/serving.h"

namespace gm::serving {

const std::string* ExpositionSample::label(std::string_view label_name) const {
  for (const auto& [k, v] : labels)
    if (k == label_name) return &v;
  return nullptr;
}

namespace {

bool is_blank(char c) {
  return c == ' ' || c == '\t';
}
bool name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool name_char(char c) {
  return name_start(c) || (c >= '0' && c <= '9');
}
bool label_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool label_char(char c) {
  return label_start(c) || (c >= '0' && c <= '9');
}

// A cursor over one line; errors carry the 1-based line and column.
class Line {
 public:
  Line(std::string_view text, std::size_t line_no) : s_(text), line_no_(line_no) {}
  bool done() const { return i_ >= s_.size(); }
  char peek() const { return done() ? '\0' : s_[i_]; }
  void skip_blanks() {
    while (!done() && is_blank(s_[i_])) ++i_;
  }
  bool at_blank() const { return !done() && is_blank(s_[i_]); }
  std::string_view rest() const { return s_.substr(std::min(i_, s_.size())); }
  void advance(std::size_t n = 1) { i_ += n; }
  Error error(const std::string& what) const {
    return make_error("line " + std::to_string(line_no_) + ", column " + std::to_string(i_ + 1) + ": " +
                      what);
  }
  // A token up to the next blank (or the end).
  std::string_view word() {
    const std::size_t b = i_;
    while (!done() && !is_blank(s_[i_])) ++i_;
    return s_.substr(b, i_ - b);
  }
  Result<std::string> metric_name() {
    const std::size_t b = i_;
    if (done() || !name_start(s_[i_])) return error("expected a metric name");
    while (!done() && name_char(s_[i_])) ++i_;
    return std::string(s_.substr(b, i_ - b));
  }
  Result<std::string> label_name() {
    const std::size_t b = i_;
    if (done() || !label_start(s_[i_])) return error("expected a label name");
    while (!done() && label_char(s_[i_])) ++i_;
    return std::string(s_.substr(b, i_ - b));
  }
  // A double-quoted label value with \\, \" and \n escapes (any other escape is an error, as in Prometheus).
  Result<std::string> quoted() {
    if (peek() != '"') return error("expected '\"' to open a label value");
    ++i_;
    std::string out;
    while (true) {
      if (done()) return error("unterminated label value");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (done()) return error("unterminated escape in label value");
      const char e = s_[i_++];
      if (e == '\\')
        out += '\\';
      else if (e == '"')
        out += '"';
      else if (e == 'n')
        out += '\n';
      else
        return error(std::string("invalid escape '\\") + e + "' in label value");
    }
  }

 private:
  std::string_view s_;
  std::size_t line_no_;
  std::size_t i_ = 0;
};

// A sample value as Go's strconv.ParseFloat reads it in Prometheus: decimal or exponent notation, NaN, ±Inf.
std::optional<double> parse_value(std::string_view w) {
  if (w.empty()) return std::nullopt;
  std::string lower;
  for (char c : w) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower == "nan") return std::nan("");
  if (lower == "inf" || lower == "+inf" || lower == "infinity" || lower == "+infinity")
    return std::numeric_limits<double>::infinity();
  if (lower == "-inf" || lower == "-infinity") return -std::numeric_limits<double>::infinity();
  std::string_view digits = w;
  if (digits.front() == '+') digits.remove_prefix(1);
  if (digits.empty() || digits.front() == '+') return std::nullopt;
  for (char c : digits)
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return v;
}

std::optional<std::int64_t> parse_timestamp(std::string_view w) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
  if (ec != std::errc() || end != w.data() + w.size()) return std::nullopt;
  return v;
}

// HELP docstrings escape only \\ and \n; any other backslash stays as written.
std::string unescape_help(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '\\' || s[i + 1] == 'n')) {
      out += s[i + 1] == 'n' ? '\n' : '\\';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool known_type(std::string_view t) {
  for (std::string_view k : {"counter", "gauge", "histogram", "summary", "untyped", "unknown", "info",
                             "stateset", "gaugehistogram"})
    if (t == k) return true;
  return false;
}

// "# HELP", "# TYPE", "# EOF" or a plain comment. Returns true at "# EOF".
Result<bool> comment_line(Line& l, Exposition& out) {
  l.advance();  // '#'
  l.skip_blanks();
  const std::string_view keyword = l.word();
  if (keyword == "EOF") return true;
  if (keyword != "HELP" && keyword != "TYPE") return false;  // a comment (or OpenMetrics UNIT): ignored
  if (!l.at_blank()) return l.error("expected a metric name after " + std::string(keyword));
  l.skip_blanks();
  auto name = l.metric_name();
  if (!name) return name.error();
  if (keyword == "HELP") {
    if (!l.done() && !l.at_blank()) return l.error("invalid character in metric name");
    l.skip_blanks();
    out.help[*name] = unescape_help(l.rest());
    return false;
  }
  if (!l.at_blank()) return l.error("expected a type after the metric name");
  l.skip_blanks();
  const std::string_view type = l.word();
  if (!known_type(type)) return l.error("unknown metric type '" + std::string(type) + "'");
  l.skip_blanks();
  if (!l.done()) return l.error("unexpected text after the type");
  if (out.types.count(*name)) return l.error("second TYPE line for " + *name);
  out.types[*name] = std::string(type);
  return false;
}

Result<void> sample_line(Line& l, Exposition& out) {
  ExpositionSample s;
  auto name = l.metric_name();
  if (!name) return name.error();
  s.name = std::move(*name);
  bool blank_before_value = l.at_blank();
  l.skip_blanks();
  if (l.peek() == '{') {
    l.advance();
    while (true) {
      l.skip_blanks();
      if (l.peek() == '}') break;
      auto label = l.label_name();
      if (!label) return label.error();
      l.skip_blanks();
      if (l.peek() != '=') return l.error("expected '=' after label " + *label);
      l.advance();
      l.skip_blanks();
      auto value = l.quoted();
      if (!value) return value.error();
      if (s.label(*label)) return l.error("label " + *label + " given twice");
      s.labels.emplace_back(std::move(*label), std::move(*value));
      l.skip_blanks();
      if (l.peek() == ',') {
        l.advance();
        continue;
      }
      if (l.peek() != '}') return l.error("expected ',' or '}' after a label value");
    }
    l.advance();  // '}'
    blank_before_value = l.at_blank();
  }
  if (l.done()) return l.error("missing sample value");
  if (!blank_before_value) return l.error("expected a blank before the sample value");
  l.skip_blanks();
  const std::string_view v = l.word();
  const auto value = parse_value(v);
  if (!value) return l.error("invalid sample value '" + std::string(v) + "'");
  s.value = *value;
  l.skip_blanks();
  if (!l.done() && l.peek() != '#') {
    const std::string_view t = l.word();
    const auto ts = parse_timestamp(t);
    if (!ts) return l.error("invalid timestamp '" + std::string(t) + "'");
    s.timestamp_ms = *ts;
    l.skip_blanks();
  }
  // An OpenMetrics exemplar (" # {trace_id=...} 1.0") after the value is allowed and ignored.
  if (!l.done() && l.peek() != '#') return l.error("unexpected text after the sample");
  out.samples.push_back(std::move(s));
  return ok_result();
}

}  // namespace

Result<Exposition> parse_exposition(std::string_view text) {
  Exposition out;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view raw = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    if (raw.find('\0') != std::string_view::npos)
      return make_error("line " + std::to_string(line_no) + ": NUL byte");
    Line l(raw, line_no);
    l.skip_blanks();
    if (l.done()) continue;
    if (l.peek() == '#') {
      auto eof = comment_line(l, out);
      if (!eof) return eof.error();
      if (*eof) break;
      continue;
    }
    if (auto r = sample_line(l, out); !r) return r.error();
  }
  return out;
}

}  // namespace gm::serving
