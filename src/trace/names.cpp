// Display forms of kernel and operator names: template arguments elided, names that would print alike told
// apart.
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trace/trace.h"

namespace gm::trace {

std::string short_name(const std::string& name, std::size_t width) {
  // Drop template arguments and parameter lists: "void at::native::foo<float, 4>(int)" -> "at::native::foo".
  std::string out;
  std::string stack;  // open brackets: '<' or '('
  for (char c : name) {
    if (c == '<' || c == '(') {
      if (stack.empty()) out += c == '<' ? "<…>" : "(…)";
      stack.push_back(c);
      continue;
    }
    if ((c == '>' || c == ')') && !stack.empty()) {
      if ((c == '>' && stack.back() == '<') || (c == ')' && stack.back() == '(')) stack.pop_back();
      continue;
    }
    if (stack.empty()) out += c;
  }
  if (out.starts_with("void ")) out.erase(0, 5);
  // "(…)" only helps when something follows it.
  if (out.size() >= 5 && out.ends_with("(…)")) out.resize(out.size() - std::string("(…)").size());
  if (out.empty()) out = name;
  // Count display characters (UTF-8 continuation bytes do not count).
  auto display_len = [](const std::string& s) {
    std::size_t n = 0;
    for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  };
  if (display_len(out) <= width) return out;
  // Keep the tail (the most specific part) and mark the cut.
  std::size_t keep = width > 1 ? width - 1 : 1;
  std::size_t start = out.size();
  std::size_t chars = 0;
  while (start > 0 && chars < keep) {
    --start;
    if ((static_cast<unsigned char>(out[start]) & 0xC0) != 0x80) ++chars;
  }
  return "…" + out.substr(start);
}

namespace {

/// The top-level template arguments of the first top-level `<...>` of `name` (empty when there is none).
std::vector<std::string> template_args(const std::string& name) {
  std::vector<std::string> args;
  int depth = 0;
  int paren = 0;
  std::string cur;
  bool inside = false;
  for (char c : name) {
    // Parentheses (parameter lists, "(anonymous namespace)", lambdas) hide their commas and brackets.
    if (c == '(' || c == ')' || paren > 0) {
      paren += c == '(' ? 1 : (c == ')' ? -1 : 0);
      if (inside) cur += c;
      continue;
    }
    if (c == '<') {
      if (depth++ == 0) {
        if (inside) break;  // a second top-level list: stop at the first
        inside = true;
        continue;
      }
    } else if (c == '>') {
      if (--depth == 0) {
        args.push_back(cur);
        return args;
      }
    } else if (c == ',' && depth == 1) {
      args.push_back(cur);
      cur.clear();
      continue;
    }
    if (inside) cur += c;
  }
  return {};
}

/// "at::native::CUDAFunctor_add<float>" -> "CUDAFunctor_add<float>": namespaces dropped, spaces trimmed.
std::string without_namespaces(const std::string& s) {
  std::string out;
  std::string word;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == ':' && i + 1 < s.size() && s[i + 1] == ':') {
      word.clear();
      ++i;
      continue;
    }
    if (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_') {
      word += s[i];
      continue;
    }
    out += word;
    word.clear();
    out += s[i];
  }
  out += word;
  const auto b = out.find_first_not_of(' ');
  const auto e = out.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : out.substr(b, e - b + 1);
}

/// A template argument as a reader tells it apart: without namespaces; a lambda or a function type (it has
/// parentheses) by its longest name ("clamp_min_scalar_kernel_impl" of a chain of lambdas in that function).
std::string readable_arg(const std::string& arg) {
  if (arg.find('(') == std::string::npos) return without_namespaces(arg);
  static const char* const kNoise[] = {"operator",  "const",  "lambda", "anonymous",
                                       "namespace", "native", "detail"};
  std::string best, word;
  auto consider = [&] {
    bool noise = false;
    for (const char* n : kNoise) noise = noise || word == n;
    if (!noise && word.size() > best.size()) best = word;
    word.clear();
  };
  for (char c : arg) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      word += c;
    } else {
      consider();
    }
  }
  consider();
  return best.empty() ? without_namespaces(arg) : best;
}

/// Keeps the tail of `s` within `width` display characters, marking the cut (as short_name does).
std::string keep_tail(const std::string& s, std::size_t width) {
  std::size_t chars = 0;
  for (char c : s) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  if (chars <= width) return s;
  std::size_t keep = width > 1 ? width - 1 : 1, start = s.size(), n = 0;
  while (start > 0 && n < keep) {
    --start;
    if ((static_cast<unsigned char>(s[start]) & 0xC0) != 0x80) ++n;
  }
  return "…" + s.substr(start);
}

}  // namespace

std::vector<std::string> short_names(const std::vector<std::string>& names, std::size_t width) {
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const auto& n : names) out.push_back(short_name(n, width));
  std::map<std::string, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < names.size(); ++i) groups[out[i]].push_back(i);
  for (auto& [shown, members] : groups) {
    if (members.size() < 2) continue;
    std::vector<std::vector<std::string>> args;
    for (std::size_t i : members) args.push_back(template_args(names[i]));
    for (std::size_t m = 0; m < members.size(); ++m) {
      const auto& mine = args[m];
      // The first argument in which this name differs from every other name of the group.
      std::optional<std::size_t> pick;
      for (std::size_t k = 0; k < mine.size() && !pick; ++k) {
        bool unique = true;
        for (std::size_t o = 0; o < members.size() && unique; ++o)
          if (o != m && k < args[o].size() && args[o][k] == mine[k]) unique = false;
        if (unique) pick = k;
      }
      const std::string& base = out[members[m]];
      const auto marker = base.find("<…>");
      if (!pick || marker == std::string::npos) continue;
      const std::string arg = readable_arg(mine[*pick]);
      std::string inner = (*pick > 0 ? "…, " : "") + arg + (*pick + 1 < mine.size() ? ", …" : "");
      std::string full = without_namespaces(short_name(names[members[m]], std::string::npos));
      const auto at = full.find("<…>");
      if (at == std::string::npos) continue;
      full.replace(at, std::string("<…>").size(), "<" + inner + ">");
      out[members[m]] = keep_tail(full, width);
    }
  }
  // Whatever still prints alike (names differing only in parameters, or cut alike): number them.
  std::map<std::string, std::size_t> seen;
  std::map<std::string, std::size_t> total;
  for (const auto& s : out) ++total[s];
  for (auto& s : out)
    if (total[s] > 1) s = keep_tail(s, width > 4 ? width - 3 : width) + " #" + std::to_string(++seen[s]);
  return out;
}

}  // namespace gm::trace
