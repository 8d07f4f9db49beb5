// Progress intake: datagram messages and progress recognised in the job's output.
#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>

#include "guard/guard.h"
#include "util/units.h"

namespace gm {
namespace {

Result<std::optional<std::int64_t>> count_field(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::optional<std::int64_t>{};
  if (it->is_number_integer() || it->is_number_unsigned()) {
    if (it->is_number_integer() && it->get<std::int64_t>() < 0)
      return make_error(ErrorKind::usage, std::string("\"") + name + "\" is negative");
    if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      return make_error(ErrorKind::usage, std::string("\"") + name + "\" is too large");
    return std::optional<std::int64_t>(it->get<std::int64_t>());
  }
  if (it->is_number_float()) {
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < 0 || v != std::floor(v) || v > 9.0e18)
      return make_error(ErrorKind::usage, std::string("\"") + name + "\" is not a non-negative integer");
    return std::optional<std::int64_t>(static_cast<std::int64_t>(v));
  }
  return make_error(ErrorKind::usage, std::string("\"") + name + "\" is not a number");
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::optional<double> parse_double(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
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
      std::string_view key = item.substr(0, eq);
      while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
      while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
      if (auto v = parse_double(item.substr(eq + 1)); v && !key.empty() && key != "v_num") metrics[std::string(key)] = *v;
    }
    pos = comma + 1;
  }
}

/// Hugging Face Trainer log line: {'loss': 2.31, 'learning_rate': 5e-05, 'epoch': 0.12}
std::optional<ProgressUpdate> parse_hf_dict(std::string_view line) {
  line = trim(line);
  if (line.size() < 4 || line.substr(0, 2) != "{'" || line.back() != '}') return std::nullopt;
  ProgressUpdate u;
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
      if (auto v = parse_double(item.substr(colon + 1))) u.metrics[key] = *v;
    }
    pos = comma + 1;
  }
  if (u.metrics.empty()) return std::nullopt;
  return u;
}

}  // namespace

Result<ProgressUpdate> parse_progress_message(std::string_view datagram) {
  auto j = nlohmann::json::parse(datagram, nullptr, false);
  if (j.is_discarded()) return make_error(ErrorKind::usage, "not valid JSON");
  if (!j.is_object()) return make_error(ErrorKind::usage, "not a JSON object");
  ProgressUpdate u;
  GM_TRY(u.step, count_field(j, "step"));
  GM_TRY(u.total_steps, count_field(j, "total_steps"));
  GM_TRY(u.samples, count_field(j, "samples"));
  GM_TRY(u.tokens, count_field(j, "tokens"));
  if (auto it = j.find("metrics"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return make_error(ErrorKind::usage, "\"metrics\" is not an object");
    for (auto& [k, v] : it->items()) {
      if (!v.is_number()) return make_error(ErrorKind::usage, "metric \"" + k + "\" is not a number");
      const double d = v.get<double>();
      if (!std::isfinite(d)) return make_error(ErrorKind::usage, "metric \"" + k + "\" is not finite");
      u.metrics[k] = d;
    }
  }
  return u;
}

std::optional<ProgressUpdate> parse_output_line(std::string_view line) {
  // The last "N/M [" in the line (a tqdm bar redrawn with \r ends in its latest state).
  std::optional<ProgressUpdate> found;
  std::size_t search = 0;
  while (true) {
    const auto slash = line.find('/', search);
    if (slash == std::string_view::npos) break;
    search = slash + 1;
    std::size_t a = slash;
    while (a > 0 && is_digit(line[a - 1])) --a;
    std::size_t b = slash + 1;
    while (b < line.size() && is_digit(line[b])) ++b;
    if (a == slash || b == slash + 1 || b + 1 >= line.size() || line[b] != ' ' || line[b + 1] != '[') continue;
    if (a > 0 && (std::isalnum(static_cast<unsigned char>(line[a - 1])) || line[a - 1] == '.')) continue;
    std::int64_t step = 0, total = 0;
    auto r1 = std::from_chars(line.data() + a, line.data() + slash, step);
    auto r2 = std::from_chars(line.data() + slash + 1, line.data() + b, total);
    if (r1.ec != std::errc() || r2.ec != std::errc() || total <= 0 || step > total) continue;
    ProgressUpdate u;
    u.step = step;
    u.total_steps = total;
    const auto close = line.find(']', b);
    if (close != std::string_view::npos) {
      std::string_view inside = line.substr(b + 2, close - b - 2);
      // "00:01<00:02, 30.1it/s, loss=2.3" -> the postfix after the rate
      const auto first_comma = inside.find(',');
      if (first_comma != std::string_view::npos) {
        const auto second = inside.find(',', first_comma + 1);
        if (second != std::string_view::npos) parse_postfix(inside.substr(second + 1), u.metrics);
      }
    }
    found = u;
  }
  if (found) return found;
  return parse_hf_dict(line);
}

std::vector<ProgressUpdate> OutputProgressParser::feed(std::string_view bytes) {
  constexpr std::size_t kMaxLine = 64 * 1024;
  std::vector<ProgressUpdate> out;
  for (char c : bytes) {
    if (c == '\n' || c == '\r') {
      if (!overlong_ && !line_.empty()) {
        if (auto u = parse_output_line(line_)) out.push_back(std::move(*u));
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
