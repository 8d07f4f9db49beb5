#pragma once
// Typed, non-throwing access to JSON that comes from outside gpumeter (HTTP answers, files, datagrams).
// nlohmann's value(), at(), get<T>() and operator[] on a const value throw (or assert) on a missing key or
// a wrong type; every parser of outside input reads through these instead (scripts/check_json_access.py
// enforces it). A missing member and a member of the wrong type both read as "absent"; json_type_name and
// JsonPath build the message that says which.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "util/result.h"

namespace gm::util {

/// `text` parsed as JSON, or an error "`what`: invalid JSON at byte N: reason"; never throws.
Result<nlohmann::json> json_parse(std::string_view text, std::string_view what);

/// The member `key` of `j`; nullptr when `j` is not an object or has no such member.
const nlohmann::json* json_member(const nlohmann::json& j, std::string_view key);

/// Element `index` of `j`; nullptr when `j` is not an array or is shorter.
const nlohmann::json* json_element(const nlohmann::json& j, std::size_t index);

/// `v` when it is a JSON object (iterate its items() safely), else nullptr.
const nlohmann::json* json_object(const nlohmann::json* v);
/// `v` when it is a JSON array (iterate it safely), else nullptr.
const nlohmann::json* json_array(const nlohmann::json* v);

/// The string `v` holds; nullopt for a missing value or any other type.
std::optional<std::string> json_string(const nlohmann::json* v);
/// An integer that fits int64 (a JSON number without fraction or exponent); nullopt otherwise.
std::optional<std::int64_t> json_int(const nlohmann::json* v);
/// A non-negative integer that fits uint64; nullopt otherwise (negative, fractional, other types).
std::optional<std::uint64_t> json_uint(const nlohmann::json* v);
/// Any finite JSON number as a double; nullopt otherwise.
std::optional<double> json_number(const nlohmann::json* v);
/// A JSON true/false; nullopt otherwise.
std::optional<bool> json_bool(const nlohmann::json* v);

/// Shorthands for a member of an object: json_string(json_member(j, key)) and so on.
inline std::optional<std::string> json_string(const nlohmann::json& j, std::string_view key) {
  return json_string(json_member(j, key));
}
inline std::optional<std::int64_t> json_int(const nlohmann::json& j, std::string_view key) {
  return json_int(json_member(j, key));
}
inline std::optional<std::uint64_t> json_uint(const nlohmann::json& j, std::string_view key) {
  return json_uint(json_member(j, key));
}
inline std::optional<double> json_number(const nlohmann::json& j, std::string_view key) {
  return json_number(json_member(j, key));
}
inline std::optional<bool> json_bool(const nlohmann::json& j, std::string_view key) {
  return json_bool(json_member(j, key));
}
inline const nlohmann::json* json_object(const nlohmann::json& j, std::string_view key) {
  return json_object(json_member(j, key));
}
inline const nlohmann::json* json_array(const nlohmann::json& j, std::string_view key) {
  return json_array(json_member(j, key));
}

/// What `v` is, for messages: "missing", "null", "a string", "a number", "a boolean", "an object", "an
/// array".
std::string_view json_type_name(const nlohmann::json* v);

/// A path into a document for messages: JsonPath("items") / 3 / "metadata" reads "items[3].metadata".
class JsonPath {
 public:
  JsonPath() = default;
  /// A path starting at member `root` of the document.
  explicit JsonPath(std::string_view root) : text_(root) {}
  /// The member `key` below this path.
  JsonPath operator/(std::string_view key) const;
  /// Element `index` below this path.
  JsonPath operator/(std::size_t index) const;
  /// The path as text ("(document)" for the root itself).
  std::string str() const { return text_.empty() ? "(document)" : text_; }
  /// "PATH: expected EXPECTED, got TYPE-OF-v", the message for a value of the wrong type.
  std::string wrong_type(std::string_view expected, const nlohmann::json* v) const;

 private:
  std::string text_;
};

}  // namespace gm::util
