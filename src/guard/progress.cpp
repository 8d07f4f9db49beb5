// Progress intake: datagram messages from the job (the progress protocol, DESIGN §5).
#include <cmath>
#include <nlohmann/json.hpp>

#include "guard/guard.h"

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
  if (auto it = j.find("flops_per_token"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) return make_error(ErrorKind::usage, "\"flops_per_token\" is not a number");
    const double f = it->get<double>();
    if (!std::isfinite(f) || f <= 0 || f > 1e18)
      return make_error(ErrorKind::usage, "\"flops_per_token\" is not a positive number of FLOPs");
    u.flops_per_token = f;
  }
  if (auto it = j.find("checkpoint"); it != j.end() && !it->is_null() && *it != false) {
    if (*it == true)
      u.checkpoint = "";
    else if (it->is_string() && it->get_ref<const std::string&>().size() <= 4096)
      u.checkpoint = it->get<std::string>();
    else
      return make_error(ErrorKind::usage, "\"checkpoint\" is not true or a path");
  }
  return u;
}

}  // namespace gm
