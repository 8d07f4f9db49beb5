#include "util/json_in.h"

#include <cmath>
#include <limits>

namespace gm::util {

namespace {

// The library's document builder, with its error callback replaced by one that keeps the byte offset and
// the reason instead of throwing (a syntax error, or a number too large for a double).
class DomBuilder : public nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
 public:
  explicit DomBuilder(nlohmann::json& document) : json_sax_dom_parser(document, false) {}
  bool parse_error(std::size_t byte, const std::string& /*token*/, const nlohmann::detail::exception& e) {
    error_byte = byte;
    error = e.what();
    return false;
  }
  std::size_t error_byte = 0;
  std::string error;
};

}  // namespace

Result<nlohmann::json> json_parse(std::string_view text, std::string_view what) {
  nlohmann::json root;
  DomBuilder builder(root);
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &builder);
  if (!ok || !builder.error.empty()) {
    // "[json.exception.parse_error.101] parse error at line 1, column 2: …": the part after the tag.
    std::string reason = builder.error;
    if (auto close = reason.find("] ");
        reason.rfind("[json.exception.", 0) == 0 && close != std::string::npos)
      reason.erase(0, close + 2);
    return make_error(std::string(what) + ": invalid JSON at byte " + std::to_string(builder.error_byte) +
                      (reason.empty() ? std::string() : ": " + reason));
  }
  return root;
}

const nlohmann::json* json_member(const nlohmann::json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

const nlohmann::json* json_element(const nlohmann::json& j, std::size_t index) {
  if (!j.is_array() || index >= j.size()) return nullptr;
  return &j[index];  // checked above: an array with this element
}

const nlohmann::json* json_object(const nlohmann::json* v) {
  return v && v->is_object() ? v : nullptr;
}

const nlohmann::json* json_array(const nlohmann::json* v) {
  return v && v->is_array() ? v : nullptr;
}

std::optional<std::string> json_string(const nlohmann::json* v) {
  if (!v || !v->is_string()) return std::nullopt;
  return *v->get_ptr<const std::string*>();
}

std::optional<std::int64_t> json_int(const nlohmann::json* v) {
  if (!v) return std::nullopt;
  if (const auto* i = v->get_ptr<const std::int64_t*>()) return *i;
  if (const auto* u = v->get_ptr<const std::uint64_t*>())
    if (*u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return static_cast<std::int64_t>(*u);
  return std::nullopt;
}

std::optional<std::uint64_t> json_uint(const nlohmann::json* v) {
  if (!v) return std::nullopt;
  if (const auto* u = v->get_ptr<const std::uint64_t*>()) return *u;
  if (const auto* i = v->get_ptr<const std::int64_t*>())
    if (*i >= 0) return static_cast<std::uint64_t>(*i);
  return std::nullopt;
}

std::optional<double> json_number(const nlohmann::json* v) {
  if (!v) return std::nullopt;
  double d = 0;
  if (const auto* f = v->get_ptr<const double*>())
    d = *f;
  else if (const auto* i = v->get_ptr<const std::int64_t*>())
    d = static_cast<double>(*i);
  else if (const auto* u = v->get_ptr<const std::uint64_t*>())
    d = static_cast<double>(*u);
  else
    return std::nullopt;
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

std::optional<bool> json_bool(const nlohmann::json* v) {
  if (!v) return std::nullopt;
  if (const auto* b = v->get_ptr<const bool*>()) return *b;
  return std::nullopt;
}

std::string_view json_type_name(const nlohmann::json* v) {
  if (!v) return "missing";
  switch (v->type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      return "a number";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    default:
      return "another value";
  }
}

JsonPath JsonPath::operator/(std::string_view key) const {
  JsonPath p;
  p.text_ = text_.empty() ? std::string(key) : text_ + "." + std::string(key);
  return p;
}

JsonPath JsonPath::operator/(std::size_t index) const {
  JsonPath p;
  p.text_ = text_ + "[" + std::to_string(index) + "]";
  return p;
}

std::string JsonPath::wrong_type(std::string_view expected, const nlohmann::json* v) const {
  return str() + ": expected " + std::string(expected) + ", got " + std::string(json_type_name(v));
}

}  // namespace gm::util
